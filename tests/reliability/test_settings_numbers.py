"""Bad numbers are refused when the run is built, in one line (issue 29, item 6): NaN and infinity wherever a setting
is a number, integers beyond 64 bits, sizes below their range, ``rounds = 0``. In-process and fast: components are
built, nothing trains."""
import math

import attrs
import pytest
from test_refusals import GOOD, refused

import fedcore
from fedcore.errors import ConfigError
from fedcore.settings import build

REQUIRED = {  # the least a component with required settings needs to build, so that one setting at a time is tried
    "cos2p-quotas": {"quotas": (1.0, 2.0)},
    "given": {"parts": ((0, 1), (2, 3))},
    "natural-id": {"partition_by": "label"},
}

BAD_FLOATS = (math.nan, math.inf, -math.inf)
PROBES = (*BAD_FLOATS, 0, -1, 10**30, 1e300)


def numeric_fields(cls):
    """(field, element kind, is a tuple) for every init field that holds a number or a tuple of numbers."""
    for f in attrs.fields(cls):
        if not f.init:
            continue
        kind = f.metadata.get("kind")
        kinds = kind if isinstance(kind, tuple) else (kind,)
        text = str(f.type)
        if float in kinds or (kind is None and "float" in text and "tuple" not in text):
            yield f.name, float, False
        elif int in kinds or (kind is None and "int" in text and "tuple" not in text):
            yield f.name, int, False
        elif kind is None and "tuple[float" in text:
            yield f.name, float, True
        elif kind is None and "tuple[int" in text:
            yield f.name, int, True


def cases():
    for entry in fedcore.plugins.registry().entries("component"):
        if attrs.has(entry.obj):
            for name, kind, many in numeric_fields(entry.obj):
                yield pytest.param(entry.name, name, kind, many, id=f"{entry.name}.{name}")


@pytest.mark.parametrize("component, field, kind, many", list(cases()))
def test_every_numeric_setting_of_every_component_refuses_bad_numbers_in_one_line(component, field, kind, many):
    """NaN, +-inf, 0, a negative and a huge value: a one-line ConfigError naming the setting, or (finite values
    within the documented range, ``fedcore describe`` shows it) a component; never any other exception. Non-finite
    floats and integers beyond 64 bits are always refused."""
    cls = fedcore.plugins.registry().get(component, "component").obj
    base = REQUIRED.get(component, {})
    build(cls, dict(base), name=component)  # the base builds: a refusal below is the probe's
    for probe in PROBES:
        if kind is int and isinstance(probe, float) and math.isfinite(probe):
            continue  # a float where an int goes is a type error, tested elsewhere
        value = (probe,) if many else probe
        try:
            build(cls, {**base, field: value}, name=component)
        except ConfigError as exc:
            text = str(exc)
            assert "\n" not in text and field in text, text
            continue
        except Exception as exc:  # noqa: BLE001 - the property: nothing but a ConfigError escapes
            pytest.fail(f"{component}.{field}={probe!r}: {type(exc).__name__}: {exc}")
        bad = (isinstance(probe, float) and not math.isfinite(probe)) or (kind is int and abs(probe) >= 2**63)
        assert not bad, f"{component}.{field}={probe!r} was accepted"


@pytest.mark.parametrize("content, message", [
    (GOOD + '[pipeline]\nlocal_update = { name = "sgd", lr = nan }\n', "pipeline.local_update.lr = nan"),
    (GOOD + '[pipeline]\nlocal_update = { name = "sgd", lr = inf }\n', "pipeline.local_update.lr = inf"),
    (GOOD + '[pipeline]\nlocal_update = { name = "sgd", momentum = nan }\n', "momentum"),
    (GOOD + '[pipeline]\npartition = { name = "dirichlet", alpha = nan }\n', "pipeline.partition.alpha = nan"),
    (GOOD + '[pipeline]\nschedule = { name = "uniform", fraction = nan }\n', "fraction"),
    (GOOD.replace("seed = 0", f"seed = {2**70}"), "seed"),
    (GOOD.replace("seed = 0", f"seed = {2**63}"), "seed"),
    (GOOD.replace('model = "tiny-mlp"', 'model = { name = "tiny-mlp", hidden = -5 }'), "hidden = -5"),
    (GOOD.replace('n = 96', 'n = -inf'), "dataset.n = -inf"),
    (GOOD.replace("rounds = 1", "rounds = 0"), "rounds"),
], ids=["lr-nan", "lr-inf", "momentum-nan", "alpha-nan", "fraction-nan", "seed-2^70", "seed-2^63", "hidden-negative",
        "dataset-inf", "rounds-zero"])
def test_a_bad_number_in_a_config_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, content, message):
    config = tmp_path / "bad.toml"
    config.write_text(content)
    assert message in refused(capsys, ["run", str(config)], tmp_path / "run")

"""``on_cpu = "auto"``: the ``vectorised`` cohort times a probe once, follows this machine's cached choice, records
it in the run and repeats the recorded choice on resume, so the same seed gives the same history. No assertion
here depends on which side the probe finds faster: the choices are steered through the cache file."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import PerJobCohort, QuantitySkewPartition, SGDUpdate, VectorisedCohort
from fedcore.builtin.vectorised_cohort import CHOICES
from fedcore.engine.checkpoint import Checkpointer
from fedcore.engine.loop import Engine
from fedcore.runtime import SimClock
from fedcore.testing import tiny_data

OTHER = {"vectorise": "one-by-one", "one-by-one": "vectorise"}


def mlp_dropout() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))


def engine(cohort, checkpoint=None, rounds=2):
    train, test = tiny_data(n=150)
    pipe = fedcore.Pipeline([SGDUpdate(lr=0.05, momentum=0.9, batch_size=7), cohort, QuantitySkewPartition()])
    return Engine(pipe, model=mlp_dropout(), train=train, test=test, num_clients=5, rounds=rounds, seed=3,
                  checkpoint=checkpoint, clock=SimClock(default_profile="phone"))  # virtual time: the work metered


def pinned(choice):
    """The run that ``choice`` gives without any probe: the cohort forced, or the plain one-by-one cohort."""
    return engine(VectorisedCohort(on_cpu="vectorise") if choice == "vectorise" else PerJobCohort()).run()


def same_run(a, b):
    assert [{k: v for k, v in r.items() if k != "cohort_vectorised"} for r in a.history.comparable()] == \
        [{k: v for k, v in r.items() if k != "cohort_vectorised"} for r in b.history.comparable()]
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), name


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one intra-op thread is faster, and on a loaded machine far faster than two that wait on each
    other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cohort-probes"


def cached_file(cache: Path) -> Path:
    files = sorted(cache.glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def flip(path: Path) -> str:
    """Store the other choice in this machine's cache, as another machine or a noisier probe might have."""
    record = json.loads(path.read_text())
    record["choice"] = OTHER[record["choice"]]
    path.write_text(json.dumps(record))
    return record["choice"]


def test_auto_probes_once_records_its_choice_and_the_probe_leaves_no_trace(cache):
    result = engine(VectorisedCohort()).run()
    (key, record), = result.run.settings[CHOICES].items()
    assert key.startswith("Sequential-") and record["choice"] in OTHER and record["by"] == "probe"
    assert record["one_by_one_ms"] > 0 and record["clients"] == 5 and record["steps"] == 2
    assert record["threads"] == torch.get_num_threads()
    vectorised = 5.0 if record["choice"] == "vectorise" else 0.0
    assert result.history.column("cohort_vectorised") == [vectorised] * 2
    assert json.loads(cached_file(cache).read_text())["choice"] == record["choice"]
    assert result.history.last("virtual_time") > 0
    same_run(result, pinned(record["choice"]))  # bit for bit: the probe's copies touched no client, RNG or meter


@pytest.mark.parametrize("steer", ["vectorise", "one-by-one"])
def test_a_cached_choice_is_followed_without_a_probe(cache, steer, caplog):
    engine(VectorisedCohort(), rounds=1).run()
    path = cached_file(cache)
    if json.loads(path.read_text())["choice"] != steer:
        flip(path)
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        result = engine(VectorisedCohort()).run()
    (record,) = result.run.settings[CHOICES].values()
    assert record["choice"] == steer and record["by"] == "cached probe"
    if steer == "one-by-one":  # said once, with the way to pin it
        said = [r.getMessage() for r in caplog.records if "one by one is as fast or faster" in r.getMessage()]
        assert len(said) == 1 and "on_cpu = 'vectorise' or 'one-by-one'" in said[0]
    same_run(result, pinned(steer))


class Stop(Exception):
    pass


def test_a_resumed_run_repeats_the_recorded_choice_whatever_the_cache_says_now(cache, tmp_path):
    first = engine(VectorisedCohort(), Checkpointer(tmp_path / "ckpt", every=1))

    def crash(record):
        if record["round"] == 1:
            raise Stop

    first.on_round = crash
    with pytest.raises(Stop):
        first.run()
    (chosen,) = first.run_ctx.settings[CHOICES].values()
    flip(cached_file(cache))  # this machine would now choose the other way
    resumed = engine(VectorisedCohort(), Checkpointer(tmp_path / "ckpt", every=1, resume=True)).run()
    (record,) = resumed.run.settings[CHOICES].values()
    assert record == chosen
    same_run(resumed, pinned(chosen["choice"]))
    fresh = engine(VectorisedCohort()).run()  # a fresh run follows the cache
    assert next(iter(fresh.run.settings[CHOICES].values()))["choice"] == OTHER[chosen["choice"]]


def test_pinned_choices_never_probe(cache):
    for on_cpu in ("vectorise", "one-by-one"):
        result = engine(VectorisedCohort(on_cpu=on_cpu), rounds=1).run()
        assert result.run.settings.get(CHOICES, {}) == {}
        assert result.history.column("cohort_vectorised") == [5.0 if on_cpu == "vectorise" else 0.0]
    assert not cache.exists()


def test_the_described_rule_is_the_rule_the_code_follows():
    from fedcore.builtin import cohort_probe

    doc = " ".join(VectorisedCohort.__doc__.split())
    assert f"{cohort_probe.PROBE_STEPS} local steps" in doc and f"up to {cohort_probe.PROBE_CLIENTS} clients" in doc
    assert f"at most {cohort_probe.MARGIN}x" in doc and "FLOP" not in doc and "convolution-free" not in doc
    help_text = attrs.fields_dict(VectorisedCohort)["on_cpu"].metadata
    assert "probe" in str(help_text)

"""Device profiles: presets and their sources, TOML loading, bad values, seeded assignment to clients."""
import pytest

from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile, ProfileAssignment, SimClock, jetson_presets, load_profiles, presets
from fedcore.runtime.profiles import GB
from fedcore.testing import run_tiny_pipeline


def test_presets_are_valid_and_cite_a_source():
    table = presets()
    for name in ("phone", "watch", "laptop", "jetson-nx8", "jetson-nx16", "jetson-agx32", "jetson-agx64"):
        p = table[name]
        assert p.flops > 0 and p.up_bps > 0 and p.down_bps > 0 and p.memory_bytes > 0
        assert p.source and p.source != "user-defined"
    assert table["phone"].down_bps == 54e6 and table["phone"].up_bps == 12e6 and table["phone"].flops == 1.5e12
    # Tree Learning tiers: watch : phone : laptop = 1 : 2 : 4
    assert table["phone"].flops / table["watch"].flops == pytest.approx(2)
    assert table["laptop"].flops / table["phone"].flops == pytest.approx(2)
    assert [table[f"jetson-{k}"].memory_bytes // GB for k in ("nx8", "nx16", "agx32", "agx64")] == [8, 16, 32, 64]


def test_jetson_calibration_ratio():
    j = jetson_presets(ratio=4.2)
    nx = j["jetson-nx8"].flops
    assert j["jetson-nx16"].flops == nx
    assert j["jetson-agx64"].flops / nx == pytest.approx(4.2)
    assert j["jetson-agx32"].flops / nx == pytest.approx(4.2 * 200 / 275)
    with pytest.raises(ConfigError, match="ratio"):
        jetson_presets(ratio=0)


def test_toml_profiles_with_units_base_and_speed(tmp_path):
    path = tmp_path / "devices.toml"
    path.write_text("""
[profiles.fast-phone]
base = "phone"
speed = 2.0

[profiles.sensor]
gflops = 3
up_mbps = 1
down_mbps = 2
memory_mb = 256
availability = 0.5
latency_ms = 40
source = "our lab"
""")
    table = load_profiles(path)
    assert table["fast-phone"].flops == 2 * presets()["phone"].flops
    assert table["fast-phone"].up_bps == presets()["phone"].up_bps
    s = table["sensor"]
    assert (s.flops, s.up_bps, s.down_bps, s.memory_bytes) == (3e9, 1e6, 2e6, 256 * 2**20)
    assert s.availability == 0.5 and s.latency_s == pytest.approx(0.04) and s.source == "our lab"
    assert "phone" in table  # presets stay available
    assert set(load_profiles(path, include_presets=False)) == {"fast-phone", "sensor"}


@pytest.mark.parametrize("field,value", [("gflops", 0), ("gflops", -1), ("up_mbps", 0), ("down_mbps", -5),
                                         ("memory_gb", 0), ("memory_gb", -1), ("availability", 0)])
def test_zero_or_negative_resources_are_errors_naming_the_field(field, value):
    table = {"gflops": 1, "up_mbps": 1, "down_mbps": 1, "memory_gb": 1, field: value}
    with pytest.raises(ConfigError) as info:
        load_profiles({"profiles": {"bad": table}})
    message = str(info.value)
    assert "'bad'" in message and "must be >" in message


def test_profile_errors_unknown_key_missing_field_bad_base():
    with pytest.raises(ConfigError, match="unknown key"):
        load_profiles({"profiles": {"x": {"base": "phone", "teraflops": 3}}})
    with pytest.raises(ConfigError, match="missing"):
        load_profiles({"profiles": {"x": {"gflops": 3}}})
    with pytest.raises(ConfigError, match="not a known profile"):
        load_profiles({"profiles": {"x": {"base": "toaster"}}})
    with pytest.raises(ConfigError, match="does not exist"):
        load_profiles("no/such/file.toml")
    with pytest.raises(ConfigError, match="flops"):
        DeviceProfile(name="x", flops=-1.0, up_bps=1.0, down_bps=1.0, memory_bytes=1)
    with pytest.raises(ConfigError, match="speed"):
        presets()["phone"].scaled(speed=0)


def test_assignment_fixed_list_and_seeded_counts():
    assert ProfileAssignment(fixed="phone").assign(3, seed=0) == ["phone"] * 3
    assert ProfileAssignment(order=["a", "b"], cycle=True).assign(5, seed=0) == ["a", "b", "a", "b", "a"]
    with pytest.raises(ConfigError, match="2 names for 3 clients"):
        ProfileAssignment(order=["a", "b"]).assign(3, seed=0)
    rule = ProfileAssignment(weights={"watch": 4, "phone": 2, "laptop": 2})
    got = rule.assign(8, seed=1)
    assert sorted(got) == sorted(["watch"] * 4 + ["phone"] * 2 + ["laptop"] * 2)  # Tree Learning's 4 + 2 + 2
    assert got == rule.assign(8, seed=1)
    assert any(rule.assign(8, seed=s) != got for s in range(2, 6))
    free = ProfileAssignment(weights={"watch": 1, "phone": 1}, exact=False).assign(200, seed=0)
    assert 70 < free.count("watch") < 130
    with pytest.raises(ConfigError, match="exactly one"):
        ProfileAssignment(fixed="phone", order=["phone"])
    with pytest.raises(ConfigError, match="weights"):
        ProfileAssignment(weights={"phone": 0})


def test_run_assigns_profiles_and_rejects_unknown_or_missing_ones():
    result = run_tiny_pipeline([], rounds=1, clock=SimClock(), profiles=ProfileAssignment(fixed="watch"))
    assert [c.profile for c in result.run.clients] == ["watch"] * 3
    with pytest.raises(ConfigError, match="unknown device profile"):
        run_tiny_pipeline([], rounds=1, clock=SimClock(), profiles=["phone", "toaster", "phone"])
    with pytest.raises(ConfigError, match="no device profile"):
        run_tiny_pipeline([], rounds=1, clock=SimClock())
    with pytest.raises(ConfigError, match="default_profile"):
        SimClock(default_profile="toaster")
    ok = run_tiny_pipeline([], rounds=1, clock=SimClock(default_profile="laptop"))
    assert ok.history[0]["virtual_time"] > 0

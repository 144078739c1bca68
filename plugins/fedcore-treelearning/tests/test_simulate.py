"""The discrete-event pass time: a hand-computed case, and the orderings the schedules imply."""
import pytest

from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile
from fedcore_treelearning.profiler import ModelProfile, UnitProfile
from fedcore_treelearning.simulate import pass_time


def unit(k, fwd, bwd, out):
    return UnitProfile(index=k, name=str(k), forward_flops=fwd, backward_flops=bwd, output_bytes=out, saved_bytes=0,
                       params=1, param_bytes=100, trainable_bytes=100)


PROFILE = ModelProfile(model_type="toy", batch_size=1, input_bytes=4,
                       units=(unit(1, 10, 20, 4), unit(2, 30, 60, 2), unit(3, 5, 10, 1)))


def device(flops=100.0, bps=80.0):
    return DeviceProfile(name="d", flops=flops, up_bps=bps, down_bps=bps, memory_bytes=10 ** 6)


def test_one_client_one_iteration_by_hand():
    # split 2, batch 1: CF 10/100, UP (4+8 label bytes)*8/80, server fwd (30+5)/1000, bwd (10+60)/1000, DN 4*8/80,
    # CB 20/100
    t = pass_time(PROFILE, [device()], [2], batches=[1], batch_size=1, server_flops=1000.0, schedule="sync")
    assert t.total == pytest.approx(0.1 + 1.2 + 0.035 + 0.07 + 0.4 + 0.2)
    assert t.client_compute == pytest.approx(0.3) and t.server_compute == pytest.approx(0.105)
    assert t.communication == pytest.approx(1.6)
    vertical = pass_time(PROFILE, [device()], [2], batches=[1], batch_size=1, server_flops=1000.0, schedule="sync",
                         mode="vertical")
    assert t.total - vertical.total == pytest.approx(8 * 8 / 80)  # no labels go up in vertical mode


@pytest.mark.parametrize("clients", [1, 2, 5])
def test_pipelining_never_loses_and_round_robin_serialises(clients):
    devices = [device(flops=100.0 * (1 + i % 3)) for i in range(clients)]
    kw = dict(batches=[6] * clients, batch_size=2, server_flops=1000.0)
    sync = pass_time(PROFILE, devices, [2] * clients, schedule="sync", **kw)
    piped = pass_time(PROFILE, devices, [2] * clients, schedule="pipelined", **kw)
    turns = pass_time(PROFILE, devices, [2] * clients, schedule="round-robin", **kw)
    assert piped.total < sync.total  # the client's backward overlaps the next upload
    assert piped.client_compute == pytest.approx(sync.client_compute)  # the same work, better overlapped
    assert turns.total >= sync.total
    if clients > 1:
        assert turns.total > 1.5 * sync.total  # one client at a time


def test_bad_schedule_and_splits_are_clear_errors():
    with pytest.raises(ConfigError, match="schedule='ring'; choose one of: sync, pipelined, round-robin"):
        pass_time(PROFILE, [device()], [2], batches=[1], batch_size=1, server_flops=1.0, schedule="ring")
    with pytest.raises(ConfigError, match="split 4 of client 0 is outside the model: 2..3"):
        pass_time(PROFILE, [device()], [4], batches=[1], batch_size=1, server_flops=1.0, schedule="sync")

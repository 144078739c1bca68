"""Checkpoint/resume of semi-asynchronous and FedAsync runs with faults: the resumed run equals the uninterrupted
one."""
import pytest
import torch

import fedcore
from fedcore.builtin import AsyncSchedule, FedAsyncMix, SemiAsyncSchedule
from fedcore.engine.checkpoint import Checkpointer, list_checkpoints, read_checkpoint
from fedcore.engine.loop import Engine
from fedcore.runtime import Faults, SimClock
from fedcore.testing import tiny_data, tiny_model


class Stop(Exception):
    pass


def make(schedule, checkpoint=None, *, aggregate=None):
    train, test = tiny_data()
    parts = [schedule] + ([aggregate] if aggregate is not None else [])
    torch.manual_seed(0)
    return Engine(fedcore.Pipeline(parts), model=tiny_model(), train=train, test=test, num_clients=6, rounds=6, seed=5,
                  checkpoint=checkpoint, clock=SimClock(),
                  profiles=["watch", "watch", "phone", "phone", "laptop", "laptop"],
                  faults=Faults(dropout_during=0.2, lost_upload=0.1))


@pytest.mark.parametrize("schedule,aggregate", [(SemiAsyncSchedule(mu=0.5, t_clk=0.002), None),
                                                (AsyncSchedule(concurrency=4), FedAsyncMix())],
                         ids=["semi-async", "fedasync"])
def test_resumed_async_run_with_faults_equals_the_uninterrupted_run(tmp_path, schedule, aggregate):
    reference = make(schedule, aggregate=aggregate)
    busy_after = []
    reference.on_round = lambda record: busy_after.append(len(reference.state.in_flight))
    full = reference.run()
    assert any(r.get("max_staleness") for r in full.history)
    stop = next(r for r in range(1, 5) if busy_after[r - 1])  # resume from a round that left jobs in flight
    first = make(schedule, Checkpointer(tmp_path, every=1), aggregate=aggregate)

    def crash(record):
        if record["round"] == stop:
            raise Stop

    first.on_round = crash
    with pytest.raises(Stop):
        first.run()
    runtime = read_checkpoint(list_checkpoints(tmp_path)[-1])[0]["runtime"]
    assert runtime["in_flight"] and runtime["now"] > 0  # the snapshot held jobs still running
    resumed = make(schedule, Checkpointer(tmp_path, every=1, resume=True), aggregate=aggregate).run()
    assert resumed.history.comparable() == full.history.comparable()
    assert resumed.ledger.to_rows() == full.ledger.to_rows()
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k

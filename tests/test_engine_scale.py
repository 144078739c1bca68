"""Many registered clients: bounded memory per client, and bookkeeping that never lists every registered client.

The time side (10⁵ registered vs 10² per round, set-up linear in clients) is measured by
``benchmarks/engine_scale.py``, never timed here.
"""
import gc
import pickle
import random
import tracemalloc

import numpy as np
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import BufferedSchedule, FedBuffStep, IIDPartition, UniformSync
from fedcore.data.synthetic import synthetic_classification
from fedcore.engine.idle import IdleClients
from fedcore.engine.loop import Engine
from fedcore.indices import IndexList
from fedcore.scheduling import sample_clients
from fedcore.types import Partition

CLIENTS = 10_000
PER_CLIENT = 16  # samples per client
BOUND = 2048  # bytes of engine bookkeeping per registered client (issue 15: <= 2 KiB)


def many_clients_engine(schedule, *extra, clients=CLIENTS, rounds=3):
    train = synthetic_classification(n=clients * PER_CLIENT, shape=(1, 4, 4), seed=0)
    test = synthetic_classification(n=64, shape=(1, 4, 4), seed=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    return Engine(fedcore.Pipeline([IIDPartition(), schedule, *extra]), model=model, train=train, test=test,
                  num_clients=clients, rounds=rounds, seed=0)


@pytest.mark.slow
def test_ten_thousand_clients_run_three_rounds_within_two_kib_each():
    many_clients_engine(UniformSync(), clients=4, rounds=1).run()  # torch's lazy imports are not the engine's memory
    gc.collect()
    tracemalloc.start()
    try:
        engine = many_clients_engine(UniformSync(fraction=50 / CLIENTS))
        result = engine.run()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.history) == 3 and all(len(r["clients"]) == 50 for r in result.history)
    # Python objects the engine keeps for the run (the dataset's tensor storage is not traced: it is data)
    assert held / CLIENTS <= BOUND, f"{held / CLIENTS:.0f} bytes per registered client"
    assert peak / CLIENTS <= BOUND, f"peak {peak / CLIENTS:.0f} bytes per registered client"


@pytest.mark.parametrize("schedule, extra", [
    (UniformSync(fraction=50 / CLIENTS), ()),
    (BufferedSchedule(buffer_size=5, concurrency=20), (FedBuffStep(),)),
], ids=["sync", "fedbuff"])
def test_dispatch_never_lists_every_registered_client(monkeypatch, schedule, extra):
    """Sampling draws positions in the idle sequence: it is never iterated or turned into an array."""
    def listed(self, *args, **kwargs):
        raise AssertionError("the idle clients were listed in full")

    monkeypatch.setattr(IdleClients, "__iter__", listed)
    monkeypatch.setattr(IdleClients, "__array__", listed)
    result = many_clients_engine(schedule, *extra, rounds=4).run()
    assert len(result.history) == 4 and all(r["clients"] for r in result.history)


def test_idle_clients_equal_the_list_they_stand_for_and_draw_the_same_clients():
    r = random.Random(0)
    for _ in range(500):
        n = r.randint(1, 200)
        busy = sorted(r.sample(range(n), r.randint(0, n)))
        idle = IdleClients(n, busy)
        listed = [c for c in range(n) if c not in busy]
        assert idle == listed and list(idle) == listed and len(idle) == len(listed)
        assert [idle[i] for i in range(len(listed))] == listed and idle[1:4] == listed[1:4]
        assert all((c in idle) == (c in listed) for c in range(-1, n + 1))
        if listed:
            assert np.array_equal(np.asarray(idle), np.asarray(listed))
            k, seed = r.randint(1, len(listed)), r.randint(0, 10**6)
            # the draw the schedulers made before: choice over the listed array
            before = sorted(int(c) for c in np.random.default_rng(seed).choice(np.asarray(listed), k, replace=False))
            assert sample_clients(idle, k / len(listed), 1, np.random.default_rng(seed)) == before
    big = IdleClients(100_000, [5, 99_999])  # numpy picks another sampling algorithm above 10,000
    before = sorted(int(c) for c in np.random.default_rng(3).choice(np.asarray(list(big)), 50, replace=False))
    assert sample_clients(big, 50 / len(big), 1, np.random.default_rng(3)) == before


def test_index_lists_behave_as_the_tuples_they_replace():
    part = Partition(train=[[3, 1, 2], np.array([7, 8]), (9,)], test=[[0], [1], [2]])
    first = part.train[0]
    assert isinstance(first, IndexList) and first == (3, 1, 2) and (3, 1, 2) == first and first == [3, 1, 2]
    assert hash(first) == hash((3, 1, 2)) and first[0] == 3 and first[-1] == 2 and first[1:] == (1, 2)
    assert type(first[0]) is int and list(first) == [3, 1, 2] and 2 in first and 5 not in first
    assert np.asarray(part.train[1]).tolist() == [7, 8] and part.sizes() == [3, 2, 1]
    assert pickle.loads(pickle.dumps(part)) == part
    assert first.nbytes() == 24  # 8 bytes an index, not a tuple's ~40
    with pytest.raises(TypeError, match="1-d integer array"):
        IndexList(np.array([0.5]))

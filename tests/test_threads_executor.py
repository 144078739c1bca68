"""The threads executor: a wave's clients in a thread pool, and still the inline history, bit for bit.

The four scheduler families and a stop/resume mid-run come from the executor contract checks
(:mod:`fedcore.testing.executor`); tests/reliability/test_kill_resume.py kills a real ``fedcore run`` under it.
"""
import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import UniformSync
from fedcore.engine.dispatch import build_job
from fedcore.engine.threads_executor import GlobalRandomDrawError, ThreadsExecutor, balance
from fedcore.errors import ConfigError
from fedcore.jobs import InlineExecutor
from fedcore.network import Channel
from fedcore.testing import EXECUTOR_CHECKS, ContractFixture, build_engine, round_context, run_tiny_pipeline
from fedcore.types import ClientState


@pytest.fixture
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("check", EXECUTOR_CHECKS, ids=lambda c: c.__name__)
def test_threads_executor_passes_the_executor_contract(check):
    made = []

    def make():
        made.append(ThreadsExecutor(workers=2))
        return made[-1]

    check(make)
    assert sum(e.lanes["workers"] for e in made) > 3 * sum(e.lanes["calling_thread"] for e in made)  # mostly the pool


# -- the contract check can fail ---------------------------------------------------------------

class FreshChannels(InlineExecutor):
    """Broken: hands back each result with an empty channel (its traffic never reaches the ledger)."""

    def run(self, jobs):
        return [attrs.evolve(r, channel=Channel(r.client_id, r.channel.round)) for r in super().run(jobs)]


class OneStream(InlineExecutor):
    """Broken: every client of a wave draws from client 0's random streams."""

    def run(self, jobs):
        return super().run([attrs.evolve(j, ctx=attrs.evolve(j.ctx, client_id=0)) for j in jobs])


class ForgetsState(InlineExecutor):
    """Broken: hands back a blank client state instead of the one the job left."""

    def run(self, jobs):
        return [attrs.evolve(r, state=ClientState(client_id=r.client_id)) for r in super().run(jobs)]


@pytest.mark.parametrize("broken, message", [(FreshChannels, "differs"), (OneStream, "differs"),
                                             (ForgetsState, "client states differ")])
def test_the_executor_contract_catches_an_executor_that_changes_the_run(broken, message):
    with pytest.raises(AssertionError, match=message):
        EXECUTOR_CHECKS[0](broken)


# -- torch's global random generator -------------------------------------------------------

def dropout_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))


def test_clients_that_draw_from_the_global_generator_train_on_the_calling_thread(one_torch_thread):
    fixture = ContractFixture(model_factory=dropout_mlp, num_clients=6)
    inline = run_tiny_pipeline([UniformSync()], rounds=3, fixture=fixture)
    executor = ThreadsExecutor(workers=2)
    threaded = run_tiny_pipeline([UniformSync()], rounds=3, fixture=fixture, executor=executor)
    assert threaded.history.comparable() == inline.history.comparable()
    for k, v in inline.model.state_dict().items():
        assert torch.equal(v, threaded.model.state_dict()[k]), k
    assert executor.lanes == {"calling_thread": 18, "workers": 0}  # the probe saw the dropout draw


@attrs.frozen(eq=False, kw_only=True)
class DrawsForClient:
    """A local-update wrapper that draws from torch's global generator for one client only."""

    client: int

    @fedcore.hookimpl(wrapper=True)
    def fedcore_local_update(self, client):
        if client.id == self.client:
            torch.rand(1)
        return (yield)


def test_a_draw_the_first_job_of_its_kind_did_not_make_stops_the_run(one_torch_thread):
    seen = []
    with pytest.raises(GlobalRandomDrawError, match=r"drew from torch's global random generator \(round 0, "
                                                    r"clients \[.*\].*--set executor=inline"):
        run_tiny_pipeline([UniformSync(), DrawsForClient(client=4)], rounds=2,
                          fixture=ContractFixture(num_clients=6), executor=ThreadsExecutor(workers=2),
                          on_round=seen.append)
    assert seen == []


def test_the_callers_global_random_state_is_untouched_by_a_wave(one_torch_thread):
    engine = build_engine([], ContractFixture(num_clients=4))
    executor = ThreadsExecutor(workers=2)
    executor.start(engine.pipeline, engine.run_ctx.train)
    try:
        ctx = round_context(engine)
        jobs = [build_job(engine.parts, c, ctx)[0] for c in engine.run_ctx.clients]
        torch.manual_seed(123)
        before = torch.random.get_rng_state()
        results = executor.run(jobs)
        assert torch.equal(torch.random.get_rng_state(), before)
        assert [r.client_id for r in results] == [0, 1, 2, 3] and executor.lanes["workers"] == 3
    finally:
        executor.close()


# -- set-up: threads per worker, balance, refusals ----------------------------------------------

def test_each_worker_has_its_own_intra_op_thread_count_and_the_caller_keeps_its_own():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    executor = ThreadsExecutor(workers=2, threads_per_worker=1)
    try:
        executor.start(fedcore.Pipeline([]), None)
        counts = [executor._pool.submit(torch.get_num_threads).result() for _ in range(4)]
        assert counts == [1, 1, 1, 1] and torch.get_num_threads() == 2
    finally:
        executor.close()
        torch.set_num_threads(before)


def test_balance_puts_the_largest_clients_first_onto_the_least_loaded_worker():
    assert balance([10, 200, 30, 180, 40], 2) == [[1, 2], [0, 3, 4]]
    assert balance([5, 5], 4) == [[0], [1]]


def test_shares_with_a_server_endpoint_are_refused_before_any_work():
    from fedcore.models import micro_vit
    from fedcore.testing import tiny_data

    torch.manual_seed(0)
    train, test = tiny_data(n=48, n_test=24)
    seen = []
    with pytest.raises(ConfigError, match=r"executor threads cannot run shares with a server endpoint \(clients "
                                          r"\[0, 1, 2\], endpoint Endpoint\).*executor = \"inline\""):
        fedcore.recipe("splitfed-v1").run(model=micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2),
                                          train=train, test=test, num_clients=3, rounds=1,
                                          executor=ThreadsExecutor(workers=2), on_round=seen.append)
    assert seen == []  # refused at the first dispatch, before any client trained


def test_a_cohort_provider_that_does_not_declare_thread_safety_trains_on_the_calling_thread(one_torch_thread):
    from fedcore.builtin import VectorisedCohort

    fixture = ContractFixture(num_clients=4)
    inline = run_tiny_pipeline([VectorisedCohort()], rounds=2, fixture=fixture)
    executor = ThreadsExecutor(workers=2)
    threaded = run_tiny_pipeline([VectorisedCohort()], rounds=2, fixture=fixture, executor=executor)
    assert threaded.history.comparable() == inline.history.comparable()
    assert executor.lanes == {"calling_thread": 8, "workers": 0}


@pytest.mark.parametrize("settings, message", [
    ({"workers": "two"}, r"executor threads\.workers = 'two' has type string; expected integer"),
    ({"workers": -1}, r"executor threads: ThreadsExecutor\.workers=-1 is out of range; must be >= 0"),
    ({"threads_per_worker": 0}, r"ThreadsExecutor\.threads_per_worker=0 is out of range; must be >= 1"),
    ({"cores": 2}, r"executor threads: unknown setting 'cores'; allowed: threads_per_worker, workers"),
])
def test_bad_settings_are_one_line_naming_the_field(tmp_path, settings, message):
    from fedcore.experiment.build import materialize, plan
    from fedcore.experiment.config import load_config

    pairs = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in settings.items())
    config = tmp_path / "run.toml"
    config.write_text(f'rounds = 1\nnum_clients = 2\ndataset = {{ name = "synthetic", n = 32, n_test = 8 }}\n'
                      f'model = "tiny-mlp"\nexecutor = {{ name = "threads", {pairs} }}\n')
    with pytest.raises(ConfigError, match=message) as err:
        materialize(plan(load_config(config)))
    assert "\n" not in str(err.value)


def test_a_cohort_on_a_worker_gets_no_server_state():
    engine = build_engine([], ContractFixture(num_clients=2))
    executor = ThreadsExecutor(workers=2)
    executor.start(engine.pipeline, engine.run_ctx.train)
    seen = []

    @attrs.frozen(eq=False)
    class Peek:
        @fedcore.hookimpl(wrapper=True)
        def fedcore_local_update(self, ctx):
            seen.append(ctx.run)
            return (yield)

    try:
        ctx = round_context(engine)
        jobs = [build_job(engine.parts, c, ctx)[0] for c in engine.run_ctx.clients]
        engine.pipeline.plugin_manager.register(Peek())
        executor.run(jobs)
    finally:
        executor.close()
    assert seen == [None, None]  # the probe on the calling thread too: every job sees what a worker's sees


class FailsAtRunStart:
    """A plugin whose run_start raises: the run ends before its first round."""

    @fedcore.hookimpl
    def fedcore_run_start(self, run):
        raise RuntimeError("run_start failed")


def test_a_run_that_fails_before_its_first_round_still_closes_the_pool():
    executor = ThreadsExecutor(workers=2)
    with pytest.raises(RuntimeError, match="run_start failed"):
        run_tiny_pipeline([UniformSync(), FailsAtRunStart()], rounds=2, executor=executor)
    assert executor._pool is None and executor._lending is None  # Engine.run closed it (it did not, before)

"""Co-S2P end to end on a micro ViT: the mask phase, then sliced submodels; personal state; stale updates; resume."""
import pytest
import torch

import fedcore
from fedcore.builtin import SemiAsyncSchedule
from fedcore.engine.checkpoint import Checkpointer, list_checkpoints, read_checkpoint
from fedcore.engine.loop import Engine
from fedcore.errors import ConfigError
from fedcore.models import micro_vit
from fedcore.runtime import SimClock
from fedcore.testing import tiny_data
from fedcore_cos2p import Cos2pAggregate, Cos2pShare, Cos2pUpdate, staleness_histogram
from fedcore_cos2p.masks import PARTS
from fedcore_cos2p.share import LOGITS

PROFILES = ["jetson-nx8", "jetson-agx32", "jetson-agx64", "jetson-agx64"]
BUDGETS = {"jetson-nx8": 0.25, "jetson-agx32": 0.5625, "jetson-agx64": 0.5625}


class Stop(Exception):
    pass


def vit():
    torch.manual_seed(0)
    return micro_vit(num_classes=4, embed_dim=16, depth=4, num_heads=4)


def make(checkpoint=None, *, share=None, rounds=5):
    train, test = tiny_data()
    parts = [SemiAsyncSchedule(mu=0.5, t_clk=0.0),
             share or Cos2pShare(budgets=BUDGETS, mask_rounds=2),
             Cos2pUpdate(epochs=1, batch_size=16, lr=0.01), Cos2pAggregate()]
    return Engine(fedcore.Pipeline(parts), model=vit(), train=train, test=test, num_clients=4, rounds=rounds,
                  seed=3, checkpoint=checkpoint, clock=SimClock(), profiles=PROFILES)


@pytest.fixture(scope="module")
def reference():
    engine = make()
    busy_after = []
    engine.on_round = lambda record: busy_after.append(len(engine.state.in_flight))
    return engine.run(), busy_after


def test_masks_are_learned_then_sliced_and_personal_state_stays_on_the_client(reference):
    result, _ = reference
    history = result.history
    assert all("round_failed" not in r for r in history)
    hist = staleness_histogram(history)
    assert hist.get(0) and sum(v for k, v in hist.items() if k >= 1) >= 1  # stragglers arrive stale and are merged
    assert all(0 < r["ru"] <= 1 and 0 < r["utilisation"] <= 1 for r in history)
    # the NX client (R = 0.25: 2 blocks at width 0.5) learned its mask logits in the mask phase: they stay in its
    # client state, moved away from the initial value; nothing personal is in the global model
    assert_masks_learned(result.run.client_states[0].tensors, initial=Cos2pShare(budgets=BUDGETS).mask_init)
    assert not any(k.startswith("exits.") for k in result.model.state_dict())


def assert_masks_learned(tensors, *, initial):
    logits = {k[len(LOGITS):]: v for k, v in tensors.items() if k.startswith(LOGITS)}
    assert set(logits) == set(PARTS), f"the client state holds mask logits for {sorted(logits)}, not every part"
    moved = [p for p, v in logits.items() if not torch.all(v == initial)]
    assert moved, f"no mask logit moved from its initial value {initial}: the masks were not learned"


def test_a_resumed_run_with_updates_in_flight_equals_the_uninterrupted_run(tmp_path, reference):
    full, busy_after = reference
    stop = next(r for r in range(1, 4) if busy_after[r - 1])  # a round that left jobs in flight
    first = make(Checkpointer(tmp_path, every=1))

    def crash(record):
        if record["round"] == stop:
            raise Stop

    first.on_round = crash
    with pytest.raises(Stop):
        first.run()
    snapshot = read_checkpoint(list_checkpoints(tmp_path)[-1])[0]
    assert snapshot["runtime"]["in_flight"]  # the checkpoint holds submodel updates still on their way
    resumed = make(Checkpointer(tmp_path, every=1, resume=True)).run()
    assert resumed.history.comparable() == full.history.comparable()
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def test_fixed_random_masks_on_every_part_train_from_the_first_round():
    """Tab. 3's "random masks, both": nothing is learned, so no round is a mask round (there, an optimiser over no
    mask logits failed every client of the mask rounds, with an empty Adan, rounds 1 to Q̂) and each client trains
    its fixed random submodel through the mask rounds."""
    result = make(share=Cos2pShare(budgets=BUDGETS, mask_rounds=2, random_masks="both"), rounds=2).run()
    assert [r.get("round_failed") for r in result.history] == [None, None]
    assert [r.get("failed") for r in result.history] == [None, None]
    assert all("round_failed" not in r for r in result.history)
    assert all(r["num_examples"] > 0 for r in result.history)
    assert not any(k.startswith(LOGITS) for cs in result.run.client_states.values() for k in cs.tensors)


def test_a_static_window_beyond_the_depth_is_one_error():
    with pytest.raises(ConfigError, match="static_start=3 with a window of 2 blocks lies beyond the model's depth 4"):
        make(share=Cos2pShare(budgets=BUDGETS, depth_roll="static", static_start=3), rounds=1).run()


def test_bad_budgets_are_refused_when_the_component_is_built():
    with pytest.raises(ConfigError, match=r"budgets\['jetson-nx8'\]=1.5 is not a resource budget"):
        Cos2pShare(budgets={"jetson-nx8": 1.5})
    with pytest.raises(ConfigError, match="keeps no head of the 4"):
        make(share=Cos2pShare(budgets={"jetson-nx8": 0.015625}), rounds=1).run()

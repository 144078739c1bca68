"""Method tests: known values, robustness to an outlier client, bad settings, discovery by name."""
import pytest
import torch

import fedcore
from fedcore.errors import ConfigError
from fedcore.testing import run_tiny_pipeline
from fedcore.types import ClientUpdate
from fedcore_robust import CoordinateMedian, TrimmedMean, coordinate_median, trimmed_mean


def updates_of(*rows, num_examples=None):
    return [ClientUpdate(client_id=i, tensors={"w": torch.tensor(r, dtype=torch.float32)},
                         num_examples=(num_examples or [1] * len(rows))[i]) for i, r in enumerate(rows)]


def test_trimmed_mean_known_values():
    # five clients, one coordinate each column; beta=0.2 drops one value at each end per coordinate
    ups = updates_of([1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [100.0, -50.0])
    out = trimmed_mean(ups, beta=0.2)["w"]
    assert torch.allclose(out, torch.tensor([3.0, 20.0]))  # (2+3+4)/3; -50 and 40 dropped: (10+20+30)/3


def test_trimmed_mean_beta_zero_is_the_plain_mean_and_floor_is_used():
    ups = updates_of([1.0], [2.0], [6.0])
    assert torch.allclose(trimmed_mean(ups, beta=0.0)["w"], torch.tensor([3.0]))
    # beta*m = 0.9 -> floor 0: nothing trimmed
    assert torch.allclose(trimmed_mean(ups, beta=0.3)["w"], torch.tensor([3.0]))
    # beta*m = 1.2 -> one trimmed per side: the middle value
    assert torch.allclose(trimmed_mean(ups, beta=0.4)["w"], torch.tensor([2.0]))


def test_median_odd_and_even_counts():
    assert torch.allclose(coordinate_median(updates_of([3.0], [1.0], [2.0]))["w"], torch.tensor([2.0]))
    assert torch.allclose(coordinate_median(updates_of([4.0], [1.0], [2.0], [3.0]))["w"], torch.tensor([2.5]))
    # coordinates are independent: the median of each column
    ups = updates_of([1.0, 9.0], [2.0, 8.0], [3.0, 7.0])
    assert torch.allclose(coordinate_median(ups)["w"], torch.tensor([2.0, 8.0]))


def test_aggregators_ignore_claimed_sample_counts():
    # a client claiming a million samples gets no more say than any other (unweighted, as in the paper)
    ups = updates_of([0.0], [0.0], [1000.0], num_examples=[1, 1, 1_000_000])
    assert float(TrimmedMean(beta=0.34).fedcore_aggregate(None, ups, None).state["w"]) == 0.0
    assert float(CoordinateMedian().fedcore_aggregate(None, ups, None).state["w"]) == 0.0


def test_dtype_and_integer_entries_are_kept():
    ups = [ClientUpdate(client_id=i, num_examples=1, tensors={"w": torch.full((2,), float(i), dtype=torch.float16),
                                                             "n": torch.tensor(i, dtype=torch.long)}) for i in range(3)]
    out = trimmed_mean(ups, beta=0.0)
    assert out["w"].dtype == torch.float16 and out["n"].dtype == torch.long and int(out["n"]) == 2


def _outlier_run(component):
    """A tiny federated run where client 0 uploads a huge constant instead of its trained weights."""
    import attrs

    from fedcore.builtin import SGDUpdate

    @attrs.frozen(eq=False, kw_only=True)
    class Attacker:
        """Client 0 is Byzantine: it uploads 1e4 in every coordinate (finite, so the engine accepts it)."""

        inner: SGDUpdate = SGDUpdate(lr=0.1)

        @fedcore.hookimpl
        def fedcore_local_update(self, client, share, data, state, ctx):
            update = self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
            if client.id == 0:
                return attrs.evolve(update, tensors={k: torch.full_like(v, 1e4) if v.is_floating_point() else v
                                                     for k, v in update.tensors.items()})
            return update

    return run_tiny_pipeline([Attacker(), component], rounds=3, num_clients=5)


def test_one_outlier_client_does_not_move_the_robust_aggregate():
    from fedcore.builtin import FedAvg

    fedavg = _outlier_run(FedAvg())
    max_fedavg = max(float(p.detach().abs().max()) for p in fedavg.model.parameters())
    assert max_fedavg > 100.0  # the attacker drags the plain mean far away
    for component in (TrimmedMean(beta=0.2), CoordinateMedian()):
        result = _outlier_run(component)
        assert max(float(p.detach().abs().max()) for p in result.model.parameters()) < 10.0
        assert result.history.last("test_accuracy") > 0.5  # 4 classes: chance is 0.25


def test_bad_settings_name_the_field():
    with pytest.raises(ConfigError, match=r"TrimmedMean.beta=0.5 is out of range; must be < 0.5"):
        TrimmedMean(beta=0.5)
    with pytest.raises(ConfigError, match=r"TrimmedMean.beta='x' has type str"):
        TrimmedMean(beta="x")


def test_found_by_name_when_installed():
    info = {p.name: p for p in fedcore.list_plugins()}
    if "robust" not in info:
        pytest.skip("fedcore-robust is not installed in this environment (run `bash scripts/dev env`)")
    assert info["robust"].ok and set(info["robust"].components) == {
        "median", "trimmed-mean", "krum", "multi-krum", "bulyan", "centred-clipping", "byzantine", "label-flip-sgd",
        "recipe:krum", "recipe:multi-krum", "recipe:bulyan", "recipe:centred-clipping"}
    pipe = fedcore.Pipeline.from_config({"aggregate": {"name": "trimmed-mean", "beta": 0.2}})
    assert isinstance(pipe.provider("aggregate"), TrimmedMean) and pipe.provider("aggregate").beta == 0.2

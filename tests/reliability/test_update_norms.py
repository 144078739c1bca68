"""Update sanity before aggregation (issue 29, item 7): one client sending a 1e30-scaled (finite) update is rejected
against the round's median update norm, reported in the round's row and on the progress line, and never averaged;
the run stays healthy. With the bound off (0) the same update poisons FedAvg (so the test can fail)."""
import attrs
import torch

import fedcore
from fedcore.builtin import FedAvg, SGDUpdate, UniformSync
from fedcore.experiment.progress import round_events
from fedcore.testing import tiny_data

SCALE = 1e30


@attrs.frozen(eq=False, kw_only=True)
class Scaled:
    """SGD for everyone; client ``victim`` sends its weights times ``SCALE`` (finite: it passes the NaN check)."""

    victim: int = 1
    inner: SGDUpdate = attrs.field(factory=lambda: SGDUpdate(lr=0.1))

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        update = self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
        if client.id != self.victim:
            return update
        t = {k: v * SCALE if v.is_floating_point() else v for k, v in update.tensors.items()}
        return attrs.evolve(update, tensors=t)


def run(bound):
    train, test = tiny_data()
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
    pipe = fedcore.Pipeline([Scaled(), UniformSync(fraction=1.0), FedAvg()])
    return pipe.run(model=model, train=train, test=test, num_clients=4, rounds=3, seed=0, update_norm_bound=bound)


def test_a_1e30_scaled_update_is_rejected_reported_and_never_averaged():
    result = run(100.0)
    for row in result.history:
        assert row["clients"] == [0, 2, 3] and "round_failed" not in row
        assert [r["client"] for r in row["rejected"]] == [1] and "update norm" in row["rejected"][0]["reason"]
        assert "rejected: 1 update(s) (clients 1)" in round_events(row)
    weights = [v for v in result.model.state_dict().values() if v.is_floating_point()]
    assert all(torch.isfinite(v).all() and v.abs().max() < 100 for v in weights)
    assert result.history.failure() is None


def test_with_the_bound_off_the_scaled_update_poisons_the_model():
    result = run(0.0)
    assert not any(r.get("rejected") for r in result.history.rows[:1])
    weights = [v for v in result.model.state_dict().values() if v.is_floating_point()]
    assert any(not torch.isfinite(v).all() or v.abs().max() > 1e20 for v in weights)

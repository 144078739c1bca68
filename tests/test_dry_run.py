"""The dry run is honest: on configs that also run for real here, its bytes, FLOPs, memory and virtual time of a
round equal the real round's (ledger, cost model on real tensors, clock), client by client."""
from __future__ import annotations

import copy

import attrs
import pytest
import torch

import fedcore
from fedcore.errors import ConfigError
from fedcore.experiment.build import materialize, plan
from fedcore.experiment.config import load_config
from fedcore.experiment.matrix import cell_config, installed_recipes
from fedcore.experiment.plan_costs import dry_run
from fedcore.runtime.cost_model import measure
from fedcore.types import JobPlan, Message

CLOCK = {"default_profile": "phone"}


def recipe_config(recipe: str, **pipeline) -> dict:
    cfg = cell_config(recipe, "uniform", rounds=1)
    cfg["pipeline"] = {**cfg["pipeline"], **pipeline}
    return {**cfg, "clock": CLOCK}


def example_config(path: str) -> dict:
    from fedcore.experiment.config import read_toml

    cfg = read_toml(path)
    return {**cfg, "rounds": 1, "clock": cfg.get("clock", CLOCK)}


CROSS_CHECKS = {  # the default configs of splitfed-v1 (U-shaped split), co-s2p (masked submodels), fedvkd
    # (distillation), tree-learning and tree-learning-vertical are cross-checked by
    # test_client_compute_scales_with_local_epochs, at their default local epochs and one more or one less
    "fedavg-dirichlet": lambda: example_config("examples/fedavg_dirichlet.toml"),
    "sl two-part split": lambda: recipe_config("sl", split={"tail_from": None}),
    "fedv": lambda: recipe_config("fedv"),
    "fedvz (loss queries)": lambda: recipe_config("fedvz"),
    "sa-fedlora (LoRA plan)": lambda: recipe_config("sa-fedlora", plugins=[{"name": "sa-fedlora-plan",
                                                                           "t1_rounds": 0}]),
    "promptfl (prompt)": lambda: recipe_config("promptfl"),
    "fedrolex (pruned submodels)": lambda: recipe_config("fedrolex"),
}


def real_round(cfg: dict):
    """One real round of ``cfg``: (ledger, history row, the clock's measured share costs)."""
    m = materialize(plan(load_config(None, base=cfg)))
    result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
    return result.ledger, result.history.rows[0], m.run_kwargs["clock"]


@pytest.mark.parametrize("name", sorted(CROSS_CHECKS))
def test_dry_run_equals_a_real_round(name):
    torch.set_num_threads(1)
    check_dry_run_equals_a_real_round(CROSS_CHECKS[name]())


def check_dry_run_equals_a_real_round(cfg: dict):
    """A dry run and a real round of ``cfg``, client by client: the clients dispatched, bytes by direction and kind,
    FLOPs, parameter bytes and saved activations, virtual time and FLOPs. Returns (dry run, history row)."""
    dry = dry_run(plan(load_config(None, base=copy.deepcopy(cfg))))
    ledger, row, clock = real_round(copy.deepcopy(cfg))
    assert list(dry.dispatched) == sorted(row["clients"])
    for c in dry.clients:  # bytes by direction and kind, client by client
        if c.client not in dry.dispatched:
            continue
        real = {}
        for r in ledger.rows:
            if r.round == 0 and r.client == c.client:
                real.setdefault(r.direction, {})
                real[r.direction][r.kind] = real[r.direction].get(r.kind, 0) + r.nbytes
        assert {d: dict(k) for d, k in c.bytes.items()} == real, f"client {c.client}"
    # FLOPs, parameter bytes and saved activations: the meta measurements equal the clock's on real tensors
    planned = {(p.forward_flops, p.train_flops, p.memory["params"], p.memory["grads"], p.memory["activations"])
               for p in dry.clients if p.client in dry.dispatched}
    real = {(c.forward_flops, c.train_flops, c.param_bytes, c.trainable_bytes, c.activations(clock.batch_size))
            for c in clock.model.cache.values()}
    assert planned == real
    # virtual time and FLOPs of the round, as the clock priced the real jobs
    sent = [c for c in dry.clients if c.client in dry.dispatched]
    assert sum(c.compute_s for c in sent) == pytest.approx(row["virtual_compute_s"], rel=1e-12)
    assert sum(c.comm_s for c in sent) == pytest.approx(row["virtual_comm_s"], rel=1e-12)
    assert sum(c.round_flops for c in sent) == pytest.approx(row["virtual_flops"], rel=1e-12)
    return dry, row


def test_a_later_distillation_round_downloads_the_server_logits():
    """From round 1 on a distillation client downloads the server's logits of its samples; a dry run of round 1
    (no aggregation ran) books what the real second round books."""
    torch.set_num_threads(1)
    cfg = {**recipe_config("fedvkd"), "rounds": 2}
    dry = dry_run(plan(load_config(None, base=copy.deepcopy(cfg))), round=1)
    m = materialize(plan(load_config(None, base=copy.deepcopy(cfg))))
    result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
    real: dict = {}
    for (direction, kind), n in result.ledger.by_kind(round=1).items():
        real.setdefault(direction, {})[kind] = n
    assert dry.round_bytes() == real
    assert set(real["down"]) == {"sample_ids", "logits"}
    assert sum(c.comm_s for c in dry.clients) == pytest.approx(result.history.rows[1]["virtual_comm_s"], rel=1e-12)


def test_later_sa_fedlora_rounds_book_what_the_real_rounds_book():
    """SA-FedLoRA's stage switch (round 1: backbone + factors down) and an annealed round (round 2: factors at the
    lower rank, no backbone): dry runs of those rounds, each without the rounds before it, equal the real ledger.
    64 samples (16 a client) instead of the matrix's 256: what a round books is weights, whatever the samples."""
    torch.set_num_threads(1)
    cfg = {**recipe_config("sa-fedlora", plugins=[{"name": "sa-fedlora-plan", "t1_rounds": 1, "t2_rounds": 3,
                                                     "r_a": 3, "r_b": 2, "t_a": 0, "t_b": 1}],
                           local_update={"e1_local_epochs": 1}), "rounds": 3}
    cfg["dataset"] = {**cfg["dataset"], "n": 64}
    m = materialize(plan(load_config(None, base=copy.deepcopy(cfg))))
    result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
    assert [row["lora_rank"] for row in result.history.rows] == [0.0, 3.0, 2.0]
    for round in (1, 2):
        dry = dry_run(plan(load_config(None, base=copy.deepcopy(cfg))), round=round)
        real: dict = {}
        for (direction, kind), n in result.ledger.by_kind(round=round).items():
            real.setdefault(direction, {})[kind] = n
        assert dry.round_bytes() == real, f"round {round}"
    assert real["down"]["weights"] == real["up"]["weights"]  # round 2: the factors (+ head) only, both ways


def build_pair(name: str, **settings):
    model = fedcore.plugins.registry().get(name, "model").obj
    torch.manual_seed(0)
    real = model(**settings)
    with torch.device("meta"):
        meta = model(**settings)
    return real, meta


@pytest.mark.parametrize("name, settings, shape", [
    ("micro-cnn", {}, (1, 8, 8)),  # batch norm
    ("micro-vit", {}, (1, 8, 8)),  # timm attention (scaled_dot_product_attention)
    ("prompted-clip", {"classnames": ["a", "b", "c"], "n_ctx": 4}, (3, 16, 16)),  # MHA fast path, causal mask
    ("kd.fedvkd", {"num_classes": 4, "image_size": 8, "width": 4, "embed_dim": 16, "depth": 1, "num_heads": 2},
     (3, 8, 8)),
])
def test_meta_measurement_equals_real_tensors(name, settings, shape):
    real, meta = build_pair(name, **settings)
    x = torch.rand(2, *shape)
    assert measure(meta, x.to("meta")) == measure(real, x)


def meta_calls() -> list:
    """Meta kernel calls whose outputs differ in ways a memo could get wrong: a channels-last convolution, a training
    batch norm's three outputs (it writes its running statistics), a matmul of a transposed view, an in-place write,
    and the same op again at another shape and with another argument."""
    x = torch.empty(2, 4, 6, 6, device="meta").to(memory_format=torch.channels_last)
    weight, running = torch.empty(8, 4, 3, 3, device="meta"), [torch.empty(8, device="meta") for _ in range(2)]
    y = torch.nn.functional.conv2d(x, weight, padding=1)
    a = torch.empty(5, 3, device="meta")
    a.clamp_(0.0, 1.0), x.clamp_(0.0)
    return [y, *torch.ops.aten._native_batch_norm_legit(y, None, None, *running, True, 0.1, 1e-5), a.t() @ a,
            torch.relu(a), torch.relu(torch.empty(3, 5, device="meta")), torch.relu(a.t()), a.sum(0), a.sum(1)]


def test_the_meta_kernel_memo_answers_what_the_kernels_answer():
    """A call answered from :class:`MetaShapeMemo` returns what the kernel returns: new tensors of the same shapes,
    strides, dtypes and storage sizes, or the argument an in-place op writes; calls that differ in a shape, a stride
    or an argument are not confused."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from fedcore.runtime.meta_kernels import MetaShapeMemo

    written = []

    class Above(TorchDispatchMode):  # where the FLOP counter sits: it gets what the memo answers
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.clamp_.default:
                written.append(out is args[0])
            return out

    def described(outputs):
        return [(tuple(o.shape), o.stride(), o.dtype, o.untyped_storage().nbytes()) for o in outputs]

    expected = described(meta_calls())
    memo: dict = {}
    with MetaShapeMemo(memo), Above():
        first = meta_calls()
    remembered = len(memo)
    with MetaShapeMemo(memo), Above():
        second = meta_calls()
    assert remembered >= 9 and len(memo) == remembered  # the second pass was answered from the memo
    assert described(first) == described(second) == expected
    assert written == [True] * 4  # an in-place write answers with the tensor it wrote
    storages = [o.untyped_storage()._cdata for o in first + second]
    assert len(set(storages)) == len(storages)  # every answer owns a new storage


def test_memory_components_match_a_real_step():
    """Weights, gradients, optimizer state and saved activations of the estimate, each against the real thing."""
    torch.set_num_threads(1)
    cfg = recipe_config("fedavg", local_update={"name": "sgd", "optimizer": "adam", "batch_size": 8})
    cfg["model"] = {"name": "micro-vit", "in_chans": 1, "img_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2}
    cfg["dataset"] = {"name": "synthetic", "n": 64, "n_test": 16, "num_classes": 4}
    dry = dry_run(plan(load_config(None, base=cfg)))
    mem = dry.clients[0].memory
    model = fedcore.plugins.registry().get("micro-vit", "model").obj(
        num_classes=4, in_chans=1, img_size=8, embed_dim=32, depth=2, num_heads=2).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    saved: dict[int, int] = {}
    params = {p.untyped_storage()._cdata for p in model.parameters()}

    def pack(t):
        key = t.untyped_storage()._cdata
        if key not in params:
            saved[key] = max(saved.get(key, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch.nn.functional.cross_entropy(model(torch.rand(8, 1, 8, 8)), torch.arange(8) % 4)
    loss.backward()
    opt.step()
    assert mem["params"] == sum(t.nbytes for t in [*model.parameters(), *model.buffers()])
    assert mem["grads"] == sum(p.grad.nbytes for p in model.parameters())
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor) and t.dim() > 0]
    assert mem["optimizer"] == sum(t.nbytes for t in state)
    assert mem["activations"] == pytest.approx(sum(saved.values()), rel=0.01)  # measured at batches 1 and 2


@pytest.mark.slow  # a dry run of every installed recipe's config: ~10 s of CPU
def test_every_recipe_gets_a_plan_or_a_one_line_refusal():
    torch.set_num_threads(1)
    planned, refused = [], []
    for recipe in installed_recipes():
        cfg = cell_config(recipe, "uniform", rounds=1)
        try:
            dry = dry_run(plan(load_config(None, base=cfg)))
        except ConfigError as exc:
            assert "\n" not in str(exc).strip(), recipe
            refused.append((recipe, str(exc)))
            continue
        assert dry.clients and all(c.params_held > 0 and c.forward_flops > 0 for c in dry.clients), recipe
        assert all(c.total_bytes("up") + c.total_bytes("down") > 0 for c in dry.clients if c.client in dry.dispatched
                   and recipe != "local"), recipe
        planned.append(recipe)
    assert len(planned) >= 35, refused


@attrs.frozen(eq=False, kw_only=True)
class ExtraSummary:
    """A local update that also uploads a 10-float summary after every batch (and says so to a dry run)."""

    @fedcore.hookimpl
    def fedcore_plan_job(self, client, share, samples, example, ctx):
        from fedcore.types import upload_messages

        return JobPlan(messages=[Message(direction="up", kind="summary", nbytes=40, count=samples),
                                 *upload_messages(share)], train_samples=samples, num_examples=samples)


def test_hook_fedcore_plan_job_answers_replace_the_default():
    """An answer to ``fedcore_plan_job`` is what the dry run books: its messages, its samples."""
    cfg = recipe_config("fedavg")
    base = dry_run(plan(load_config(None, base=copy.deepcopy(cfg))))
    cfg["pipeline"]["plugins"] = [ExtraSummary()]
    dry = dry_run(plan(load_config(None, base=cfg)))
    for before, after in zip(base.clients, dry.clients):
        assert after.bytes["up"]["summary"] == 40 * after.selected
        assert after.messages["up"]["summary"] == after.selected
        assert after.bytes["up"]["weights"] == before.bytes["up"]["weights"]
        assert after.comm_s > before.comm_s


def test_a_plan_answer_that_is_not_a_job_plan_is_refused():
    @attrs.frozen(eq=False, kw_only=True)
    class Wrong:
        @fedcore.hookimpl
        def fedcore_plan_job(self, client, share, samples, example, ctx):
            return {"bytes": 1}

    cfg = recipe_config("fedavg")
    cfg["pipeline"]["plugins"] = [Wrong()]
    with pytest.raises(ConfigError, match="expected a fedcore.types.JobPlan"):
        dry_run(plan(load_config(None, base=cfg)))


class FrozenAttention(torch.nn.Module):
    """Self-attention that stays in eval mode, as a frozen CLIP tower does: PyTorch runs its fused fast path."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.requires_grad_(False)

    def train(self, mode: bool = True):
        return super().train(False)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_the_fused_attention_fast_path_is_counted():
    """torch's counter knows no formula for ``_native_multi_head_attention``; without fedcore's, a frozen tower's
    attention would cost nothing."""
    b, n, e = 2, 10, 32
    with torch.no_grad():
        cost = measure(FrozenAttention(e, 4), torch.rand(b, n, e))
    projections = 2 * b * e * e * (4 * n)  # q, k, v and out, each n x e x e per sample
    attention = 4 * b * n * n * e
    assert cost.forward_flops * b == projections + attention


EPOCH_SETTINGS = {  # recipe -> (pipeline slot, its local-epochs setting): loops that call a submodule, not the share
    "fedvkd": ("local_update", "epochs"),  # the edge loop runs ``edge``; the extraction pass adds one forward
    "co-s2p": ("local_update", "epochs"),  # forward_all (round 0 is a mask round: its mask epoch comes on top)
    "splitfed-v1": ("local_update", "epochs"),  # run("bottom") / run("top")
    "fedv": ("local_update", "local_epochs"),
    "tree-learning": ("cohort", "epochs"),  # the client part; the share's module is the whole model
    "tree-learning-vertical": ("cohort", "epochs"),
}


@pytest.mark.parametrize("recipe", sorted(EPOCH_SETTINGS))
def test_client_compute_scales_with_local_epochs(recipe):
    """One more local epoch costs every client one more pass of training at its share's FLOPs per sample, in the
    real round's clock and in the dry run alike (before ``book_samples``, these loops were priced one pass whatever
    the epochs, and a Tree Learning client at the whole model's FLOPs). Each config is also a whole cross-check
    (:func:`check_dry_run_equals_a_real_round`): one of the two is the recipe's default config (fedv's, at 5 local
    epochs, is in ``CROSS_CHECKS``)."""
    torch.set_num_threads(1)
    slot, key = EPOCH_SETTINGS[recipe]
    rows, dries = {}, {}
    for epochs in (1, 2):
        cfg = recipe_config(recipe)
        cfg["pipeline"][slot] = {**cfg["pipeline"].get(slot, {}), key: epochs}
        dries[epochs], rows[epochs] = check_dry_run_equals_a_real_round(cfg)
    one_epoch = sum(c.selected * c.train_flops for c in dries[1].clients if c.client in dries[1].dispatched)
    assert one_epoch > 0
    assert rows[2]["virtual_flops"] - rows[1]["virtual_flops"] == pytest.approx(one_epoch, rel=1e-9)
    assert rows[2]["virtual_compute_s"] > rows[1]["virtual_compute_s"]
    if recipe.startswith("tree-learning"):  # priced at the client part (units 1..split-1), not the whole model
        assert all(c.forward_flops < dries[1].model["forward_flops"] for c in dries[1].clients)

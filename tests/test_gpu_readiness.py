"""What a GPU run relies on, checked where it can be shown without a GPU (issue 23; benchmarks/gpu_evidence.py runs
the rest on a lent GPU).

* fp16 needs loss scaling: a component whose own training loop has none refuses ``precision = "fp16"`` in one line,
  before any device check; the vectorised cohorts train an fp16 wave one by one (each client with its own
  ``GradScaler``), exactly as ``per-job`` does. CPU autocast to float16 exists, so the engine is given an fp16
  placement directly (``Placement.resolve`` refuses fp16 on the CPU by policy, not because it cannot run).
* The vectorised cohort draws dropout masks by ``F.dropout`` of ones from each client's stream of the device's
  default generator, with the dtype the lone client's dropout sees (recorded under autocast).
* Checkouts that pip never installed find every first-party plugin (``benchmarks/source_tree.py``).
"""
from __future__ import annotations

import logging
from pathlib import Path
import subprocess
import sys

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import PerJobCohort, QuantitySkewPartition, SGDUpdate, VectorisedCohort
from fedcore.builtin.stacked_training import replace_dropout
from fedcore.engine.loop import Engine
from fedcore.errors import ConfigError
from fedcore.experiment import load_config, plan
from fedcore.experiment.matrix import cell_config
from fedcore.runtime.placement import Placement, fp16_refusal
from fedcore.testing import tiny_data

ROOT = Path(__file__).resolve().parent.parent

UNSCALED = {"splitfed-v1": "split-train", "co-s2p": "cos2p-update", "fedvkd": "edge-kd-train",
            "tree-learning": "tl-cohort", "heterofl": "submodel-train", "fedv": "fedv-train"}
"""Recipes whose training loop has no loss scaling, and the component that says so."""


def _fp16_config(recipe: str) -> dict:
    cfg = cell_config(recipe, "uniform", rounds=1)
    cfg.update(precision="fp16", device="cpu")
    return load_config(None, base=cfg)


@pytest.mark.parametrize("recipe", sorted(UNSCALED))
def test_fp16_is_refused_in_one_line_where_a_training_loop_has_no_loss_scaling(recipe):
    with pytest.raises(ConfigError) as err:
        plan(_fp16_config(recipe))
    text = str(err.value)
    assert "\n" not in text and f"{UNSCALED[recipe]!r} trains without loss scaling" in text and "bf16" in text
    components = fedcore.recipe(recipe).components
    assert fp16_refusal(components) == text


@pytest.mark.parametrize("recipe", ["fedavg", "sa-fedlora", "promptfl", "fedlora"])
def test_fp16_is_not_refused_for_loss_scaled_training_only_for_the_cpu(recipe):
    assert fp16_refusal(fedcore.recipe(recipe).components) is None
    with pytest.raises(ConfigError, match="needs a CUDA or MPS device"):
        plan(_fp16_config(recipe))


def test_bf16_and_fp32_are_not_refused_for_loops_without_loss_scaling():
    components = fedcore.recipe("co-s2p").components
    for precision in ("fp32", "bf16"):
        assert Placement.resolve(device="cpu", precision=precision, components=components).precision == precision


@attrs.frozen(eq=False, kw_only=True)
class Uploads:
    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.seen[(ctx.round, client.id)] = {k: v.clone() for k, v in update.tensors.items()}


def _run_fp16(cohort):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))
    train, test = tiny_data(n=150)
    uploads = Uploads()
    pipe = fedcore.Pipeline([SGDUpdate(lr=0.05, batch_size=7), cohort, QuantitySkewPartition(), uploads])
    engine = Engine(pipe, model=model, train=train, test=test, num_clients=4, rounds=2, seed=3)
    engine.placement = Placement(device="cpu", precision="fp16")  # CPU float16 autocast: runs, refused by policy
    result = engine.run()
    return result, uploads.seen


def test_the_vectorised_cohort_trains_an_fp16_wave_one_by_one_with_loss_scaling(caplog):
    alone, alone_seen = _run_fp16(PerJobCohort())
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        together, together_seen = _run_fp16(VectorisedCohort(on_cpu="vectorise"))
    assert alone_seen.keys() == together_seen.keys() and len(alone_seen) == 8
    for key, tensors in alone_seen.items():
        for name, value in tensors.items():
            assert torch.equal(together_seen[key][name], value), (key, name)
    assert together.history.column("cohort_vectorised") == [0.0, 0.0]  # no client of either wave was vectorised
    assert alone.history.comparable() == [{k: v for k, v in row.items() if k != "cohort_vectorised"}
                                          for row in together.history.comparable()]
    assert sum("precision='fp16'" in r.getMessage() for r in caplog.records) == 1  # said once per run


def test_dropout_sites_record_the_dtype_their_input_has_under_autocast():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (site,) = replace_dropout(model, torch.randn(2, 8))
    assert site.dtype == torch.bfloat16 and site.shape == (8,)
    (plain,) = replace_dropout(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), torch.randn(2, 8))
    assert plain.dtype == torch.float32


def test_a_dropout_site_draws_what_a_lone_dropout_call_draws_from_the_same_stream():
    (site,) = replace_dropout(nn.Sequential(nn.Linear(8, 6), nn.Dropout(0.4)), torch.randn(2, 8))
    torch.manual_seed(11)
    lone = nn.functional.dropout(torch.ones(5, 6), 0.4, training=True)
    torch.manual_seed(11)
    assert torch.equal(site.draw(torch.ones(5, 6)), lone)
    assert not torch.equal(site.draw(torch.ones(5, 6)), lone)  # the stream moved on, as the lone client's does


@pytest.mark.integration
def test_a_checkout_that_pip_never_installed_finds_every_first_party_plugin(tmp_path):
    """``python -S`` sees no site-packages (no editable install, no dist-info): the source tree's metadata is all."""
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import source_tree; source_tree.activate(force=True, "
            f"into=__import__('pathlib').Path({str(tmp_path)!r}));"
            "from importlib import metadata; eps = metadata.entry_points(group='fedcore');"
            "print(sorted((e.name, e.dist.metadata['Name']) for e in eps))")
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    found = dict(eval(out.stdout))  # noqa: S307 - our own subprocess's repr of a list of string pairs
    expected = {p.parent.name.removeprefix("fedcore-") for p in ROOT.glob("*/fedcore-*/pyproject.toml")}
    assert found["builtin"] == "fedcore"
    assert {found[name] for name in found if name != "builtin"} == {f"fedcore-{n}" for n in expected}


# -- device mixing, shown on the meta device ----------------------------------------------------------------------
# An op that mixes a CPU tensor (not a 0-d scalar) with a tensor on another device fails the same way for a meta
# tensor as for a CUDA one ("Tensor on device cpu is not on the expected device ..."), and meta ops compute shapes
# only: a forward or an aggregation step on meta tensors is the CPU's stand-in for the same step on a GPU.


def test_a_pruned_vit_takes_masks_kept_on_the_cpu_while_its_weights_are_elsewhere():
    from fedcore_pruning import BlockMasks, PrunableViT, ViTShape

    shape = ViTShape(embed_dim=16, depth=2, num_heads=2, mlp_hidden=32)
    model = PrunableViT(shape).to("meta")
    logits = torch.zeros(shape.num_heads, requires_grad=True)  # Co-S2P's mask logits stay on the CPU
    masks = [BlockMasks(heads=torch.sigmoid(logits), hidden=torch.ones(shape.mlp_hidden)) for _ in range(2)]
    out = model.forward_all(torch.zeros(3, 3, 16, 16, device="meta"), masks)
    assert out[-1].device.type == "meta" and out[-1].shape == (3, shape.num_classes)


def test_co_s2p_segment_magnitudes_take_cpu_segment_ids_for_tensors_elsewhere():
    from fedcore_cos2p.aggregate import gamma, segment_ids
    from fedcore_pruning import ViTShape

    vit = ViTShape(embed_dim=16, depth=2, num_heads=2, mlp_hidden=32)
    segments, n = segment_ids("blocks.0.attn.qkv.weight", (48, 16), vit)
    delta = torch.zeros(48, 16, device="meta")
    out = gamma(delta, delta, torch.ones(48, 16, dtype=torch.bool, device="meta"), segments, n)
    assert out.device.type == "meta" and out.shape == (48, 16)


def test_clip_labels_come_on_the_device_they_are_asked_for():
    from fedcore_clip.features import gather_labels

    train, _ = tiny_data(n=20)
    labels = gather_labels(train, [3, 1, 4], device="meta")
    assert labels.device.type == "meta" and labels.shape == (3,)
    assert torch.equal(gather_labels(train, [3, 1, 4]), train.y[[3, 1, 4]])


# -- the watcher of benchmarks/gpu_evidence.py ---------------------------------------------------------------------


def test_the_gpu_evidence_watcher_reads_the_workers_state_only_whole(tmp_path):
    """The watcher polls the worker's state file twice a second; the CPU rehearsal once caught it mid-write (an empty
    file) and the watcher died of a JSONDecodeError, leaving the worker running: a half-written file reads as None."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_evidence
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    state = tmp_path / "state.json"
    assert gpu_evidence.read_state(state) is None  # no section running
    for partial in ("", '{"section": "res'):
        state.write_text(partial)
        assert gpu_evidence.read_state(state) is None
    gpu_evidence.write_state(state, {"section": "resume", "start": 1.5, "expected": 30})
    assert gpu_evidence.read_state(state) == {"section": "resume", "start": 1.5, "expected": 30}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # written beside, then renamed over

"""Devices and precision: ``device`` / ``precision`` from configs, ``--set`` and ``Pipeline.run``.

CPU-only machines check the refusals, bf16 autocast on the CPU, data placement (on the meta device) and
checkpoints that resume on another device. Tests marked ``gpu`` need CUDA and skip without it.
"""
import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import SGDUpdate, UniformSync
from fedcore.data import ArrayDataset, batches
from fedcore.errors import ConfigError
from fedcore.runtime.placement import Placement, resolve_device
from fedcore.testing import run_tiny_pipeline
from fedcore.training import train_epochs
from fedcore.types import ClientUpdate

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_cuda_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"device='cuda' but CUDA is not available on this machine .*use "
                                          r"device='cpu' or device='auto'"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="device='cuda:1' but CUDA is not available"):
        Placement.resolve(device="cuda:1")
    assert resolve_device("auto") == torch.device("cpu")


def test_bad_device_and_precision_name_the_choices():
    with pytest.raises(ConfigError, match=r"device='tpu' is not allowed; choose one of: auto, cpu, cuda, cuda:N, mps"):
        resolve_device("tpu")
    with pytest.raises(ConfigError, match=r"the GPU index must be a number"):
        resolve_device("cuda:x")
    with pytest.raises(ConfigError, match=r"precision='fp8' is not allowed; choose one of: fp32, bf16, fp16"):
        Placement.resolve(precision="fp8")
    with pytest.raises(ConfigError, match=r"precision='fp16' needs a CUDA or MPS device.*use precision='bf16'"):
        Placement.resolve(device="cpu", precision="fp16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_fedcore_run_set_device_cuda_exits_2_with_one_line(tmp_path, capsys):
    from fedcore.cli import main

    status = main(["run", "examples/fedavg_iid.toml", "--set", "device=cuda", "--set", "rounds=1",
                   "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("fedcore: error: device='cuda' but CUDA is not available")
    assert not (tmp_path / "run").exists()  # refused before any work


def test_config_keys_are_validated_and_device_stays_out_of_the_fingerprint():
    from fedcore.experiment import load_config, plan

    base = {"rounds": 1, "num_clients": 2, "dataset": "digits", "model": "micro-cnn"}
    cfg = load_config(None, base=base)
    assert (cfg["device"], cfg["precision"]) == ("cpu", "fp32")
    with pytest.raises(ConfigError, match=r"device = 3 has type integer; expected string"):
        load_config(None, ["device=3"], base=base)
    plain = plan(cfg).fingerprint
    assert plan(load_config(None, ["device=auto"], base=base)).fingerprint == plain  # resumes on another device
    assert plan(load_config(None, ["precision=bf16"], base=base)).fingerprint != plain  # other arithmetic


@attrs.frozen(eq=False, kw_only=True)
class DtypeSpy:
    """SGD whose loss records the dtype of the logits and whether autocast was on."""

    seen: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        def loss(module, x, y):
            logits = module(x)
            self.seen.append((logits.dtype, torch.is_autocast_enabled("cpu")))
            return torch.nn.functional.cross_entropy(logits.float(), y)

        value = train_epochs(share.module, data, epochs=1, lr=0.1, generator=ctx.rng("shuffle"), loss=loss)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": value})


def test_bf16_trains_under_autocast_on_the_cpu_and_keeps_fp32_weights():
    runs = {}
    for precision in ("fp32", "bf16"):
        spy = DtypeSpy()
        result = run_tiny_pipeline([spy, UniformSync(fraction=1.0)], rounds=2, precision=precision)
        runs[precision] = (result, spy.seen)
    assert {s for s in runs["fp32"][1]} == {(torch.float32, False)}
    assert {s for s in runs["bf16"][1]} == {(torch.bfloat16, True)}  # every batch of every client
    assert all(v.dtype == torch.float32 for v in runs["bf16"][0].model.state_dict().values() if v.is_floating_point())
    fp32, bf16 = runs["fp32"][0].history.rows, runs["bf16"][0].history.rows
    assert [r["test_loss"] for r in fp32] != [r["test_loss"] for r in bf16]  # the arithmetic did change
    assert all(abs(a["test_loss"] - b["test_loss"]) < 0.1 for a, b in zip(fp32, bf16))  # ... only a little


def test_each_step_under_mixed_precision_computes_with_the_weights_the_last_step_left():
    """The engine's autocast spans a client's whole training; with autocast's weight cache on, every step after
    the first computed with the bf16 copies of the starting weights, so bf16 runs did not learn (SA-FedLoRA's
    micro run: 0.125 test accuracy in bf16 against 1.0 in fp32, on the first GPU run and on the CPU alike)."""
    from fedcore.runtime.placement import training_precision
    from fedcore.testing import tiny_data, tiny_model
    from fedcore.types import ClientData

    train, _ = tiny_data()
    data = ClientData(dataset=train, indices=range(16))  # one batch, the same one every step
    losses = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model, seen = tiny_model(), []

        def loss(module, x, y, seen=seen):
            value = torch.nn.functional.cross_entropy(module(x).float(), y)
            seen.append(float(value))
            return value

        with training_precision(Placement(precision=precision)):
            train_epochs(model, data, epochs=6, lr=0.5, batch_size=16, loss=loss)
        losses[precision] = seen
    assert all(b < a for a, b in zip(losses["bf16"], losses["bf16"][1:])), \
        f"bf16 steps did not move the loss: {losses['bf16']}"
    assert all(abs(a - b) < 0.05 for a, b in zip(losses["fp32"], losses["bf16"])), losses


def test_fp32_on_the_cpu_is_the_default_and_bit_identical():
    a = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=2)
    b = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=2, device="cpu", precision="fp32")
    assert a.history.comparable() == b.history.comparable()


def test_data_is_placed_once_as_one_array_dataset_and_batches_follow_it():
    meta = Placement(device="meta")  # a device without memory: shows where tensors go without a GPU
    ds = ArrayDataset(torch.randn(10, 3), torch.arange(10) % 2)
    placed = meta.place_data(ds)
    assert placed.x.device.type == "meta" and placed.y.device.type == "meta" and placed.classes == ds.classes
    listed = meta.place_data([(torch.ones(3) * i, i % 2) for i in range(4)])  # any map-style dataset is stacked
    assert isinstance(listed, ArrayDataset) and listed.x.shape == (4, 3) and listed.x.device.type == "meta"
    x, y = next(batches(placed, range(10), 4, generator=torch.Generator().manual_seed(0)))
    assert x.device.type == "meta" and x.shape == (4, 3) and y.shape == (4,)
    assert Placement().place_data(ds) is ds  # the CPU: nothing moves, nothing is copied


def test_a_checkpoint_resumes_on_another_device_setting(tmp_path):
    """The CPU side of "a GPU run resumes on the CPU": checkpoints hold CPU tensors and are mapped on load;
    a run checkpointed with device="cpu" resumes with device="auto" (the CPU here) to the same history."""
    from safetensors.torch import load_file

    from fedcore.engine.checkpoint import Checkpointer

    class Stop(Exception):
        pass

    def stop(row):
        if row["round"] == 2:
            raise Stop

    full = run_tiny_pipeline([UniformSync(fraction=0.5), SGDUpdate(lr=0.1)], rounds=4)
    with pytest.raises(Stop):
        run_tiny_pipeline([UniformSync(fraction=0.5), SGDUpdate(lr=0.1)], rounds=4, device="cpu",
                          checkpoint=Checkpointer(tmp_path, every=1), on_round=stop)
    saved = load_file(str(sorted(tmp_path.glob("round-*"))[-1] / "tensors.safetensors"))
    assert saved and all(t.device.type == "cpu" for t in saved.values())
    resumed = run_tiny_pipeline([UniformSync(fraction=0.5), SGDUpdate(lr=0.1)], rounds=4, device="auto",
                                checkpoint=Checkpointer(tmp_path, every=1, resume=True))
    assert resumed.history.comparable() == full.history.comparable()


# -- on a GPU (not run on CPU-only machines) --------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
def test_gpu_run_keeps_model_and_data_on_the_gpu_and_matches_the_cpu_closely():
    cpu = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=3)
    gpu = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=3, device="cuda")
    assert all(v.device.type == "cuda" for v in gpu.model.state_dict().values())
    assert gpu.run.train.x.device.type == "cuda"
    for a, b in zip(cpu.history.rows, gpu.history.rows):
        assert abs(a["test_loss"] - b["test_loss"]) < 1e-3


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpu_mixed_precision_trains(precision):
    result = run_tiny_pipeline([UniformSync(fraction=1.0), SGDUpdate(lr=0.1)], rounds=3, device="cuda",
                               precision=precision)
    losses = [r["test_loss"] for r in result.history.rows]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


@pytest.mark.gpu
@needs_cuda
def test_a_gpu_checkpoint_resumes_on_the_cpu_and_back(tmp_path):
    from fedcore.engine.checkpoint import Checkpointer

    class Stop(Exception):
        pass

    def stop_at(n):
        def stop(row):
            if row["round"] == n:
                raise Stop
        return stop

    parts = [UniformSync(fraction=0.5), SGDUpdate(lr=0.1)]
    full = run_tiny_pipeline(parts, rounds=5, device="cuda")
    with pytest.raises(Stop):
        run_tiny_pipeline(parts, rounds=5, device="cuda", checkpoint=Checkpointer(tmp_path, every=1),
                          on_round=stop_at(2))
    with pytest.raises(Stop):
        run_tiny_pipeline(parts, rounds=5, device="cpu", checkpoint=Checkpointer(tmp_path, every=1, resume=True),
                          on_round=stop_at(3))
    resumed = run_tiny_pipeline(parts, rounds=5, device="cuda", checkpoint=Checkpointer(tmp_path, every=1, resume=True))
    assert len(resumed.history.rows) == 5
    assert all(v.device.type == "cuda" for v in resumed.model.state_dict().values())
    for a, b in zip(full.history.rows, resumed.history.rows):
        assert abs(a["test_loss"] - b["test_loss"]) < 1e-3  # CPU and GPU arithmetic differ in the last bits


@pytest.mark.gpu
@needs_cuda
@pytest.mark.integration
def test_ray_workers_train_on_fractional_gpus():
    pytest.importorskip("ray")
    from fedcore.engine.ray_executor import RayExecutor

    with pytest.raises(ConfigError, match="needs GPUs on its workers: set executor.gpus_per_worker"):
        run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=1, device="cuda", executor=RayExecutor(num_workers=2))
    inline = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=2, device="cuda")
    ray_run = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=2, device="cuda",
                                executor=RayExecutor(num_workers=2, gpus_per_worker=0.5))
    for a, b in zip(inline.history.rows, ray_run.history.rows):
        assert abs(a["test_loss"] - b["test_loss"]) < 1e-4

"""Client-side peak memory and step time: a LoRA local update vs a full fine-tune of the same model.

    nice python benchmarks/lora_memory.py [--steps 6] [--repeats 3]

Each measurement runs in a fresh subprocess (one thread): peak RSS growth over the model and data
already in memory (``ru_maxrss``; torch's CPU allocator returns freed blocks, so the peak is the
training peak), and the median step time (forward, backward, SGD with momentum) after one warm-up
step. Modes alternate, so background load hits both alike. Beside RSS (which includes allocator
slack), the *accounted* training memory is deterministic: bytes of tensors saved for backward
(activations, counted once per storage, parameters excluded) + gradients + momentum buffers. The model is a
ViT-S-sized timm VisionTransformer (width 384, depth 12, 6 heads) on 32x32 inputs, patch 4, batch 32.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def child(mode: str, steps: int, rank: int) -> None:
    import torch
    from torch import nn

    from fedcore.models import micro_vit
    from fedcore_lora import inject_lora

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = micro_vit(num_classes=10, in_chans=3, img_size=32, patch_size=4, embed_dim=384, depth=12, num_heads=6,
                      mlp_ratio=4.0)
    if mode == "lora":
        inject_lora(model, rank=rank, seed=0)
        for p in model.head.parameters():
            p.requires_grad_(True)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    param_ptrs = {p.data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in param_ptrs:
            saved[t.data_ptr()] = max(saved.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return t

    times = []
    for step in range(steps + 1):
        t = time.perf_counter()
        if step == 0:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = nn.functional.cross_entropy(model(x), y)
        else:
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    state_bytes = sum(p.numel() * p.element_size() for p in params) * 2  # gradient + momentum buffer
    print(json.dumps({"mode": mode, "peak_growth_mib": (peak - base) / 1024,
                      "saved_activations_mib": sum(saved.values()) / 2 ** 20, "grad_and_opt_mib": state_bytes / 2 ** 20,
                      "step_s": statistics.median(times[1:]),
                      "trainable": sum(p.numel() for p in params),
                      "params": sum(p.numel() for p in model.parameters())}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.rank)
        return
    results: dict[str, list[dict]] = {"full": [], "lora": []}
    for _ in range(args.repeats):
        for mode in ("full", "lora"):
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(args.steps), "--rank",
                                  str(args.rank)], capture_output=True, text=True, check=True)
            results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = ("peak_growth_mib", "step_s", "saved_activations_mib", "grad_and_opt_mib")
    med = {m: {k: statistics.median(r[k] for r in rs) for k in keys} for m, rs in results.items()}
    full, lora = med["full"], med["lora"]
    info = results["lora"][0]
    print(f"model: timm ViT w384 d12 (params {info['params']:,}); LoRA r={args.rank} on qkv|proj|fc1|fc2 + head "
          f"(trainable {info['trainable']:,}); batch 32, 32x32, SGD momentum, 1 thread; median of {args.repeats}")
    print(f"{'':6s} {'RSS peak growth MiB':>20s} {'saved activations MiB':>22s} {'grads+momentum MiB':>19s} "
          f"{'accounted MiB':>14s} {'step time s':>12s}")
    for m in ("full", "lora"):
        acc = med[m]["saved_activations_mib"] + med[m]["grad_and_opt_mib"]
        print(f"{m:6s} {med[m]['peak_growth_mib']:20.1f} {med[m]['saved_activations_mib']:22.1f} "
              f"{med[m]['grad_and_opt_mib']:19.1f} {acc:14.1f} {med[m]['step_s']:12.3f}")
    accounted = {m: med[m]["saved_activations_mib"] + med[m]["grad_and_opt_mib"] for m in med}
    print(f"ratio lora/full: RSS peak {lora['peak_growth_mib'] / full['peak_growth_mib']:.3f}, accounted "
          f"{accounted['lora'] / accounted['full']:.3f}, step time {lora['step_s'] / full['step_s']:.3f}")


if __name__ == "__main__":
    main()

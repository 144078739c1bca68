"""Cost-model check: measured FLOPs of a micro ViT against an analytic count, and virtual time vs device speed.

    python benchmarks/cost_model.py

1. FLOPs per sample of timm's VisionTransformer (width 64, depth 4, 8x8 digits, patch 2) measured by
   ``fedcore.runtime.measure`` (torch.utils.flop_counter on one real forward+backward) next to the
   count by hand (2 FLOPs per multiply-add), for the whole model and for a share with a frozen backbone.
2. The same FedAvg round on the micro ViT priced on a profile and on the profile at half speed (a phone,
   where links dominate, and Tree Learning's medium tier, where compute does): compute time must double,
   communication must not change, round time = compute + communication.
3. The cost of measuring (once per share shape) against pricing a job from the cache.
4. A measurement on the meta device (a dry run's) without and with the meta kernel memo
   (``fedcore.runtime.meta_kernels.MetaShapeMemo``), the memo empty (cold) and filled (warm), interleaved:
   CPU seconds, ratios against no memo (min and median over the rounds), and the counts, which must be equal.
"""
from __future__ import annotations

import time

import torch

from fedcore.builtin import IIDPartition, SGDUpdate
from fedcore.data import load_digits
from fedcore.models import micro_vit
from fedcore.pipeline import Pipeline
from fedcore.runtime import SimClock, measure, presets


def analytic(T=17, D=64, depth=4, hidden=128, patches=16, patch_in=4, classes=10):
    """(forward, forward+backward without recompute, forward+backward with fused-attention recompute) per sample."""
    patch = 2 * patches * patch_in * D
    qkv, attn, proj, mlp = 2 * T * D * 3 * D, 2 * (2 * T * T * D), 2 * T * D * D, 2 * 2 * T * D * hidden
    forward = patch + depth * (qkv + attn + proj + mlp) + 2 * D * classes
    # backward = 2x forward per matmul (input and weight gradients), except the first layer, whose input needs none
    train = 3 * forward - patch
    # CPU/flash SDPA backward recomputes Q K^T: one more of the two forward attention matmuls per block
    return forward, train, train + depth * attn // 2


def main() -> None:
    torch.set_num_threads(1)
    x = torch.randn(2, 1, 8, 8)
    fwd, train_plain, train_fused = analytic()
    full = measure(micro_vit(), x)
    frozen_model = micro_vit()
    for name, p in frozen_model.named_parameters():
        p.requires_grad = name.startswith("head")
    frozen = measure(frozen_model, x)
    print("1. FLOPs per sample, micro ViT (timm VisionTransformer, D=64, depth 4, 17 tokens)")
    print(f"   {'':38s}{'measured':>14s}{'analytic':>14s}{'ratio':>8s}")
    rows = [("forward", full.forward_flops, fwd),
            ("forward+backward (fused attention)", full.train_flops, train_fused),
            ("forward+backward (no recompute)", full.train_flops, train_plain),
            ("frozen backbone, head trains", frozen.train_flops, fwd + 2 * 64 * 10)]
    for label, m, a in rows:
        print(f"   {label:38s}{m:14,.0f}{a:14,.0f}{m / a:8.4f}")
    print(f"   train/forward ratio: {full.train_flops / full.forward_flops:.3f} (whole model), "
          f"{frozen.train_flops / frozen.forward_flops:.4f} (frozen backbone)")

    train, test = load_digits(seed=0)
    train = train.subset(range(320))
    base = presets()
    print("\n2. One FedAvg round of the micro ViT on one client (320 digits, 1 epoch), at full and half speed")
    print(f"   {'profile':12s}{'':18s}{'full speed':>12s}{'half speed':>12s}{'ratio':>8s}{'expected':>10s}")
    for name in ("phone", "tl-medium"):
        table = {"full": base[name], "half": base[name].scaled(speed=0.5, name="half")}
        out = {}
        for key in table:
            torch.manual_seed(0)
            pipe = Pipeline([IIDPartition(), SGDUpdate(lr=0.05, epochs=1, batch_size=32)])
            result = pipe.run(model=micro_vit(num_classes=10), train=train, test=None, num_clients=1, rounds=1,
                              seed=0, clock=SimClock(table), profiles=[key])
            out[key] = result.history[-1]
        a, b = out["full"], out["half"]
        c, m = a["virtual_compute_s"], a["virtual_comm_s"]
        for label, key, expected in (("compute", "virtual_compute_s", 2.0), ("communication", "virtual_comm_s", 1.0),
                                     ("round time", "virtual_time", (2 * c + m) / (c + m))):
            print(f"   {name if label == 'compute' else '':12s}{label:18s}{a[key]:12.4f}{b[key]:12.4f}"
                  f"{b[key] / a[key]:8.4f}{expected:10.4f}")
    phone = base["phone"]

    clock = SimClock({"phone": phone})
    pipe = Pipeline([IIDPartition()])
    pipe.run(model=micro_vit(num_classes=10), train=train, test=None, num_clients=2, rounds=1, seed=0, clock=clock,
             profiles=["phone"] * 2)
    client = clock._run.clients[0]
    from fedcore.types import Share

    model = micro_vit(num_classes=10)
    share = Share(module=model, download=(), upload=())
    t0 = time.perf_counter()
    measure(model, clock._example(client))
    t_measure = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(100):
        clock.cost(client, share)
    t_cached = (time.perf_counter() - t0) / 100
    print(f"\n3. measuring a share shape: {t_measure * 1e3:.1f} ms once; pricing from the cache: "
          f"{t_cached * 1e3:.3f} ms per job ({t_measure / t_cached:.0f}x cheaper)")


    print("\n4. a meta measurement without / with the meta kernel memo (CPU ms; ratio to no memo, min / median)")
    meta_memo()


def meta_memo(rounds: int = 5) -> None:
    import contextlib
    import statistics
    from unittest import mock
    import warnings

    import fedcore
    from fedcore.runtime import meta_kernels

    registry = fedcore.plugins.registry()
    cases = [("micro-cnn", {}, (1, 8, 8)), ("micro-vit", {"embed_dim": 32, "depth": 2, "num_heads": 2}, (1, 8, 8)),
             ("kd.fedvkd", {"num_classes": 4, "image_size": 8, "width": 4, "embed_dim": 16, "depth": 1,
                            "num_heads": 2}, (3, 8, 8)),
             ("open_clip", {"classnames": ["a", "b", "c"], "n_ctx": 4}, (3, 16, 16))]

    def timed(module: torch.nn.Module, x: torch.Tensor, how: str) -> tuple[float, object]:
        if how == "cold":
            meta_kernels._memo.clear()
        off = mock.patch.object(meta_kernels, "memoised_meta_kernels", contextlib.nullcontext) if how == "none" \
            else contextlib.nullcontext()
        with off:
            t0 = time.process_time()
            cost = measure(module, x)
            return time.process_time() - t0, cost

    print(f"   {'model':12s}{'no memo':>10s}{'cold':>10s}{'warm':>10s}{'cold ratio':>18s}{'warm ratio':>18s}  equal")
    for name, settings, shape in cases:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = registry.get(name, "model").obj(**settings)
        x = torch.rand(2, *shape, device="meta")
        times: dict[str, list[float]] = {"none": [], "cold": [], "warm": []}
        costs = set()
        timed(model, x, "none")
        for _ in range(rounds):
            for how in times:
                t, cost = timed(model, x, how)
                times[how].append(t)
                costs.add(cost)
        ratios = {how: [a / b for a, b in zip(times[how], times["none"])] for how in ("cold", "warm")}
        print(f"   {name:12s}" + "".join(f"{1e3 * min(times[h]):10.1f}" for h in times)
              + "".join(f"{min(ratios[h]):9.2f} /{statistics.median(ratios[h]):5.2f}" for h in ratios)
              + f"  {len(costs) == 1}")


if __name__ == "__main__":
    main()

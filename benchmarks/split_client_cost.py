"""Client-side FLOPs and training memory per round: FedV's client (head + tail) vs FedAvg's (the whole ViT).

    nice python benchmarks/split_client_cost.py [--samples 64] [--batch 16]

For each model size (the micro ViT of the examples, and a ViT-S-sized timm VisionTransformer: width
384, depth 12, 6 heads, on 3x32x32 inputs, patch 4), one local round of ``samples`` examples is run
twice, side by side on the same batches:

* FedAvg client: forward + backward of the whole model, Adam step;
* FedV client: exactly the client's side of ``fedcore_split.train_split`` (head forward, tail forward
  and backward on the server output ``b``, head backward with the returned ``dL/dh``), Adam step on
  head + tail. The server's encoder work is not the client's and is not counted (it is printed apart).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` (matmuls and convolutions, forward and
backward; optimizer arithmetic is not counted). Memory is *accounted*, so it is deterministic under
load: trainable parameters + their gradients + Adam's two moments + the tensors saved for backward
(activations, each storage counted once, parameters excluded), peak over the batches; the frozen
parameters a client must still hold are counted in ``held``.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fedcore.models import micro_vit
from fedcore_split import Segment, split_layout


class SavedBytes:
    """Bytes of distinct storages saved for backward (parameters excluded)."""

    def __init__(self, params: set[int]) -> None:
        self.params, self.seen, self.bytes = params, set(), 0

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage().data_ptr()
        if key not in self.params and key not in self.seen:
            self.seen.add(key)
            self.bytes += t.untyped_storage().nbytes()
        return t

    def __enter__(self) -> SavedBytes:
        self.ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        self.ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.ctx.__exit__(*exc)


def nbytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def counted(total: list[int]):
    """A FLOP counter whose count is added to ``total[0]`` on exit (client-side chunks only)."""
    class _Counter(FlopCounterMode):
        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            total[0] += self.get_total_flops()
            return out
    return _Counter(display=False)


def fedavg_batch(model: nn.Module, x, y, opt, total: list[int]) -> int:
    ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with counted(total):
        with SavedBytes(ptrs) as saved:
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return saved.bytes


def fedv_batch(client: Segment, server: Segment, x, y, opt, total: list[int]) -> int:
    """One FedV client batch; the server's forward and input backward run outside the client's counter."""
    ptrs = {p.untyped_storage().data_ptr() for p in client.parameters()}
    opt.zero_grad()
    with counted(total), SavedBytes(ptrs) as saved:
        h = client.run("bottom", x)
    hs = h.detach().requires_grad_(True)
    b_graph = server(hs)                                      # server: encoder forward
    b = b_graph.detach().requires_grad_(True)
    with counted(total):
        with SavedBytes(ptrs) as saved_top:
            loss = nn.functional.cross_entropy(client.run("top", b), y)
        loss.backward()
    grad_h = torch.autograd.grad(b_graph, hs, b.grad)[0]      # server: input-gradient backward
    with counted(total):
        h.backward(grad_h)
        opt.step()
    return saved.bytes + saved_top.bytes


def measure(name: str, factory, shape, samples: int, batch: int) -> dict:
    torch.manual_seed(0)
    full = factory()
    lay = split_layout(full, "patch_embed", "norm")
    client = Segment(full, {"bottom": lay["bottom"], "top": lay["top"]})
    server = Segment(full, {"server": lay["server"]})
    gen = torch.Generator().manual_seed(0)
    data = [(torch.rand((batch, *shape), generator=gen), torch.randint(0, 5, (batch,), generator=gen))
            for _ in range(samples // batch)]
    out = {}
    for mode in ("FedAvg", "FedV"):
        params = list(full.parameters()) if mode == "FedAvg" else list(client.parameters())
        opt = torch.optim.Adam(params, lr=1e-3)
        total, peak = [0], 0
        for x, y in data:
            act = (fedavg_batch(full, x, y, opt, total) if mode == "FedAvg"
                   else fedv_batch(client, server, x, y, opt, total))
            peak = max(peak, act)
        train_state = nbytes(params) * 4  # weights, gradients, Adam m and v
        out[mode] = {"flops": total[0], "activations": peak, "train_state": train_state,
                     "memory": peak + train_state, "held": nbytes(params), "params": sum(p.numel() for p in params)}
    enc = FlopCounterMode(display=False)
    server.requires_grad_(False)  # FedV's server: encoder forward + input-gradient backward, no weight gradients
    with enc:
        for x, _ in data:
            h = client.run("bottom", x).detach().requires_grad_(True)
            b = server(h)
            b.backward(torch.ones_like(b))
    out["server"] = enc.get_total_flops()
    a, v = out["FedAvg"], out["FedV"]
    print(f"\n{name}: {samples} samples/round, batch {batch}")
    print(f"  {'':8s} {'trainable':>12s} {'GFLOP/round':>12s} {'activations':>12s} {'train memory':>13s}")
    for mode in ("FedAvg", "FedV"):
        r = out[mode]
        print(f"  {mode:8s} {r['params']:12,d} {r['flops'] / 1e9:12.4f} {r['activations'] / 2**20:10.2f} MiB "
              f"{r['memory'] / 2**20:10.2f} MiB")
    print(f"  FedV / FedAvg client: FLOPs {v['flops'] / a['flops']:.4f}, training memory "
          f"{v['memory'] / a['memory']:.4f}, parameters held {v['held'] / a['held']:.4f}  "
          f"(server encoder per round: {out['server'] / 1e9:.4f} GFLOP forward + input backward)")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=64, help="samples in the client's round")
    parser.add_argument("--batch", type=int, default=16)
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    measure("micro ViT (width 64, depth 4, 1x8x8, patch 2)", lambda: micro_vit(num_classes=5), (1, 8, 8),
            a.samples, a.batch)
    measure("ViT-S-sized (width 384, depth 12, 3x32x32, patch 4)",
            lambda: micro_vit(num_classes=5, in_chans=3, img_size=32, patch_size=4, embed_dim=384, depth=12,
                              num_heads=6, mlp_ratio=4.0), (3, 32, 32), a.samples, a.batch)


if __name__ == "__main__":
    main()

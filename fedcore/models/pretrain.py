"""'Pre-trained' micro backbones made by fedcore itself, cached on disk.

No weights can be downloaded here, so "pre-trained" means: a micro model trained centrally on a
*source* task disjoint from the federated *target* task (by default digits 0-4 as source and
digits 5-9 as target), deterministic by seed, cached as safetensors keyed on every setting.
Reports must say so. The real loading path (timm ``pretrained=True``) stays available to users
with weights.

    python -m fedcore.models.pretrain --model micro-vit     # build (or find) the cached backbone
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

SOURCE_CLASSES = (0, 1, 2, 3, 4)
TARGET_CLASSES = (5, 6, 7, 8, 9)


BUILD_THREADS = 1
"""Intra-op torch threads every cached artefact is built with: float sums split over threads are added in
another order, so weights built with 1 and with 2 threads differ (a micro ViT scored 0.885 vs 0.934)."""
FORMAT = 2
"""Cache format; 2 = built under :func:`deterministic_build` (format 1 files, built with whatever thread count
the process had, are never read)."""


@contextlib.contextmanager
def deterministic_build() -> Iterator[None]:
    """Inside the block torch runs on :data:`BUILD_THREADS` intra-op threads with deterministic algorithms, so a
    cached artefact is bit-identical whatever process builds it; the caller's settings come back afterwards."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(BUILD_THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def cache_root() -> Path:
    return Path(os.environ.get("FEDCORE_CACHE", Path.home() / ".cache" / "fedcore")) / "pretrained"


def build_model(name: str, **kwargs: Any) -> nn.Module:
    from fedcore.models import micro

    factories: dict[str, Callable[..., nn.Module]] = {"micro-vit": micro.micro_vit, "micro-cnn": micro.micro_cnn,
                                                      "tiny-mlp": micro.tiny_mlp}
    if name not in factories:
        raise ValueError(f"model={name!r}; choose one of: {', '.join(factories)}")
    return factories[name](**kwargs)


def retarget(model: nn.Module, num_classes: int, *, seed: int = 0) -> nn.Module:
    """Replace the classification head with a fresh, seeded one for ``num_classes`` classes (in place)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reset = getattr(model, "reset_classifier", None)
        if callable(reset):  # timm models
            reset(num_classes)
        elif isinstance(model, nn.Sequential) and isinstance(model[-1], nn.Linear):
            model[-1] = nn.Linear(model[-1].in_features, num_classes)
        else:
            raise TypeError(f"do not know how to replace the head of a {type(model).__name__}")
    return model


def pretrain(model: str = "micro-vit", *, source_classes: tuple[int, ...] = SOURCE_CLASSES, epochs: int = 40,
             lr: float = 2e-3, batch_size: int = 64, seed: int = 0, model_kwargs: dict[str, Any] | None = None,
             cache: bool = True, verbose: bool = False) -> tuple[nn.Module, dict[str, Any]]:
    """Train ``model`` on the digits of ``source_classes`` (AdamW, cosine schedule) or load it from the cache.

    Returns the model with its source head and an info dict (source accuracy, cache path, settings).
    """
    from safetensors.torch import load_file

    from fedcore.data.arrays import batches
    from fedcore.data.digits import load_digits
    from fedcore.rng import torch_generator

    settings = {"model": model, "source_classes": list(source_classes), "epochs": epochs, "lr": lr,
                "batch_size": batch_size, "seed": seed, "model_kwargs": model_kwargs or {}, "format": FORMAT,
                "build_threads": BUILD_THREADS}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / f"{model}-{key}.safetensors"
    kwargs = dict(model_kwargs or {}, num_classes=len(source_classes))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = build_model(model, **kwargs)
    if cache and path.exists():
        net.load_state_dict(load_file(str(path)))
        info = json.loads(path.with_suffix(".json").read_text())
        return net, info
    from fedcore.builtin.global_eval import accuracy_and_loss

    train, test = load_digits(classes=tuple(source_classes), seed=seed)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.05)
    steps = epochs * ((len(train) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch_generator(seed, "pretrain", model)
    with torch.random.fork_rng(devices=[]), deterministic_build():
        torch.manual_seed(seed)
        for epoch in range(epochs):
            net.train()
            for x, y in batches(train, range(len(train)), batch_size, generator=gen):
                loss = nn.functional.cross_entropy(net(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
            if verbose and (epoch + 1) % 10 == 0:
                print(f"pretrain {model} epoch {epoch + 1}/{epochs} loss {float(loss):.3f}")
        acc, _ = accuracy_and_loss(net, test)
    info = dict(settings, source_accuracy=acc, path=str(path),
                note="pre-trained by fedcore on a disjoint source task (digits of source_classes); no external weights")
    if cache:
        write_cached(path, net.state_dict(), info)
    return net, info


def write_cached(path: Path, state: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
    """Write ``state`` as safetensors and ``info`` as JSON beside it; both appear atomically, the weights last.

    Temporary names are per process: two processes building the same model at once (test workers, sweep jobs on
    a cold cache) each write their own file, and the last rename wins with identical content."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    meta = path.with_suffix(".json")
    tmp_meta = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
    tmp_meta.write_text(json.dumps(info, indent=1))
    os.replace(tmp_meta, meta)
    os.replace(tmp, path)


def pretrained_for_target(model: str = "micro-vit", *, target_classes: tuple[int, ...] = TARGET_CLASSES,
                          head_seed: int = 0, **kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """The cached source-task backbone with a fresh head for ``target_classes`` (default digits 5-9)."""
    source = kwargs.pop("source_classes", SOURCE_CLASSES)
    overlap = set(source) & set(target_classes)
    if overlap:
        raise ValueError(f"source_classes and target_classes overlap on {sorted(overlap)}; they must be disjoint")
    net, info = pretrain(model, source_classes=source, **kwargs)
    return retarget(net, len(target_classes), seed=head_seed), info


def micro_vit_pretrained(*, num_classes: int | None = None, target_classes: Sequence[int] = TARGET_CLASSES,
                         source_classes: Sequence[int] = SOURCE_CLASSES, epochs: int = 40, seed: int = 0,
                         head_seed: int = 0) -> nn.Module:
    """timm micro ViT pre-trained by fedcore on digits ``source_classes`` (cached), fresh head for ``target_classes``.

    The config name ``micro-vit-pretrained``; pair it with ``dataset = { name = "digits", classes = [5, 6, 7, 8, 9] }``.
    ``num_classes`` (filled from the data set by a config) must equal the number of target classes.
    """
    target, source = tuple(int(c) for c in target_classes), tuple(int(c) for c in source_classes)
    if num_classes is not None and num_classes != len(target):
        raise ValueError(f"num_classes = {num_classes} but target_classes {list(target)} has {len(target)}; give the "
                         f"data set the target classes (digits with classes = {list(target)})")
    return pretrained_for_target("micro-vit", target_classes=target, source_classes=source, epochs=epochs,
                                 seed=seed, head_seed=head_seed)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="micro-vit")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _, info = pretrain(args.model, epochs=args.epochs, seed=args.seed, verbose=True)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()

"""Where a run computes and in which precision: ``device`` and ``precision`` from a config, ``--set`` or ``run()``.

    placement = Placement.resolve(device="auto", precision="bf16")   # cuda if present, else mps, else cpu
    model = placement.place_model(model); train = placement.place_data(train)   # once, at set-up
    with placement.autocast():                                       # around client training
        ...

``device`` is ``"auto" | "cpu" | "cuda" | "cuda:N" | "mps"``; asking for one this machine lacks is a
:class:`~fedcore.errors.ConfigError` naming it (``fedcore run`` prints it and exits 2). ``precision`` is
``"fp32"`` (exact, the default), ``"bf16"`` (autocast to bfloat16, on every device, the CPU included) or
``"fp16"`` (autocast to float16 with loss scaling, on CUDA and MPS only: the CPU has no fast float16 and
refuses it). Parameters, optimizer state and aggregation stay in float32: mixed precision changes only the
forward/backward arithmetic inside client training.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
import contextlib
import contextvars
from typing import Any

import attrs
import torch

from fedcore.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
"""What ``device`` accepts (``cuda:N`` for the N-th GPU)."""

PRECISIONS = ("fp32", "bf16", "fp16")
"""What ``precision`` accepts."""

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(spec: str | torch.device) -> torch.device:
    """The torch device for ``spec``; a device this machine lacks is one clear ConfigError."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    if not isinstance(spec, str):
        raise ConfigError(f"device={spec!r} has type {type(spec).__name__}; expected one of: {', '.join(DEVICES)}")
    text = spec.strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        if not _mps_available():
            raise ConfigError("device='mps' but this machine has no usable Apple GPU (torch.backends.mps is not "
                              "available); use device='cpu' or device='auto'")
        return torch.device("mps")
    if text == "cuda" or text.startswith("cuda:"):
        index = text.partition(":")[2]
        if index and not index.isdigit():
            raise ConfigError(f"device={spec!r}: the GPU index must be a number, e.g. 'cuda:0'")
        if not torch.cuda.is_available():
            build = "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no GPU visible"
            raise ConfigError(f"device={spec!r} but CUDA is not available on this machine (torch {torch.__version__}, "
                              f"{build}); use device='cpu' or device='auto'")
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(f"device={spec!r} but this machine has {torch.cuda.device_count()} CUDA device(s) "
                              f"(cuda:0 .. cuda:{torch.cuda.device_count() - 1})")
        return torch.device(text)
    raise ConfigError(f"device={spec!r} is not allowed; choose one of: {', '.join(DEVICES)}")


@attrs.frozen(kw_only=True)
class Placement:
    """A resolved device and precision; picklable, so it travels with client jobs to Ray workers."""

    device: str = "cpu"
    precision: str = "fp32"

    @classmethod
    def resolve(cls, *, device: str | torch.device = "cpu", precision: str = "fp32",
                components: Iterable[Any] = ()) -> Placement:
        """Check both settings on this machine and for the pipeline's ``components`` (one ConfigError naming the
        bad one): ``fp16`` is refused for a component that trains without loss scaling (see :func:`fp16_refusal`)."""
        if precision not in PRECISIONS:
            raise ConfigError(f"precision={precision!r} is not allowed; choose one of: {', '.join(PRECISIONS)}")
        refusal = fp16_refusal(components) if precision == "fp16" else None
        if refusal is not None:
            raise ConfigError(refusal)
        where = resolve_device(device)
        if precision == "fp16" and where.type == "cpu":
            raise ConfigError("precision='fp16' needs a CUDA or MPS device: the CPU has no fast float16 and no loss "
                              "scaling; use precision='bf16' (autocast on the CPU) or 'fp32'")
        return cls(device=str(where), precision=precision)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def is_default(self) -> bool:
        """fp32 on the CPU: nothing to move and nothing to cast (existing runs stay bit-identical)."""
        return self.device == "cpu" and self.precision == "fp32"

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Mixed precision for client training (``torch.autocast``); a no-op context in fp32.

        Without autocast's weight cache: the context spans a client's whole training, many optimiser steps, and the
        cache would keep serving the half-precision copies of the weights the first forward made; every later step
        would compute with the weights the client started from (the first GPU run's bf16 runs did not learn)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.torch_device.type, dtype=_DTYPES[self.precision], cache_enabled=False)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A loss scaler for fp16 (float16 gradients underflow without one); ``None`` otherwise."""
        if self.precision != "fp16":
            return None
        return torch.amp.GradScaler(self.torch_device.type)

    def place_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device in place (parameters and buffers stay float32)."""
        return model.to(self.torch_device)

    def place_data(self, dataset: Any) -> Any:
        """The dataset on the device, once: tensors moved (an ``ArrayDataset``), any other map-style dataset
        stacked into one first. On the CPU the dataset is returned as it is."""
        if dataset is None or self.torch_device.type == "cpu":
            return dataset
        from fedcore.data.arrays import ArrayDataset
        from fedcore.data.images import ImageDataset

        if isinstance(dataset, ImageDataset):  # compact images move as they are, made into inputs per batch
            return dataset.to(self.torch_device)
        if not isinstance(dataset, ArrayDataset):
            items = [dataset[i] for i in range(len(dataset))]
            classes = getattr(dataset, "classes", None)
            dataset = ArrayDataset(torch.stack([torch.as_tensor(x) for x, _ in items]),
                                   torch.as_tensor([int(y) for _, y in items]),
                                   [str(c) for c in classes] if classes else None)
        return ArrayDataset(dataset.x.to(self.torch_device), dataset.y.to(self.torch_device), dataset.classes,
                            columns=getattr(dataset, "columns", None))


def fp16_refusal(components: Iterable[Any]) -> str | None:
    """Why ``precision = "fp16"`` cannot train with these components, or ``None``.

    float16 gradients underflow to zero and overflow to inf without loss scaling; :func:`fedcore.training.train_epochs`
    scales (``torch.amp.GradScaler``), but a component with its own training loop that does not says so with the
    class attribute ``loss_scaling = False``, and fp16 is then refused in one line (bf16 needs no scaling).
    """
    for component in components:
        if getattr(type(component), "loss_scaling", True) is False:
            from fedcore import plugins

            entry = plugins.registry().find(component)
            name = entry.name if entry is not None else type(component).__name__
            return (f"precision='fp16': {name!r} trains without loss scaling (float16 gradients under- and overflow "
                    f"without it); use precision='bf16' (no scaling needed) or 'fp32'")
    return None


_ACTIVE: contextvars.ContextVar[Placement | None] = contextvars.ContextVar("fedcore_placement", default=None)


@contextlib.contextmanager
def training_precision(placement: Placement | None) -> Iterator[None]:
    """Autocast around client training, and the placement :func:`active_placement` answers inside it."""
    token = _ACTIVE.set(placement)
    try:
        with placement.autocast() if placement is not None else contextlib.nullcontext():
            yield
    finally:
        _ACTIVE.reset(token)


def active_placement() -> Placement:
    """The placement of the client training running now (fp32 on the CPU outside one): the training loop
    reads it to scale fp16 losses."""
    return _ACTIVE.get() or Placement()


__all__ = ["DEVICES", "PRECISIONS", "Placement", "active_placement", "fp16_refusal", "resolve_device",
           "training_precision"]

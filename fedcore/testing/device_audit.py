"""A CPU stand-in for a GPU's device checks: a tensor made on the default device meeting the caller's tensors.

On a GPU, ``torch.zeros(shape)`` (no ``device=``) lands on the CPU, and adding it to a CUDA tensor raises "Expected
all tensors to be on the same device". On a CPU-only machine both are CPU tensors and the bug stays hidden until
someone runs on a GPU (the first GPU run found it in five plugins). :class:`DefaultDeviceAudit` shows it on the CPU:
inside the ``with`` block, a tensor made by a factory without ``device=`` (``zeros``, ``randn``, ``tensor``,
``from_numpy``, ...) is *unplaced*, and so is anything computed from unplaced tensors alone; an operation that
combines an unplaced tensor with a tensor from outside the block (the model, the updates: wherever they live) raises
:class:`DeviceMixError`. Moving a tensor with ``.to(device)``, ``.to(other)`` or ``.cuda()`` places it; zero-dim
tensors are exempt (CUDA accepts CPU scalars), as are copies and indexing (``copy_``, ``x[i] = ...``), which move
across devices by themselves.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any
import weakref

import torch
from torch.overrides import TorchFunctionMode

_FACTORIES = frozenset({
    torch.zeros, torch.ones, torch.empty, torch.full, torch.rand, torch.randn, torch.randint, torch.randperm,
    torch.normal, torch.tensor, torch.as_tensor, torch.arange, torch.linspace, torch.logspace,
    torch.eye, torch.bernoulli,
})
"""Functions that make a tensor on the default device unless told otherwise (``bernoulli``/``normal`` of a given
tensor inherit its device and are judged by their inputs instead)."""

_UNSEEN_FACTORIES = ("from_numpy", "frombuffer")
"""Factories a torch function mode does not see (no tensor goes in): the audit wraps them while it is active."""

_PLACERS = frozenset({torch.Tensor.to, torch.Tensor.cuda})
_CROSSING = frozenset({torch.Tensor.copy_, torch.Tensor.__setitem__, torch.Tensor.__getitem__,
                       torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.item, torch.Tensor.tolist,
                       torch.Tensor.__format__, torch.Tensor.__repr__})
"""Operations that cross devices by design (or leave torch): never a mix."""


class DeviceMixError(AssertionError):
    """An operation combined a tensor made on the default device with a tensor the code was given."""


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _names_a_device(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if kwargs.get("device") is not None:
        return True
    if func is torch.Tensor.cuda:
        return True
    return any(isinstance(a, (torch.device, str, torch.Tensor)) or type(a) is int for a in args[1:])


class DefaultDeviceAudit(TorchFunctionMode):
    """``with DefaultDeviceAudit(): ...`` raises :class:`DeviceMixError` where the code would mix devices on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self._unplaced: dict[int, weakref.ref[torch.Tensor]] = {}
        """Unplaced tensors by ``id`` (a ``WeakSet`` would compare tensors with ``==`` on a hash collision)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = list(_tensors((args, kwargs)))
        if func in _FACTORIES and not inputs:
            if kwargs.get("device") is None:
                self._mark(out)
            return out
        if func in _PLACERS:
            if _names_a_device(func, args, kwargs):
                self._place(out)  # ``.to(device)`` returns the tensor itself where it already is there
            elif any(self._is_unplaced(t) for t in inputs[:1]):
                self._mark(out)
            return out
        if func in _CROSSING:
            return out
        unplaced = [t for t in inputs if t.dim() > 0 and self._is_unplaced(t)]
        if not unplaced:
            return out
        given = [t for t in inputs if t.dim() > 0 and not self._is_unplaced(t)]
        if given:
            name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
            raise DeviceMixError(
                f"{name}: a tensor of shape {tuple(unplaced[0].shape)} made without device= (it lands on the CPU) "
                f"meets a tensor the code was given (shape {tuple(given[0].shape)}); on a GPU this raises 'Expected "
                f"all tensors to be on the same device'. Make it with device=<the given tensor>.device, or move it "
                f"with .to(that device)")
        self._mark(out)
        return out

    def __enter__(self) -> DefaultDeviceAudit:
        # from_numpy and frombuffer never reach a torch function mode: wrapped for the block's length
        self._unwrapped = {name: getattr(torch, name) for name in _UNSEEN_FACTORIES}
        for name, factory in self._unwrapped.items():
            setattr(torch, name, self._marking(factory))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for name, factory in self._unwrapped.items():
            setattr(torch, name, factory)

    def _marking(self, factory: Any) -> Any:
        def made_unplaced(*args: Any, **kwargs: Any) -> Any:
            out = factory(*args, **kwargs)
            self._mark(out)
            return out
        return made_unplaced

    def _is_unplaced(self, t: torch.Tensor) -> bool:
        ref = self._unplaced.get(id(t))
        return ref is not None and ref() is t

    def _place(self, out: Any) -> None:
        for t in _tensors(out):
            self._unplaced.pop(id(t), None)

    def _mark(self, out: Any) -> None:
        for t in _tensors(out):
            key = id(t)

            def forget(ref: weakref.ref[torch.Tensor], key: int = key) -> None:
                if self._unplaced.get(key) is ref:
                    del self._unplaced[key]

            self._unplaced[key] = weakref.ref(t, forget)


__all__ = ["DefaultDeviceAudit", "DeviceMixError"]

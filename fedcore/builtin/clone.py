"""A deep copy of an ``nn.Module`` that is about 3x cheaper than ``copy.deepcopy`` on small models.

Every dispatched client gets its own working copy of the global model, so on micro models the copy costs
a noticeable share of a round (``benchmarks/engine_overhead.py``). ``copy.deepcopy`` spends that time in
its generic reduce/reconstruct machinery. :func:`clone_module` walks the module tree directly: plain modules
get a fresh ``__dict__`` with cloned parameters and buffers, and everything it does not recognise
(a class with its own copy/pickle protocol, tensor subclasses, views, tensors with gradients, arbitrary
attribute values) goes to ``copy.deepcopy`` with the shared memo, so shared objects such as tied weights
stay shared exactly as ``deepcopy`` keeps them.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
import copy
from typing import Any, TypeVar, cast

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)

_ATOMS = frozenset((int, float, bool, complex, str, bytes, type(None)))
_PROTOCOL = ("__deepcopy__", "__copy__", "__reduce_ex__", "__reduce__", "__getstate__", "__setstate__")
_MODULE_IMPL = {name: getattr(nn.Module, name, None) for name in _PROTOCOL}
_plain_classes: dict[type, bool] = {}


def _plain_module_class(cls: type) -> bool:
    """Whether ``cls`` copies like ``nn.Module`` itself (no copy or pickle protocol of its own)."""
    ok = _plain_classes.get(cls)
    if ok is None:
        ok = _plain_classes[cls] = all(getattr(cls, n, None) is impl for n, impl in _MODULE_IMPL.items())
    return ok


def _plain_tensor(t: torch.Tensor, shared: set[int]) -> bool:
    """A dense leaf tensor with no gradient, no Python attributes and a storage no other tensor of the module uses."""
    return (t.is_leaf and t.grad is None and not t.__dict__ and t.layout == torch.strided and t._base is None
            and t.untyped_storage().data_ptr() not in shared)


def _shared_storages(module: nn.Module) -> set[int]:
    """Storages that several tensors of ``module`` point into (views, aliases).

    They go to deepcopy, which keeps them shared.
    """
    tensors: dict[int, torch.Tensor] = {}
    for m in module.modules():
        for t in (*m._parameters.values(), *m._buffers.values(),
                  *(v for v in m.__dict__.values() if isinstance(v, torch.Tensor))):
            if t is not None and t.layout == torch.strided:
                tensors[id(t)] = t
    counts = Counter(t.untyped_storage().data_ptr() for t in tensors.values())
    return {ptr for ptr, n in counts.items() if n > 1}


class _Cloner:
    def __init__(self, shared: set[int]) -> None:
        self.memo: dict[int, Any] = {}
        self.shared = shared

    def __call__(self, obj: Any) -> Any:
        cls = type(obj)
        if cls in _ATOMS:
            return obj
        memo = self.memo
        oid = id(obj)
        hit = memo.get(oid)
        if hit is not None:
            return hit
        if (cls is dict or cls is OrderedDict) and not obj:
            return cls()  # the empty hook dicts every module carries; torch never shares them between modules
        if cls is nn.Parameter or cls is torch.Tensor:
            if not _plain_tensor(obj, self.shared):
                return copy.deepcopy(obj, memo)
            with torch.no_grad():
                data = obj.clone(memory_format=torch.preserve_format)
            new = nn.Parameter(data, requires_grad=obj.requires_grad) if cls is nn.Parameter else data
        elif isinstance(obj, nn.Module) and _plain_module_class(cls):
            new = cast(Any, cls).__new__(cls)  # cls is type(obj): mypy cannot pick a __new__ overload
            memo[oid] = new
            copy._keep_alive(obj, memo)  # type: ignore[attr-defined]  # as deepcopy does: obj outlives the memo
            fields = new.__dict__
            for k, v in obj.__dict__.items():
                fields[k] = v if type(v) in _ATOMS else self(v)
            return new
        elif (cls is dict or cls is OrderedDict) and all(type(k) in _ATOMS for k in obj):
            new = cls()
            memo[oid] = new
            copy._keep_alive(obj, memo)  # type: ignore[attr-defined]
            for k, v in obj.items():
                new[k] = self(v)
            return new
        elif cls is set and all(type(x) in _ATOMS for x in obj):
            new = set(obj)
        else:
            return copy.deepcopy(obj, memo)
        memo[oid] = new
        copy._keep_alive(obj, memo)  # type: ignore[attr-defined]
        return new


def clone_module(module: M) -> M:
    """An independent deep copy of ``module``: same structure, values, flags and hooks, no shared tensors."""
    return _Cloner(_shared_storages(module))(module)

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
from collections.abc import Iterable
import copy
from typing import Any, TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)

_ATOMS = frozenset((int, float, bool, complex, str, bytes, type(None)))
_PROTOCOL = ("__deepcopy__", "__copy__", "__reduce_ex__", "__reduce__", "__getstate__", "__setstate__")
_MODULE_IMPL = {name: getattr(nn.Module, name, None) for name in _PROTOCOL}
_plain_classes: dict[type, bool] = {}


_DEFAULTS_ONLY: dict[Any, tuple[str, ...]] = {nn.modules.conv._ConvNd.__setstate__: ("padding_mode",)}
"""torch ``__setstate__`` methods that only fill in attributes an old pickle may lack (the convolutions'
``padding_mode``): a module that has them copies like a plain one (half the copy time of a micro CNN)."""


def _plain_module_class(cls: type) -> bool:
    """Whether ``cls`` copies like ``nn.Module`` itself (no copy or pickle protocol of its own, or only a
    ``__setstate__`` of :data:`_DEFAULTS_ONLY`; :func:`_plain_module` checks the attributes it fills in)."""
    ok = _plain_classes.get(cls)
    if ok is None:
        ok = _plain_classes[cls] = all(getattr(cls, n, None) is impl or (n == "__setstate__" and getattr(cls, n, None)
                                                                        in _DEFAULTS_ONLY)
                                       for n, impl in _MODULE_IMPL.items())
    return ok


def _plain_module(module: nn.Module) -> bool:
    """Whether ``module`` copies like a plain ``nn.Module``: a plain class, with what its ``__setstate__`` fills."""
    if not _plain_module_class(type(module)):
        return False
    filled = _DEFAULTS_ONLY.get(getattr(type(module), "__setstate__", None), ())
    return all(name in module.__dict__ for name in filled)


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
        if cls is tuple and all(type(x) in _ATOMS for x in obj):
            return obj  # kernel sizes, strides, paddings: deepcopy returns such a tuple itself
        if cls is nn.Parameter or cls is torch.Tensor:
            if not _plain_tensor(obj, self.shared):
                return copy.deepcopy(obj, memo)
            data = obj.clone(memory_format=torch.preserve_format)  # under no_grad: the entry points set it
            new = nn.Parameter(data, requires_grad=obj.requires_grad) if cls is nn.Parameter else data
        elif isinstance(obj, nn.Module) and _plain_module(obj):
            module_cls: type[nn.Module] = cls  # typed, so mypy resolves cls.__new__ (deepcopy's reconstruct)
            new = module_cls.__new__(module_cls)
            memo[oid] = new
            copy._keep_alive(obj, memo)  # type: ignore[attr-defined]  # as deepcopy does: obj outlives the memo
            fields = new.__dict__
            for k, v in obj.__dict__.items():
                t = type(v)
                if t in _ATOMS:
                    fields[k] = v
                elif (t is dict or t is OrderedDict) and not v:
                    fields[k] = t()  # the empty hook dicts (a dozen a module), without a call each
                else:
                    fields[k] = self(v)
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
    with torch.no_grad():
        return _Cloner(_shared_storages(module))(module)


_STATELESS = frozenset(t for t in (
    nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.LayerNorm, nn.GroupNorm, getattr(nn, "RMSNorm", None),
    nn.Embedding, nn.Identity, nn.Flatten, nn.GELU, nn.ReLU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softmax,
    nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict) if t is not None)
"""Module classes whose forward does not depend on their training flag and that keep no state but parameters."""


def share_frozen_copy(module: M, own: Iterable[str] = ()) -> M:
    """A working copy of ``module`` that shares its frozen part with ``module`` instead of copying it.

    A parameter that does not require grad and is not named in ``own`` is the very same ``nn.Parameter`` in the
    copy; so is a whole frozen subtree of stateless layers (``Linear``, ``Conv``, ``LayerNorm``, activations,
    containers, ``Dropout(p=0)``: no buffer, no parameter of its own, nothing its training flag changes). Every
    other module object (each copy has its own training flag and hooks where they matter), every buffer and every
    other parameter is copied as :func:`clone_module` copies it. Name in ``own`` the frozen entries the copy will
    overwrite (a download it receives). Clients of a wave then all read one frozen backbone, as PromptFL's
    clients read one frozen CLIP: a copy costs the path to what it trains (about 2.5x cheaper than
    :func:`clone_module` on a peft-injected micro ViT). The copy only reads the shared part: train the parameters
    that require grad, and do not move or cast the copy (``.to()``, ``.half()``), which would change the
    tensors it shares. Sharing stops at a module with its own copy protocol: that subtree is deep-copied.
    """
    scan = _Scan(set(own))
    scan.visit(module, "")
    if scan.frozen.keys() & scan.owned:  # a tied parameter owned under one of its names: owned under all
        scan = _Scan(scan.own, owned=scan.owned)
        scan.visit(module, "")
    counts = Counter(t.untyped_storage().data_ptr() for t in scan.copied if t.layout == torch.strided)
    cloner = _Cloner({ptr for ptr, n in counts.items() if n > 1})  # views and aliases among the copied tensors
    cloner.memo.update(scan.frozen)
    cloner.memo.update(scan.stateless)
    with torch.no_grad():
        return _share_walk(module, cloner)


class _Scan:
    """One walk over a module tree: frozen parameters to share, tensors to copy, frozen stateless subtrees."""

    def __init__(self, own: set[str], owned: set[int] | None = None) -> None:
        self.own = own
        self.owned: set[int] = set() if owned is None else owned
        self.frozen: dict[int, nn.Parameter] = {}
        self.copied: list[torch.Tensor] = []
        self.stateless: dict[int, nn.Module] = {}

    def visit(self, module: nn.Module, prefix: str) -> bool:
        """Classify ``module``'s tensors; whether its subtree is frozen and stateless (then it is shared as it is)."""
        ok = type(module) in _STATELESS or (type(module) is nn.Dropout and float(module.p) == 0.0)
        for n, p in module._parameters.items():
            if p is None:
                continue
            if p.requires_grad or id(p) in self.owned or prefix + n in self.own:
                self.owned.add(id(p))
                self.copied.append(p)
                ok = False
            else:
                self.frozen[id(p)] = p
        for b in module._buffers.values():
            if b is not None:
                self.copied.append(b)
                ok = False
        for name, child in module._modules.items():
            if child is not None and not self.visit(child, f"{prefix}{name}."):
                ok = False
        if ok:
            self.stateless[id(module)] = module
        return ok


def _share_walk(module: M, cloner: _Cloner) -> M:
    memo = cloner.memo
    hit = memo.get(id(module))
    if hit is not None:
        return hit  # a module copied already, or a frozen stateless subtree shared as it is
    cls = type(module)
    if not _plain_module(module):
        return cloner(module)  # deepcopy, whose memo holds the shared parameters
    new = cls.__new__(cls)
    memo[id(module)] = new
    copy._keep_alive(module, memo)  # type: ignore[attr-defined]
    fields = new.__dict__
    for k, v in module.__dict__.items():
        t = type(v)
        if t in _ATOMS:
            fields[k] = v
        elif k == "_modules":
            fields[k] = {name: None if child is None else _share_walk(child, cloner) for name, child in v.items()}
        elif (t is dict or t is OrderedDict) and not v:
            fields[k] = t()  # the empty hook dicts
        else:
            fields[k] = cloner(v)  # parameters (shared ones from the memo), buffers, containers, other values
    return new

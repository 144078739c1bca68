"""Checkpoint values as JSON plus a flat dict of tensors: nothing is pickled, nothing is unpickled.

Tensors become ``{"__tensor__": key}`` references into the tensor file; tuples, numpy arrays and dicts
with non-string keys get tagged forms; objects with ``state_dict()``/``load_state_dict()`` (a server-side
module or optimizer) are stored as their state and loaded back into the live object of the resumed run.
Attrs records (a plugin's typed ``Share.meta``, e.g. on an update still in flight) are stored field by
field with their class's name and rebuilt from that class, which the resumed run must already have imported
(its plugin is loaded before the checkpoint is read; nothing is imported by name from a checkpoint).
Anything else is an error that names where the value sits.
"""
from __future__ import annotations

from collections.abc import Mapping
import sys
from typing import Any

import attrs
import numpy as np
import torch

from fedcore.errors import FedcoreError
from fedcore.stash import Stash, StashKey


class CheckpointError(FedcoreError):
    """A checkpoint cannot be written (an unsupported value) or read (corrupt, truncated, another run)."""


@attrs.frozen
class StateDictValue:
    """A decoded ``state_dict()`` of an object that must be loaded into a live object of the resumed run."""

    state: Any
    type: str


def encode(value: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """``value`` as JSON, with each tensor moved into ``tensors`` under a key derived from ``path``."""
    if isinstance(value, torch.Tensor):
        key = path
        n = 1
        while key in tensors:
            key, n = f"{path}#{n}", n + 1
        tensors[key] = value.detach().to("cpu").contiguous().clone()
        return {"__tensor__": key}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v, f"{path}/{k}", tensors) for k, v in value.items()}
        return {"__items__": [[encode(k, f"{path}/key{i}", tensors), encode(v, f"{path}/{k}", tensors)]
                              for i, (k, v) in enumerate(value.items())]}
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return {"__state_dict__": encode(value.state_dict(), path, tensors),
                "type": f"{type(value).__module__}.{type(value).__qualname__}"}
    if attrs.has(type(value)):
        cls = type(value)
        return {"__record__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.alias: encode(getattr(value, f.name), f"{path}/{f.name}", tensors)
                           for f in attrs.fields(cls) if f.init}}
    raise CheckpointError(
        f"cannot checkpoint {path}: a {type(value).__module__}.{type(value).__qualname__}; checkpointed values must be "
        f"JSON values (numbers, strings, lists, dicts), tensors, numpy arrays, attrs records, or objects with "
        f"state_dict() and load_state_dict()")


def decode(value: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """The inverse of :func:`encode`; ``state_dict`` objects come back as :class:`StateDictValue`."""
    if isinstance(value, list):
        return [decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        key = value["__tensor__"]
        if key not in tensors:
            raise CheckpointError(f"the checkpoint's state names tensor {key!r}, which its tensor file lacks")
        return tensors[key]
    if "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=value["dtype"]).reshape(value["shape"])
    if "__tuple__" in value:
        return tuple(decode(v, tensors) for v in value["__tuple__"])
    if "__items__" in value:
        return {_hashable(decode(k, tensors)): decode(v, tensors) for k, v in value["__items__"]}
    if "__state_dict__" in value:
        return StateDictValue(decode(value["__state_dict__"], tensors), value["type"])
    if "__record__" in value:
        return _record(value["__record__"], decode(value["fields"], tensors))
    return {k: decode(v, tensors) for k, v in value.items()}


def _record(name: str, fields: dict[str, Any]) -> Any:
    """A record of the attrs class ``module:qualname`` from the modules this run has imported; else one error."""
    module, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not (isinstance(found, type) and attrs.has(found)):
        raise CheckpointError(f"the checkpoint holds a {name} record, a class this run has not loaded; resume with "
                              f"the plugin that defines it installed and in the pipeline")
    try:
        return found(**fields)
    except (TypeError, ValueError, FedcoreError) as exc:
        raise CheckpointError(f"the checkpoint's {name} record does not fit its class today: {exc}") from None


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


def encode_stash(stash: Stash, path: str, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in stash.items():
        if key.name in out:
            raise CheckpointError(f"two stash keys in {path} are named {key.name!r}; stash key names must be unique")
        out[key.name] = encode(value, f"{path}/{key.name}", tensors)
    return out


def restore_stash(stash: Stash, saved: Mapping[str, Any], where: str) -> None:
    """Put saved values back under keys of the same name (``StashKey`` compares by name)."""
    for name, value in saved.items():
        key: StashKey[Any] = StashKey(name)
        if isinstance(value, StateDictValue):
            live = stash.get(key)
            if live is None or not callable(getattr(live, "load_state_dict", None)):
                raise CheckpointError(
                    f"{where} stash key {name!r} held a {value.type} when the checkpoint was taken; the resumed run "
                    f"has {'nothing' if live is None else type(live).__name__} there. Create the object again in "
                    f"fedcore_run_start so its saved state can be loaded into it, or stash its state_dict() instead")
            live.load_state_dict(value.state)
        else:
            stash[key] = value

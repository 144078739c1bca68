"""Which part of the global ViT a client holds: a rolling depth window plus kept units per block.

Depth (Co-S2P Sec. 4.1): blocks ``[0, window_start)`` are a frozen prefix (forward only), blocks
``[window_start, window_start + window_length)`` are trainable, deeper blocks are removed. Width: per kept
block the kept attention heads, MLP hidden units and the output rows of ``attn.proj`` and ``mlp.fc2``
(zero-padded back into the residual stream, which always stays ``embed_dim`` wide). Index sets are stored
sorted, so slicing and scattering always use the same order.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore_pruning.shape import ViTShape

IndexSet = tuple[int, ...]
BLOCK_PARTS = ("heads", "hidden", "attn_out", "mlp_out")


def _tuple(value: Sequence) -> tuple:
    return tuple(value)


def _index_set(field: str, value: Sequence[int] | None, size: int) -> IndexSet:
    """``value`` as a sorted tuple of distinct indices in ``[0, size)``; ``None`` means all of them."""
    if value is None:
        return tuple(range(size))
    items = [int(v) for v in value]
    if not items:
        raise ConfigError(f"{field} is empty; keep at least one of the {size} units")
    if len(set(items)) != len(items):
        raise ConfigError(f"{field}={items} has repeated indices")
    out = [v for v in items if not 0 <= v < size]
    if out:
        raise ConfigError(f"{field}={items} has indices {out} outside [0, {size}) ({len(items)} given, {size} exist)")
    return tuple(sorted(items))


@attrs.frozen(eq=False, kw_only=True)
class BlockKeep:
    """Kept units of one block, in global indices (validated by ``SubmodelSpec`` against the shape)."""

    heads: IndexSet
    hidden: IndexSet
    attn_out: IndexSet
    mlp_out: IndexSet


def _per_block(field: str, value: Sequence[Sequence[int] | None] | None, blocks: int) -> list:
    if value is None:
        return [None] * blocks
    value = list(value)
    if len(value) != blocks:
        raise ConfigError(f"{field} has {len(value)} entries; expected one per kept block ({blocks})")
    return value


@attrs.frozen(eq=False, kw_only=True)
class SubmodelSpec:
    """A validated submodel of a ``ViTShape``; build it with ``SubmodelSpec.build`` or ``SubmodelSpec.full``."""

    shape: ViTShape = attrs.field(validator=attrs.validators.instance_of(ViTShape))
    window_start: int = setting(0, low=0, help="first trainable block; blocks below it are the frozen prefix")
    window_length: int = setting(1, low=1, help="number of consecutive trainable blocks")
    blocks: tuple[BlockKeep, ...] = attrs.field(converter=_tuple)
    classes: IndexSet = attrs.field(converter=_tuple)  # output rows of the classifier and of the exits
    exits: IndexSet = attrs.field(converter=_tuple)  # depths (1-based block counts) with an early-exit head
    head: bool = setting(True, help="include the global final norm and head (only at full depth)")

    def __attrs_post_init__(self) -> None:
        shape = self.shape
        if self.window_start + self.window_length > shape.depth:
            raise ConfigError(
                f"SubmodelSpec window [{self.window_start}, {self.window_start + self.window_length}) lies outside "
                f"the model's depth {shape.depth}; need window_start + window_length <= {shape.depth}")
        if len(self.blocks) != self.kept_depth:
            raise ConfigError(f"SubmodelSpec.blocks has {len(self.blocks)} entries; expected {self.kept_depth}")
        for b, keep in enumerate(self.blocks):
            for name, size in (("heads", shape.num_heads), ("hidden", shape.mlp_hidden),
                               ("attn_out", shape.embed_dim), ("mlp_out", shape.embed_dim)):
                value = getattr(keep, name)
                if len(value) > size:
                    raise ConfigError(f"block {b} keeps {len(value)} {name}; the block has only {size}")
                if _index_set(f"block {b} {name}", value, size) != tuple(value):
                    raise ConfigError(f"block {b} {name}={value} is not sorted")
        _index_set("SubmodelSpec.classes", self.classes, shape.num_classes)
        for depth in self.exits:
            if not self.window_start < depth <= self.kept_depth:
                raise ConfigError(
                    f"SubmodelSpec.exits has depth {depth}; exits must sit on trainable blocks, "
                    f"depth in ({self.window_start}, {self.kept_depth}]")
        if list(self.exits) != sorted(set(self.exits)):
            raise ConfigError(f"SubmodelSpec.exits={self.exits} must be increasing and distinct")
        if self.head and self.kept_depth != shape.depth:
            raise ConfigError(
                f"SubmodelSpec.head=True needs the full depth {shape.depth}, but blocks from {self.kept_depth} on are "
                "removed; use exits for a shallower classifier")
        if not self.head and not self.exits:
            raise ConfigError("SubmodelSpec has no output: set head=True (full depth) or give at least one exit")

    @property
    def kept_depth(self) -> int:
        """Blocks the submodel holds: the frozen prefix plus the trainable window."""
        return self.window_start + self.window_length

    @property
    def embeddings_trainable(self) -> bool:
        """Patch embedding, class token and position embedding train only with the first block."""
        return self.window_start == 0

    def is_trainable_block(self, b: int) -> bool:
        return self.window_start <= b < self.kept_depth

    def to_data(self) -> dict[str, Any]:
        """Plain data (JSON-safe): what a share's ``meta`` carries as the update's index map."""
        return {"shape": self.shape.to_data(), "window_start": self.window_start,
                "window_length": self.window_length,
                "blocks": [{name: list(getattr(keep, name)) for name in BLOCK_PARTS} for keep in self.blocks],
                "classes": list(self.classes), "exits": list(self.exits), "head": self.head}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SubmodelSpec:
        """The spec ``to_data`` wrote, validated again; malformed data is a ``ConfigError`` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a submodel index map must be a mapping, got {type(data).__name__}")
        missing = sorted({"shape", "window_start", "window_length", "blocks", "classes", "exits", "head"} - set(data))
        if missing:
            raise ConfigError(f"the submodel index map lacks {missing}")
        try:
            shape = ViTShape(**data["shape"])
            blocks = tuple(BlockKeep(**{name: tuple(int(i) for i in b[name]) for name in BLOCK_PARTS})
                           for b in data["blocks"])
        except (TypeError, KeyError) as exc:
            raise ConfigError(f"the submodel index map is malformed: {exc}") from None
        return cls(shape=shape, window_start=int(data["window_start"]), window_length=int(data["window_length"]),
                   blocks=blocks, classes=tuple(int(c) for c in data["classes"]),
                   exits=tuple(int(e) for e in data["exits"]), head=bool(data["head"]))

    @classmethod
    def full(cls, shape: ViTShape) -> SubmodelSpec:
        """The whole model, everything trainable, with the global head."""
        return cls.build(shape)

    @classmethod
    def build(cls, shape: ViTShape, *, window_start: int = 0, window_length: int | None = None,
              heads: Sequence[Sequence[int] | None] | None = None,
              hidden: Sequence[Sequence[int] | None] | None = None,
              attn_out: Sequence[Sequence[int] | None] | None = None,
              mlp_out: Sequence[Sequence[int] | None] | None = None,
              classes: Sequence[int] | None = None, exits: Sequence[int] = (), head: bool | None = None,
              ) -> SubmodelSpec:
        """A spec from index lists; ``None`` keeps everything. Per-block lists have one entry per kept block.

        ``window_length=None`` trains every block from ``window_start`` to the end; ``head=None`` includes
        the global head exactly when the window reaches the full depth.
        """
        if window_length is None:
            window_length = shape.depth - window_start
        for name, value in (("window_start", window_start), ("window_length", window_length)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"SubmodelSpec.{name}={value!r} must be an int")
        if window_start < 0 or window_length < 1 or window_start + window_length > shape.depth:
            raise ConfigError(
                f"SubmodelSpec window [{window_start}, {window_start + window_length}) lies outside the model's "
                f"depth {shape.depth}; need 0 <= window_start, 1 <= window_length, start + length <= {shape.depth}")
        kept = window_start + window_length
        per = {name: _per_block(name, value, kept)
               for name, value in (("heads", heads), ("hidden", hidden), ("attn_out", attn_out), ("mlp_out", mlp_out))}
        sizes = {"heads": shape.num_heads, "hidden": shape.mlp_hidden, "attn_out": shape.embed_dim,
                 "mlp_out": shape.embed_dim}
        for name, entries in per.items():
            for b, value in enumerate(entries):
                if value is not None and len(list(value)) > sizes[name]:
                    raise ConfigError(f"block {b} keeps {len(list(value))} {name}; the block has only {sizes[name]}")
        blocks = tuple(
            BlockKeep(**{name: _index_set(f"block {b} {name}", per[name][b], sizes[name]) for name in per})
            for b in range(kept))
        return cls(shape=shape, window_start=window_start, window_length=window_length, blocks=blocks,
                   classes=_index_set("SubmodelSpec.classes", classes, shape.num_classes),
                   exits=tuple(int(e) for e in exits), head=(kept == shape.depth) if head is None else bool(head))

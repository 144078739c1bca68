"""What ``tl-share`` tells ``tl-cohort`` about one client's part: a typed record in ``Share.meta[TREE]``.

The cohort reads it with ``isinstance`` (:func:`tree_part_of`), not by string keys: whether the client part is
relayed (SL round-robin: nothing stays on the client) and the batch size its turns stream at. The rest describes
the share for the history and the cost model (the core's own ``flops_per_sample`` key stays beside it).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

TREE = "tl"  # the meta key; its value is always a TreePart


@attrs.frozen(eq=False, kw_only=True)
class TreePart:
    """One client's part of the tree for one round (thesis §3.3)."""

    split: int
    """The client's split: it holds units 1..split-1."""
    mode: str
    """``"horizontal"`` (every client sees whole inputs) or ``"vertical"`` (a feature strip each)."""
    relay: bool
    """Whether the client part is relayed to the next client (SL round-robin) instead of staying personal."""
    batch_size: int
    """The minibatch size the client streams its samples at."""
    strip: tuple[int, int] | None = None
    """The client's feature strip ``(start, end)`` in vertical mode; ``None`` in horizontal mode."""

    @property
    def client_units(self) -> int:
        return self.split - 1


def tree_part_of(meta: Mapping[str, Any]) -> TreePart | None:
    """The ``TreePart`` of a share's meta; ``None`` when the share is not ``tl-share``'s."""
    found = meta.get(TREE)
    return found if isinstance(found, TreePart) else None

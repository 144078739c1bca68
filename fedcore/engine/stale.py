"""Stale updates whose share changed: ask the method to adapt them, else drop the ones that no longer fit.

An asynchronous run keeps updates in flight while the global model moves on; a method may change the
share in between (SA-FedLoRA switches from the whole model to LoRA factors, then lowers the rank). Such an
update carries the ``share_signature`` of the share it was made for. ``fedcore_adapt_update`` lets the
method adapt it (truncate or pad factors) or drop it with a reason; without an answer the engine drops an
update whose entries or shapes no longer match the global model, so the aggregator never sees one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from fedcore.contexts import RoundContext
from fedcore.types import ClientUpdate, DropUpdate

if TYPE_CHECKING:
    from fedcore.pipeline import Hooks


def mismatch(update: ClientUpdate, model: nn.Module) -> str | None:
    """Why ``update`` cannot be loaded into ``model`` (an entry it lacks, a shape that changed), or ``None``.

    Only entries the client received from the global model (``update.base``) can have gone; entries that
    never were model entries (features, logits) are left to the aggregator.
    """
    own = model.state_dict()
    unknown = sorted(k for k in update.tensors if k in update.base and k not in own)  # came from the model, gone
    if unknown:
        return f"entries the global model no longer has: {unknown[:4]}"
    for key, value in update.tensors.items():
        if key in own and own[key].shape != value.shape:
            return f"entry {key!r} has shape {tuple(value.shape)}, the global model has {tuple(own[key].shape)}"
    return None


def settle(hooks: Hooks, update: ClientUpdate, model: nn.Module, ctx: RoundContext) -> ClientUpdate | DropUpdate:
    """The stale ``update`` as the aggregator may see it, or a :class:`DropUpdate` saying why it is dropped."""
    answer = hooks.fedcore_adapt_update(update=update, model=model, ctx=ctx)
    if answer is not None:
        update = answer if isinstance(answer, ClientUpdate) else update
        if isinstance(answer, DropUpdate):
            return answer
    problem = mismatch(update, model)
    if problem is None:
        return update
    made_for = f" (made for share {update.share_signature!r})" if update.share_signature is not None else ""
    return DropUpdate(reason=f"stale update of version {update.version}{made_for} no longer fits: {problem}")

"""A client's personal model is the global model overlaid with its ``ClientState.tensors``.

Every method of this plugin keeps what is personal in the client's state, which never crosses the network and is
checkpointed: FedPer/FedRep the classifier head, FedBN the BatchNorm layers, Ditto a whole personal model. The
entries in ``ClientState.tensors`` that name entries of the model are the places where the client's model differs
from the global one, so one function builds any client's model (:func:`personal_copy`), for training and for
evaluation alike. A share names its personal entries in ``Share.meta["personal"]``; :func:`keep_personal` stores
them after local training.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from fedcore.builtin import working_copy
from fedcore.types import ClientState, Share

PERSONAL = "personal"
"""The ``Share.meta`` key naming the entries a client keeps for itself."""


def personal_copy(model: nn.Module, state: ClientState | None) -> nn.Module:
    """A copy of ``model`` with the client's personal entries (``state.tensors``) loaded over it."""
    module = working_copy(model)
    if state is not None and state.tensors:
        own = module.state_dict()
        overlay = {k: v for k, v in state.tensors.items() if k in own and own[k].shape == v.shape}
        if overlay:
            module.load_state_dict(overlay, strict=False)
    return module


def keep_personal(share: Share, state: ClientState) -> None:
    """Store the trained values of the share's personal entries (``share.meta["personal"]``) in the client's state."""
    names = share.meta.get(PERSONAL, ())
    if names:
        own = share.module.state_dict()
        state.tensors.update({k: own[k].detach().clone() for k in names})


def keeps_personal(component: Any) -> bool:
    """Whether a component stores the share's personal entries after local training (``keeps_personal = True``)."""
    return bool(getattr(type(component), "keeps_personal", False))

"""``keep-personal``: after whatever local update the pipeline runs, store the share's personal entries.

A wrapper of the local-update slot, so any trainer (``sgd``, ``fedrep-sgd``, a method's own) works with a
personal split (``fedper-share``, ``fedbn-share``) without knowing about it.
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any, ClassVar

import attrs

import fedcore
from fedcore.types import ClientState, ClientUpdate, Share
from fedcore_personal.overlay import keep_personal


@attrs.frozen(eq=False, kw_only=True)
class KeepPersonal:
    """Stores the trained values of ``share.meta["personal"]`` in the client's state after its local update."""

    keeps_personal: ClassVar[bool] = True

    @fedcore.hookimpl(wrapper=True)
    def fedcore_local_update(self, client: Any, share: Share, data: Any, state: ClientState, ctx: Any
                             ) -> Generator[None, ClientUpdate, ClientUpdate]:
        update = yield
        keep_personal(share, state)
        return update

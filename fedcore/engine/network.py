"""Moved: the network is a public core module, :mod:`fedcore.network` (``fedcore.Channel``, ``fedcore.Ledger``).

This engine-internal path keeps working as a plain re-export.
"""
from fedcore.network import Channel, Ledger, Transfer, payload_nbytes, send_entries

__all__ = ["Channel", "Ledger", "Transfer", "payload_nbytes", "send_entries"]

"""Secure aggregation for fedcore: SecAgg+ (Bell et al., CCS 2020) simulated message by message, on the ledger and
the virtual clock."""
from fedcore_secagg.protocol import MESSAGE_BYTES, Outcome, SecAggClient, run_protocol
from fedcore_secagg.secagg import KINDS, SecAggPlus

__all__ = ["KINDS", "MESSAGE_BYTES", "Outcome", "SecAggClient", "SecAggPlus", "run_protocol"]

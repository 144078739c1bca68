"""The engine: the loop (dispatch, arrivals, aggregation and the history row, snapshots), executors and checkpoints.

The contract types hooks receive are public core modules: :mod:`fedcore.contexts` and :mod:`fedcore.network`.
"""

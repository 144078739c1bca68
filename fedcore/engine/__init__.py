"""The engine: the loop (dispatch, arrivals, aggregation and the history row, snapshots), executors and checkpoints.

Its runtime state has one owner, :mod:`fedcore.engine.state`. The contract types hooks, cohorts and executors
receive are public core modules: :mod:`fedcore.contexts`, :mod:`fedcore.network` and :mod:`fedcore.jobs`.
"""

"""The engine: the loop, executors, the network ledger and the contexts hooks receive."""

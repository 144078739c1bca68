"""The history rows' byte totals over a long run: the ledger's running totals (now) vs a pass over every row per round.

Every round's history row carries ``bytes_up_total`` and ``bytes_down_total``. Until issue 29's follow-up the
engine computed them by summing the whole ledger each round, O(rounds) per round and O(rounds^2) per run; now the
:class:`fedcore.Ledger` keeps running totals folded in from the rows added since. This books what the
``checkpoint_history.py`` run books (ROUNDS rounds, 2 clients, a download and an upload each) and asks both totals
after every round, both ways, interleaved; the CPU seconds of the bookkeeping alone are compared and the totals
checked equal. What the re-summing cost a real run is this difference (the training is the same).

    python benchmarks/ledger_totals.py [ROUNDS] [PAIRS]     # default 10000 3
"""
from __future__ import annotations

import sys
import time

from sidebyside import interleave

from fedcore.network import Ledger, Transfer

CLIENTS, NBYTES = 2, 8848  # checkpoint_history.py's run: 2 clients, the tiny model's 8,848 bytes each way


def resummed(ledger: Ledger, direction: str | None = None, kind: str | None = None, round: int | None = None,
             client: int | None = None) -> int:
    """What ``Ledger.total`` did before (its code): a pass over every row of the run."""
    return sum(
        r.nbytes
        for r in ledger.rows
        if (direction in (None, r.direction)) and (kind in (None, r.kind))
        and (round in (None, r.round)) and (client in (None, r.client))
    )


def book_run(rounds: int, running: bool) -> dict[str, float]:
    ledger, totals = Ledger(), (0, 0)
    start = time.process_time()
    for rnd in range(rounds):
        ledger.merge([Transfer(round=rnd, client=c, direction=d, kind="weights", nbytes=NBYTES)
                      for c in range(CLIENTS) for d in ("down", "up")])
        if running:
            totals = ledger.total(direction="up"), ledger.total(direction="down")
        else:
            totals = resummed(ledger, direction="up"), resummed(ledger, direction="down")
    cpu = time.process_time() - start
    assert totals == (rounds * CLIENTS * NBYTES,) * 2
    return {"cpu": cpu}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    runs = interleave({"re-sum": lambda: book_run(rounds, False), "running": lambda: book_run(rounds, True)},
                      reps=pairs)
    runs.print_header("history row byte totals: re-summing the ledger vs running totals", rounds=rounds,
                      clients=CLIENTS)
    runs.print_times("cpu")
    runs.print_ratio("re-sum", "running", key="cpu")


if __name__ == "__main__":
    main()

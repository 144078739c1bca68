"""The fedcore-secagg README's overhead table from a finished sweep: one command, nothing typed by hand.

    cd plugins/fedcore-secagg
    nice -n 19 fedcore sweep repro/secagg_overhead_sweep.toml --jobs 1 --out runs/secagg
    python repro/tables.py runs/secagg --write README.md

Per number of clients and dropout rate, over the seeds (mean ± std): the bytes one round moves (up + down, the
ledger's totals over the run / rounds), the protocol's own share of them, the virtual time per round (the clock
of the last row / rounds), the clients whose update reached the aggregate, and the ratios SecAgg+ / plain FedAvg
(paired by seed). The keys are agreed when the server aggregates, after the uploads, so a client that drops before
its input stage has still uploaded its masked input; the second bytes ratio subtracts those inputs (clients -
survivors of each round that did not abort, times the input's size), which is what Bell et al.'s order sends.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
import shlex
import statistics
import sys

TAG = "secagg-overhead-results"


def replace_block(readme: Path, markdown: str) -> None:
    text = readme.read_text()
    start, end = f"<!-- generated:{TAG} -->", f"<!-- /generated:{TAG} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{readme} needs exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    readme.write_text(f"{head}{start}\n{markdown.strip()}\n{end}{tail}")


def _ms(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
    if not values:
        return "-"
    mean = statistics.mean(values) * scale
    sd = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:,.{digits}f} ± {sd:,.{digits}f}"


Cell = dict[int, dict[str, float]]
"""One cell of the grid: per seed, the numbers of :func:`per_run`."""


def per_run(run) -> dict[str, float]:  # type: ignore[no-untyped-def]
    rows = run.rows
    rounds = len(rows)
    last = rows[-1]
    return {"bytes": (last["bytes_up_total"] + last["bytes_down_total"]) / rounds,
            "protocol": sum(r.get("agg_secagg_bytes", 0.0) for r in rows) / rounds,
            "time": last.get("virtual_time", 0.0) / rounds,
            "merged": statistics.mean(len(r["clients"]) if "agg_secagg_survivors" not in r
                                      else r["agg_secagg_survivors"] for r in rows),
            "aborted": sum(r.get("agg_secagg_aborted", 0.0) for r in rows), "rounds": rounds,
            # clients that dropped before sending their masked input; aborted rounds do not say, and count 0
            "unsent": sum(r["agg_secagg_clients"] - r["agg_secagg_survivors"] for r in rows
                          if "agg_secagg_clients" in r and not r.get("agg_secagg_aborted")) / rounds,
            "input_bytes": last["bytes_up_total"] / rounds / len(last["clients"]), "field_bits": field_bits(run)}


def field_bits(run) -> int:  # type: ignore[no-untyped-def]
    for spec in run.config.get("pipeline", {}).get("plugins", []):
        if isinstance(spec, dict) and spec.get("name") == "secagg":
            return int(spec.get("field_bits", 32))
    return 32


def row(n: int, drop: str, seeds: list[int], plain: Cell, secure: Cell, base: Cell) -> str:
    """One table row: clients ``n`` at dropout ``drop`` %, over ``seeds`` (FedAvg and SecAgg+ paired by seed)."""
    def get(side: Cell, key: str) -> list[float]:
        return [side[s][key] for s in seeds]

    def ratio(key: str) -> list[float]:
        return [secure[s][key] / plain[s][key] for s in seeds if plain[s][key]]

    bell = [(secure[s]["bytes"] - secure[s]["unsent"] * base[s]["input_bytes"] * secure[s]["field_bits"] / 32)
            / plain[s]["bytes"] for s in seeds if s in base]
    return (f"| {n} | {drop}% | {_ms(get(plain, 'bytes'), 1e-6, 3)} | {_ms(get(secure, 'bytes'), 1e-6, 3)} | "
            f"{_ms(get(secure, 'protocol'), 1e-6, 3)} | {_ms(ratio('bytes'), 1, 3)} | {_ms(bell, 1, 3)} | "
            f"{_ms(get(plain, 'time'), 1e3, 2)} | {_ms(get(secure, 'time'), 1e3, 2)} | "
            f"{_ms(ratio('time'), 1, 3)} | "
            f"{statistics.mean(get(plain, 'merged')):.1f} / {statistics.mean(get(secure, 'merged')):.1f} | "
            f"{int(sum(get(secure, 'aborted')))} of {int(sum(get(secure, 'rounds')))} | {len(seeds)} |")


def table(sweep: Path) -> str:
    from fedcore.experiment import sweep_command, sweep_statistics

    stats = sweep_statistics(sweep, metric="bytes_up_total", baseline="plain-0")
    cells: dict[tuple[str, int, str], dict[int, dict[str, float]]] = {}
    for label, runs in stats.runs.items():
        variant = next(p for p in label.split(" ") if p.startswith(("plain", "secagg")))
        kind, drop = variant.split("-")
        for run in runs:
            cells.setdefault((kind, int(run.config["num_clients"]), drop), {})[int(run.config["seed"])] = per_run(run)
    lines = ["| clients | dropout | FedAvg MB / round | SecAgg+ MB / round | of which protocol messages (MB) | "
             "bytes ratio | bytes ratio, inputs sent only by clients still there (Bell et al.'s order) | "
             "FedAvg virtual ms / round | SecAgg+ virtual ms / round | time ratio | updates merged "
             "(FedAvg / SecAgg+) | SecAgg+ rounds aborted | seeds |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted({k[1] for k in cells}):
        base = cells.get(("plain", n, "0"), {})  # every client's plain fp32 upload: the input's size at 32 bits
        for drop in ("0", "10", "30"):
            plain, secure = cells.get(("plain", n, drop), {}), cells.get(("secagg", n, drop), {})
            seeds = sorted(set(plain) & set(secure))
            if seeds:
                lines.append(row(n, drop, seeds, plain, secure, base))
    head = [f"Made by `{sweep_command(sweep)}` then `python {' '.join(shlex.quote(a) for a in sys.argv)}`; "
            "mean ± std over the seeds (ratios paired by seed).", ""]
    return "\n".join(head + lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--write", type=Path, metavar="README")
    args = parser.parse_args(argv)
    text = table(args.sweep)
    print(text)
    if args.write is not None:
        replace_block(args.write, text)
        print(f"wrote the block {TAG!r} into {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

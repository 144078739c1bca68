"""How ``fedcore plan`` prints a dry run: one row per group of clients with the same share, then the round's totals.

Clients are grouped by what their share is (profile, parameters held and trained, FLOPs per sample, memory, the
kinds of message they send); quantities that grow with a client's data (samples, bytes, FLOPs and seconds of the
round) print as a range over the group. ``fedcore plan --json`` gives every client's numbers.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fedcore.experiment.plan_costs import ClientPlan, DryRun


def si(value: float, unit: str = "") -> str:
    """``1.81 M``-style numbers (powers of 1000), for FLOPs and counts."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def size(n: float) -> str:
    """Bytes in powers of 1024 (``38.5 MiB``)."""
    for factor, unit in ((2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if n >= factor:
            return f"{n / factor:.4g} {unit}"
    return f"{int(n)} B"


def seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.3g} h"
    if s >= 60:
        return f"{s / 60:.3g} min"
    return f"{s:.3g} s"


def span(values: Iterable[float], fmt: Any) -> str:
    vals = sorted(values)
    lo, hi = vals[0], vals[-1]
    return fmt(lo) if lo == hi else f"{fmt(lo)} - {fmt(hi)}"


def ids(clients: Sequence[int]) -> str:
    """``0-4, 7, 9-11``."""
    out, start, prev = [], clients[0], clients[0]
    for c in [*clients[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ", ".join(out)


def share_key(c: ClientPlan) -> tuple[Any, ...]:
    kinds = tuple(sorted((d, k) for d, kinds in c.bytes.items() for k in kinds))
    return (c.profile, c.params_held, c.params_trained, c.forward_flops, c.train_flops, tuple(sorted(c.memory.items())),
            c.batch_size, c.fits, kinds)


def share_groups(dry: DryRun) -> list[list[ClientPlan]]:
    groups: dict[tuple[Any, ...], list[ClientPlan]] = {}
    for c in dry.clients:
        groups.setdefault(share_key(c), []).append(c)
    return list(groups.values())


def traffic(plans: Sequence[ClientPlan], direction: str) -> str:
    kinds = sorted({k for c in plans for k in c.bytes.get(direction, {})})
    parts = []
    for k in kinds:
        text = span([c.bytes.get(direction, {}).get(k, 0) for c in plans], size)
        count = span([c.messages.get(direction, {}).get(k, 0) for c in plans], lambda v: f"{int(v)}")
        largest = size(max(c.largest.get(direction, {}).get(k, 0) for c in plans))
        parts.append(f"{k} {text}" + (f" ({count} msgs, largest {largest})" if count != "1" else ""))
    return "\n".join(parts) or "-"


def print_dry_run(dry: DryRun, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    data, model = dry.data, dry.model
    console.print(f"[bold]plan of {escape(dry.name)}[/bold], round {dry.round} (dry run: every model built on the "
                  f"meta device, nothing trained, no weights loaded)")
    console.print(f"data: {escape(data.source)}: {data.train:,} train / {data.test:,} test, {len(data.classes)} "
                  f"classes, input {'x'.join(map(str, data.input))}", markup=True)
    fwd = model.get("forward_flops")
    console.print(f"model {escape(str(model['name']))}: {model['params']:,} parameters"
                  + (f", forward {si(fwd, 'FLOP')} per sample (2 FLOPs per multiply-accumulate)" if fwd else
                     f" (global forward not counted: {escape(str(model.get('forward_error')))})"))
    children = {n: f for n, f in (model.get("forward_flops_children") or {}).items()
                if f or model["children"].get(n, 0)}
    if len(children) > 1:
        console.print("  by part: " + ", ".join(f"{escape(n)} {model['children'].get(n, 0):,} params / "
                                                f"{si(f, 'FLOP')}" for n, f in children.items()))
    console.print(f"schedule: {len(dry.dispatched)} of {dry.num_clients} clients dispatched in round {dry.round}; "
                  f"memory = weights + gradients + optimizer state ({dry.optimizer_slots} tensor(s) per trained "
                  f"parameter) + saved activations at the batch shown")
    table = Table(title="clients (grouped by share; ranges over the group)")
    for col in ("clients", "profile", "samples", "params held / trained; their state", "FLOPs/sample fwd / fwd+bwd",
                "FLOPs in round", "down", "up", "peak memory (batch)", "virtual s: compute + comm"):
        table.add_column(col, justify="left" if col in ("clients", "profile", "down", "up") else "right")
    for plans in share_groups(dry):
        c = plans[0]
        limit = size(c.memory_limit or 0)
        fits = "" if c.fits is None else (" fits" if c.fits else f" [red]DOES NOT FIT {limit}[/red]")
        table.add_row(f"{ids([p.client for p in plans])} ({len(plans)})", str(c.profile or "-"),
                      span([p.selected for p in plans], lambda v: f"{int(v):,}"),
                      f"{c.params_held:,} / {c.params_trained:,}\n{size(c.state_bytes)}, "
                      f"{seconds(c.first_download_s)} to fetch once",
                      f"{si(c.forward_flops)} / {si(c.train_flops)}",
                      span([p.round_flops for p in plans], si), escape(traffic(plans, "down")),
                      escape(traffic(plans, "up")), f"{size(c.memory_total)} ({c.batch_size}){fits}",
                      span([p.compute_s for p in plans], seconds) + " + " + span([p.comm_s for p in plans], seconds))
    console.print(table)
    totals = dry.round_bytes()
    for direction in ("down", "up"):
        kinds = totals.get(direction, {})
        console.print(f"round {dry.round} {direction}: " + (", ".join(f"{k} {size(n)}" for k, n in kinds.items())
                                                            or "nothing") + f" (total {size(sum(kinds.values()))})")
    console.print(f"round {dry.round}: {si(dry.round_flops(), 'FLOP')} of client training; virtual time "
                  f"{seconds(dry.round_seconds())} (its slowest dispatched client"
                  + ("" if dry.clock_configured else ", reference profile") + ")")
    notes = list(dry.notes) + sorted({n for c in dry.clients for n in c.notes})
    for note in notes:
        console.print(f"note: {escape(note)}")


__all__ = ["print_dry_run", "seconds", "si", "size"]

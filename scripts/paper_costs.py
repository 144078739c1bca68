"""The expected cost of every paper config, from its dry run: the tables of docs/paper-scale.md.

    python scripts/paper_costs.py --write docs/paper-scale.md      (every block and the summary, ~2 minutes)
    python scripts/paper_costs.py fedv_cifar10                     (print one config's block)
    python scripts/paper_costs.py                                  (print every block and the summary)
    python scripts/paper_costs.py --smoke --write docs/paper-scale.md   (measure the CPU smoke runs)

For each ``examples/paper/*.toml`` the dry run (``fedcore plan``) of round 0, and of the rounds in ``ROUNDS`` where
a later round costs something else (a LoRA stage, a weight phase after the masks, the server's logits coming down),
becomes a table between ``<!-- generated:paper-costs:NAME -->`` and ``<!-- /generated:paper-costs:NAME -->``: one
row per group of alike clients (as ``fedcore plan`` groups them, memory that grows with a client's data a range),
with parameters held and trained, FLOPs per sample, bytes down and up per client and round by kind, peak training
memory and the virtual seconds of the round; and one summary table, a row per config and round, between the
``paper-costs:summary`` markers (the closing note's list). Nothing here depends on timing, so
``tests/test_paper_costs.py`` checks that the blocks are current. ``--smoke`` instead runs every config's smoke run
in this process and writes their wall times, with the load average, between the ``paper-smoke`` markers
(measurements: not checked).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from functools import cache
import os
from pathlib import Path
import sys
import time

import torch

from fedcore.experiment import ClientPlan, DryRun, dry_run, load_config, plan
from fedcore.experiment.plan_report import ids, seconds, si, size  # the planner's own number formats (project tooling)

HERE = Path(__file__).resolve().parents[1] / "examples" / "paper"
COMMAND = "python scripts/paper_costs.py --write docs/paper-scale.md"
ROUNDS: dict[str, tuple[int, ...]] = {
    "safedlora_cifar10": (0, 3, 16),   # stage 1 (whole Swin-T), the switch (rank 12 + backbone), rank 8 (cooling)
    "cos2p_imagenet200": (0, 20),      # a mask round, the first weight round (learned masks)
    "fedvkd_cifar10": (0, 1),          # from round 1 the server's logits come down
}
"""Rounds planned besides round 0, where a later round's costs differ in kind."""

Planner = Callable[..., DryRun]


def configs() -> list[str]:
    """Every paper config, by file stem (``fedv_cifar10``)."""
    return sorted(p.stem for p in HERE.glob("*.toml"))


def plan_round(name: str, round: int = 0) -> DryRun:
    """The dry run of round ``round`` of ``examples/paper/NAME.toml`` (one torch thread, as the tests run it)."""
    torch.set_num_threads(1)
    return dry_run(plan(load_config(HERE / f"{name}.toml", [])), round=round)


def span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``lo - hi`` as printed, one value where both print alike."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} - {hi}"


def _kinds(group: Sequence[ClientPlan], direction: str) -> str:
    kinds = sorted({k for c in group for k in c.bytes.get(direction, {})})
    return "<br>".join(f"{k} {span([c.bytes.get(direction, {}).get(k, 0) for c in group], size)}"
                       for k in kinds) or "-"


def _groups(dry: DryRun) -> list[list[ClientPlan]]:
    """The dispatched clients by profile, parameters, FLOPs, batch and kinds of message: one row each. Unlike
    ``fedcore plan``'s grouping, memory that grows with a client's data (FedVKD's logits from round 1) is a range
    within a row, not a row per client."""
    groups: dict[tuple[object, ...], list[ClientPlan]] = {}
    for c in dry.clients:
        if c.client in dry.dispatched:
            kinds = tuple(sorted((d, k) for d, by_kind in c.bytes.items() for k in by_kind))
            key = (c.profile, c.params_held, c.params_trained, c.forward_flops, c.train_flops, c.batch_size, kinds)
            groups.setdefault(key, []).append(c)
    return list(groups.values())


def _row(group: Sequence[ClientPlan]) -> str:
    c = group[0]
    who = f"{ids([g.client for g in group])} ({len(group)})" + (f", {c.profile}" if c.profile else "")
    memory = f"{span([g.memory_total for g in group], size)} (batch {c.batch_size})"
    clock = span([g.compute_s + g.comm_s for g in group], seconds)
    return (f"| {who} | {c.params_held:,} / {c.params_trained:,} | {si(c.forward_flops)} / {si(c.train_flops)} | "
            f"{_kinds(group, 'down')} | {_kinds(group, 'up')} | {memory} | {clock} |")


NOTES_SEEN_EVERYWHERE = ("pretrained", "labels are synthetic")


def round_table(dry: DryRun) -> list[str]:
    """One round's table: a row per group of alike clients, then the round's totals and its own notes."""
    lines = [f"Round {dry.round}: {len(dry.dispatched)} of {dry.num_clients} clients dispatched; model "
             f"{dry.model['params']:,} parameters, {si(dry.model['forward_flops'])}FLOP forward per sample.", "",
             "| clients | params held / trained | FLOPs per sample, fwd / fwd+bwd | down per client and round | "
             "up per client and round | peak memory | virtual time of the round |",
             "|---|---:|---:|---|---|---:|---:|"]
    lines += [_row(g) for g in _groups(dry)]
    totals = dry.round_bytes()
    lines += ["", f"The round: {size(sum(totals.get('down', {}).values()))} down, "
                  f"{size(sum(totals.get('up', {}).values()))} up, {seconds(dry.round_seconds())} of virtual time "
                  f"(the slowest dispatched client{'' if dry.clock_configured else ', on the phone preset'})."]
    own = [n for n in dry.notes if not any(s in n for s in NOTES_SEEN_EVERYWHERE)]
    own += sorted({n for c in dry.clients for n in c.notes})
    lines += [f"Note: {n}." if not n.endswith(".") else f"Note: {n}" for n in own]
    return lines


def block(name: str, planner: Planner = plan_round) -> str:
    """The markdown block of config ``name``: a table per planned round."""
    lines = [f"`fedcore plan examples/paper/{name}.toml` (generated by `{COMMAND}`):"]
    for r in ROUNDS.get(name, (0,)):
        lines += ["", *round_table(planner(name, r))]
    return "\n".join(lines)


def _summary_row(name: str, dry: DryRun) -> str:
    sent = [c for c in dry.clients if c.client in dry.dispatched]

    def each(value: Callable[[ClientPlan], float], fmt: Callable[[float], str]) -> str:
        return span([value(c) for c in sent], fmt)

    def traffic(c: ClientPlan, direction: str) -> float:
        return sum(c.bytes.get(direction, {}).values())

    count = lambda v: f"{int(v):,}"  # noqa: E731
    return (f"| `{name}` | {dry.round} | {len(dry.dispatched)} of {dry.num_clients} | {dry.model['params']:,} | "
            f"{each(lambda c: c.params_held, count)} / {each(lambda c: c.params_trained, count)} | "
            f"{each(lambda c: c.forward_flops, si)} / {each(lambda c: c.train_flops, si)} | "
            f"{each(lambda c: traffic(c, 'down'), size)} / {each(lambda c: traffic(c, 'up'), size)} | "
            f"{each(lambda c: c.memory_total, size)} (batch {each(lambda c: c.batch_size, count)}) | "
            f"{seconds(dry.round_seconds())} |")


def summary(names: Sequence[str], planner: Planner = plan_round) -> str:
    """One row per config and planned round: the closing-note table of every paper config."""
    return "\n".join([
        f"Every config's dry run in one table (generated by `{COMMAND}`; per client: the range over the clients "
        "the round dispatches; FLOPs per sample, 2 per multiply-accumulate; memory: weights + gradients + optimiser "
        "state + saved activations in fp32 at the config's batch; bytes: every kind of message together, per client "
        "and round):", "",
        "| config | round | clients | model parameters | per client: held / trained | FLOPs per sample, fwd / "
        "fwd+bwd | down / up per client and round | peak memory | virtual time of the round |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *[_summary_row(n, planner(n, r)) for n in names for r in ROUNDS.get(n, (0,))]])


def smoke_block(names: Sequence[str]) -> str:
    """Measured: each config's smoke run in this process (its build and round), with the load average."""
    from fedcore.experiment.smoke_run import smoke

    rows = []
    for name in names:
        torch.set_num_threads(1)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        outcome = smoke(plan(load_config(HERE / f"{name}.toml", [])))
        total = time.perf_counter() - start
        status = "passed" if outcome.ok else f"FAILED: {outcome.problem}"
        rows.append(f"| `{name}` | {outcome.params / 1e6:.1f} M | {outcome.build_s:.1f} s | {outcome.run_s:.1f} s "
                    f"({sum(outcome.wave_s):.1f} s) | {total:.1f} s | {load:.1f} | {status} |")
    return "\n".join([
        "Measured by `python scripts/paper_costs.py --smoke --write docs/paper-scale.md` (one process, one "
        f"torch thread, batch 2, labels folded onto 10 classes; {os.cpu_count()} CPU cores shared with other work):",
        "", "| config | parameters | build | round (its clients' wave) | smoke in all | load average at its start | "
        "outcome |", "|---|---:|---:|---:|---:|---:|---|", *rows])


def replace_block(doc: Path, tag: str, markdown: str) -> str:
    """``doc``'s text with the block between ``tag``'s markers replaced (each marker exactly once)."""
    text = doc.read_text() if isinstance(doc, Path) else doc
    start, end = f"<!-- generated:{tag} -->", f"<!-- /generated:{tag} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{doc} needs exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{markdown.strip()}\n{end}{tail}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="configs (file stems); default: every examples/paper/*.toml")
    parser.add_argument("--write", type=Path, metavar="DOC", help="replace the marked blocks in this file")
    parser.add_argument("--smoke", action="store_true", help="measure the smoke runs instead (not checked by tests)")
    args = parser.parse_args(argv)
    names = args.names or configs()
    unknown = sorted(set(names) - set(configs()))
    if unknown:
        parser.error(f"no such config: {', '.join(unknown)}; choose from {', '.join(configs())}")
    if args.smoke:
        blocks = {"paper-smoke": smoke_block(names)}
    else:
        planner = cache(plan_round)  # each round planned once for its block and the summary
        blocks = {f"paper-costs:{n}": block(n, planner) for n in names}
        if not args.names:  # the summary needs every config
            blocks["paper-costs:summary"] = summary(names, planner)
    if args.write is None:
        print("\n\n".join(blocks.values()))
        return
    text = args.write.read_text()
    for tag, markdown in blocks.items():
        text = replace_block(text, tag, markdown)  # type: ignore[arg-type]
    args.write.write_text(text)
    print(f"wrote {', '.join(blocks)} into {args.write}", file=sys.stderr)


if __name__ == "__main__":
    main()

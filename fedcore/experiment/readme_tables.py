"""Write a generated results table into a README between two marker comments, so no table is typed by hand.

    replace_block(Path("plugins/fedcore-promptfl/README.md"), "promptfl-results", markdown)

replaces everything between ``<!-- generated:promptfl-results -->`` and ``<!-- /generated:promptfl-results -->``
(both must already be in the file, once each; a missing or repeated marker is an error, nothing is written).
The results-table scripts (each plugin's ``repro/tables.py``) share their command line through
:func:`tables_parser`, :func:`plots_dir` and :func:`emit`: ``SWEEP_DIR [--write README]``, plots next to the README.
Public through :mod:`fedcore.experiment`.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import contextlib
from pathlib import Path
import shlex
from typing import Any


def replace_block(readme: Path, tag: str, markdown: str) -> None:
    text = readme.read_text()
    start, end = f"<!-- generated:{tag} -->", f"<!-- /generated:{tag} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"{readme} needs exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    readme.write_text(f"{head}{start}\n{markdown.strip()}\n{end}{tail}")


def tables_parser(doc: str, sweep_help: str = "the sweep directory") -> argparse.ArgumentParser:
    """``SWEEP_DIR [--write README]``, the arguments every results-table script takes (add more, then parse)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help=sweep_help)
    parser.add_argument("--write", type=Path, metavar="README", help="replace the marked block in this file")
    return parser


def plots_dir(args: argparse.Namespace, tag: str) -> Path:
    """Where a block's plots go: ``results/TAG`` next to the README written (else inside the sweep)."""
    return (args.write.parent if args.write else args.sweep) / "results" / tag


def emit(text: str, readme: Path | None, tag: str) -> None:
    """Print the block; with a README, also write it between the tag's markers there."""
    print(text)
    if readme is not None:
        replace_block(readme, tag, text)
        print(f"wrote the block {tag!r} into {readme}")


def sweep_command(sweep: Path) -> str:
    """The command that made a sweep, as its ``sweep.json`` recorded it."""
    from fedcore.experiment.sweep_spec import read_listing

    return read_listing(sweep).get("command") or f"fedcore sweep --resume {sweep}"


def script_command(script: str | Path, argv: Sequence[str]) -> str:
    """``python SCRIPT ARGS`` as typed: the script's path relative to the working directory when it lies below it
    (pass ``__file__``), so a block written from the plugin's folder names ``repro/tables.py``."""
    path = Path(script)
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(Path.cwd().resolve())
    return f"python {path.as_posix()} {shlex.join(argv)}".rstrip()


def commands_line(script: str | Path, argv: Sequence[str], *sweeps: Path) -> str:
    """The block's first line: the sweeps' commands, then this table script's (pass ``__file__``), and what the
    cells are."""
    from fedcore.experiment.sweep_spec import read_listing

    listings = [read_listing(sweep) for sweep in sweeps]
    made = ", ".join(f"`{sweep_command(sweep)}`" for sweep in sweeps)
    return (f"**Commands:** {made}, then `{script_command(script, argv)}` "
            f"({sum(len(x['settings']) for x in listings)} settings x seeds {listings[0]['seeds']}; "
            f"every cell is a run directory).")


def run_state(run: str | Path) -> dict[str, Any] | None:
    """A run directory's state (round, ledger, ...) from its newest checkpoint that verifies; None without one."""
    from fedcore.engine.checkpoint import latest_good

    _, state, _, _ = latest_good(Path(run) / "checkpoints")
    return state


def not_finished(*tables: Any) -> str | None:
    """"Not finished (left out): ..." naming the cells a table rests without, or None when every cell finished."""
    missing = [f"{s.label} seed {seed}" for t in tables if t is not None for s in t.settings for seed in s.missing]
    return f"Not finished (left out): {', '.join(missing)}." if missing else None


__all__ = ["commands_line", "emit", "not_finished", "plots_dir", "replace_block", "run_state", "script_command",
           "sweep_command", "tables_parser"]

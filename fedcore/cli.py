"""The ``fedcore`` command.

    fedcore run CONFIG.toml [--set key=value ...] [--out DIR] [--resume DIR [--strict-versions]] [--overwrite]
    fedcore run CONFIG.toml --dry-run [--json] [--round N]     (the same as fedcore plan)
    fedcore run CONFIG.toml --smoke [--device cuda] [--precision bf16] [--batch N] [--classes N]
    fedcore plan CONFIG.toml [--set key=value ...] [--json] [--round N]
    fedcore describe CONFIG.toml [--set key=value ...] [--json]
    fedcore describe NAME [--json]           (a component, recipe, dataset, model, executor or config table)
    fedcore plugins [-v]
    fedcore report RUN_DIR [RUN_DIR ...] [--out DIR] [--metric KEY]
    fedcore sweep CONFIG.toml [--grid KEY=A,B ...] [--seeds N] [--jobs N | --ray] [--out DIR] [--resume DIR]
    fedcore report SWEEP_DIR [--baseline SETTING] [--metric KEY]

Mistakes in what the user typed (config, names, settings, paths) print one line,
``fedcore: error: ...``, and exit with status 2 before any work starts.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
from pathlib import Path
import shlex
import sys
from typing import Any, NoReturn

EXIT_USAGE = 2
EXIT_FAILED = 1


class UsageError(Exception):
    """Raised instead of argparse's exit so that ``main`` returns a status (handy for tests)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, our prefix, no usage dump
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    import fedcore

    top = _Parser(prog="fedcore", description="Run federated / split / collaborative training experiments.")
    top.add_argument("--version", action="version", version=f"fedcore {fedcore.__version__}")
    sub = top.add_subparsers(dest="command", metavar="{run,plan,sweep,describe,plugins,report,new}")

    run = sub.add_parser("run", help="run a pipeline described in a TOML config", description=(
        "Run a pipeline described in TOML. Progress is live on a terminal and one line per round otherwise; "
        "everything lands in a run directory (config, manifest, metrics.jsonl, checkpoints, model)."))
    run.add_argument("config", nargs="?", help="CONFIG.toml (optional with --resume: the run directory's own config)")
    run.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value; dotted keys, TOML values: --set pipeline.local_update.lr=0.1")
    run.add_argument("--out", metavar="DIR", help="run directory (default: runs/<name>, numbered if taken)")
    run.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last good checkpoint")
    run.add_argument("--overwrite", action="store_true", help="replace the run that --out already holds")
    run.add_argument("--strict-versions", action="store_true",
                     help="with --resume: refuse when fedcore, torch or a plugin has another version than the run's "
                          "earlier rounds (default: a one-line warning; manifest.json keeps each segment's versions)")
    run.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto",
                     help="live display (rich), one line per round (plain), or nothing; auto picks by terminal")
    run.add_argument("--report", action="store_true", help="write the report (table and plots) when the run ends")
    run.add_argument("--dry-run", action="store_true",
                     help="plan the run instead: per client and round its parameters, FLOPs, bytes by kind, memory "
                          "and virtual time, from models built on the meta device (the same as fedcore plan)")
    run.add_argument("--smoke", action="store_true",
                     help="one round of one local step on two clients: the config's architecture with random weights "
                          "on synthetic inputs of its shape (no data or weights needed)")
    run.add_argument("--device", help="with --smoke: where it computes (default cpu; cuda for a GPU check)")
    run.add_argument("--precision", choices=("fp32", "bf16", "fp16"), help="with --smoke: client arithmetic")
    run.add_argument("--batch", type=int, metavar="N", help="with --smoke: samples per client, one step (default 2)")
    run.add_argument("--classes", type=int, metavar="N",
                     help="with --smoke: fold the labels onto N classes (default 10 on the CPU, all on a GPU; 0 = all)")
    run.add_argument("--json", action="store_true", help="with --dry-run or --smoke: print the result as JSON")
    run.add_argument("--round", type=int, default=0, metavar="N", help="with --dry-run: the round to plan")

    plan = sub.add_parser("plan", help="a config's costs per client and round, without running it (a dry run)",
                          description="Build every model on the meta device (no memory, no weights) and print per "
                          "client and per round: parameters held and trained, forward and backward FLOPs, bytes up "
                          "and down by message kind, peak training memory and the virtual time on the configured "
                          "device profiles. A [plan] table states the data's shape when the data is not here.")
    plan.add_argument("config", help="CONFIG.toml")
    plan.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value, as in fedcore run")
    plan.add_argument("--json", action="store_true", help="every client's numbers as JSON")
    plan.add_argument("--round", type=int, default=0, metavar="N", help="the round to plan (default 0)")

    desc = sub.add_parser("describe", help="a config's resolved pipeline, or a name's slots, settings and package",
                          description="With CONFIG.toml: print the resolved config and pipeline without running it. "
                          "With a NAME (component, recipe, dataset, model, executor, config table): what it is, "
                          "the slots it fills, its settings (type, default, allowed values, help) and the package "
                          "providing it.")
    desc.add_argument("config", metavar="CONFIG.toml|NAME", help="a config file, or a registered name")
    desc.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value (configs only)")
    desc.add_argument("--json", action="store_true", help="print the description as JSON")

    plugins = sub.add_parser("plugins",
                             help="list installed plugins, their components and slots, recipes, and failures")
    plugins.add_argument("-v", "--verbose", action="store_true", help="show full tracebacks of failed plugins")

    sweep = sub.add_parser("sweep", help="run a grid of settings x seeds, each cell a run directory", description=(
        "Run every (setting, seed) cell of a sweep: a config's [sweep] table and/or --grid/--seeds. Each cell is a "
        "run directory SWEEP_DIR/<setting>/seed-<n>; running the same sweep again skips finished cells and resumes "
        "cells cut short. Summarise with fedcore report SWEEP_DIR."))
    sweep.add_argument("config", nargs="?", help="CONFIG.toml (optional with --resume: the sweep's own sweep.toml)")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=A,B",
                       help="sweep a config key over comma-separated TOML values: "
                       "--grid pipeline.local_update.lr=0.05,0.1")
    sweep.add_argument("--seeds", type=int, metavar="N", help="run seeds 0..N-1 (replaces sweep.seeds)")
    sweep.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a value of the base config, as in fedcore run")
    sweep.add_argument("--out", metavar="DIR", help="sweep directory (default: runs/<name>-sweep)")
    sweep.add_argument("--resume", metavar="DIR", help="continue the sweep in DIR: finished cells are skipped")
    sweep.add_argument("--jobs", type=int, default=1, metavar="N", help="cells run at once, each in its own process")
    sweep.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="run cells as Ray tasks (a local Ray with --jobs CPUs, or the cluster at ADDRESS)")
    sweep.add_argument("--baseline", metavar="SETTING", help="the setting others are paired against in the report")
    sweep.add_argument("--report", action="store_true", help="print and write the statistics when the sweep ends")

    report = sub.add_parser("report", help="summary table and plots of run directories, or statistics of a sweep")
    report.add_argument("runs", nargs="+", metavar="RUN_DIR|SWEEP_DIR")
    report.add_argument("--out", metavar="DIR", help="where plots go (default: RUN_DIR/report, or runs/report-A-vs-B)")
    report.add_argument("--metric", help="the key to plot: any numeric column, e.g. client_kd_loss (default: "
                                         "test_accuracy or the first *accuracy)")
    report.add_argument("--baseline", metavar="SETTING",
                        help="a sweep's setting the others are compared with, paired by seed (default: its first)")
    new = sub.add_parser("new", help="start a plugin: fedcore new plugin NAME [--slot SLOT]", description=(
        "Write a plugin distribution fedcore-NAME: pyproject.toml (entry point, the fedcore pin of the version "
        "policy), src/ with a working component of the slot and its settings, a recipe, tests/ with the contract "
        "checks and an end-to-end run, and a README with a results block for a sweep to fill."))
    new.add_argument("what", choices=("plugin",), help="what to create")
    new.add_argument("name", help="the plugin's short name: entry point, component and recipe name (e.g. fedadam)")
    new.add_argument("--slot", default="aggregate", metavar="SLOT",
                     help="the slot its component fills: aggregate (default), local_update, select, evaluate")
    new.add_argument("--out", metavar="DIR", help="where to write it (default: ./fedcore-NAME; must not exist)")
    return top


# -- commands ----------------------------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    from fedcore.experiment.build import plan
    from fedcore.experiment.plan_costs import dry_run

    if args.config is None:
        raise _config_error("give a CONFIG.toml to plan")
    dry = dry_run(plan(_base_config(args.config, args.sets)), round=args.round)
    if args.json:
        print(json.dumps(dry.to_dict(), indent=2, default=str))
        return 0
    from fedcore.experiment.plan_report import print_dry_run

    print_dry_run(dry, _console())
    return 0


def cmd_smoke(args: argparse.Namespace) -> int:
    from fedcore.experiment.build import plan
    from fedcore.experiment.smoke_run import print_smoke, smoke

    if args.config is None:
        raise _config_error("give a CONFIG.toml to smoke-test")
    outcome = smoke(plan(_base_config(args.config, args.sets)), device=args.device, precision=args.precision,
                    batch=args.batch, classes=args.classes)
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2, default=str))
    else:
        print_smoke(outcome, _console())
    return 0 if outcome.ok else EXIT_FAILED


def _base_config(path: str, sets: Sequence[str]) -> dict[str, Any]:
    """The config to plan or smoke-test: a sweep config's base (its ``[sweep]`` table set aside)."""
    from pathlib import Path

    from fedcore.experiment.config import load_config, read_toml

    raw = read_toml(path)
    if "sweep" not in raw:
        return load_config(path, sets)
    raw.pop("sweep")
    print(f"{path}: a sweep; its base config (the [sweep] table set aside)", file=sys.stderr)
    config = load_config(None, sets, base=raw)
    config["name"] = config["name"] if raw.get("name") else Path(path).stem
    return config


def cmd_run(args: argparse.Namespace) -> int:
    from fedcore.errors import ConfigError
    from fedcore.experiment.progress import accuracy_key
    from fedcore.experiment.runner import prepare, run_experiment

    if args.dry_run and args.smoke:
        raise ConfigError("--dry-run and --smoke are two different checks; give one")
    if (args.dry_run or args.smoke) and (args.resume or args.out or args.overwrite):
        raise ConfigError(f"{'--dry-run' if args.dry_run else '--smoke'} writes no run directory; drop --out, "
                          f"--resume and --overwrite")
    if not args.smoke and (args.device or args.precision or args.batch or args.classes is not None):
        raise ConfigError("--device, --precision, --batch and --classes go with --smoke (a run takes them from its "
                          "config)")
    if not (args.dry_run or args.smoke) and (args.json or args.round):
        raise ConfigError("--json and --round go with --dry-run (or fedcore plan)")
    if args.dry_run:
        return cmd_plan(args)
    if args.smoke:
        return cmd_smoke(args)
    if args.resume and args.out:
        raise ConfigError("--resume continues the run in its own directory; drop --out")
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other")
    if args.strict_versions and not args.resume:
        raise ConfigError("--strict-versions goes with --resume")
    materials = prepare(args.config, args.sets, resume=args.resume)
    outcome = run_experiment(materials, out=args.out, resume=args.resume, overwrite=args.overwrite,
                             progress=args.progress, strict_versions=args.strict_versions)
    rows = outcome.rows
    if outcome.state == "failed":
        print(f"fedcore: error: the run failed: {outcome.error}", file=sys.stderr)
        print(f"run directory: {outcome.run_dir}")
        return EXIT_FAILED
    if outcome.state == "already-finished":
        print(f"{outcome.run_dir}: the run already finished ({len(rows)} rounds); nothing to resume")
        stopped = outcome.stopped
        if stopped is not None:
            print(f"stopped early: {stopped}")
    else:
        key = accuracy_key(rows[-1]) if rows else None
        final = f", final {key} {rows[-1][key]:.4f}" if key else ""
        print(f"finished {len(rows)} rounds{final}")
        if outcome.stopped is not None:
            print(f"stopped early: {outcome.stopped}")
    print(f"run directory: {outcome.run_dir}")
    if args.report:
        _report([outcome.run_dir], None, None)
    else:
        print(f"report: fedcore report {outcome.run_dir}")
    return 0


def _is_config(text: str) -> bool:
    """A path (an existing file, a ``.toml`` name or anything with a separator) rather than a registered name."""
    return text.endswith(".toml") or "/" in text or Path(text).is_file()


def cmd_describe(args: argparse.Namespace) -> int:
    if not _is_config(args.config):
        if args.sets:
            raise _config_error("--set applies to a config file, not to a name")
        return _describe_name(args.config, as_json=args.json)
    return _describe_config(args)


def _describe_name(name: str, *, as_json: bool) -> int:
    from rich.table import Table

    from fedcore.describe import describe_name

    info = describe_name(name)
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    console = _console()
    for i, entry in enumerate([info, *info["also"]]):
        if i:
            console.print()
        origin = f"{entry['distribution']} {entry['version']}" if entry["distribution"] else "this source tree"
        console.print(f"[bold]{entry['name']}[/bold]  {entry['kind']} from plugin {entry['plugin']} ({origin})")
        if entry["doc"]:
            console.print(entry["doc"], markup=False)
        slots = entry["slots"]
        if entry["kind"] == "recipe":
            _print_recipe(console, entry)
            continue
        if entry["kind"] == "component":
            console.print("slot: " + (", ".join(slots) or "none (a plugin: list it under pipeline.plugins)"))
        for label in ("wraps", "observes"):
            if entry[label]:
                console.print(f"{label}: " + ", ".join(h.removeprefix("fedcore_") for h in entry[label]))
        if entry.get("value"):
            console.print(f"value: {entry['value']}")
        if entry["settings"]:
            table = Table(title="settings")
            for col in ("setting", "type", "default", "allowed", "help"):
                table.add_column(col)
            for row in entry["settings"]:
                default = ("(required)" if row["required"] else "" if row["name"].startswith("**")
                           else repr(row["default"]))
                table.add_row(row["name"], row["type"], default, row["allowed"], row["help"])
            console.print(table)
        elif entry["kind"] != "table":
            console.print("settings: none")
    return 0


def _print_recipe(console: Any, entry: dict[str, Any]) -> None:
    """A recipe: one table of slot -> component -> settings (the recipe's values, ``*`` where it sets them)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"recipe {entry['name']}: slots (replace any: [pipeline.<slot>] or "
                               f"fedcore.recipe(..., slot=...))"))
    for col in ("slot", "component", "from", "settings (* = set by the recipe)"):
        table.add_column(col)
    for part in entry["components"]:
        origin = f"{part['distribution']} {part['version']}" if part["distribution"] else "-"
        settings = ", ".join(f"{'*' if row['set_by_recipe'] else ''}{row['name']}={row['value']!r}"
                             for row in part["settings"] if not row["name"].startswith("**"))
        table.add_row(part["slot"], part["name"], origin, settings or "-")
    console.print(table)
    setup = entry["test_setup"]
    console.print("micro setup (recipe matrix): " + ", ".join(f"{k} = {v!r}" for k, v in setup.items()), markup=False)
    console.print(f"run it: recipe = \"{entry['name']}\" in a config; see docs/recipes.md", markup=False)


def _describe_config(args: argparse.Namespace) -> int:
    import tomli_w

    from fedcore.experiment.build import plan
    from fedcore.experiment.config import load_config, read_toml

    if "sweep" in read_toml(args.config):
        return _describe_sweep(args)
    p = plan(load_config(args.config, args.sets))
    manifest = p.pipeline.describe()
    if args.json:
        print(json.dumps({"config": p.resolved, "fingerprint": p.fingerprint, "pipeline": manifest}, indent=2,
                         default=str))
        return 0
    from rich.table import Table

    console = _console()
    console.print(f"[bold]{p.name}[/bold]  (fingerprint {p.fingerprint})")
    print(tomli_w.dumps(p.resolved))
    table = Table(title="pipeline")
    for col in ("slot / role", "component", "from", "settings"):
        table.add_column(col)
    for row in manifest["components"]:
        role = ", ".join(row["provides"]) or ""
        if row["wraps"]:
            role += (" " if role else "") + "wraps " + ", ".join(row["wraps"])
        if row["observes"]:
            role += (" " if role else "") + "observes " + ", ".join(h.removeprefix("fedcore_") for h in row["observes"])
        origin = f"{row['distribution']} {row['version']}" if row["distribution"] else "-"
        if row["default"]:
            origin += " (default)"
        settings = ", ".join(f"{k}={v!r}" for k, v in row["settings"].items())
        table.add_row(role, row["name"] or row["class"], origin, settings)
    console.print(table)
    return 0


def _describe_sweep(args: argparse.Namespace) -> int:
    """A config with a ``[sweep]`` table: every cell checked (nothing runs), the settings and seeds listed."""
    from fedcore.experiment.sweep_spec import load_sweep_spec

    spec = load_sweep_spec(args.config, sets=args.sets)
    cells = spec.cells()
    settings = spec.settings()
    if args.json:
        print(json.dumps({"name": spec.name, "seeds": spec.seeds, "baseline": spec.baseline_label(),
                          "settings": [{"label": s.label, "dir": s.dirname, "values": s.values} for s in settings],
                          "cells": [c.dirname for c in cells]}, indent=2, default=str))
        return 0
    from rich.table import Table

    console = _console()
    console.print(f"[bold]sweep {spec.name}[/bold]: {len(settings)} settings x {len(spec.seeds)} seeds = "
                  f"{len(cells)} cells, every one checked; baseline {spec.baseline_label()!r}", markup=True)
    table = Table(title=f"settings (seeds {', '.join(map(str, spec.seeds))})")
    for col in ("setting", "directory", "sets"):
        table.add_column(col)
    for setting in settings:
        table.add_row(setting.label, setting.dirname,
                      ", ".join(f"{k} = {v!r}" for k, v in setting.values.items()) or "-")
    console.print(table)
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from rich.table import Table

    import fedcore
    from fedcore.registry import slots_of

    console = _console()
    registry = fedcore.plugins.registry()
    table = Table(title="installed fedcore plugins")
    for col in ("plugin", "distribution", "version", "components (slots)", "status"):
        table.add_column(col)
    failed = []
    for info in fedcore.list_plugins():
        parts = []
        for name in info.components:
            kind, _, short = name.partition(":") if ":" in name else ("component", "", name)
            if kind == "component":
                entry = registry.get(short, "component")
                provides, wraps, observes = slots_of(entry.obj)
                roles = provides + [f"wraps {w}" for w in wraps] + ([f"observes {len(observes)}"] if observes else [])
                parts.append(f"{short} ({', '.join(roles) or '-'})")
            elif kind != "recipe":  # recipes have their own table below
                parts.append(f"{kind} {short}")
        status = "[green]ok" if info.ok else "[red]failed"
        table.add_row(info.name, info.distribution or "-", info.version or "-", "\n".join(parts) or "-", status)
        if not info.ok:
            failed.append(info)
    console.print(table)
    recipes = Table(title="recipes (fedcore describe NAME; recipe = \"NAME\" in a config)")
    for col in ("recipe", "distribution", "help"):
        recipes.add_column(col)
    for entry in registry.entries("recipe"):
        recipes.add_row(entry.name, f"{entry.distribution} {entry.version}" if entry.distribution else "-", entry.help)
    console.print(recipes)
    for info in failed:
        reason = info.error if args.verbose else (info.error or "").strip().splitlines()[-1]
        console.print(f"[red]plugin {info.name} ({info.distribution} {info.version}, {info.module}) failed to "
                      f"import:[/red] {reason}")
    return 0


def _report(paths: Sequence[str | Path], out: str | None, metric: str | None) -> None:
    from fedcore.experiment.report import load_runs, print_table, write_report

    runs = load_runs(paths)
    where, files, summaries, metric = write_report(runs, out, metric)
    print_table(summaries, metric)
    print(f"report written to {where}/: " + ", ".join(f.name for f in files))


def cmd_report(args: argparse.Namespace) -> int:
    from fedcore.experiment.sweep_spec import is_sweep_dir

    if any(is_sweep_dir(p) for p in args.runs):
        if len(args.runs) != 1:
            raise _config_error("report: give one sweep directory at a time")
        _sweep_report(args.runs[0], args.out, args.metric, args.baseline)
        return 0
    if args.baseline:
        raise _config_error("report: --baseline applies to a sweep directory")
    _report(args.runs, args.out, args.metric)
    return 0


def _sweep_report(directory: str | Path, out: str | None, metric: str | None, baseline: str | None) -> None:
    from fedcore.experiment.sweep_report import write_sweep_report

    stats, files = write_sweep_report(directory, out, metric=metric, baseline=baseline)
    stats.print(_console())
    print(f"report written to {files[0].parent}/: " + ", ".join(f.name for f in files))


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedcore.experiment.sweep_run import run_sweep
    from fedcore.experiment.sweep_spec import SPEC

    config, out = args.config, args.out
    if args.resume:
        if out and Path(out) != Path(args.resume):
            raise _config_error("--resume continues the sweep in its own directory; drop --out")
        if config is None:
            if not (Path(args.resume) / SPEC).is_file():
                raise _config_error(f"--resume {args.resume}: not a fedcore sweep directory (no {SPEC})")
            config = Path(args.resume) / SPEC
        out = args.resume
    if config is None:
        raise _config_error("give a CONFIG.toml to sweep (or --resume SWEEP_DIR)")
    outcome = run_sweep(config, grid=args.grid, seeds=args.seeds, sets=args.sets, out=out, jobs=args.jobs,
                        ray=args.ray is not None, ray_address=args.ray or None, baseline=args.baseline,
                        report=print, command=None if args.resume else shlex.join(["fedcore", *args.argv]))
    counts = {state: sum(c.state == state for c in outcome.cells) for state in ("finished", "skipped", "failed")}
    print(f"sweep: {counts['finished']} cells run, {counts['skipped']} already finished, {counts['failed']} failed")
    print(f"sweep directory: {outcome.directory}")
    if args.report:
        _sweep_report(outcome.directory, None, None, args.baseline)
    else:
        print(f"report: fedcore report {outcome.directory}")
    return EXIT_FAILED if outcome.failed else 0


def cmd_new(args: argparse.Namespace) -> int:
    from fedcore.scaffold import new_plugin

    root = Path(args.out or f"fedcore-{args.name}")
    written = new_plugin(args.name, root, slot=args.slot)
    print(f"wrote fedcore-{args.name} ({len(written)} files) in {root}")
    print(f"next: pip install -e '{root}[test]' && python -m pytest {root / 'tests'}")
    return 0


COMMANDS = {"run": cmd_run, "plan": cmd_plan, "sweep": cmd_sweep, "describe": cmd_describe, "plugins": cmd_plugins,
            "report": cmd_report, "new": cmd_new}


def main(argv: Sequence[str] | None = None) -> int:
    from fedcore.errors import ConfigError, FedcoreError

    parser = _parser()
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"fedcore: error: {exc}".replace("fedcore: error: fedcore: ", "fedcore: error: ", 1), file=sys.stderr)
        return EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    from fedcore.experiment.termination import Terminated, terminate_as_interrupt

    terminate_as_interrupt()  # SIGTERM ends a run as Ctrl-C does: state interrupted, resumable
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"fedcore: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except FedcoreError as exc:
        print(f"fedcore: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ImportError as exc:  # a library imported where a component builds or runs (docs/plugins.md) is missing
        print(f"fedcore: error: {_missing_library(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except Terminated:
        print("fedcore: terminated (SIGTERM); continue with fedcore run --resume RUN_DIR", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("fedcore: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file fedcore had to read or write (the run directory's are worded where they fail)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"fedcore: error: {where}{exc.strerror or _one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `fedcore describe X | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def console() -> int:
    """The ``fedcore`` command and ``python -m fedcore``: :func:`main` in a process of its own (tests call ``main``).

    The process ends with the command, so what exists when it starts is frozen out of the garbage collector
    (``gc.freeze``; the imports already are, fedcore/_collector.py), and what the command made too once it
    returns: Python's collections at exit would otherwise walk it all (0.4-0.5 s of CPU after a run). Objects are
    still freed when nothing refers to them; only reference cycles left at exit are not collected.
    """
    import gc

    gc.freeze()
    try:
        return main()
    finally:
        gc.freeze()


def _config_error(message: str) -> Exception:
    from fedcore.errors import ConfigError

    return ConfigError(message)


def _console() -> Any:
    """A rich console; off a terminal (a pipe, CI) it is wide instead of 80 columns, so tables stay readable."""
    from rich.console import Console

    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=160)


def _missing_library(exc: ImportError) -> str:
    """``ModuleNotFoundError: No module named 'peft' (imported by fedcore_lora.share of plugin 'lora' (fedcore-lora
    0.1.0))``: the cause and the plugin whose code imported it."""
    import fedcore

    importer = None
    tb = exc.__traceback__
    while tb is not None:  # the innermost frame of Python code, not of the import machinery
        if not tb.tb_frame.f_code.co_filename.startswith("<frozen"):
            importer = tb.tb_frame.f_globals.get("__name__")
        tb = tb.tb_next
    where = ""
    if importer:
        package = importer.partition(".")[0]
        try:
            plugins = fedcore.list_plugins()
        except fedcore.FedcoreError:  # a broken installation: the cause alone still says what is missing
            plugins = []
        owner = next((p for p in plugins if p.module.partition(".")[0] == package and p.name != "builtin"), None)
        origin = f" of plugin {owner.name!r} ({owner.distribution} {owner.version})" if owner else ""
        where = f" (imported by {importer}{origin})"
    return f"{type(exc).__name__}: {_one_line(exc)}{where}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":  # python -m fedcore.cli (python -m fedcore is the same command)
    sys.exit(main())

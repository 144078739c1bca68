"""Experiments from TOML configs: checking a config, the run directory, progress, reports and plots.

    from fedcore.experiment import load_config, prepare, run_experiment
    outcome = run_experiment(prepare("examples/fedavg_dirichlet.toml", ["rounds=3"]), out="runs/try")
    table = run_sweep("examples/fedavg_iid.toml", grid=["pipeline.local_update.lr=0.05,0.1"], seeds=3).statistics()

    dry = dry_run(plan(load_config("examples/paper/fedv_cifar10.toml")))      # fedcore plan: costs, nothing runs
    outcome = smoke(plan(load_config("examples/fedavg_dirichlet.toml")))       # --smoke: one step, two clients

The ``fedcore`` command (:mod:`fedcore.cli`) is a thin layer over this package. Its names load on first use
(PEP 562): a plugin that registers a config table imports :class:`Table` without the runner, reports and sweeps.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedcore.experiment.build import Materials, Plan, materialize, plan
    from fedcore.experiment.config import Key, Table, load_config, register_table
    from fedcore.experiment.plan_costs import ClientPlan, DryRun, dry_run
    from fedcore.experiment.report import load_runs, write_report
    from fedcore.experiment.runner import Outcome, prepare, run_experiment
    from fedcore.experiment.smoke_run import SmokeOutcome, smoke
    from fedcore.experiment.sweep_report import SweepStatistics, sweep_statistics, write_sweep_report
    from fedcore.experiment.sweep_run import SweepOutcome, run_sweep

_HOMES = {
    "build": ("Materials", "Plan", "materialize", "plan"),
    "config": ("Key", "Table", "load_config", "register_table"),
    "plan_costs": ("ClientPlan", "DryRun", "dry_run"),
    "report": ("load_runs", "write_report"),
    "runner": ("Outcome", "prepare", "run_experiment"),
    "smoke_run": ("SmokeOutcome", "smoke"),
    "sweep_report": ("SweepStatistics", "sweep_statistics", "write_sweep_report"),
    "sweep_run": ("SweepOutcome", "run_sweep"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["ClientPlan", "DryRun", "Key", "Materials", "Outcome", "Plan", "SmokeOutcome", "SweepOutcome",
           "SweepStatistics", "Table", "dry_run", "load_config", "load_runs", "materialize", "plan", "prepare",
           "register_table", "run_experiment", "run_sweep", "smoke", "sweep_statistics", "write_report",
           "write_sweep_report"]


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

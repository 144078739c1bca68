"""Experiments from TOML configs: checking a config, the run directory, progress, reports and plots.

    from fedcore.experiment import load_config, prepare, run_experiment
    outcome = run_experiment(prepare("examples/fedavg_dirichlet.toml", ["rounds=3"]), out="runs/try")
    table = run_sweep("examples/fedavg_iid.toml", grid=["pipeline.local_update.lr=0.05,0.1"], seeds=3).statistics()

    dry = dry_run(plan(load_config("examples/paper/fedv_cifar10.toml")))      # fedcore plan: costs, nothing runs
    outcome = smoke(plan(load_config("examples/fedavg_dirichlet.toml")))       # --smoke: one step, two clients

The ``fedcore`` command (:mod:`fedcore.cli`) is a thin layer over this package.
"""
from fedcore.experiment.build import Materials, Plan, materialize, plan
from fedcore.experiment.config import Key, Table, load_config, register_table
from fedcore.experiment.dry_run import ClientPlan, DryRun, dry_run
from fedcore.experiment.report import load_runs, write_report
from fedcore.experiment.runner import Outcome, prepare, run_experiment
from fedcore.experiment.smoke import SmokeOutcome, smoke
from fedcore.experiment.sweep_report import SweepStatistics, sweep_statistics, write_sweep_report
from fedcore.experiment.sweep_run import SweepOutcome, run_sweep

__all__ = ["ClientPlan", "DryRun", "Key", "Materials", "Outcome", "Plan", "SmokeOutcome", "SweepOutcome",
           "SweepStatistics", "Table", "dry_run", "load_config", "load_runs", "materialize", "plan", "prepare",
           "register_table", "run_experiment", "run_sweep", "smoke", "sweep_statistics", "write_report",
           "write_sweep_report"]

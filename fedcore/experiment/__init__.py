"""Experiments from TOML configs: checking a config, the run directory, progress, reports and plots.

    from fedcore.experiment import load_config, prepare, run_experiment
    outcome = run_experiment(prepare("examples/fedavg_dirichlet.toml", ["rounds=3"]), out="runs/try")

The ``fedcore`` command (:mod:`fedcore.cli`) is a thin layer over this package.
"""
from fedcore.experiment.build import Materials, Plan, materialize, plan
from fedcore.experiment.config import load_config, register_table
from fedcore.experiment.report import load_runs, write_report
from fedcore.experiment.runner import Outcome, prepare, run_experiment

__all__ = ["Materials", "Outcome", "Plan", "load_config", "load_runs", "materialize", "plan", "prepare",
           "register_table", "run_experiment", "write_report"]

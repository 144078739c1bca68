"""The fedcore-personal README's results block, from a finished ``fedcore sweep`` of ``repro/sweep.toml`` (run from the
plugin's folder):

    cd plugins/fedcore-personal
    nice -n 19 fedcore sweep repro/sweep.toml --jobs 1 --out runs/personal-sweep
    python repro/tables.py runs/personal-sweep \\
        --metric personal_accuracy --metric personal_accuracy_min \\
        --percent --write README.md --tag personal-results

The generic sweep block (:func:`fedcore.experiment.sweep_tables`): per setting and metric, mean ± std over seeds,
the 95% interval, the paired comparisons, the values per seed and the sweep's plots next to the README.
"""
from fedcore.experiment import sweep_tables

if __name__ == "__main__":
    raise SystemExit(sweep_tables(script=__file__))

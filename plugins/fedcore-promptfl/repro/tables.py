"""The PromptFL README's results block, from a finished ``fedcore sweep`` of ``repro/promptfl_sweep.toml`` (run
from the plugin's folder):

    cd plugins/fedcore-promptfl
    nice fedcore sweep repro/promptfl_sweep.toml --jobs 2 --out runs/promptfl-sweep
    python repro/tables.py runs/promptfl-sweep --metric test_accuracy \\
        --metric test_macro_f1 --percent --pair promptfl:finetune --pair finetune:scratch \\
        --write README.md --tag promptfl-results

The generic sweep block (:func:`fedcore.experiment.sweep_tables`): per setting and metric, mean ± std over seeds,
the 95% interval, the paired comparisons, the values per seed and the sweep's plots next to the README.
"""
from fedcore.experiment import sweep_tables

if __name__ == "__main__":
    raise SystemExit(sweep_tables(script=__file__))

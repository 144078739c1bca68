"""repro/tables.py: the FedV README block from a sweep, with a second row per FedAvg setting scored by each
client's local model, paired comparisons between any two rows, and the ledger's bytes per round."""
import json
import os
import runpy
import sys
import textwrap

import pytest

from fedcore.cli import main
from fedcore.experiment.statistics import paired, spread

pytest.importorskip("fedcore_fedv")

CONFIG = textwrap.dedent("""
    name = "tiny-fedv-tables"
    rounds = 2
    num_clients = 3
    dataset = { name = "synthetic", n = 120, n_test = 60, noise = 1.5 }
    model = { name = "tiny-mlp", hidden = 16 }

    [pipeline]
    partition = "iid"
    local_update = { name = "sgd", lr = 0.05 }
    evaluate = { name = "local-model-eval", epochs = 1, lr = 0.05, optimizer = "sgd", batch_size = 16 }
    plugins = ["paired-test"]

    [sweep]
    seeds = 3
    baseline = "global-only"
    [sweep.variants]
    global-only = { "pipeline.evaluate" = "split-eval" }
    fedavg = {}
    """)
PLUGIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_tables(monkeypatch, *args):
    """``python repro/tables.py ARGS``, run in this process as the interpreter would run it (no start-up to pay)."""
    script = os.path.join(PLUGIN, "repro", "tables.py")
    monkeypatch.setattr(sys, "argv", [script, *map(str, args)])
    runpy.run_path(script, run_name="__main__")


def finals(out, setting, key):
    values = {}
    for seed in range(3):
        metrics = out / setting / f"seed-{seed}" / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        values[seed] = rows[-1][key]
    return values


@pytest.mark.slow
def test_fedv_tables_adds_the_local_model_rows_and_pairs_them(tmp_path, monkeypatch):
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    assert main(["sweep", str(config), "--out", str(out)]) == 0
    readme = tmp_path / "README.md"
    readme.write_text("# fedv\n<!-- generated:fedv-results -->\nold\n<!-- /generated:fedv-results -->\nafter\n")
    run_tables(monkeypatch, out, "--pair", "fedavg/local:fedavg", "--pair", "fedavg/local:global-only",
               "--write", readme)
    text = readme.read_text()
    assert text.startswith("# fedv\n<!-- generated:fedv-results -->\n**Commands:** `fedcore sweep ")
    assert "old" not in text and text.endswith("<!-- /generated:fedv-results -->\nafter\n")
    glob, local = finals(out, "fedavg", "test_accuracy"), finals(out, "fedavg", "local_model_accuracy")
    base = finals(out, "global-only", "test_accuracy")
    assert glob == base  # the evaluator only scores: the same training, the same global model
    assert "| global-only/local |" not in text  # split-eval records no local-model accuracy: no second row
    s = spread(list(local.values()))
    vs_base = paired(base, local)
    assert f"| fedavg/local | 3 | {100 * s.mean:.1f} ± {100 * s.std:.1f} |" in text
    assert f"{100 * vs_base.mean_diff:+.1f}" in text.split("| fedavg/local | 3 |")[1].splitlines()[0]
    assert f"| fedavg/local − fedavg | 3 | {100 * paired(glob, local).mean_diff:+.1f} |" in text
    rows = [json.loads(line) for line in (out / "fedavg" / "seed-0" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["bytes_up_total"] > 0
    per_round = sum(finals(out, "fedavg", "bytes_up_total").values()) / 3 / 2 / 2**20
    assert f"({per_round:.2f} / " in text.split("| fedavg | 3 |")[1].splitlines()[0]
    assert (tmp_path / "results" / "fedv-results" / "sweep_final.png").stat().st_size > 0


@pytest.mark.slow
def test_fedv_tables_names_the_rows_when_a_pair_is_unknown(tmp_path, monkeypatch):
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG.replace("seeds = 3", "seeds = 1").replace("rounds = 2", "rounds = 1"))
    out = tmp_path / "out"
    assert main(["sweep", str(config), "--out", str(out)]) == 0
    with pytest.raises(SystemExit) as refused:  # a message: the interpreter prints it and exits with status 1
        run_tables(monkeypatch, out, "--pair", "fedvz:fedavg")
    assert isinstance(refused.value.code, str)
    assert "--pair 'fedvz:fedavg'" in refused.value.code and "fedavg/local" in refused.value.code

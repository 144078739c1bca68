"""``fedcore sweep`` and ``fedcore report SWEEP_DIR``: cells are real run directories, a killed sweep resumes
without redoing finished cells, and the statistics are those of the cells' own metrics."""
import json
import os
from pathlib import Path
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fedcore.cli import main
from fedcore.errors import ConfigError
from fedcore.experiment import run_sweep, sweep_statistics
from fedcore.experiment.statistics import paired, spread
from fedcore.experiment.sweep_spec import load_sweep_spec

CONFIG = textwrap.dedent("""
    name = "tiny"
    rounds = 3
    num_clients = 3
    dataset = { name = "synthetic", n = 120, n_test = 60, noise = 1.5 }
    model = { name = "tiny-mlp", hidden = 16 }

    [pipeline]
    partition = "iid"
    local_update = { name = "sgd", lr = 0.05 }

    [sweep]
    seeds = 3
    baseline = "lr=0.05"
    [sweep.grid]
    "pipeline.local_update.lr" = [0.05, 0.3]
    """)


def final(run_dir, key="test_accuracy"):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows[-1][key]


def comparable(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if "wall" not in k} for r in rows]


SWEPT = pytest.mark.xdist_group("sweep")
"""The quick tests reading the one module-scoped sweep (``swept``) run on one worker, which builds it once (ungrouped,
each xdist worker running one of them built its own)."""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    config = root / "tiny.toml"
    config.write_text(CONFIG)
    assert main(["sweep", str(config), "--out", str(root / "out")]) == 0
    return config, root / "out"


@SWEPT
def test_each_cell_is_the_run_fedcore_run_gives(swept, tmp_path, capsys):
    config, out = swept
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["lr=0.05", "lr=0.3"]
    cell = out / "lr=0.3" / "seed-2"
    assert json.loads((cell / "status.json").read_text())["state"] == "finished"
    plain = tmp_path / "plain"
    base = config.read_text().split("[sweep]")[0]
    (tmp_path / "plain.toml").write_text(base)
    assert main(["run", str(tmp_path / "plain.toml"), "--out", str(plain), "--progress", "none",
                 "--set", "seed=2", "--set", "pipeline.local_update.lr=0.3"]) == 0
    assert comparable(cell) == comparable(plain)
    assert final(out / "lr=0.3" / "seed-0") != final(out / "lr=0.3" / "seed-1")  # the seed is the cell's
    # the cell's own config repeats it: a normal run directory
    again = tmp_path / "again"
    assert main(["run", str(cell / "config.toml"), "--out", str(again), "--progress", "none"]) == 0
    assert comparable(again) == comparable(cell)


@SWEPT
def test_report_gives_the_statistics_of_the_cells(swept, tmp_path, capsys):
    from scipy import stats

    _, out = swept
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    text = capsys.readouterr().out
    assert "lr=0.05" in text and "(baseline)" in text and "Wilcoxon p" in text
    base = [final(out / "lr=0.05" / f"seed-{s}") for s in range(3)]
    other = [final(out / "lr=0.3" / f"seed-{s}") for s in range(3)]
    table = json.loads((tmp_path / "rep" / "statistics.json").read_text())
    assert table["baseline"] == "lr=0.05" and table["metric"] == "test_accuracy"
    row0, row1 = table["settings"]
    assert row0["mean"] == pytest.approx(np.mean(base)) and row0["std"] == pytest.approx(np.std(base, ddof=1))
    half = stats.t.ppf(0.975, 2) * np.std(base, ddof=1) / np.sqrt(3)
    assert row0["ci95_low"] == pytest.approx(np.mean(base) - half)
    assert row1["diff_vs_baseline"] == pytest.approx(np.mean(other) - np.mean(base))
    assert row1["t_p"] == pytest.approx(stats.ttest_rel(other, base).pvalue)
    assert row1["wilcoxon_p"] == pytest.approx(stats.wilcoxon(other, base).pvalue)
    md = (tmp_path / "rep" / "statistics.md").read_text()
    assert md.startswith("| setting | seeds | test_accuracy mean ± std") and "| lr=0.3 | 3 |" in md
    assert (tmp_path / "rep" / "statistics.csv").read_text().startswith("setting,n,mean,std,ci95_low")
    from matplotlib.image import imread

    for name in ("sweep_accuracy_vs_round.png", "sweep_final.png"):
        assert np.std(imread(str(tmp_path / "rep" / name))) > 0.05, f"{name} looks blank"
    # another baseline, named by a part of its label
    assert main(["report", str(out), "--out", str(tmp_path / "rep2"), "--baseline", "lr=0.3"]) == 0
    again = json.loads((tmp_path / "rep2" / "statistics.json").read_text())
    assert again["settings"][0]["diff_vs_baseline"] == pytest.approx(-row1["diff_vs_baseline"])


@SWEPT
def test_running_a_finished_sweep_again_redoes_nothing(swept, capsys):
    config, out = swept
    metrics = out / "lr=0.05" / "seed-0" / "metrics.jsonl"
    before = metrics.stat().st_mtime_ns
    assert main(["sweep", "--resume", str(out)]) == 0
    text = capsys.readouterr().out
    assert "0 cells run, 6 already finished, 0 failed" in text
    assert metrics.stat().st_mtime_ns == before


# A killed sweep's resume (finished cells skipped untouched, cut cells resumed from their checkpoints, unstarted ones
# started, every cell the uninterrupted sweep's) shares one killed sweep with the cells-die-with-their-sweep check:
# tests/reliability/test_one_writer.py::test_a_killed_sweep_ends_its_cells_and_the_resumed_sweep_redoes_nothing_finished


def test_python_api_runs_a_sweep_and_returns_its_statistics(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.split("[sweep]")[0])
    outcome = run_sweep(config, grid=["pipeline.local_update.lr=0.05,0.3"], seeds=2, out=tmp_path / "s",
                        baseline="lr=0.3")
    table = outcome.statistics()
    assert table.baseline == "lr=0.3" and [s.label for s in table.settings] == ["lr=0.05", "lr=0.3"]
    assert table.get("lr=0.05").values == {s: final(tmp_path / "s" / "lr=0.05" / f"seed-{s}") for s in (0, 1)}
    assert sweep_statistics(tmp_path / "s", metric="test_loss").metric == "test_loss"


def test_variants_cross_the_grid(tmp_path):
    config = tmp_path / "v.toml"
    config.write_text(CONFIG.replace('[sweep]\nseeds = 3\nbaseline = "lr=0.05"', textwrap.dedent("""
        [sweep]
        seeds = [4]
        baseline = "momentum lr=0.05"
        [sweep.variants]
        plain = {}
        momentum = { "pipeline.local_update.momentum" = 0.9 }""")))
    spec = load_sweep_spec(config)
    assert [s.label for s in spec.settings()] == ["plain lr=0.05", "plain lr=0.3", "momentum lr=0.05",
                                                  "momentum lr=0.3"]
    cells = spec.cells()
    assert [c.seed for c in cells] == [4] * 4 and cells[2].dirname == "momentum,lr=0.05/seed-4"
    assert cells[2].config["pipeline"]["local_update"]["momentum"] == 0.9
    assert cells[0].config["pipeline"]["local_update"]["momentum"] == 0.0


@pytest.mark.parametrize(("extra", "message"), [
    (["--grid", "seed=1,2"], "'seed' cannot be swept here; use sweep.seeds"),
    (["--grid", "pipeline.local_update.lr"], "expected KEY=VALUE,VALUE"),
    (["--seeds", "0"], "--seeds = 0: give at least one seed"),
    (["--baseline", "lr=9"], "sweep baseline 'lr=9' is not a setting; choices: 'lr=0.05', 'lr=0.3'"),
    (["--grid", "pipeline.local_update.lr=0.1,oops", "--baseline", "lr=0.1"], "sweep cell 'lr=oops' seed 0:"),
])
def test_bad_sweeps_are_one_line_errors_before_any_work(tmp_path, capsys, extra, message):
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    assert main(["sweep", str(config), "--out", str(tmp_path / "s"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


@SWEPT
def test_a_directory_holding_another_sweep_is_refused(swept, capsys):
    config, out = swept
    assert main(["sweep", str(config), "--out", str(out), "--set", "rounds=2"]) == 2
    assert "holds a run with another config" in capsys.readouterr().err


def test_statistics_match_scipy_and_handle_degenerate_pairs():
    from scipy import stats

    s = spread([0.5, 0.7, 0.6])
    assert s.mean == pytest.approx(0.6) and s.std == pytest.approx(0.1)
    assert (s.low, s.high) == pytest.approx(stats.t.interval(0.95, 2, loc=0.6, scale=0.1 / np.sqrt(3)))
    assert spread([0.3]).std is None
    same = paired({0: 0.5, 1: 0.6}, {0: 0.5, 1: 0.6})
    assert same.mean_diff == 0 and same.t_p is None and same.wilcoxon_p == 1.0
    shifted = paired({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.6, 1: 0.7, 2: 0.8, 3: 0.1})
    assert shifted.n == 3 and shifted.mean_diff == pytest.approx(0.1) and shifted.t_p is None
    assert paired({0: 0.5}, {1: 0.5}) is None


def test_cells_on_ray_give_the_numbers_of_cells_run_here(swept, tmp_path, ray_cluster, monkeypatch):
    """Also: ``fedcore sweep --ray`` reaches Ray only through ``init_ray`` with no address and the loopback bind,
    the start whose sockets tests/test_ray_cluster.py lists on the run's cluster (this path once called ``ray.init``
    on every interface). The real ``init_ray`` runs; it finds the run's cluster and joins nothing new."""
    import inspect

    from fedcore.engine import ray_cluster as cluster

    real, calls = cluster.init_ray, []

    def spied(**kwargs):
        calls.append(inspect.signature(real).bind(**kwargs))
        calls[-1].apply_defaults()
        return real(**kwargs)

    monkeypatch.setattr(cluster, "init_ray", spied)
    config, out = swept
    on_ray = run_sweep(config, seeds=[1], out=tmp_path / "ray", ray=True, jobs=2)  # on the run's Ray cluster
    assert [(c.arguments["address"], c.arguments["bind"]) for c in calls] == [(None, cluster.LOOPBACK)]
    assert [c.state for c in on_ray.cells] == ["finished", "finished"]
    for cell in on_ray.cells:
        assert comparable(cell.run_dir) == comparable(out / cell.run_dir.relative_to(on_ray.directory))


def test_a_variant_as_baseline_pairs_every_setting_at_its_own_grid_point(tmp_path):
    config = tmp_path / "v.toml"
    config.write_text(CONFIG.replace('[sweep]\nseeds = 3\nbaseline = "lr=0.05"', textwrap.dedent("""
        [sweep]
        seeds = 2
        baseline = "plain"
        [sweep.variants]
        plain = {}
        momentum = { "pipeline.local_update.momentum" = 0.9 }""")))
    assert main(["sweep", str(config), "--out", str(tmp_path / "s"), "--set", "rounds=2"]) == 0
    listing = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert listing["command"] == f"fedcore sweep {config} --out {tmp_path / 's'} --set rounds=2"
    table = sweep_statistics(tmp_path / "s")
    for other, base in (("momentum lr=0.05", "plain lr=0.05"), ("momentum lr=0.3", "plain lr=0.3")):
        row = table.get(other)
        assert row.baseline == base
        assert row.vs_baseline.mean_diff == pytest.approx(
            np.mean([final(tmp_path / "s" / other.replace(" ", ",") / f"seed-{s}") -
                     final(tmp_path / "s" / base.replace(" ", ",") / f"seed-{s}") for s in (0, 1)]))
        assert table.compare(other, base) == row.vs_baseline
    assert table.get("plain lr=0.3").vs_baseline is None  # a baseline of its own grid point
    # a grid part as baseline pairs within each variant; the whole label still means one baseline for all
    by_lr = sweep_statistics(tmp_path / "s", baseline="lr=0.05")
    assert [s.baseline for s in by_lr.settings] == ["plain lr=0.05", "plain lr=0.05", "momentum lr=0.05",
                                                   "momentum lr=0.05"]
    assert {s.baseline for s in sweep_statistics(tmp_path / "s", baseline="plain lr=0.3").settings} == {"plain lr=0.3"}
    with pytest.raises(ConfigError, match="'nesterov' is not a setting"):
        sweep_statistics(tmp_path / "s", baseline="nesterov")


@pytest.mark.integration
def test_sweep_tables_writes_the_statistics_and_both_commands_into_a_readme(swept, tmp_path):
    config, out = swept
    readme = tmp_path / "README.md"
    readme.write_text("# plugin\n\nbefore\n<!-- generated:res -->\nold\n<!-- /generated:res -->\nafter\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "plugins", "fedcore-promptfl", "repro", "tables.py")  # fedcore.experiment.sweep_tables
    done = subprocess.run([sys.executable, script, str(out), "--percent",
                           "--pair", "lr=0.3:lr=0.05", "--write", str(readme), "--tag", "res"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = readme.read_text()
    assert text.startswith("# plugin\n\nbefore\n<!-- generated:res -->\n**Commands:** `fedcore sweep ")
    assert "old" not in text and text.endswith("<!-- /generated:res -->\nafter\n")
    table = sweep_statistics(out)
    other = table.get("lr=0.3")
    assert f"| lr=0.3 | 3 | {100 * other.spread.mean:.1f} ± {100 * other.spread.std:.1f} |" in text
    assert f"| lr=0.3 − lr=0.05 | 3 | {100 * other.vs_baseline.mean_diff:+.1f} |" in text
    assert (tmp_path / "results" / "res" / "sweep_final.png").stat().st_size > 0


@SWEPT
def test_the_public_table_helpers_name_the_script_read_a_runs_state_and_write_between_markers(
        swept, tmp_path, monkeypatch):
    from fedcore.experiment import commands_line, replace_block, run_state, script_command

    _, out = swept
    root = Path(__file__).resolve().parents[1]
    script = root / "plugins" / "fedcore-promptfl" / "repro" / "tables.py"
    monkeypatch.chdir(root)  # run from the repository root: the block names the script as typed there
    assert script_command(script, ["runs/s", "--write", "My README.md"]) == \
        "python plugins/fedcore-promptfl/repro/tables.py runs/s --write 'My README.md'"
    line = commands_line(script, ["runs/s"], out)
    assert line.startswith("**Commands:** `fedcore sweep ")
    assert "then `python plugins/fedcore-promptfl/repro/tables.py runs/s` (2 settings x seeds [0, 1, 2];" in line
    monkeypatch.chdir(tmp_path)  # elsewhere: the whole path
    assert script_command(script, []) == f"python {script.as_posix()}"
    state = run_state(out / "lr=0.3" / "seed-1")  # the cell's last verified checkpoint
    rows = [json.loads(x) for x in (out / "lr=0.3" / "seed-1" / "metrics.jsonl").read_text().splitlines()]
    assert state is not None and state["round"] == rows[-1]["round"] + 1
    assert state["ledger"] and {"direction", "nbytes"} <= set(state["ledger"][0])
    assert run_state(tmp_path) is None  # no checkpoints
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- generated:t -->\nold\n<!-- /generated:t -->\nb\n")
    replace_block(readme, "t", "new\n")
    assert readme.read_text() == "a\n<!-- generated:t -->\nnew\n<!-- /generated:t -->\nb\n"
    with pytest.raises(ValueError, match="generated:u"):
        replace_block(readme, "u", "x")


def test_an_example_config_becomes_a_three_seed_sweep_and_report(tmp_path, capsys):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    example = os.path.join(root, "examples", "fedavg_iid.toml")
    out = tmp_path / "iid"
    # one round in which 3 of 30 clients train (a tenth of the digits each round, not all of them): three seeds that
    # still give three different runs, at a tenth of the training
    assert main(["sweep", example, "--seeds", "3", "--set", "rounds=1", "--set", "num_clients=30", "--set",
                 'pipeline.schedule={name = "uniform", fraction = 0.1}', "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    table = sweep_statistics(out)
    (base,) = table.settings
    assert sorted(base.values) == [0, 1, 2] and len(set(base.values.values())) > 1  # the seed changes the run
    assert f"{base.spread.mean:.4f} ± {base.spread.std:.4f}" in printed
    assert {p.name for p in (out / "report").iterdir()} >= {"statistics.md", "sweep_final.png",
                                                             "sweep_accuracy_vs_round.png"}

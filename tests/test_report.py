"""``fedcore report``: summary table and PNG plots for one or several real run directories."""
import json
import textwrap

import numpy as np
import pytest

from fedcore.cli import main

pytestmark = pytest.mark.xdist_group("report")  # every test reads the module's two runs: one worker builds them once

CONFIG = textwrap.dedent("""
    rounds = 3
    num_clients = 3
    dataset = { name = "synthetic", n = 96, n_test = 48 }
    model = "tiny-mlp"

    [pipeline]
    partition = "iid"
    schedule = { name = "uniform", fraction = 0.67 }
    local_update = { name = "sgd", lr = 0.1 }
    """)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    config = root / "r.toml"
    config.write_text(CONFIG)
    a, b = root / "plain", root / "devices"
    assert main(["run", str(config), "--out", str(a), "--progress", "none", "--set", "name=sgd-0.1"]) == 0
    assert main(["run", str(config), "--out", str(b), "--progress", "none", "--set", "name=on-phones",
                 "--set", "pipeline.local_update.lr=0.3", "--set", "clock.default_profile=phone"]) == 0
    return a, b


def png_pixels(path):
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(str(path))
    assert pixels.shape[0] > 200 and pixels.shape[1] > 300
    return pixels


def test_report_of_two_runs_writes_plots_and_a_table(runs, tmp_path, capsys):
    a, b = runs
    out = tmp_path / "cmp"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "sgd-0.1" in text and "on-phones" in text and "final acc" in text and "virtual time" in text
    for name in ("accuracy_vs_round.png", "accuracy_vs_bytes.png", "accuracy_vs_time.png", "participation.png"):
        pixels = png_pixels(out / name)
        assert np.std(pixels) > 0.05, f"{name} looks blank"
    summary = json.loads((out / "summary.json").read_text())
    assert [s["run"] for s in summary] == ["sgd-0.1", "on-phones"]
    assert summary[0]["virtual_time"] is None and summary[1]["virtual_time"] > 0
    assert summary[0]["clients_per_round"] == 2.0 and summary[0]["rounds"] == 3
    rows = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    assert summary[0]["final_test_accuracy"] == rows[-1]["test_accuracy"]
    assert summary[0]["bytes_up"] == rows[-1]["bytes_up_total"]
    assert (out / "summary.csv").read_text().startswith("run,dir,state,rounds,final_test_accuracy")


def test_time_axis_is_wall_clock_unless_every_run_has_virtual_time(runs, tmp_path):
    from fedcore.experiment.plots import accuracy_vs_time
    from fedcore.experiment.report import load_runs

    a, b = runs
    both, only_virtual = load_runs([a, b]), load_runs([b])
    import matplotlib.pyplot as plt

    labels = []
    real_savefig = plt.Figure.savefig

    def spy(fig, path, *args, **kwargs):
        labels.append(fig.axes[0].get_xlabel())
        return real_savefig(fig, path, *args, **kwargs)

    plt.Figure.savefig = spy
    try:
        accuracy_vs_time(both, "test_accuracy", tmp_path)
        accuracy_vs_time(only_virtual, "test_accuracy", tmp_path)
    finally:
        plt.Figure.savefig = real_savefig
    assert labels[0].startswith("wall-clock") and labels[1].startswith("virtual time")


def test_single_run_report_goes_into_the_run_and_reads_a_run_in_progress(runs, capsys):
    a, _ = runs
    with open(a / "metrics.jsonl", "a") as f:
        f.write('{"round": 3, "test_accur')  # a line still being written
    try:
        assert main(["report", str(a)]) == 0
        assert "3" in capsys.readouterr().out
        assert (a / "report" / "accuracy_vs_round.png").exists()
        summary = json.loads((a / "report" / "summary.json").read_text())
        assert summary[0]["rounds"] == 3
    finally:
        text = (a / "metrics.jsonl").read_text()
        (a / "metrics.jsonl").write_text(text[: text.rindex("\n") + 1])


def test_report_bad_input(runs, tmp_path, capsys):
    a, _ = runs
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "not a fedcore run directory" in capsys.readouterr().err
    assert main(["report", str(a), "--metric", "f1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no run recorded 'f1'" in err and "test_accuracy" in err


def test_a_plot_is_laid_out_and_written_as_tight_layout_and_savefig_do(tmp_path):
    """``plots._save`` runs the tight-layout engine without leaving an engine on the figure, so ``savefig`` skips
    its extra draw; the file is byte for byte the one ``Figure.tight_layout`` and ``savefig`` write."""
    from fedcore.experiment import plots

    plt = plots._pyplot()

    def figure():
        fig, ax = plt.subplots(figsize=(2.6, 1.8), dpi=60)
        ax.plot([1, 2, 3], [0.2, 0.5, 0.4], marker="o", label="a run")
        ax.set_xlabel("round (aggregations done)")
        ax.set_ylabel("test accuracy")
        ax.set_title("test_accuracy vs round")
        ax.legend(loc="lower right", fontsize=8)
        return fig

    fig = figure()
    fig.tight_layout()
    fig.savefig(tmp_path / "tight_layout.png")
    plt.close(fig)
    assert plots._save(figure(), tmp_path / "engine.png") == tmp_path / "engine.png"
    assert (tmp_path / "engine.png").read_bytes() == (tmp_path / "tight_layout.png").read_bytes()

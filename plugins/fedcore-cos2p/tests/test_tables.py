"""repro/tables.py over a real, shortened run of repro/cos2p_sweep.toml: the README block's numbers are the cells'
recorded RU, accuracy and staleness, paired by seed against FedRolex."""
from pathlib import Path
import runpy
import statistics
import sys

import attrs
import pytest

from fedcore.experiment import run_sweep, sweep_statistics
from fedcore.experiment.sweep_spec import load_sweep_spec
from fedcore_cos2p import run_ru, staleness_histogram

REPRO = Path(__file__).resolve().parents[1] / "repro"


@pytest.mark.slow
def test_the_tables_script_reports_the_cells_recorded_ru_accuracy_and_staleness(tmp_path, monkeypatch):
    spec = load_sweep_spec(REPRO / "cos2p_sweep.toml", seeds=2,
                           sets=["rounds=2", "dataset.n=240", "dataset.n_test=80"])
    spec = attrs.evolve(spec, variants={k: v for k, v in spec.variants.items() if k in ("co-s2p", "fedrolex")})
    outcome = run_sweep(spec, out=tmp_path / "sweep")
    assert [c.state for c in outcome.cells] == ["finished"] * 4
    readme = tmp_path / "README.md"
    readme.write_text("# cos2p\n<!-- generated:cos2p-results -->\nold\n<!-- /generated:cos2p-results -->\nend\n")
    # the script as `python repro/tables.py SWEEP --write README` runs it, in this process (no interpreter start-up)
    monkeypatch.setattr(sys, "argv", [str(REPRO / "tables.py"), str(tmp_path / "sweep"), "--write", str(readme)])
    runpy.run_path(str(REPRO / "tables.py"), run_name="__main__")
    text = readme.read_text()
    assert "old" not in text and text.endswith("<!-- /generated:cos2p-results -->\nend\n")

    runs = sweep_statistics(tmp_path / "sweep").runs
    ru = {label: [run_ru(r.rows) for r in sorted(runs[label], key=lambda r: r.config["seed"])]
          for label in ("co-s2p", "fedrolex")}
    busy = [r.rows[-1]["utilisation"] for r in runs["co-s2p"]]
    final = [r.rows[-1]["test_accuracy"] for r in runs["co-s2p"]]
    assert (f"| co-s2p | 2 | {statistics.mean(ru['co-s2p']):.3f} ± {statistics.stdev(ru['co-s2p']):.3f} | "
            f"{statistics.mean(busy):.3f} ± {statistics.stdev(busy):.3f} |") in text
    assert f"± {statistics.stdev(final):.3f} |\n" in text.split("| co-s2p | 2 |")[1].split("| fedrolex")[0] + "\n"
    delta = statistics.mean(a - b for a, b in zip(ru["co-s2p"], ru["fedrolex"]))
    assert f"| co-s2p | {delta:+.3f} (t p " in text  # paired by seed against FedRolex
    ratio = statistics.mean(ru["co-s2p"]) / statistics.mean(ru["fedrolex"])
    assert f"| RU 1.1–1.2x over FedRolex | {ratio:.3f}x" in text
    taus = [staleness_histogram(r.rows) for r in runs["co-s2p"]]
    merged = {t: sum(h.get(t, 0) for h in taus) for t in sorted({t for h in taus for t in h})}
    assert sum(merged.values()) > 0
    assert ", ".join(f"τ={k}: {v}" for k, v in merged.items()) + " |" in text
    assert "| heterofl | 0 | - |" in text  # a setting the sweep did not run is shown empty, not invented
    assert (tmp_path / "results" / "cos2p-results" / "accuracy_vs_virtual_time.png").stat().st_size > 0

"""Every numeric metric a local update reports reaches the history (issue 24 item 6).

Per round: ``client_<m>`` (mean weighted by ``num_examples``), ``client_<m>_min``, ``client_<m>_max`` over the
aggregated updates; per client, when asked (``RunSpec.client_metrics``, ``[output] client_metrics``), one row per
aggregated update in ``client_metrics.jsonl``; ``fedcore report --metric`` plots any of them. The distillation
losses are checked in ``substrates/fedcore-distill/tests/test_distill.py``.
"""
from __future__ import annotations

import json
import textwrap

import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import SGDUpdate
from fedcore.cli import main
from fedcore.experiment.rundir import CLIENT_METRICS, METRICS, RunDir
from fedcore.testing import ContractFixture, run_tiny_pipeline

FX = ContractFixture(num_clients=4)


@attrs.frozen(eq=False, kw_only=True)
class Reporting:
    """SGD, plus metrics of every type a local update might report."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        update = SGDUpdate(lr=0.1).fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
        return attrs.evolve(update, metrics={**update.metrics, "steps": client.id + 1,
                                             "grad_norm": torch.tensor(0.5 * client.id), "clipped": True,
                                             "note": "text", "diverged": float("nan")})


def test_every_numeric_client_metric_reaches_the_round_row_as_weighted_mean_min_and_max():
    result = run_tiny_pipeline([Reporting()], rounds=2, fixture=FX, client_metrics=True)
    for row in result.history:
        entries = row["client_metrics"]
        assert [e["client"] for e in entries] == row["clients"]
        n = {e["client"]: e["num_examples"] for e in entries}
        total = sum(n.values())
        assert row["client_steps"] == pytest.approx(sum((c + 1) * k for c, k in n.items()) / total)
        assert row["client_steps_min"] == min(c + 1 for c in n) and row["client_steps_max"] == max(c + 1 for c in n)
        assert row["client_grad_norm_max"] == pytest.approx(0.5 * max(n))  # a one-value tensor counts
        assert row["client_loss"] == pytest.approx(row["train_loss"])
        assert row["client_loss_min"] <= row["client_loss"] <= row["client_loss_max"]
        for dropped in ("clipped", "note", "diverged"):  # bools, strings and NaN are not numbers to average
            assert f"client_{dropped}" not in row and all(dropped not in e for e in entries)
        assert all(e["steps"] == e["client"] + 1 and e["staleness"] == 0 for e in entries)


def test_per_client_rows_only_when_asked():
    result = run_tiny_pipeline([Reporting()], rounds=1, fixture=FX)
    assert "client_metrics" not in result.history.rows[0] and "client_steps" in result.history.rows[0]


CONFIG = textwrap.dedent("""
    rounds = 2
    num_clients = 3
    dataset = { name = "synthetic", n = 96, n_test = 48 }
    model = "tiny-mlp"

    [pipeline]
    partition = "iid"
    local_update = { name = "sgd", lr = 0.1 }

    [output]
    client_metrics = true
    save_model = false
    """)


def test_fedcore_run_writes_client_metrics_and_report_plots_any_metric(tmp_path):
    config = tmp_path / "r.toml"
    config.write_text(CONFIG)
    run = tmp_path / "run"
    assert main(["run", str(config), "--out", str(run), "--progress", "none"]) == 0
    rows = [json.loads(line) for line in (run / METRICS).read_text().splitlines()]
    clients = [json.loads(line) for line in (run / CLIENT_METRICS).read_text().splitlines()]
    assert all("client_metrics" not in r and "client_loss_max" in r for r in rows)
    assert [(c["round"], c["client"]) for c in clients] == [(r["round"], c) for r in rows for c in r["clients"]]
    for r in rows:
        mine = [c["loss"] for c in clients if c["round"] == r["round"]]
        assert (min(mine), max(mine)) == (r["client_loss_min"], r["client_loss_max"])
    out = tmp_path / "report"
    assert main(["report", str(run), "--metric", "client_loss_max", "--out", str(out)]) == 0
    assert (out / "accuracy_vs_round.png").stat().st_size > 0
    # a resume rewrites both files from the checkpoint's history (rows after it are recomputed)
    RunDir(run).rewrite_rows([{"round": 0, "clients": [1], "client_metrics": [{"client": 1, "loss": 2.0}]}])
    assert RunDir(run).rows() == [{"round": 0, "clients": [1]}]
    assert RunDir(run).client_rows() == [{"round": 0, "client": 1, "loss": 2.0}]

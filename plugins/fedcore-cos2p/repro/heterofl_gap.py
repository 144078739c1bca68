"""Why HeteroFL leads FedRolex in the Co-S2P README: the controls, as one README block.

    python repro/heterofl_gap.py runs/cos2p-sweep runs/cos2p-horizon-sweep --write README.md

Both rows train the same trainable-parameter budget per client (7 of 8 clients at R = 0.5625, the NX8 at 0.0625;
full depth): ``ceil(8 R)`` heads and ``ceil(256 R)`` MLP units per block, HeteroFL's the first ones every round,
FedRolex's a window starting at the round index (``fedcore_pruning.prefix_indices`` / ``rolling_indices``). Four
controls, each from recorded runs (the main sweep's 8-round cells and ``repro/cos2p_horizon_sweep.toml``'s 40-round
cells of the same settings and seeds):

1. **Update counts** per head and per MLP unit after Q rounds: the client updates each one received, from the
   share's index rules and the cells' budgets (counted, not trained).
2. **Never-trained and out-of-window channels at evaluation**: each cell's final global model evaluated on the
   server test set as saved, and with the heads / units outside the last round's submodel silenced (their columns
   of ``attn.proj`` / ``mlp.fc2`` zeroed, so the forward pass is exactly that submodel's). Under HeteroFL these are
   the channels nobody ever trained; under FedRolex the ones the window left 1 to 3 rounds before.
3. **Equal updates per head**: HeteroFL after 5 rounds (each trained head has had 35 client updates, as every
   FedRolex head after 8), paired with FedRolex after 8, and the clients' training loss in round 8.
4. **Horizon**: the same pair at 5x the rounds (40): the gap at rounds 8, 16, 24, 32 and 40. The first 8 rounds of
   every 40-round cell are checked to equal the main sweep's cell of the same seed.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import json
import math
from pathlib import Path
import sys
from typing import Any

from safetensors.torch import load_file
from tables import diff, mean_std
import torch

from fedcore.experiment import (
    emit,
    load_config,
    materialize,
    paired,
    plan,
    script_command,
    sweep_command,
    tables_parser,
)
from fedcore_pruning import kept_count, prefix_indices, rolling_indices

TAG = "cos2p-heterofl-gap"
PAIR = ("heterofl", "fedrolex")
FULL = "fedavg-full"  # every client trains the whole model (budget 1)
RULES = {"heterofl": prefix_indices, "fedrolex": rolling_indices}
HORIZON_MARKS = (8, 16, 24, 32, 40)
Rows = list[dict[str, Any]]


def cells(sweep: Path, label: str, *, unfinished: bool = False) -> dict[int, Path]:
    """Finished cells of one setting, by seed (with ``unfinished``, also cells stopped or still running: their
    recorded rounds)."""
    out = {}
    for d in sorted((sweep / label).glob("seed-*")):
        status = d / "status.json"
        done = status.is_file() and json.loads(status.read_text()).get("state") == "finished"
        if done or (unfinished and (d / "metrics.jsonl").is_file()):
            out[int(d.name.removeprefix("seed-"))] = d
    return out


def history(cell: Path) -> Rows:
    return [json.loads(line) for line in (cell / "metrics.jsonl").read_text().splitlines() if line.strip()]


def accuracy_at(rows: Rows, round: int) -> float:
    return float(next(r["test_accuracy"] for r in rows if r["round"] == round - 1))


def shape_and_budgets(cell: Path) -> tuple[dict[str, Any], list[float]]:
    """The micro ViT's settings and each client's budget, from the cell's own config."""
    cfg = load_config(cell / "config.toml")
    budgets = cfg["pipeline"]["split"]["budgets"]
    return cfg["model"], [float(budgets[p]) for p in cfg["profiles"]]


def kept(label: str, model: Mapping[str, Any], budget: float, round: int) -> tuple[set[int], set[int]]:
    """Heads and MLP units a client of this budget trains in 0-based round ``round`` (the share's rule)."""
    heads, units = int(model["num_heads"]), int(model["embed_dim"] * model["mlp_ratio"])
    rule = RULES[label]
    return (set(rule(heads, kept_count(heads, budget), round)), set(rule(units, kept_count(units, budget), round)))


def update_counts(label: str, model: Mapping[str, Any], budgets: Sequence[float], rounds: int
                  ) -> tuple[list[int], list[int]]:
    """Client updates per head and per MLP unit after ``rounds`` synchronous rounds of every client."""
    heads = [0] * int(model["num_heads"])
    units = [0] * int(model["embed_dim"] * model["mlp_ratio"])
    for q in range(rounds):
        for budget in budgets:
            h, u = kept(label, model, budget, q)
            for i in h:
                heads[i] += 1
            for i in u:
                units[i] += 1
    return heads, units


def count_table(model: Mapping[str, Any], budgets: Sequence[float]) -> list[str]:
    out = ["| rows | Q | client updates per head (head 0 … 7) | heads never trained | client updates per MLP unit: "
           "min / median / max | MLP units never trained |", "|---|---:|---|---:|---|---:|"]
    for rounds in (8, 40):
        for label in PAIR:
            heads, units = update_counts(label, model, budgets, rounds)
            s = sorted(units)
            out.append(f"| {label} | {rounds} | {', '.join(map(str, heads))} | {heads.count(0)} | "
                       f"{s[0]} / {s[len(s) // 2]} / {s[-1]} | {units.count(0)} of {len(units)} |")
    return out


def silenced(state: Mapping[str, torch.Tensor], heads: set[int], units: set[int], model: Mapping[str, Any]
             ) -> dict[str, torch.Tensor]:
    """The global state with every head outside ``heads`` and MLP unit outside ``units`` contributing nothing:
    their input columns of ``attn.proj`` / ``mlp.fc2`` zeroed, so the forward pass is the kept submodel's."""
    out = {k: v.clone() for k, v in state.items()}
    head_dim = int(model["embed_dim"]) // int(model["num_heads"])
    for b in range(int(model["depth"])):
        proj, fc2 = out[f"blocks.{b}.attn.proj.weight"], out[f"blocks.{b}.mlp.fc2.weight"]
        for h in set(range(int(model["num_heads"]))) - heads:
            proj[:, h * head_dim:(h + 1) * head_dim] = 0
        fc2[:, sorted(set(range(fc2.shape[1])) - units)] = 0
    return out


def evaluations(label: str, cell: Path) -> dict[str, float]:
    """Server accuracy of the cell's final global model as saved and with the channels outside the last round's
    submodel (every client with the AGX budget trains the same one) silenced."""
    model_cfg, budgets = shape_and_budgets(cell)
    rows = history(cell)
    materials = materialize(plan(load_config(cell / "config.toml")))
    built, test = materials.model, materials.test
    state = load_file(str(cell / "model.safetensors"))

    def accuracy(weights: Mapping[str, torch.Tensor]) -> float:
        built.load_state_dict(weights)
        built.eval()
        with torch.no_grad():
            return int((built(test.x).argmax(1) == test.y).sum()) / len(test.y)

    heads, units = kept(label, model_cfg, max(budgets), len(rows) - 1)
    full = accuracy(state)
    if abs(full - rows[-1]["test_accuracy"]) > 1e-9:
        raise SystemExit(f"{cell}: the saved model scores {full}, the history's last row {rows[-1]['test_accuracy']}")
    return {"full": full, "last submodel only": accuracy(silenced(state, heads, units, model_cfg))}


Evaluated = dict[tuple[str, int], dict[int, dict[str, float]]]


def evaluate_all(main: Path, horizon: Path) -> Evaluated:
    """Both evaluations of every finished cell of the pair: (label, rounds) -> seed -> values."""
    return {(label, rounds): {seed: evaluations(label, cell) for seed, cell in cells(sweep, label).items()}
            for sweep, rounds in ((main, 8), (horizon, 40)) for label in PAIR}


def eval_table(found: Evaluated) -> list[str]:
    out = ["| rows | Q | seeds | as saved (all 8 heads, 256 units) | last round's submodel only (5 heads, 144 "
           "units) | Δ (submodel − as saved) |", "|---|---:|---:|---:|---:|---|"]
    for (label, rounds), got in found.items():
        if got:
            full = {s: v["full"] for s, v in got.items()}
            sub = {s: v["last submodel only"] for s, v in got.items()}
            out.append(f"| {label} | {rounds} | {len(got)} | {mean_std(full)} | {mean_std(sub)} | "
                       f"{diff(paired(full, sub))} |")
    return out


def training_table(main: Path, found: Evaluated) -> list[str]:
    rows = {label: {s: history(c) for s, c in cells(main, label).items()} for label in (*PAIR, FULL)}
    hetero5 = {s: accuracy_at(r, 5) for s, r in rows["heterofl"].items()}
    hetero8 = {s: accuracy_at(r, 8) for s, r in rows["heterofl"].items()}
    rolex8 = {s: accuracy_at(r, 8) for s, r in rows["fedrolex"].items()}
    rolex_sub = {s: v["last submodel only"] for s, v in found["fedrolex", 8].items()}
    full8 = {s: accuracy_at(r, 8) for s, r in rows[FULL].items()}
    loss = {label: {s: float(r[7]["train_loss"]) for s, r in rows[label].items()} for label in PAIR}

    def row(what: str, a_name: str, a: dict[int, float], b_name: str, b: dict[int, float]) -> str:
        return f"| {what} | {a_name}: {mean_std(a)} | {b_name}: {mean_std(b)} | {diff(paired(b, a))} |"

    return ["| comparison | A | B | Δ (A − B) |", "|---|---|---|---|",
            row("35-36 client updates per trained head: HeteroFL after 5 rounds, FedRolex after 8 (as saved)",
                "heterofl", hetero5, "fedrolex", rolex8),
            row("the same, FedRolex as its last round's submodel (table 2)", "heterofl", hetero5,
                "fedrolex submodel", rolex_sub),
            row("clients' training loss in round 8 (mean over clients, each on its own submodel)", "heterofl",
                loss["heterofl"], "fedrolex", loss["fedrolex"]),
            row("HeteroFL's 5-head, 144-unit prefix against the full model after 8 rounds", "heterofl", hetero8,
                FULL, full8)]


def horizon_table(main: Path, horizon: Path) -> tuple[list[str], list[str]]:
    long = {label: {s: history(c) for s, c in cells(horizon, label, unfinished=True).items()} for label in PAIR}
    problems = []
    for label in PAIR:
        for seed, cell in cells(main, label).items():
            if seed in long[label]:
                first = long[label][seed][:8]  # a cell still running may have fewer
                short = history(cell)[:len(first)]
                if [(r["test_accuracy"], r["train_loss"]) for r in short] != \
                        [(r["test_accuracy"], r["train_loss"]) for r in first]:
                    problems.append(f"{label} seed {seed}")
    out = ["| round | seeds | heterofl | fedrolex | Δ heterofl − fedrolex |", "|---:|---:|---:|---:|---|"]
    reached = {label: {s: len(r) for s, r in long[label].items()} for label in PAIR}
    last = min((n for per in reached.values() for n in per.values()), default=0)
    marks = sorted({q for q in HORIZON_MARKS if q <= last} | ({last} if last and last < HORIZON_MARKS[-1] else set()))
    for q in marks:
        per = {label: {s: accuracy_at(r, q) for s, r in long[label].items() if len(r) >= q} for label in PAIR}
        seeds = sorted(set(per["heterofl"]) & set(per["fedrolex"]))
        if not seeds:
            continue
        h, f = ({s: per[label][s] for s in seeds} for label in PAIR)
        out.append(f"| {q} | {len(seeds)} | {mean_std(h)} | {mean_std(f)} | {diff(paired(f, h))} |")
    short = [f"{label} seed {s} at round {n}" for label in PAIR for s, n in sorted(reached[label].items())
             if n < HORIZON_MARKS[-1]]
    if short:
        out += ["", f"Not finished (the table stops at the last round every cell reached): {', '.join(short)}; "
                    f"finish with `{sweep_command(horizon)}` (a cell cut short starts over)."]
    return out, problems


def main(argv: list[str] | None = None) -> int:
    parser = tables_parser(__doc__, "the main sweep (runs/cos2p-sweep)")
    parser.add_argument("horizon", type=Path, help="the 40-round sweep (runs/cos2p-horizon-sweep)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    any_cell = next(iter(cells(args.sweep, "fedrolex").values()), None)
    if any_cell is None:
        raise SystemExit(f"{args.sweep}: no finished fedrolex cell")
    model_cfg, budgets = shape_and_budgets(any_cell)
    horizon, problems = horizon_table(args.sweep, args.horizon)
    if problems:
        raise SystemExit(f"the 40-round cells' first 8 rounds differ from the main sweep's: {', '.join(problems)}")
    found = evaluate_all(args.sweep, args.horizon)
    argv_used = sys.argv[1:] if argv is None else list(argv)
    lines = [f"**Commands:** `{sweep_command(args.horizon)}` (the 40-round cells; the 8-round ones are the main "
             f"sweep's, above), then `{script_command(__file__, argv_used)}`.", "",
             f"**1. Client updates per head and MLP unit** (counted from the share's rules; budgets "
             f"{', '.join(f'{b:g}' for b in budgets)}; {math.ceil(8 * max(budgets))} of 8 heads and "
             f"{math.ceil(256 * max(budgets))} of 256 units per AGX client):", "",
             *count_table(model_cfg, budgets), "",
             "**2. The final global model as saved and as the last round's submodel** (server test accuracy, "
             "mean ± std across seeds; Δ paired by seed):", "", *eval_table(found), "",
             "**3. Equal updates per head, and the clients' own training** (main sweep, paired by seed):", "",
             *training_table(args.sweep, found), "",
             "**4. Horizon: the same pair at 40 rounds** (every 40-round cell's first 8 rounds equal the main "
             "sweep's cell of its seed, checked):", "", *horizon]
    emit("\n".join(lines), args.write, TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

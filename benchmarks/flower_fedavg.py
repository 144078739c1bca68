"""fedcore vs Flower (flwr simulation on Ray): the same FedAvg job, whole runs as processes, interleaved.

    python benchmarks/flower_fedavg.py                 # builds/reuses the benchmark venv, then 3 interleaved pairs
    python benchmarks/flower_fedavg.py --reps 5 --fedcore-python /work/venvs/dev/bin/python

The job is identical in both frameworks: the embedded 8x8 digits, the micro CNN from the same initial weights, the
*same* client partition (fedcore's Dirichlet(0.5) split, handed to Flower's clients), full participation, 1 local
epoch of SGD (lr 0.05, momentum 0.9, batch 32), sample-weighted FedAvg, and a central evaluation of the global model
on the test set after every round, 10 rounds. Each side is a whole process, timed from its start to its exit:

* fedcore: ``fedcore run examples/fedavg_dirichlet.toml`` (the job above; 1 torch thread, a checkpoint and the
  metrics written every round), once with the inline executor and once with ``executor = {name = "threads",
  workers = 2}``; per-round wall times come from its ``metrics.jsonl``. ``--fedcore-python`` picks the interpreter
  (default: this one; the dev environment, with every plugin installed, is the realistic case);
* Flower: this script with ``--worker flower``: ``run_simulation`` with Ray actors of 1 CPU each (so two clients
  train in parallel on a 2-core machine), the Message-API ``FedAvg`` strategy, the same local SGD loop with the
  same optimizer code as fedcore's (``fedcore.training.PlainSGD``: neither side imports ``torch._dynamo``);
  per-round times are taken round to round at its central evaluation.

The three contenders run interleaved ``--reps`` times (``benchmarks/sidebyside.py``); ratios Flower / fedcore are
taken within each pair, over the whole run (target: at least 5x with the threads executor, benchmarks/README.md)
and per steady round (the median of rounds 2..10 of one run).

flwr[simulation] pins ray and rich versions that conflict with the dev environment, so it lives in its
own venv built from benchmarks/requirements-flower.txt (torch 2.14.1 / torchvision 0.29.1 as in
the dev environment); this script builds it on first use under ~/.cache/fedcore/flower-<hash> and
re-executes itself there. fedcore is installed into it editable from this checkout.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile
import time

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "requirements-flower.txt"
CONFIG = ROOT / "examples" / "fedavg_dirichlet.toml"


# -- the benchmark environment ---------------------------------------------------------------------------


def venv_dir() -> Path:
    key = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    root = Path(os.environ.get("FEDCORE_ENV_ROOT", Path.home() / ".cache" / "fedcore"))
    return root / f"flower-{key}"


def ensure_environment() -> None:
    """Re-execute under the benchmark venv (building it once) unless flwr and fedcore import here."""
    try:
        import flwr  # noqa: F401
        import ray  # noqa: F401

        import fedcore  # noqa: F401
        return
    except ImportError:
        pass
    venv = venv_dir()
    python = venv / "bin" / "python"
    if os.environ.get("FEDCORE_FLOWER_REEXEC"):
        sys.exit(f"flwr is not importable in {sys.executable}; rebuild with: rm -rf {venv} && python {__file__}")
    if not (venv / ".complete").exists():
        print(f"[flower] building the benchmark environment {venv} (first time only; torch takes minutes)",
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run(pip + ["--upgrade", "pip"], check=True)
        subprocess.run(pip + ["-r", str(REQUIREMENTS)], check=True)
        subprocess.run(pip + ["--no-deps", "--no-build-isolation", "-e", str(ROOT)], check=True)
        (venv / ".complete").touch()
    env = dict(this_checkout_first(), FEDCORE_FLOWER_REEXEC="1")
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


def this_checkout_first() -> dict[str, str]:
    """The environment with this checkout first on ``PYTHONPATH``: the benchmark venv's editable fedcore may point
    at another checkout (it is built once and shared), and the Flower side must run this one's code."""
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=str(ROOT) if not path else f"{ROOT}{os.pathsep}{path}")


# -- the shared job --------------------------------------------------------------------------------------


def make_model(seed: int):
    import torch

    from fedcore.models import micro_cnn

    torch.manual_seed(seed)
    return micro_cnn(num_classes=10)


def local_sgd(model, x, y, indices, *, epochs: int, batch_size: int, lr: float, momentum: float, generator):
    """Flower's client update: the same loop as fedcore's SGDUpdate (plain torch, cross-entropy)."""
    import torch
    from torch import nn

    from fedcore.training import PlainSGD

    model.train()
    # fedcore's train_epochs steps SGD with PlainSGD (torch.optim.SGD's arithmetic, bit for bit, without the
    # 1.2 s torch._dynamo import torch.optim costs each process): Flower's clients get the same, its best setting
    opt = PlainSGD(list(model.parameters()), lr, momentum)
    idx = torch.as_tensor(indices, dtype=torch.long)
    loss_sum, seen = 0.0, 0
    for _ in range(epochs):
        order = idx[torch.randperm(len(idx), generator=generator)]
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            loss = nn.functional.cross_entropy(model(x[chunk]), y[chunk])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * len(chunk)
            seen += len(chunk)
    return loss_sum / max(seen, 1)


def fedcore_partition(args, train, test) -> list[list[int]]:
    """The Dirichlet split ``fedcore run`` makes of the job (the same seed, clients and settings)."""
    import fedcore
    from fedcore.builtin import DirichletPartition
    from fedcore.engine.loop import Engine

    engine = Engine(fedcore.Pipeline([DirichletPartition(alpha=args.alpha, min_size=20)]), model=make_model(args.seed),
                    train=train, test=test, num_clients=args.clients, rounds=1, seed=args.seed)
    engine.setup()
    assert engine.run_ctx.partition is not None
    return [list(p) for p in engine.run_ctx.partition.train]


def fedcore_process(args, executor: str) -> dict:
    """``fedcore run`` of the job as a process: its wall time from start to exit, and its rounds."""
    with tempfile.TemporaryDirectory(prefix="fedcore-vs-flower-") as out:
        sets = [f"executor={executor}", f"rounds={args.rounds}", f"num_clients={args.clients}", f"seed={args.seed}"]
        cmd = [args.fedcore_python, "-m", "fedcore", "run", str(CONFIG), "--out", f"{out}/run", "--progress", "none",
               *[arg for value in sets for arg in ("--set", value)]]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        total = time.perf_counter() - start
        rows = [json.loads(line) for line in Path(f"{out}/run/metrics.jsonl").read_text().splitlines() if line]
    rounds = [r["round_wall_s"] for r in rows]
    return {"total": total, "first": rounds[0], "steady": statistics.median(rounds[1:]),
            "accuracy": rows[-1]["test_accuracy"]}


def flower_process(args) -> dict:
    """This script's Flower worker as a process: its wall time from start to exit, and its rounds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "flower", "--rounds", str(args.rounds),
           "--clients", str(args.clients), "--seed", str(args.seed), "--ray-cpus", str(args.ray_cpus)]
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=this_checkout_first())
    total = time.perf_counter() - start
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"total": total, "first": out["per_round"][0], "steady": statistics.median(out["per_round"][1:]),
            "accuracy": out["accuracy"]}


def run_flower(args, train, test, partition) -> dict:
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    import torch

    from fedcore.builtin.global_eval import accuracy_and_loss
    from fedcore.rng import torch_generator

    for name in ("flwr", "ray"):
        logging.getLogger(name).setLevel(logging.WARNING)
    x, y = train.x, train.y
    hyper = dict(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, momentum=args.momentum)
    seed = args.seed

    client = ClientApp()

    @client.train()
    def train_fn(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        cid = int(context.node_config["partition-id"])
        rnd = int(msg.content["config"]["server-round"])
        model = make_model(seed)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        loss = local_sgd(model, x, y, partition[cid], generator=torch_generator(seed, "flower", rnd, cid), **hyper)
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                              "metrics": MetricRecord({"train_loss": loss, "num-examples": len(partition[cid])})})
        return Message(content=content, reply_to=msg)

    stamps: list[float] = []
    accuracy: dict[int, float] = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        model = make_model(seed)

        def central_eval(rnd: int, arrays: ArrayRecord) -> MetricRecord:
            model.load_state_dict(arrays.to_torch_state_dict())
            acc, loss = accuracy_and_loss(model, test)
            accuracy[rnd] = acc
            stamps.append(time.perf_counter())
            return MetricRecord({"accuracy": acc, "loss": loss})

        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=args.clients,
                          min_available_nodes=args.clients)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=args.rounds,
                       evaluate_fn=central_eval)

    start = time.perf_counter()
    run_simulation(server_app=server, client_app=client, num_supernodes=args.clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": args.ray_cpus, "include_dashboard": False}})
    total = time.perf_counter() - start
    per_round = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"per_round": per_round, "total": total, "accuracy": accuracy.get(args.rounds),
            "startup": stamps[0] - start if stamps else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--alpha", type=float, default=0.5, help="Dirichlet label skew of the shared partition")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count() or 2, help="CPUs Flower's Ray may use")
    parser.add_argument("--workers", type=int, default=2, help="threads of fedcore's threads executor")
    parser.add_argument("--reps", type=int, default=3, help="interleaved pairs")
    parser.add_argument("--fedcore-python", default=sys.executable, help="the interpreter that runs `fedcore run`")
    parser.add_argument("--worker", choices=("flower",), help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args()
    ensure_environment()

    from fedcore.data import load_digits

    train, test = load_digits(seed=args.seed)
    if args.worker == "flower":  # one Flower run in this process; the numbers on the last line
        result = run_flower(args, train, test, fedcore_partition(args, train, test))
        print(json.dumps(result))
        return

    import flwr
    import ray
    from sidebyside import Target, interleave

    threads = f'{{name="threads",workers={args.workers}}}'
    runs = interleave({"fedcore inline": lambda: fedcore_process(args, '"inline"'),
                       "fedcore threads": lambda: fedcore_process(args, threads),
                       "flower": lambda: flower_process(args)}, reps=args.reps)
    params = sum(p.numel() for p in make_model(args.seed).parameters())
    runs.print_header(f"FedAvg on digits ({len(train)} train / {len(test)} test), micro CNN ({params} parameters), "
                      f"{args.clients} clients, the same Dirichlet({args.alpha}) split, {args.rounds} rounds: "
                      f"fedcore vs Flower, whole runs as processes",
                      flower=f"flwr {flwr.__version__}, Ray {ray.__version__} actors of 1 CPU each",
                      fedcore=f"`{Path(args.fedcore_python).name} -m fedcore run` ({args.fedcore_python}), 1 thread; "
                              f"threads executor with {args.workers} workers")
    for key in ("total", "first", "steady", "accuracy"):
        runs.print_times(key, unit="" if key == "accuracy" else "s")
    for ours in ("fedcore inline", "fedcore threads"):
        runs.print_ratio("flower", ours, key="total", target=Target(">=", 5) if ours == "fedcore threads" else None,
                         label=f"Flower / {ours}, whole run")
        runs.print_ratio("flower", ours, key="steady", label=f"Flower / {ours}, steady round")
    runs.print_ratio("fedcore inline", "fedcore threads", key="steady", label="threads speed-up per steady round")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": runs.results, "loads": runs.loads},
                                              indent=2))


if __name__ == "__main__":
    main()

"""fedcore vs Flower (flwr simulation on Ray): the same FedAvg job, timed per round side by side in one run.

    python benchmarks/flower_fedavg.py                 # builds/reuses the benchmark venv, then runs both
    python benchmarks/flower_fedavg.py --rounds 20 --clients 20

The job is identical in both frameworks: the embedded 8x8 digits, the micro CNN from the same initial
weights, the *same* client partition (fedcore's Dirichlet(0.5) split, handed to Flower's clients),
full participation, 1 local epoch of SGD (lr 0.05, momentum 0.9, batch 32), sample-weighted FedAvg,
and a central evaluation of the global model on the test set after every round. fedcore runs its
inline executor in this process; Flower runs its Simulation Engine with Ray actors (1 CPU each, so
two clients train in parallel on a 2-core machine). Per-round wall time is measured from round to
round on the server side in both (training + aggregation + central evaluation).

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
import time

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REQUIREMENTS = HERE / "requirements-flower.txt"


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
    env = dict(os.environ, FEDCORE_FLOWER_REEXEC="1")
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


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

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
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


def run_fedcore(args, train, test, *, executor=None) -> dict:
    import torch

    import fedcore
    from fedcore.builtin import DirichletPartition, FedAvg, SGDUpdate, UniformSync

    torch.set_num_threads(1)
    pipe = fedcore.Pipeline([
        DirichletPartition(alpha=args.alpha, min_size=20), UniformSync(fraction=1.0),
        SGDUpdate(lr=args.lr, momentum=args.momentum, epochs=args.epochs, batch_size=args.batch_size),
        FedAvg(weighting="samples"),
    ])
    start = time.perf_counter()
    result = pipe.run(model=make_model(args.seed), train=train, test=test, num_clients=args.clients,
                      rounds=args.rounds, seed=args.seed, executor=executor)
    total = time.perf_counter() - start
    return {"per_round": [r["round_wall_s"] for r in result.history], "total": total,
            "accuracy": result.history.last("test_accuracy"),
            "partition": [list(p) for p in result.run.partition.train]}


def run_flower(args, train, test, partition) -> dict:
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

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
    parser.add_argument("--fedcore-ray", action="store_true",
                        help="also run fedcore with its Ray executor (2 workers), Flower's execution model")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args()
    ensure_environment()

    import flwr
    import ray
    import torch

    from fedcore.data import load_digits

    train, test = load_digits(seed=args.seed)
    params = sum(p.numel() for p in make_model(args.seed).parameters())
    print(f"FedAvg on digits ({len(train)} train / {len(test)} test), micro CNN ({params} parameters), "
          f"{args.clients} clients with the same Dirichlet({args.alpha}) split, {args.rounds} rounds, "
          f"{args.epochs} local epoch(s), batch {args.batch_size}, SGD lr {args.lr} momentum {args.momentum}")
    print(f"torch {torch.__version__}, flwr {flwr.__version__}, ray {ray.__version__}, {os.cpu_count()} CPUs; "
          f"fedcore: inline executor, 1 thread; Flower: simulation engine, Ray actors with 1 CPU each")
    ours = run_fedcore(args, train, test)
    theirs = run_flower(args, train, test, ours["partition"])
    ours_ray = None
    if args.fedcore_ray:
        from fedcore.engine.ray_executor import RayExecutor

        start = time.perf_counter()
        ours_ray = run_fedcore(args, train, test, executor=RayExecutor(num_workers=2, shutdown_on_close=True))
        ours_ray["total"] = time.perf_counter() - start

    def row(name: str, r: dict) -> str:
        mean, med = statistics.mean(r["per_round"]), statistics.median(r["per_round"])
        return f"{name:<16} {mean:>9.3f} s {med:>9.3f} s {r['total']:>9.1f} s {r['accuracy']:>10.4f}"

    print(f"\n{'':<16} {'mean/round':>11} {'median/round':>12} {'total':>11} {'final acc':>10}")
    print(row("fedcore", ours))
    print(row("flower (ray)", theirs))
    if ours_ray is not None:
        print(row("fedcore (ray)", ours_ray))
    ratio_mean = statistics.mean(theirs["per_round"]) / statistics.mean(ours["per_round"])
    ratio_median = statistics.median(theirs["per_round"]) / statistics.median(ours["per_round"])
    first = theirs["per_round"][0] / ours["per_round"][0]
    later = statistics.median(theirs["per_round"][1:]) / statistics.median(ours["per_round"][1:])
    print(f"\nper-round wall time, Flower / fedcore: {ratio_mean:.1f}x (mean of all rounds), "
          f"{first:.1f}x (round 1, with Flower's actor start-up), {later:.1f}x (median of rounds 2..{args.rounds}); "
          f"total incl. start-up: {theirs['total'] / ours['total']:.1f}x")
    print(f"final accuracy: fedcore {ours['accuracy']:.4f}, Flower {theirs['accuracy']:.4f} "
          f"(difference {abs(theirs['accuracy'] - ours['accuracy']):.4f}; the batch order differs)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "fedcore": {k: v for k, v in ours.items()
                                                                              if k != "partition"},
                                               "flower": theirs, "ratio_mean": ratio_mean,
                                               "ratio_median": ratio_median, "ratio_first_round": first,
                                               "ratio_later_median": later,
                                               "fedcore_ray": None if ours_ray is None else
                                               {k: v for k, v in ours_ray.items() if k != "partition"}},
                                              indent=2))


if __name__ == "__main__":
    main()

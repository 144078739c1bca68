"""pfl-research's CIFAR-10 setup run by pfl itself; prints one JSON line of timings. Runs in pfl's own environment.

    /work/venvs/pfl/bin/python benchmarks/pfl_cifar10.py --rounds 3      # called by vectorised_cifar10.py

The job is pfl's benchmark (``benchmarks/image_classification`` in pfl-research): its ``simple_cnn`` (two 3x3
convolutions 32/64, max-pool, dropout 0.25, dense 128, dropout 0.5, Glorot-uniform init), users of 50 images
each, a cohort of ``--clients`` users per central iteration, one local epoch, local batch 10, plain local SGD and
FedAvg (``FederatedAveraging`` on the ``SimulatedBackend``), no evaluation. Images are synthetic and CIFAR-shaped
(32x32x3, 10 classes) from a fixed seed, as in the fedcore side of the benchmark.
"""
from __future__ import annotations

import argparse
import json
import time
import types

import numpy as np
import torch
from torch import nn


def simple_cnn(num_outputs: int = 10) -> nn.Module:
    """pfl's ``simple_cnn`` for 32x32x3 inputs, taking NCHW tensors (pfl's own first layer transposes NHWC)."""
    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Dropout(0.25), nn.Flatten(), nn.Linear(14 * 14 * 64, 128), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(128, num_outputs))
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--per-user", type=int, default=50)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel

    rng = np.random.default_rng(0)
    n = args.users * args.per_user
    x = torch.from_numpy(rng.standard_normal((n, 3, 32, 32), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 10, n))

    def make_dataset(uid: int) -> Dataset:
        s = slice(uid * args.per_user, (uid + 1) * args.per_user)
        return Dataset(raw_data=[x[s], y[s]], user_id=uid)

    data = FederatedDataset(make_dataset, get_user_sampler("random", list(range(args.users))))
    torch.manual_seed(0)
    module = simple_cnn()

    def loss(self: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, eval: bool = False) -> torch.Tensor:
        self.eval() if eval else self.train()
        return nn.functional.cross_entropy(self(inputs), targets)

    @torch.no_grad()
    def metrics(self: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, eval: bool = True) -> dict:
        self.eval() if eval else self.train()
        out = self(inputs)
        return {"loss": Weighted(float(nn.functional.cross_entropy(out, targets, reduction="sum")), len(targets))}

    module.loss = types.MethodType(loss, module)  # type: ignore[attr-defined]
    module.metrics = types.MethodType(metrics, module)  # type: ignore[attr-defined]
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0))
    stamps: list[float] = []

    class Stamp(TrainingProcessCallback):
        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            stamps.append(time.perf_counter())
            return False, Metrics()

    backend = SimulatedBackend(training_data=data, val_data=data)
    params = NNAlgorithmParams(central_num_iterations=args.rounds, evaluation_frequency=10 ** 9,
                               train_cohort_size=args.clients, val_cohort_size=0)
    train = NNTrainHyperParams(local_num_epochs=1, local_learning_rate=0.05, local_batch_size=10)
    start = time.perf_counter()
    FederatedAveraging().run(algorithm_params=params, backend=backend, model=model, model_train_params=train,
                             model_eval_params=NNEvalHyperParams(local_batch_size=100), callbacks=[Stamp()])
    rounds = np.diff([start, *stamps])
    print(json.dumps({"round_s": rounds.tolist()}))


if __name__ == "__main__":
    main()

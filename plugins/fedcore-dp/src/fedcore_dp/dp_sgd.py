"""Sample-level DP-SGD for the local update, through Opacus (Abadi et al., CCS 2016).

Each client trains its share with Opacus's ``PrivacyEngine``: Poisson-sampled batches, per-sample gradients
clipped to ``max_grad_norm``, Gaussian noise of ``noise_multiplier · max_grad_norm`` on their sum. Only trainable
parameters get per-sample gradients, so the same component trains a whole-model share and a LoRA share (where
only the adapter factors train). Each client keeps its own accounting history in its ``ClientState`` (the
steps, sampling rate and noise it used: its data never leaves, nor does its history); the history's
``dp_sgd_epsilon`` is the largest ε over the clients, from the same accountants as DP-FedAvg.
"""
from __future__ import annotations

from typing import Any
import warnings

import attrs

import fedcore
from fedcore import ClientData, ClientInfo, ClientState, ClientUpdate, ConfigError, RoundContext, Share, StashKey
from fedcore.data import batches
from fedcore.settings import setting
from fedcore.training import make_optimizer
from fedcore_dp import accounting

HISTORY = StashKey[list]("dp.sgd-history")
"""A client's DP-SGD steps as ``[sample_rate, noise_multiplier, steps]`` lists (plain values, checkpointed)."""


@attrs.frozen(eq=False, kw_only=True)
class DPSGDUpdate:
    """Local DP-SGD through Opacus: per-sample clipping and noise, Poisson-sampled batches of the client's data."""

    lr: float = setting(0.05, low=0.0, low_open=True, help="learning rate")
    epochs: int = setting(1, low=1, help="local epochs (each about len(data)/batch_size Poisson batches)")
    batch_size: int = setting(32, low=1, help="expected batch size: sample rate = batch_size / len(data)")
    optimizer: str = setting("sgd", choices=("sgd", "adam"), help="local optimizer under Opacus's DPOptimizer")
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="SGD momentum")
    noise_multiplier: float = setting(1.0, low=0.0, help="noise std / max_grad_norm")
    max_grad_norm: float = setting(1.0, low=0.0, low_open=True, help="per-sample gradient clip norm")
    delta: float = setting(1e-5, low=0.0, high=1.0, low_open=True, high_open=True, help="δ of the reported ε")
    accountant: str = setting("opacus-rdp", choices=accounting.ACCOUNTANTS, help="which library computes ε")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # Opacus refuses BatchNorm: the checks run on the BatchNorm-free tiny MLP
        from fedcore.testing import CheckPlan, ContractFixture, tiny_model

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_model))

    @fedcore.hookimpl
    def fedcore_run_start(self, run: fedcore.RunContext) -> None:
        """Refuse a model Opacus cannot train before any client runs (BatchNorm mixes the samples of a batch)."""
        from torch import nn

        norms = [name for name, m in run.server.model.named_modules()
                 if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if norms:
            raise ConfigError(f"dp-sgd cannot compute per-sample gradients of this model: BatchNorm layer "
                              f"{norms[0]!r} mixes the samples of a batch; use a model without BatchNorm (tiny-mlp, "
                              f"GroupNorm) or whole-client DP (dp-fedavg)")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        from opacus import PrivacyEngine
        from opacus.validators import ModuleValidator
        import torch

        problems = [e for e in ModuleValidator.validate(share.module, strict=False)
                    if "BatchNorm" in str(e) or "not supported" in str(e).lower()]
        if problems:
            first = str(problems[0]).split(".")[0]
            raise ConfigError(f"dp-sgd cannot compute per-sample gradients of this model: {first}; use a model "
                              f"without BatchNorm (tiny-mlp, GroupNorm) or whole-client DP (dp-fedavg)")
        x, y = next(iter(batches(data.dataset, data.indices, len(data.indices), shuffle=False)))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                             batch_size=min(self.batch_size, len(data.indices)))
        params = [p for p in share.module.parameters() if p.requires_grad]
        optimizer = make_optimizer(self.optimizer, params, self.lr, momentum=self.momentum)
        with warnings.catch_warnings():  # a simulation: Opacus's non-cryptographic RNG is what seeds reproduce
            warnings.simplefilter("ignore", UserWarning)
            engine = PrivacyEngine(accountant="rdp")
        module = share.module
        module.train()
        noise = ctx.rng("dp-sgd-noise")
        device = params[0].device if params else torch.device("cpu")
        if device.type != "cpu":  # Opacus draws the noise on the gradients' device, from a generator of that device
            on_device = torch.Generator(device=device)
            on_device.manual_seed(int(torch.randint(2**62, (1,), generator=noise)))
            noise = on_device
        hooks, dp_optimizer, dp_loader = engine.make_private(
            module=module, optimizer=optimizer, data_loader=loader, noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.max_grad_norm, poisson_sampling=True, noise_generator=noise, wrap_model=False)
        total, seen = 0.0, 0
        try:
            for _ in range(self.epochs):
                for xb, yb in dp_loader:  # Poisson batches from torch's generator, seeded per (seed, round, client)
                    dp_optimizer.zero_grad()
                    if len(yb) == 0:  # an empty Poisson batch: the step still adds noise (Opacus's convention)
                        dp_optimizer.step()
                        continue
                    loss = torch.nn.functional.cross_entropy(module(xb), yb)
                    with warnings.catch_warnings():  # Opacus's hooks on a first layer whose input needs no grad
                        warnings.simplefilter("ignore", UserWarning)
                        loss.backward()
                    dp_optimizer.step()
                    total += float(loss.detach()) * len(yb)
                    seen += len(yb)
        finally:
            hooks.cleanup()  # the client's module leaves without Opacus's hooks and per-sample buffers
        history = state.stash.setdefault(HISTORY, [])
        for noise, rate, steps in engine.accountant.history:
            history.append([float(rate), float(noise), int(steps)])
        return ClientUpdate.from_share(share, num_examples=len(data),
                                       metrics={"loss": total / max(seen, 1)})

    def client_epsilon(self, state: ClientState) -> float:
        events = [accounting.Event(q=q, z=z, count=c) for q, z, c in state.stash.get(HISTORY) or []]
        return accounting.epsilon(events, self.delta, self.accountant)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: RoundContext) -> dict[str, float] | None:
        if ctx.run is None or self.noise_multiplier == 0:
            return None
        spent = [self.client_epsilon(s) for s in ctx.run.client_states.values() if s.stash.get(HISTORY)]
        if not spent:
            return None
        return {"dp_sgd_epsilon": max(spent), "dp_sgd_delta": self.delta}


__all__ = ["HISTORY", "DPSGDUpdate"]

"""``tl-share``: the split slot of Tree Learning, and the server side of the round around any aggregator.

Each client's share is a working copy of the model of which only units 1..split-1 are trainable and sent.
Client parts are *personal* (thesis §3.3: weights never cross the network; kept in ``ClientState.tensors``,
downloaded once, and again only for units a re-partition newly gives the client), or *relayed* (``relay``:
SL round-robin, Gupta & Raskar: the client part goes up after each client's turn and down to the next).
The share's endpoint is the round's :class:`~fedcore_treelearning.tree.TreeServer`; the ``tl-cohort``
trains the wave against it, and this component's aggregate wrapper writes the server's trained units
(and, relayed, the last turn's client part) into the global model, with the round's simulated time.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore import RoundContext, RunContext
from fedcore.builtin import working_copy
from fedcore.errors import ConfigError
from fedcore.scheduling import is_asynchronous
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_treelearning.plan import devices_of, plan_of, probe_batch, solve
from fedcore_treelearning.share_meta import TREE, TreePart
from fedcore_treelearning.simulate import pass_time
from fedcore_treelearning.strips import check_tiling
from fedcore_treelearning.tree import MODES, VERTICAL, TreeServer, unit_entries


def client_flops(ctx: Any, split: int, strip: tuple[int, int] | None) -> tuple[float, float]:
    """FLOPs per sample of the client part (units 1..split-1): forward, and forward + backward, from the plan's
    profile (the solver's and the event model's numbers), scaled by the strip's share of the width in vertical mode.

    The share's module is the whole model (only the client units are trainable), so the clock would otherwise price
    a client at the whole model's forward and a backward down to unit 1."""
    plan = plan_of(ctx)
    assert plan.profile is not None, "the plan is solved before any share is cut"
    units = plan.profile.units[:split - 1]
    fraction = 1.0
    if strip is not None:
        width = sum(b - a for a, b in plan.bounds.values())
        fraction = (strip[1] - strip[0]) / width
    return (fraction * sum(u.forward_flops for u in units), fraction * sum(u.train_flops for u in units))


def _ints(value: Any) -> tuple[int, ...] | None:
    """Layer indices (``splits``) or strip counts (``strips``): whole numbers >= 0, one per client."""
    if value is None:
        return None
    out = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in out):
        raise ConfigError(f"TreeShare splits/strips={list(out)!r}: expected whole numbers >= 0, one per client")
    return out


@attrs.frozen(eq=False, kw_only=True)
class TreeShare:
    """Split slot: per-client split layers (Alg. 2 on device profiles, or the SL baseline's common split).

    ``partition``: ``optimal`` (branch and bound, re-solved every ``repartition_every`` rounds) or
    ``uniform`` (about half of the units on every client); ``splits`` fixes them by hand (client-id order).
    """

    mode: str = setting("horizontal", choices=MODES, help="horizontal: clients hold samples; vertical: features")
    partition: str = setting("optimal", choices=("optimal", "uniform"))
    splits: tuple[int, ...] | None = attrs.field(default=None, converter=_ints)
    strips: tuple[int, ...] | None = attrs.field(default=None, converter=_ints)
    relay: bool = setting(False, help="client part relayed between clients (SL round-robin) instead of personal")
    server_flops: float = setting(50e9, low=0.0, low_open=True, help="V_s, the server's FLOP/s")
    default_profile: str = setting("tl-medium", kind=str, help="device profile of clients the run gave none")
    repartition_every: int = setting(1, low=1, help="rounds between re-solving the splits")
    monotone: bool = setting(True, help="Alg. 2's rule: a slower client never holds more units than a faster one")
    stream_scaled: bool = setting(True, help="horizontal: the solver charges server layers per merged client batch")
    batch_size: int = setting(16, low=1, help="per-client batch (the cost model's and the cohort's)")
    server_lr: float = setting(0.01, low=0.0, low_open=True)
    server_momentum: float = setting(0.9, low=0.0, high=1.0, high_open=True)

    @classmethod
    def __fedcore_checks__(cls) -> Any:
        from fedcore_treelearning.checks import tree_check_plan
        return tree_check_plan(cls)

    # -- the plan -------------------------------------------------------------------------------

    def plan(self, model: nn.Module, ctx: Any) -> dict[int, int]:
        """The splits for this round (solved now if due)."""
        plan = plan_of(ctx)
        due = not plan.splits or (self.partition == "optimal" and self.splits is None
                                  and ctx.round - plan.solved_round >= self.repartition_every)
        if due:
            plan.splits = solve(model, ctx.run, mode=self.mode, partition=self.partition, fixed=self.splits,
                                strips=self.strips, server_flops=self.server_flops, batch_size=self.batch_size,
                                default_profile=self.default_profile, monotone=self.monotone,
                                previous=plan.splits, plan=plan, stream_scaled=self.stream_scaled)
            plan.solved_round, plan.solves = ctx.round, plan.solves + 1
        return plan.splits

    def round_server(self, model: nn.Module, ctx: Any) -> TreeServer:
        plan = plan_of(ctx)
        if plan.server is None or plan.server_round != ctx.round:
            splits = self.plan(model, ctx)
            plan.server = TreeServer(model, splits, mode=self.mode, lr=self.server_lr, momentum=self.server_momentum)
            if self.mode == VERTICAL:
                plan.server.bounds = dict(plan.bounds)
                check_tiling(model, probe_batch(ctx.run.train), splits, plan.server.bounds)
            plan.server_round = ctx.round
        return plan.server

    # -- hooks ----------------------------------------------------------------------------------

    @fedcore.hookimpl
    def fedcore_run_start(self, run: RunContext) -> None:
        """The plan exists from the start, so a resumed run loads its checkpointed splits into it."""
        plan_of(run)

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        if is_asynchronous(pipeline.provider("schedule")):
            raise ConfigError(f"TreeShare steps a round's clients in lockstep against one server; the asynchronous "
                              f"{type(pipeline.provider('schedule')).__name__} never gives it a round's clients "
                              f"together: use schedule = \"uniform\"")
        from fedcore_treelearning.cohort import TreeCohort  # the cohort module imports this one

        cohort = pipeline.provider("cohort")
        if not isinstance(cohort, TreeCohort):
            raise ConfigError(f"TreeShare's server is trained per batch by the tl-cohort; the cohort slot holds "
                              f"{type(cohort).__name__}: use cohort = \"tl-cohort\" (or a recipe: tree-learning, ...)")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext
                            ) -> Share:
        server = self.round_server(model, ctx)
        split = server.splits[client.id]
        module = working_copy(model)
        part = unit_entries(module, 1, split - 1)
        owned = set(part)
        for name, p in module.named_parameters():
            p.requires_grad_(name in owned)
        own = {} if self.relay else {k: v for k, v in state.tensors.items() if k in owned}
        if own:
            module.load_state_dict(own, strict=False)
        sd = module.state_dict()
        download = tuple(k for k in part if k not in own)
        upload = tuple(k for k in part if sd[k].is_floating_point()) if self.relay else ()
        strip = getattr(server, "bounds", {}).get(client.id)
        told = TreePart(split=split, mode=self.mode, relay=self.relay, batch_size=self.batch_size, strip=strip)
        meta = {TREE: told, "flops_per_sample": client_flops(ctx, split, strip)}
        return Share(module=module, download=download, upload=upload,  # type: ignore[arg-type]  # attrs converter
                     endpoint=server, meta=meta)

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext) -> Any:
        result = yield
        plan = plan_of(ctx)
        server = plan.server if plan.server_round == ctx.round else None
        plan.server, plan.server_round = None, -1
        if server is None or server.steps == 0:
            return result
        state = dict(result.state)
        trained = server.model.state_dict()
        state.update({k: trained[k].detach().clone() for k in server.entries})
        if self.relay and server.relay:
            state.update(server.relay)
        metrics = {**result.metrics, **self.round_metrics(server, ctx)}
        return AggregateResult(state=state, per_client=result.per_client, metrics=metrics)

    def round_metrics(self, server: TreeServer, ctx: Any) -> dict[str, float]:
        """The round's simulated time (event model on the clients' device profiles) and the server's loss."""
        plan = plan_of(ctx)
        ids = sorted(server.iterations)
        out = {"tl_server_steps": float(server.steps), "tl_loss": sum(server.losses) / len(server.losses),
               "tl_substituted": float(server.substituted), "tl_solves": float(plan.solves),
               "tl_max_client_units": float(max(server.splits[c] for c in ids) - 1),
               "tl_min_client_units": float(min(server.splits[c] for c in ids) - 1)}
        if plan.profile is not None and ids and ctx.run is not None:
            clients = {c.id: c for c in ctx.run.clients}
            devices = devices_of(ctx.run, [clients[c] for c in ids], self.default_profile)
            fractions = None
            if self.mode == VERTICAL:
                total = sum(b - a for a, b in server.bounds.values())
                fractions = [(server.bounds[c][1] - server.bounds[c][0]) / total for c in ids]
            sim = pass_time(plan.profile, devices, [server.splits[c] for c in ids],
                            batches=[server.iterations[c] for c in ids], batch_size=self.batch_size,
                            server_flops=self.server_flops, schedule=server.schedule, mode=self.mode,
                            fractions=fractions)
            out.update({"tl_sim_s": sim.total, "tl_sim_client_s": sim.client_compute,
                        "tl_sim_server_s": sim.server_compute, "tl_sim_comm_s": sim.communication})
        return out

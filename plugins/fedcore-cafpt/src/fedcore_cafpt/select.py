"""CaFPT's data selection: score the candidate pool once, keep the top-N per class (thesis §6.4.2).

The selection is computed at a client's first dispatch, cached in its ``state.stash`` and returned
unchanged in every later round; the scores are kept there and, when the run has an ``out_dir``, written
as ``cafpt/scores_client<c>.json``. ``select="random"`` is the paper's baseline (a random N per class from
the same pool, also fixed per client), so CaFPT and PromptFL differ only in the data.
"""
from __future__ import annotations

from collections.abc import Sequence
import json
import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.stash import StashKey
from fedcore.types import ClientState, Share
from fedcore_cafpt.pvi import NULL_MODES, pvi_scores
from fedcore_clip import cached_features, gather_labels, require_prompted

SELECTION = StashKey[tuple]("cafpt.selection")
SCORES = StashKey[dict[str, Any]]("cafpt.scores")


def top_per_class(scores: np.ndarray, labels: np.ndarray, shots: int) -> list[int]:
    """Positions of the ``shots`` highest scores within each class; ties broken by position."""
    chosen: list[int] = []
    for c in np.unique(labels):
        pos = np.flatnonzero(labels == c)
        order = sorted(pos.tolist(), key=lambda i: (-float(scores[i]), i))
        chosen.extend(order[:shots])
    return chosen


@attrs.frozen(eq=False, kw_only=True)
class CaFPT:
    """Context-aware few-shot selection by pointwise V-information (Eq. 6.7), composable with any prompt method."""

    shots: int = setting(2, low=1, help="N: samples kept per class (per client: N x K_c)")
    select: str = setting("pvi", choices=("pvi", "random"), help="pvi (CaFPT) or random (the PromptFL baseline)")
    granularity: str = setting("per_class", choices=("per_class", "per_client"))
    null_mode: str = setting("null_image", choices=NULL_MODES)
    pvi_epochs: int = setting(5, low=1, help="epochs to train the prompts p' and p")
    lr: float = setting(0.001, low=0.0, low_open=True)
    batch_size: int = setting(32, low=1)
    save_scores: bool = setting(True, help="write the scores under out_dir/cafpt/ when the run has an out_dir")

    def check_pool(self, client_id: int, labels: np.ndarray) -> None:
        counts = np.bincount(labels)
        short = [(c, int(n)) for c, n in enumerate(counts) if 0 < n < self.shots]
        if short:
            raise ConfigError(f"CaFPT.shots={self.shots} but client {client_id}'s pool has only "
                              f"{', '.join(f'{n} of class {c}' for c, n in short)}; lower shots or enlarge the pool "
                              f"(FewShotPartition.pool_multiplier)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan
        from fedcore_clip.testing import PROMPT_FIXTURE

        return CheckPlan(fixture=PROMPT_FIXTURE)

    @fedcore.hookimpl
    def fedcore_run_start(self, run: Any) -> None:
        """Check every client's pool before any training: a client failure would otherwise only be logged."""
        from fedcore.data import labels_of

        labels = labels_of(run.train)
        pools = run.partition.pool or run.partition.train
        for cid, pool in enumerate(pools):
            self.check_pool(cid, labels[list(pool)])

    @fedcore.hookimpl
    def fedcore_select_data(self, client: Any, indices: Sequence[int], dataset: Any, share: Share,
                            state: ClientState, ctx: Any) -> Sequence[int]:
        cached = state.stash.get(SELECTION)
        if cached is not None:
            return cached
        pool = [int(i) for i in indices]
        labels = gather_labels(dataset, pool)
        self.check_pool(client.id, labels.numpy())
        y = labels.numpy()
        if self.select == "random":
            rng = np.random.default_rng(ctx.seed_for("cafpt-random"))
            scores = rng.random(len(pool))
            record = {"random": scores.tolist()}
        else:
            model = require_prompted(share.module, "CaFPT")
            feats = cached_features(state.stash, model.backbone, dataset, pool)
            out = pvi_scores(model, feats, labels.to(feats.device), epochs=self.pvi_epochs, lr=self.lr,
                             batch_size=self.batch_size, generator=ctx.rng("cafpt-pvi"), null_mode=self.null_mode)
            scores = out["pvi"].cpu().numpy()
            record = {k: v.tolist() for k, v in out.items()}
        if self.granularity == "per_class":
            chosen = top_per_class(scores, y, self.shots)
        else:
            k = self.shots * len(np.unique(y))
            chosen = sorted(range(len(pool)), key=lambda i: (-float(scores[i]), i))[:k]
        selection = tuple(sorted(pool[i] for i in chosen))
        state.stash[SELECTION] = selection
        state.stash[SCORES] = dict(record, index=pool, label=y.tolist(), selected=sorted(chosen))
        run = getattr(ctx, "run", None)
        if self.save_scores and run is not None and run.out_dir is not None:
            path = Path(run.out_dir) / "cafpt" / f"scores_client{client.id}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            saved: dict[str, Any] = state.stash[SCORES]
            tmp.write_text(json.dumps(dict(saved, client=client.id, mode=self.select)))
            os.replace(tmp, path)
        return selection

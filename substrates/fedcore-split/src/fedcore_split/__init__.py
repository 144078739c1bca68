"""Split learning as a share type: clients hold some stages of the model, the server holds the rest.

    from fedcore_split import stage_names
    stage_names(model)            # ['patch_embed', 'embed', 'blocks.0', ..., 'pool', 'norm', 'head']
    fedcore.recipe("splitfed-v1", split={"cut": "patch_embed"}, aggregate="trimmed-mean").run(...)

Components: :class:`SplitShare` (``split-share``, the split slot; it finishes the server side around
any aggregator), :class:`SplitTrain` (``split-train``), :class:`SLTurns` (``sl-turns``); recipes ``sl``,
``splitfed-v1``, ``splitfed-v2`` (:mod:`fedcore_split.recipes`).

Pieces, for methods that build their own protocol (FedV, Tree Learning): :class:`Segment` and
:func:`split_layout` (cuts by stage name or index on timm ViT/DeiT and ``nn.Sequential``),
:class:`ServerRule` / :class:`Connection` (the per-batch protocol; every tensor goes through the
client's channel), :func:`build_share` / :func:`train_split` / :func:`aggregate_split` and :class:`SplitServerState`
(server state kept across rounds). See docs/split.md. The SPSA estimator and the inversion attacks serve
FedV alone and live in its plugin (``fedcore_fedv.spsa``, ``fedcore_fedv.inversion``).
"""
from fedcore_split.aggregate import aggregate_split
from fedcore_split.components import (
    SLTurns,
    SplitShare,
    SplitTrain,
    Turns,
    layout_for,
    refuse_delta_aggregator,
    tiny_vit_check_plan,
)
from fedcore_split.deprecated import SplitFedV1, SplitFedV2, SplitLearning, VanillaSL
from fedcore_split.endpoint import (
    INPUT_GRAD,
    LABELS,
    LOSS,
    LOSSES,
    OUTPUT_GRAD,
    QUERY_OUT,
    SERVER_OUT,
    SMASHED,
    Connection,
    Endpoint,
    ServerRule,
    Session,
    StaleSession,
    staleness_weight,
)
from fedcore_split.evaluate import SplitEval
from fedcore_split.finish import finish_round, stale_metrics
from fedcore_split.plan import plan_split_job
from fedcore_split.recipes import RECIPES
from fedcore_split.rules import FrozenServer, SequentialServer, ServerCopies, make_optimizer
from fedcore_split.share import build_share, remember
from fedcore_split.stages import Segment, split_layout, stage_names, stages_of
from fedcore_split.state import SERVER, SYNCED, SplitServerState, personal_entries, round_rule, server_state, take_rule
from fedcore_split.train import train_split

__all__ = [
    "INPUT_GRAD", "LABELS", "LOSS", "LOSSES", "OUTPUT_GRAD", "QUERY_OUT", "SERVER", "SERVER_OUT", "SMASHED",
    "SYNCED", "Connection", "Endpoint", "FrozenServer", "RECIPES", "SLTurns", "Segment", "SequentialServer",
    "ServerCopies", "ServerRule", "Session", "SplitEval", "SplitFedV1", "SplitFedV2", "SplitLearning",
    "SplitServerState", "SplitShare", "SplitTrain", "StaleSession", "Turns", "VanillaSL", "aggregate_split",
    "build_share", "finish_round", "layout_for", "make_optimizer", "personal_entries", "plan_split_job",
    "refuse_delta_aggregator",
    "remember", "round_rule", "server_state", "split_layout", "stage_names", "stages_of", "stale_metrics",
    "staleness_weight", "take_rule", "tiny_vit_check_plan", "train_split",
]


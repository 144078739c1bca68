"""Split learning as a share type: clients hold some stages of the model, the server holds the rest.

    from fedcore_split import SplitFedV1, stage_names
    stage_names(model)            # ['patch_embed', 'embed', 'blocks.0', ..., 'pool', 'norm', 'head']
    Pipeline([DirichletPartition(alpha=0.3), SplitFedV1(cut="patch_embed", tail_from="norm")]).run(...)

Pieces, for methods that build their own protocol (FedV, Tree Learning): :class:`Segment` and
:func:`split_layout` (cuts by stage name or index on timm ViT/DeiT and ``nn.Sequential``),
:class:`ServerRule` / :class:`Connection` (the per-batch protocol; every tensor goes through the
client's channel), :func:`build_share` / :func:`train_split` / :func:`aggregate_split` and :class:`SplitServerState`
(server state kept across rounds). See docs/split.md. The SPSA estimator and the inversion attacks serve
FedV alone and live in its plugin (``fedcore_fedv.spsa``, ``fedcore_fedv.inversion``).
"""
from fedcore_split.aggregate import aggregate_split
from fedcore_split.components import SplitFedV1, SplitFedV2, SplitLearning, Turns, VanillaSL, layout_for
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
)
from fedcore_split.evaluate import SplitEval
from fedcore_split.rules import FrozenServer, SequentialServer, ServerCopies, make_optimizer
from fedcore_split.share import build_share, remember
from fedcore_split.stages import Segment, split_layout, stage_names, stages_of
from fedcore_split.state import SERVER, SYNCED, SplitServerState, personal_entries, round_rule, server_state, take_rule
from fedcore_split.train import train_split

__all__ = [
    "INPUT_GRAD", "LABELS", "LOSS", "LOSSES", "OUTPUT_GRAD", "QUERY_OUT", "SERVER", "SERVER_OUT", "SMASHED",
    "SYNCED", "Connection", "Endpoint", "FrozenServer", "Segment", "SequentialServer", "ServerCopies", "ServerRule",
    "Session", "SplitEval", "SplitFedV1", "SplitFedV2", "SplitLearning", "SplitServerState", "Turns", "VanillaSL",
    "aggregate_split", "build_share", "layout_for", "make_optimizer", "personal_entries", "remember", "round_rule",
    "server_state", "split_layout", "stage_names", "stages_of", "take_rule", "train_split",
]


def register(registry) -> None:
    """Register the split components' names (called by this distribution's entry point, :mod:`fedcore_split.plugin`)."""
    registry.add("sl", VanillaSL)
    registry.add("splitfed-v1", SplitFedV1)
    registry.add("splitfed-v2", SplitFedV2)
    registry.add("split-eval", SplitEval)

"""The tree itself: client parts up to each split, the server's aggregation and merged layers.

Client ``c`` with split ``s_c`` runs units 1..s_c-1 (thesis Def. 3.1, Eq. 3.5). The server runs unit k on
the stream merged so far; at a meeting point k the activations of the clients whose split is k join the
stream by concatenation (Alg. 1 line 14): along the batch dimension in horizontal mode, along the width in
vertical mode. One loss on the merged stream; autograd splits its gradient back along the tree, so each
client's input leaf receives exactly the gradient of its own slice (Alg. 1 lines 22-24).

Order inside a merged stream (spec A9.3/A9.4, decided here): the stream so far, then the clients joining at
this meeting point in client-id order. In vertical mode the width layout of the merged map is therefore a
fixed function of the splits (the same in training and testing), not the image's strip order.

A client forwards through a *snapshot* of its weights (spec A3): the graph of batch t is evaluated at the
weights of iteration t, so its gradient can be applied one iteration later (pipelined TL, staleness 1)
after the live weights moved on, without autograd's version-counter error.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy

import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore_treelearning.units import partition_units

HORIZONTAL, VERTICAL = "horizontal", "vertical"
MODES = (HORIZONTAL, VERTICAL)


def concat_dim(mode: str) -> int:
    """Batch dimension (horizontal: clients hold different samples) or width (vertical: different features)."""
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r}; choose one of: {', '.join(MODES)}")
    return 0 if mode == HORIZONTAL else -1


def unit_entries(model: nn.Module, first: int, last: int) -> tuple[str, ...]:
    """``model.state_dict()`` names of units ``first..last`` (1-based, inclusive), in state-dict order."""
    units = partition_units(model)
    ids = {id(t) for _, u in units[first - 1:last] for t in u.state_dict(keep_vars=True).values()}
    return tuple(k for k, t in model.state_dict(keep_vars=True).items() if id(t) in ids)


class UnitRange(nn.Module):
    """Units ``first..last`` (1-based, inclusive) of ``model``, run in order; parameters keep the model's names."""

    def __init__(self, model: nn.Module, first: int, last: int) -> None:
        super().__init__()
        self.model = model
        self.first, self.last = first, last
        self._units = [u for _, u in partition_units(model)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self._units[self.first - 1:self.last]:
            x = unit(x)
        return x


class ClientPart:
    """One client's units 1..split-1 and its optimizer; forwards through snapshots, applies gradients later."""

    def __init__(self, model: nn.Module, split: int, *, lr: float, momentum: float) -> None:
        self.split = split
        self.path = UnitRange(model, 1, split - 1)
        own = set(unit_entries(model, 1, split - 1))
        self.names = [n for n, p in model.named_parameters() if n in own and p.requires_grad]
        params = dict(model.named_parameters())
        self.params = [params[n] for n in self.names]
        self.optimizer = torch.optim.SGD(self.params, lr=lr, momentum=momentum)
        self.path.train()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``h`` with its graph over a snapshot of the current weights (returned, for :meth:`apply`)."""
        snap = [p.detach().clone().requires_grad_(True) for p in self.params]
        h = torch.func.functional_call(self.path, {f"model.{n}": t for n, t in zip(self.names, snap)}, (x,))
        return h, snap

    def apply(self, h: torch.Tensor, snap: list[torch.Tensor], grad_h: torch.Tensor) -> None:
        """Back-propagate ``grad_h`` through the graph of ``h`` (at its snapshot) and step the live weights."""
        grads = torch.autograd.grad(h, snap, grad_outputs=grad_h, allow_unused=True)
        for p, g in zip(self.params, grads):
            p.grad = torch.zeros_like(p) if g is None else g
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def merged_forward(units: Sequence[nn.Module], splits: Mapping[int, int], inputs: Mapping[int, torch.Tensor],
                   mode: str) -> torch.Tensor:
    """The server's forward: units from the first meeting point on, clients joining at their split."""
    dim = concat_dim(mode)
    present = sorted(c for c in inputs)
    if not present:
        raise ConfigError("the tree has no input: no client sent an activation this iteration")
    stream: torch.Tensor | None = None
    for k in range(min(splits[c] for c in present), len(units) + 1):
        joining = [inputs[c] for c in present if splits[c] == k]
        if joining:
            pieces = ([stream] if stream is not None else []) + joining
            try:
                stream = torch.cat(pieces, dim=dim)
            except RuntimeError as exc:
                raise ConfigError(f"cannot concatenate the activations meeting at layer {k} along "
                                  f"{'the batch' if dim == 0 else 'the width'} ({[tuple(p.shape) for p in pieces]}): "
                                  f"{str(exc).splitlines()[0]}") from None
        if stream is not None:
            stream = units[k - 1](stream)
    assert stream is not None
    return stream


class TreeServer:
    """The server of one round: its working copy of the model, trained from the first meeting point on.

    ``step`` takes the activations (and, horizontally, labels) of the clients present in an iteration,
    runs the merged forward, one SGD step on the mean cross-entropy of the merged batch, and returns each
    client's input gradient.
    """

    def __init__(self, model: nn.Module, splits: Mapping[int, int], *, mode: str, lr: float, momentum: float) -> None:
        concat_dim(mode)
        if not splits:
            raise ConfigError("a tree needs at least one client")
        self.model = copy.deepcopy(model)
        self.model.train()
        self.units = [u for _, u in partition_units(self.model)]
        n = len(self.units)
        for c, s in splits.items():
            if isinstance(s, bool) or not isinstance(s, int) or not 2 <= s <= n:
                raise ConfigError(f"split {s!r} of client {c} is outside the model: with {n} units a split is an "
                                  f"int in 2..{n} (units 1..split-1 on the client)")
        self.splits = dict(splits)
        self.mode = mode
        self.first = min(self.splits.values())
        self.entries = unit_entries(self.model, self.first, n)
        trained = set(self.entries)
        params = [p for name, p in self.model.named_parameters() if name in trained and p.requires_grad]
        self.optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum)
        self.steps = 0
        self.losses: list[float] = []
        # what the round's cohort records for aggregation and the simulated clock
        self.bounds: dict[int, tuple[int, int]] = {}      # vertical: each client's column range
        self.iterations: dict[int, int] = {}              # client -> batches it sent this round
        self.schedule = "sync"
        self.relay: dict[str, torch.Tensor] = {}          # relayed client part after the last turn
        self.stored: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}  # latest (h, y) per client
        self.substituted = 0

    def step(self, inputs: Mapping[int, torch.Tensor], labels: torch.Tensor) -> dict[int, torch.Tensor]:
        leaves = {c: h.detach().requires_grad_(True) for c, h in inputs.items()}
        logits = merged_forward(self.units, self.splits, leaves, self.mode)
        if logits.shape[0] != labels.shape[0]:
            raise ConfigError(f"the merged stream has {logits.shape[0]} rows for {labels.shape[0]} labels")
        loss = nn.functional.cross_entropy(logits, labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        self.losses.append(float(loss.detach()))
        return {c: leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for c, leaf in leaves.items()}

    def merged_labels(self, labels: Mapping[int, torch.Tensor]) -> torch.Tensor:
        """Horizontal labels in the merged stream's row order: by split, then client id (see module doc)."""
        order = sorted(labels, key=lambda c: (self.splits[c], c))
        return torch.cat([labels[c] for c in order])

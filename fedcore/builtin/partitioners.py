"""Built-in partitioners: IID, Dirichlet label skew, shards (c classes per client), few-shot, quantity skew.

All draw from ``run.np_rng("partition")``: the same seed gives the same split.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore.contexts import RunContext
from fedcore.data.arrays import labels_of
from fedcore.errors import ConfigError
from fedcore.indices import IndexList, index_lists
from fedcore.settings import setting
from fedcore.types import Partition


def _require_enough(num_clients: int, n: int, per_client: int, what: str) -> None:
    if num_clients * per_client > n:
        raise ConfigError(f"num_clients={num_clients} x {what}={per_client} needs {num_clients * per_client} samples; "
                          f"the training set has {n}")


def _index_lists(value: Iterable[Iterable[int]]) -> tuple[IndexList, ...]:
    return index_lists(value)


@attrs.frozen(eq=False, kw_only=True)
class GivenPartition:
    """A partition computed elsewhere (a file, another framework, a benchmark), handed to the engine as is.

    The engine still checks it: one list per client, no empty client, indices inside the training set.
    """

    parts: tuple[IndexList, ...] = attrs.field(converter=_index_lists,
                                                     metadata={"help": "one list of training-set indices per client"})

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan

        return CheckPlan(presets=[cls(parts=[range(0, 32), range(32, 64), range(64, 96)])])

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        return Partition(train=self.parts)


@attrs.frozen(eq=False, kw_only=True)
class IIDPartition:
    """Shuffle and split into near-equal parts."""

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        _require_enough(num_clients, len(dataset), 1, "min_size")
        perm = run.np_rng("partition").permutation(len(dataset))
        return Partition(train=[np.sort(p) for p in np.array_split(perm, num_clients)])


@attrs.frozen(eq=False, kw_only=True)
class DirichletPartition:
    """Label skew: each class is spread over clients with proportions ~ Dir(alpha) (Hsu et al., 2019).

    Draws are repeated until every client holds at least ``min_size`` samples (as in the FedV and
    FedLab code); if ``max_tries`` draws fail, the error says which setting to relax.
    """

    alpha: float = setting(0.5, low=0.0, low_open=True, help="concentration; small = more skew")
    min_size: int = setting(10, low=1, help="minimum samples per client")
    max_tries: int = setting(1000, low=1, help="re-draws before giving up")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        labels = labels_of(dataset)
        _require_enough(num_clients, len(labels), self.min_size, "min_size")
        rng = run.np_rng("partition")
        classes = np.unique(labels)
        for _ in range(self.max_tries):
            parts: list[list[int]] = [[] for _ in range(num_clients)]
            for c in classes:
                idx = rng.permutation(np.flatnonzero(labels == c))
                props = rng.dirichlet(np.full(num_clients, self.alpha))
                # balance: a client that already holds its share gets no more of this class
                sizes = np.array([len(p) for p in parts])
                props = props * (sizes < len(labels) / num_clients)
                props = props / props.sum() if props.sum() > 0 else np.full(num_clients, 1.0 / num_clients)
                cuts = (np.cumsum(props) * len(idx)).astype(int)[:-1]
                for client, chunk in enumerate(np.split(idx, cuts)):
                    parts[client].extend(chunk.tolist())
            if min(len(p) for p in parts) >= self.min_size:
                return Partition(train=[sorted(p) for p in parts])
        raise ConfigError(f"DirichletPartition: no draw in {self.max_tries} gave every one of {num_clients} clients "
                          f">= min_size={self.min_size} samples at alpha={self.alpha}; raise alpha or lower min_size")


@attrs.frozen(eq=False, kw_only=True)
class ShardPartition:
    """Pathological non-IID: every client holds ``classes_per_client`` classes (McMahan et al., 2017).

    Classes are dealt to clients from a shuffled, repeated class list so every class is used; each
    class's samples are then split evenly among the clients that hold it.
    """

    classes_per_client: int = setting(2, low=1, help="c classes per client")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        labels = labels_of(dataset)
        classes = np.unique(labels)
        if self.classes_per_client > len(classes):
            raise ConfigError(f"ShardPartition.classes_per_client={self.classes_per_client} exceeds the "
                              f"{len(classes)} classes in the dataset")
        rng = run.np_rng("partition")
        deck: list[int] = []
        owners: list[list[int]] = [[] for _ in classes]
        pos = {int(c): i for i, c in enumerate(classes)}
        for client in range(num_clients):
            mine: list[int] = []
            while len(mine) < self.classes_per_client:
                if not deck:
                    deck = rng.permutation(classes).tolist()
                choice = next((c for c in deck if c not in mine), None)
                if choice is None:  # the rest of the deck is all classes this client already has
                    deck = rng.permutation(classes).tolist()
                    continue
                deck.remove(choice)
                mine.append(choice)
            for c in mine:
                owners[pos[int(c)]].append(client)
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c, holders in zip(classes, owners):
            if not holders:
                continue
            idx = rng.permutation(np.flatnonzero(labels == c))
            for holder, chunk in zip(holders, np.array_split(idx, len(holders))):
                parts[holder].extend(chunk.tolist())
        return Partition(train=[sorted(p) for p in parts])


@attrs.frozen(eq=False, kw_only=True)
class FewShotPartition:
    """k samples per class for each client, and each client's personal test split (its classes' test samples).

    ``mode``: ``iid`` (every client has every class), ``disjoint`` (classes dealt out without overlap),
    ``random_classes`` (each client draws ``classes_per_client`` classes, overlap allowed).
    ``pool_multiplier`` > 1 gives each client a candidate pool of that many shots per class for a
    data-selection component (CaFPT); training then uses the whole pool unless a selector narrows it.
    Samples are drawn without replacement across clients while a class has enough left; in ``iid`` and
    ``random_classes`` modes a spent class is then drawn again from all its samples, so clients share some (the
    thesis's code draws every client's shots independently, spec 003b A7: a small Caltech101 class held by many of
    pFedPrompt's 100 or CaFPT's 50 clients runs out).
    """

    shots: int = setting(4, low=1, help="samples per class per client")
    mode: str = setting("iid", choices=("iid", "disjoint", "random_classes"), help="how classes are drawn")
    classes_per_client: int = setting(2, low=1, help="for mode=random_classes")
    pool_multiplier: int = setting(1, low=1, help="candidate pool size, in multiples of shots")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        labels = labels_of(dataset)
        classes = np.unique(labels).tolist()
        rng = run.np_rng("partition")
        if self.mode == "iid":
            client_classes = [classes for _ in range(num_clients)]
        elif self.mode == "disjoint":
            if num_clients > len(classes):
                raise ConfigError(f"FewShotPartition(mode='disjoint') needs num_clients <= {len(classes)} classes, "
                                  f"got num_clients={num_clients}")
            client_classes = [sorted(p.tolist()) for p in np.array_split(rng.permutation(classes), num_clients)]
        else:
            if self.classes_per_client > len(classes):
                raise ConfigError(f"FewShotPartition.classes_per_client={self.classes_per_client} exceeds the "
                                  f"{len(classes)} classes")
            client_classes = [sorted(rng.choice(classes, self.classes_per_client, replace=False).tolist())
                              for _ in range(num_clients)]
        per_class = {c: rng.permutation(np.flatnonzero(labels == c)).tolist() for c in classes}
        take = self.shots * self.pool_multiplier
        parts: list[list[int]] = []
        for client, mine in enumerate(client_classes):
            chosen: list[int] = []
            for c in mine:
                available = per_class[c]
                if len(available) < take and self.mode == "random_classes":
                    whole = np.flatnonzero(labels == c)
                    if len(whole) >= take:  # spent by earlier clients: draw again from the whole class
                        chosen.extend(rng.permutation(whole)[:take].tolist())
                        continue
                if len(available) < take:
                    raise ConfigError(f"FewShotPartition: class {c} has {len(available)} samples left for client "
                                      f"{client}, fewer than shots x pool_multiplier = {take}")
                chosen.extend(available[:take])
                if self.mode != "iid" or len(available) >= take * 2:
                    per_class[c] = available[take:]  # draw without replacement while the class allows it
            parts.append(sorted(chosen))
        test = None
        if test_dataset is not None:
            test_labels = labels_of(test_dataset)
            test = [sorted(np.flatnonzero(np.isin(test_labels, mine)).tolist()) for mine in client_classes]
        return Partition(train=parts, test=test, pool=parts if self.pool_multiplier > 1 else None)


@attrs.frozen(eq=False, kw_only=True)
class QuantitySkewPartition:
    """IID labels, unequal sizes: client shares ~ Dir(beta) over clients, at least ``min_size`` each."""

    beta: float = setting(0.5, low=0.0, low_open=True, help="concentration; small = more unequal sizes")
    min_size: int = setting(10, low=1, help="minimum samples per client")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        n = len(dataset)
        _require_enough(num_clients, n, self.min_size, "min_size")
        rng = run.np_rng("partition")
        spare = n - num_clients * self.min_size
        props = rng.dirichlet(np.full(num_clients, self.beta))
        sizes = self.min_size + np.floor(props * spare).astype(int)
        sizes[np.argmax(props)] += n - sizes.sum()
        perm = rng.permutation(n)
        return Partition(train=[np.sort(p) for p in np.split(perm, np.cumsum(sizes)[:-1])])

"""``natural-id``: one client per distinct value of a column (a writer, speaker or user), as Flower Datasets'
``NaturalIdPartitioner`` (FEMNIST writers, Shakespeare characters, Sentiment140 users)."""
from __future__ import annotations

from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore.data.arrays import column_of
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import Partition


@attrs.frozen(eq=False, kw_only=True)
class NaturalIdPartition:
    """One client per distinct value of column ``partition_by``: client ``i`` holds every sample whose value is
    the ``i``-th in sorted order (Flower's ``NaturalIdPartitioner``, same order, same indices).

    Flower makes as many partitions as there are ids; fedcore's client count is the config's ``num_clients``,
    so the two must agree: any other ``num_clients`` is refused with the right number. No randomness: the
    split is the data's own. The column comes from the training set's ``columns`` (the ``hf`` dataset keeps
    every column of numbers or strings).
    """

    partition_by: str = setting(kind=str, help="the column whose distinct values are the clients "
                                               "(writer_id, user, character_id); num_clients must equal their count")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture

        return CheckPlan(presets=[cls(partition_by="writer")],
                         fixture=ContractFixture(data_factory=writer_data, num_clients=3))

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: Any) -> Partition:
        values = column_of(dataset, self.partition_by, who=f"natural-id: partition_by={self.partition_by!r}")
        ids, client_of = np.unique(values, return_inverse=True)
        if len(ids) != num_clients:
            raise ConfigError(f"natural-id: column {self.partition_by!r} has {len(ids)} distinct values, one client "
                              f"each, so num_clients must be {len(ids)} (got {num_clients})")
        order = np.argsort(client_of, kind="stable")  # dataset order within each client
        bounds = np.cumsum(np.bincount(client_of, minlength=len(ids)))[:-1]
        return Partition(train=np.split(order, bounds))


def writer_data() -> tuple[Any, Any]:
    """The contract fixture's blobs with a ``writer`` column of three writers (for the checks above)."""
    from fedcore.data.arrays import ArrayDataset
    from fedcore.testing.fixtures import tiny_data

    train, test = tiny_data()
    writers = np.asarray([f"w{i % 3}" for i in range(len(train))])
    return ArrayDataset(train.x, train.y, train.classes, columns={"writer": writers}), test

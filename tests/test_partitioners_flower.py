"""The Flower Datasets partitioners (natural-id, linear, square, exponential, pathological, inner-dirichlet)
against partitions worked out by hand from Flower's arithmetic (docs/data.md)."""
from collections import Counter
import warnings

import numpy as np
import pytest
import torch

from fedcore.builtin import (
    ExponentialPartition,
    InnerDirichletPartition,
    LinearPartition,
    NaturalIdPartition,
    PathologicalPartition,
    SquarePartition,
)
from fedcore.data import ArrayDataset, labels_of, load_digits
from fedcore.errors import ConfigError
from fedcore.testing import ContractFixture, build_engine

DIGITS = load_digits(seed=0)


def dataset(labels, **columns):
    labels = np.asarray(labels)
    return ArrayDataset(torch.zeros(len(labels), 1, 2, 2), torch.as_tensor(labels),
                        columns={k: np.asarray(v) for k, v in columns.items()})


def partition_of(component, data, num_clients, seed=0):
    fx = ContractFixture(data_factory=lambda: (data, None), num_clients=num_clients, seed=seed)
    return build_engine([component], fx).run_ctx.partition


def parts(partition):
    return [list(p) for p in partition.train]


# ---- natural-id -------------------------------------------------------------------------------------------------

def test_natural_id_one_client_per_sorted_id_in_dataset_order():
    data = dataset([0, 1, 0, 1, 0, 1, 2], writer=["b", "a", "c", "a", "b", "b", "a"])
    # sorted ids a, b, c -> clients 0, 1, 2; indices in dataset order
    assert parts(partition_of(NaturalIdPartition(partition_by="writer"), data, 3)) == [[1, 3, 6], [0, 4, 5], [2]]
    ints = dataset([0] * 5, user=[30, 7, 30, 12, 7])  # numbers sort as numbers: 7, 12, 30
    assert parts(partition_of(NaturalIdPartition(partition_by="user"), ints, 3)) == [[1, 4], [3], [0, 2]]


def test_natural_id_refuses_another_client_count_and_names_the_right_one():
    data = dataset([0, 1, 0, 1], writer=["x", "y", "z", "x"])
    with pytest.raises(ConfigError, match=r"column 'writer' has 3 distinct values.*num_clients must be 3 \(got 4\)"):
        partition_of(NaturalIdPartition(partition_by="writer"), data, 4)
    with pytest.raises(ConfigError, match=r"no column 'user'; its columns: writer"):
        partition_of(NaturalIdPartition(partition_by="user"), data, 3)


# ---- size-based ---------------------------------------------------------------------------------------------------

# Flower: units f(1..M), size_i = int(f(i) / sum f * n), the remainder to the last client.
# linear, n=103, M=4: 103 * (1, 2, 3, 4) / 10 = 10.3, 20.6, 30.9, 41.2 -> 10, 20, 30, 41 (+2 left) -> 43
# square, n=100, M=3: 100 * (1, 4, 9) / 14 = 7.14, 28.57, 64.29 -> 7, 28, 64 (+1) -> 65
# exponential, n=100, M=3: 100 * (e, e^2, e^3) / 30.19 = 9.00, 24.47, 66.52 -> 9, 24, 66 (+1) -> 67
@pytest.mark.parametrize("component, n, num_clients, sizes", [
    (LinearPartition, 103, 4, [10, 20, 30, 43]),
    (SquarePartition, 100, 3, [7, 28, 65]),
    (ExponentialPartition, 100, 3, [9, 24, 67]),
])
def test_size_partitioners_match_flowers_arithmetic(component, n, num_clients, sizes):
    data = dataset(np.arange(n) % 5)
    ordered = parts(partition_of(component(shuffle=False), data, num_clients))
    bounds = np.cumsum([0] + sizes)
    assert ordered == [list(range(bounds[i], bounds[i + 1])) for i in range(num_clients)]  # Flower's ranges
    shuffled = partition_of(component(), data, num_clients)
    assert shuffled.sizes() == sizes
    flat = sorted(i for p in shuffled.train for i in p)
    assert flat == list(range(n)) and parts(shuffled) != ordered
    assert parts(partition_of(component(), data, num_clients)) == parts(shuffled)  # seeded
    assert parts(partition_of(component(), data, num_clients, seed=1)) != parts(shuffled)


def test_exponential_refuses_clients_that_round_to_nothing():
    with pytest.raises(ConfigError, match=r"exponential: with num_clients=10 over 1347 samples client 0 gets 0"):
        partition_of(ExponentialPartition(), DIGITS[0], 10)


# ---- pathological -----------------------------------------------------------------------------------------------

def test_pathological_deterministic_in_dataset_order_by_hand():
    labels = [0, 1, 2] * 4  # class 0: 0 3 6 9, class 1: 1 4 7 10, class 2: 2 5 8 11
    # deterministic, k=2: client 0 {0, 1}, client 1 {1, 2}, client 2 {2, 0}; each class halved among its
    # holders in client order: class 0 -> [0, 3] c0, [6, 9] c2; class 1 -> [1, 4] c0, [7, 10] c1; class 2 ...
    got = parts(partition_of(PathologicalPartition(class_assignment_mode="deterministic", shuffle=False),
                             dataset(labels), 3))
    assert got == [[0, 1, 3, 4], [2, 5, 7, 10], [6, 8, 9, 11]]


@pytest.mark.parametrize("mode", ["random", "first-deterministic", "deterministic"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pathological_every_client_holds_exactly_k_classes(mode, k):
    labels = labels_of(DIGITS[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random modes may leave a class unused (checked below)
        part = partition_of(PathologicalPartition(num_classes_per_partition=k, class_assignment_mode=mode),
                            DIGITS[0], 10)
    flat = [i for p in part.train for i in p]
    assert len(flat) == len(set(flat))
    held = [sorted(set(labels[list(p)].tolist())) for p in part.train]
    assert all(len(h) == k for h in held)
    if mode == "first-deterministic":
        assert all(i in h for i, h in enumerate(held))  # client i holds class i (10 clients, 10 classes)
    if mode != "random":
        assert len(flat) == len(labels)  # every class used when num_clients >= classes


def test_pathological_warns_about_unused_classes_and_refuses_impossible_settings():
    labels = [0, 1, 2, 3] * 3
    with pytest.warns(UserWarning, match=r"classes \[2, 3\] are held by no client"):
        partition_of(PathologicalPartition(num_classes_per_partition=2, class_assignment_mode="deterministic"),
                     dataset(labels), 1)
    with pytest.raises(ConfigError, match=r"num_classes_per_partition=5 exceeds the 4 classes"):
        partition_of(PathologicalPartition(num_classes_per_partition=5), dataset(labels), 2)
    with pytest.raises(ConfigError, match=r"class 0 is held by 4 clients but has 3 samples"):
        partition_of(PathologicalPartition(num_classes_per_partition=4), dataset(labels), 4)


def test_pathological_partition_by_a_column():
    data = dataset([0] * 6, domain=["x", "y", "x", "z", "y", "z"])
    got = parts(partition_of(PathologicalPartition(num_classes_per_partition=1, class_assignment_mode="deterministic",
                                                   shuffle=False, partition_by="domain"), data, 3))
    assert got == [[0, 2], [1, 4], [3, 5]]


# ---- inner-dirichlet --------------------------------------------------------------------------------------------

def test_inner_dirichlet_takes_each_class_from_its_end_in_dataset_order():
    # one client, one class: Flower fills the client's slots from the last one down with the class's last samples
    with pytest.warns(UserWarning, match="sum to 5 of 8"):
        got = parts(partition_of(InnerDirichletPartition(partition_sizes=[5], alpha=1.0, shuffle=False),
                                 dataset([0] * 8), 1))
    assert got == [[3, 4, 5, 6, 7]]


@pytest.mark.parametrize("sizes", [[100, 300, 500, 447], [1000, 100, 200, 47]])
def test_inner_dirichlet_gives_the_exact_sizes(sizes):
    part = partition_of(InnerDirichletPartition(partition_sizes=sizes, alpha=0.5), DIGITS[0], 4)
    assert part.sizes() == sizes
    assert sorted(i for p in part.train for i in p) == list(range(len(DIGITS[0])))
    again = partition_of(InnerDirichletPartition(partition_sizes=sizes, alpha=0.5), DIGITS[0], 4)
    assert parts(again) == parts(part)


def test_inner_dirichlet_skew_follows_alpha():
    labels = labels_of(DIGITS[0])

    def top_share(alpha):
        part = partition_of(InnerDirichletPartition(alpha=alpha), DIGITS[0], 10)
        assert max(part.sizes()) - min(part.sizes()) <= 1  # default sizes: near-equal
        return np.mean([Counter(labels[list(p)].tolist()).most_common(1)[0][1] / len(p) for p in part.train])

    assert top_share(0.05) > 0.4 and top_share(100.0) < 0.2


def test_inner_dirichlet_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"partition_sizes has 2 entries; num_clients is 3"):
        partition_of(InnerDirichletPartition(partition_sizes=[10, 10]), DIGITS[0], 3)
    with pytest.raises(ConfigError, match=r"sum to 2000, more than the 1347"):
        partition_of(InnerDirichletPartition(partition_sizes=[1000, 1000]), DIGITS[0], 2)
    with pytest.raises(ConfigError, match=r"alpha has 3 values; the training set has 10 classes"):
        partition_of(InnerDirichletPartition(alpha=[1.0, 1.0, 1.0]), DIGITS[0], 2)
    with pytest.raises(ConfigError, match=r"alpha=-1.*> 0"):
        InnerDirichletPartition(alpha=-1)
    with pytest.warns(UserWarning, match=r"sum to 20 of 1347 samples"):
        partition_of(InnerDirichletPartition(partition_sizes=[10, 10]), DIGITS[0], 2)

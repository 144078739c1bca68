"""Properties of every built-in partitioner, on the embedded digits set."""
from collections import Counter

import numpy as np
import pytest

from fedcore.builtin import DirichletPartition, FewShotPartition, IIDPartition, QuantitySkewPartition, ShardPartition
from fedcore.data import labels_of, load_digits
from fedcore.errors import ConfigError
from fedcore.testing import ContractFixture, build_engine

DIGITS = load_digits(seed=0)


def partition_of(component, num_clients=10, seed=0, data=DIGITS):
    fx = ContractFixture(data_factory=lambda: data, num_clients=num_clients, seed=seed)
    return build_engine([component], fx).run_ctx.partition


def assert_disjoint_cover(part, n):
    flat = [i for p in part.train for i in p]
    assert len(flat) == len(set(flat)) == n, "every sample is held by exactly one client"


def test_iid_near_equal_and_deterministic():
    part = partition_of(IIDPartition())
    n = len(DIGITS[0])
    assert_disjoint_cover(part, n)
    assert max(part.sizes()) - min(part.sizes()) <= 1
    assert partition_of(IIDPartition()).train == part.train
    assert partition_of(IIDPartition(), seed=1).train != part.train


@pytest.mark.parametrize("alpha", [0.1, 0.5, 5.0])
def test_dirichlet_min_size_cover_and_skew(alpha):
    part = partition_of(DirichletPartition(alpha=alpha, min_size=20))
    labels = labels_of(DIGITS[0])
    assert_disjoint_cover(part, len(labels))
    assert min(part.sizes()) >= 20
    # label skew grows as alpha shrinks: mean share of each client's most common class
    top = np.mean([Counter(labels[list(p)]).most_common(1)[0][1] / len(p) for p in part.train])
    if alpha == 0.1:
        assert top > 0.4
    if alpha == 5.0:
        assert top < 0.3


def test_dirichlet_impossible_min_size_names_the_settings():
    with pytest.raises(ConfigError, match=r"needs 2000 samples; the training set has 1347"):
        partition_of(DirichletPartition(min_size=200))
    with pytest.raises(ConfigError, match=r"no draw in 3 gave every one of 10 clients >= min_size=100.*raise alpha"):
        partition_of(DirichletPartition(alpha=0.01, min_size=100, max_tries=3))


@pytest.mark.parametrize("c", [1, 2, 3])
def test_shards_classes_per_client(c):
    part = partition_of(ShardPartition(classes_per_client=c), num_clients=10)
    labels = labels_of(DIGITS[0])
    assert_disjoint_cover(part, len(labels))
    for p in part.train:
        assert len(set(labels[list(p)].tolist())) == c


def test_shards_too_many_classes():
    with pytest.raises(ConfigError, match=r"classes_per_client=11 exceeds the 10 classes"):
        partition_of(ShardPartition(classes_per_client=11))


def test_fewshot_iid_shots_and_personal_test_split():
    part = partition_of(FewShotPartition(shots=3), num_clients=5)
    labels, test_labels = labels_of(DIGITS[0]), labels_of(DIGITS[1])
    for p in part.train:
        assert Counter(labels[list(p)].tolist()) == {k: 3 for k in range(10)}
    flat = [i for p in part.train for i in p]
    assert len(flat) == len(set(flat)), "draws are without replacement while classes allow it"
    assert part.test is not None and all(len(t) == len(test_labels) for t in part.test)  # every class -> whole test set
    assert part.pool is None


def test_fewshot_disjoint_classes_partition_and_test_follows_classes():
    part = partition_of(FewShotPartition(shots=2, mode="disjoint"), num_clients=4)
    labels, test_labels = labels_of(DIGITS[0]), labels_of(DIGITS[1])
    class_sets = [set(labels[list(p)].tolist()) for p in part.train]
    assert sorted(c for s in class_sets for c in s) == list(range(10)), "the classes are dealt out without overlap"
    for p, t, mine in zip(part.train, part.test, class_sets):
        assert Counter(labels[list(p)].tolist()) == {k: 2 for k in mine}
        assert set(test_labels[list(t)].tolist()) == mine
        assert len(t) == int(np.isin(test_labels, list(mine)).sum())


def test_fewshot_random_classes_and_pool():
    part = partition_of(FewShotPartition(shots=2, mode="random_classes", classes_per_client=3, pool_multiplier=4),
                        num_clients=6)
    labels = labels_of(DIGITS[0])
    for p in part.train:
        counts = Counter(labels[list(p)].tolist())
        assert len(counts) == 3 and set(counts.values()) == {8}  # shots x pool_multiplier per class
    assert part.pool == part.train


def test_fewshot_random_classes_reuses_a_spent_class():
    """More holders of a class than its samples allow (pFedPrompt's 100 clients x 5 of Caltech101's classes): every
    client still gets its shots of each of its classes, drawn from the whole class once the unused ones run out, and
    a partition that does not run out is the one drawn without replacement."""
    labels = labels_of(DIGITS[0])
    part = partition_of(FewShotPartition(shots=20, mode="random_classes", classes_per_client=5, pool_multiplier=2),
                        num_clients=30)
    for p in part.train:
        counts = Counter(labels[list(p)].tolist())
        assert len(counts) == 5 and set(counts.values()) == {40} and len(set(p)) == len(p)
    flat = [i for p in part.train for i in p]
    assert len(flat) > len(set(flat))  # 30 x 5 x 40 = 6,000 draws from 1,437 samples: some are shared
    few = partition_of(FewShotPartition(shots=2, mode="random_classes", classes_per_client=3), num_clients=6)
    flat = [i for p in few.train for i in p]
    assert len(flat) == len(set(flat))  # enough samples: no client shares one
    with pytest.raises(ConfigError, match=r"fewer than shots x pool_multiplier = 400"):
        partition_of(FewShotPartition(shots=200, mode="random_classes", classes_per_client=2, pool_multiplier=2),
                     num_clients=2)  # a class smaller than one client's draw is still refused


def test_fewshot_errors():
    with pytest.raises(ConfigError, match=r"mode='disjoint'\) needs num_clients <= 10 classes, got num_clients=11"):
        partition_of(FewShotPartition(mode="disjoint"), num_clients=11)
    with pytest.raises(ConfigError, match=r"fewer than shots x pool_multiplier = 500"):
        partition_of(FewShotPartition(shots=500), num_clients=2)
    with pytest.raises(ConfigError, match=r"FewShotPartition.mode='pathological' is not allowed; choose one of"):
        FewShotPartition(mode="pathological")


def test_quantity_skew_sizes():
    part = partition_of(QuantitySkewPartition(beta=0.5, min_size=15))
    n = len(DIGITS[0])
    assert_disjoint_cover(part, n)
    sizes = part.sizes()
    assert sum(sizes) == n and min(sizes) >= 15
    assert max(sizes) > 3 * min(sizes), f"sizes should be unequal at beta=0.5: {sizes}"
    flat = partition_of(QuantitySkewPartition(beta=100.0, min_size=15)).sizes()
    assert max(flat) < 2 * min(flat), f"a large beta gives near-equal sizes: {flat}"
    # labels stay IID: the biggest client sees every class
    big = part.train[int(np.argmax(sizes))]
    assert len(set(labels_of(DIGITS[0])[list(big)].tolist())) == 10

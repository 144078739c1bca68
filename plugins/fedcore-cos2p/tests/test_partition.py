"""Spec 004 §6 test 11: the quota Dirichlet partition honours the quotas and α and is reproducible."""
import numpy as np
import pytest

from fedcore.contexts import RunContext
from fedcore.data import labels_of, load_digits
from fedcore.errors import ConfigError
from fedcore.types import ServerState
from fedcore_cos2p import QuotaDirichletPartition

QUOTAS = (8277, 24960, 24960, 24960, 36992, 36992, 36992, 36992)  # Tab. 7, E1: 1 NX8, 3 AGX32, 4 AGX64


def split(alpha, seed=0, quotas=QUOTAS, fraction=1.0):
    train, _ = load_digits()
    run = RunContext(seed=seed, num_clients=len(quotas), rounds=1, train=train, server=ServerState(model=None))
    part = QuotaDirichletPartition(quotas=quotas, alpha=alpha, fraction=fraction).fedcore_partition(
        dataset=train, num_clients=len(quotas), test_dataset=None, run=run)
    return part, np.asarray(labels_of(train))


def test_sizes_follow_the_quotas_and_no_sample_is_given_twice():
    part, labels = split(1.5)
    sizes = np.array(part.sizes())
    assert sizes.sum() == len(labels)
    assert np.abs(sizes / sizes.sum() - np.array(QUOTAS) / sum(QUOTAS)).max() < 1.5 / len(labels)
    flat = [i for p in part.train for i in p]
    assert len(flat) == len(set(flat))


def skew(part, labels):
    """Mean share of a client's most frequent class."""
    return np.mean([np.bincount(labels[list(p)], minlength=10).max() / len(p) for p in part.train])


def test_small_alpha_skews_labels_more_and_the_split_is_reproducible():
    skews = {a: np.mean([skew(*split(a, seed=s, fraction=0.5)) for s in range(3)]) for a in (0.1, 1.5, 100.0)}
    assert skews[0.1] > skews[1.5] > skews[100.0]
    assert split(1.5, seed=3)[0] == split(1.5, seed=3)[0]
    assert split(1.5, seed=3)[0] != split(1.5, seed=4)[0]


def test_a_quota_per_client_is_required():
    with pytest.raises(ConfigError, match="quotas has 2 entries for 8 clients"):
        QuotaDirichletPartition(quotas=(1, 2)).fedcore_partition(dataset=load_digits()[0], num_clients=8,
                                                                 test_dataset=None, run=None)
    with pytest.raises(ConfigError, match="positive numbers"):
        QuotaDirichletPartition(quotas=(1, 0))


@pytest.mark.parametrize("seed", range(4))
def test_filling_from_the_largest_pool_takes_what_the_scan_took(seed):
    """The heap fill equals the scan it replaced (the largest pool's front, the first pool on a tie, one sample at a
    time), with ties, pools running dry and more wanted than left."""
    from fedcore_cos2p.partition import fill_from_largest

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 4, size=12)
    pools = {c: list(range(100 * c, 100 * c + int(n))) for c, n in enumerate(sizes)}
    scanned = {c: list(v) for c, v in pools.items()}
    for short in (3, 7, int(sizes.sum())):
        expected = []
        left = short
        while left > 0:
            c = max(scanned, key=lambda k: len(scanned[k]))
            if not scanned[c]:
                break
            expected.append(scanned[c].pop(0))
            left -= 1
        assert fill_from_largest(pools, short) == expected
        assert pools == scanned

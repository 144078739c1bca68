"""The primitives: X25519 against RFC 7748's vectors, Shamir's threshold, authenticated encryption, the graph."""
import random

import numpy as np
import pytest

from fedcore_secagg import crypto, shamir
from fedcore_secagg.graph import default_degree, harary


def test_x25519_rfc7748_vectors():
    k = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    u = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    assert crypto.x25519(k, u).hex() == "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
    alice = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    bob = bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    assert crypto.public_key(alice).hex() == "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert crypto.agree(alice, crypto.public_key(bob)).hex() == shared
    assert crypto.agree(bob, crypto.public_key(alice)).hex() == shared


def test_shamir_needs_exactly_t_shares():
    rng = random.Random(0)
    secret = rng.randrange(shamir.PRIME)
    shares = shamir.split(secret, holders=[3, 7, 9, 12, 20], threshold=3, rng=rng)
    for chosen in ([3, 7, 9], [9, 12, 20], [3, 20, 12, 7]):
        assert shamir.reconstruct({h: shares[h] for h in chosen}) == secret
    assert shamir.reconstruct({h: shares[h] for h in [3, 7]}) != secret


def test_encryption_round_trip_and_tamper_detection():
    key = crypto.kdf(b"k" * 32, "secagg-enc")
    ct = crypto.encrypt(key, b"hello shares")
    assert len(ct) == len(b"hello shares") + crypto.TAG_BYTES and crypto.decrypt(key, ct) == b"hello shares"
    with pytest.raises(ValueError, match="authentication"):
        crypto.decrypt(key, bytes([ct[0] ^ 1]) + ct[1:])


@pytest.mark.parametrize("n,k", [(10, 4), (10, 5), (11, 5), (7, 6), (100, 14)])
def test_harary_graph_is_k_regular_or_nearly(n, k):
    graph = harary(list(range(100, 100 + n)), k, np.random.default_rng(0))
    degrees = [len(v) for v in graph.values()]
    assert min(degrees) == min(k, n - 1) and max(degrees) <= min(k, n - 1) + 1
    assert all(c in graph[v] for c, vs in graph.items() for v in vs)  # undirected
    assert default_degree(10) == 8 and default_degree(100) == 14

"""The cryptographic primitives SecAgg+ needs, in plain Python (no third-party crypto library on these machines).

* **Key agreement**: X25519 (RFC 7748), 32-byte keys; both sides of a pair derive the same secret.
* **Key derivation and PRG**: BLAKE2b of the agreed secret seeds numpy's PCG64, which draws the masks.
* **Authenticated encryption** of the Shamir shares sent through the server: a SHAKE-256 keystream and a
  16-byte keyed BLAKE2b tag (AES-GCM's sizes: ciphertext = plaintext + 16 bytes).

Fit for a faithful simulation (sizes, who can compute what); not hardened (not constant-time) for deployment.
"""
from __future__ import annotations

import hashlib

import numpy as np

P25519 = 2**255 - 19
KEY_BYTES = 32
TAG_BYTES = 16
_A24 = 121665
BASE_POINT = (9).to_bytes(32, "little")


def _scalar(k: bytes) -> int:
    b = bytearray(k)
    b[0] &= 248
    b[31] &= 127
    b[31] |= 64
    return int.from_bytes(b, "little")


def x25519(k: bytes, u: bytes) -> bytes:
    """RFC 7748 §5: the X25519 function (Montgomery ladder on Curve25519)."""
    if len(k) != 32 or len(u) != 32:
        raise ValueError("x25519 takes a 32-byte scalar and a 32-byte u-coordinate")
    n = _scalar(k)
    ub = bytearray(u)
    ub[31] &= 127
    x1 = int.from_bytes(ub, "little") % P25519
    x2, z2, x3, z3, swap = 1, 0, x1, 1, 0
    p = P25519
    for t in range(254, -1, -1):
        bit = (n >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = x2 + z2, x2 - z2
        aa, bb = a * a % p, b * b % p
        e = aa - bb
        c, d = x3 + z3, x3 - z3
        da, cb = d * a % p, c * b % p
        x3 = (da + cb) ** 2 % p
        z3 = x1 * (da - cb) ** 2 % p
        x2 = aa * bb % p
        z2 = e * (aa + _A24 * e) % p
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, p - 2, p) % p).to_bytes(32, "little")


def public_key(secret: bytes) -> bytes:
    return x25519(secret, BASE_POINT)


def agree(secret: bytes, other_public: bytes) -> bytes:
    """The shared secret of a key pair and another party's public key (symmetric in the two parties)."""
    return x25519(secret, other_public)


def kdf(secret: bytes, purpose: str) -> bytes:
    return hashlib.blake2b(secret, digest_size=32, person=purpose.encode()[:16].ljust(16, b"\0")).digest()


def prg(seed: bytes, size: int, modulus: int) -> np.ndarray:
    """``size`` integers uniform in ``[0, modulus)`` from a 32-byte seed (PCG64 seeded by all 256 bits)."""
    gen = np.random.Generator(np.random.PCG64(np.random.SeedSequence(int.from_bytes(seed, "little"))))
    return gen.integers(0, modulus, size=size, dtype=np.uint64)


def _keystream(key: bytes, n: int) -> bytes:
    return hashlib.shake_256(b"secagg-enc" + key).digest(n)


def encrypt(key: bytes, plaintext: bytes) -> bytes:
    """``ciphertext || tag``: ``len(plaintext) + 16`` bytes."""
    body = bytes(a ^ b for a, b in zip(plaintext, _keystream(key, len(plaintext))))
    return body + hashlib.blake2b(body, key=key, digest_size=TAG_BYTES).digest()


def decrypt(key: bytes, ciphertext: bytes) -> bytes:
    body, tag = ciphertext[:-TAG_BYTES], ciphertext[-TAG_BYTES:]
    if hashlib.blake2b(body, key=key, digest_size=TAG_BYTES).digest() != tag:
        raise ValueError("ciphertext failed authentication")
    return bytes(a ^ b for a, b in zip(body, _keystream(key, len(body))))


__all__ = ["BASE_POINT", "KEY_BYTES", "P25519", "TAG_BYTES", "agree", "decrypt", "encrypt", "kdf", "prg",
           "public_key", "x25519"]

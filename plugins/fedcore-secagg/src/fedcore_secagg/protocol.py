"""SecAgg+ (Bell, Bonawitz, Gascón, Lepoint, Raykova, CCS 2020), semi-honest variant, simulated message by message.

Four stages after the server fixed the cohort ``U0`` and a ``k``-regular communication graph over it:

1. **AdvertiseKeys**: each client sends two X25519 public keys (``c`` to encrypt, ``s`` to agree on masks); the
   server forwards to each client its neighbours' keys. Clients that answer form ``U1``.
2. **ShareKeys**: each client Shamir-shares (threshold ``t``) its mask key ``s_sk`` and its self-mask seed ``b``
   among its neighbours, encrypts each neighbour's pair of shares with their agreed ``c`` key, and sends the
   ciphertexts to the server, which routes them. Senders: ``U2``.
3. **MaskedInputCollection**: each client sends ``y = x + PRG(b) + Σ_v ±PRG(s_uv)`` mod R over its neighbours in
   ``U2`` (``+`` towards a larger id): pairwise masks cancel in the sum of survivors. Senders: ``U3``.
4. **Unmasking**: the server tells each client which neighbours sent inputs; each client answers, per neighbour,
   the share of ``b`` (it sent its input) or of ``s_sk`` (it dropped after sharing keys). Senders: ``U4``. The
   server rebuilds each ``b`` of ``U3`` and each ``s_sk`` of ``U2 \\ U3`` from ``t`` shares and removes the masks:
   the exact sum of the inputs of ``U3`` in Z_R, or an abort when some secret has fewer than ``t`` shares.

:class:`SecAggClient` holds what only that client knows; :func:`run_protocol` is the server and sees only the
messages (each one booked through ``book`` with its real payload); clients in ``dropped[stage]`` vanish at that
stage. The masked input itself is the client's upload, which the engine books; :data:`MESSAGE_BYTES` states
every message's size.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import hashlib
import random

import attrs
import numpy as np

from fedcore_secagg import crypto, shamir
from fedcore_secagg.graph import harary

STAGES = ("advertise", "share", "input", "unmask")
ID_BYTES = 4
CIPHERTEXT_BYTES = 2 * ID_BYTES + 2 * shamir.SHARE_BYTES + crypto.TAG_BYTES  # (u, v, share of s_sk, share of b)
MESSAGE_BYTES = {
    ("advertise", "up"): "2·32 (c_pk, s_pk)",
    ("advertise", "down"): "per neighbour in U1: 4 + 2·32 (id, c_pk, s_pk)",
    ("share", "up"): f"per neighbour in U1: 4 + {CIPHERTEXT_BYTES} (recipient id, ciphertext of 2 ids, 2 shares, tag)",
    ("share", "down"): f"per neighbour in U2: 4 + {CIPHERTEXT_BYTES} (sender id, ciphertext)",
    ("input", "up"): "d · bits/8 (the masked input: the client's upload, booked by the engine)",
    ("unmask", "down"): "per neighbour in U3: 4 (its id)",
    ("unmask", "up"): "per neighbour in U2: 4 + 32 (its id, one share)",
}


@attrs.frozen(kw_only=True)
class Message:
    """One protocol message between a client and the server."""

    stage: str
    client: int
    direction: str
    payload: bytes


def _id(c: int) -> bytes:
    return int(c).to_bytes(ID_BYTES, "little")


def secrets_of(nonce: int) -> tuple[bytes, bytes, int]:
    """A client's secrets for one job: the ``c`` and ``s`` X25519 secret keys and the self-mask seed ``b``
    (a field element, so that it can be Shamir-shared), derived from its private nonce."""
    def draw(purpose: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(nonce.to_bytes(16, "little", signed=True) + purpose,
                                              digest_size=32).digest(), "little") % shamir.PRIME

    return draw(b"c").to_bytes(32, "little"), draw(b"s").to_bytes(32, "little"), draw(b"b")


def self_mask(nonce: int, size: int, modulus: int) -> np.ndarray:
    """``PRG(b)`` of the client with this nonce: what it adds to its input before anything leaves it."""
    return crypto.prg(secrets_of(nonce)[2].to_bytes(32, "little"), size, modulus)


class SecAggClient:
    """One client's side of the protocol: its secrets, the keys and shares it received, its self-masked input."""

    def __init__(self, client_id: int, nonce: int, self_masked: np.ndarray, modulus: int) -> None:
        self.id = client_id
        self.c_sk, self.s_sk, self.b = secrets_of(nonce)
        self.c_pk, self.s_pk = crypto.public_key(self.c_sk), crypto.public_key(self.s_sk)
        self.nonce = nonce
        self.self_masked = self_masked  # x + PRG(b) mod R: the plain input never leaves the client
        self.modulus = modulus
        self.keys: dict[int, tuple[bytes, bytes]] = {}
        self.received: dict[int, bytes] = {}
        self.agreed: Callable[[bytes, bytes], bytes] = crypto.agree

    def advertise(self) -> bytes:
        return self.c_pk + self.s_pk

    def receive_keys(self, payload: bytes) -> None:
        step = ID_BYTES + 2 * crypto.KEY_BYTES
        for at in range(0, len(payload), step):
            v = int.from_bytes(payload[at:at + ID_BYTES], "little")
            self.keys[v] = (payload[at + ID_BYTES:at + ID_BYTES + 32], payload[at + ID_BYTES + 32:at + step])

    def share_keys(self, threshold: int) -> bytes:
        """Shares of ``s_sk`` and ``b`` for every neighbour, each pair encrypted to that neighbour."""
        rng = random.Random(hashlib.blake2b(self.c_sk + b"shamir", digest_size=16).digest())
        holders = sorted(self.keys)
        if len(holders) < threshold:
            raise ProtocolAbort(f"client {self.id} has {len(holders)} neighbours left, fewer than t={threshold}")
        s_shares = shamir.split(int.from_bytes(self.s_sk, "little"), holders, threshold, rng)
        b_shares = shamir.split(self.b, holders, threshold, rng)
        out = b""
        for v in holders:
            plain = _id(self.id) + _id(v) + s_shares[v].to_bytes(32, "little") + b_shares[v].to_bytes(32, "little")
            key = crypto.kdf(self.agreed(self.c_sk, self.keys[v][0]), "secagg-enc")
            out += _id(v) + crypto.encrypt(key, plain)
        return out

    def receive_shares(self, payload: bytes) -> None:
        step = ID_BYTES + CIPHERTEXT_BYTES
        for at in range(0, len(payload), step):
            self.received[int.from_bytes(payload[at:at + ID_BYTES], "little")] = payload[at + ID_BYTES:at + step]

    def masked_input(self) -> np.ndarray:
        """``x + PRG(b) + Σ ±PRG(s_uv)`` over the neighbours that shared keys with it (``U2``)."""
        y = self.self_masked.copy()
        for v in sorted(self.received):
            mask = crypto.prg(crypto.kdf(self.agreed(self.s_sk, self.keys[v][1]), "secagg-mask"), y.size,
                              self.modulus)
            y = (y + mask) % self.modulus if self.id < v else (y + self.modulus - mask) % self.modulus
        return y

    def unmask(self, payload: bytes) -> bytes:
        """Per neighbour of ``U2``: its ``b`` share if it sent an input, its ``s_sk`` share if it did not."""
        survivors = {int.from_bytes(payload[at:at + ID_BYTES], "little") for at in range(0, len(payload), ID_BYTES)}
        out = b""
        for v in sorted(self.received):
            key = crypto.kdf(self.agreed(self.c_sk, self.keys[v][0]), "secagg-enc")
            plain = crypto.decrypt(key, self.received[v])
            sender, recipient = int.from_bytes(plain[:ID_BYTES], "little"), int.from_bytes(plain[ID_BYTES:8], "little")
            if (sender, recipient) != (v, self.id):
                raise ProtocolAbort(f"client {self.id} received a share addressed to someone else")
            s_share, b_share = plain[8:40], plain[40:72]
            out += _id(v) + (b_share if v in survivors else s_share)
        return out


class ProtocolAbort(Exception):
    """The protocol cannot finish: a secret has fewer than ``t`` shares, or a client too few neighbours."""


@attrs.frozen(kw_only=True)
class Outcome:
    """What the server learns: the sum of the inputs of ``survivors`` (``None`` after an abort) and who answered."""

    total: np.ndarray | None
    stages: Mapping[str, frozenset[int]]
    neighbours: Mapping[int, tuple[int, ...]]
    aborted: str | None = None

    @property
    def survivors(self) -> frozenset[int]:
        return self.stages.get("input", frozenset()) if self.total is not None else frozenset()


def run_protocol(clients: Mapping[int, SecAggClient], *, degree: int, threshold: int, modulus: int,
                 graph_rng: np.random.Generator, dropped: Mapping[str, set[int]] | None = None,
                 book: Callable[[Message], None] = lambda m: None,
                 agree: Callable[[bytes, bytes], bytes] = crypto.agree) -> Outcome:
    """The server's side, stage by stage (see the module docstring); ``book`` receives every message."""
    dropped = {stage: set(v) for stage, v in (dropped or {}).items()}
    for c in clients.values():
        c.agreed = agree
    u0 = frozenset(clients)
    graph = harary(sorted(u0), degree, graph_rng)
    stages: dict[str, frozenset[int]] = {}

    def outcome(total: np.ndarray | None, aborted: str | None = None) -> Outcome:
        return Outcome(total=total, stages=dict(stages), neighbours=graph, aborted=aborted)

    try:
        # 1. AdvertiseKeys
        u1 = frozenset(u0 - dropped.get("advertise", set()))
        stages["advertise"] = u1
        keys: dict[int, bytes] = {}
        for u in sorted(u1):
            keys[u] = clients[u].advertise()
            book(Message(stage="advertise", client=u, direction="up", payload=keys[u]))
        for u in sorted(u1):
            payload = b"".join(_id(v) + keys[v] for v in graph[u] if v in u1)
            book(Message(stage="advertise", client=u, direction="down", payload=payload))
            clients[u].receive_keys(payload)
        # 2. ShareKeys
        u2 = frozenset(u1 - dropped.get("share", set()))
        stages["share"] = u2
        routed: dict[int, list[bytes]] = {v: [] for v in u2}
        for u in sorted(u2):
            payload = clients[u].share_keys(threshold)
            book(Message(stage="share", client=u, direction="up", payload=payload))
            step = ID_BYTES + CIPHERTEXT_BYTES
            for at in range(0, len(payload), step):
                v = int.from_bytes(payload[at:at + ID_BYTES], "little")
                if v in routed:  # a neighbour that dropped meanwhile gets nothing
                    routed[v].append(_id(u) + payload[at + ID_BYTES:at + step])
        for v in sorted(u2):
            payload = b"".join(routed[v])
            book(Message(stage="share", client=v, direction="down", payload=payload))
            clients[v].receive_shares(payload)
        # 3. MaskedInputCollection (the payload is the client's upload, booked by the engine)
        u3 = frozenset(u2 - dropped.get("input", set()))
        stages["input"] = u3
        if not u3:
            raise ProtocolAbort("no client sent its masked input")
        inputs = {u: clients[u].masked_input() for u in sorted(u3)}
        # 4. Unmasking
        answers: dict[int, bytes] = {}
        for u in sorted(u3):
            payload = b"".join(_id(v) for v in graph[u] if v in u3)
            book(Message(stage="unmask", client=u, direction="down", payload=payload))
            if u not in dropped.get("unmask", set()):
                answers[u] = clients[u].unmask(payload)
        u4 = frozenset(answers)
        stages["unmask"] = u4
        for u in sorted(u4):
            book(Message(stage="unmask", client=u, direction="up", payload=answers[u]))
        shares: dict[int, dict[int, int]] = {}
        for holder, payload in answers.items():
            for at in range(0, len(payload), ID_BYTES + 32):
                v = int.from_bytes(payload[at:at + ID_BYTES], "little")
                shares.setdefault(v, {})[holder] = int.from_bytes(payload[at + ID_BYTES:at + ID_BYTES + 32], "little")
        size = next(iter(inputs.values())).size
        total = np.zeros(size, dtype=np.uint64)
        for y in inputs.values():
            total = (total + y) % modulus
        for v in sorted(u2):
            if v not in u3 and not any(w in u3 and v in clients[w].received for w in graph[v]):
                continue  # it dropped and no survivor masked with it: nothing to remove
            got = shares.get(v, {})
            if len(got) < threshold:
                raise ProtocolAbort(f"{len(got)} shares of client {v}'s {'b' if v in u3 else 's_sk'} reached the "
                                    f"server; t={threshold} are needed")
            secret = shamir.reconstruct(dict(sorted(got.items())[:threshold]))
            if v in u3:  # remove its self-mask
                total = (total + modulus - crypto.prg(secret.to_bytes(32, "little"), size, modulus)) % modulus
                continue
            s_sk = secret.to_bytes(32, "little")  # it dropped after sharing keys: remove its survivors' masks
            for w in graph[v]:
                if w not in u3 or v not in clients[w].received:
                    continue
                mask = crypto.prg(crypto.kdf(agree(s_sk, keys[w][32:]), "secagg-mask"), size, modulus)
                total = (total + modulus - mask) % modulus if w < v else (total + mask) % modulus
        return outcome(total)
    except ProtocolAbort as abort:
        return outcome(None, str(abort))


def cached_agreement() -> Callable[[bytes, bytes], bytes]:
    """X25519 agreement remembered per unordered pair of public keys: both sides of a pair derive the same secret
    (tested), so a simulation computes it once. The cache lives for one aggregation."""
    memo: dict[tuple[bytes, bytes], bytes] = {}
    publics: dict[bytes, bytes] = {}

    def agree(secret: bytes, other_public: bytes) -> bytes:
        mine = publics.get(secret)
        if mine is None:
            mine = publics[secret] = crypto.public_key(secret)
        pair = (min(mine, other_public), max(mine, other_public))
        if pair not in memo:
            memo[pair] = crypto.agree(secret, other_public)
        return memo[pair]

    return agree


__all__ = ["CIPHERTEXT_BYTES", "ID_BYTES", "MESSAGE_BYTES", "Message", "Outcome", "ProtocolAbort", "STAGES",
           "SecAggClient", "cached_agreement", "run_protocol", "secrets_of", "self_mask"]

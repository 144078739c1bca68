"""SecAgg+ recovers the exact sum under dropout at every stage, and its messages have the analytic sizes."""
import numpy as np
import pytest

from fedcore_secagg.protocol import CIPHERTEXT_BYTES, STAGES, SecAggClient, run_protocol, self_mask

R = 2**32
D = 257


def cohort(n, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {c: rng.integers(0, 2**20, D, dtype=np.uint64) for c in range(n)}
    clients = {c: SecAggClient(c, 7000 + c, (inputs[c] + self_mask(7000 + c, D, R)) % R, R) for c in range(n)}
    return inputs, clients


def run(n, dropped, degree=6, threshold=3):
    inputs, clients = cohort(n)
    messages = []
    out = run_protocol(clients, degree=degree, threshold=threshold, modulus=R, graph_rng=np.random.default_rng(1),
                       dropped=dropped, book=messages.append)
    return inputs, out, messages


@pytest.mark.parametrize("stage", STAGES)
def test_exact_sum_when_clients_drop_at_each_stage(stage):
    inputs, out, _ = run(12, {stage: {2, 5, 9}})
    assert out.aborted is None
    expected_survivors = set(range(12)) - ({2, 5, 9} if stage != "unmask" else set())
    assert set(out.survivors) == expected_survivors  # after the input, a dropped client's input still counts
    assert np.array_equal(out.total, sum(inputs[c] for c in expected_survivors) % R)


def test_exact_sum_when_clients_drop_at_every_stage_at_once():
    inputs, out, _ = run(16, {"advertise": {0}, "share": {1, 2}, "input": {3, 4}, "unmask": {5, 6}}, degree=10)
    assert set(out.survivors) == set(range(16)) - {0, 1, 2, 3, 4}
    assert np.array_equal(out.total, sum(inputs[c] for c in out.survivors) % R)


def test_the_server_never_holds_an_unmasked_input():
    inputs, clients = cohort(6)
    masked = {c: clients[c].self_masked for c in clients}
    assert all(not np.array_equal(masked[c], inputs[c]) for c in clients)  # what the upload carries


def test_too_few_shares_abort_instead_of_a_wrong_sum():
    # threshold 4 of 4 neighbours: one neighbour missing at unmasking leaves some secret with 3 shares
    _, out, _ = run(10, {"unmask": {0}}, degree=4, threshold=4)
    assert out.total is None and "shares of client" in out.aborted and "t=4" in out.aborted


def test_message_sizes_equal_the_analytic_sizes():
    _, out, messages = run(14, {"advertise": {0}, "share": {1}, "input": {2, 3}, "unmask": {4}})
    graph, stages = out.neighbours, out.stages
    u1, u2, u3, u4 = (stages[s] for s in STAGES)
    booked = {}
    for m in messages:
        booked[(m.stage, m.direction, m.client)] = booked.get((m.stage, m.direction, m.client), 0) + len(m.payload)

    def nb(u, group):
        return len([v for v in graph[u] if v in group])

    analytic = {}
    for u in u1:
        analytic[("advertise", "up", u)] = 2 * 32
        analytic[("advertise", "down", u)] = nb(u, u1) * (4 + 2 * 32)
    for u in u2:
        analytic[("share", "up", u)] = nb(u, u1) * (4 + CIPHERTEXT_BYTES)
        analytic[("share", "down", u)] = nb(u, u2) * (4 + CIPHERTEXT_BYTES)
    for u in u3:
        analytic[("unmask", "down", u)] = nb(u, u3) * 4
    for u in u4:
        analytic[("unmask", "up", u)] = nb(u, u2) * (4 + 32)
    assert CIPHERTEXT_BYTES == 4 + 4 + 32 + 32 + 16
    assert booked == analytic

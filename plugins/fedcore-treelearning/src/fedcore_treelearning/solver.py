"""Split points that minimise the tree time: the branch and bound of the thesis (Alg. 2) and an exhaustive search.

Alg. 2 builds a solution tree whose level j is the j-th slowest client; a child is a split layer for
that client. With ``monotone=True`` (the thesis's pruning rule, "a client with weaker calculation
capacity cannot handle more layers than a stronger one") a client's split is never below the split
of a strictly slower client. A node whose partial time (a lower bound, see ``tree_time``) is already
no better than the incumbent is killed. Details the thesis leaves open (spec 003a A9.7): depth-first
order, incumbent = the warm start if given and feasible, else the best common split; prune on >=.
"""
from __future__ import annotations

from collections.abc import Sequence
import itertools
import math

import attrs

from fedcore.errors import ConfigError
from fedcore_treelearning.cost import SplitProblem, tree_time


@attrs.frozen(kw_only=True)
class SplitSolution:
    """Split layer per client (in the problem's client order), its tree time, and how many nodes were costed."""

    splits: tuple[int, ...]
    time: float
    evaluated: int


def _respects_order(problem: SplitProblem, splits: Sequence[int]) -> bool:
    speeds = problem.client_speeds
    return all(splits[i] <= splits[j] for i in range(len(splits)) for j in range(len(splits)) if speeds[i] < speeds[j])


def _feasible(problem: SplitProblem, splits: Sequence[int], monotone: bool) -> bool:
    return (len(splits) == problem.n_clients and all(2 <= s <= problem.max_split(i) for i, s in enumerate(splits))
            and (not monotone or _respects_order(problem, splits)))


def exhaustive(problem: SplitProblem, *, monotone: bool = True, strict_thesis_recursion: bool = False,
               stream_scaled: bool = False) -> SplitSolution:
    """Cost every assignment (the reference the tests hold the branch and bound to); first minimum wins."""
    ranges = [range(2, problem.max_split(i) + 1) for i in range(problem.n_clients)]
    best: tuple[int, ...] = ()
    best_time, evaluated = math.inf, 0
    for splits in itertools.product(*ranges):
        if monotone and not _respects_order(problem, splits):
            continue
        t = tree_time(problem, splits, strict_thesis_recursion=strict_thesis_recursion, stream_scaled=stream_scaled)
        evaluated += 1
        if t < best_time:
            best, best_time = splits, t
    return SplitSolution(splits=best, time=best_time, evaluated=evaluated)


def branch_and_bound(problem: SplitProblem, *, init: Sequence[int] | None = None, monotone: bool = True,
                     strict_thesis_recursion: bool = False, stream_scaled: bool = False) -> SplitSolution:
    """Alg. 2: the minimum tree time over all split assignments (under the monotone rule if ``monotone``).

    ``init`` warm-starts the search with a previous solution (periodic re-partition, thesis §3.3.2); it
    must be one valid split per client.
    """
    def cost(splits: Sequence[int], clients: Sequence[int] | None = None) -> float:
        return tree_time(problem, splits, clients=clients, strict_thesis_recursion=strict_thesis_recursion,
                         stream_scaled=stream_scaled)

    c, n = problem.n_clients, problem.n_layers
    order = sorted(range(c), key=lambda i: problem.client_speeds[i])  # line 2: slowest first (stable)
    evaluated = 0
    incumbent: tuple[int, ...] | None = None
    best = math.inf
    if init is not None:  # line 3: the current best solution
        start = tuple(init)
        if len(start) != c:
            raise ConfigError(f"init has {len(start)} split(s); the problem has {c} clients")
        for i, split in enumerate(start):
            problem.check_split(i, split)
        if _feasible(problem, start, monotone):
            incumbent, best, evaluated = start, cost(start), 1
    if incumbent is None:  # best common split, capped by each client's memory
        for s in range(2, n + 1):
            splits = tuple(min(s, problem.max_split(i)) for i in range(c))
            if _feasible(problem, splits, monotone):
                t = cost(splits)
                evaluated += 1
                if t < best:
                    incumbent, best = splits, t
    stack: list[tuple[int, ...]] = [()]  # prefixes of splits for order[0], order[1], ...
    while stack:  # lines 5-16, depth first
        prefix = stack.pop()
        client = order[len(prefix)]
        lo = 2
        if monotone:  # never below a strictly slower client's split
            slower = [s for i, s in zip(order, prefix) if problem.client_speeds[i] < problem.client_speeds[client]]
            lo = max(slower, default=2)
        children = []
        for s in range(lo, problem.max_split(client) + 1):
            child = prefix + (s,)
            t = cost(child, order[:len(child)])
            evaluated += 1
            if t >= best:  # line 10-11: cannot improve on the incumbent
                continue
            if len(child) == c:  # lines 12-14: a complete solution, back in the problem's client order
                best, incumbent = t, tuple(split for _, split in sorted(zip(order, child)))
            else:
                children.append(child)
        stack.extend(reversed(children))
    assert incumbent is not None  # split 2 for everyone is always feasible
    return SplitSolution(splits=incumbent, time=best, evaluated=evaluated)

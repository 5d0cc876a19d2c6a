"""The order a pytest-xdist run hands out HIL tests in, so that no worker is left running a
long explorer alone while the others idle.

The plugin runs under xdist's work-stealing scheduler (`--dist load`, the default with `-n`):
it first splits the collection into one contiguous share per worker, by count (the first
worker gets len // N, the next len(rest) // (N - 1), ...), then lets an idle worker take half
of the longest queue's tail. So each share should cost about the same and start with its
longest tests, and what is stolen from its tail is short. The costs are the tests' `hil_cost`
markers (rough seconds on the reference host); the tests without one are short.

Under `--dist loadgroup` (the project's default) xdist hands out whole groups instead, in the
order of the collection: there the groups go longest first (`longest_groups_first`).

Measured with the HIL suite on two loopback devices (2-core host): in collection order the
last test, a 20 s three-module explorer, ran alone at the end (49 s in all); see
benchmarks/adb_path.py for the figures with this order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def share_sizes(count: int, workers: int) -> list[int]:
    """How many tests each worker's first share holds: xdist's work-stealing split."""
    sizes, left = [], count
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def balanced_order(items: Sequence[T], costs: Sequence[float | None], workers: int) -> list[T]:
    """`items` arranged as `workers` contiguous shares of xdist's sizes. The tests with a cost
    go first, longest first, each to the share with the least cost so far that has room; the
    tests without one (None: the many short ones) then fill the shares' room in collection
    order, so a module's tests stay together. Ties keep the collection order."""
    if workers < 2 or len(items) < 2:
        return list(items)
    sizes = share_sizes(len(items), workers)
    shares: list[list[int]] = [[] for _ in range(workers)]
    totals = [0.0] * workers
    costed = {i: cost for i, cost in enumerate(costs) if cost is not None}
    for index in sorted(costed, key=lambda i: -costed[i]):
        open_shares = [w for w in range(workers) if len(shares[w]) < sizes[w]]
        target = min(open_shares, key=lambda w: (totals[w], w))
        shares[target].append(index)
        totals[target] += costed[index]
    rest = iter(i for i in range(len(items)) if costs[i] is None)
    for w in range(workers):
        shares[w].extend(next(rest) for _ in range(sizes[w] - len(shares[w])))
    return [items[i] for share in shares for i in share]


def longest_groups_first(groups: Sequence[str], costs: Sequence[float | None]) -> list[int]:
    """The order for xdist's `--dist loadgroup`, as indices into the items: their groups (an
    `xdist_group` name, or the test's own id), the most costly group first, each group's items
    together in collection order; groups of equal cost (unmarked: 0) keep collection order.
    That scheduler hands out whole groups in this order to whichever worker is free, so the long
    ones start first and the short ones fill in around them, instead of a long group starting
    last and running alone (greedy longest-processing-time order)."""
    members: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    total = {g: sum(costs[i] or 0.0 for i in idx) for g, idx in members.items()}
    ordered = sorted(members, key=lambda g: -total[g])
    return [i for g in ordered for i in members[g]]

"""The order a pytest-xdist run hands out HIL tests in (harness/plugin/xdist_order.py), checked against
xdist's own work-stealing scheduler: each worker's first share costs about the same and
starts with its longest tests."""

import pytest
from xdist.scheduler import WorkStealingScheduling

from harness.plugin.xdist_order import balanced_order, share_sizes


class Node:
    """What xdist's scheduler calls on a worker."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class Config:
    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name):
        return [f"{self.workers}*popen"] if name == "tx" else None


def first_shares(collection: list[str], workers: int) -> list[list[str]]:
    """What xdist's work-stealing scheduler sends each worker first, for this collection."""
    scheduler = WorkStealingScheduling(Config(workers))
    nodes = [Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return [[collection[i] for i in node.sent] for node in nodes]


# The HIL suite's costs on two loopback devices, roughly: two explorers of 20 s and 15 s, a
# few of 1-7 s, and many short scenario tests.
SUITE = ({"exhaustive_qnn": 20, "exhaustive_xnn": 15, "shared_weights": 7, "shared_program": 6,
          "distinct": 5, "mixed": 4, "unloads": 2, "random0": 1, "random1": 1} |
         {f"conv{i}": 0.8 for i in range(6)} | {f"s{i}": None for i in range(39)})
SHORT = 0.2  # what an unmarked scenario test takes, about


def cost(name: str) -> float:
    return SUITE[name] if SUITE[name] is not None else SHORT


@pytest.mark.parametrize("workers", [2, 3])
def test_xdists_split_matches_the_share_sizes(workers):
    collection = [f"t{i}" for i in range(len(SUITE))]
    shares = first_shares(collection, workers)
    assert [len(s) for s in shares] == share_sizes(len(collection), workers)
    assert [t for s in shares for t in s] == collection  # contiguous, in order


@pytest.mark.parametrize("workers", [2, 3])
def test_each_share_costs_about_the_same_and_starts_longest(workers):
    names = list(SUITE)
    ordered = balanced_order(names, [SUITE[n] for n in names], workers)
    assert sorted(ordered) == sorted(names)
    totals = []
    for share in first_shares(ordered, workers):
        costs = [cost(n) for n in share]
        assert costs == sorted(costs, reverse=True), share
        short = [n for n in share if SUITE[n] is None]
        assert short == sorted(short, key=names.index)  # the short ones in collection order
        totals.append(sum(costs))
    # collection order puts both explorers into the same share; balanced, no share is more
    # than the longest test above another
    assert max(totals) - min(totals) <= 20, totals
    in_order = [sum(cost(n) for n in s) for s in first_shares(names, workers)]
    assert max(in_order) - min(in_order) > max(totals) - min(totals)


def test_the_two_explorers_start_on_different_workers():
    names = list(SUITE)
    shares = first_shares(balanced_order(names, [SUITE[n] for n in names], 2), 2)
    assert {shares[0][0], shares[1][0]} == {"exhaustive_qnn", "exhaustive_xnn"}


def test_no_workers_or_one_test_keeps_the_order():
    assert balanced_order(["b", "a"], [1, 5], 1) == ["b", "a"]
    assert balanced_order(["a"], [1], 2) == ["a"]
    assert balanced_order(["a", "b", "c"], [None, None, None], 2) == ["a", "b", "c"]
    assert balanced_order(["a", "b", "c", "d"], [None, 3, None, 5], 2) == ["d", "a", "b", "c"]


class GroupConfig(Config):
    """What xdist's loadgroup scheduler reads: the workers and, as the plugin sets it, no
    reordering of the groups by their number of tests."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.option = type("Option", (), {"loadscopereorder": False})()


def groups_started(collection: list[str], workers: int) -> list[str]:
    """The group each worker is handed first by xdist's `--dist loadgroup` scheduler."""
    from xdist.scheduler import LoadGroupScheduling

    scheduler = LoadGroupScheduling(GroupConfig(workers))
    nodes = [Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return [collection[node.sent[0]].partition("@")[2] or collection[node.sent[0]]
            for node in nodes]


def test_under_loadgroup_the_costliest_group_starts_first_whatever_its_size():
    # Many short tests in one file, a 300 s test alone in another, collected last: xdist hands
    # out groups in collection order, so unordered the long one would start last.
    groups = ["adb"] * 8 + ["t.py::short"] + ["parity"]
    costs: list[float | None] = [2.0] * 8 + [None, 300.0]
    from harness.plugin.xdist_order import longest_groups_first

    order = longest_groups_first(groups, costs)
    assert [groups[i] for i in order] == ["parity"] + ["adb"] * 8 + ["t.py::short"]
    collection = [f"t{i}.py::t@{groups[i]}" if groups[i] != "t.py::short" else "t.py::short"
                  for i in order]
    assert groups_started(collection, 2) == ["parity", "adb"]
    # A group's tests stay together, in collection order; equal costs keep collection order.
    assert longest_groups_first(["a", "b", "a", "c"], [None, None, None, None]) == [0, 2, 1, 3]

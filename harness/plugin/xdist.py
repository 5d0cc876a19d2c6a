"""pytest-xdist: `-n auto` (the project's default) means one worker per CPU on the simulator and
one per device on devices, the controller hands its session id to each worker, `-n N` runs with
the work-stealing scheduler, and the selected tests are ordered by their hil_cost marker so each
worker's share costs about the same (harness/plugin/xdist_order.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.devices.kinds import session_kinds
from harness.plugin.keys import SESSION
from harness.plugin.options import xdist_workers
from harness.plugin.xdist_order import balanced_order, longest_groups_first


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hil_cost(seconds, adb=seconds): rough seconds the test "
                            "takes on the reference 2-core host on the simulator (and on an adb "
                            "device, where it differs; unmarked: short); orders a pytest-xdist run "
                            "so each worker's share costs about the same (harness/plugin/xdist_order.py)")
    config.addinivalue_line("markers", f"slow: a test that takes {SLOW_S:.0f} s or more (a "
                            "hil_cost that high marks it too); `-m 'not slow'` is the inner loop")
    opts = config.stash[SESSION].options
    workers = xdist_workers(config, opts)
    if workers > 1:
        kind = session_kinds(opts)[0].name
        loadgroup = config.getoption("dist", "no") == "loadgroup"
        if loadgroup:
            # xdist would hand out the groups with the most tests first; the plugin orders
            # them by cost instead, which needs xdist to keep the collection's order.
            config.option.loadscopereorder = False
        config.pluginmanager.register(_XdistBalance(workers, kind, loadgroup),
                                      "hil-xdist-balance")


SLOW_S = 5.0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test whose own hil_cost (on the simulator) is SLOW_S or more is `slow` as well."""
    for item in items:
        marker = item.get_closest_marker("hil_cost")
        if marker and marker.args and float(marker.args[0]) >= SLOW_S:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many workers `-n auto` starts. Each worker needs a device of its own, so a run on
    devices gets one per device and a run on one device (`--device=SERIAL`) none at all: it
    stays a plain session, as before `-n auto` was the default. The simulator runs one per CPU
    (xdist's own answer, None here); PYTEST_XDIST_AUTO_NUM_WORKERS overrides all of it."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if config.getoption("lg_place_tags", None):
        return 0  # labgrid places: as many as the run asks for with -n N
    devices = list(config.getoption("device", None) or [])
    farm = config.getoption("farm", None)
    if farm is not None and not devices:
        from harness.config import load_farm
        from harness.errors import HarnessError

        try:
            devices = [e["serial"] for e in load_farm(Path(farm))[1]]
        except (HarnessError, OSError):
            return 0  # the session's start-up names what is wrong with the file
    if devices:
        return len(devices) if len(devices) > 1 else 0
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: give each worker this session's id."""
    node.workerinput["hil_session_id"] = node.config.stash[SESSION].options.session_id


class _XdistBalance:
    """Under pytest-xdist, arranges the selected tests (after -k/-m deselection, hence last) so
    each worker's share of xdist's work-stealing split costs about the same, or under
    `--dist loadgroup` so the costliest groups go first (harness/plugin/xdist_order.py). Without xdist
    the order is kept. Every worker arranges its own collection the same way, as xdist
    requires."""

    def __init__(self, workers: int, kind: str = "simulator", loadgroup: bool = False) -> None:
        self.workers = workers
        self.loadgroup = loadgroup
        # The run's device kind: its own costs (`hil_cost(1.5, adb=2.4)`) where marked, else
        # the first (the simulator's).
        self.kind = kind

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        def cost(item: pytest.Item) -> float | None:
            marker = item.get_closest_marker("hil_cost")
            if not marker or not marker.args:
                return None
            return float(marker.kwargs.get(self.kind, marker.args[0]))

        costs = [cost(i) for i in items]
        if self.loadgroup:
            items[:] = [items[i] for i in longest_groups_first([_group(i) for i in items], costs)]
        else:
            items[:] = balanced_order(items, costs, self.workers)


def _group(item: pytest.Item) -> str:
    """The unit `--dist loadgroup` hands out: the item's xdist_group names (as xdist joins
    them), else the test alone."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else item.nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`-n N` (xdist's `--dist load`) runs with xdist's work-stealing scheduler: an idle worker
    takes half of the longest queue's tail, and the tests are ordered for its split. Other
    `--dist` modes are xdist's own."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)

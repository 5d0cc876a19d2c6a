"""The pytest plugin: options, fixtures and hooks of the HIL framework.

Registered through the `pytest11` entry point, so `pytest --device=<serial>` works in any
checkout where the package is installed. Fixtures for test authors:

- `hil_device`: the session's device (simulator by default; the worker's `--device` under xdist);
- `compiled_model(name, precision="fp16", **options)`: a registry model compiled for the
  device's SoC, with QNN compile options such as `multi_contexts=True, spill_fill=True`;
- `scenario_driver`: runs a `Scenario` on the device and returns a `ScenarioResult`;
- `hil_session`: everything else (configs, tolerances, the runner choice).

One module per concern, in the manner of pytest's own plugins, each with its own hooks:

- `keys`: the StashKeys the modules (and harness/report/plugin.py) share;
- `options`: the hil option group, and reading and checking it (`options_from_config`);
- `session`: the HilSession built at configure, SIGTERM, closing at unconfigure;
- `known_issues`: known issues as strict xfails, met, and stale;
- `farm`: a labgrid farm's failover and the place each report ran on;
- `replay`: the replay command at the end of each failure;
- `suites`: --hil-suites, hil_program parametrization, --pte's skips;
- `xdist`: the session id for workers, the scheduler, cost-balanced order (`xdist_order`);
- `terminal`: the report header and the hil summary section;
- `fixtures`: hil_session, hil_device, compiled_model, hil_program, hil_pte, scenario_driver.
"""

from __future__ import annotations

# A module's hooks of one name run later-registered first (tryfirst/trylast aside), and pytest
# registers these in this order, so the order is part of the behaviour:
# - pytest_configure: `session` is last, so its hook runs first and the others find the
#   session; then the markers hil, hil_cost (`xdist`), hil_programs (`suites`) in that order;
# - pytest_runtest_makereport (wrappers; an earlier-registered one is inner and sees the
#   report first): `known_issues` before `replay`, so an xfail a known issue does not cover is a
#   failure before its replay command is added; `fixtures` after both, keeping the final report;
# - pytest_collection_modifyitems (tryfirst): `suites` after `known_issues`, so --pte's skips
#   come before the known-issue marks;
# - pytest_addoption: `options` before harness.report.plugin (JUnit properties and
#   --hil-report), whose options follow in the hil group.
# pytest rewrites the asserts of a module it imports as a plugin only if nothing imported it
# before: a module here imports only the ones above it in the list (and `keys`).
pytest_plugins = [
    "harness.plugin.options",
    "harness.plugin.known_issues",
    "harness.plugin.terminal",
    "harness.plugin.farm",
    "harness.plugin.replay",
    "harness.plugin.suites",
    "harness.plugin.xdist",
    "harness.plugin.fixtures",
    "harness.plugin.session",
    "harness.report.plugin",
    "harness.report.mutation",
]


"""Markers for the framework's own tests, by what they need to run:

- `unit`: nothing beyond Python (`pytest -m unit` runs in seconds);
- `compiler`: gcc/cmake builds (the interposer, the native runner, cross builds);
- `simulator`: the QNN HTP simulator (compiled models, runner processes, pytest sessions);
- `adb`: the adb server (Debian `adb`) and the loopback device;
- `ssh`: Debian's OpenSSH server on 127.0.0.1 (tests/framework/sshd_board.py; root).

Each file is listed once below; a file missing here is a collection error, so a new test file
says what it needs.

Under pytest-xdist (`-n auto --dist loadgroup`, the default) each file's tests but unit ones keep
to one worker (`xdist_group`), so a module's fixtures (a loopback phone, an sshd board, compiled programs) are
built once; the files that use the host's one adb server (`adb`, `ssh`, and ADB_FILES) share one
group, so no two of them register or list devices at the same time.
"""

from pathlib import Path

import pytest

# pytester's in-process sessions (runpytest) drop every module they imported when they end. The
# harness imports its pydantic schemas only when a file is really read (harness.config.remembered),
# so a nested session can be the first to import a pydantic submodule (pydantic.root_model),
# whose class the kept `pydantic` package then caches: the next nested session met a class of a
# module gone from sys.modules (KeyError: 'pydantic.root_model'). Imported here, the schemas
# and every pydantic module they use are in each snapshot, as they were when the plugin
# imported them at start-up.
import harness.config.files
import harness.results.known_issues_file  # noqa: F401

KINDS = ("unit", "compiler", "simulator", "adb", "ssh")
FILE_KIND = {
    "test_config.py": "unit",
    "test_remembered.py": "unit",
    "test_log.py": "unit",
    "test_known_issues.py": "unit",
    "test_known_issue_signatures.py": "unit",
    "test_crash_site.py": "unit",
    "test_valgrind_findings.py": "unit",
    "test_valgrind.py": "simulator",
    "test_bug_report.py": "simulator",
    "test_memory_claims.py": "unit",
    "test_bad_input.py": "unit",  # python -m pytest / python -m harness processes
    "test_export_safety.py": "unit",  # python -m harness processes, run directories by hand
    "test_output_limit.py": "simulator",
    "test_memory.py": "unit",
    "test_ordering_generation.py": "unit",
    "test_protocol.py": "unit",
    "test_scenario.py": "unit",
    "test_trace.py": "unit",
    "test_nemesis_rules.py": "unit",
    "test_fault_sweep_plan.py": "unit",
    "test_device_payload.py": "unit",
    "test_leftovers.py": "unit",
    "test_nemesis.py": "simulator",
    "test_dsp_heap.py": "unit",
    "test_load_modes.py": "simulator",
    "test_soak_fit.py": "unit",
    "test_xdist_order.py": "unit",
    "test_import_graph.py": "unit",
    "test_dependencies.py": "unit",
    "test_fork_pool.py": "unit",  # fork servers of damaged binaries (no runtime)
    "test_cache_repair.py": "compiler",  # gcc builds the interposer
    "test_disk_full.py": "simulator",  # and root, to mount a small tmpfs
    "test_dsp_heap_chain.py": "simulator",  # and gcc (the DSP heap emulation library)
    "test_xnnpack_classify.py": "unit",
    "test_xnnpack_launches.py": "unit",
    "test_privileges.py": "unit",
    "test_xnnpack_table.py": "unit",
    "test_xnnpack_init_error.py": "unit",
    "test_xnnpack_counters_notice.py": "simulator",
    "test_report_data.py": "unit",
    "test_native_build.py": "compiler",
    "test_ccache.py": "unit",
    "test_ccache_builds.py": "compiler",  # two host runner builds, ccache's counters
    "test_qnn_sdk.py": "compiler",
    "test_abi_bridge.py": "compiler",
    "test_runner_select.py": "compiler",
    "test_arm64_build.py": "compiler",
    "test_android_wrapper.py": "compiler",
    "test_protocol_conformance.py": "compiler",  # and the executorch pybindings
    "test_compile_options.py": "simulator",
    "test_compile_server.py": "simulator",  # the lowering stack (torch, ExecuTorch, QNN)
    "test_error_paths.py": "simulator",
    "test_plugin.py": "simulator",
    "test_program.py": "simulator",
    "test_runner_parity.py": "simulator",
    "test_fork_server.py": "simulator",  # and cc (a library that starts a thread)
    "test_isolation_parity.py": "simulator",  # one test per scenario kind, twice
    "test_isolation_parity_compare.py": "unit",
    "test_sessions.py": "simulator",
    "test_user_program.py": "simulator",
    "test_value_outputs.py": "simulator",
    "test_etrecord.py": "simulator",
    "test_program_meaning.py": "simulator",
    "test_stateful_reference.py": "unit",
    "test_solo_reference.py": "unit",
    "test_dtypes.py": "simulator",
    "test_unplanned_io_runners.py": "simulator",
    "test_corpus.py": "unit",
    "test_program_inputs.py": "unit",
    "test_pte_reader.py": "unit",  # the child is stood in for: no executorch
    "test_wheel.py": "simulator",
    "test_report.py": "simulator",
    "test_matrix.py": "unit",
    "test_ci_durations.py": "unit",
    "test_ci_steps.py": "unit",
    "test_mutants.py": "unit",
    "test_runtime_variants.py": "simulator",
    "test_docs_links.py": "unit",
    "test_adb_device.py": "adb",
    "test_adb_fork.py": "adb",
    "test_loopback.py": "adb",
    "test_device_phases.py": "adb",
    "test_adb_robustness.py": "adb",
    "test_lease.py": "adb",
    "test_workspace.py": "adb",
    "test_ssh_device.py": "ssh",
    "test_replay_adb.py": "adb",
    "test_farm.py": "adb",  # and labgrid (coordinator, exporter)
}

# Files of another kind that start or list devices on the host's adb server as well.
ADB_FILES = {"test_arm64_build.py"}
# Rough seconds the slowest files take on the reference 2-core host with an empty cache (from
# `--durations=0`), as a hil_cost on their first test: under xdist the costliest groups start
# first (harness/plugin/xdist_order.py), so none of these starts last and runs alone.
FILE_COST = {
    "test_isolation_parity.py": 25, "test_program.py": 120, "test_user_program.py": 100,
    "test_wheel.py": 64, "test_protocol_conformance.py": 55, "test_native_build.py": 50,
    "test_sessions.py": 40,
    "test_plugin.py": 35, "test_dtypes.py": 30, "test_report.py": 25, "test_etrecord.py": 60,
    "test_program_meaning.py": 90,
    "test_unplanned_io_runners.py": 60,
    # measured in the cold CI run at 40902c0: the files with no cost were handed out last, in
    # collection order, and one of them ran alone at the end
    "test_compile_server.py": 60, "test_value_outputs.py": 43, "test_valgrind.py": 32,
    "test_runtime_variants.py": 27, "test_bug_report.py": 20, "test_fork_server.py": 13,
    "test_disk_full.py": 12,
    # the adb-server group
    "test_arm64_build.py": 60, "test_adb_device.py": 48, "test_adb_fork.py": 33,
    "test_ssh_device.py": 32, "test_adb_robustness.py": 29, "test_lease.py": 27,
    "test_farm.py": 23, "test_workspace.py": 12,
}
# Files that cost this much are `slow` as a whole (their module fixtures are the cost): with
# the HIL explorers (hil_cost >= 5 s), what `python -m pytest -m "not slow"` leaves out.
SLOW_FILE_S = 50


def pytest_configure(config: pytest.Config) -> None:
    for kind in KINDS:
        config.addinivalue_line("markers", f"{kind}: framework test that needs {kind} "
                                           "(see tests/framework/conftest.py)")


# tryfirst: xdist's worker adds each item's xdist_group to its node id in its own
# pytest_collection_modifyitems, which otherwise runs before this one and sees no group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    costed: set[str] = set()
    for item in items:
        path = Path(item.path)
        if path.parent != here:
            continue
        if path.name in FILE_COST and path.name not in costed:
            costed.add(path.name)
            item.add_marker(pytest.mark.hil_cost(FILE_COST[path.name]))
        if FILE_COST.get(path.name, 0) >= SLOW_FILE_S:
            item.add_marker(pytest.mark.slow)
        kind = FILE_KIND.get(path.name)
        if kind is None:
            raise pytest.UsageError(f"{path}: add it to FILE_KIND in {__file__} "
                                    f"(one of {', '.join(KINDS)})")
        item.add_marker(getattr(pytest.mark, kind))
        if kind in ("adb", "ssh") or path.name in ADB_FILES:
            item.add_marker(pytest.mark.xdist_group("adb-server"))
        elif kind != "unit":  # unit tests build nothing to share: any worker takes them
            item.add_marker(pytest.mark.xdist_group(path.stem))


@pytest.fixture(autouse=True)
def _nested_sessions(sessions_started_here_are_not_xdist_workers: None) -> None:
    """Every session these tests start is a plain one (tests/conftest.py says why)."""


@pytest.fixture
def simulator_device(hil_session):
    """`simulator_device(runner, ...)`: a SimulatorDevice of the session's SDK and SoC with
    `runner`, closed when the test ends (its fork servers and their pipes, its scratch
    directory), so a test's own devices do not outlive it."""
    from harness.devices.simulator import SimulatorDevice

    made = []

    def make(runner, *args, **kwargs):
        device = SimulatorDevice(hil_session.sdk, hil_session.soc, runner, *args, **kwargs)
        made.append(device)
        return device

    yield make
    for device in made:
        device.close()

"""The hil option group (every addoption and addini of the plugin, and each device kind's own
options) and the one place that reads and checks them: `options_from_config`, which
`harness.plugin.session` calls, and `check_start_up`. Bad input raises
HarnessError, which pytest_configure (harness/plugin/session.py) turns into one UsageError."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pytest

from harness.config import load_farm
from harness.devices.kinds import (chosen_devices, kind_for, kinds, session_kinds,
                                   session_targets)
from harness.errors import HarnessError
from harness.plugin.keys import ISSUES, PREFIX_ENV, SESSION_ID_ENV, VARIANT_ENV
from harness.results.known_issues import load_all
from harness.config.options import Options
from harness.session import HilSession, worker_info


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    _keep_labgrid_plugin_out(parser, pluginmanager)
    group = parser.getgroup("hil", "ExecuTorch QNN hardware-in-the-loop")
    group.addoption("--device", action="append", default=[], metavar="TARGET",
                    help="a device: an Android serial (USB id or host:port, or adb://SERIAL) "
                         "or another kind's form (harness/devices/kinds.py); repeat for "
                         "several devices, one per pytest-xdist worker. Default: the HTP "
                         "simulator.")
    for kind in kinds():
        kind.add_options(group)  # each device kind's own options
    group.addoption("--soc", default=None,
                    help="SoC to compile for on the simulator (default from "
                         "device_configs/simulator.yaml: SM8650); devices report their own")
    group.addoption("--device-config", type=Path, default=None, metavar="YAML",
                    help="a SoC config file to use instead of device_configs/socs/<SOC>.yaml")
    group.addoption("--artifacts-dir", default=".hil-artifacts", metavar="DIR",
                    help="where per-test traces, events and logs go (kept for failures); each "
                         "session writes to its own DIR/<session id>/, and DIR/latest points "
                         "at the newest")
    group.addoption("--keep-artifacts", action="store_true",
                    help="keep artifacts of passing tests too")
    group.addoption("--ignore-known-issues", action="store_true",
                    help="run known-issue tests as plain tests instead of strict xfails")
    group.addoption("--known-issues", action="append", default=[], metavar="YAML",
                    help="a known-issues file to add to the project's (repeatable); its test "
                         "patterns are relative to the file's directory")
    group.addoption("--strict-known-issues", action="store_true",
                    help="fail the run when a known issue for this ExecuTorch version matches "
                         "no collected test (a stale or misspelt entry)")
    group.addoption("--runner", choices=("auto", "native", "python"), default="auto",
                    help="lifecycle runner: native (built on first use) or python; auto picks "
                         "native when it can be built")
    group.addoption("--fault-sweep", action="store_true", default=False,
                    help="the QNN fault sweep (tests/hil/test_fault_sweep.py) fails every QNN "
                         "call site of its scenarios in turn; without it each function's "
                         "sites are sampled (its first call)")
    group.addoption("--stress-load", type=int, default=0, metavar="N",
                    help="run N CPU hogs (busy processes) beside this pytest process for the "
                         "whole session: a loaded machine on purpose, for checking that the "
                         "race suites' verdicts do not depend on load (benchmarks/"
                         "race_verdicts.py). Per pytest process (each xdist worker starts N)")
    group.addoption("--scenario-isolation", choices=("fork", "process"), default="fork",
                    help="run each scenario in a fork of a native runner that has loaded the "
                         "QNN libraries once (fork, the default; on an adb device a "
                         "`harness-runner --serve` held open in its workspace) or in a new "
                         "runner process (process); both start with no backend, program or "
                         "context")
    group.addoption("--valgrind", choices=("memcheck", "helgrind", "drd"), default=None,
                    help="run each scenario's runner under valgrind on the HTP simulator "
                         "(memcheck: invalid reads and writes, uninitialised values, definite "
                         "leaks; helgrind or drd: data races); implies --scenario-isolation "
                         "process, the runner timeout x50. Select the tests to run this way "
                         "with -k or node ids (docs/valgrind.md)")
    group.addoption("--soak-cycles", type=_soak_cycles, default=16, metavar="N",
                    help="load -> execute -> destroy cycles of each soak test (default 16; a "
                         "night's run takes hundreds: the fitted slope narrows with N)")
    group.addoption("--runner-timeout", type=float, default=None, metavar="SECONDS",
                    help="kill a runner after this long (default from the device config)")
    group.addoption("--qnn-abi-bridge", choices=("auto", "on", "off"), default="auto",
                    help="re-lay QNN HTP device custom configs for newer QAIRT libraries "
                         "(auto: decided from the API version the library reports)")
    group.addoption("--dsp-heap", choices=("auto", "on", "off"), default="auto",
                    help="read DSP heap usage through QNN DSP memory profiling at every context "
                         "create and free, and check it against the SoC config (auto: on "
                         "Android devices with QNN; the HTP simulator has no DSP)")
    group.addoption("--farm", type=Path, default=None, metavar="YAML",
                    help="a device farm file (device_configs/farms/): its devices and adb server; "
                         "use with -n <number of devices>")
    try:
        group.addoption("--lg-coordinator", default=None, metavar="HOST:PORT",
                        help="labgrid coordinator of a device farm (default: $LG_COORDINATOR); "
                             "use with --lg-place-tags")
    except (ValueError, argparse.ArgumentError):
        pass  # labgrid's own pytest plugin, loaded on request, has it: the same meaning
    group.addoption("--lg-place-tags", action="append", default=[], metavar="KEY=VALUE",
                    help="reserve a labgrid place with these tags (repeatable, e.g. soc=SM8650) "
                         "for each worker; the place's tags serial=, adb=HOST:PORT and soc= "
                         "name its phone. A phone that fails preflight or drops off for good is "
                         "tagged hil_unhealthy and the worker goes on with another place")
    group.addoption("--pte", action="append", default=[], metavar="PATH",
                    help="run the HIL suites on this program instead of the built-in models "
                         "(repeatable; also the ini option hil_pte)")
    group.addoption("--etrecord", action="append", default=[], metavar="[PTE=]FILE",
                    help="the ETRecord of a --pte program (upstream devtools' format), whose "
                         "edge program run on CPU is the reference its outputs are judged "
                         "against, state carried; FILE alone with one --pte, PTE=FILE with "
                         "several (repeatable). Without it NAME.etrecord beside NAME.pte is "
                         "used when it exists, else the program's own solo run")
    group.addoption("--models-dir", action="append", default=[], metavar="DIR",
                    help="a directory of model files (NAME, BACKEND, PRECISIONS, TOLERANCE, "
                         "build()) that compiled_model(name) also finds (repeatable; also the "
                         "ini option hil_models_dirs)")
    group.addoption("--hil-suites", action="store_true",
                    help="also collect the HIL suites shipped with the package (for a project "
                         "that has the package installed, e.g. with --pte)")
    group.addoption("--full-exploration", action="store_true",
                    help="tests/hil/test_orderings.py: explore three modules of the XNNPACK "
                         "convolution over the whole lifecycle (load, load-method, execute, "
                         "unload-method, destroy: 126126 orderings up to renaming, minutes) "
                         "instead of CI's bound (no unload-method: 5775)")
    group.addoption("--executorch-prefix", default=None, metavar="DIR",
                    help="the ExecuTorch build under test: an unpacked wheel's executorch/ or a "
                         "CMake install prefix; the runner is built against it and its "
                         "libraries are loaded (ini option hil_executorch_prefix, environment "
                         "EXECUTORCH_HIL_EXECUTORCH_PREFIX; default: the installed wheel)")
    parser.addini("hil_executorch_prefix", default="",
                  help="like --executorch-prefix, relative to the ini file")
    group.addoption("--runtime-variant", default=None, metavar="NAME",
                    help="the runtime under test with a wrapper at its backend registry, "
                         "preloaded into runner processes: none (default), stock (every call "
                         "forwarded: a control), fix-model (a model of the seed's fix: a QNN "
                         "cache key per Module, user counts), fix-model-serialized (the same, "
                         "executes kept apart from inits and destroys); ini option "
                         "hil_runtime_variant, environment EXECUTORCH_HIL_RUNTIME_VARIANT")
    parser.addini("hil_runtime_variant", default="", help="like --runtime-variant")
    parser.addini("hil_pte", type="paths", default=[],
                  help="programs the HIL suites run on (like --pte), relative to the ini file")
    parser.addini("hil_models_dirs", type="paths", default=[],
                  help="model directories (like --models-dir), relative to the ini file")


def _keep_labgrid_plugin_out(parser: pytest.Parser, pluginmanager) -> None:
    """labgrid is a dependency for its client (harness/devices/farm.py), and pip registers its pytest
    plugin for every pytest run. That plugin is not used here, and it would change plain runs:
    its own --lg-coordinator, pytest's log format and -vv live logging, and a StepLogger that
    fails nested (pytester) sessions. It is blocked before it loads, or taken out again if it
    loaded first; `-p labgrid.pytestplugin` still loads it on request."""
    plugin = pluginmanager.get_plugin("labgrid")
    if plugin is None:
        pluginmanager.set_blocked("labgrid")
        return
    pluginmanager.unregister(plugin)
    from _pytest.logging import DEFAULT_LOG_FORMAT

    parser.addini("log_format", default=DEFAULT_LOG_FORMAT,
                  help="Default value for log format")  # labgrid's plugin had replaced it


def session_id(config: pytest.Config) -> str:
    """One id per pytest session, shared by its xdist workers (the controller hands it over),
    so concurrent sessions never write into each other's artifacts."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "hil_session_id" in workerinput:
        return workerinput["hil_session_id"]
    return os.environ.get(SESSION_ID_ENV) or f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def _select_runtime(config: pytest.Config) -> None:
    """--executorch-prefix, else the ini option (relative to the ini file), else the
    environment, else the installed wheel; set in the environment for every child."""
    from harness import runtime

    prefix = config.getoption("executorch_prefix")
    if prefix is None and config.getini("hil_executorch_prefix"):
        base = config.inipath.parent if config.inipath else Path.cwd()
        prefix = str(base / config.getini("hil_executorch_prefix"))
    if prefix is None:
        prefix = os.environ.get(runtime.PREFIX_ENV) or None
    config.stash[PREFIX_ENV] = os.environ.get(runtime.PREFIX_ENV)
    runtime.select(prefix)


def _select_variant(config: pytest.Config) -> None:
    """--runtime-variant, else the ini option, else the environment, else none; checked and
    set in the environment for every child (xdist workers, runners, replays)."""
    from harness.runtime import variants

    name = (config.getoption("runtime_variant") or config.getini("hil_runtime_variant")
            or os.environ.get(variants.ENV) or "none")
    config.stash[VARIANT_ENV] = os.environ.get(variants.ENV)
    os.environ[variants.ENV] = variants.check_variant(name)


def options_from_config(config: pytest.Config) -> Options:
    """The session's options from the command line, the ini file and the environment, with
    the runtime under test selected first (`_select_runtime`); raises HarnessError on a bad
    value or combination."""
    _select_runtime(config)
    _select_variant(config)
    worker, count = worker_info()
    devices = list(config.getoption("device"))
    farm = config.getoption("farm")
    if farm is not None:
        devices = devices or [e["serial"] for e in load_farm(Path(farm))[1]]
    lg_tags: dict[str, str] = {}
    lg_coordinator = None
    if (config.getoption("lg_place_tags") or config.getoption("lg_coordinator", None)
            or os.environ.get("LG_COORDINATOR")):
        from harness.devices.farm import coordinator_address, parse_tags  # labgrid farms only

        lg_tags = parse_tags(config.getoption("lg_place_tags"))
        lg_coordinator = coordinator_address(config.getoption("lg_coordinator", None))
    if lg_tags and not lg_coordinator:
        raise HarnessError("--lg-place-tags needs a labgrid coordinator: --lg-coordinator "
                           "HOST:PORT or LG_COORDINATOR")
    if (config.getoption("lg_coordinator", None) and not lg_tags and
            not config.pluginmanager.hasplugin("labgrid.pytestplugin")):
        raise HarnessError("--lg-coordinator needs --lg-place-tags KEY=VALUE (which places to "
                           "reserve, e.g. soc=SM8650); without them the run would not use it")
    if lg_tags and (devices or farm is not None):
        raise HarnessError("--lg-place-tags takes devices from labgrid places; it cannot be "
                           "combined with --device or --farm")
    sid = session_id(config)
    ptes = [_resolved(p) for p in config.getoption("pte")] or \
        [_resolved(p) for p in config.getini("hil_pte")]
    etrecords = _etrecords(config.getoption("etrecord"), ptes)
    _check_etrecords(ptes, etrecords)
    models_dirs = [_resolved(p) for p in config.getoption("models_dir")] + \
        [_resolved(p) for p in config.getini("hil_models_dirs")]
    return Options(
        ptes=ptes, etrecords=etrecords, models_dirs=models_dirs,
        devices=devices, simulator=config.getoption("simulator"),
        soc=config.getoption("soc"), device_config=config.getoption("device_config"),
        artifacts_dir=(Path(config.getoption("artifacts_dir")) / sid).resolve(),
        session_id=sid,
        keep_artifacts=config.getoption("keep_artifacts"), runner=config.getoption("runner"),
        runner_timeout=config.getoption("runner_timeout"),
        abi_bridge=config.getoption("qnn_abi_bridge"),
        farm=Path(farm) if farm is not None else None,
        keep_workspace=config.getoption("keep_workspace"),
        device_workspace=config.getoption("device_workspace"), worker=worker, worker_count=count,
        lease_wait=config.getoption("lease_wait"),
        reacquire_s=_env_seconds("EXECUTORCH_HIL_REACQUIRE_S"),
        lg_coordinator=lg_coordinator if lg_tags else None, lg_place_tags=lg_tags,
        scenario_isolation=config.getoption("scenario_isolation"),
        scenario_jobs=config.getoption("scenario_jobs"),
        dsp_heap=config.getoption("dsp_heap"), soak_cycles=config.getoption("soak_cycles"),
        valgrind=_valgrind(config.getoption("valgrind"), devices, config.getoption("simulator"),
                           bool(lg_tags), config.getoption("runner")))


def _valgrind(tool: str | None, devices: list[str], simulator: bool, farm: bool,
              runner: str) -> str:
    """--valgrind's tool, checked: runners run under valgrind on the host simulator only, and
    only the native runner (under valgrind the Python runner is the interpreter's own noise)."""
    if not tool:
        return ""
    from harness.runner.valgrind import check_tool

    if (devices and not simulator) or farm:
        where = ", ".join(devices) or "labgrid places"
        raise HarnessError(f"--valgrind={tool} runs runners on the host HTP simulator only, not "
                           f"on {where}: drop --device/--farm/--lg-place-tags (or add "
                           "--simulator) to run the selected tests under valgrind")
    if runner == "python":
        raise HarnessError(f"--valgrind={tool} runs the native runner; --runner python would "
                           "report the Python interpreter's own memory use: drop --runner python")
    return check_tool(tool)


def _soak_cycles(text: str) -> int:
    """--soak-cycles: an integer, at least the fit's warm-up plus the cycles it needs."""
    from harness.results.soak import DEFAULT_WARMUP, MIN_FITTED

    least = DEFAULT_WARMUP + MIN_FITTED
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least} ({DEFAULT_WARMUP} warm-up "
                                         f"cycles and {MIN_FITTED} to fit), got {value}")
    return value


def _resolved(path: str | Path) -> Path:
    """`path` made absolute with its links resolved where they resolve; a link loop stays as
    given (Path.resolve raises RuntimeError on one) for the start-up check to name."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(path))


def _env_seconds(name: str) -> float | None:
    from harness.environ import env_positive

    return env_positive(name, "seconds")


def check_start_up(config: pytest.Config, session: HilSession) -> None:
    """Every config the session will read, read now: a broken one is one usage error before
    any device is touched, not the same error once per test."""
    from harness.config import load_soc, simulator_config, soc_config

    opts = session.options
    simulator_config()
    from harness.runtime import current, start_up_problem

    problem = start_up_problem(current())
    if problem:
        raise HarnessError(problem)
    from harness.runtime import variants

    if variants.session_variant() != "none":
        # A build that fails is one error now, not one per test; on a device the wrapper rides
        # with the host runner build (harness.runtime.variants.device_preload).
        variants.build_wrapper()
    if opts.device_config is not None:
        load_soc(Path(opts.device_config))
    targets = session_targets(opts)
    kinds = session_kinds(opts)
    for kind in kinds:
        kind.check_start_up([t for t in targets if kind_for(t) is kind], session.open_context())
    if chosen_devices(opts):
        repeated = sorted({d for d in opts.devices if opts.devices.count(d) > 1})
        if repeated:
            raise HarnessError(
                f"device {', '.join(repeated)} is given more than once (--device or the farm "
                "file): each worker needs a device of its own, and a second worker on the same "
                "phone would find it leased by its sibling; give each device once")
        workers = xdist_workers(config, opts)
        if opts.devices and workers > len(opts.devices):
            raise HarnessError(
                f"{workers} pytest-xdist workers for {len(opts.devices)} device(s) "
                f"({', '.join(opts.devices)}): more workers than devices is not supported, "
                "because each worker needs a device of its own (a device is leased to one "
                f"session at a time); run with -n {len(opts.devices)} or fewer, or give one "
                "--device per worker")
    if opts.soc:
        soc_config(opts.soc)
    known_socs = {known: k for k in kinds if (known := k.known_soc(opts)) is not None}
    if not config.getoption("ignore_known_issues"):
        config.stash[ISSUES] = load_all([Path(p) for p in config.getoption("known_issues")])
    from harness.programs.pte import check_file

    for pte in opts.ptes:
        check_file(pte)  # a wrong path or a file that is not a program: now, not per test
    if opts.ptes:
        from harness.programs.pte_reader import all_or_error, read_programs
        from harness.programs.user import check_outputs, check_soc, input_arrays

        # All at once: the programs not cached yet are read by one child process, not one
        # each; every bad one is named, in one error.
        for info in all_or_error(read_programs(opts.ptes)):
            input_arrays(info)  # an input the runners cannot feed, a bad .npy: once, now
            check_outputs(info)  # an output the runners cannot describe: once, now
            for soc, kind in known_socs.items():
                # A SoC known now (the simulated one): a program built for another is refused
                # once, at start-up.
                check_soc(info, soc, f"the {kind.title}")
    for directory in opts.models_dirs:
        if not directory.is_dir():
            raise HarnessError(f"--models-dir {directory}: no such directory")


def xdist_workers(config: pytest.Config, opts: Options) -> int:
    """How many pytest-xdist workers this run has: on a worker, PYTEST_XDIST_WORKER_COUNT
    (`worker_info`); on the controller, its `--tx` specs as `-n N` (or `-n auto`) resolved
    them (`N*popen` counts N); 1 without xdist."""
    if opts.worker.startswith("gw"):
        return opts.worker_count
    option = config.option
    if getattr(option, "dist", "no") == "no" or not getattr(option, "tx", None):
        return 1
    count = 0
    for spec in option.tx:
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


def _check_etrecords(ptes: list[Path], given: dict[Path, Path]) -> None:
    """Every ETRecord the session will read (given, or NAME.etrecord beside a --pte), read
    now: a damaged one is one usage error, not an error of every test of its program."""
    from harness.programs.etrecord import SUFFIX, etrecord_problem

    for pte in ptes:
        record = given.get(pte) or pte.with_suffix(SUFFIX)
        if record.is_file():
            problem = etrecord_problem(record)
            if problem:
                how = "--etrecord" if pte in given else f"beside --pte {pte}"
                raise HarnessError(f"ETRecord {record} ({how}): {problem}")


def _etrecords(values: list[str], ptes: list[Path]) -> dict[Path, Path]:
    """--etrecord values as {program: record}: `FILE` with exactly one --pte, else
    `PTE=FILE` naming one of the --pte programs. Bad input is a HarnessError that says what to
    write instead."""
    out: dict[Path, Path] = {}
    for value in values:
        pte_text, sep, record_text = value.rpartition("=")
        if not sep:
            if len(ptes) != 1:
                raise HarnessError(f"--etrecord {value}: with {len(ptes)} --pte programs say "
                                   "which one it belongs to: --etrecord PROGRAM.pte=FILE")
            pte = ptes[0]
        else:
            pte = _resolved(pte_text)
            if pte not in ptes:
                raise HarnessError(f"--etrecord {value}: {pte} is not one of the --pte "
                                   f"programs ({', '.join(map(str, ptes)) or 'none given'})")
        record = _resolved(record_text)
        if not record.is_file():
            raise HarnessError(f"--etrecord {value}: {record}: no such file")
        if pte in out:
            raise HarnessError(f"--etrecord: two ETRecords for {pte}: {out[pte]} and {record}")
        out[pte] = record
    return out

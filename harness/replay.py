"""`python -m harness replay RUN_DIR|scenario.json`: one scenario of a test, run again.

A failing ordering is worth something upstream only when it can be seen again without the
test (an explorer runs thousands of orderings before its failing one). A run directory (the
`--artifacts-dir` of a failed or xfailed test: `DIR/<session>/<test>/<scenario>/`) holds the
scenario file with its programs and inputs, and `replay.json` (harness/drive/driver.py) with each
module's model; replay rebuilds the `Scenario` from them, runs it on the target with the
harness's own device and checks (harness/results/assertions.py), prints the step table and the
runtime's lines, and exits 1 when a check fails again, 0 when every check holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable, Sequence

from harness.programs.compile import CompiledModel, MethodReference, uses_qnn
from harness.drive.driver import RUN_RECORD, ScenarioDriver
from harness.errors import HarnessError
from harness.results.assertions import unreachable
from harness.results.failures import HilFailure, run_failures
from harness.protocol.scenario_check import check_scenario, load_scenario
from harness.results.run import ScenarioResult
from harness.runner.launch import LaunchError, command_prefix, parse_launches, shell_words
from harness.scenario import Scenario, parse_scenario
from harness.storage import confined_file
from harness.protocol.tensors import TensorFile

SCENARIO_FILE = "scenario.json"
# Delegate ids as the runtime names them -> the harness's BACKEND words (harness/programs/models.py).
BACKEND_WORDS = {"QnnBackend": "qnn", "XnnpackBackend": "xnnpack"}


class ReplayError(HarnessError):
    """A run directory or scenario file replay cannot use (CLI exit 2)."""


@dataclasses.dataclass
class RunRecord:
    """A recorded scenario run: its scenario rebuilt with models, and what was recorded."""

    directory: Path  # where scenario.json is
    scenario: Scenario
    record: dict  # replay.json ({} when absent)
    recorded: dict  # result.json ({} when absent)

    @property
    def trace_file(self) -> Path:
        return self.directory / "qnn_trace.txt"

    @property
    def stderr_file(self) -> Path:
        return self.directory / "runner.stderr"

    def recorded_failure(self) -> tuple[int, str, str] | None:
        """(step index, step, status and message) of the first step that was not ok in the
        recorded run, or None."""
        for i, step in enumerate(self.recorded.get("steps", [])):
            if step.get("status") not in ("ok", None) and i not in self.scenario.allowed_errors:
                event = step.get("event") or {}
                return i, step.get("step", ""), f"{step['status']} {event.get('message', '')}".strip()
        return None


def scenario_path(target: Path) -> Path:
    """The scenario file of `target`: the file itself, RUN_DIR/scenario.json, or the one
    scenario directory of a test's artifacts directory."""
    if target.is_file():
        return target
    if not target.is_dir():
        raise ReplayError(f"{target}: no such run directory or scenario file")
    if (target / SCENARIO_FILE).is_file():
        return target / SCENARIO_FILE
    runs = sorted(p.parent for p in target.glob(f"*/{SCENARIO_FILE}"))
    if len(runs) == 1:
        return runs[0] / SCENARIO_FILE
    if runs:
        raise ReplayError(f"{target} holds {len(runs)} scenario runs; name one: " +
                          ", ".join(str(r) for r in runs[:10]))
    raise ReplayError(f"{target}: no {SCENARIO_FILE} here (a run directory is "
                      "<artifacts>/<session>/<test>/<scenario>/, kept for failed and xfailed "
                      "tests, or for all with --keep-artifacts)")


RECORDED_FILES = (RUN_RECORD, "result.json", "runner.stdout", "runner.stderr", "qnn_trace.txt")
"""The files of a run directory beside scenario.json that replay and export read."""

ALLOW_HINT = ("a program of your own and the inputs its session made lie elsewhere: name "
              "their directories with --allow-dir DIR")


def run_roots(directory: Path, allow: Sequence[Path] = ()) -> list[tuple[str, Path]]:
    """The directories a run's files may come from when they are copied or pushed: the run
    directory, the harness cache (compiled programs and their tensors), and each `allow`."""
    from harness.cache import cache_root

    return [("the run directory", Path(directory).resolve()),
            ("the harness cache", cache_root().resolve()),
            *(("--allow-dir", Path(d).resolve()) for d in allow)]


def load_run(target: Path | str, confine: Sequence[Path] | None = None) -> RunRecord:
    """Read a run directory (or a scenario file) into a RunRecord; ReplayError when it is not
    one, naming what is missing.

    `confine` (given by the commands that copy or push the run's files: export, replay
    --device) checks every file the run has or names, before it is read, with
    harness.storage.confined_file: scenario.json and RECORDED_FILES themselves no symbolic
    links, each program and tensor a regular file inside the run directory, the harness cache
    or one of the `confine` directories (UnsafeFileError otherwise)."""
    given = scenario_path(Path(target))
    path = given.resolve()
    directory = path.parent
    roots = run_roots(directory, confine) if confine is not None else None
    if roots is not None:
        for file in (given, *(directory / name for name in RECORDED_FILES)):
            if file is given or os.path.lexists(file):
                confined_file(file, roots, ALLOW_HINT)
    record = _read_json(directory / RUN_RECORD)
    recorded = _read_json(directory / "result.json")
    try:
        if "host_scenario" in record:  # an adb device's scenario.json names its own paths
            doc = record["host_scenario"]
            parsed = check_scenario(doc, directory, f"{directory / RUN_RECORD} (host_scenario)")
        else:
            parsed = load_scenario(path)  # validates, and checks every file it names exists
            doc = json.loads(path.read_text())
    except (HarnessError, ValueError, OSError) as exc:
        raise ReplayError(f"{path}: not a scenario file the runners accept: {exc}") from None
    if roots is not None:  # before any is read (the backend of a program without a record)
        for name in parsed.files():
            confined_file(parsed.path(name), roots, ALLOW_HINT)
    variants: dict[int, int] = {}
    models = _models(doc, parsed, record.get("models", {}), variants)
    steps = _with_variants(doc["steps"], parse_scenario(doc), variants)
    scenario = Scenario(doc.get("name") or path.parent.name)
    scenario.steps = steps
    scenario.models = models
    scenario.watch_mappings = list(doc.get("watch_mappings") or [])
    scenario.qnn_nemesis = list(parsed.qnn_nemesis)
    scenario.allowed_errors = set(record.get("allowed_errors", []))
    try:  # the wrappers the recorded runner started under: its cause, applied again
        scenario.launch = parse_launches(record.get("launch"), str(directory / RUN_RECORD))
    except LaunchError as exc:
        raise ReplayError(str(exc)) from None
    return RunRecord(directory, scenario, record, recorded)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ReplayError(f"{path}: unreadable ({exc})") from None


def _with_variants(raws: list, steps: list, variants: dict[int, int]) -> list:
    """The steps with each execute's input set (`variants`, keyed by the raw step's id) as
    `_models` found it."""
    out = []
    for raw, step in zip(raws, steps):
        if step.op == "parallel":
            subs = tuple(dataclasses.replace(sub, variant=variants.get(id(r), 0))
                         for r, sub in zip(raw["steps"], step.substeps))
            step = dataclasses.replace(step, args={**step.args, "steps": subs})
        else:
            step = dataclasses.replace(step, variant=variants.get(id(raw), 0))
        out.append(step)
    return out


def _models(doc: dict, parsed, recorded: dict,
            variants: dict[int, int] | None = None) -> dict[str, CompiledModel]:
    """Each module's model, from the steps (program, inputs, expected outputs, tolerances)
    and the run record (name, backend, SoC, precision); without a record the backend is read
    from the program itself. An execute on other inputs than its method's first (a decode
    loop's steps, each with its own mask and position) gets them as a variant of the method,
    recorded in `variants` by the raw step's id, so it replays on its own inputs."""
    variants = {} if variants is None else variants
    pte: dict[str, Path] = {}
    methods: dict[str, dict[str, MethodReference]] = {}
    tolerance: dict[str, tuple[float, float]] = {}
    # A stateful method's executes each carry the expected outputs of their number since the
    # load: kept as a sequence per (module, method), so the replay judges each the same way.
    counts: dict[tuple[str, str], int] = {}
    sequences: dict[tuple[str, str], dict[int, tuple[TensorFile, ...]]] = {}
    for raw, step in _flat(doc["steps"], parsed.steps):
        if step.op in ("load_module", "destroy_module"):
            for key in [k for k in counts if k[0] == step.module]:
                del counts[key]
        if step.op == "unload_method":
            counts.pop((step.module, step.method), None)
        if step.op == "load_module":
            pte[step.module] = parsed.path(step.pte)
            methods.setdefault(step.module, {})
        elif step.op in ("load_method", "execute", "unload_method") and step.module:
            refs = methods.setdefault(step.module, {})
            expected = tuple(TensorFile(t.dtype, tuple(t.shape), parsed.path(t.file))
                             for t in step.expected)
            inputs = tuple(TensorFile(t.dtype, tuple(t.shape), parsed.path(t.file))
                           for t in step.inputs)
            ref = refs.get(step.method)
            if step.op == "execute":
                tolerance[step.module] = (raw.get("atol", 0.0), raw.get("rtol", 0.0))
                key = (step.module, step.method)
                counts[key] = counts.get(key, 0) + 1
            if ref is not None and step.op == "execute" and ref.inputs and inputs != ref.inputs:
                pair = (inputs, expected)
                if pair not in ref.variants:
                    ref = refs[step.method] = dataclasses.replace(
                        ref, variants=(*ref.variants, pair))
                variants[id(raw)] = ref.variants.index(pair) + 1
                continue
            if step.op == "execute" or ref is None:
                refs[step.method] = (MethodReference(inputs, expected) if ref is None else
                                     dataclasses.replace(ref, inputs=inputs, expected=expected))
            if step.op == "execute":
                sequences.setdefault(key, {}).setdefault(counts[key], expected)
    for (module, method), by_number in sequences.items():
        if len({by_number[n] for n in by_number}) > 1 and sorted(by_number) == list(
                range(1, len(by_number) + 1)):
            ref = methods[module][method]
            sequence = tuple(by_number[n] for n in sorted(by_number))
            methods[module][method] = dataclasses.replace(ref, expected=sequence[0],
                                                          sequence=sequence)
    models = {}
    for module, path in pte.items():
        info = recorded.get(module) or {}
        backend = info.get("backend") or _backend_of(path)
        atol, rtol = tolerance.get(module, (0.0, 0.0))
        models[module] = CompiledModel(info.get("name") or path.stem, backend,
                                       info.get("soc", ""), info.get("precision", ""), path,
                                       methods.get(module, {}), atol, rtol,
                                       reference=info.get("reference") or RECORDED_REFERENCE)
    return models


def _flat(raws: list, steps) -> list:
    out = []
    for raw, step in zip(raws, steps):
        out.append((raw, step))
        if step.op == "parallel":
            out += list(zip(raw["steps"], step.steps))
    return out


def _backend_of(pte: Path) -> str:
    from harness.programs.pte_reader import read_program

    backends = [BACKEND_WORDS.get(b, b.lower()) for b in read_program(pte).backends]
    return "+".join(backends) or "portable"


def gone_paths(scenario: Scenario) -> list[str]:
    """Absolute paths in the scenario's backend options and watched mappings that do not
    exist now (programs and tensors were checked when the run was read)."""
    named = list(scenario.watch_mappings)
    for step in scenario.steps:
        for sub in step.flat:
            for options in (sub.args.get("backend_options") or {}).values():
                named += [v for v in options.values() if isinstance(v, str)]
    return [p for p in dict.fromkeys(named) if p.startswith("/") and not Path(p).exists()]


RECORDED_REFERENCE = "the expected outputs the recorded scenario carries"


# Checks -------------------------------------------------------------------------------------
def checks_for(scenario: Scenario) -> list[tuple[str, Callable[[ScenarioResult], None]]]:
    """The checks a HIL test makes of every run (steps, outputs, and for QNN programs the
    trace-based isolation and live counts), by name."""
    from harness.results.assertions import (assert_isolation, assert_live_counts, assert_nemesis,
                                    assert_outputs_consistent, assert_separate_states,
                                    assert_steps_ok)

    checks = [("steps", assert_steps_ok), ("outputs", assert_outputs_consistent)]
    if scenario.qnn_nemesis:
        checks.insert(0, (NEMESIS_CHECK, assert_nemesis))
    if any(m.stateful for m in scenario.models.values()):
        checks.append(("separate states", assert_separate_states))
    if any(uses_qnn(m.backend) for m in scenario.models.values()):
        checks += [("isolation", assert_isolation), ("live counts", assert_live_counts)]
    return checks


NEMESIS_CHECK = "nemesis"
"""The check that the run followed its nemesis rules (`assert_nemesis`): not one a test
makes of a run but the driver's own, before any, so always judged."""
VALGRIND_CHECK = "valgrind"
"""Under --valgrind, that valgrind found nothing (`assert_no_memory_errors`): the driver's own
check too, so always judged; a run without valgrind has no such check."""


def run_once(driver: ScenarioDriver, scenario: Scenario) -> ScenarioResult:
    """One run of `scenario`, whatever it did: the driver raises when a run did not follow
    its nemesis rules (the test's verdict would be about another run), which for replay is a
    failed check (`check`: "nemesis", exit 1) like any other, not an error."""
    try:
        return driver.run(scenario, allow_crash=True)
    except HilFailure as exc:
        if exc.failure.kind != "nemesis" or not driver.results:
            raise
        return driver.results[-1]


def check(result: ScenarioResult) -> list[tuple[str, str]]:
    """(check, its first line) for each of `checks_for` that failed; empty when every one
    holds. All of them run, those its test did not make too: replay judges by the test's
    (`made` in `main`) and shows the others."""
    failed = []
    for name, assertion in checks_for(result.scenario):
        try:
            assertion(result)
        except AssertionError as exc:
            if name == NEMESIS_CHECK:  # every rule not followed, in the test's words
                failed.append((name, "the run did not follow its nemesis rules: " + "; ".join(
                    f.message for f in run_failures(result) if f.kind == "nemesis")))
            else:
                failed.append((name, _first_line(exc)))
    if result.output.valgrind_xml:
        from harness.results.assertions import assert_no_memory_errors

        try:
            assert_no_memory_errors(result)
        except AssertionError as exc:
            found = [f for f in run_failures(result) if f.kind == "memory"]
            failed.append((VALGRIND_CHECK, f"{len(found)} finding(s), first: "
                           f"{found[0].message.splitlines()[0] if found else _first_line(exc)}"))
    return failed


def _first_line(exc: AssertionError) -> str:
    if isinstance(exc, HilFailure) and exc.failure.step is not None:
        return exc.failure.describe()
    lines = [l for l in str(exc).splitlines() if l.strip()]
    return " / ".join(lines[:2])


def step_table(result: ScenarioResult) -> str:
    """One line per step: op, status, the runtime's message, elapsed ms, live counts."""
    rows = [("#", "step", "status", "ms", "live b/d/c", "message")]
    for i, s in enumerate(result.steps):
        event = s.event or {}
        live = s.live
        ms = event.get("elapsed_ms")
        rows.append((str(i), s.step.describe(), s.status, "" if ms is None else f"{ms:.1f}",
                     f"{live['backend']}/{live['device']}/{live['context']}",
                     event.get("message") or ""))
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(5)) + "  " + r[5]
                     for r in rows).rstrip()


def runtime_lines(result: ScenarioResult, limit: int = 20) -> str:
    """The runtime's lines of each step that failed (what the runtime itself said)."""
    out = []
    for failure in run_failures(result):
        if failure.step is not None:
            log = result.steps[failure.step].log.strip()
            if log:
                out.append(f"step {failure.step} {failure.where}:")
                out += ["    " + l for l in log.splitlines()[-limit:]]
    return "\n".join(out)


def cache_branches(run: RunRecord, result: ScenarioResult) -> str:
    """The XNNPACK packed-weight cache's failure branches of this run and of the recorded one,
    in the runtime's words (harness.results.xnnpack_log), and whether they are the same: a
    branch driven by a launch cause (fiu-run, setpriv) is reproduced only if they are; ""
    when neither run logged one."""
    from harness.results.xnnpack_log import failures

    now = failures(result.output.stderr.splitlines())
    then = failures(_text(run.stderr_file).splitlines())
    if not now and not then:
        return ""
    verdict = "the same as recorded" if now == then else \
        f"NOT the recorded ones ({'; '.join(then) or 'none'})"
    return f"xnnpack cache branches: {'; '.join(now) or 'none'}: {verdict}"


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# The command -----------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness replay",
        description="Run one recorded scenario again on the target and check it as its test "
                    "did: exit 1 when a check fails again, 0 when every check holds, 2 on bad "
                    "input.")
    parser.add_argument("run", type=Path, metavar="RUN_DIR|scenario.json")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--device", metavar="SERIAL", help="an adb device (USB serial or host:port)")
    where.add_argument("--simulator", action="store_true",
                       help="the host HTP simulator (the default)")
    parser.add_argument("--runs", type=_positive, default=1, metavar="N",
                        help="run it N times (each in fresh process state); exit 1 when any "
                             "run fails a check (an intermittent bug)")
    parser.add_argument("--artifacts-dir", type=Path, default=None, metavar="DIR",
                        help="where the replayed runs' artifacts go (default: a new temporary "
                             "directory, printed)")
    parser.add_argument("--runner", choices=("auto", "native", "python"), default="auto",
                        help="simulator runner (default: auto, the native one)")
    parser.add_argument("--allow-dir", action="append", default=[], type=Path, metavar="DIR",
                        help="with --device: also push files from DIR (repeatable): a program "
                             "of your own (--pte) and the inputs its session made lie outside "
                             "the run directory and the harness cache, the only places pushed "
                             "from otherwise")
    parser.add_argument("--adb-server", default=None, metavar="HOST:PORT")
    parser.add_argument("--runner-timeout", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--valgrind", choices=("memcheck", "helgrind", "drd"), default=None,
                        help="simulator: run the runner under valgrind (docs/valgrind.md); its "
                             "findings fail the 'valgrind' check")
    return parser


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number of 1 or more, not {value!r}")
    return n


def open_session(args: argparse.Namespace, soc: str | None, artifacts: Path):
    """A HilSession on the replay's target, built like a pytest session's."""
    from harness.config.options import Options
    from harness.session import HilSession

    devices = [args.device] if args.device else []
    opts = Options(devices=devices, simulator=not devices, soc=soc if not devices else None,
                   device_config=None, artifacts_dir=artifacts, keep_artifacts=True,
                   runner=args.runner, runner_timeout=args.runner_timeout, abi_bridge="auto",
                   keep_workspace=False, device_workspace=None, worker="replay",
                   worker_count=1, session_id=artifacts.name,
                   kind_options={"adb_server": args.adb_server}, valgrind=_valgrind(args))
    return HilSession(opts)


def _valgrind(args: argparse.Namespace) -> str:
    """--valgrind's tool, checked (simulator only, valgrind installed)."""
    if not args.valgrind:
        return ""
    from harness.runner.valgrind import check_tool

    if args.device:
        raise HarnessError(f"--valgrind={args.valgrind} runs the runner on the host HTP "
                           "simulator only: drop --device")
    return check_tool(args.valgrind)


def main(argv: list[str]) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        # A device gets the run's files pushed (a farm's phone is shared): confined, as export.
        run = load_run(args.run, confine=args.allow_dir if args.device else None)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sc = run.scenario
    recorded_soc = run.record.get("device", {}).get("soc") or None
    if sc.launch and not args.device:  # the host's tools; a device checks its own
        try:
            command_prefix(sc.launch)
        except LaunchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    artifacts = (args.artifacts_dir or Path(tempfile.mkdtemp(prefix="harness-replay-"))).resolve()
    try:
        session = open_session(args, recorded_soc, artifacts)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"replay of scenario {sc.name} from {run.directory}")
    print("ordering: " + ", ".join(s.describe() for s in sc.steps))
    if sc.launch:
        print(f"launched under: {shell_words(sc.launch)} RUNNER scenario.json (the recorded "
              "run's cause, applied again)")
    failure = run.recorded_failure()
    if failure:
        print(f"recorded: step {failure[0]} {failure[1]}: {failure[2]}")
    for path in gone_paths(sc):
        print(f"warning: the scenario names {path}, which no longer exists (a file of the "
              "recorded session's scratch directory, such as a weight cache?): this run does "
              "not start from what the recorded one had")
    made = run.record.get("checks")  # None: not recorded (then every check counts)
    if made is not None:
        redone = {name for name, _ in checks_for(sc)}
        skipped = [name for name in made if name not in redone]
        note = f"; not redone: {', '.join(skipped)} (with the test's tolerances)" if skipped else ""
        print(f"the test checked: {', '.join(made) or 'nothing of the run'}{note}")
    failed_runs = 0
    try:
        device = session.device
        problems = device.preflight()
        if problems:
            raise HarnessError(f"preflight of {device.info.serial} failed: " + "; ".join(problems))
        print(f"target: {device.info.header()}; runner {device.runner_description()}")
        for n in range(1, args.runs + 1):
            where = artifacts / f"run-{n}" if args.runs > 1 else artifacts
            result = run_once(ScenarioDriver(device, where, session.timeout), sc)
            failed = check(result)
            judged = [(name, line) for name, line in failed
                      if made is None or name in made or name in (NEMESIS_CHECK, VALGRIND_CHECK)]
            failed_runs += bool(judged)
            print(f"\n== run {n} of {args.runs}: {result.artifacts}")
            print(step_table(result))
            lines = runtime_lines(result)
            if lines:
                print("runtime's lines:\n" + lines)
            if result.failure_kind:
                print(result.crash_report())
            for name, line in failed:
                extra = "" if (name, line) in judged else " (not one its test made of this run)"
                print(f"FAILED {name}{extra}: {line}")
            first = next((f for f in run_failures(result) if f.step is not None), None)
            if failure and first is not None:
                same = "the same step as" if first.step == failure[0] else "another step than"
                print(f"first failing step: {first.step} {first.where}, {same} recorded")
            said = cache_branches(run, result)
            if said:
                print(said)
            for text in unreachable(result):
                print(f"forced interleaving unreachable on this runtime, judged on the run "
                      f"that happened: {text}")
            if not failed:
                print("every check holds: " + ", ".join(n for n, _ in checks_for(sc)) +
                      (f", {VALGRIND_CHECK}" if result.output.valgrind_xml else ""))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        session.close()
    print(f"\n{failed_runs} of {args.runs} run(s) failed a check; artifacts: {artifacts}")
    return 1 if failed_runs else 0

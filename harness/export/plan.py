"""What an exported test does, step by step, independent of the language it is written in.

Built from a recorded run (harness/replay.py): each step with the files it reads (renamed
into the export's `data/` directory), whether its error is allowed, and the live QNN context
count the reference model (harness/scenario/reference.py) predicts after it, which is what the
framework's live-count and isolation checks compare the trace with.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

from harness.protocol.nemesis import DLOPEN_POINTS, QNN_APIS, Fail, parse_rule
from harness.cache import file_sha256
from harness.programs.compile import uses_qnn
from harness.errors import HarnessError
from harness.protocol.scenario_file import DEFAULT_LOAD_MODE, VALUE_KINDS
from harness.scenario.reference import predict
from harness.replay import RunRecord
from harness.runner.launch import Launch, shell_words

# `parallel` sub-steps run on one thread each, released together (runner-protocol.md).
EXPORTED_OPS = ("load_module", "load_method", "execute", "unload_method", "destroy_module",
                "snapshot", "parallel")


class ExportError(HarnessError):
    """A run the standalone exports cannot express (CLI exit 2)."""


@dataclasses.dataclass(frozen=True)
class Tensor:
    file: str  # name in the data directory
    dtype: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PlanStep:
    index: int
    op: str
    module: str | None
    method: str | None
    description: str
    allowed: bool  # an error the framework expects (the test asserts it itself)
    contexts: int  # live QNN contexts expected after the step; -1: no QNN program
    program: str = ""  # the module's program, as named in the data directory
    load_mode: str = DEFAULT_LOAD_MODE  # load_module: Module::LoadMode by name
    inputs: tuple[Tensor, ...] = ()
    expected: tuple[Tensor, ...] = ()
    atol: float = 0.0
    rtol: float = 0.0
    substeps: tuple[PlanStep, ...] = ()  # of a parallel step: one thread each


@dataclasses.dataclass
class Plan:
    scenario: str
    source: Path  # the run directory it came from
    steps: list[PlanStep]
    files: dict[str, Path]  # data-directory name -> the file it is a copy of
    modules: list[str]  # in order of first load
    # The scenario's QNN nemesis rules: run.sh hands them to the interposer as the runner
    # would (HARNESS_QNN_NEMESIS); the C++ test also carries them itself, with the thread names
    # and step points rules on actors and steps need (`forced_rules`).
    nemesis: tuple[str, ...] = ()
    # The wrappers the recorded runner started under (harness.runner.launch: fiu-run, setpriv),
    # its cause: run.sh starts the test under them too.
    launch: tuple[Launch, ...] = ()

    def launched(self, command: str) -> str:
        """`command` (already quoted) as run.sh runs it: under the launch wrappers."""
        return f"{shell_words(self.launch)} {command}" if self.launch else command

    @property
    def launch_note(self) -> str:
        """A README paragraph on the cause the test runs under, with `COMMAND` to fill in;
        "" without one."""
        if not self.launch:
            return ""
        packages = ", ".join(dict.fromkeys(f"`{l.package}` (`{l.tool}`)" for l in self.launch))
        return ("The recorded runner started under a wrapper that is the branch's cause "
                "(harness/runner/launch.py), and `run.sh` runs the test under it too:\n\n"
                "```bash\nCOMMAND\n```\n\n"
                f"It needs the Debian package(s) {packages}; without one `run.sh` stops with "
                "exit 2 naming it. A wrapper acts on the whole process it starts (the Python "
                "interpreter too, for the Python test).\n")

    @property
    def forced_rules(self) -> list[tuple[int, str]]:
        """(index, text) of each rule that names a thread (an actor) or a runner step: only a
        program that names its threads after modules and marks its steps for the interposer,
        as the native runner and the C++ export do, makes them take effect."""
        out = []
        for i, text in enumerate(self.nemesis):
            rule = parse_rule(text)
            calls = (rule.call,) if isinstance(rule, Fail) else (rule.at, rule.until)
            if any(c.actor or c.api not in QNN_APIS + DLOPEN_POINTS for c in calls):
                out.append((i, text))
        return out

    @property
    def ordering(self) -> str:
        return ", ".join(s.description for s in self.steps)

    @property
    def allowed_note(self) -> str:
        allowed = [str(s.index) for s in self.steps if s.allowed]
        return f" (except step(s) {', '.join(allowed)}, expected to fail)" if allowed else ""

    def copy_data(self, directory: Path) -> None:
        """Copy every program and tensor into `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, source in self.files.items():
            shutil.copyfile(source, directory / name)


def identifier(name: str, taken: set[str]) -> str:
    """A C/Python identifier for a module name (names match [A-Za-z0-9_.-])."""
    base = "module_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    out, n = base, 1
    while out in taken:
        n += 1
        out = f"{base}_{n}"
    taken.add(out)
    return out


def build_plan(run: RunRecord) -> Plan:
    """The plan of a recorded run; ExportError for a step the exports do not express."""
    sc = run.scenario
    files: dict[str, Path] = {}
    names: dict[Path, str] = {}

    def data_name(path: Path, program: bool) -> str:
        path = Path(path)
        if path not in names:
            digest = file_sha256(path)[:12]
            stem = f"{path.stem}-{digest}{path.suffix}" if program else f"{digest}-{path.name}"
            names[path] = stem
            files[stem] = path
        return names[path]

    qnn = any(uses_qnn(m.backend) for m in sc.models.values())
    modules: list[str] = []

    ordinals = sc.ordinals()

    def plan_step(i: int, step, contexts: int, allowed: bool,
                  nth: int | None = None) -> PlanStep:
        if (step.op not in EXPORTED_OPS or step.args.get("backend_options") or
                step.args.get("feed") or step.args.get("shared_inputs") or
                step.args.get("decode")):
            what = ("backend options" if step.args.get("backend_options") else
                    "a feed (outputs passed back as inputs)" if step.args.get("feed") else
                    "a decode step (inputs built from the last execute)"
                    if step.args.get("decode") else
                    "inputs in QNN shared memory" if step.args.get("shared_inputs") else
                    f"a {step.op} step")
            raise ExportError(
                f"scenario {sc.name}: step {i} {step.describe()} has {what}; the standalone "
                f"exports express {', '.join(EXPORTED_OPS)} steps without backend options "
                "(`python -m harness replay` runs any scenario)")
        common = dict(index=i, op=step.op, module=step.module, method=step.method,
                      description=step.describe(), allowed=allowed, contexts=contexts)
        if step.module and step.module not in modules:
            modules.append(step.module)
        if step.op == "parallel":
            return PlanStep(**common, substeps=tuple(plan_step(i, sub, -1, allowed, k)
                                                     for sub, k in zip(step.substeps,
                                                                       ordinals[i])))
        if step.op == "snapshot":
            return PlanStep(**common)
        model = sc.models[step.module]
        extra: dict = {"program": data_name(model.pte, program=True)}
        if step.op == "load_module":
            extra["load_mode"] = step.args.get("load_mode") or DEFAULT_LOAD_MODE
        if step.op == "execute":
            ref = model.methods[step.method]
            extra["inputs"] = tuple(Tensor(data_name(t.file, False), t.dtype, tuple(t.shape))
                                    for t in (ref.variants[step.variant - 1][0]
                                              if step.variant else ref.inputs_at(nth)))
            # The exports compare tensors; a method with a non-tensor output (a metadata
            # method's value) is run there unchecked, as a runner without its values would.
            expected = sc.expected_for(step, nth)  # a stateful method's: of its n-th execute
            values = any(t.dtype in VALUE_KINDS for t in expected)
            extra["expected"] = () if values else tuple(
                Tensor(data_name(t.file, False), t.dtype, tuple(t.shape)) for t in expected)
            extra["atol"], extra["rtol"] = model.atol, model.rtol
        return PlanStep(**common, **extra)

    # A load expected to fail (an injected failure) loads nothing: a failed load must leave
    # no context behind.
    failed = frozenset(i for i in sc.allowed_errors if sc.steps[i].op == "load_method")
    steps = [plan_step(i, step, expected.contexts if qnn else -1, i in sc.allowed_errors,
                       ordinals[i][0])
             for i, (step, expected) in enumerate(zip(sc.steps, predict(sc, failed)))]
    return Plan(sc.name, run.directory, steps, files, modules, tuple(sc.qnn_nemesis),
                tuple(sc.launch))

"""`--format python`: the scenario as a Python script on the ExecuTorch pybindings.

`test_<scenario>.py` (from templates/standalone.py) holds `_load_program` objects as modules
and the method objects itself, so one method can be dropped while another stays (DESIGN:
`Program.load_method` caches methods for the program's lifetime); `run.sh` runs it.
"""

from __future__ import annotations

from pathlib import Path

from harness.export.plan import Plan, PlanStep
from harness.export.run_script import write_run_script

TEMPLATE = Path(__file__).with_name("templates") / "standalone.py"


def _specs(tensors) -> str:
    return "[" + ", ".join(f"({t.file!r}, {t.dtype!r}, {tuple(t.shape)!r})" for t in tensors) + "]"


def steps_source(plan: Plan) -> str:
    live: set[str] = set()
    out = ["    modules = {}  # module name -> its _load_program object",
           "    methods = {}  # module name -> {method name: the method object held}"]
    for s in plan.steps:
        out.append(f"\n    # step {s.index}: {s.description}")
        out.append(f"    begin({s.index}, {s.description!r})")
        out += ["    " + line for line in _statements(s, live)]
        out.append(f"    end({s.contexts})")
    return "\n".join(out)


def _statements(s: PlanStep, live: set[str]) -> list[str]:
    allowed = repr(s.allowed)
    if s.op == "snapshot":
        return []
    if s.op == "parallel":
        lines, names = [], []
        for j, sub in enumerate(s.substeps):
            names.append(f"sub_{s.index}_{j}")
            lines.append(f"def {names[-1]}():")
            lines += ["    " + line for line in _statements(sub, live)]
        return lines + [f"parallel([{', '.join(f'({sub.description!r}, {n})' for sub, n in zip(s.substeps, names))}])"]
    m = repr(s.module)
    path = f"os.path.join(DATA, {s.program!r})"
    if s.op == "load_module":
        live.add(s.module)
        return [f"modules[{m}] = attempt(lambda: _C._load_program({path}), "
                f"'load_module({s.module})', {allowed})", f"methods[{m}] = {{}}"]
    if s.module not in live:
        return [f"fail('module {s.module} is not live')"]
    load = (f"methods[{m}][{s.method!r}] = attempt(lambda: modules[{m}].load_method("
            f"{s.method!r}), 'load_method({s.method})', {allowed})")
    if s.op == "load_method":
        return [load]
    if s.op == "execute":
        return [f"if methods[{m}].get({s.method!r}) is None:", f"    {load}",
                f"if methods[{m}][{s.method!r}] is not None:",
                f"    execute(methods[{m}][{s.method!r}], {s.program!r}, {s.method!r}, "
                f"{_specs(s.inputs)},", f"            {_specs(s.expected)}, {s.atol!r}, "
                f"{s.rtol!r}, {allowed})"]
    if s.op == "unload_method":
        return [f"if methods[{m}].pop({s.method!r}, None) is None:",
                f"    fail('method {s.method} was not loaded')"]
    # destroy_module: drop every method object (in load order), then the module itself.
    live.discard(s.module)
    return [f"methods.pop({m}).clear()", f"modules.pop({m})"]


def render(plan: Plan) -> str:
    text = TEMPLATE.read_text()
    for key, value in {"TITLE": f"Standalone Python reproduction of HIL scenario {plan.scenario}",
                       "SOURCE": str(plan.source), "SCENARIO": plan.scenario,
                       "ORDERING": plan.ordering, "ALLOWED": plan.allowed_note,
                       "STEPS": steps_source(plan)}.items():
        text = text.replace(f"@@{key}@@", value)
    return text


def export_python(plan: Plan, out: Path, data: str = "data", copy_data: bool = True) -> Path:
    """Write the Python export into `out`; `data` is the data directory relative to it."""
    out.mkdir(parents=True, exist_ok=True)
    script = f"test_{plan.scenario}.py"
    (out / script).write_text(render(plan))
    if copy_data:
        plan.copy_data(out / data)
    write_run_script(out / "run.sh", f"Runs the Python (pybindings) test of scenario "
                     f"{plan.scenario}.", plan.scenario, plan.ordering,
                     f'repeat "$PYTHON" -u "$here/{script}" "$data"\n', data)
    (out / "README.md").write_text(
        f"# HIL scenario {plan.scenario} as a Python test\n\n"
        f"Ordering: {plan.ordering}\n\n"
        f"`{script}` performs it with the ExecuTorch pybindings "
        "(`executorch.extension.pybindings._C`, holding the method objects itself) and asserts "
        "what the framework asserted. Run:\n\n"
        "```bash\nbash run.sh            # exit 1 when a check fails\n```\n")
    return out

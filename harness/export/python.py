"""`--format python`: the scenario as a Python script on the ExecuTorch pybindings.

`test_<scenario>.py` (from templates/standalone.py, which holds what each step does, as the
framework's runners do) calls one function per step; it holds `_load_program` objects as
modules and the method objects itself, so one method can be dropped while another stays
(`Program.load_method` caches methods for the program's lifetime); `run.sh` runs it.
"""

from __future__ import annotations

from pathlib import Path

from harness.export.plan import Plan, PlanStep
from harness.export.run_script import write_run_script

TEMPLATE = Path(__file__).with_name("templates") / "standalone.py"


def _specs(tensors) -> str:
    return "[" + ", ".join(f"({t.file!r}, {t.dtype!r}, {tuple(t.shape)!r})" for t in tensors) + "]"


def steps_source(plan: Plan) -> str:
    out: list[str] = []
    for s in plan.steps:
        out.append(f"\n    # step {s.index}: {s.description}")
        out.append(f"    begin({s.index}, {s.description!r})")
        out += ["    " + line for line in _statements(s)]
        out.append(f"    end({s.contexts})")
    return "\n".join(out)


def _statements(s: PlanStep) -> list[str]:
    allowed = repr(s.allowed)
    if s.op == "snapshot":
        return []
    if s.op == "parallel":
        return ["parallel(["] + [
            f"    ({sub.description!r}, lambda: "
            f"{' '.join(line.strip() for line in _statements(sub))}),"
            for sub in s.substeps] + ["])"]
    m = repr(s.module)
    if s.op == "load_module":
        return [f"load_module({m}, {s.program!r}, {allowed})"]
    if s.op == "execute":
        return [f"execute({m}, {s.method!r}, {s.program!r}, {_specs(s.inputs)},",
                f"        {_specs(s.expected)}, {s.atol!r}, {s.rtol!r}, {allowed})"]
    if s.op == "destroy_module":
        return [f"destroy_module({m}, {allowed})"]
    return [f"{s.op}({m}, {s.method!r}, {allowed})"]  # load_method, unload_method


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

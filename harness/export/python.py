"""`--format python`: the scenario as a Python script on the ExecuTorch pybindings.

`test_<scenario>.py` (from templates/standalone.py, which holds what each step does, as the
framework's runners do) calls one function per step; it holds `_load_program` objects as
modules and the method objects itself, so one method can be dropped while another stays
(`Program.load_method` caches methods for the program's lifetime); `run.sh` runs it.
"""

from __future__ import annotations

from pathlib import Path

from harness.export.plan import ExportError, Plan
from harness.protocol.scenario_file import DEFAULT_LOAD_MODE
from harness.export.run_script import write_run_script
from harness.export.source import Language, fill, tensors

TEMPLATE = Path(__file__).with_name("templates") / "standalone.py"


def _literal(value) -> str:
    if isinstance(value, tuple):  # tensors
        return tensors(value, lambda t: repr((t.file, t.dtype, tuple(t.shape))), "[]")
    return repr(value)


def _parallel(subs: list[tuple[str, str]]) -> list[str]:
    return ["parallel(["] + [f"    ({d!r}, lambda: {c})," for d, c in subs] + ["])"]


LANGUAGE = Language("#", "", "    ", _literal, repr, _parallel)


def render(plan: Plan) -> str:
    return fill(TEMPLATE, plan, "Python", LANGUAGE)


def export_python(plan: Plan, out: Path, data: str = "data", copy_data: bool = True) -> Path:
    """Write the Python export into `out`; `data` is the data directory relative to it."""
    other = [s for s in plan.steps for s in (s.substeps or (s,))
             if s.op == "load_module" and s.load_mode != DEFAULT_LOAD_MODE]
    if other:
        raise ExportError(
            f"scenario {plan.scenario}: step {other[0].index} loads with load_mode "
            f"{other[0].load_mode}; the Python export runs on the pybindings, which read a "
            f"program file only as {DEFAULT_LOAD_MODE}: export it as cpp")
    forced = plan.forced_rules
    if forced:
        raise ExportError(
            f"scenario {plan.scenario}: nemesis rule(s) "
            + ", ".join(f"{i} '{text}'" for i, text in forced)
            + " name a thread or a runner step, which the Python export cannot carry: its "
            "threads have no names the interposer could match to a module (as the framework's "
            "Python runner), and the pybindings hold the GIL through load_method and execute, "
            "so a thread held inside one keeps the others from reaching the point it waits "
            "for; export it as cpp, which names its threads after modules and marks its steps "
            "as the native runner does (`python -m harness replay` runs it too)")
    out.mkdir(parents=True, exist_ok=True)
    script = f"test_{plan.scenario}.py"
    (out / script).write_text(render(plan))
    if copy_data:
        plan.copy_data(out / data)
    write_run_script(out / "run.sh", f"Runs the Python (pybindings) test of scenario "
                     f"{plan.scenario}.", plan.scenario, plan.ordering,
                     f'repeat "$PYTHON" -u "$here/{script}" "$data"\n', data, plan.nemesis,
                     plan.launch)
    (out / "README.md").write_text(
        f"# HIL scenario {plan.scenario} as a Python test\n\n"
        f"Ordering: {plan.ordering}\n\n"
        f"`{script}` performs it with the ExecuTorch pybindings "
        "(`executorch.extension.pybindings._C`, holding the method objects itself) and asserts "
        "what the framework asserted. Run:\n\n"
        "```bash\nbash run.sh            # exit 1 when a check fails\n```\n"
        + ("\n" + plan.launch_note.replace(
            "COMMAND", plan.launched(f"python3 -u {script} data")) if plan.launch else ""))
    return out

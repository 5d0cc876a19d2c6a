"""`--format bundle`: one `.tar.gz` to attach to an upstream issue.

It holds the run as recorded (scenario with paths relative to the bundle, the QNN trace, the
runtime's log, the runner's events and result), the environment (ExecuTorch and QNN versions,
SoC, device identity), the programs and inputs (a program above the size limit is referenced
by sha256 in programs.json instead), the C++ and Python exports over the same data, and a
README with the commands; its `run.sh` runs both exports and exits non-zero when either fails.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import tarfile
import tempfile
from pathlib import Path

from harness.cache import file_sha256
from harness.drive.driver import RUN_RECORD
from harness.export.cpp import export_cpp
from harness.export.plan import ExportError, Plan
from harness.export.python import export_python
from harness.export.run_script import write_run_script
from harness.replay import SCENARIO_FILE, RunRecord

RECORDED = {"qnn_trace.txt": "qnn_trace.txt", "runner.stderr": "runtime.log",
            "runner.stdout": "runner.stdout", "result.json": "result.json"}


def environment(run: RunRecord) -> dict:
    """What the run ran on: the recorded device and runtime, the QNN versions the trace's
    first line reports, and this host's packages."""
    api = next((line for line in _text(run.trace_file).splitlines() if " api " in f" {line} "), "")
    qnn = dict(token.split("=", 1) for token in api.split()[2:] if "=" in token)
    packages = {}
    for name in ("executorch", "torch", "onnxruntime-qnn", "executorch-qnn-hil"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    record = run.record
    return {"executorch": record.get("executorch") or packages.get("executorch"),
            "qnn": {"core_api": qnn.get("core"), "backend_api": qnn.get("backend"),
                    "provider": qnn.get("provider"), "abi_bridge": qnn.get("bridge"),
                    "libraries": record.get("device", {}).get("details", {}).get("qnn")},
            "soc": record.get("device", {}).get("soc"), "device": record.get("device", {}),
            "runner": record.get("runner"),
            "host": {"machine": platform.machine(), "system": platform.platform(),
                     "python": platform.python_version(), "packages": packages}}


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def export_bundle(run: RunRecord, plan: Plan, out: Path, max_program_bytes: int) -> Path:
    """Write `out/<scenario>.tar.gz` (and return it)."""
    name = f"hil-{plan.scenario}"
    with tempfile.TemporaryDirectory(prefix="harness-bundle-") as tmp:
        root = Path(tmp) / name
        data = root / "data"
        data.mkdir(parents=True)
        referenced = []
        for file, source in plan.files.items():
            size = source.stat().st_size
            if file.endswith(".pte") and size > max_program_bytes:
                referenced.append({"file": f"data/{file}", "sha256": file_sha256(source),
                                   "size": size, "recorded_at": str(source)})
            else:
                shutil.copyfile(source, data / file)
        if referenced:
            (root / "programs.json").write_text(json.dumps(referenced, indent=1))
        _write_scenario(run, plan, root)
        for recorded, kept in RECORDED.items():
            if (run.directory / recorded).is_file():
                shutil.copyfile(run.directory / recorded, root / kept)
        (root / "environment.json").write_text(json.dumps(environment(run), indent=1))
        export_cpp(plan, root / "cpp", data="../data", copy_data=False)
        try:
            export_python(plan, root / "python", data="../data", copy_data=False)
            python = 'bash "$here/python/run.sh" "$data" || status=$?\n'
        except ExportError as exc:  # a load mode or a forced rule it cannot carry: C++ only
            (root / "python").mkdir()
            (root / "python" / "README.md").write_text(f"No Python test: {exc}\n")
            python = ""
        write_run_script(root / "run.sh", "Runs the C++ and the Python test of the bundle.",
                         plan.scenario, plan.ordering,
                         'status=0\n' + python +
                         'bash "$here/cpp/run.sh" "$data" || status=$?\nexit "$status"\n',
                         nemesis=plan.nemesis)
        (root / "README.md").write_text(_readme(run, plan, name, referenced))
        out.mkdir(parents=True, exist_ok=True)
        archive = out / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(root, arcname=name)
    return archive


def _write_scenario(run: RunRecord, plan: Plan, root: Path) -> None:
    """scenario.json and replay.json with the bundle's own relative paths."""
    by_source = {str(source): f"data/{file}" for file, source in plan.files.items()}
    doc = run.scenario.to_json(lambda p: by_source.get(str(Path(p)), str(p)))
    (root / SCENARIO_FILE).write_text(json.dumps(doc, indent=1))
    record = {k: v for k, v in run.record.items() if k != "host_scenario"}  # scenario.json is
    record["models"] = {module: {**info, "pte": by_source.get(str(run.scenario.models[module].pte),
                                                              info.get("pte"))}
                        for module, info in record.get("models", {}).items()
                        if module in run.scenario.models}
    (root / RUN_RECORD).write_text(json.dumps(record, indent=1))


def _readme(run: RunRecord, plan: Plan, name: str, referenced: list) -> str:
    env = environment(run)
    failure = run.recorded_failure()
    seen = (f"step {failure[0]} {failure[1]}: {failure[2]}" if failure else
            "every step ok (a check over the QNN trace may still have failed: see below)")
    missing = "".join(f"\n- `{r['file']}` ({r['size']} bytes, sha256 `{r['sha256']}`), "
                      f"recorded at `{r['recorded_at']}`" for r in referenced)
    lines = [
        f"# ExecuTorch HIL scenario {plan.scenario}",
        "",
        f"Ordering: {plan.ordering}",
        "",
        f"Recorded: {seen}.",
        f"ExecuTorch {env['executorch']}; QNN core API {env['qnn']['core_api']}, backend API "
        f"{env['qnn']['backend_api']} ({env['qnn']['libraries']}); SoC {env['soc']}; device "
        f"{env['device'].get('kind')} {env['device'].get('serial')}.",
        "",
        "Reproduce (needs the installed `executorch` wheel, `numpy`, `torch`, and `cmake` >= "
        "3.28 with `ninja` for the C++ test; the QNN libraries from `QNN_SDK_ROOT` and "
        "`LD_LIBRARY_PATH`, or from executorch-qnn-hil's `python -m harness env`):",
        "",
        "```bash",
        f"tar xzf {name}.tar.gz && bash {name}/run.sh   # exit 1: the failure is back",
        "```",
        "",
        "`run.sh` runs `python/run.sh` (the ordering on the pybindings) and `cpp/run.sh` (the same "
        "against `executorch::extension::Module`, built with CMake); each also runs alone. "
        f"With executorch-qnn-hil: `python -m harness replay {name}/scenario.json`.",
        "",
        "Files: `scenario.json` (the framework's scenario, paths relative to it), "
        "`qnn_trace.txt` (every QNN backend/device/context call of the recorded run), "
        "`runtime.log` (the runtime's stderr, steps marked), `runner.stdout` (the step events), "
        "`result.json`, `environment.json`, `data/` (programs and tensors).",
    ]
    if plan.launch:  # the cause, as the command a reader types
        lines += ["", plan.launch_note.replace(
            "COMMAND", f"cd {name}\nbash cpp/run.sh   # builds cpp/build/test_{plan.scenario} "
            "and runs it so\n" + plan.launched(f"cpp/build/test_{plan.scenario} data"))
            .rstrip("\n")]
    said = _failing_step_log(run, failure[0]) if failure else ""
    if said and failure:
        lines += ["", f"What the runtime said during step {failure[0]} {failure[1]} (from "
                  "`runtime.log`):", "", "```", said, "```"]
    if referenced:
        lines += ["", "Programs left out for their size (put them into `data/` first):" + missing]
    return "\n".join(lines) + "\n"


def _failing_step_log(run: RunRecord, step: int, limit: int = 20) -> str:
    """The runtime's stderr lines of `step` in the recorded run (the runners mark steps)."""
    from harness.results.run import split_log_by_step

    lines = split_log_by_step(_text(run.stderr_file)).get(step, "").strip().splitlines()
    return "\n".join(lines[-limit:])

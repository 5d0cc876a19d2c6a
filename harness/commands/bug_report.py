"""`python -m harness bug-report ID --out DIR`: a folder upstream can run in a fresh venv.

For a known issue that is a runtime defect (`where: executorch` or `qnn`, its `reproduce:` id),
the folder holds everything a maintainer needs and nothing of this machine:

    requirements.txt  every package it uses, pinned (torch CPU, executorch, onnxruntime-qnn
                      for the QNN libraries; cmake and ninja where it builds C++)
    models/, export.py, programs.json
                      the model sources and the script that regenerates every program
                      (and the damaged one) with executorch's public lowering API
    programs/, inputs/ the programs as compiled here (SM8650, fp16 HTP) and their inputs
    reproduce         exit 1 while the bug is present, 0 on a fixed runtime, 2 when it cannot run
    control           the same script on a case that must work (exit 0)
    README.md         expected against actual in the runtime's own words, versions, pairing

`reproduce` and `control` run on the interpreter they were started with (`venv/bin/python
reproduce`, or `./reproduce` with the venv active) and find the QNN libraries at run time:
`QNN_SDK_ROOT` when set, else the installed onnxruntime-qnn wheel (QAIRT 2.49 from 2.5.0 reads
the HTP device config where executorch 1.5.1 writes it, so no ABI bridge stands between them).

    python -m harness bug-report --list
    python -m harness bug-report ID --out DIR [--no-run]
    python -m harness bug-report --all --out DIR     # every reproduction and control, a table;
                                                     # exit 1 unless each reproduces and each
                                                     # control passes
scripts/fresh_venv_check.py runs the folders in fresh venvs made from their requirements.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from harness.errors import HarnessError
from harness.storage import confined_file, unusable_out_dir
from harness.results.known_issues import BUG_CLASSES, KnownIssue, load_known_issues

SCRIPTS = Path(__file__).with_name("reproductions")
SOC = "SM8650"


@dataclasses.dataclass(frozen=True)
class Program:
    """A program a reproduction loads, by the file stem the script names."""

    stem: str
    model: str
    precision: str = "fp16"
    options: tuple[tuple[str, bool], ...] = ()
    damaged: bool = False  # its QNN context binary damaged (harness.programs.damage)
    spec_renamed: bool = False  # its qnn_compile_spec key renamed (harness.programs.damage)


@dataclasses.dataclass(frozen=True)
class Reproduction:
    id: str
    script: str  # in harness/commands/reproductions/
    programs: tuple[Program, ...]
    control: str  # what the control runs, in words
    native: bool = False  # builds cpp/module_repro.cpp (threads, backend options)
    extra: tuple[str, ...] = ()  # other files of reproductions/ it needs
    models: tuple[str, ...] = ()  # model sources it lowers itself (no compiled program)
    system: tuple[str, ...] = ()  # system packages it runs (valgrind), for the README
    also: str = ""  # another way to run it, for the README (`reproduce --valgrind`: ...)
    also_args: tuple[str, ...] = ()  # that way's arguments to `reproduce`: run, its output shown


REPRODUCTIONS = {r.id: r for r in (
    Reproduction("delegate-cache-module-lifetime", "delegate_cache_module_lifetime.py",
                 (Program("linear_relu", "linear_relu"), Program("mlp_tanh", "mlp_tanh")),
                 "two Modules of two different programs: destroying the first leaves the second "
                 "working"),
    Reproduction("delegate-cache-destroy-during-execute",
                 "delegate_cache_destroy_during_execute.py",
                 (Program("linear_relu", "linear_relu"), Program("mlp_tanh", "mlp_tanh")),
                 "B of another program destroyed while A executes: A keeps working", native=True),
    Reproduction("runtime-option-wrong-type-accepted", "runtime_option_wrong_type_accepted.py",
                 (), "XNNPACK given a string for its int option refuses it", native=True),
    Reproduction("init-failure-leaks-handles", "init_failure_leaks_handles.py",
                 (Program("linear_relu", "linear_relu"),
                  Program("linear_relu_damaged", "linear_relu", damaged=True)),
                 "the good program alone: its full teardown destroys context, device, backend"),
    Reproduction("log-level-change-frees-live-log-handle",
                 "log_level_change_frees_live_log_handle.py",
                 (Program("linear_relu", "linear_relu"), Program("mlp_tanh", "mlp_tanh"),
                  Program("mlp_tanh_debug", "mlp_tanh", options=(("debug_log", True),))),
                 "two programs of one log level: the handle outlives the backend",
                 extra=("qnn_calls_gdb.py",)),
    Reproduction("mutable-buffer-shared-across-modules", "mutable_buffer_shared_across_modules.py",
                 (Program("stateful_accumulator", "stateful_accumulator"),
                  Program("stateful_accumulator_xnn", "stateful_accumulator_xnn", "fp32")),
                 "the XNNPACK build of the same accumulator: each Module keeps its own state"),
    Reproduction("pybindings-abort-on-non-utf8-log", "pybindings_abort_on_non_utf8_log.py", (),
                 "a file whose header bytes are ASCII: _load_program raises RuntimeError"),
    Reproduction("destroy-leaks-qnn-manager", "destroy_leaks_qnn_manager.py",
                 (Program("linear_relu", "linear_relu"),
                  Program("xnn_linear_stack", "xnn_linear_stack", "fp32")),
                 "an XNNPACK program through the same cycles: no growth"),
    Reproduction("xnnpack-cache-full-disk-sigbus", "xnnpack_cache_full_disk_sigbus.py",
                 (Program("xnn_linear_stack", "xnn_linear_stack", "fp32"),),
                 "the same program with its cache on a tmpfs with room: forward runs",
                 native=True),
    Reproduction("mutable-buffer-read-uninitialised", "mutable_buffer_read_uninitialised.py",
                 (Program("stateful_accumulator", "stateful_accumulator"),
                  Program("stateful_accumulator_rt", "stateful_accumulator_rt")),
                 "the same accumulator with its buffer held by the runtime "
                 "(skip_mutable_buffer=True): the same first output whatever malloc left",
                 native=True, system=("valgrind",),
                 also="`venv/bin/python reproduce --valgrind` (needs valgrind; `reproduce` "
                      "and `control` do not): the first execute under valgrind's memcheck "
                      "(--track-origins=yes); exit 1 when libQnnHtp uses values created by the "
                      "delegate's `new (std::nothrow) char[]`",
                 also_args=("--valgrind",)),
    Reproduction("qnn-context-free-invalid-read", "qnn_context_free_invalid_read.py",
                 (Program("linear_relu", "linear_relu"),
                  Program("stateful_accumulator_xnn", "stateful_accumulator_xnn", "fp32")),
                 "an XNNPACK program through the same load, execute, destroy under memcheck: "
                 "no invalid read", native=True, system=("valgrind",)),
    Reproduction("delegate-maps-read-unlocked", "delegate_maps_read_unlocked.py",
                 (Program("linear_relu", "linear_relu"), Program("mlp_tanh", "mlp_tanh")),
                 "the same steps of the two Modules handed off under a mutex: no race",
                 native=True, system=("valgrind",)),
    Reproduction("delegate-without-compile-spec-crashes",
                 "delegate_without_compile_spec_crashes.py",
                 (Program("linear_relu", "linear_relu"),
                  Program("linear_relu_no_spec", "linear_relu", spec_renamed=True)),
                 "the same program with its compile spec: loads and executes", native=True),
    Reproduction("spill-fill-size-last-method-only", "spill_fill_size_last_method_only.py", (),
                 "prefill lowered alone: its delegate carries the size",
                 models=("prefill_decode_spill",)),
    Reproduction("shared-buffer-alloc-calls-null-off-android",
                 "shared_buffer_alloc_calls_null_off_android.py",
                 (Program("linear_relu_shared_buffer", "linear_relu",
                          options=(("shared_buffer", True),)),),
                 "the same program with its inputs on the heap executes"),
    Reproduction("xnnpack-missing-external-data-crashes",
                 "xnnpack_missing_external_data_crashes.py", (),
                 "the same XNNPACK program loaded with its .ptd: executes (Python API and C++ "
                 "Module alike)", native=True, models=("linear_relu",)),
)}


class BugReportError(HarnessError):
    pass


def entries_for(reproduction: str, issues: list[KnownIssue]) -> list[KnownIssue]:
    return [i for i in issues if i.reproduce == reproduction]


def requirements(repro: Reproduction) -> str:
    """requirements.txt: what a fresh venv needs to run (and regenerate) the folder."""
    from harness.qnn.releases import UNBRIDGED
    from harness.runtime import current

    executorch = current().version.split("+")[0]  # the release the programs were made with
    lines = [
        "# A fresh venv (x86_64 Linux; checked with Python 3.11):",
        "#   python3 -m venv venv && venv/bin/pip install -r requirements.txt \\",
        "#       --extra-index-url https://download.pytorch.org/whl/cpu",
        "# torch: the CPU build. From PyPI alone torch==2.13.0 resolves to the CUDA build",
        "# (several GB of nvidia-* wheels); the index above has torch==2.13.0+cpu.",
        "torch==2.13.0",
        f"executorch=={executorch}",
        "# The QNN libraries (x86_64 QAIRT 2.49: libQnnHtp.so runs the HTP simulator) unless",
        "# QNN_SDK_ROOT names a QAIRT SDK; 2.49 needs no ABI bridge with executorch 1.5.1",
        "# (2.51, onnxruntime-qnn 2.7.0, does: 'unknown custom config socModel 0').",
        f"onnxruntime-qnn=={UNBRIDGED}",
        "numpy",
    ]
    if repro.native:
        lines += ["# cpp/module_repro.cpp: executorch's CMake package needs CMake >= 3.28",
                  f"cmake=={CMAKE}", f"ninja=={NINJA}"]
    return "\n".join(lines) + "\n"


CMAKE, NINJA = "4.4.5", "1.13.2"
"""The build tools from PyPI a native folder pins (a C++ compiler is the system's)."""

LAUNCHER = '''#!/usr/bin/env python3
"""{id}: {what}; 2 when it cannot run.

Runs on the interpreter it was started with: `venv/bin/python {name}`, or `./{name}` with
the venv active. QNN libraries: QNN_SDK_ROOT when set, else the installed onnxruntime-qnn."""
import os
import sys

script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{script}")
os.execv(sys.executable, [sys.executable, script{extra}, *sys.argv[1:]])
'''


def write_folder(repro: Reproduction, out: Path, qnn_root: Path) -> None:
    """Compile the programs with the libraries of `qnn_root` and lay the folder out."""
    from harness.programs.compile import compile_model
    from harness.programs.damage import damaged_context_binary, without_qnn_compile_spec
    from harness.programs.models import get_model
    from harness.qnn.sdk import discover

    roots = source_roots()
    sources = [SCRIPTS / name for name in ("common.py", repro.script, *repro.extra)]
    if repro.programs:
        sources.append(SCRIPTS / "export.py")
    native = [SCRIPTS / "cpp" / name for name in ("module_repro.cpp", "CMakeLists.txt")]
    models = sorted({get_model(p.model).path for p in repro.programs} |
                    {get_model(name).path for name in repro.models})
    for source in sources + (native if repro.native else []) + models:
        confined_file(source, roots)  # every one before the first is written
    out.mkdir(parents=True, exist_ok=True)
    for source in sources:
        shutil.copy(source, out / source.name)
    if models:
        (out / "models").mkdir(exist_ok=True)
        for model_path in models:
            shutil.copy(model_path, out / "models" / model_path.name)
    if repro.native:
        (out / "cpp").mkdir(exist_ok=True)
        for source in native:
            shutil.copy(source, out / "cpp" / source.name)
    previous = os.environ.get("QNN_SDK_ROOT")
    os.environ["QNN_SDK_ROOT"] = str(qnn_root)  # compile with the libraries the folder runs on
    try:
        sdk = discover()
        for program in repro.programs:
            model = compile_model(get_model(program.model), SOC, program.precision, sdk,
                                  options=dict(program.options))
            pte = confined_file(model.pte, roots)
            (out / "programs").mkdir(exist_ok=True)
            target = out / "programs" / f"{program.stem}.pte"
            if program.damaged:
                target.write_bytes(damaged_context_binary(pte.read_bytes()))
            elif program.spec_renamed:
                target.write_bytes(without_qnn_compile_spec(pte.read_bytes()))
            else:
                shutil.copy(pte, target)
            _save_inputs(model, program.stem, out / "inputs", roots)
    finally:
        if previous is None:
            os.environ.pop("QNN_SDK_ROOT", None)
        else:
            os.environ["QNN_SDK_ROOT"] = previous
    if repro.programs:
        (out / "programs.json").write_text(json.dumps(
            [{"stem": p.stem, "model": p.model, "soc": SOC, "precision": p.precision,
              "options": dict(p.options), "damaged": p.damaged,
              **({"spec_renamed": True} if p.spec_renamed else {})} for p in repro.programs],
            indent=1) + "\n")
    (out / "requirements.txt").write_text(requirements(repro))
    for name, extra in (("reproduce", ""), ("control", ", \"--control\"")):
        path = out / name
        what = ("exits 1 while the bug is present, 0 on a fixed runtime" if not extra
                else f"the control: {repro.control} (exit 0)")
        path.write_text(LAUNCHER.format(id=repro.id, what=what, name=name, script=repro.script,
                                        extra=extra))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def scrub(out: Path) -> None:
    """Remove what a run leaves in the folder that names this machine: bytecode (it records
    its source's absolute path) and the C++ build (its CMake cache)."""
    for junk in [*out.rglob("__pycache__"), *out.glob("cpp/build-*")]:
        if junk.is_dir():
            shutil.rmtree(junk, ignore_errors=True)
    for log in out.glob("cpp/build-*.log"):
        log.unlink(missing_ok=True)


def local_paths() -> list[str]:
    """This machine's directories a folder must not name: home, the harness cache, this
    checkout (longest first, so the most specific is replaced first)."""
    from harness.cache import cache_root

    repo = Path(__file__).resolve().parents[2]
    paths = {str(Path.home()), str(cache_root()), str(cache_root().resolve()), str(repo),
             sys.prefix, sys.base_prefix}
    return sorted((p for p in paths if len(p) > 1), key=len, reverse=True)


def local_paths_in(out: Path) -> list[str]:
    """Each file of the folder that names one of this machine's directories (local_paths), as
    "file: path"; bytes too (a program or a build product could carry one)."""
    needles = [(p, p.encode()) for p in local_paths()]
    found = []
    for path in sorted(out.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            hits = [p for p, b in needles if b in data]
            if hits:
                found.append(f"{path.relative_to(out)}: {hits[0]}")
    return found


def anonymized(text: str, out: Path) -> str:
    """A run's output with the folder's own path as `.` and this machine's directories named
    by what they are."""
    text = text.replace(str(out.resolve()), ".").replace(str(out), ".")
    for path in local_paths():
        text = text.replace(path, "<local>")
    return text


def source_roots() -> list[tuple[str, Path]]:
    """Where a folder's files may be copied from (harness.storage.confined_file): the shipped
    reproductions, the project's model sources and the harness cache, which holds the programs
    compiled for it and their inputs; the folder is made to be attached to a public issue."""
    from harness.cache import cache_root
    from harness.config.paths import MODELS_DIR

    return [("the reproductions", SCRIPTS.resolve()), ("the model sources", MODELS_DIR.resolve()),
            ("the harness cache", cache_root().resolve())]


def _save_inputs(model, stem: str, directory: Path, roots: list[tuple[str, Path]]) -> None:
    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    directory.mkdir(exist_ok=True)
    method = model.methods.get("forward") or next(iter(model.methods.values()))
    sets = [(stem, method.inputs)]
    sets += [(f"{stem}_v{n + 1}", inputs) for n, (inputs, _) in enumerate(method.variants)]
    for name, tensors in sets:
        for i, tensor in enumerate(tensors):
            source = confined_file(tensor.file, roots)
            data = np.fromfile(source, dtype=numpy_dtype(tensor.dtype)).reshape(tensor.shape)
            np.save(directory / f"{name}_{i}.npy", data)  # the Python scripts
            data.tofile(directory / f"{name}_{i}.bin")  # the C++ program


def run_one(path: Path, timeout: float = 600, python: str | None = None, cwd: Path | None = None,
            extra_env: dict[str, str] | None = None,
            args: tuple[str, ...] = ()) -> tuple[int, str, float]:
    """Run `reproduce` or `control` with `python` (default: this interpreter) in a clean
    environment (no harness variables, no interposer, plus `extra_env`): (exit status, its
    output, seconds)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HARNESS_", "EXECUTORCH_HIL_")) and k not in ("QNN_SDK_ROOT",
                                                                             "LD_PRELOAD")}
    env.pop("LD_LIBRARY_PATH", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra_env or {})
    started = time.monotonic()
    try:
        proc = subprocess.run([python or sys.executable, str(path), *args], capture_output=True,
                              text=True, errors="replace", timeout=timeout, env=env,
                              cwd=cwd or path.parent)
        return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started
    except subprocess.TimeoutExpired:
        return 2, f"timed out after {timeout:.0f} s", time.monotonic() - started


def versions(qnn_version: str) -> list[str]:
    """The versions the folder was made and checked with, as versions (no paths)."""
    import platform
    from importlib import metadata

    from harness.runtime import current

    runtime = current()
    torch = metadata.version("torch")
    return [f"executorch {runtime.version}" + (f" (git {runtime.git_revision})"
                                               if runtime.git_revision else ""),
            f"torch {torch}", f"QNN libraries: {qnn_version}",
            f"Python {platform.python_version()}, {platform.machine()} {platform.system()}"]


def readme(repro: Reproduction, entries: list[KnownIssue], pairing: str, qnn_version: str,
           bug: tuple[int, str] | None, control: tuple[int, str] | None,
           fixed: bool = False, also: tuple[int, str] | None = None) -> str:
    title = entries[0].id if entries else repro.id
    lines = [f"# {title}", ""]
    for entry in entries:
        lines += [f"Known issue `{entry.id}` (defect in: {entry.where}), executorch "
                  f"{', '.join(entry.executorch)}.", "", entry.reason, ""]
    native = ("; `cmake`, `ninja` (from `requirements.txt`) and a C++ compiler build "
              "`cpp/module_repro.cpp` on first run against the installed executorch's CMake "
              "package" if repro.native else "")
    gdb = "; `gdb` (a system package) records the QNN calls" if "qnn_calls_gdb.py" in \
        repro.extra else ""
    gdb += "".join(f"; {name} (a system package: apt-get install {name.split()[0]})"
                   for name in repro.system)
    lines += ["## Run it", "", "```bash",
              "python3 -m venv venv",
              "venv/bin/pip install -r requirements.txt "
              "--extra-index-url https://download.pytorch.org/whl/cpu",
              "venv/bin/python reproduce   # exit 1 while the bug is present, 0 on a fixed "
              "runtime, 2 when it cannot run",
              f"venv/bin/python control     # {repro.control}: exit 0",
              "```", ""] + ([repro.also + ".", ""] if repro.also else []) + [
              "Nothing of the framework that made this folder" + native + gdb + ". The QNN "
              "libraries are found at run time: `QNN_SDK_ROOT` (a QAIRT SDK's "
              "`lib/x86_64-linux-clang`) when set, else the installed `onnxruntime-qnn` wheel.",
              ""]
    if repro.programs:
        lines += [f"The programs in `programs/` were compiled for {SOC} (fp16 HTP unless "
                  "`programs.json` says otherwise) from the model sources in `models/`; "
                  "`venv/bin/python export.py` regenerates every one of them (the damaged one "
                  "too) and their inputs in `inputs/` with executorch's public lowering API, "
                  "with the QNN libraries you run (on another QAIRT, regenerate first).", ""]
    if repro.models:
        lowering = bool(entries) and all(i.where == "export" for i in entries)
        lines += ["The script lowers " + ", ".join(f"`models/{m}.py`" for m in repro.models)
                  + " itself with executorch's public lowering API (no program is shipped: "
                  + ("the lowering is what it judges)." if lowering else
                     "each run makes the program it loads from the model source)."), ""]
    if fixed:
        lines += ["On a runtime with the delegate cache isolated per Module (upstream's \"Isolate "
                  "cached delegates by Module lifetime\", PR 24462) `reproduce` must exit 0: "
                  "it does under a model of that fix at the backend registry (per-Module cache "
                  "keys and user counts; not the PR's code), with which the framework checks "
                  "it.", ""]
    lines += ["## Versions", ""] + [f"- {v}" for v in versions(qnn_version)] + [
        f"- SDK pairing: {pairing}", ""]
    also_name = f"reproduce {' '.join(repro.also_args)}"
    for name, outcome in (("reproduce", bug), ("control", control), (also_name, also)):
        if outcome is None:
            continue
        status, text = outcome
        lines += [f"## `./{name}` here: exit {status}", "", "```", text.strip()[-4000:], "```", ""]
    return "\n".join(lines)


def make(repro_id: str, out: Path, run: bool = True, qnn_root: Path | None = None) -> dict:
    """Write the folder for `repro_id` into `out` (and run it once unless `run` is False):
    {"id", "reproduce": status, "control": status, "seconds"}."""
    from harness.qnn.pairing import session_pairing
    from harness.qnn.releases import release_root
    from harness.runtime import qairt_version
    from harness.qnn.sdk import QnnSdk

    if repro_id not in REPRODUCTIONS:
        raise BugReportError(_unknown(repro_id))
    repro = REPRODUCTIONS[repro_id]
    root = qnn_root or release_root()
    write_folder(repro, out, root)
    version = (root / "sdk.yaml").read_text().strip() if (root / "sdk.yaml").is_file() else root.name
    qairt = qairt_version(QnnSdk("QNN_SDK_ROOT", root, (), root, version))
    libraries = version.split("(", 1)[1].rstrip(")") if "(" in version else version
    pairing = session_pairing(qairt, libraries, "none (no interposer)").describe()
    bug = control = also = None
    result: dict[str, object] = {"id": repro_id}
    if run:
        # The libraries the folder was compiled with, as a maintainer without an SDK would have
        # them: QNN_SDK_ROOT names their layout (the project's interpreter has 2.7.0 installed).
        env = {"QNN_SDK_ROOT": str(root)}
        status, text, seconds = run_one(out / "reproduce", extra_env=env)
        bug = (status, anonymized(text, out))
        cstatus, ctext, cseconds = run_one(out / "control", extra_env=env)
        control = (cstatus, anonymized(ctext, out))
        if repro.also_args:
            astatus, atext, _ = run_one(out / "reproduce", extra_env=env, args=repro.also_args,
                                        timeout=1800)
            also = (astatus, anonymized(atext, out))
            result["also"] = astatus
        result.update(reproduce=status, control=cstatus, seconds=round(seconds + cseconds, 1))
        scrub(out)
    issues = load_known_issues()
    entries = entries_for(repro_id, issues)
    (out / "README.md").write_text(readme(repro, entries, pairing, version, bug, control,
                                          fixed_by_seed(repro_id, issues), also))
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    leaked = local_paths_in(out)
    if leaked:
        raise BugReportError(f"the folder {out} names this machine's directories, which a "
                             f"maintainer does not have: {'; '.join(leaked[:5])}")
    return result


def fixed_by_seed(repro_id: str, issues: list[KnownIssue]) -> bool:
    """Whether every entry resting on this reproduction is of a root the seed fixes (the root of
    the entries the fix model is meant to fix: the delegate cache). By root, not by entry: the
    shared mutable buffer is the delegate cache's too, though its suite tests still fail on the
    fix model for the uninitialised buffer, a defect of its own its reproduction leaves out."""
    from harness.runtime.variants import fixed_by

    roots = {i.root for i in issues if fixed_by("fix-model", i.id) and i.root}
    entries = entries_for(repro_id, issues)
    return bool(entries) and all(i.root in roots for i in entries)


def resolve_reproduction(name: str, issues: list) -> str | None:
    """The reproduction of a known issue's id, or of a defect's root (its entries' first
    shipped reproduction), or None when `name` is neither."""
    by_id = {i.id: i for i in issues}
    if name in by_id:
        return by_id[name].reproduce
    shipped = sorted({i.reproduce for i in issues if i.root == name and i.reproduce},
                     key=lambda r: (r not in REPRODUCTIONS, r))
    return shipped[0] if shipped else None


def _unknown(repro_id: str) -> str:
    issues = load_known_issues()
    named = sorted({i.reproduce for i in issues if i.reproduce})
    missing = [r for r in named if r not in REPRODUCTIONS]
    text = f"no reproduction {repro_id!r}; there are: {', '.join(sorted(REPRODUCTIONS))}"
    if repro_id in missing:
        text = (f"the known issues name the reproduction {repro_id!r}, but none ships yet: its "
                "evidence is the framework's trace (see the entry's reason)")
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness bug-report",
        description="Write a standalone reproduction of a known runtime defect (executorch "
                    "alone: no harness runner, no interposer) into a folder.")
    parser.add_argument("id", nargs="?", help="the reproduction id (a known issue's reproduce:), "
                        "a known issue's id or a defect's root (resolved to its reproduction)")
    parser.add_argument("--out", type=Path, help="the folder to write (empty or absent)")
    parser.add_argument("--list", action="store_true", help="list the reproductions")
    parser.add_argument("--all", action="store_true",
                        help="every reproduction into OUT/<id>, each run with its control")
    parser.add_argument("--no-run", action="store_true", help="write the folder only")
    parser.add_argument("--qnn-sdk-root", type=Path,
                        help="QNN libraries to compile and run with (default: QAIRT 2.49 from "
                             "onnxruntime-qnn 2.5.0, fetched once)")
    args = parser.parse_args(argv)
    issues = load_known_issues()
    if args.list:
        for repro_id in sorted({i.reproduce for i in issues if i.reproduce} | set(REPRODUCTIONS)):
            entries = entries_for(repro_id, issues)
            names = ", ".join(i.id for i in entries)
            roots = sorted({i.defect for i in entries})
            state = "" if repro_id in REPRODUCTIONS else "  (none ships yet)"
            print(f"{repro_id} (defect {', '.join(roots) or '-'}): {names}{state}")
        return 0
    if args.id and args.id not in REPRODUCTIONS:
        resolved = resolve_reproduction(args.id, issues)
        if resolved is not None:
            print(f"bug-report: {args.id} -> reproduction {resolved}", file=sys.stderr)
            args.id = resolved
    if args.out is None or (not args.all and not args.id):
        parser.error("give an ID and --out DIR (or --all --out DIR, or --list)")
    unusable = unusable_out_dir(args.out)
    if unusable:
        print(f"error: {unusable}", file=sys.stderr)
        return 2
    try:
        if not args.all:
            result = make(args.id, args.out, not args.no_run, args.qnn_sdk_root)
            print(json.dumps(result))
            if args.no_run:
                return 0
            return 0 if result["reproduce"] == 1 and result["control"] == 0 else 1
        rows = []
        for repro_id in sorted(REPRODUCTIONS):
            result = make(repro_id, args.out / repro_id, not args.no_run, args.qnn_sdk_root)
            rows.append(result)
            if args.no_run:
                print(f"{repro_id}: written", flush=True)
                continue
            print(f"{repro_id}: reproduce exit {result['reproduce']} (1: reproduced), control "
                  f"exit {result['control']} (0: passes), {result['seconds']} s", flush=True)
        if args.no_run:  # scripts/fresh_venv_check.py runs them, each in a fresh venv
            (args.out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
            return 0
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bugs = [i for i in issues if i.where in BUG_CLASSES]
    without = sorted({i.id for i in bugs if i.reproduce not in REPRODUCTIONS})
    if without:
        print("runtime defects whose reproduction does not ship yet (trace evidence only): "
              + ", ".join(without))
    bad = [r["id"] for r in rows if r["reproduce"] != 1 or r["control"] != 0]
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("every reproduction reproduces and every control passes" if not bad else
          f"not as expected: {', '.join(bad)}")
    return 1 if bad else 0

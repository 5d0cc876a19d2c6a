"""Run every bug-report folder as an upstream maintainer would: a fresh venv made from the
folder's own requirements.txt, the folder copied to another directory, `reproduce` (must exit 1:
the bug is present on the released runtime) and `control` (must exit 0) run from a third one
with that venv's interpreter and nothing of this machine's environment (no QNN_SDK_ROOT, no
LD_LIBRARY_PATH, no PYTHONPATH, no harness variables).

    python scripts/fresh_venv_check.py FOLDERS [--work DIR] [--fix-model]

FOLDERS is what `python -m harness bug-report --all --out FOLDERS` wrote. Folders with identical
requirements share one venv (pip's wheel cache makes a second venv fast, but not free).

With --fix-model, every folder's `reproduce` also runs under the backend-registry model of the
seed's fix (docs/runtime-variants.md), built against the venv's own executorch and preloaded as
runner processes get it (LD_PRELOAD and HARNESS_RUNTIME_VARIANT=fix-model). A folder of a root
the seed fixes (the root of the entries harness.runtime.variants.fixed_by names: the delegate
cache) must exit 0 there, which shows its reproduction judges that defect and not something the
fix leaves; every other folder must still exit 1 (the fix, and the model, leave those defects).

Exit 0 when every folder gave what it must; 1 otherwise. The table and timings are printed and
written to WORK/fresh-venv.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.results.known_issues import load_known_issues
from harness.runtime.variants import LIB_NAME, WRAPPER_ENV, fixed_by, wrapper_command

KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TERM", "USER")
"""The only variables of this environment a folder's run sees (a maintainer's shell has these)."""


def clean_env(venv: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a shell with the venv activated and nothing of the harness."""
    env = {k: v for k, v in os.environ.items() if k in KEEP}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def make_venv(venv: Path, requirements: Path, log: Path) -> float:
    """A venv with the folder's requirements, by the base interpreter's venv module and pip (the
    machine's pip configuration: its indexes and wheel cache); seconds it took."""
    started = time.monotonic()
    base = getattr(sys, "_base_executable", sys.executable)
    with open(log, "w") as out:
        for cmd in ([base, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                     "--disable-pip-version-check", "-r", str(requirements)]):
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{log.read_text()[-3000:]}")
    return time.monotonic() - started


def fix_model_wrapper(venv: Path, out: Path) -> Path:
    """The backend-registry wrapper built against the venv's executorch (its headers and
    libexecutorch.so), as harness.runtime.variants builds it for the runtime under test."""
    python = venv / "bin" / "python"
    prefix = Path(subprocess.run(
        [str(python), "-c", "import executorch; print(list(executorch.__path__)[0])"],
        capture_output=True, text=True, check=True, env=clean_env(venv)).stdout.strip())
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise SystemExit("g++ is needed to build the backend-registry wrapper")
    out.mkdir(parents=True, exist_ok=True)
    lib = out / LIB_NAME
    proc = subprocess.run(wrapper_command(lib, prefix / "include", prefix / "lib", compiler),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"building the registry wrapper failed:\n{proc.stderr[-3000:]}")
    return lib


def run(venv: Path, folder: Path, name: str, cwd: Path,
        extra: dict[str, str] | None = None) -> tuple[int, float, str]:
    started = time.monotonic()
    try:
        proc = subprocess.run([str(venv / "bin" / "python"), str(folder / name)], cwd=cwd,
                              capture_output=True, text=True, errors="replace", timeout=900,
                              env=clean_env(venv, extra))
        status, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        status, text = 2, "timed out after 900 s"
    return status, time.monotonic() - started, text


def seed_fixed(repro_id: str) -> bool:
    """Whether every entry resting on this reproduction is of a root the seed fixes (the root
    of the entries the fix model is meant to fix: the delegate cache). By root, not by entry:
    the shared mutable buffer is the delegate cache's too, though its tests still fail on the
    fix model for the uninitialised buffer, a defect of its own that its reproduction leaves
    out."""
    issues = load_known_issues()
    roots = {i.root for i in issues if fixed_by("fix-model", i.id) and i.root}
    entries = [i for i in issues if i.reproduce == repro_id]
    return bool(entries) and all(i.root in roots for i in entries)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, help="what bug-report --all --out wrote")
    parser.add_argument("--work", type=Path, help="venvs, copies and logs (default: a temp dir)")
    parser.add_argument("--fix-model", action="store_true",
                        help="also run every reproduce under the model of the seed's fix")
    parser.add_argument("--keep-venvs", action="store_true",
                        help="keep the venvs (about 2 GB each) under WORK; removed by default")
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in args.folders.glob("*/requirements.txt"))
    if not folders:
        print(f"no folder with a requirements.txt under {args.folders}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="fresh-venv-"))
    work.mkdir(parents=True, exist_ok=True)
    elsewhere = work / "elsewhere"  # the working directory: neither the folder nor its copy
    elsewhere.mkdir(exist_ok=True)
    venvs: dict[str, Path] = {}
    timings: dict[str, float] = {}
    wrappers: dict[Path, Path] = {}
    rows, bad = [], []
    started = time.monotonic()
    for folder in folders:
        text = (folder / "requirements.txt").read_text()
        key = hashlib.sha256(text.encode()).hexdigest()[:12]
        if key not in venvs:
            venv = work / f"venv-{key}"
            seconds = make_venv(venv, folder / "requirements.txt", work / f"venv-{key}.log")
            venvs[key], timings[f"venv {key}"] = venv, round(seconds, 1)
            print(f"venv {key} from {folder.name}/requirements.txt: {seconds:.0f} s", flush=True)
        venv = venvs[key]
        copy = work / "copies" / folder.name
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        row: dict[str, object] = {"id": folder.name, "venv": key}
        for name, want in (("reproduce", 1), ("control", 0)):
            status, seconds, output = run(venv, copy, name, elsewhere)
            row[name], row[f"{name}_s"] = status, round(seconds, 1)
            (work / f"{folder.name}.{name}.log").write_text(output)
            if status != want:
                bad.append(f"{folder.name} {name}: exit {status} (want {want}); "
                           f"{work / f'{folder.name}.{name}.log'}")
        if args.fix_model:
            if venv not in wrappers:
                wrappers[venv] = fix_model_wrapper(venv, work / f"wrapper-{key}")
            status, seconds, output = run(venv, copy, "reproduce", elsewhere, {
                "LD_PRELOAD": str(wrappers[venv]), WRAPPER_ENV: "fix-model"})
            want = 0 if seed_fixed(folder.name) else 1
            row["fix_model"], row["fix_model_s"] = status, round(seconds, 1)
            (work / f"{folder.name}.fix-model.log").write_text(output)
            if status != want:
                bad.append(f"{folder.name} reproduce under the fix model: exit {status} (want "
                           f"{want}); {work / f'{folder.name}.fix-model.log'}")
        rows.append(row)
        fixed = f", fix model {row['fix_model']}" if "fix_model" in row else ""
        print(f"{folder.name}: reproduce {row['reproduce']} ({row['reproduce_s']} s), control "
              f"{row['control']} ({row['control_s']} s){fixed}", flush=True)
    total = round(time.monotonic() - started, 1)
    (work / "fresh-venv.json").write_text(json.dumps(
        {"rows": rows, "venvs": timings, "seconds": total}, indent=1) + "\n")
    print(f"{len(rows)} folders, {len(venvs)} venv(s) "
          f"({', '.join(f'{k}: {v} s' for k, v in timings.items())}), {total} s in all")
    for line in bad:
        print(f"NOT AS EXPECTED: {line}")
    if not args.keep_venvs:
        for venv in venvs.values():
            shutil.rmtree(venv, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m harness export RUN_DIR --format cpp|python|bundle --out DIR`.

A failing ordering as something upstream can run without this framework: a C++ test against
`extension::Module` (harness/export/cpp.py), a Python script on the pybindings (python.py),
or a `.tar.gz` to attach to an issue (bundle.py). Each is built from the run's plan
(plan.py) and has a `run.sh` that exits non-zero when the test fails.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.errors import HarnessError
from harness.storage import unusable_out_dir

FORMATS = ("cpp", "python", "bundle")


def export(run_target: Path, fmt: str, out: Path, max_program_mb: float = 8.0,
           allow: Sequence[Path] = ()) -> Path:
    """Export the run at `run_target` in `fmt` into `out`; the path written (the bundle's
    .tar.gz for `bundle`). Every format copies the run's files, so the run is read confined
    (harness.replay.load_run): only regular files of the run directory, the harness cache
    and the `allow` directories, no symbolic links, or an UnsafeFileError before anything is
    written."""
    from harness.export.plan import build_plan
    from harness.replay import load_run

    run = load_run(run_target, confine=allow)
    plan = build_plan(run)
    if fmt == "cpp":
        from harness.export.cpp import export_cpp

        return export_cpp(plan, out)
    if fmt == "python":
        from harness.export.python import export_python

        return export_python(plan, out)
    from harness.export.bundle import export_bundle

    return export_bundle(run, plan, out, int(max_program_mb * 1024 * 1024))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness export",
        description="Export one recorded scenario run as a standalone test (cpp, python) or "
                    "a bundle for an upstream issue (bundle); each has a run.sh.")
    parser.add_argument("run", type=Path, metavar="RUN_DIR|scenario.json")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--out", required=True, type=Path, metavar="DIR")
    parser.add_argument("--max-program-mb", type=float, default=8.0, metavar="MB",
                        help="bundle: programs larger than this are referenced by sha256 "
                             "instead of included (default 8)")
    parser.add_argument("--allow-dir", action="append", default=[], type=Path, metavar="DIR",
                        help="also copy files from DIR (repeatable): a program of your own "
                             "(--pte) and the inputs its session made lie outside the run "
                             "directory and the harness cache, the only places copied from "
                             "otherwise")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    unusable = unusable_out_dir(args.out)
    if unusable:
        print(f"error: {unusable}", file=sys.stderr)
        return 2
    try:
        written = export(args.run, args.format, args.out, args.max_program_mb,
                         args.allow_dir)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # --out was usable when checked: a full disk, a directory removed
        print(f"error: cannot write the export to --out {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"exported scenario to {written}")
    if args.format != "bundle":
        print(f"run it: bash {written / 'run.sh'}")
    return 0

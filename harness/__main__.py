"""Command line: `python -m harness <command>`.

  build-runner ...   build the native lifecycle runner (--host; --arm64-linux with the
                     aarch64-linux-gnu cross toolchain; --android with an NDK; the device
                     targets build the QNN interposer too)
  compare OLD NEW [--time-threshold 0.5] [--time-min-ms 10] [--memory-threshold-kb 8192]
                     two runs' results.json (pytest --hil-report DIR): new failures, fixed
                     known issues (XPASS(strict)), load/execute time and peak memory beyond
                     thresholds; exit 1 on a regression
  doctor             check the QNN libraries, build the interposer and the runner, show the choice
                     (of the runtime EXECUTORCH_HIL_EXECUTORCH_PREFIX names, else the installed one)
  env                shell `export` lines for the QNN libraries the harness found, so a script of
                     yours can lower to QNN: eval "$(python -m harness env)"
  inspect PTE... [--json]
                     what each .pte was compiled for: methods and their input/output specs,
                     delegates, backends, SoC(s), QNN compile options (multi-context,
                     spill-fill size, HTP arch, fp16), mutable buffers and who holds them
                     (the runtime or a delegate); --json prints a JSON list instead
  replay RUN_DIR|scenario.json [--device SERIAL | --simulator] [--runs N]
                     run one recorded scenario again (a failed test's run directory) and check
                     it as the test did; exit 1 when a check fails again, 0 when all hold
  export RUN_DIR --format cpp|python|bundle --out DIR
                     the scenario as a standalone test upstream can run (C++ against
                     extension::Module, Python with the pybindings) or as a .tar.gz bundle for
                     an issue; each with a run.sh that exits non-zero when the test fails
  matrix --executorch V [--executorch V ...] [--qnn onnxruntime-qnn==X ...] [--out DIR] [pytest args]
                     the pytest args on each runtime, each in its own cached venv from the
                     registry; prints a known issue / test x runtime table, writes matrix.json
                     and matrix.html (harness/commands/matrix.py)
  mutate [--variant stock|fix-model|fix-model-serialized] [--mutant NAME ...] [--sample N]
         [--out DIR] [--list] [pytest args]
                     the suites once unmutated and once per injected defect of
                     harness/runtime/mutants.yaml: which mutants they kill, which a known issue
                     masks, which survive; the score, mutate.json and mutate.html
  bug-report ID --out DIR | --all --out DIR | --list
                     a known runtime defect as a folder upstream runs with executorch alone
                     (no harness runner, no interposer): `reproduce` exits 1 while the bug is
                     present, `control` 0 (harness/commands/bug_report.py)
  workspaces --device SERIAL [--adb-server HOST:PORT] [--remove [--all]]
                     the workspaces sessions left on a phone (size, owner, whether that owner is
                     gone by the device lease's rules); --remove removes those whose owner is
                     gone, --all also kept ones and an earlier version's (docs/phone.md)
  validate-configs [FILE...] [--kind soc|simulator|farm|labgrid|known-issues]
                     load every file under device_configs/ and report every error; with
                     FILEs, validate those (kind told by place and keys, or --kind), stopping
                     at the first bad one
"""

from __future__ import annotations

import sys


def doctor() -> int:
    from harness.errors import HarnessError
    from harness.qnn.sdk import built_against_core_api, discover
    from harness.runner.select import choose_runner
    from harness.runtime import current

    try:
        sdk = discover()
        runtime = current()  # EXECUTORCH_HIL_EXECUTORCH_PREFIX, else the installed wheel
        print(f"{runtime.describe()} (built against QNN core API {built_against_core_api()})")
        print(f"QNN libraries: {sdk.source} at {sdk.real_lib_dir}")
        print(f"QNN_SDK_ROOT for children: {sdk.root}")
        choice = choose_runner("auto")
        print(f"runner: {choice.kind} {choice.binary or ''}".rstrip())
        if choice.notice:
            print(f"notice: {choice.notice}")
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def env() -> int:
    import shlex

    from harness.errors import HarnessError
    from harness.qnn.sdk import discover

    from harness.qnn.interposer_build import DLOPEN_SHIM_ENV, build_dlopen_shim

    try:
        variables = discover().environment()
        # Not preloaded here: an exported test's run.sh preloads it when a rule needs it.
        variables[DLOPEN_SHIM_ENV] = str(build_dlopen_shim())
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for key, value in variables.items():  # the interposer's settings too: it stands first
        print(f"export {key}={shlex.quote(value)}")
    return 0


def inspect(args: list[str]) -> int:
    """Print what each program was compiled for; exit 1 if any file is bad (the good ones are
    still printed, so one broken path does not hide the others)."""
    import json
    from pathlib import Path

    from harness.errors import ModelError
    import tempfile

    from harness.programs.llm import decode_loop_plan, is_llm_export, llm_layout
    from harness.programs.pte import ProgramInfo
    from harness.programs.pte_reader import read_program
    from harness.programs.user import describe_inputs

    as_json = "--json" in args
    paths = [a for a in args if a != "--json"]
    unknown = [a for a in paths if a.startswith("-")]
    if unknown or not paths:
        print(f"usage: python -m harness inspect PROGRAM.pte [PROGRAM.pte ...] [--json]"
              f"{'; unknown option ' + ', '.join(unknown) if unknown else ''}", file=sys.stderr)
        return 2
    infos: list[ProgramInfo] = []
    failed = False
    for path in paths:
        try:
            # In this process: a CLI run pays for the executorch imports once, not per file.
            info = read_program(Path(path), in_process=True)
        except ModelError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed = True
            continue
        if not as_json:
            print(("\n" if infos else "") + info.describe(), flush=True)
            print("\n".join(["  inputs the suites feed:"] +
                            [f"    {line}" for line in describe_inputs(info)]), flush=True)
            if is_llm_export(info):  # what a decode loop would read from it, or what is missing
                try:
                    layout = llm_layout(info)
                    print(f"  {layout.describe()}", flush=True)
                    with tempfile.TemporaryDirectory() as scratch:  # the plan writes its inputs
                        loop = decode_loop_plan(info, layout, Path(scratch))
                    print(f"  decode loop: {loop.describe()}", flush=True)
                except ModelError as exc:
                    print(f"  LLM export, no decode loop: {exc}", flush=True)
        infos.append(info)
    if as_json:
        print(json.dumps([info.to_json() for info in infos], indent=1))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "build-runner":
        from harness.runner.builds.cli import main as build_main

        return build_main(rest)
    if command == "compare":
        from harness.results.compare import main as compare_main

        return compare_main(rest)
    if command == "doctor":
        return doctor()
    if command == "env":
        return env()
    if command == "inspect":
        return inspect(rest)
    if command == "replay":
        from harness.replay import main as replay_main

        return replay_main(rest)
    if command == "export":
        from harness.export import main as export_main

        return export_main(rest)
    if command == "bug-report":
        from harness.commands.bug_report import main as bug_report_main

        return bug_report_main(rest)
    if command == "mutate":
        from harness.commands.mutate import main as mutate_main

        return mutate_main(rest)
    if command == "matrix":
        from harness.commands.matrix import main as matrix_main

        return matrix_main(rest)
    if command == "workspaces":
        from harness.commands.workspaces import main as workspaces_main

        return workspaces_main(rest)
    if command == "validate-configs":
        from harness.commands.configs import main as validate_main

        return validate_main(rest)
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

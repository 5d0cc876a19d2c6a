"""The `run.sh` every export directory has: the environment the test needs, then its commands.

The QNN libraries come from the caller's QNN_SDK_ROOT and LD_LIBRARY_PATH when set, else from
this framework (`python -m harness env`: the HTP simulator of the onnxruntime-qnn wheel behind
the QNN call-trace interposer, harness/qnn/sdk.py). The trace goes to the export directory's
qnn_trace.txt (HARNESS_QNN_TRACE), which the exported test reads for its live-context check.
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

from harness.runner.launch import Launch, missing_tool, shell_words

PRELUDE = """#!/usr/bin/env bash
# {what}
# Scenario {scenario}: {ordering}
# Exits non-zero when the test fails (a check failed, or the build did not work).
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
PYTHON="${{PYTHON:-{python}}}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
# The QNN libraries: QNN_SDK_ROOT and LD_LIBRARY_PATH as given, or the HTP simulator with the
# QNN call-trace interposer as executorch-qnn-hil lays them out.
if [ -z "${{QNN_SDK_ROOT:-}}" ]; then
  qnn_env=$("$PYTHON" -m harness env) || {{
    echo "run.sh: no QNN libraries: set QNN_SDK_ROOT and LD_LIBRARY_PATH to them, or install" \
         "executorch-qnn-hil (python -m harness env) for the HTP simulator's" >&2
    exit 2
  }}
  eval "$qnn_env"
fi
# The interposer appends every QNN call here; the test counts live contexts from it.
export HARNESS_QNN_TRACE="${{HARNESS_QNN_TRACE:-$here/qnn_trace.txt}}"
data="${{1:-$here/{data}}}"
LAUNCH=()  # the wrappers the test starts under (the recorded run's cause), set below
# RUNS=N: run the test up to N times, each a new process with an empty trace, stopping at the
# first failure (a race the framework met in some runs only).
repeat() {{
  local n status=0
  for n in $(seq 1 "${{RUNS:-1}}"); do
    : > "$HARNESS_QNN_TRACE"
    ${{LAUNCH[@]+"${{LAUNCH[@]}}"}} "$@" 2>&1 || status=$?
    if [ "$status" != 0 ]; then
      echo "run $n of ${{RUNS:-1}} failed (exit $status)"
      return "$status"
    fi
  done
  echo "${{RUNS:-1}} run(s) passed"
}}
"""


def shim_rule(text: str) -> bool:
    """Whether nemesis rule `text` names a point only the dlopen shim makes (a dlopen of a QNN
    library, a libQnnSystem.so call) rather than the interposer."""
    from harness.protocol.nemesis import DLOPEN_POINTS, QNN_SYSTEM_TABLE, Fail, parse_rule

    rule = parse_rule(text)
    calls = (rule.call,) if isinstance(rule, Fail) else (rule.at, rule.until)
    return any(c.api in DLOPEN_POINTS or c.api in QNN_SYSTEM_TABLE for c in calls)


def launch_lines(launch: tuple[Launch, ...]) -> str:
    """run.sh's lines for the launch wrappers: each tool there or exit 2 naming its Debian
    package, then LAUNCH, which `repeat` puts before the test's command. Every word quoted."""
    if not launch:
        return ""
    text = ("# The recorded runner started under this wrapper, the branch's cause "
            "(harness/runner/launch.py).\n")
    for wrapper in launch:
        message = "run.sh: " + missing_tool(wrapper)
        text += (f"command -v {shlex.quote(wrapper.tool)} >/dev/null || "
                 f"{{ echo {shlex.quote(message)} >&2; exit 2; }}\n")
    return text + f"LAUNCH=({shell_words(launch)})\n"


def write_run_script(path: Path, what: str, scenario: str, ordering: str, body: str,
                     data: str = "data", nemesis: tuple[str, ...] = (),
                     launch: tuple[Launch, ...] = ()) -> Path:
    """Write `run.sh` (executable): the prelude, then `body` (which may use $here, $data,
    $PYTHON, and `repeat COMMAND...` to run the test). `nemesis`: the scenario's QNN nemesis
    rules, for the interposer (HARNESS_QNN_NEMESIS), as the harness's runner passes them;
    `launch`: the wrappers `repeat` starts the test under."""
    import sys

    text = PRELUDE.format(what=what, scenario=scenario, ordering=ordering,
                          python=shlex.quote(sys.executable), data=data)
    text += launch_lines(launch)
    if nemesis:
        text += ("# The scenario's QNN failures and holds, made by the interposer "
                 "(harness/protocol/nemesis.py).\n"
                 f"export HARNESS_QNN_NEMESIS={shlex.quote(';'.join(nemesis))}\n")
    shimmed = [rule for rule in nemesis if shim_rule(rule)]
    if shimmed:
        names = "; ".join(shimmed).replace("'", "")
        text += (
            "# Rules on the runtime's dlopen of a QNN library or on libQnnSystem.so's calls act\n"
            "# only with the framework's dlopen shim preloaded (harness/qnn/interposer.c).\n"
            "if [ -z \"${HARNESS_QNN_DLOPEN_SHIM:-}\" ]; then\n"
            f"  echo 'run.sh: rule(s) {names} need the dlopen shim of executorch-qnn-hil:' \\\n"
            "       'unset QNN_SDK_ROOT to use the framework (python -m harness env), or set' \\\n"
            "       'HARNESS_QNN_DLOPEN_SHIM to the path that command prints' >&2\n"
            "  exit 2\n"
            "fi\n"
            'export LD_PRELOAD="$HARNESS_QNN_DLOPEN_SHIM${LD_PRELOAD:+ $LD_PRELOAD}"\n')
    text += body
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path

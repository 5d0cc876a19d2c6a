"""Running the native runner through a device's POSIX shell: the shell code and the parsing of
what comes back, shared by every device kind reached by a shell (adb, ssh).

A run's command prints markers (`HARNESS_PID`, `HARNESS_START`, `HARNESS_EXIT`) and, after
markers carrying a per-run nonce, the runner's stderr and the QNN trace, so one round trip
brings back all of a run; a timeout kills the runner's process group (`kill_tree`) and every
process still in its run directory (`kill_in_directory`).
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from harness import output_limit
from harness.protocol.wire import read_events
from harness.scenario import Scenario

q = shlex.quote


def kill_tree(pid: str) -> str:
    """Shell code that kills process group `pid` (a runner leads its own) and then the pid
    itself, in case it did not; `pid` is digits or a shell variable (`$p`)."""
    return f"kill -9 -{pid} 2>/dev/null; kill -9 {pid} 2>/dev/null"


def kill_in_directory(directory: PurePosixPath, below: bool = False) -> str:
    """Shell code that kills (group, then pid) every process whose working directory is
    `directory` (with `below`, any directory under it): one `ls` of the cwd links."""
    pattern = '*" -> $d/"*' if below else '*" -> $d"'
    return (f"d={q(str(directory))}; ls -l /proc/[0-9]*/cwd 2>/dev/null | "
            f"while read -r line; do case \"$line\" in {pattern}) "
            "p=${line%/cwd -> *}; p=${p##*/proc/}; "
            f"{kill_tree('$p')};; esac; done")


def running_step(scenario: Scenario, stdout: str) -> str:
    """The step a run was in when its output stopped: the first one without a step event."""
    done = {e.get("index") for e in read_events(stdout) if e.get("event") == "step"}
    for i, step in enumerate(scenario.steps):
        if i not in done:
            last = max((j for j in done if isinstance(j, int)), default=None)
            after = (f" (last completed: step {last} {scenario.steps[last].describe()})"
                     if last is not None and last < len(scenario.steps) else " (no step completed)")
            return f"step {i} {step.describe()}{after}"
    return "teardown (every step had completed)"


def print_outputs(stderr_file: str, trace_file: str, nonce: str) -> str:
    """Shell code (to append to a command) printing the runner's stderr and the QNN trace after
    markers carrying `nonce` (hex), each preceded by a newline of its own, each within the
    output limit (head and tail around the line that says what was left out), and after the
    end marker both files' sizes (`output_sizes`)."""
    limit = output_limit.limit_bytes()
    head, tail = limit // 2, limit - limit // 2

    def capped(path: str) -> str:
        return (f"s=$(wc -c < {path} 2>/dev/null || echo 0); s=${{s##* }}; sizes=\"$sizes $s\"; "
                f"if [ \"${{s:-0}}\" -gt {limit} ] 2>/dev/null; then head -c {head} {path}; "
                "printf '\\n[harness: output limit reached: %s bytes were written, the middle "
                f"%s bytes are omitted here]\\n' \"$s\" $((s - {limit})); tail -c {tail} {path}; "
                f"else cat {path} 2>/dev/null; fi")

    return (f"; sizes=; echo; echo HARNESS_STDERR_{nonce}; {capped(stderr_file)}; "
            f"echo; echo HARNESS_TRACE_{nonce}; {capped(trace_file)}; "
            f"echo; echo HARNESS_END_{nonce}; echo HARNESS_SIZES_{nonce} $sizes")


def output_sizes(text: str, nonce: str) -> tuple[int, int]:
    """The sizes of the runner's stderr and the QNN trace on the device (0, 0 when unknown)."""
    marker = f"\nHARNESS_SIZES_{nonce}"
    i = text.rfind(marker)
    if i < 0:
        return 0, 0
    numbers = [int(t) for t in text[i + len(marker):].split()[:2] if t.isdigit()]
    return (numbers + [0, 0])[0], (numbers + [0, 0])[1]


def split_outputs(text: str, nonce: str) -> tuple[str, tuple[str, str] | None]:
    """(what came before the markers, (stderr, trace) between them); None for the second when
    the markers are not all there (the stream was cut, or the command printed none)."""
    begin, middle, end = (f"\nHARNESS_{m}_{nonce}\n" for m in ("STDERR", "TRACE", "END"))
    i = text.find(begin)
    if i < 0:
        return text, None
    j = text.find(middle, i + len(begin))
    k = text.find(end, j + len(middle)) if j >= 0 else -1
    if k < 0:
        return text[:i], None
    return text[:i], (text[i + len(begin):j], text[j + len(middle):k])


def scenario_line(text: str) -> tuple[str, str]:
    """The run's output without its leading `HARNESS_SCENARIO <written|kept>` line, and that
    word ("" when the line is not there)."""
    head, _, rest = text.partition("\n")
    if head.startswith("HARNESS_SCENARIO "):
        return rest, head.split()[1] if len(head.split()) > 1 else ""
    return text, ""


def marker(text: str, name: str) -> str:
    """The value after the first `<name> ` line of the run's own output, or ""."""
    return next((l.split()[1] for l in text.splitlines()
                 if l.startswith(name + " ") and len(l.split()) > 1), "")


def to_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)

"""The CMake command lines every target shares, running them with a build log, and reading back
what a configure linked.

One command builder (`cmake_commands`: Ninja, Release, the nlohmann/json headers) serves the
host, arm64-linux and Android builds, which add only their own definitions, so the three
targets cannot drift apart; the names of what a build directory holds live here too.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from harness import ccache
from harness.runner.builds import RunnerBuildError, tools
from harness.runner.builds.inputs import runner_source_dir

RUNNER_NAME = "harness-runner"
"""File name of the runner executable inside a build directory."""

INTERPOSER_NAME = "libQnnHtp.so"
"""File name of the QNN interposer inside a device build directory."""

DLOPEN_SHIM_NAME = "libharness_qnn_dlopen.so"
"""File name of the dlopen shim (the interposer's source built with -DHARNESS_DLOPEN_SHIM)
inside a device build directory: harness.qnn.interposer_build's name for it."""

COMPONENTS_FILE = "harness-runner-components.txt"
"""Written by the runner's CMake configure: the ExecuTorch components linked."""

COMPONENT_BACKENDS = {
    "backend_qnn": "QnnBackend",
    "backend_xnnpack": "XnnpackBackend",
    "backend_openvino": "OpenvinoBackend",
}
"""The backend each linked component registers (the name `--list-backends` prints)."""

_LOG_TAIL_LINES = 40


def cmake_commands(build_dir: Path, source_dir: Path | None, extra: list[str]) -> list[list[str]]:
    """Configure (Ninja, Release, ccache as the compilers' launcher where it is installed, the
    nlohmann/json headers, plus `extra` definitions) and build lines; one source for every
    target."""
    src = Path(source_dir) if source_dir is not None else runner_source_dir()
    cmake, ninja = tools.build_tools()
    build = str(Path(build_dir))
    json_dir = tools.nlohmann_json_include_dir() or tools.NLOHMANN_JSON_DIRS[-1]
    configure = [cmake, "-S", str(src), "-B", build, "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release",
                 *ccache.cmake_definitions(),
                 f"-DHARNESS_NLOHMANN_JSON_INCLUDE_DIR={json_dir}", *extra]
    return [configure, [cmake, "--build", build, "--config", "Release"]]


def log_tail(log: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a build log (what a failure's message shows)."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no build log)"
    return "\n".join(text[-lines:])


ERROR_WORDS = ("CMake Error", "fatal error:", "error:", "Error ", "cannot find", "undefined reference")


def failure_reason(tail: str, where: Path) -> str:
    """The line of a failed build's output that says why (a full disk first, named), or "":
    a fallback to the Python runner must say this before anything else."""
    from harness.storage import full_disk_reason

    full = full_disk_reason(tail, where)
    if full:
        return full
    for words in ERROR_WORDS:
        for line in tail.splitlines():
            if words in line:
                return line.strip()[:300]
    return ""


def missing_output_error(what: str, output: Path, log: Path) -> RunnerBuildError:
    """The error of a build that finished without producing `output`."""
    return RunnerBuildError(
        f"{what} finished without producing {output}\n"
        f"build log: {log}\n--- last lines ---\n{log_tail(log)}"
    )


def run_commands(commands: list[list[str]], log: Path, what: str) -> None:
    """Runs the command lines in order, appending their output to ``log``, with the compiler
    cache's environment (harness.ccache: its directory under the harness cache);
    raises RunnerBuildError with the log's tail on the first failure. A full disk met by the
    build's own log (before any compiler could say it) is that RunnerBuildError too, naming the
    storage, not an OSError from inside the build."""
    import errno

    from harness.storage import full_disk_reason

    try:
        _run_logged(commands, log, what)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        reason = full_disk_reason(str(exc), log.parent)
        raise RunnerBuildError(f"{what} failed: {reason}", reason=reason) from None


def _run_logged(commands: list[list[str]], log: Path, what: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = ccache.environment()
    with log.open("w") as out:
        for cmd in commands:
            out.write("$ " + shlex.join(cmd) + "\n")
            out.flush()
            try:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False,
                                      env=env)
            except OSError as exc:
                raise RunnerBuildError(
                    f"{what}: cannot run {cmd[0]}: {exc}. Install cmake and ninja "
                    "(pip install 'cmake>=3.28' ninja)."
                ) from exc
            if proc.returncode != 0:
                out.flush()
                tail = log_tail(log)
                raise RunnerBuildError(
                    f"{what} failed (exit {proc.returncode}) running: {shlex.join(cmd)}\n"
                    f"build log: {log}\n--- last lines ---\n{tail}",
                    reason=failure_reason(tail, log.parent))


def build_components(build_dir: Path) -> tuple[str, ...]:
    """The ExecuTorch components the runner in `build_dir` links (from its configure)."""
    try:
        text = (Path(build_dir) / COMPONENTS_FILE).read_text()
    except OSError:
        return ()
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def build_backends(build_dir: Path) -> tuple[str, ...]:
    """The backends the runner in `build_dir` registers, from what its configure linked."""
    return tuple(COMPONENT_BACKENDS[c] for c in build_components(build_dir)
                 if c in COMPONENT_BACKENDS)

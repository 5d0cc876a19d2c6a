"""A runner under valgrind: the command prefix, the project's suppressions and the slow-down.

valgrind is the tool here because it needs no rebuild: the ExecuTorch wheel and the QNN
libraries run as shipped (ExecuTorch cannot be rebuilt with ASan on this host), and its XML
output (`--xml=yes`, one file per run) is a documented, stable format the harness parses
(harness.results.valgrind). A fork of a fork server cannot start under valgrind, so a runner
under valgrind is always a new process.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.errors import HarnessError

TOOLS = ("memcheck", "helgrind", "drd")
SUPPRESSIONS = Path(__file__).resolve().parents[1] / "qnn" / "valgrind.supp"
XML_NAME = "valgrind.xml"
SLOWDOWN = 50
"""How much longer a run takes under valgrind (about 20-50x on the simulator): the runner
timeout is multiplied by it unless --runner-timeout is given."""

# Per tool: memcheck reports definite leaks only (the simulator's and the loader's reachable
# blocks at exit are not defects) and where an uninitialised value came from; the thread
# checkers see every thread the runner and QNN start.
TOOL_ARGS: dict[str, tuple[str, ...]] = {
    "memcheck": ("--leak-check=full", "--show-leak-kinds=definite",
                 "--errors-for-leak-kinds=definite", "--track-origins=yes"),
    "helgrind": (),
    "drd": (),
}


def check_tool(tool: str) -> str:
    """`tool` when it is one valgrind runs and valgrind is installed; else one clear error."""
    if tool not in TOOLS:
        raise HarnessError(f"--valgrind must be one of {', '.join(TOOLS)}, not {tool!r}")
    if shutil.which("valgrind") is None:
        raise HarnessError(f"--valgrind={tool}: valgrind is not installed on this host "
                           "(Debian/Ubuntu: apt-get install valgrind)")
    return tool


def command_prefix(tool: str, xml_file: Path) -> list[str]:
    """valgrind's arguments before the runner's command: `tool`, its XML report written to
    `xml_file`, the project's suppressions, and frames deep enough to reach the runner's own
    (QNN's teardown stacks are 20-30 frames deep)."""
    return ["valgrind", f"--tool={tool}", "--xml=yes", f"--xml-file={xml_file}",
            f"--suppressions={SUPPRESSIONS}", "--num-callers=50", "--trace-children=no",
            "--child-silent-after-fork=yes", *TOOL_ARGS[tool]]

"""A runner started under a wrapper that gives it its cause, as data.

Some branches are reached only when the runner process starts under a tool: libfiu's `fiu-run`
(POSIX calls failing with a chosen errno) or util-linux `setpriv` (root without the
capabilities that bypass file permissions). The wrapper and its arguments are a `Launch`
record: the scenario carries it (`Scenario.launch`), the run record keeps it (replay.json
`launch`), replay starts the runner under it again, and the exports' run.sh and README say the
same command. A record names a tool of `TOOLS` and plain string arguments, nothing else: the
tool is looked up on the target's PATH, and the Debian package that has it is named when it is
missing.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

from harness.errors import HarnessError

TOOLS = {"fiu-run": "fiu-utils", "setpriv": "util-linux"}
"""The wrappers a scenario may launch under -> the Debian package that installs each."""


class LaunchError(HarnessError):
    """A launch record that names no known wrapper, or a wrapper the target lacks."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """`tool args... <runner command>`: the runner started under `tool`."""

    tool: str
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tool not in TOOLS:
            raise LaunchError(f"launch tool {self.tool!r} is not one of {', '.join(TOOLS)}")
        if not all(isinstance(a, str) and "\0" not in a for a in self.args):
            raise LaunchError(f"launch {self.tool}: every argument is a string without NUL, "
                              f"got {list(self.args)!r}")

    @property
    def package(self) -> str:
        return TOOLS[self.tool]

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": list(self.args)}

    @classmethod
    def from_json(cls, doc: Any) -> Launch:
        if not isinstance(doc, dict) or set(doc) - {"tool", "args"} or \
                not isinstance(doc.get("args", []), list):
            raise LaunchError(f"a launch record is {{\"tool\": NAME, \"args\": [STRING, ...]}}, "
                              f"got {doc!r}")
        return cls(str(doc.get("tool")), tuple(doc.get("args", [])))

    def words(self) -> list[str]:
        return [self.tool, *self.args]


def fiu_run(*commands: str) -> Launch:
    """libfiu's POSIX preload with `commands` enabled before the program starts (`fiu-run -x
    -c COMMAND`), remote control off (`-f ''`: no FIFO left in /tmp)."""
    args: list[str] = ["-x", "-f", ""]
    for command in commands:
        args += ["-c", command]
    return Launch("fiu-run", tuple(args))


def parse_launches(docs: Any, where: str) -> list[Launch]:
    """The launch records of a run record (`where` names it in the error)."""
    if docs is None:
        return []
    if not isinstance(docs, list):
        raise LaunchError(f"{where}: launch is a list of records, got {docs!r}")
    try:
        return [Launch.from_json(d) for d in docs]
    except LaunchError as exc:
        raise LaunchError(f"{where}: {exc}") from None


def missing_tool(launch: Launch) -> str:
    """The one-line error of a target without `launch`'s tool."""
    return (f"the scenario's runner starts under {launch.tool} ({shlex.join(launch.words())}), "
            f"which is not installed here: install the Debian package {launch.package} "
            f"(apt-get install {launch.package})")


def command_prefix(launches: Sequence[Launch]) -> list[str]:
    """The host command prefix starting a program under `launches` (outermost first), each
    tool resolved on PATH; LaunchError naming the package when one is missing."""
    prefix: list[str] = []
    for launch in launches:
        path = shutil.which(launch.tool)
        if path is None:
            raise LaunchError(missing_tool(launch))
        prefix += [path, *launch.args]
    return prefix


def shell_words(launches: Iterable[Launch]) -> str:
    """The launches as one shell command prefix, every word quoted (shlex.quote)."""
    return shlex.join([w for launch in launches for w in launch.words()])

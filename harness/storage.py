"""The host's storage as the harness meets it: a full disk, and where a command may write.

Whether a failed run met a full disk: one reading of the free space where the run writes,
taken only after a run failed, so that a disk that filled mid-run is named (ENOSPC) in the
verdict instead of leaving a bare "the run did not finish". A filesystem counts as full when
less than `FULL_KB` is available: a runner's scenario file, trace and output need a few hundred
kilobytes, and a phone's reserved blocks are not usable by the shell user.

Whether an output directory (`--out DIR` of export, bug-report, matrix, mutate) is usable:
checked once before a command writes anything (`unusable_out_dir`), so a regular file, a path
through a file or a name too long for the filesystem is one usage error, not a traceback from
the first write.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

FULL_KB = 512


def full_note(where: str, available_kb: int, total_kb: int) -> str:
    """The verdict's words for a full filesystem ("" when it is not full)."""
    if available_kb >= FULL_KB:
        return ""
    return (f"the storage holding {where} is full (ENOSPC: {available_kb} kB free of "
            f"{total_kb} kB), so the run could not write its files; free space and run again")


def parse_df(output: str) -> tuple[int, int] | None:
    """(available kB, total kB) from `df -k PATH` (toybox on Android, coreutils on Linux); None
    when the output is not df's."""
    lines = [l.split() for l in output.strip().splitlines() if l.strip()]
    if len(lines) < 2 or not lines[0] or lines[0][0] != "Filesystem":
        return None
    row = lines[-1] if len(lines[-1]) >= 5 else [t for line in lines[1:] for t in line]  # a long name wraps
    numbers = [t for t in row[1:] if t.isdigit()]
    if len(numbers) < 3:
        return None
    total, _used, available = (int(n) for n in numbers[:3])
    return available, total


def host_full_note(path: Path) -> str:
    """full_note for the host filesystem holding `path` ("" when it is not full or unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return ""
    return full_note(str(path), st.f_bavail * st.f_frsize // 1024, st.f_blocks * st.f_frsize // 1024)


def _shown(path: Path, limit: int = 120) -> str:
    """`path` for a message: a name of thousands of bytes is cut, its length said."""
    text = str(path)
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...{text[-limit // 4:]} ({len(os.fsencode(text))} bytes)"


def unusable_out_dir(out: Path, option: str = "--out", empty: bool = True) -> str:
    """Why `out` cannot be the directory a command writes into ("" when it can): a file or
    special file, a path through a file, a name longer than the filesystem takes (a part or
    the whole), a directory that cannot be written or, when `empty`, that is not empty (a
    command that writes several files there must not mix them with another's). An absent
    directory is usable when its nearest existing parent is a writable directory.

    Checked before any work so that a command refuses at once, naming the option and the
    path, instead of raising from its first write after minutes of compiling or running."""
    out = Path(out)
    shown = _shown(out)
    try:
        st = os.stat(out)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return f"{option} {shown}: name too long for the filesystem"
        if exc.errno == errno.ENOTDIR:
            return f"{option} {shown}: a part of the path is a file, not a directory"
        if exc.errno != errno.ENOENT:
            return f"{option} {shown}: cannot be used ({exc.strerror})"
        return _creatable(out, option, shown)
    import stat

    if not stat.S_ISDIR(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "a special file"
        return f"{option} {shown}: is {kind}, not a directory: give a directory to write into"
    if not os.access(out, os.W_OK | os.X_OK):
        return f"{option} {shown}: the directory is not writable"
    if empty:
        try:
            if any(out.iterdir()):
                return f"{option} {shown} exists and is not empty"
        except OSError as exc:
            return f"{option} {shown}: cannot be read ({exc.strerror})"
    return ""


def _creatable(out: Path, option: str, shown: str) -> str:
    """unusable_out_dir of an absent `out`: its missing parts must fit the filesystem's limits
    and its nearest existing parent must be a writable directory."""
    absolute = Path(os.path.abspath(out))
    parent = absolute
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{option} {shown}: {_shown(parent)} is a file, not a directory"
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
        path_max = os.pathconf(parent, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    if len(os.fsencode(str(absolute))) >= path_max:
        return f"{option} {shown}: name too long for the filesystem (at most {path_max} bytes)"
    for part in absolute.relative_to(parent).parts:
        if len(os.fsencode(part)) > name_max:
            return (f"{option} {shown}: name too long for the filesystem (a part of at most "
                    f"{name_max} bytes)")
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{option} {shown}: {_shown(parent)} is not writable"
    return ""

"""The host's storage as the harness meets it: a full disk, where a command may write, and
which files may leave the host.

Whether a failed run met a full disk: one reading of the free space where the run writes,
taken only after a run failed, so that a disk that filled mid-run is named (ENOSPC) in the
verdict instead of leaving a bare "the run did not finish". A filesystem counts as full when
less than `FULL_KB` is available: a runner's scenario file, trace and output need a few hundred
kilobytes, and a phone's reserved blocks are not usable by the shell user.

Whether an output directory (`--out DIR` of export, bug-report, matrix, mutate) is usable:
checked once before a command writes anything (`unusable_out_dir`), so a regular file, a path
through a file or a name too long for the filesystem is one usage error, not a traceback from
the first write.

Which files may leave the host (`confined_file`): `export` packs a run's files into a bundle
made for a public issue and `replay --device` pushes them to a device, often a shared one, so
both copy only regular files inside the directories the run may name (its run directory, the
harness cache), never through a symbolic link; `bug-report` likewise copies only from its
reproductions and the cache.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from harness.errors import UnsafeFileError

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


FULL_WORDS = ("No space left on device", "[Errno 28]", "Disk quota exceeded", "[Errno 122]")
"""How a child process (a compile, a build) says a write met a full disk or a quota."""


def full_disk_reason(text: str, path: Path) -> str:
    """Why a child that wrote under `path` failed, when the reason is a full disk: its own
    words (FULL_WORDS in its output `text`) or the free space there now; "" otherwise. The
    child may have removed its partial files before it exited, so its words come first."""
    said = any(w in text for w in FULL_WORDS)
    note = host_full_note(path)
    if note:
        return note
    if said:
        return (f"the storage holding {path} is full (the child said: No space left on "
                "device); free space there and run again")
    return ""


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


def confined_file(path: Path, roots: Sequence[tuple[str, Path]], hint: str = "") -> Path:
    """`path` resolved, when it is a regular file, itself no symbolic link, that lies inside one
    of `roots` (what each is called, and the directory); else an UnsafeFileError naming it,
    why, and the directories allowed (`hint`: how to allow another).

    The one check of every file `export`, `replay --device` and `bug-report` copy or push: a
    run directory is data, and one crafted or tampered with (an input's `file` of `../x` or an
    absolute path, `runner.stderr` replaced by a link to `~/.ssh/id_ed25519`) must not carry a
    file of the user's into a bundle attached to a public issue or onto a shared device. A
    link is refused even when it points inside (what it names can change after the check);
    a path that stays inside only through `..` or a linked directory is judged by where it
    resolves to. Call it before the file is read: a FIFO or a device is refused unread."""
    path = Path(path)
    places = [f"{what} {directory}" for what, directory in roots]
    allowed = ", ".join(places[:-1]) + " or " + places[-1] if len(places) > 1 else places[0]

    def refuse(why: str, real: Path | None = None) -> UnsafeFileError:
        shown = f"{path} ({real})" if real is not None and real != path.absolute() else str(path)
        return UnsafeFileError(
            f"refused {shown}: {why}; only regular files inside {allowed} are copied or "
            f"pushed, never through a symbolic link{f' ({hint})' if hint else ''}")

    try:
        st = os.lstat(path)
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise refuse(f"a symbolic link (to {os.readlink(path)})")
    if not stat.S_ISREG(st.st_mode):
        raise refuse("not a regular file")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop, on Python < 3.13
        raise refuse(f"cannot be resolved ({exc})") from None
    for _, directory in roots:
        try:
            if real.is_relative_to(Path(directory).resolve()):
                return real
        except OSError:
            continue
    raise refuse("outside those directories", real)

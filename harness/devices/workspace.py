"""Where a session's workspace on a device may be, and what of it the session may delete.

A session deletes only what it created, and proves it by a marker file it writes when it takes
the directory. The rules, for every device kind with a scratch area (`/data/local/tmp` on
Android):

- a workspace is an absolute, normalised path strictly below the scratch area (so `/sdcard`,
  `/`, `tmp/x`, `/data/local/tmp/../../sdcard` and the scratch area itself are refused at
  start-up, before the device is touched) and not the device lease's directory;
- its names use only `WORKSPACE_CHARS` (letters, digits and `._-+@=,`): the path is quoted in
  every shell command, but it is also an entry of the runner's `LD_LIBRARY_PATH` (split at `:`)
  and of the DSP's `ADSP_LIBRARY_PATH` (split at `;`), where no quoting helps, so a `;` or `:`
  made the libraries unreachable and every QNN test an ERROR; whitespace and other shell
  metacharacters are refused with them, as a usage error;
- on set-up the directory is taken when it does not exist (created, marker `created=1`), when it
  is empty (adopted, marker `created=0`: the directory is the user's, its contents ours), or when
  it holds the marker (a kept workspace of an earlier session); a directory holding anything else
  is refused and left as it was. Creating a nested workspace (`.../a/b/ws` where `a` did not
  exist) creates its missing parents too; the marker counts them (`parents=2`: `a/b` and `a`),
  found missing one by one from the workspace up to the first that exists, so a directory that
  was there before is never counted;
- the marker also names its owner, the session that took it last (`token`, `host`,
  `hostboot`, `pid`, `pidstart`, `session`, `worker`, as in the device lease's owner file),
  `keep=1` when that session keeps it (`--keep-workspace`), and the top-level entries the
  sessions pushed there (`entry=NAME`, one a line, kept across reuses), so that a workspace a
  killed session left can be reclaimed without guessing what is the harness's
  (`harness.devices.leftovers`);
- on close only the entries the harness writes (the run and file directories, the runner, the
  libraries it pushed, the marker) are removed, and the directory itself only when the marker
  says the harness created it and nothing else is left in it, then the parents it counted, each
  only while empty (`rmdir`), from the nearest up; otherwise it stays, with a notice.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from collections.abc import Iterable

from harness.errors import ConfigError

MARKER = ".executorch-hil-workspace"
ANDROID_SCRATCH = PurePosixPath("/data/local/tmp")
# Directories every session writes in its workspace, besides what it pushes at the top.
OWN_DIRS = ("files", "runs", "scratch")
q = shlex.quote
# What a workspace's names may hold (see the module docstring: `:` and `;` split library paths).
WORKSPACE_CHARS = "A-Za-z0-9._+@=,-"
_BAD_CHAR = re.compile(f"[^/{WORKSPACE_CHARS}]")
_NAME = re.compile(f"[{WORKSPACE_CHARS}]+")
# What an earlier harness version pushed at a workspace's top, for a marker that lists no
# entries (reclaimed only when asked to: `harness workspaces --remove --all`).
LEGACY_ENTRIES = ("lib*.so", "lib*.so.*", "qnn", "executorch_hil_runner")


def entry_names(entries: Iterable[str]) -> list[str]:
    """The `entries` a marker may name: plain top-level names of the workspace's characters
    (anything else is never written, so never removed)."""
    return sorted({e for e in entries if _NAME.fullmatch(e) and e not in (".", "..")})


def plain(value: str) -> bool:
    """Whether `value` (a path) holds only the characters a workspace may have."""
    return not _BAD_CHAR.search(value)


def check_characters(value: str) -> None:
    """Refuse a `--device-workspace` holding a character outside `WORKSPACE_CHARS` (a
    ConfigError naming them): every device kind checks this before the device is touched."""
    bad = sorted(set(_BAD_CHAR.findall(value)))
    if bad:
        raise ConfigError(
            f"--device-workspace {value!r}: {', '.join(repr(c) for c in bad)} cannot be in a "
            "device workspace (it is an entry of the runner's library paths, which ':' and ';' "
            "split, and of shell commands): use letters, digits and '._-+@=,' only "
            "(e.g. /data/local/tmp/executorch-hil-mine)")


def check_workspace(value: str, scratch: PurePosixPath = ANDROID_SCRATCH,
                    reserved: Iterable[str] = ()) -> PurePosixPath:
    """`value` as a workspace path, or a ConfigError that says why it is refused. `reserved`
    are top-level names under `scratch` the harness keeps for itself (the lease)."""
    where = f"--device-workspace {value!r}"
    check_characters(value)
    if not value.startswith("/"):
        raise ConfigError(f"{where}: a device workspace must be an absolute path below "
                          f"{scratch}/ (e.g. {scratch}/executorch-hil-mine)")
    parts = value.split("/")[1:]
    if value.endswith("/"):
        parts = parts[:-1]
    if any(p in ("", ".", "..") for p in parts):
        raise ConfigError(f"{where}: write the path without '.', '..' or empty components "
                          f"(e.g. {scratch}/executorch-hil-mine)")
    path = PurePosixPath(value)
    if path == scratch or scratch not in path.parents:
        raise ConfigError(
            f"{where} is outside the device's scratch area: a workspace must be a directory "
            f"below {scratch}/ (e.g. {scratch}/executorch-hil-mine), because the harness "
            "removes its workspace at the end of the session")
    top = path.relative_to(scratch).parts[0]
    if top in set(reserved):
        raise ConfigError(f"{where}: {scratch / top} is the harness's own (the device lease); "
                          "choose another directory")
    return path


def parents_below(workspace: PurePosixPath, scratch: PurePosixPath) -> list[PurePosixPath]:
    """The directories between `scratch` and `workspace` (both excluded), nearest first: the
    ones creating the workspace may create, and so the only ones its removal may remove."""
    if scratch not in workspace.parents:
        return []
    return [p for p in workspace.parents if scratch in p.parents]


def _count_missing(parents: list[PurePosixPath]) -> str:
    """Shell code that sets `n` to how many of `parents` (nearest first) are missing, up to
    the first that exists: the ones `mkdir -p` is about to create."""
    if not parents:
        return "n=0"
    return (f"n=0; for d in {' '.join(q(str(p)) for p in parents)}; do "
            "[ -d \"$d\" ] && break; n=$((n + 1)); done")


def take_script(workspace: PurePosixPath, scratch: PurePosixPath = ANDROID_SCRATCH,
                owner: dict[str, str] | None = None, keep: bool = False,
                entries: Iterable[str] = ()) -> str:
    """Shell code that takes `workspace` as the rules say and prints `HARNESS_WS <how>`
    (created, adopted, reused) or, refusing, `HARNESS_WS foreign` / `HARNESS_WS notdir` and
    exits 3 without changing anything. A created workspace's marker counts the parents below
    `scratch` that were created with it (`parents=N`, when there are any). The marker names
    `owner` (key=value fields), `keep=1` with `keep`, and `entries` (the top-level names the
    session will push); a reused one keeps how it was made and the entries named before."""
    ws, marker = q(str(workspace)), q(str(workspace / MARKER))
    count = _count_missing(parents_below(workspace, scratch))
    fields = [f"{k}={v}" for k, v in (owner or {}).items()] + (["keep=1"] if keep else [])
    info = f"printf '%s\\n' {' '.join(q(f) for f in fields)}; " if fields else ""
    names = entry_names(entries)
    listed = (f"printf 'entry=%s\\n' {' '.join(q(n) for n in names)}" if names else "true")
    new = q(str(workspace / f"{MARKER}.new"))
    return (f"if [ -d {ws} ]; then "
            f"  if [ -f {marker} ]; then {{ "
            f"sed -n -e '/^created=/p' -e '/^parents=/p' {marker}; "
            f"{{ sed -n '/^entry=/p' {marker}; {listed}; }} | sort -u; {info}"
            f"}} > {new} && mv -f {new} {marker} && echo HARNESS_WS reused; "
            f"  elif [ -z \"$(ls -A {ws} 2>/dev/null)\" ]; then "
            f"    {{ echo created=0; {info}{listed}; }} > {marker} && echo HARNESS_WS adopted; "
            f"  else echo HARNESS_WS foreign; ls -A {ws} 2>/dev/null | head -5; exit 3; fi; "
            f"elif [ -e {ws} ] || [ -L {ws} ]; then echo HARNESS_WS notdir; exit 3; "
            f"else {count}; mkdir -p {ws} && {{ echo created=1; "
            "if [ \"$n\" -gt 0 ]; then echo parents=$n; fi; "
            f"{info}{listed}; }} > {marker} && echo HARNESS_WS created; fi")


def refusal(workspace: PurePosixPath, output: str) -> str | None:
    """Why `take_script`'s output refuses the workspace (None when it took it)."""
    lines = output.splitlines()
    states = [l.split()[1] for l in lines if l.startswith("HARNESS_WS ") and len(l.split()) > 1]
    if "foreign" in states:
        found = [l for l in lines[lines.index("HARNESS_WS foreign") + 1:] if l.strip()]
        return (f"workspace {workspace} already holds files the harness did not create "
                f"({', '.join(found) or 'entries'}; no {MARKER} marker), so it is refused and "
                "left as it is: give --device-workspace a new or empty directory (a workspace of "
                "an earlier harness version without the marker: remove it yourself with "
                f"`adb shell rm -r {q(str(workspace))}`)")
    if "notdir" in states:
        return f"workspace {workspace} exists and is not a directory; it is left as it is"
    return None


def remove_script(workspace: PurePosixPath, entries: Iterable[str],
                  scratch: PurePosixPath = ANDROID_SCRATCH, legacy: bool = False) -> str:
    """Shell code that removes the harness's `entries` (top-level names) of `workspace`, those
    its marker names and the marker, then the directory when the harness created it, then the
    parents the marker counts (each only while empty, nearest first); only when the marker is
    there. With `legacy`, a marker that names no entries (an earlier version's) has
    `LEGACY_ENTRIES` removed. Prints `HARNESS_WS removed`, `HARNESS_WS kept <entries left>`,
    `HARNESS_WS adopted` or `HARNESS_WS nomarker`."""
    names = sorted({*OWN_DIRS, *entries} - {"", ".", ".."})
    ws, marker = q(str(workspace)), q(MARKER)
    parents = parents_below(workspace, scratch)
    up = (f"i=0; for d in {' '.join(q(str(p)) for p in parents)}; do "
          "[ \"$i\" -lt \"$p\" ] && rmdir \"$d\" 2>/dev/null || break; i=$((i + 1)); done; "
          if parents else "")
    return (f"cd {ws} 2>/dev/null || exit 0; "
            f"if [ ! -f {marker} ]; then echo HARNESS_WS nomarker; exit 0; fi; "
            f"rm -rf -- {' '.join(q(n) for n in names)}; "
            # The marker's own list: no globbing, and only plain names (a hand-edited `*` or
            # `../x` removes nothing).
            f"set -f; for e in $(sed -n 's/^entry=//p' {marker}); do case \"$e\" in "
            f".|..|*[!{WORKSPACE_CHARS}]*) ;; *) rm -rf -- \"$e\";; esac; done; set +f; "
            + (f"grep -q '^entry=' {marker} || rm -rf -- {' '.join(LEGACY_ENTRIES)}; "
               if legacy else "") +
            f"c=$(sed -n 's/^created=//p' {marker}); p=$(sed -n 's/^parents=//p' {marker}); "
            "case \"$p\" in ''|*[!0-9]*) p=0;; esac; "
            f"rm -f {marker}; cd /; "
            f"if [ \"$c\" = 1 ] && rmdir {ws} 2>/dev/null; then {up}echo HARNESS_WS removed; "
            f"elif [ \"$c\" = 1 ]; then echo HARNESS_WS kept $(ls -A {ws} | head -5); "
            "else echo HARNESS_WS adopted; fi")


def top_entries(workspace: PurePosixPath, paths: Iterable[PurePosixPath]) -> set[str]:
    """The top-level names in `workspace` of the files the harness pushes there."""
    return {p.relative_to(workspace).parts[0] for p in paths
            if workspace in p.parents}

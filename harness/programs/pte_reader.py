"""Reading `.pte` programs out of process: once per content, and many in one child.

`inspect_program` imports executorch's serializer (torch, exir: seconds, tens of seconds on a
loaded host), so it runs in a child process: the pytest controller and its xdist workers never
import torch, and a program that crashes or hangs the deserializer kills a child, not the
session. That import, not the program, is the child's cost, so one child reads every program a
session has not read before, and each answer is kept in the program cache
(`harness.programs.pte_cache`, by the content's sha256 and the reader's key): a warm start-up
starts no process at all.

The child prints one JSON line per program, in order: `{"reading": i}` before it starts the
i-th, then `{"index": i, "info": ...}` or `{"index": i, "error": ...}`. A child that dies or
hangs mid-batch is blamed on the program it was reading (a ModelError naming that file), and
the programs after it are read by a new child; one that dies before reading any program (its
imports failed) fails them all with its own words.

    python -m harness.programs.pte_reader PROGRAM.pte [PROGRAM.pte ...]
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cache import file_sha256
from harness.config.paths import PACKAGE_PARENT
from harness.errors import ModelError
from harness.process import ProcessOutput, run_process
from harness.programs import pte_cache
from harness.programs.pte import ProgramInfo, check_file, inspect_program

# The child's start (the executorch imports) and its first program, then each further one.
CHILD_TIMEOUT_S = 300
PER_PROGRAM_TIMEOUT_S = 60
TAIL_LINES = 15

Answer = ProgramInfo | ModelError


def read_program(path: Path, in_process: bool = False) -> ProgramInfo:
    """What a `.pte` was compiled for, from the cache when these exact bytes were read before;
    a ModelError naming the file when it is not a program this reader can read.

    A miss runs `inspect_program` in a child process (the caller never imports torch), unless
    `in_process` is set by a caller that has paid for the executorch imports anyway."""
    answer = read_programs([path], in_process=in_process)[0]
    if isinstance(answer, ModelError):
        raise answer
    return answer


def read_programs(paths: Sequence[Path], in_process: bool = False) -> list[Answer]:
    """`read_program` of each of `paths`, in order, each answer a ProgramInfo or the ModelError
    that names its file: the cached ones from the cache, all the others (each content once) in
    ONE child process, so a bad program costs its own answer and not the others'."""
    paths = [Path(p) for p in paths]
    answers: dict[int, Answer] = {}
    contents: dict[int, str] = {}  # index -> sha256 of what is still to read
    first: dict[str, Path] = {}  # sha256 -> the path it is read from
    for i, path in enumerate(paths):
        try:
            check_file(path)  # a wrong path or a file that is not a program: no child for it
            sha256 = file_sha256(path)
        except ModelError as exc:
            answers[i] = exc
            continue
        except OSError as exc:
            answers[i] = ModelError(f"{path}: cannot read the program: {exc.strerror or exc}")
            continue
        cached = pte_cache.load(path, sha256)
        if cached is not None:
            answers[i] = cached
            continue
        contents[i] = sha256
        first.setdefault(sha256, path)
    if first:
        readers = list(first.values())
        read = _read_here(readers) if in_process else _read_in_children(readers)
        by_content: dict[str, Answer] = {}
        for (sha256, path), answer in zip(first.items(), read):
            if isinstance(answer, ProgramInfo):
                if answer.sha256 != sha256:
                    answer = ModelError(f"{path}: the file changed while it was being read")
                else:
                    pte_cache.store(answer)
            by_content[sha256] = answer
        for i, sha256 in contents.items():
            answer = by_content[sha256]
            if isinstance(answer, ProgramInfo):
                answers[i] = dataclasses.replace(answer, path=paths[i])
            elif paths[i] == first[sha256]:
                answers[i] = answer
            else:
                answers[i] = ModelError(f"{paths[i]}: the same bytes as {first[sha256]}, "
                                        f"which cannot be read: {answer}")
    return [answers[i] for i in range(len(paths))]


def all_or_error(answers: Sequence[Answer]) -> list[ProgramInfo]:
    """The programs of `answers` when every one was read, else one ModelError naming each
    that was not (a session's start-up: every bad program at once, not one per run)."""
    errors = [str(a) for a in answers if isinstance(a, ModelError)]
    if len(errors) == 1:
        raise ModelError(errors[0])
    if errors:
        raise ModelError(f"{len(errors)} of the {len(answers)} programs cannot be read:\n" +
                         "\n".join(errors))
    return [a for a in answers if isinstance(a, ProgramInfo)]


def _read_here(paths: list[Path]) -> list[Answer]:
    out: list[Answer] = []
    for path in paths:
        try:
            out.append(inspect_program(path))
        except ModelError as exc:
            out.append(exc)
    return out


def _run_child(paths: list[Path], timeout: float) -> ProcessOutput:
    """One child process reading `paths` (its output, as `main` prints it)."""
    env = dict(os.environ)
    root = str(PACKAGE_PARENT)
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return run_process([sys.executable, "-m", "harness.programs.pte_reader",
                        *map(str, paths)], env, timeout)


def _read_in_children(paths: list[Path]) -> list[Answer]:
    """Every program of `paths` read by one child, or by one more after each program that
    killed or hung its child."""
    answers: dict[int, Answer] = {}
    start = 0
    while start < len(paths):
        batch = paths[start:]
        timeout = CHILD_TIMEOUT_S + PER_PROGRAM_TIMEOUT_S * (len(batch) - 1)
        out = _run_child(batch, timeout)
        reading, got = _parse(out.stdout, batch)
        answers.update({start + j: answer for j, answer in got.items()})
        missing = [j for j in range(len(batch)) if j not in got]
        if not missing:
            break
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-TAIL_LINES:])
        if reading is None:  # it died before reading any program: its imports failed
            how = (f"timed out after {timeout:.0f} s" if out.timed_out
                   else f"exited {out.returncode}")
            for j in missing:
                answers[start + j] = ModelError(
                    f"{batch[j]}: reading the program failed: the reader process {how} before "
                    f"reading any program:\n{tail}")
            break
        blamed = missing[0]  # the one it was reading: the child reads in order
        path = batch[blamed]
        answers[start + blamed] = ModelError(
            f"{path}: reading the program timed out after {timeout:.0f} s" if out.timed_out
            else f"{path}: reading the program failed (exit {out.returncode}):\n{tail}")
        start += blamed + 1
    return [answers[i] for i in range(len(paths))]


def _parse(stdout: str, batch: list[Path]) -> tuple[int | None, dict[int, Answer]]:
    """(the last program the child started reading, {index: answer}) from its output; lines
    that are not its JSON (a library's chatter on stdout) are skipped."""
    reading: int | None = None
    got: dict[int, Answer] = {}
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            data: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("reading"), int):
            reading = data["reading"]
            continue
        index = data.get("index")
        if not isinstance(index, int) or not 0 <= index < len(batch):
            continue
        if "error" in data:
            got[index] = ModelError(str(data["error"]))
            continue
        try:
            got[index] = ProgramInfo.from_json(data["info"])
        except (ModelError, KeyError, TypeError, ValueError) as exc:
            got[index] = ModelError(f"{batch[index]}: the reader's answer cannot be read "
                                    f"({type(exc).__name__}: {exc})")
    return reading, got


def main(argv: list[str]) -> int:
    """Child entry: for each program, `{"reading": i}`, then its ProgramInfo JSON or its
    error, each on one line. A program that is not readable is its own answer, not the end
    of the batch."""
    if not argv:
        print("usage: python -m harness.programs.pte_reader PROGRAM.pte [PROGRAM.pte ...]",
              file=sys.stderr)
        return 2
    for index, arg in enumerate(argv):
        print(json.dumps({"reading": index}), flush=True)
        answer: dict[str, Any]
        try:
            answer = {"info": inspect_program(Path(arg)).to_json()}
        except ModelError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 (any failure is this program's answer, named)
            answer = {"error": f"{arg}: reading the program failed "
                               f"({type(exc).__name__}: {str(exc).strip()[:300]})"}
        print(json.dumps({"index": index, **answer}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Known runtime bugs as strict xfails, keyed by the runtime's version.

Versions are PEP 440 specifiers, read by `packaging` (the reference implementation of PEP 440,
so ordering and the rules for pre-release, dev and local versions are the standard's, not ours):
`executorch: ">=0.5,<=1.5.1"`, or a list whose items each apply (a bare version `1.5.1` is
`==1.5.1`). Pre-release, dev and local versions are always matched (`prereleases=True`) by their
place in PEP 440 order: a development build `1.6.0a0+git1a2b3c4` satisfies `>=0.5` and `>1.5.1`
but not `<=1.5.1` (it is a build towards 1.6.0), and a local build of a release (`1.5.1+git...`)
satisfies what `1.5.1` does (`==1.5.1` ignores the local label). An entry may also name the QNN
libraries it applies to, `qnn: ">=2.47"`, over the QAIRT version the session's libraries report;
when that version cannot be told, an entry with `qnn:` does not apply (the test runs plain).

Strict, so a runtime that fixes the bug makes the test fail with "XPASS(strict)", which is the
signal to delete the entry. `--ignore-known-issues` turns them back into plain tests, which then
fail with the runtime's own error.

An `intermittent: true` entry is for a bug that a test meets only in some runs (a race whose
odds move with the machine's load): its test is an xfail when it fails exactly as the entry
says and a pass (XPASS, not strict) when that run did not meet the bug. Such an entry cannot
tell when the runtime is fixed; its reason says how often the bug was seen.

An entry excuses a test only when every failure of its run (harness.results.failures) is that bug: of
one of the entry's kinds, with the entry's `match` found in the failing step's own words. A
wrong output before the known error, or a crash after it, fails the test and shows both.

Every entry says where the defect lives (`where`): `executorch` (the ExecuTorch runtime), `qnn`
(the QNN libraries), `export` (the lowering flow), `design` (a design limit or a missing
feature: worth reporting, never counted as a bug found) or `environment` (the SDK pairing or the
host, not a defect of any runtime). Only `executorch` and `qnn` entries are bugs found
(`BUG_CLASSES`); each of those names its standalone reproduction (`reproduce`, an id of
harness.bugreport), which runs with executorch alone.

Test patterns are matched against the test file's real location, relative to the file's base:
the project's own entries apply to the project's own suites only (relative to the project
root), a user's file to paths relative to the directory it is in; pytest's rootdir plays no part.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from pathlib import Path

from typing import TYPE_CHECKING

from harness.errors import ConfigError
from harness.config.paths import CONFIG_DIR, DATA_ROOT
from harness.config.remembered import remembered
from harness.results.issue_terms import BUG_CLASSES, WHERE_WORDS, checked_specifiers, version_in

if TYPE_CHECKING:
    from harness.results.failures import Failure

DEFAULT_PATH = CONFIG_DIR / "known_issues.yaml"
PROJECT_ROOT = DATA_ROOT  # the project's own test patterns are relative to it

# The modules whose code decides what a known-issues file's entries are: the file's schema
# (harness.results.known_issues_file) and what its validators consult.
_READERS = ("results/known_issues.py", "results/known_issues_file.py", "results/issue_terms.py",
            "results/failures.py", "programs/pte.py", "config/schema.py")

__all__ = ["BUG_CLASSES", "DEFAULT_PATH", "PROJECT_ROOT", "WHERE_WORDS", "KnownIssue", "defects",
           "grouped_by_where", "issue_for", "issues_for", "load_all", "load_known_issues",
           "uncovered", "version_in"]

@dataclasses.dataclass(frozen=True)
class KnownIssue:
    id: str
    executorch: tuple[str, ...]
    tests: tuple[str, ...]
    reason: str
    match: str
    kinds: tuple[str, ...]
    source: Path = DEFAULT_PATH  # the YAML file it came from
    base: Path = PROJECT_ROOT  # test patterns are relative to this directory
    intermittent: bool = False
    qnn: str | None = None  # QAIRT specifier; None: any QNN libraries
    where: str = "executorch"  # WHERE_WORDS' keys
    reproduce: str | None = None  # harness.bugreport's id for it
    size: tuple[float, float] | None = None  # the captured size's range (IssueEntry.size)
    root: str | None = None  # the distinct defect (IssueEntry.root); None: not a bug
    programs: tuple[str, ...] = ()  # program shapes it covers in --pte tests (IssueEntry)
    sizes: tuple[tuple[str, float, float], ...] = ()  # further named sizes (IssueEntry.sizes)

    @property
    def defect(self) -> str:
        """What it is counted as: its root, or its own id where it names none."""
        return self.root or self.id

    @property
    def valgrind_only(self) -> bool:
        """An entry of valgrind findings alone (kind: [memory]) is met only under --valgrind:
        elsewhere its tests pass, and a strict xfail would call that a fixed runtime."""
        return set(self.kinds) == {"memory"}

    @property
    def is_bug(self) -> bool:
        """Whether it counts as a bug found (a runtime or QNN library defect)."""
        return self.where in BUG_CLASSES

    def applies_to(self, version: str, qairt: str | None = None) -> bool:
        """Whether the entry is for executorch `version` with QNN libraries of QAIRT `qairt`."""
        if not version_in(version, self.executorch):
            return False
        return self.qnn is None or version_in(qairt, (self.qnn,))

    def test_key(self, path: Path, name: str) -> str | None:
        """`relative/path.py::name` of a test file under this issue's base, else None."""
        rel = _relative(Path(path), self.base)
        return None if rel is None else f"{rel}::{name}"

    def matching_patterns(self, path: Path, name: str) -> list[str]:
        key = self.test_key(path, name)
        return [] if key is None else [p for p in self.tests if _pattern_matches(key, p)]

    def matches_test(self, path: Path, name: str) -> bool:
        return bool(self.matching_patterns(path, name))

    def covers_program(self, shapes: frozenset[str]) -> bool:
        """Whether a test of a user's program with these shapes (ProgramInfo.shapes) is one
        of this entry's, whatever its name."""
        return bool(set(self.programs) & shapes)

    def covers(self, failure: Failure) -> bool:
        """Whether `failure` is this bug: of one of its kinds, with `match` found in
        "scenario NAME: " and the failure's words (so an entry may name the scenario), and,
        for an entry with a size, the size the words give within the entry's range."""
        words = f"scenario {failure.scenario}: {failure.message}" if failure.scenario else failure.message
        if failure.kind not in self.kinds:
            return False
        if self.size is None and not self.sizes:
            return re.search(self.match, words) is not None
        # The size is judged where the match captures one (an alternative without the group
        # is a signature of its own); every place the signature occurs must fit.
        ranges = ([("size", *self.size)] if self.size else []) + list(self.sizes)
        found = list(re.finditer(self.match, words))
        return bool(found) and all(m.group(name) is None or _within(m.group(name), low, high)
                                   for m in found for name, low, high in ranges)

    def size_fits(self, said: str | None) -> bool:
        """Whether a failure's size (the words' number) is this bug's: within `size`."""
        assert self.size is not None
        return _within(said, *self.size)

    def describe(self) -> str:
        sized = f", size {self.size[0]:g} .. {self.size[1]:g}" if self.size else ""
        sized += "".join(f", {name} {low:g} .. {high:g}" for name, low, high in self.sizes)
        return f"{self.id} [{self.where}] ({'/'.join(self.kinds)} matching {self.match!r}{sized})"


@functools.cache
def _relative(path: Path, base: Path) -> str | None:
    """`path` relative to `base` (both resolved), as POSIX text, or None when it is not under
    it; once per process: collection asks for every test and every entry (12 tests by 30
    entries cost about 40 ms of resolving the same two paths)."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return None


def _pattern_matches(key: str, pattern: str) -> bool:
    """fnmatch of a test key against an entry's pattern; a pattern whose file part is literal
    (no * ? [) can only match a key of that file, which is told without compiling the pattern
    into a regex (fnmatch's cost, per pattern and process)."""
    file_part, sep, _ = pattern.partition("::")
    literal = not any(c in file_part for c in "*?[")
    if literal and not (key.startswith(file_part + sep) if sep else key == file_part):
        return False
    return fnmatch.fnmatchcase(key, pattern)


def _within(said: str | None, low: float, high: float) -> bool:
    """Whether a size the words give (a number, maybe signed or with thousands commas) lies in
    [low, high]."""
    try:
        value = float((said or "").replace(",", "").lstrip("+"))
    except ValueError:
        return False
    return low <= value <= high


def load_known_issues(path: Path = DEFAULT_PATH, base: Path | None = None) -> list[KnownIssue]:
    """The entries of one file. `base` defaults to the project root for the project's own file
    and to the file's directory for any other."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: known-issues file not found")
    if base is None:
        base = PROJECT_ROOT if path.resolve() == DEFAULT_PATH.resolve() else path.resolve().parent
    issues = remembered(path, f"known-issues based at {base}",
                        lambda p, text: _read(p, text, base), _READERS)
    _check_unique(issues)
    return issues


def _read(path: Path, text: str | None, base: Path) -> list[KnownIssue]:
    """The file's entries, validated (`harness.results.known_issues_file`)."""
    from harness.config.schema import load_validated
    from harness.results.known_issues_file import IssuesFile

    entries = load_validated(path, IssuesFile, what="known-issues file", empty_ok=True,
                             text=text).root
    return [KnownIssue(e.id, tuple(checked_specifiers(e.executorch)), tuple(e.tests),
                       " ".join(e.reason.split()), e.match, tuple(e.kind), path, base,
                       e.intermittent, e.qnn, e.where, e.reproduce,
                       (e.size[0], e.size[1]) if e.size else None, e.root,
                       tuple(e.programs or ()),
                       tuple((k, v[0], v[1]) for k, v in sorted((e.sizes or {}).items())))
            for e in entries]


def load_all(extra: list[Path], include_project: bool = True) -> list[KnownIssue]:
    """The project's entries (unless excluded) plus every `--known-issues` file."""
    issues = load_known_issues(DEFAULT_PATH) if include_project else []
    for path in extra:
        issues += load_known_issues(path)
    _check_unique(issues)
    return issues


def _check_unique(issues: list[KnownIssue]) -> None:
    seen: dict[str, Path] = {}
    for issue in issues:
        if issue.id in seen:
            raise ConfigError(f"{issue.source}: known issue id {issue.id!r} is also defined in "
                              f"{seen[issue.id]}; ids must be unique")
        seen[issue.id] = issue.source


def issue_for(path: Path, name: str, version: str, issues: list[KnownIssue],
              qairt: str | None = None) -> KnownIssue | None:
    """The first entry that names the test (its xfail's reason), or None."""
    found = issues_for(path, name, version, issues, qairt)
    return found[0] if found else None


def issues_for(path: Path, name: str, version: str, issues: list[KnownIssue],
               qairt: str | None = None,
               shapes: frozenset[str] | None = None) -> list[KnownIssue]:
    """Every entry that names the test, in file order: a test that can end in two known ways
    (a race whose endings are two bugs) is excused when each failure is one of them. With
    `shapes` (the test runs a user's program of those shapes), also the entries of a shape
    it has, for every test of the project's suites."""
    return [i for i in issues if i.applies_to(version, qairt) and (
        i.matches_test(path, name)
        or (shapes is not None and i.covers_program(shapes) and i.test_key(path, name)))]


def uncovered(issue: KnownIssue | list[KnownIssue], failures: list[Failure]) -> list[Failure]:
    """The failures no entry of `issue` explains; an xfail needs at least one failure and none
    uncovered."""
    entries = issue if isinstance(issue, list) else [issue]
    return [f for f in failures if not any(e.covers(f) for e in entries)]


def grouped_by_where(ids: list[str], issues: list[KnownIssue]) -> dict[str, list[str]]:
    """`ids` grouped by their entries' class, in WHERE_WORDS' order (an unknown id: "unknown")."""
    where = {i.id: i.where for i in issues}
    groups: dict[str, list[str]] = {}
    for key in [*WHERE_WORDS, "unknown"]:
        members = sorted(i for i in ids if where.get(i, "unknown") == key)
        if members:
            groups[key] = members
    return groups


def defects(ids: list[str], issues: list[KnownIssue]) -> dict[str, list[str]]:
    """The bugs among `ids` (runtime and QNN library defects) by root: root -> its entries.
    The number of distinct defects is its length, not the number of entries."""
    by_id = {i.id: i for i in issues}
    out: dict[str, list[str]] = {}
    for issue_id in sorted(ids):
        issue = by_id.get(issue_id)
        if issue is not None and issue.is_bug:
            out.setdefault(issue.defect, []).append(issue_id)
    return dict(sorted(out.items()))

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
import re
from pathlib import Path
from typing import Annotated, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import Field, RootModel, field_validator, model_validator

from harness.errors import ConfigError
from harness.results.failures import KINDS, Failure
from harness.config.paths import CONFIG_DIR, DATA_ROOT
from harness.config.schema import StrictModel, load_validated

DEFAULT_PATH = CONFIG_DIR / "known_issues.yaml"
PROJECT_ROOT = DATA_ROOT  # the project's own test patterns are relative to it

# Every failure kind but "protocol" and "nemesis": a runner that breaks the protocol, or a run
# that did not make the interleaving or failure its scenario states, is never a known issue.
Kind = Literal["error", "mismatch", "crash", "timeout", "incomplete", "refused", "check", "memory"]
assert set(Kind.__args__) == set(KINDS) - {"protocol", "nemesis"}  # type: ignore[attr-defined]
NonEmpty = Annotated[str, Field(min_length=1)]
Where = Literal["executorch", "qnn", "export", "design", "environment"]
WHERE_WORDS: dict[str, str] = {
    "executorch": "ExecuTorch runtime defects",
    "qnn": "QNN library defects",
    "export": "lowering-flow (export) defects",
    "design": "design limits and missing features (not counted as bugs)",
    "environment": "artifacts of the environment or SDK pairing (not runtime defects)",
}
BUG_CLASSES = ("executorch", "qnn")
"""The classes that count as bugs found in the runtime under test."""


def version_specifier(text: str) -> SpecifierSet:
    """`text` as a PEP 440 specifier set that matches pre-releases; a bare version is `==`."""
    text = text.strip()
    try:
        Version(text)
        text = f"=={text}"
    except InvalidVersion:
        pass
    try:
        return SpecifierSet(text, prereleases=True)
    except InvalidSpecifier:
        raise ValueError(f"{text!r} is neither a version nor a PEP 440 specifier set "
                         "(e.g. '1.5.1', '>=0.5,<=1.5.1', '>=1.4,<1.6')") from None


def version_in(version: str | None, specifiers: tuple[str, ...]) -> bool:
    """Whether `version` satisfies any of `specifiers`; an unknown or non-PEP 440 version
    satisfies none."""
    if not version:
        return False
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return any(parsed in version_specifier(spec) for spec in specifiers)


def _specifiers(value: str | list[str]) -> list[str]:
    items = [value] if isinstance(value, str) else value
    for item in items:
        version_specifier(item)
    return items


class IssueEntry(StrictModel):
    """One entry of a known-issues YAML file."""

    id: NonEmpty
    # PEP 440 specifier sets or versions ("1.5.1", ">=0.5,<=1.5.1"); a list applies if any does
    executorch: NonEmpty | list[NonEmpty] = Field(min_length=1)
    qnn: NonEmpty | None = None  # QAIRT versions it applies to (">=2.47"); any when absent
    # "tests/hil/test_x.py::test_y*" (fnmatch); [] only for a runtime or QNN defect that no test
    # of the suites meets (its standalone reproduction is its evidence)
    tests: list[NonEmpty]
    # Program shapes (harness.programs.pte.PROGRAM_SHAPES) the defect belongs to: the entry also
    # covers any test of a user's program (--pte) that inspect finds of one of them
    programs: list[NonEmpty] | None = None
    kind: list[Kind] = Field(min_length=1)  # which failures it covers
    match: NonEmpty  # regex searched in the failing step's own words
    reason: NonEmpty
    intermittent: bool = False  # met in some runs only: a pass is not a fixed runtime
    where: Where  # where the defect lives; only executorch and qnn count as bugs found
    reproduce: NonEmpty | None = None  # the standalone reproduction (python -m harness bug-report)
    # the distinct defect it rests on: entries that are faces of one defect (a race's forced
    # endings, the orderings of the same cache) share it, and bugs are counted by it
    root: NonEmpty | None = None
    # [low, high]: the bug's own size, the number `match` captures as (?P<size>...) must lie
    # within wherever it captures one (a leak's rate per cycle): a failure with the entry's
    # words at another size is another defect, never excused by this one
    size: list[float] | None = Field(default=None, min_length=2, max_length=2)
    # the sizes of signatures that have one of their own (a failed context creation keeps more
    # than a failed backend creation): group name (size_<what>) -> [low, high], judged as size
    sizes: dict[str, list[float]] | None = None

    @model_validator(mode="after")
    def _size_is_captured(self) -> IssueEntry:
        groups = re.compile(self.match).groupindex
        ranges = {**({"size": self.size} if self.size is not None else {}), **(self.sizes or {})}
        for name, bounds in ranges.items():
            field = "size" if name == "size" else f"sizes.{name}"
            shown = "[" + ", ".join(f"{b:g}" for b in bounds) + "]"
            if len(bounds) != 2 or not 0 <= bounds[0] < bounds[1]:
                raise ValueError(f"{field}: {shown} is not a range [low, high] with "
                                 "0 <= low < high")
            if name != "size" and not name.startswith("size_"):
                raise ValueError(f"{field}: a further size's group is named size_<what>")
            if name not in groups:
                raise ValueError(f"{field}: needs `match` to capture the failure's size as a "
                                 f"named group (?P<{name}>...)")
        return self

    @model_validator(mode="after")
    def _tests_named(self) -> IssueEntry:
        if not self.tests and self.where not in BUG_CLASSES:
            raise ValueError("tests: at least one pattern (an entry that covers no test is a "
                             "runtime or QNN defect with its standalone reproduction, `where: "
                             "executorch` or `qnn`)")
        return self

    @model_validator(mode="after")
    def _bugs_are_reproduced(self) -> IssueEntry:
        if self.where in BUG_CLASSES and not self.reproduce:
            raise ValueError(f"a {self.where} defect needs `reproduce:`, the id of its "
                             "standalone reproduction (python -m harness bug-report --list)")
        if self.where in BUG_CLASSES and not self.root:
            raise ValueError(f"a {self.where} defect needs `root:`, the id of the distinct "
                             "defect it rests on (shared by every entry of that defect)")
        return self

    @field_validator("executorch")
    @classmethod
    def _executorch_specifiers(cls, value: str | list[str]) -> str | list[str]:
        _specifiers(value)
        return value

    @field_validator("qnn")
    @classmethod
    def _qnn_specifier(cls, value: str | None) -> str | None:
        if value is not None:
            version_specifier(value)
        return value

    @field_validator("programs")
    @classmethod
    def _shapes(cls, value: list[str] | None) -> list[str] | None:
        from harness.programs.pte import PROGRAM_SHAPES

        unknown = [v for v in value or () if v not in PROGRAM_SHAPES]
        if unknown:
            raise ValueError(f"programs: unknown shape(s) {', '.join(unknown)}; known: "
                             f"{', '.join(PROGRAM_SHAPES)}")
        return value

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class IssuesFile(RootModel[list[IssueEntry]]):
    pass


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
        try:
            rel = Path(path).resolve().relative_to(self.base.resolve())
        except ValueError:
            return None
        return f"{rel.as_posix()}::{name}"

    def matching_patterns(self, path: Path, name: str) -> list[str]:
        key = self.test_key(path, name)
        return [] if key is None else [p for p in self.tests if fnmatch.fnmatchcase(key, p)]

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
    entries = load_validated(path, IssuesFile, what="known-issues file", empty_ok=True).root
    issues = [KnownIssue(e.id, tuple(_specifiers(e.executorch)), tuple(e.tests),
                         " ".join(e.reason.split()), e.match, tuple(e.kind), path, base,
                         e.intermittent, e.qnn, e.where, e.reproduce,
                         (e.size[0], e.size[1]) if e.size else None, e.root,
                         tuple(e.programs or ()),
                         tuple((k, v[0], v[1]) for k, v in sorted((e.sizes or {}).items())))
              for e in entries]
    _check_unique(issues)
    return issues


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

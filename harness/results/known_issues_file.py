"""What a known-issues file may say: the strict pydantic schema of one entry
(`device_configs/known_issues.yaml` and every `--known-issues` file), whose meaning
`harness.results.known_issues` documents and uses.

Its own module so that pydantic is imported only when a file is really read: a session whose
known-issues files were read before takes the entries from the harness cache
(`harness.config.remembered`).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, RootModel, field_validator, model_validator

from harness.config.schema import StrictModel
from harness.results.failures import KINDS
from harness.results.issue_terms import BUG_CLASSES, checked_specifiers, version_specifier

# Every failure kind but "protocol" and "nemesis": a runner that breaks the protocol, or a run
# that did not make the interleaving or failure its scenario states, is never a known issue.
Kind = Literal["error", "mismatch", "crash", "timeout", "incomplete", "refused", "check", "memory"]
assert set(Kind.__args__) == set(KINDS) - {"protocol", "nemesis"}  # type: ignore[attr-defined]
NonEmpty = Annotated[str, Field(min_length=1)]
Where = Literal["executorch", "qnn", "export", "design", "environment"]


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
        checked_specifiers(value)
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

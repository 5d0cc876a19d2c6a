"""The fields of a results.json (`executorch-hil-results/1`) that readers rely on, as pydantic
models: `harness.results.load_results` checks a document against them, so `harness compare` on
a file with wrong types or missing node ids says which field, instead of a traceback.

Only what readers use is declared; every model allows extra fields, so the writer
(`harness.report.plugin`) may add to the document without a change here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

Number = int | float


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FailureEntry(_Open):
    kind: str
    step: int | str | None = None
    where: str = ""
    message: str = ""


class SubStepEntry(_Open):
    op: str
    module: str | None = None
    method: str | None = None
    elapsed_ms: Number | None = None


class StepEntry(_Open):
    index: int
    op: str
    target: str | None = None
    module: str | None = None
    method: str | None = None
    elapsed_ms: Number | None = None
    memory: dict[str, Number | None] | None = None
    substeps: list[SubStepEntry] | None = None


class RunEntry(_Open):
    nodeid: str
    scenario: str
    steps: list[StepEntry] = Field(default_factory=list)
    failures: list[FailureEntry] = Field(default_factory=list)


class TestEntry(_Open):
    nodeid: str
    outcome: str
    known_issue: str | None = None
    xpass_strict: bool = False
    failure: FailureEntry | None = None
    message: str | None = None


class ResultsDocument(_Open):
    tests: list[TestEntry] = Field(default_factory=list)
    runs: list[RunEntry] = Field(default_factory=list)

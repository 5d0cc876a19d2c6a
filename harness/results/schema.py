"""The fields of a results.json (`executorch-hil-results/1`) that readers rely on, as pydantic
models: `harness.results.load_results` checks a document against them, so `harness compare` on
a file with wrong types or missing node ids says which field, instead of a traceback.

Only what readers use is declared; every model allows extra fields, so the writer
(`harness.report.plugin`) may add to the document without a change here.
"""

from __future__ import annotations

from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, Field

Number = Union[int, float]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FailureEntry(_Open):
    kind: str
    step: Optional[Union[int, str]] = None
    where: str = ""
    message: str = ""


class SubStepEntry(_Open):
    op: str
    module: Optional[str] = None
    method: Optional[str] = None
    elapsed_ms: Optional[Number] = None


class StepEntry(_Open):
    index: int
    op: str
    target: Optional[str] = None
    module: Optional[str] = None
    method: Optional[str] = None
    elapsed_ms: Optional[Number] = None
    memory: Optional[dict[str, Optional[Number]]] = None
    substeps: Optional[list[SubStepEntry]] = None


class RunEntry(_Open):
    nodeid: str
    scenario: str
    steps: list[StepEntry] = Field(default_factory=list)
    failures: list[FailureEntry] = Field(default_factory=list)


class TestEntry(_Open):
    nodeid: str
    outcome: str
    known_issue: Optional[str] = None
    xpass_strict: bool = False
    failure: Optional[FailureEntry] = None
    message: Optional[str] = None


class ResultsDocument(_Open):
    tests: list[TestEntry] = Field(default_factory=list)
    runs: list[RunEntry] = Field(default_factory=list)

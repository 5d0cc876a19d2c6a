"""Known runtime bugs as strict xfails, keyed by ExecuTorch version.

Strict, so a runtime that fixes the bug makes the test fail with "XPASS(strict)", which is the
signal to delete the entry. `--ignore-known-issues` turns them back into plain tests, which then
fail with the runtime's own error.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.config import CONFIG_DIR, load_yaml
from harness.errors import ConfigError

DEFAULT_PATH = CONFIG_DIR / "known_issues.yaml"


@dataclasses.dataclass(frozen=True)
class KnownIssue:
    id: str
    executorch: tuple[str, ...]  # exact versions or specifiers such as "<=1.5.1"
    tests: tuple[str, ...]
    reason: str
    match: str = ""  # regex the failure text must contain, so the xfail is for this bug

    def applies_to(self, version: str) -> bool:
        for spec in self.executorch:
            if spec == version:
                return True
            if spec[:1] in "<>=!~":
                try:
                    if Version(version) in SpecifierSet(spec):
                        return True
                except (InvalidVersion, InvalidSpecifier):
                    continue
        return False

    def matches(self, nodeid: str) -> bool:
        return any(fnmatch.fnmatchcase(nodeid, p) or fnmatch.fnmatchcase(nodeid, "*/" + p)
                   for p in self.tests)


def load_known_issues(path: Path = DEFAULT_PATH) -> list[KnownIssue]:
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: known-issues file not found") from None
    except Exception:  # re-parse for a located message
        load_yaml(path)
        raise
    if data is None:
        return []
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a list of issues, got {type(data).__name__}")
    issues = []
    for i, entry in enumerate(data):
        where = f"{path}: entry {i}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a mapping")
        for key, kind in (("id", str), ("reason", str), ("executorch", list), ("tests", list)):
            if not isinstance(entry.get(key), kind):
                raise ConfigError(f"{where}: key '{key}' must be {kind.__name__}, got "
                                  f"{type(entry.get(key)).__name__}")
        for key in ("executorch", "tests"):
            if not all(isinstance(v, str) for v in entry[key]):
                raise ConfigError(f"{where}: every item of '{key}' must be str")
        match = entry.get("match", "")
        if not isinstance(match, str):
            raise ConfigError(f"{where}: key 'match' must be str")
        try:
            re.compile(match)
        except re.error as exc:
            raise ConfigError(f"{where}: key 'match' is not a valid regex: {exc}") from None
        issues.append(KnownIssue(entry["id"], tuple(entry["executorch"]), tuple(entry["tests"]),
                                 " ".join(entry["reason"].split()), match))
    return issues


def issue_for(nodeid: str, version: str, issues: list[KnownIssue]) -> KnownIssue | None:
    for issue in issues:
        if issue.applies_to(version) and issue.matches(nodeid):
            return issue
    return None

"""The terms a known-issue entry is written in, shared by the file's schema
(`harness.results.known_issues_file`) and the matching (`harness.results.known_issues`): where
a defect lives, and the PEP 440 versions an entry applies to (read by `packaging`, the reference
implementation of PEP 440; see harness.results.known_issues for the rules)."""

from __future__ import annotations

import functools

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

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


@functools.cache
def version_in(version: str | None, specifiers: tuple[str, ...]) -> bool:
    """Whether `version` satisfies any of `specifiers`; an unknown or non-PEP 440 version
    satisfies none. Remembered per process: collection asks it of every entry for every test,
    with the one version of the session."""
    if not version:
        return False
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return any(parsed in version_specifier(spec) for spec in specifiers)


def checked_specifiers(value: str | list[str]) -> list[str]:
    """An entry's `executorch:` as a list, each item checked to be a version or specifier set
    (ValueError otherwise)."""
    items = [value] if isinstance(value, str) else value
    for item in items:
        version_specifier(item)
    return items

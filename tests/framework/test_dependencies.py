"""The project declares every package its own tests and the lint step import: a contributor's
`pip install -e '.[dev]'` is enough for `python -m pytest tests/framework -m unit` (with
`pip install -e .` alone, test_import_graph.py failed on "No module named 'grimp'", which only
scripts/setup.sh installed)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_TOOLS = {"ruff", "mypy", "import-linter"}  # .ci/run step 0


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(text: str) -> str:
    return norm(re.split(r"[\s<>=!~\[;(]", text.strip(), maxsplit=1)[0])


def declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {requirement_name(r) for r in project["dependencies"]}
    dev = {requirement_name(r) for r in project.get("optional-dependencies", {}).get("dev", [])}
    return runtime, dev


def closure(names: set[str]) -> set[str]:
    """`names` and everything they require (as installed here), the extras' markers left out."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in requires if "extra ==" not in r]
    return seen


def third_party_imports() -> set[str]:
    """Top-level modules imported by the tests, the harness and conftest.py that are neither
    the standard library nor the project's own files."""
    local = {p.stem for p in ROOT.rglob("*.py")} | {p.name for p in ROOT.rglob("*") if p.is_dir()}
    found: set[str] = set()
    for path in [*ROOT.glob("tests/**/*.py"), *ROOT.glob("harness/**/*.py"), ROOT / "conftest.py"]:
        if "templates" in path.parts:  # rendered with values first, not Python as they stand
            continue
        if path.name == "qnn_calls_gdb.py":  # runs inside gdb, whose Python provides `gdb`
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in local
            and not m.startswith("_")}


def test_every_package_the_tests_import_is_declared_with_the_dev_extra():
    runtime, dev = declared()
    assert dev >= LINT_TOOLS, f"the dev extra lacks the lint tools {LINT_TOOLS - dev}"
    assert "grimp" in closure(dev)
    reachable = closure(runtime | dev)
    providers = metadata.packages_distributions()
    missing = {module: providers.get(module) for module in third_party_imports()
               if not {norm(d) for d in providers.get(module, [])} & reachable}
    assert not missing, (f"imported but declared neither in [project] dependencies nor in the "
                         f"dev extra (module: the distributions that provide it here): {missing}")

"""The suites and the programs they run on: --hil-suites collects the suites shipped with the
package, a test that takes hil_program is parametrized by its hil_programs marker (or by the
user's --pte programs), and with --pte the suites bound to built-in models are skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plugin.keys import HIL_MARKER, SESSION, is_hil
from harness.programs.params import MARKER, params_for, unique_ids


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    """--hil-suites: collect the suites shipped with the package, as if their directory had
    been given on the command line (before collection arguments are resolved)."""
    if "--hil-suites" in args:
        from harness.config.paths import SUITES_DIR

        known = early_config.known_args_namespace.file_or_dir
        extra = [] if known else ["."]  # keep the user's own tests, which a path would replace
        extra.append(str(SUITES_DIR))
        args.extend(extra)
        known.extend(extra)  # what the initial conftests are looked up from


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hil_programs(*names, precisions=('fp16',), options={}, "
                            "needs=()): the built-in models a suite test runs on by default "
                            "(with --pte: the user's programs), and what it needs of a program")


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that uses the session's device is a HIL test: it gets the hil marker here, as it
    is collected, so every later hook asks the marker."""
    if "hil_device" in getattr(item, "fixturenames", ()):
        item.add_marker(HIL_MARKER)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before harness/plugin/known_issues.py's marking (both tryfirst; this module registers
    after it), as when one hook did both."""
    _skip_builtin_only_suites(config, items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hil_program" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker(MARKER)
    if mark is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test that takes hil_program "
                                f"needs @pytest.mark.{MARKER}(<built-in model>, needs=...)")
    params = params_for(mark, metafunc.config.stash[SESSION].options.ptes)
    metafunc.parametrize("hil_program", params, ids=unique_ids(params), indirect=True)


def _skip_builtin_only_suites(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --pte, the shipped suites' tests that are bound to built-in models (not
    parametrized by hil_program) are skipped with the reason; a user's own tests are not."""
    if not config.stash[SESSION].options.ptes:
        return
    from harness.config.paths import SUITES_DIR

    suites = SUITES_DIR.resolve()
    reason = ("runs on the built-in models only; with --pte the suites that take a program run "
              "on yours")
    for item in items:
        if (is_hil(item) and "hil_program" not in getattr(item, "fixturenames", ()) and
                Path(item.path).resolve().is_relative_to(suites)):
            item.add_marker(pytest.mark.skip(reason=reason))

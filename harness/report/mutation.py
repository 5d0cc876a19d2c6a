"""`--mutate`: a mutation run within a pytest session, the session itself the unmutated run.

    python -m pytest tests/hil/test_isolation.py --runtime-variant=stock --hil-report=DIR \\
        --mutate=3 [--mutate-rotate=KEY] [--mutate-floor=1.0]

After the session's own tests (run on the variant, unmutated), each chosen mutant of the
catalogue (harness/runtime/mutants.yaml) runs over the session's tests that can reach it, in
pytest passes of their own (harness.mutation: the same engine as `python -m harness mutate`,
without its separate unmutated pass). The table and the score end the terminal summary, are a
section of DIR/report.html, `mutation` in DIR/results.json and DIR/mutate/mutate.json; the
session fails when the score is below `--mutate-floor` or a mutant is masked.

The passes take the session's own options (a device, a runner, an isolation mode), but not its
test paths (a pass names the tests it runs) nor its reports. On a device, the session ends its
use of it (runners, workspace, lease) before the first pass takes it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.log import disk_full_tolerated
from harness.plugin.keys import SESSION

_KEY = pytest.StashKey["Mutation"]()
OWN_VALUE_OPTIONS = ("--mutate", "--mutate-rotate", "--mutate-floor", "--hil-report",
                     "--hil-report-max-runs", "--artifacts-dir", "--runtime-variant",
                     "--runner-timeout", "--junitxml", "--junit-xml", "--html", "--maxfail",
                     "--durations", "--durations-min", "--last-failed-no-failures", "--basetemp",
                     "--tb")
"""Options with a value a pass sets itself or must not share (its report, its artifacts, the
variant it is told, -x), dropped from the session's command line with their value."""
OWN_FLAGS = ("-x", "--exitfirst", "--self-contained-html", "--sw", "--stepwise", "--lf",
             "--last-failed", "--ff", "--failed-first", "-q", "-v", "--quiet", "--verbose")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil", "ExecuTorch QNN hardware-in-the-loop")
    group.addoption("--mutate", default=None, metavar="N|all|NAME,...",
                    help="after the session, run mutants of the catalogue (N chosen by "
                         "--mutate-rotate, all, or these names) over its tests, the session "
                         "being the unmutated run; needs --hil-report and --runtime-variant "
                         "(docs/runtime-variants.md)")
    group.addoption("--mutate-rotate", default="", metavar="KEY",
                    help="what chooses --mutate N's sample (CI: the commit); default: the date")
    group.addoption("--mutate-floor", type=float, default=0.0, metavar="FRACTION",
                    help="fail the session when the mutation score is below this (default 0: "
                         "only a masked mutant fails it)")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After the session's configure, which selected the runtime variant."""
    spec = config.getoption("mutate", None)
    if not spec or hasattr(config, "workerinput"):
        return
    from harness.mutation.verdicts import select
    from harness.runtime.mutants import load_mutants
    from harness.runtime.variants import session_variant

    if not config.getoption("hil_report", None):
        raise pytest.UsageError("--mutate needs --hil-report DIR: the mutants' passes, their "
                                "table and mutate.json are written there")
    variant = session_variant()
    if variant == "none":
        raise pytest.UsageError("--mutate needs --runtime-variant (stock, fix-model or "
                                "fix-model-serialized): mutants are injected through the "
                                "variant's wrapper, and this session is their unmutated run")
    if not 0.0 <= config.getoption("mutate_floor") <= 1.0:
        raise pytest.UsageError("--mutate-floor is a fraction between 0 and 1")
    try:
        catalogue = load_mutants()
        if spec.isdigit():
            if int(spec) < 1:
                raise HarnessError("--mutate N needs N of at least 1")
            chosen = select(catalogue, [], int(spec),
                            config.getoption("mutate_rotate") or time.strftime("%Y-%m-%d"))
        elif spec == "all":
            chosen = catalogue
        else:
            chosen = select(catalogue, [n.strip() for n in spec.split(",") if n.strip()], 0, "")
    except HarnessError as exc:
        raise pytest.UsageError(f"--mutate={spec}: {exc}") from None
    plugin = Mutation(config, chosen, variant)
    config.stash[_KEY] = plugin
    config.pluginmanager.register(plugin, "executorch_hil_mutation")


def pass_options(invocation: tuple[str, ...] | list[str], positional: list[str]) -> list[str]:
    """The session's command line as every mutant pass takes it: its options, without its test
    paths (`positional`, as pytest parsed them) and without OWN_VALUE_OPTIONS and OWN_FLAGS."""
    out: list[str] = []
    skip_value = False
    given = set(positional)
    for arg in invocation:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if arg in given or arg in OWN_FLAGS:
            continue
        if name in OWN_VALUE_OPTIONS:
            skip_value = "=" not in arg
            continue
        out.append(arg)
    return out


class Mutation:
    """Runs the chosen mutants once the session's own verdicts are in (results.json written,
    before pytest-html writes the page) and reports them."""

    def __init__(self, config: pytest.Config, mutants: list, variant: str) -> None:
        self.config = config
        self.mutants = mutants
        self.variant = variant
        self.doc: dict[str, Any] | None = None
        self.outcomes: list = []
        self.error = ""

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # After harness.report.plugin's (tryfirst: results.json) and before pytest-html's
        # (trylast: the page, which shows this run's section).
        if session.exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return
        from harness.mutation.passes import run_mutants
        from harness.mutation.verdicts import document, passes
        from harness.report.plugin import RESULTS_NAME, report_directory

        directory = report_directory(self.config)
        if directory is None:
            return
        results = directory / RESULTS_NAME
        if not results.is_file():
            self.error = f"no {results} to run the mutants against"
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        baseline = json.loads(results.read_text())
        hil = self.config.stash.get(SESSION, None)
        if hil is not None:
            hil.close()  # the passes take the device (its lease, its workspace) after this
        options = pass_options(self.config.invocation_params.args, list(self.config.args))
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        started, load_start = time.monotonic(), os.getloadavg()
        try:
            self.outcomes = run_mutants(
                self.mutants, baseline, self.variant, directory / "mutate", tuple(options),
                progress=lambda line: reporter.write_line(f"mutate: {line}") if reporter else None)
        except (HarnessError, OSError) as exc:
            self.error = str(exc)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        self.doc = document(self.outcomes, self.variant, [t["nodeid"] for t in baseline["tests"]],
                            time.monotonic() - started, baseline.get("duration_s"), load_start)
        with disk_full_tolerated(directory, "the mutation run's results"):
            (directory / "mutate").mkdir(exist_ok=True)
            (directory / "mutate" / "mutate.json").write_text(json.dumps(self.doc, indent=2) + "\n")
            baseline["mutation"] = self.doc
            tmp = results.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(baseline, separators=(",", ":")) + "\n")
            os.replace(tmp, results)
        if not passes(self.doc, self.config.getoption("mutate_floor")):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        from harness.mutation.verdicts import passes, score_line, table

        terminalreporter.section("mutation")
        if self.error:
            terminalreporter.write_line(f"mutate: not run: {self.error}", red=True)
            return
        if self.doc is None:
            terminalreporter.write_line("mutate: not run: the session did not complete")
            return
        floor = self.config.getoption("mutate_floor")
        terminalreporter.write_line(table(self.outcomes))
        ok = passes(self.doc, floor)
        verdict = "" if ok else (": a mutant masked, the session fails" if self.doc["masked"]
                                 else ": below it, the session fails")
        terminalreporter.write_line(f"{score_line(self.doc)} (floor {floor:.0%}{verdict})",
                                    red=not ok, green=ok)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        from harness.report.html import mutation_section

        if self.doc is not None:
            postfix.append(mutation_section(self.doc))

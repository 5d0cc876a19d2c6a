"""The terminal: the session's header lines (target, executorch, runner, artifacts, runtime)
and the hil section of the summary (the device's summary, notices, known issues met and those
that matched no collected test).

Under xdist a worker's terminal summary is shown to nobody, so each worker hands its notices
(a damaged cache entry rebuilt, a full disk, a lease taken over) to the controller in
`workeroutput`, which prints them once: a notice said only in a worker was lost."""

from __future__ import annotations

import pytest

from harness.devices.kinds import kind_for, session_targets
from harness.plugin.keys import ISSUES, MET, SESSION
from harness.plugin.known_issues import unmatched_issues
from harness.results.known_issues import BUG_CLASSES, WHERE_WORDS, defects, grouped_by_where
from harness.runtime import executorch_version


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash[SESSION]
    opts = session.options
    target = ", ".join(kind_for(t).describe(t) for t in session_targets(opts))
    if session.uses_farm:
        target = (f"a labgrid place with {' '.join(f'{k}={v}' for k, v in opts.lg_place_tags.items())}"
                  f" (coordinator {opts.lg_coordinator}) per worker")
    return [f"hil: target {target}; executorch {executorch_version()}; runner {opts.runner}; "
            f"artifacts {opts.artifacts_dir}", f"hil: runtime {session.runtime_line()}",
            f"hil: SDK pairing: {session.pairing.describe()}"]


NOTICES_KEY = "hil_notices"  # a worker's notices (key -> text), in workeroutput


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker: hand this session's notices to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    hil = session.config.stash.get(SESSION, None)
    if workeroutput is not None and hil is not None:
        workeroutput[NOTICES_KEY] = hil.keyed_notices


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The xdist controller: keep a worker's notices (each once, across workers)."""
    keyed = getattr(node, "workeroutput", {}).get(NOTICES_KEY)
    hil = node.config.stash.get(SESSION, None)
    if keyed and hil is not None:
        hil.add_notices(keyed)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    lines = session.summary() + session.notices if session is not None else []
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        met = config.stash.get(MET, {})
        if met:
            lines += met_lines(met, config.stash.get(ISSUES, []))
        stale = unmatched_issues(config)
        if stale:
            lines.append("known issues that matched no collected test: " +
                         ", ".join(f"{i.id} ({i.source.name})" for i in stale))
    if lines:
        terminalreporter.section("hil")
        for line in dict.fromkeys(lines):
            terminalreporter.write_line(line)


def met_lines(met: dict[str, list], issues: list) -> list[str]:
    """The known issues met, grouped by where each defect lives: only ExecuTorch and QNN
    library defects are counted as bugs found."""
    groups = grouped_by_where(list(met), issues)
    bugs = [i for key in BUG_CLASSES for i in groups.get(key, [])]
    roots = defects(bugs, issues)
    lines = [f"known issues met: {len(roots)} defect(s) found in the runtime under test "
             f"(executorch, qnn), {len(bugs)} entries; {len(met) - len(bugs)} other(s)"]
    for key, ids in groups.items():
        lines.append(f"  {WHERE_WORDS.get(key, key)}: " + ", ".join(
            f"{i} ({len(met[i])} tests)" for i in ids))
    for root, ids in roots.items():
        if len(ids) > 1:
            lines.append(f"  defect {root}: {len(ids)} entries ({', '.join(ids)})")
    return lines

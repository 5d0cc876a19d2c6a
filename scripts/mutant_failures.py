"""Record the failures `harness mutate`'s mutants produce in each known issue's own tests.

    python scripts/mutant_failures.py OUT_DIR [--baseline results.json] [--variant stock]
                                      [--write tests/framework/data/mutant_failures.json]

A mutation pass stops at its first kill, so it rarely reaches the tests a known issue excuses;
this runs every mutant over exactly those tests (each entry's XFAILs of an unmutated run of
tests/hil, no -x) and keeps, per entry, every failure of its tests that the unmutated run did
not have (a new scenario, kind or step: the mutant's, not the bug's), as the matcher saw it
(`harness.results.failures.run_failures` of each run and the test's raised failure).
tests/framework/test_known_issue_signatures.py feeds each entry its recorded failures: none may
be excused. A hang or a latency mutant is not run: their failures are timeouts and step times,
and no entry's kinds include either. A race's test meets its bug's endings (a crash, a freed
handle, an error) at other steps from run to run with nothing injected, so, as `harness mutate`
judges those tests by their outcome only (`harness.mutation.verdicts.RACES`), their failures are
left out here; anywhere else, a failure whose first line has the words of an unmutated failure
of the same test, each number within a factor of 4 of its own, is the bug's own (the same leak
at 16 times its rate, the same check with other values, is the mutant's). `--reuse` reads the
passes an earlier run left in OUT_DIR instead of running them again; `--leave-out PREFIX` leaves
tests out of the passes (a long one whose entry other tests carry).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from harness.mutation.passes import run_pass
from harness.mutation.verdicts import RACES
from harness.runtime.mutants import load_mutants

SKIPPED_CLASSES = ("hang at the k-th call", "latency regression")
JOINED = ("tests/hil/test_fault_sweep.py::",)
"""Tests that report several findings as one failure (HilFailure parts): their findings are
judged one by one (`failure_parts` in results.json)."""


def failures(doc: dict, joined: bool = False) -> dict[str, set[tuple[str, str, str, str]]]:
    """Per test, (scenario, kind, step, message) of every failure of its runs and its own (each
    finding apart, as the known issues judge them; a report that joined them is left out unless
    `joined`: the unmutated run's, compared part by part)."""
    out: dict[str, set[tuple[str, str, str, str]]] = {}
    for run in doc.get("runs", []):
        for f in run.get("failures", []):
            out.setdefault(run["nodeid"], set()).add(
                (run.get("scenario") or "", f["kind"], str(f.get("step")), f.get("message", "")))
    for test in doc["tests"]:
        if not joined and "failure_parts" not in test and test["nodeid"].startswith(JOINED):
            continue  # a report from before findings were kept apart: one joined message
        for f in test.get("failure_parts") or ([test["failure"]] if test.get("failure") else []):
            out.setdefault(test["nodeid"], set()).add(
                (f.get("scenario") or "", f["kind"], str(f.get("step")), f.get("message", "")))
    return out


NUMBER = re.compile(r"0x[0-9a-f]+|[0-9]+(?:\.[0-9]+)?")


def words(message: str) -> str:
    """A failure's words without its numbers and addresses (timestamps, handles, sizes)."""
    return NUMBER.sub("#", message)


def same_failure(a: str, b: str) -> bool:
    """Whether two failures' first lines say the same with numbers within a factor of 4 (an
    address or a count that moves from run to run, a rate measured again)."""
    a, b = a.strip().split("\n", 1)[0].strip(), b.strip().split("\n", 1)[0].strip()
    if words(a) != words(b):
        return False
    # the finding's own numbers: what a parenthesis adds (the run with nothing injected, the
    # handles listed) is its context, which a mutant may move without making the finding its own
    for x, y in zip(NUMBER.findall(a.split(" (", 1)[0]), NUMBER.findall(b.split(" (", 1)[0])):
        if x.startswith("0x") or x == y:
            continue
        u, v = abs(float(x)), abs(float(y))
        if max(u, v) > 4 * min(u, v) and max(u, v) - min(u, v) > 2:
            return False
    return True


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--baseline", type=Path, help="an unmutated results.json of tests/hil")
    p.add_argument("--variant", default="stock")
    p.add_argument("--write", type=Path, help="the corpus file to write")
    p.add_argument("--mutant", action="append", default=[], help="only these mutants")
    p.add_argument("-n", dest="workers", default="0", help="pytest-xdist workers per pass")
    p.add_argument("--reuse", action="store_true", help="read OUT_DIR's passes, run the rest")
    p.add_argument("--leave-out", action="append", default=[], help="test id prefix to leave out")
    args = p.parse_args(argv)
    options = ("-n", args.workers) if args.workers != "0" else ()
    if args.baseline:
        baseline = json.loads(args.baseline.read_text())
    else:
        baseline, _, _ = run_pass(args.out / "unmutated", args.variant, ["tests/hil"], {}, False,
                                  options)
    entry_of = {t["nodeid"]: t["known_issue"] for t in baseline["tests"]
                if t["outcome"] == "xfailed" and t.get("known_issue")}
    before = failures(baseline, joined=True)
    # an unmutated report that joined several findings (a baseline from before failure_parts)
    # is compared finding by finding too
    said = {n: [(k, part) for _, k, _, m in fs
                for part in (m, *m.split("\n"), *m.split("\n", 1)[0].split("; "))]
            for n, fs in before.items()}
    corpus: dict[str, list[dict]] = {e: [] for n, e in sorted(entry_of.items())
                                     if not n.startswith(RACES)}
    seen: set[tuple[str, str, str, str]] = set()
    ran: dict[str, int] = {}
    not_run: dict[str, str] = {}
    for mutant in load_mutants():
        if args.mutant and mutant.name not in args.mutant:
            continue
        if mutant.kind in SKIPPED_CLASSES:
            not_run[mutant.name] = f"{mutant.kind}: timeouts and step times, no entry's kind"
            continue
        if mutant.equivalent_on(args.variant):
            not_run[mutant.name] = f"equivalent on {args.variant}"
            continue
        reach = {r["nodeid"] for r in baseline["runs"]
                 if mutant.backend in {m.get("backend") for m in r.get("modules", {}).values()}}
        tests = [n for n in entry_of if n in reach and not n.startswith(RACES)
                 and not any(n.startswith(x) for x in args.leave_out)]
        if not tests:
            not_run[mutant.name] = f"no XFAIL test loads a {mutant.backend} program"
            continue
        if args.reuse and (args.out / mutant.name / "results.json").is_file():
            doc = json.loads((args.out / mutant.name / "results.json").read_text())
        else:
            doc, status, seconds = run_pass(args.out / mutant.name, args.variant, tests,
                                            mutant.environment(), False, options)
            print(f"{mutant.name}: {len(tests)} tests, exit {status}, {seconds:.0f} s",
                  flush=True)
        ran[mutant.name] = len(tests)
        for nodeid, found in failures(doc).items():
            if nodeid not in entry_of or nodeid.startswith(RACES):
                continue
            for scenario, kind, _step, message in sorted(found):
                if any(k == kind and same_failure(m, message) for k, m in said.get(nodeid, [])):
                    continue  # the bug's own failure, as unmutated
                seen_key = (entry_of[nodeid], mutant.name, kind, words(message))
                if seen_key in seen:
                    continue  # the same failure in another run or parameter: once is enough
                seen.add(seen_key)
                corpus[entry_of[nodeid]].append({
                    "mutant": mutant.name, "test": nodeid, "kind": kind,
                    "scenario": scenario, "message": message[:1500]})
    doc_out = {"variant": args.variant, "mutants_run": ran, "not_run": not_run,
               "entries": corpus}
    text = json.dumps(doc_out, indent=1, sort_keys=True) + "\n"
    (args.out / "mutant_failures.json").write_text(text)
    if args.write:
        args.write.write_text(text)
    print({e: len(v) for e, v in corpus.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

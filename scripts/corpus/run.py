"""CI step "corpus": programs this project did not write, through S1-S4 and the decode loop
with `--pte`.

    python scripts/corpus/run.py [--soc SM8650] [--out DIR] [--build-only]

Builds the corpus (scripts/corpus/build.py, cached under the harness cache by the corpus
sources, the compile worker and the ExecuTorch version, so a second run builds nothing), runs
the shipped isolation suite (tests/hil/test_isolation.py: S1-S4) and the decode-loop suite
(tests/hil/test_decode_loop.py) on every program in one pytest session with `--pte`, prints
program x outcome, and exits 1 on any of:

- an ERROR or a FAIL (a setup error, an unexpected failure, an XPASS(strict));
- a QNN program whose S1 is not an XFAIL of the known delegate-cache bug (an xfail needs the
  runtime's own words, see harness.results.known_issues) or whose S4 does not pass;
- a program with two delegated methods whose S2 does not pass or whose S3 is not an XFAIL;
- a skip other than S2/S3 of a program with fewer than two delegated methods;
- an LLM export (a program with upstream's decode method `kv_forward`) whose decode loop on one
  module, or after a destroy and reload mid-loop, does not pass, or whose two modules'
  interleaved loops are not an XFAIL of the delegate-cache bug; a decode-loop test of any other
  program that is not a skip; a corpus in which no program's decode loop passes;
- a program whose inputs, as the suites feed them, eager PyTorch refuses;
- a corpus without a program whose inputs and outputs are not memory-planned (upstream's LLM
  flow lowers so; the runners must bind their own buffers);
- a corpus without a program with a non-tensor output, or without a string-valued one
  (upstream's LLM metadata methods: `get_kv_output_N_quant_attr` returns (double, int, int,
  int, string)); S4 executes each such method and holds it to its solo run by value.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

# Test function -> column prefix; S1 and S3 are parametrized once more (-A/-B, -first/-second).
SUITE_TESTS = {"test_s1_two_modules_same_program": "S1",
               "test_s2_methods_share_one_context": "S2",
               "test_s3_unload_one_method_keeps_the_other": "S3",
               "test_s4_cleanup_and_reload": "S4"}
LOOP_TESTS = {"test_decode_loop_feeds_each_steps_outputs_to_the_next": "loop",
              "test_decode_loop_after_destroy_and_reload_starts_over": "loop-reload",
              "test_decode_loop_on_two_modules_of_one_program": "loop-2mod"}
SUITE_TESTS.update(LOOP_TESTS)
COLUMNS = ("S1-A", "S1-B", "S2", "S3-first", "S3-second", "S4", *LOOP_TESTS.values())
LOOP_WANT = {"loop": "PASS", "loop-reload": "PASS", "loop-2mod": "XFAIL"}


def corpus_dir(soc: str) -> Path:
    """The build's cache directory: keyed by what changes the programs."""
    from harness.cache import cache_root, digest
    from harness.runtime import executorch_version

    sources = [HERE / "build.py", HERE / "upstream.py", HERE / "llm.py",
               ROOT / "harness" / "programs" / "compile_worker.py",
               ROOT / "harness" / "programs" / "pte.py"]  # the manifest's facts come from it
    key = digest([soc, executorch_version(), *(p.read_bytes() for p in sources)])
    return cache_root() / "corpus" / f"{soc}-{key[:16]}"


def build(out: Path, soc: str) -> None:
    """Build into a fresh directory and move it into place, so an interrupted build never
    leaves a half corpus behind."""
    from harness.qnn.sdk import discover

    if (out / "manifest.json").exists():
        print(f"corpus: cached in {out}", flush=True)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    env = {**os.environ, **discover().environment()}
    log = out.parent / f"{out.name}.build.log"
    with open(log, "w") as handle:
        proc = subprocess.run([sys.executable, str(HERE / "build.py"), str(tmp), "--soc", soc],
                              env=env, stdout=subprocess.PIPE, stderr=handle, text=True)
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"corpus build failed (exit {proc.returncode}); its log: {log}")
    os.replace(tmp, out)


def outcomes(junit: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """{program: {column: (outcome, message)}} from a JUnit XML report (xunit1). Outcomes:
    PASS, FAIL, ERROR, XFAIL, SKIP."""
    table: dict[str, dict[str, tuple[str, str]]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        function, _, param = name.partition("[")
        prefix = SUITE_TESTS.get(function)
        if prefix is None:
            continue
        param = param.rstrip("]")
        program, column = param, prefix
        if prefix in ("S1", "S3"):
            program, _, variant = param.rpartition("-")
            column = f"{prefix}-{variant}"
        outcome, message = "PASS", ""
        for child in case:
            text = (child.get("message") or child.text or "").strip()
            if child.tag == "failure":
                outcome, message = "FAIL", text
            elif child.tag == "error":
                outcome, message = "ERROR", text
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome, message = ("XFAIL" if xfail else "SKIP"), text
        table.setdefault(program, {})[column] = (outcome, message)
    return table


def problems(table: dict, manifest: dict) -> list[str]:
    """Every verdict the corpus step does not accept (see the module docstring)."""
    out = []
    for program, facts in manifest.items():
        row = table.get(program)
        if row is None:
            out.append(f"{program}: no test ran")
            continue
        if facts.get("eager_refuses_inputs"):
            out.append(f"{program}: eager PyTorch refuses its inputs: "
                       f"{facts['eager_refuses_inputs']}")
        two = len(facts.get("delegated", ())) >= 2
        llm = "kv_forward" in facts.get("methods", ())
        for column, (outcome, message) in sorted(row.items()):
            where = f"{program} {column}: {outcome}"
            if outcome in ("ERROR", "FAIL"):
                out.append(f"{where}: {message.splitlines()[0] if message else ''}")
            elif outcome == "SKIP" and column.startswith("loop"):
                if llm:
                    out.append(f"{where} ({message})")
            elif outcome == "SKIP" and (two or not column.startswith(("S2", "S3"))):
                out.append(f"{where} ({message})")
            elif column.startswith("loop") and not llm:
                out.append(f"{where}: a program without kv_forward has no decode loop to run")
        want = {"S1-A": "XFAIL", "S1-B": "XFAIL", "S4": "PASS", **(LOOP_WANT if llm else {})}
        if two:
            want.update({"S2": "PASS", "S3-first": "XFAIL", "S3-second": "XFAIL"})
        for column, outcome in want.items():
            got = row.get(column, ("missing", ""))[0]
            if got != outcome and got not in ("ERROR", "FAIL"):
                out.append(f"{program} {column}: {got}, expected {outcome}")
    kinds = {kind for facts in manifest.values()
             for outputs in (facts.get("value_outputs") or {}).values() for kind in outputs}
    if not kinds:
        out.append("no program of the corpus has a non-tensor output (llm_hybrid's metadata "
                   "methods should): the step would not meet what upstream's LLM export returns")
    elif "string" not in kinds:
        out.append(f"no program of the corpus has a string output (only {', '.join(sorted(kinds))}"
                   "; upstream's get_kv_output_N_quant_attr returns one)")
    if not any(row.get("loop", ("",))[0] == "PASS" for row in table.values()):
        out.append("no program of the corpus ran its decode loop (llm_hybrid's should): the step "
                   "would not drive an LLM export as upstream's runner does")
    if not any(facts.get("unplanned_io") for facts in manifest.values()):
        out.append("no program of the corpus has unplanned inputs/outputs (llm_hybrid_unplanned "
                   "should): the step would not meet what upstream's LLM export needs")
    return out


def render(table: dict, manifest: dict) -> str:
    """program x outcome, with each program's kind and precision."""
    head = ["program", "precision", "I/O", "kind", *COLUMNS]
    rows = [[name, facts["precision"], "unplanned" if facts.get("unplanned_io") else "planned",
             facts["kind"],
             *(table.get(name, {}).get(c, ("-", ""))[0] for c in COLUMNS)]
            for name, facts in manifest.items()]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soc", default="SM8650")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the JUnit XML and the table go (default: a temp dir)")
    parser.add_argument("--build-only", action="store_true",
                        help="build the corpus into the cache and stop (CI builds it beside the "
                             "steps before this one, which leave a CPU idle)")
    args = parser.parse_args(argv)
    from harness.config.paths import SUITES_DIR

    corpus = corpus_dir(args.soc)
    build(corpus, args.soc)
    if args.build_only:
        return 0
    manifest = json.loads((corpus / "manifest.json").read_text())
    out = args.out or Path(tempfile.mkdtemp(prefix="corpus-run-"))
    out.mkdir(parents=True, exist_ok=True)
    junit = out / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE",
           str(SUITES_DIR / "test_isolation.py"), str(SUITES_DIR / "test_decode_loop.py"),
           f"--junitxml={junit}",
           "--strict-known-issues", f"--soc={args.soc}",
           *(f"--pte={corpus / (name + '.pte')}" for name in manifest)]
    proc = subprocess.run(cmd, cwd=ROOT)
    if not junit.exists():
        print(f"pytest wrote no report (exit {proc.returncode})", file=sys.stderr)
        return 1
    table = outcomes(junit)
    text = render(table, manifest)
    (out / "table.txt").write_text(text + "\n")
    print(text)
    found = problems(table, manifest)
    for line in found:
        print(f"corpus: {line}", file=sys.stderr)
    print(f"corpus: {len(manifest)} programs, {sum(len(r) for r in table.values())} tests, "
          f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

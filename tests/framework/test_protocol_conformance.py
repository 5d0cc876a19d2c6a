"""Both runners against the runner protocol (harness/protocol/), on one set of scenario files.

data/scenarios/good/*.json: scenarios both runners must run. Both must exit with the same code
(`GOOD_EXIT`, else OK), and write event streams that validate against the protocol's typed
events and agree step by step (op, module, method, status, sub-steps, output dtypes and shapes).

data/scenarios/bad/*.json: scenarios the protocol rejects. Both runners must exit with
`ExitCode.BAD_SCENARIO` before any step, without an event, and
`harness.protocol.scenario_check.load_scenario` must reject them too.

The files name `program.pte` (a portable Linear(4, 2) + ReLU program), `in.bin` (its input),
`out.bin` (its output), `wrong.bin` (not its output) and `short.bin` (too short for the
input's shape), which the `workspace` fixture makes next to copies of the scenario files.

A case where the native runner disagrees with the protocol is marked xfail (strict) in
`NATIVE_MISMATCHES`, naming the mismatch, until the native runner is fixed.

good/parallel.json executes module A once before its parallel executes: the Python runner hangs
when two threads make the runtime's first kernel-threadpool call at once (one thread holds the
GIL while it waits for the threadpool's initialisation, which the other thread is running and
which logs through the pybindings' Python log hook, so it waits for the GIL).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.protocol.events import EndEvent, StartEvent, StepEvent, parse_events
from harness.protocol.wire import ExitCode, read_events
from harness.protocol.scenario_file import ScenarioError
from harness.protocol.scenario_check import load_scenario
from harness.runner.builds.host import build_host_runner, host_runner_available
from harness.runner.select import RunnerChoice

DATA = Path(__file__).parent / "data" / "scenarios"
GOOD = sorted(p.stem for p in (DATA / "good").glob("*.json"))
BAD = sorted(p.stem for p in (DATA / "bad").glob("*.json"))
RUNNERS = ("native", "python")

GOOD_EXIT = {"step_errors": ExitCode.STEP_FAILED, "parallel": ExitCode.STEP_FAILED,
             "feed_errors": ExitCode.STEP_FAILED, "decode_errors": ExitCode.STEP_FAILED,
             "value_mismatches": ExitCode.STEP_FAILED}

# Cases where the native runner disagrees with the protocol, naming the mismatch (xfail, strict)
# until the native runner is fixed. Empty since the runner reads JSON with nlohmann/json, which
# refuses the two it had (a leading zero, a file that is not UTF-8).
NATIVE_MISMATCHES: dict[str, str] = {}

_MAKE_PROGRAM = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from executorch.exir import to_edge, to_edge_transform_and_lower
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU()).eval()
    x = torch.randn(1, 4)
    program = to_edge_transform_and_lower(torch.export.export(model, (x,))).to_executorch()
    (out / "program.pte").write_bytes(program.buffer)
    with torch.no_grad():
        y = model(x)
    (out / "in.bin").write_bytes(x.numpy().tobytes())
    (out / "out.bin").write_bytes(y.numpy().tobytes())
    (out / "wrong.bin").write_bytes((y + 1).numpy().tobytes())
    (out / "short.bin").write_bytes(x.numpy().tobytes()[:6])
    # Metadata methods as an LLM export has them: a string, a double, an int, a bool, and a
    # tuple of them (upstream's get_kv_output_N_quant_attr), each a non-tensor output.
    methods = {"get_name": "llama", "get_scale": 0.25, "get_len": 128, "get_kv": True,
               "get_attr": (0.5, 3, -2, 4, "uint8")}
    program = to_edge(torch.export.export(model, (x,)), constant_methods=methods).to_executorch()
    (out / "metadata.pte").write_bytes(program.buffer)
    import struct
    values = {"string": "llama".encode(), "float": struct.pack("<d", 0.25),
              "float_near": struct.pack("<d", 0.25 + 1e-9), "int": struct.pack("<q", 128),
              "bool": bytes([1]), "int_neg": struct.pack("<q", -2), "int3": struct.pack("<q", 3),
              "int4": struct.pack("<q", 4), "half": struct.pack("<d", 0.5),
              "uint8": b"uint8", "wrong_string": "llamb".encode(),
              "wrong_float": struct.pack("<d", 0.3), "wrong_int": struct.pack("<q", 129),
              "false": bytes([0])}
    for name, raw in values.items():
        (out / f"value_{name}.bin").write_bytes(raw)

    class Decode(torch.nn.Module):
        # A decode step in miniature: logits whose argmax is (a cache row's sum + 2 * token)
        # mod 4, and one new cache entry per row, token + 1 (the runners' decode cases).
        def forward(self, tok, cache):
            x = cache.sum() / 2 + 2 * tok.sum().to(torch.float32)
            logits = -(torch.arange(4, dtype=torch.float32) - torch.remainder(x, 4.0)).abs()
            new = (tok.to(torch.float32) + 1.0).reshape(1, 1, 1).expand(1, 2, 1)
            return logits.reshape(1, 1, 4), new.contiguous()

    args = (torch.tensor([[1]], dtype=torch.int32), torch.zeros(1, 2, 3))
    program = to_edge_transform_and_lower(torch.export.export(Decode(), args)).to_executorch()
    (out / "decode.pte").write_bytes(program.buffer)
    (out / "token.bin").write_bytes(args[0].numpy().tobytes())
    (out / "cache.bin").write_bytes(args[1].numpy().tobytes())
""")


@pytest.fixture(scope="module")
def runners() -> dict[str, RunnerChoice]:
    ok, why = host_runner_available()
    assert ok, why  # CI installs cmake, ninja and a compiler
    return {"native": RunnerChoice("native", build_host_runner()),
            "python": RunnerChoice("python", None)}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("conformance")
    made = subprocess.run([sys.executable, "-c", _MAKE_PROGRAM, str(work)],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    for kind in ("good", "bad"):
        for path in (DATA / kind).glob("*.json"):
            shutil.copy(path, work / path.name)
    return work


def run(choice: RunnerChoice, scenario: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_QNN_TRACE"}
    env.update(choice.environment())
    return subprocess.run(choice.command(str(scenario)), capture_output=True, text=True,
                          errors="replace", env=env, timeout=120)


def shown(runs: dict[str, subprocess.CompletedProcess]) -> str:
    return "\n".join(f"--- {kind}: exit {p.returncode}\nstdout: {p.stdout[-1500:]}\n"
                     f"stderr: {p.stderr[-1500:]}" for kind, p in runs.items())


def step_summary(event: StepEvent) -> tuple:
    """What both runners must agree on for one step."""
    subs = tuple((s.op, s.module, s.method, s.status, tuple((o.dtype, tuple(o.shape), o.value)
                                                            for o in s.outputs))
                 for s in event.substeps or ())
    outputs = tuple((o.dtype, tuple(o.shape), o.data is not None, o.value)
                    for o in event.outputs)
    return (event.index, event.op, event.module, event.method, event.status,
            event.error_code == 0, outputs, event.max_abs_diff is None, event.option is None,
            subs, event.token)


CASES = [pytest.param("good", name, id=f"good/{name}") for name in GOOD] + [
    pytest.param("bad", name, id=f"bad/{name}",
                 marks=[pytest.mark.xfail(strict=True, reason=NATIVE_MISMATCHES[name])]
                 if name in NATIVE_MISMATCHES else [])
    for name in BAD]


def test_the_case_lists_are_complete():
    assert len(GOOD) >= 5 and len(BAD) >= 40
    assert set(GOOD_EXIT) <= set(GOOD) and set(NATIVE_MISMATCHES) <= set(BAD)


@pytest.mark.parametrize("kind, name", CASES)
def test_both_runners_conform(runners, workspace, kind, name):
    path = workspace / f"{name}.json"
    runs = {r: run(runners[r], path) for r in RUNNERS}
    codes = {r: p.returncode for r, p in runs.items()}

    if kind == "bad":
        assert codes == dict.fromkeys(RUNNERS, ExitCode.BAD_SCENARIO), shown(runs)
        for r, p in runs.items():
            assert read_events(p.stdout) == [], f"{r} wrote events for a refused scenario"
            assert p.stderr.strip(), f"{r} refused the scenario without saying why"
        with pytest.raises(ScenarioError):
            load_scenario(path)
        return

    scenario = load_scenario(path)
    expected = GOOD_EXIT.get(name, ExitCode.OK)
    assert codes == dict.fromkeys(RUNNERS, expected), shown(runs)
    summaries = {}
    for r, p in runs.items():
        events = parse_events(p.stdout)  # EventError names the field that does not conform
        start, steps, end = events[0], events[1:-1], events[-1]
        assert isinstance(start, StartEvent) and isinstance(end, EndEvent), f"{r}: {events}"
        assert start.runner == r and start.scenario == scenario.name, start
        assert all(isinstance(e, StepEvent) for e in steps), f"{r}: {steps}"
        assert [e.index for e in steps] == list(range(len(scenario.steps))), r
        assert [(e.op, e.module, e.method) for e in steps] == [
            (s.op, s.module, s.method) for s in scenario.steps], r
        for event, step in zip(steps, scenario.steps):
            assert [(s.op, s.module, s.method) for s in event.substeps or ()] == [
                (s.op, s.module, s.method) for s in step.steps], f"{r}: step {event.index}"
            assert (event.status == "ok") == (event.error_code == 0) or event.status == "mismatch"
        failed = sum(e.status != "ok" for e in steps)
        assert (end.steps, end.failed_steps) == (len(steps), failed), f"{r}: {end}"
        assert end.status == ("ok" if expected == ExitCode.OK else "failed"), f"{r}: {end}"
        summaries[r] = [step_summary(e) for e in steps]
    assert summaries["native"] == summaries["python"], shown(runs)


def test_values_are_compared_by_value_alike(runners, workspace):
    """Non-tensor outputs (a metadata method's string, double, int, bool, and a tuple of them):
    both runners report each value, compare a double within tolerance and the rest exactly,
    and say why in the same words."""
    reported = {}
    for name, status in (("values", "ok"), ("value_mismatches", "mismatch")):
        runs = {r: run(runners[r], workspace / f"{name}.json") for r in RUNNERS}
        reported[name] = parse_events(runs["native"].stdout)
        words = {}
        for r, p in runs.items():
            steps = [e for e in parse_events(p.stdout) if isinstance(e, StepEvent)]
            executes = [e for e in steps if e.op == "execute"]
            assert executes and all(e.status == status for e in executes), shown(runs)
            words[r] = [(e.message, e.max_abs_diff) for e in executes]
        assert words["native"] == words["python"], shown(runs)
    values = [o.value for e in reported["values"] if isinstance(e, StepEvent) for o in e.outputs]
    assert values[:6] == ["llama", 0.25, 128, True, 0.5, 3], values
    assert "output 0 is \"llama\", expected \"llamb\"" in words["native"][0][0]


def test_a_decode_step_is_built_alike(runners, workspace):
    """good/decode.json: each decode step's token is the argmax of the last logits and its
    cache the last one with the new entry written at `past`; both runners feed the same tokens
    and compute the same outputs (the program's argmax is (row sum + 2 * token) mod 4)."""
    runs = {r: run(runners[r], workspace / "decode.json") for r in RUNNERS}
    got = {}
    for r, p in runs.items():
        steps = [e for e in parse_events(p.stdout) if isinstance(e, StepEvent)]
        got[r] = [(e.token, [o.sha256 for o in e.outputs]) for e in steps if e.op == "execute"]
    # 1 -> x 2: token 2, entry 2 at 0 -> x 2 + 4: token 2, entry 3 at 1 -> x 5 + 4: token 1
    assert [t for t, _ in got["native"]] == [None, 2, 2, 1], shown(runs)
    assert got["native"] == got["python"], shown(runs)

"""The end-to-end files (tests/e2e) run nowhere but in their CI step, so `.ci/run` must run each
one there: a file that no step runs would be a verdict gone from CI without a word. And every
step `.ci/run` defines runs in one of its two lanes, and every build it starts beside step 1 is
awaited by the step that needs it, whose lane can start it where the build could not start early."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = (ROOT / ".ci" / "run").read_text()


def ci_steps() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("e2e_conftest", ROOT / "tests" / "e2e" /
                                                  "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CI_STEP


def step_body(number: str) -> str:
    found = re.search(rf"^ci_step_{re.escape(number)}\(\) {{\n(.*?)^}}", CI_RUN, re.M | re.S)
    assert found, f".ci/run has no ci_step_{number}"
    return found.group(1)


def test_every_end_to_end_file_is_run_by_its_step():
    steps = ci_steps()
    files = {p.name for p in (ROOT / "tests" / "e2e").glob("test_*.py")}
    assert files == set(steps), "tests/e2e/conftest.py CI_STEP must name every file there"
    for name, number in steps.items():
        commands = [line for line in step_body(number).splitlines()
                    if not line.lstrip().startswith("#")]
        assert any(f"pytest tests/e2e/{name}" in line for line in commands), \
            f"ci_step_{number} in .ci/run does not run tests/e2e/{name}"


def test_every_step_runs_in_a_lane():
    defined = set(re.findall(r"^ci_step_(\w+)\(\) {", CI_RUN, re.M))
    lanes = re.findall(r"^lane ([AB]) ([\w ]+) &$", CI_RUN, re.M)
    assert [letter for letter, _ in lanes] == ["A", "B"]
    placed = [number for _, numbers in lanes for number in numbers.split()]
    assert sorted(placed) == sorted(defined), (placed, defined)
    listed = re.search(r"^for number in ([\w ]+); do  # from the lanes' own step lines", CI_RUN,
                       re.M)
    assert listed and sorted(listed.group(1).split()) == sorted(defined)


def test_every_build_beside_step_1_is_awaited_in_a_lane_that_can_start_it():
    """The builds started beside step 1 (start_build) are awaited by the step that needs them;
    where no low-weight CPU group can be made, that step's lane starts the same command itself,
    before or in the awaiting step."""
    text = CI_RUN.replace("\\\n", " ")
    starts: dict[str, set[str]] = {}
    for name, command in re.findall(r"start_build ([\w-]+) ([^\n]+)", text):
        if name != "NAME":
            starts.setdefault(name, set()).add(" ".join(command.split()))
    assert starts, "no start_build in .ci/run"
    lanes = {letter: numbers.split()
             for letter, numbers in re.findall(r"^lane ([AB]) ([\w ]+) &$", CI_RUN, re.M)}
    for name, commands in starts.items():
        assert len(commands) == 1, f"{name} is started with different commands: {commands}"
        awaiting = [n for steps in lanes.values() for n in steps
                    if re.search(rf"await_build {re.escape(name)}\s", step_body(n))]
        assert len(awaiting) == 1, f"{name}: awaited by steps {awaiting}, not by one"
        lane = next(steps for steps in lanes.values() if awaiting[0] in steps)
        before = lane[:lane.index(awaiting[0]) + 1]
        assert any(re.search(rf"start_build {re.escape(name)}\s", step_body(n)) for n in before), \
            f"{name}: no step of its lane up to step {awaiting[0]} starts it"

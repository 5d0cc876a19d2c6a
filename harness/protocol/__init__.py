"""The runner protocol: what a runner reads, writes and exits with. The one definition that the
Python runner (`harness/runner/python_runner.py`), the harness (`harness/results/run.py`,
`harness/scenario/__init__.py`) and the conformance test of both runners share; the native runner
(`harness/runner/native/`) implements the same rules in C++, and
tests/framework/test_protocol_conformance.py holds the two to them.
docs/runner-protocol.md explains it in prose. One module per concern; import a name from the
module that holds it:

- `wire`: the lines on the wire (`EVENT_PREFIX` before every event line on stdout,
  `STEP_MARKER` lines on stderr, `read_events`, `run_ended`), JSON as the protocol reads it
  (`parse_json`), and `ExitCode`: what a runner's exit status means;
- `scenario_file`: the scenario file's schema: `SCENARIO_VERSION`, the ops (`OP_FIELDS`,
  `PARALLEL_OPS`, `MAX_PARALLEL`), tensor dtypes (`DTYPES`), the non-tensor values an
  output can be (`VALUE_KINDS`), backend option limits, load
  modes, and the validated document's types (`ScenarioFile`, `ScenarioStep`, `TensorSpec`);
- `scenario_check`: `validate_scenario` / `load_scenario` / `check_scenario`, which reject what
  cannot be run (exit 2) with a ScenarioError naming the step and field;
- `events`: typed events (`StartEvent`, `StepEvent` with `Substep`, `Output`, `OptionReport`,
  `Memory`, `EndEvent`); `parse_event` checks one and names the bad field (`EventError`);
- `output`: `RunOutput`, what a runner process left (exit status, stdout, stderr, the QNN trace,
  device logs), as every device returns it;
- `memory`: process memory readings (smaps_rollup, mappings, dma-buf fds), the same for the
  Python runner and a device; `tensors`: raw tensor files and their dtypes; `values`: a
  non-tensor output's bytes and its comparison by value.

Cheap to import: the standard library and `harness.errors` only (runners start as fresh
processes, one per scenario); `tensors` imports numpy only when a function needs it.
"""

"""The Python lifecycle runner: executes a scenario through ExecuTorch's pybindings.

It imports `executorch.extension.pybindings._C` directly (`_portable_lib` in the 1.4 and older
wheels, the same extension under its earlier name): the public `portable_lib` wrapper
imports all of `exir` (seconds per process, and every scenario is a fresh process). Modules
are `_load_program` objects and methods are the method objects the runner holds itself, because
`executorch.runtime.Program.load_method` caches methods for the program's lifetime and so
cannot unload one. Contract: harness/protocol/ (docs/runner-protocol.md explains it).

A `parallel` step runs each sub-step on its own `threading.Thread`, released together by a
`threading.Barrier`. The threads really are concurrent only where the pybindings drop the GIL;
where they hold it (as the 1.5.1 pybindings do around their calls into the runtime) the
sub-steps' runtime calls serialize in whatever order the threads take the GIL. The native
runner is the one that makes the loads overlap; this one exists for parity.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import os
import sys
import threading
import time
from typing import Any
from pathlib import Path

from harness.protocol.scenario_file import (DEFAULT_LOAD_MODE, ScenarioError, ScenarioFile,
                                            ScenarioStep, TensorSpec)
from harness.protocol.events import HARNESS_ERROR_CODE
from harness.protocol.wire import TEARDOWN_INDEX, ExitCode, format_event, format_step_marker
from harness.protocol.scenario_check import load_scenario


def pybindings():
    """The runtime's pybindings extension: `_C` (1.5 on), else `_portable_lib` (1.4 and older)."""
    import importlib

    import torch  # noqa: F401  (loads libtorch, which the extension links; tensors cross as torch's)

    try:
        return importlib.import_module("executorch.extension.pybindings._C")
    except ModuleNotFoundError:
        return importlib.import_module("executorch.extension.pybindings._portable_lib")


def emit(event: dict) -> None:
    sys.stdout.write(format_event(event) + "\n")
    sys.stdout.flush()


def value_output(value, emit_data: bool) -> dict:
    """A non-tensor output as the native runner reports it: its kind (VALUE_KINDS), shape []
    (a list: [n]), its value, and the hash (and with `emit_data` the base64) of its bytes
    (harness.protocol.values.value_bytes). UndescribableOutput for a value of no such kind."""
    from harness.protocol.values import json_value, kind_of, value_bytes

    if isinstance(value, (list, tuple)):
        kinds = {kind_of(v) for v in value}
        kind = kinds.pop() if len(kinds) == 1 else None
        if kind == "int" and any(isinstance(v, float) for v in value):
            kind = None
        if kind not in ("int", "float", "boolean") and value:
            names = sorted({type(v).__name__ for v in value})
            raise UndescribableOutput(f"a list of {' and '.join(names)}")
        kind = kind or "int"
        value, shape = list(value), [len(value)]
    else:
        kind = kind_of(value)
        if kind is None:
            raise UndescribableOutput(f"a {type(value).__name__}")
        shape = []
    raw = value_bytes(kind, value)
    out = {"dtype": kind, "shape": shape, "sha256": hashlib.sha256(raw).hexdigest(),
           "value": json_value(kind, value)}
    if emit_data:
        out["data"] = base64.b64encode(raw).decode("ascii")
    return out


class UndescribableOutput(Exception):
    """An output that is neither a tensor nor one of the protocol's values."""


def undescribable(step: ScenarioStep, index: int, what: str) -> str:
    """The one error of an execute whose output the runner cannot report (the native runner's
    words)."""
    return (f"method '{step.method}' output {index} is {what}, which the runner cannot "
            "describe (it reports tensors, int, double, bool, string and none values, and "
            "lists of int, double or bool)")


def emit_step_marker(index: int) -> None:
    """Mark on stderr where step `index` starts (-1: teardown), so the runtime's own log lines
    can be told apart by step; the runtime writes to fd 2 directly, so flush first."""
    sys.stderr.flush()
    os.write(2, (format_step_marker(index) + "\n").encode())


class Runner:
    def __init__(self, scenario: ScenarioFile) -> None:
        self.C = pybindings()
        self.scenario = scenario
        # Keyed by the steps' module and method names (the protocol's step types allow None).
        self.modules: dict[str | None, Any] = {}
        self.methods: dict[str | None, dict[str | None, Any]] = {}
        # Absolute and normalized, as the kernel prints mapped paths in /proc/self/smaps.
        self.watch = [os.path.realpath(scenario.path(p)) for p in scenario.watch_mappings]
        self.trace = os.environ.get("HARNESS_QNN_TRACE")
        if scenario.qnn_nemesis:
            # The interposer reads its rules at the first QNN call. Python threads carry no OS
            # thread name, so rules naming an actor never match here (the run says so).
            os.environ["HARNESS_QNN_NEMESIS"] = ";".join(scenario.qnn_nemesis)
        # Each module's last execute's outputs as arrays (None for a non-tensor), kept when a
        # step feeds outputs back as inputs (a decode loop).
        self.keeps_outputs = any(s.feed or s.decode or any(sub.feed or sub.decode
                                                           for sub in s.steps)
                                 for s in scenario.steps)
        self.last_outputs: dict[str | None, list[Any]] = {}
        # Each module's last execute's inputs, kept when a step builds its caches from them.
        self.last_inputs: dict[str | None, list[Any]] = {}

    def array(self, spec: TensorSpec):
        import numpy as np

        from harness.protocol.tensors import numpy_dtype

        dtype = numpy_dtype(spec.dtype)
        return np.fromfile(self.scenario.path(spec.file), dtype=dtype).reshape(spec.shape)

    # Steps ---------------------------------------------------------------------------------
    def load_module(self, step: ScenarioStep) -> dict:
        name = step.module
        if name in self.modules:
            raise StepError(f"module {name} is already loaded")
        if step.backend_options:
            raise StepError("backend_options are not supported by the Python runner: the "
                            "executorch pybindings cannot pass a LoadBackendOptionsMap; use the "
                            "native runner (--runner=native)")
        if step.load_mode != DEFAULT_LOAD_MODE:
            raise StepError(f"load_mode {step.load_mode} is not supported by the Python runner: "
                            "the executorch pybindings read a program file only through "
                            f"{DEFAULT_LOAD_MODE} (MmapDataLoader, mlock where permitted); use "
                            "the native runner (--runner=native)")
        pte = self.scenario.path(step.pte or "")  # a load_module step names its program
        self.modules[name] = self.C._load_program(str(pte))
        self.methods[name] = {}
        return {}

    def _module(self, step: ScenarioStep):
        name = step.module
        if name not in self.modules:
            raise StepError(f"module {name} is not loaded")
        return self.modules[name]

    def load_method(self, step: ScenarioStep) -> dict:
        module = self._module(step)
        method = step.method
        if method in self.methods[step.module]:
            raise StepError(f"method {method} of module {step.module} is already loaded")
        self.methods[step.module][method] = module.load_method(method)
        return {}

    def unload_method(self, step: ScenarioStep) -> dict:
        self._module(step)
        if self.methods[step.module].pop(step.method, None) is None:
            raise StepError(f"method {step.method} of module {step.module} is not loaded")
        return {}

    def destroy_module(self, step: ScenarioStep) -> dict:
        self._module(step)
        self.methods.pop(step.module).clear()
        del self.modules[step.module]
        self.last_outputs.pop(step.module, None)
        self.last_inputs.pop(step.module, None)
        # A reference cycle (a traceback, a closure) would keep the module's objects alive
        # past the step; collect them, so the destroy is done when the step says it is.
        gc.collect()
        return {}

    def execute(self, step: ScenarioStep) -> dict:
        import numpy as np

        from harness.protocol.tensors import dtype_name, is_float, torch_to_numpy

        if step.shared_inputs:
            raise StepError("shared_inputs is not supported by the Python runner: the executorch "
                            "pybindings cannot place inputs in QNN shared memory "
                            "(QnnExecuTorchAllocCustomMem); use the native runner "
                            "(--runner=native)")

        module = self._module(step)
        loaded = self.methods[step.module]
        if step.method not in loaded:
            loaded[step.method] = module.load_method(step.method)
        arrays = [self.array(t) for t in step.inputs]
        for index, source in step.feed:  # the module's previous outputs, as a decode loop feeds
            last = self.last_outputs.get(step.module) or []
            if source >= len(last) or last[source] is None:
                raise StepError(f"feed: module '{step.module}' has no output {source} of an "
                                f"earlier execute (it gave {len(last)})")
            if last[source].nbytes != arrays[index].nbytes:
                raise StepError(f"feed: output {source} of the previous execute has "
                                f"{last[source].nbytes} bytes; input {index} takes "
                                f"{arrays[index].nbytes}")
            arrays[index] = np.frombuffer(bytearray(last[source].tobytes()),
                                          dtype=arrays[index].dtype).reshape(arrays[index].shape)
        token = None
        if step.decode is not None:
            token = self.decode_inputs(step, arrays)
        from harness.protocol.tensors import numpy_to_torch

        outputs = loaded[step.method].call([numpy_to_torch(a) for a in arrays])
        if self.keeps_outputs:
            self.last_outputs[step.module] = [torch_to_numpy(o) if hasattr(o, "detach") else None
                                              for o in outputs]
            self.last_inputs[step.module] = arrays
        report = []
        worst = 0.0
        mismatch = False
        message = ""
        expected = step.expected
        for i, out in enumerate(outputs):
            if not hasattr(out, "detach"):  # a value: an int, double, bool, string (metadata)
                try:
                    report.append(value_output(out, step.emit_outputs))
                except UndescribableOutput as exc:
                    raise StepError(undescribable(step, i, str(exc))) from None
                if i < len(expected):
                    why, diff = self.compare_value(report[-1], out, expected[i], step)
                    worst = max(worst, diff)
                    if why:
                        mismatch = True
                        message = message or f"output {i} {why}"
                continue
            array = torch_to_numpy(out)
            raw = array.tobytes()
            report.append({"dtype": dtype_name(array), "shape": list(array.shape),
                           "sha256": hashlib.sha256(raw).hexdigest()})
            if step.emit_outputs:
                report[-1]["data"] = base64.b64encode(raw).decode("ascii")
            if i < len(expected):
                if expected[i].is_value:
                    mismatch = True
                    message = message or (f"output {i} is a tensor, expected "
                                          f"{'an' if expected[i].dtype == 'int' else 'a'} "
                                          f"{expected[i].dtype}")
                    continue
                ref = self.array(expected[i])
                if array.shape != ref.shape or dtype_name(array) != expected[i].dtype:
                    mismatch = True
                    continue
                if not is_float(expected[i].dtype):
                    mismatch = mismatch or not np.array_equal(array, ref)  # integers exactly
                    wide = array.astype(np.float64) - ref.astype(np.float64)
                    worst = max(worst, float(np.abs(wide).max()) if wide.size else 0.0)
                    continue
                ref = ref.astype(np.float64)
                diff = np.abs(array.astype(np.float64) - ref)
                worst = max(worst, float(diff.max()) if diff.size else 0.0)
                if not np.all(diff <= step.atol + step.rtol * np.abs(ref)):
                    mismatch = True
        if expected and len(outputs) != len(expected):
            mismatch = True
        result = {"outputs": report, "max_abs_diff": worst,
                  "status": "mismatch" if mismatch else "ok"}
        if mismatch and message:
            result["message"] = message
        if token is not None:
            result["token"] = token
        return result

    def decode_inputs(self, step: ScenarioStep, arrays: list) -> int:
        """Build a decode step's token and cache inputs in `arrays` from the module's previous
        execute (DecodeSpec); the token it wrote."""
        import numpy as np

        spec = step.decode
        assert spec is not None
        last = self.last_outputs.get(step.module) or []
        before = self.last_inputs.get(step.module) or []
        if not last:
            raise StepError(f"decode: module '{step.module}' has no earlier execute to decode "
                            "from")
        logits = last[spec.logits] if spec.logits < len(last) else None
        if logits is None or logits.size % spec.vocab or spec.row >= logits.size // spec.vocab:
            raise StepError(f"decode: output {spec.logits} of the previous execute has no row "
                            f"{spec.row} of {spec.vocab} logits"
                            + (f" (it has {logits.size} values)" if logits is not None else ""))
        row = logits.reshape(-1, spec.vocab)[spec.row]
        token = int(np.argmax(row.astype(np.float64)))  # the first maximum, as std::max_element
        arrays[spec.token] = arrays[spec.token].copy()
        arrays[spec.token].reshape(-1)[0] = token
        for index, source, axis in spec.caches:
            cur = arrays[index].copy()
            shape = cur.shape
            outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
            length = shape[axis]
            old = before[index] if index < len(before) else None
            new = last[source] if source < len(last) else None
            if (old is None or new is None or old.dtype != cur.dtype or new.dtype != cur.dtype
                    or old.size % (outer * inner) or new.size % (outer * inner)):
                raise StepError(f"decode: input {index} (a cache, axis {axis} of "
                                f"{list(shape)} {cur.dtype}) cannot be built from input {index} "
                                f"and output {source} of the previous execute")
            old_len, new_len = old.size // (outer * inner), new.size // (outer * inner)
            if spec.new > new_len or spec.past > old_len or spec.past + spec.new > length:
                raise StepError(f"decode: input {index}: {spec.new} new entries at {spec.past} "
                                f"do not fit (the cache holds {length}, the previous one "
                                f"{old_len}, output {source} has {new_len})")
            view = cur.reshape(outer, length, inner)
            keep = min(old_len, length)
            view[:, :keep] = old.reshape(outer, old_len, inner)[:, :keep]
            view[:, spec.past:spec.past + spec.new] = new.reshape(outer, new_len, inner)[:, :spec.new]
            arrays[index] = cur
        return token

    def compare_value(self, out: dict, value: Any, spec: TensorSpec,
                      step: ScenarioStep) -> tuple[str, float]:
        """How a value output (`out` as reported, `value` as returned) differs from its
        expected value file (harness.protocol.values)."""
        from harness.protocol.values import a, compare_value, read_value, shown

        if not spec.is_value:
            return (f"is {a(out['dtype'])} ({shown(out['dtype'], out['value'])}), expected "
                    f"{a(spec.dtype)} tensor"), 0.0
        want = read_value(spec.dtype, spec.shape, self.scenario.path(spec.file).read_bytes())
        got = list(value) if isinstance(value, (list, tuple)) else value
        return compare_value(out["dtype"], got, spec.dtype, want, step.atol, step.rtol)

    def snapshot(self, step: ScenarioStep) -> dict:
        return {}

    def get_option(self, step: ScenarioStep) -> dict:
        return {"option": {"backend": step.backend, "key": step.key, "value": None,
                           "supported": False},
                "status": "error", "error_code": HARNESS_ERROR_CODE,
                "message": "the executorch pybindings expose no backend options"}

    set_option = get_option

    def parallel(self, step: ScenarioStep) -> dict:
        """One thread per sub-step, released together; one result for the whole step."""
        subs = step.steps
        barrier = threading.Barrier(len(subs))
        results: list[dict | None] = [None] * len(subs)

        def work(j: int, sub: ScenarioStep) -> None:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:  # another sub-step's thread failed to start
                pass
            started = time.perf_counter()
            try:
                results[j] = self.run_step(sub)
            except Exception as exc:  # noqa: BLE001 (a thread must report, not die silently)
                results[j] = {"status": "error", "error_code": HARNESS_ERROR_CODE,
                              "message": f"runner error: {type(exc).__name__}: {exc}",
                              "outputs": [], "max_abs_diff": None,
                              "elapsed_ms": round((time.perf_counter() - started) * 1000, 3)}

        threads = []
        spawn_error = ""
        for j, sub in enumerate(subs):
            thread = threading.Thread(target=work, args=(j, sub), name=f"parallel-{j}",
                                      daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # "can't start new thread"
                spawn_error = f"runner error: cannot start a thread: {exc}"
                barrier.abort()  # release the threads already waiting; they run anyway
                break
            threads.append(thread)
        for t in threads:
            t.join()
        substeps = []
        for sub, res in zip(subs, results):
            if res is None:  # its thread never started
                res = {"status": "error", "error_code": HARNESS_ERROR_CODE,
                       "message": spawn_error or "runner error: sub-step thread died",
                       "outputs": [], "max_abs_diff": None, "elapsed_ms": 0.0}
            substeps.append({"op": sub.op, "module": sub.module,
                             "method": sub.method, "status": res["status"],
                             "error_code": res["error_code"], "message": res["message"],
                             "outputs": res["outputs"], "max_abs_diff": res["max_abs_diff"],
                             "elapsed_ms": res["elapsed_ms"],
                             **({"token": res["token"]} if "token" in res else {})})
        return combine_substeps(substeps)

    # Loop ----------------------------------------------------------------------------------
    def run_step(self, step: ScenarioStep) -> dict:
        """Run one step; its event's core fields (status, error_code, message, outputs,
        max_abs_diff, option, elapsed_ms, and substeps for `parallel`)."""
        op = step.op
        event = {"status": "ok", "error_code": 0, "message": "", "outputs": [],
                 "max_abs_diff": None, "option": None}
        started = time.perf_counter()
        try:
            handler = getattr(self, op, None)
            if handler is None or op.startswith("_") or op in ("run", "run_step"):
                raise StepError(f"unknown op {op!r}")
            event.update(handler(step))
        except StepError as exc:
            event.update(status="error", error_code=HARNESS_ERROR_CODE, message=str(exc))
        except RuntimeError as exc:  # the runtime's own error
            event.update(status="error", error_code=_error_code(str(exc)), message=str(exc))
        except Exception as exc:  # noqa: BLE001 (bad input, e.g. a short tensor file: the
            # step's error, never an uncaught exception that ends the run without its "end")
            event.update(status="error", error_code=HARNESS_ERROR_CODE,
                         message=f"runner error: {type(exc).__name__}: {exc}")
        event["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return event

    def run(self) -> int:
        from harness.protocol.memory import read_self

        emit({"event": "start", "runner": "python", "pid": os.getpid(),
              "scenario": self.scenario.name})
        failed = 0
        steps = self.scenario.steps
        for index, step in enumerate(steps):
            emit_step_marker(index)
            event = {"event": "step", "index": index, "op": step.op,
                     "module": step.module, "method": step.method}
            event.update(self.run_step(step))
            event["trace_offset"] = _size(self.trace)
            event["memory"] = read_self(self.watch)
            failed += event["status"] != "ok"
            emit(event)
        emit_step_marker(TEARDOWN_INDEX)
        self.methods.clear()  # teardown before "end", as the native runner does
        self.modules.clear()
        emit({"event": "end", "status": "ok" if not failed else "failed", "steps": len(steps),
              "failed_steps": failed})
        return ExitCode.OK if not failed else ExitCode.STEP_FAILED


def combine_substeps(substeps: list[dict]) -> dict:
    """A parallel step's result from its sub-steps' (runner-protocol.md): the first non-ok
    sub-step (in the scenario's order) gives status, error_code and message; outputs are all
    sub-steps' in order; max_abs_diff is the largest reported, or None."""
    bad = next((s for s in substeps if s["status"] != "ok"), None)
    diffs = [s["max_abs_diff"] for s in substeps if s["max_abs_diff"] is not None]
    return {"status": bad["status"] if bad else "ok",
            "error_code": bad["error_code"] if bad else 0,
            "message": bad["message"] if bad else "",
            "outputs": [o for s in substeps for o in s["outputs"]],
            "max_abs_diff": max(diffs) if diffs else None,
            "substeps": substeps}


class StepError(Exception):
    """A step the runner refuses (wrong order, missing file): reported, not raised further."""


def _error_code(message: str) -> int:
    # pybindings say "method->execute() failed with error 0x1"
    marker = "error 0x"
    if marker in message:
        try:
            return int(message.split(marker, 1)[1].split()[0], 16)
        except ValueError:
            pass
    return HARNESS_ERROR_CODE


def _size(path: str | None) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except OSError:
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.runner.python_runner <scenario.json>", file=sys.stderr)
        return ExitCode.BAD_SCENARIO
    try:
        # Validated and its files checked before any step runs, as the native runner does.
        scenario = load_scenario(Path(argv[0]))
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return ExitCode.BAD_SCENARIO
    return Runner(scenario).run()


if __name__ == "__main__":
    sys.exit(int(main(sys.argv[1:])))

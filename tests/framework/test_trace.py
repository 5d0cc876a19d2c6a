"""QNN call trace parsing and replay: identities across handle reuse, violations."""

import pytest

from harness.qnn.trace import TraceFormatError, parse_trace, replay, replay_by_offsets

TRACE = """1 api core=2.40.0 backend=5.51.0 provider=HTP_QTI_AISW bridge=1
2 backend_create rc=0 handle=0x1
3 device_create rc=0 handle=0x1 bridged=1
4 context_create rc=0 handle=0x1 backend=0x1 device=0x1 binary=49152
5 graph_retrieve rc=0 handle=0x1 context=0x1 name=forward
6 graph_execute rc=0 graph=0x1
7 context_free rc=0 handle=0x1
8 context_create rc=0 handle=0x1 backend=0x1 device=0x1 binary=49152
9 graph_execute rc=0 graph=0x1
"""


def test_parse_fields_and_offsets():
    records = parse_trace(TRACE)
    assert [r.kind for r in records][:3] == ["api", "backend_create", "device_create"]
    assert records[3].fields["binary"] == "49152"
    assert records[-1].offset == len(TRACE.encode())


def test_handle_reuse_gets_new_identity_and_execute_on_freed_context_is_a_violation():
    state = replay(parse_trace(TRACE))
    assert state.counts() == {"backend": 1, "context": 1, "device": 1}
    assert state.live_contexts() == {"context#2"}
    assert state.executes == {"context#1": 1}
    # graph 0x1 belonged to context#1, which was freed: executing it again is a violation
    assert any("graph_execute on graph 0x1" in v for v in state.violations)


def test_failed_create_and_unknown_free():
    state = replay(parse_trace("1 context_create rc=5000 handle=0x0 backend=0x1 device=0x1\n"
                               "2 context_free rc=0 handle=0x9\n"))
    assert state.counts()["context"] == 0
    assert state.violations == ["seq 2: context_free of unknown handle 0x9"]


def test_replay_by_offsets_cuts_at_step_boundaries():
    records = parse_trace(TRACE)
    snaps = replay_by_offsets(records, [0, records[3].offset, records[6].offset])
    assert [s["live"]["context"] for s in snaps] == [0, 1, 0]


def test_torn_last_line_is_ignored_and_garbage_is_an_error():
    assert len(parse_trace(TRACE + "10 context_fr")) == 9
    with pytest.raises(TraceFormatError):
        parse_trace("hello world\n")
    with pytest.raises(TraceFormatError):
        parse_trace("3 context_free handle\n")


def test_missing_trace_is_reported_not_read_as_zero(tmp_path):
    """A QNN method was loaded and no trace came back: reported. A QNN module loaded and
    destroyed with no method loaded makes no QNN call, so no trace is right there."""
    from harness.results.assertions import assert_live_counts
    from harness.programs.compile import CompiledModel, MethodReference
    from harness.protocol.output import RunOutput
    from harness.results.run import ScenarioResult
    from harness.scenario import Scenario

    model = CompiledModel("m", "qnn", "SM8650", "fp16", tmp_path / "m.pte",
                          {"forward": MethodReference((), ())}, 0, 0)

    def untraced(sc: Scenario) -> ScenarioResult:
        events = "".join(
            f'HARNESS_EVENT {{"event": "step", "index": {i}, "op": "{s.op}", "status": "ok", '
            '"trace_offset": 0}\n' for i, s in enumerate(sc.steps))
        return ScenarioResult.build(sc, RunOutput(0, events + 'HARNESS_EVENT {"event": "end"}\n',
                                                  ""), [])

    loaded = untraced(Scenario("untraced").load_module("A", model).load_method("A", "forward"))
    with pytest.raises(AssertionError, match="no QNN call trace was recorded"):
        assert_live_counts(loaded)
    assert_live_counts(untraced(Scenario("no_call").load_module("A", model).destroy_module("A")))


def test_htp_memory_bound_uses_live_contexts(tmp_path):
    """dma-buf growth is allowed per live context and must return when none is live."""
    import json

    from harness.results.assertions import assert_htp_memory_bounded
    from harness.programs.compile import CompiledModel
    from harness.qnn.trace import parse_trace
    from harness.protocol.output import RunOutput
    from harness.results.run import ScenarioResult
    from harness.scenario import Scenario

    model = CompiledModel("m", "qnn", "SM8650", "fp16", tmp_path / "m.pte", {}, 0, 0)
    sc = Scenario("dmabuf").load_module("A", model).snapshot().destroy_module("A")
    trace = parse_trace("1 api core=2.40.0\n2 backend_create rc=0 handle=0x1\n"
                        "3 context_create rc=0 handle=0x1\n4 context_free rc=0 handle=0x1\n")
    offsets = [trace[0].offset, trace[2].offset, trace[3].offset]

    def result(dmabuf_kb):
        lines = [("HARNESS_EVENT " + json.dumps({
            "event": "step", "index": i, "op": s.op, "status": "ok", "trace_offset": offsets[i],
            "memory": {"dmabuf": {"count": 1, "bytes": kb * 1024}}})) for i, (s, kb) in
            enumerate(zip(sc.steps, dmabuf_kb))] + ['HARNESS_EVENT {"event": "end"}']
        return ScenarioResult.build(sc, RunOutput(0, "\n".join(lines), ""), trace)

    assert_htp_memory_bounded(result([0, 4000, 0]), per_context_kb=4096)
    with pytest.raises(AssertionError, match=r"step 1 snapshot: dma-buf \+5000 kB with 1 live contexts"):
        assert_htp_memory_bounded(result([0, 5000, 0]), per_context_kb=4096)
    with pytest.raises(AssertionError, match=r"step 2 destroy_module\(A\): dma-buf \+100 kB with 0 live"):
        assert_htp_memory_bounded(result([0, 4000, 100]), per_context_kb=4096)


def test_a_log_handle_freed_under_a_live_backend_or_device_is_a_violation():
    lines = ["1 log_create rc=0 handle=0x1 level=1",
             "2 backend_create rc=0 handle=0x1 log=0x1",
             "3 device_create rc=0 handle=0x1 bridged=1 log=0x1 soc=57 arch=-1",
             "4 log_create rc=0 handle=0x2 level=5",
             "5 log_free rc=0 handle=0x1"]
    state = replay(parse_trace("\n".join(lines) + "\n"))
    assert state.violations == [
        "seq 5: log_free of log handle 0x1 while backend#1, device#1 created with it live"]
    # the runtime's own teardown order: device and backend first, then their log
    teardown = lines[:3] + ["4 device_free rc=0 handle=0x1", "5 backend_free rc=0 handle=0x1",
                            "6 log_free rc=0 handle=0x1"]
    assert replay(parse_trace("\n".join(teardown) + "\n")).violations == []

"""valgrind's XML report read into findings (harness.results.valgrind): kind, stacks, sizes, the
library of the defect's top frame, the runner's op on the stack and the signature line a known
issue matches. The report is the shape memcheck 3.19 wrote for S1 on QAIRT 2.49, cut down."""

import pytest

from harness.results.failures import Failure
from harness.results.valgrind import parse, short_name

pytestmark = pytest.mark.unit

FRAME = "<frame><ip>0x1</ip><obj>/x/{obj}</obj>{fn}</frame>"
INTERPOSER = "interposer/46e219c1143e893a/libQnnHtp.so"  # the harness's, in front of QNN's


def frames(*pairs: tuple[str, str]) -> str:
    return "<stack>" + "".join(FRAME.format(obj=o, fn=f"<fn>{f}</fn>" if f else "")
                               for o, f in pairs) + "</stack>"


TEARDOWN = (("libexecutorch_backend_qnn.so", ""),
            ("libexecutorch.so", "executorch::runtime::Method::~Method()"),
            ("harness-runner", "harness::Runner::destroy(harness::Runner::LiveModule&amp;)"),
            ("harness-runner", "harness::Runner::destroy_module(harness::Step const&amp;)"))
REPORT = f"""<?xml version="1.0"?>
<valgrindoutput><protocolversion>4</protocolversion><tool>memcheck</tool>
<error><unique>0x0</unique><tid>1</tid><kind>InvalidRead</kind>
<what>Invalid read of size 4</what>
{frames(("libQnnHtp.so", ""), (INTERPOSER, "w_context_free"), *TEARDOWN)}
<auxwhat>Address 0xcc6a380 is 0 bytes inside a block of size 27,648 free'd</auxwhat>
{frames(("vgpreload_memcheck-amd64-linux.so", "operator delete(void*)"),
        ("libQnnHtp.so", "gpe_delete"), (INTERPOSER, "w_context_free"), *TEARDOWN)}
<auxwhat>Block was alloc'd at</auxwhat>
{frames(("libQnnHtp.so", "hexagon_nn_deserialize_graph"), ("libQnnHtp.so", "w_context_from_binary"))}
</error>
<error><unique>0x1e</unique><tid>1</tid><kind>Leak_DefinitelyLost</kind>
<xwhat><text>120 bytes in 3 blocks are definitely lost in loss record 31 of 54</text>
<leakedbytes>120</leakedbytes><leakedblocks>3</leakedblocks></xwhat>
{frames(("vgpreload_memcheck-amd64-linux.so", "operator new(unsigned long)"),
        ("libexecutorch_backend_qnn.so", ""),
        ("libexecutorch.so", "executorch::runtime::BackendDelegate::Init(a, b)"),
        ("harness-runner", "harness::Runner::execute(harness::Step const&amp;)"))}
</error>
<errorcounts/></valgrindoutput>"""


def test_an_invalid_read_keeps_its_stacks_sizes_and_library():
    read, _ = parse(REPORT)
    assert (read.kind, read.size, read.block) == ("InvalidRead", 4, 27648)
    assert (read.library, read.where) == ("libQnnHtp.so", "qnn")
    # The interposer's frame is the harness's, not QNN's, though its file has QNN's name.
    assert read.stack[1].fn == "w_context_free" and read.stack[1].obj == "harness-interposer"
    assert read.stack[1].owner() == "harness" and read.stack[0].owner() == "qnn"
    (freed, free_stack), (alloc, alloc_stack) = read.aux
    assert "free'd" in freed and free_stack[1].fn == "gpe_delete"
    assert alloc == "Block was alloc'd at" and alloc_stack[0].fn == "hexagon_nn_deserialize_graph"
    assert read.runner_op() == "destroy_module"
    signature = read.signature()
    assert signature.startswith("valgrind InvalidRead size=4 block=27648 in libQnnHtp.so: ")
    assert "w_context_free [harness-interposer]" in signature
    assert "gpe_delete [libQnnHtp.so]" in signature


def test_a_leak_is_its_allocation_stack_and_leaked_bytes():
    leak = parse(REPORT)[1]
    assert (leak.kind, leak.size, leak.block) == ("Leak_DefinitelyLost", 120, None)
    assert leak.library == "libexecutorch_backend_qnn.so" and leak.where == "executorch"
    assert leak.runner_op() == "execute"
    # The allocator's frame is not part of the signature: it starts at the defect's library.
    assert "operator new" not in leak.signature()


def test_a_report_cut_short_by_a_timeout_keeps_its_whole_errors():
    cut = REPORT[:REPORT.index("<kind>Leak_DefinitelyLost")]
    assert [f.kind for f in parse(cut)] == ["InvalidRead"]
    assert parse("") == []


def test_short_names_drop_templates_parameters_and_clones():
    assert short_name("std::_Hashtable<a, std::pair<b, c> >::_M_erase(x, y) [clone .isra.0]") \
        == "std::_Hashtable::_M_erase"
    assert short_name("executorch::runtime::Method::~Method()") == \
        "executorch::runtime::Method::~Method"


def test_a_known_issue_of_kind_memory_matches_by_kind_frames_and_size():
    from harness.results.known_issues import KnownIssue

    read = parse(REPORT)[0]
    failure = Failure("memory", read.signature(), "s1", 4, "destroy_module(A)")
    issue = KnownIssue(
        "x", (">=1.5",), ("t",), "r",
        r"valgrind InvalidRead size=4 block=(?P<size>\d+) in libQnnHtp\.so: .*~Method"
        r".*free'd: .*gpe_delete", ("memory",), where="qnn", size=(27648, 27648))
    assert issue.covers(failure)
    other = Failure("memory", read.signature().replace("27648", "64"), "s1", 4, "")
    assert not issue.covers(other)


def test_findings_are_failures_at_the_step_their_runner_frame_names(tmp_path):
    """S1 (load A, load B, exec A, exec B, destroy A, exec B, destroy B, snapshot): the read
    under destroy_module goes to the first destroy; a leak allocated under execute, an op of
    three steps, is the run's."""
    import dataclasses

    from harness.results.failures import run_failures
    from harness.results.run import ScenarioResult
    from tests.framework.test_known_issues import s1_run

    plain = s1_run(tmp_path, {})
    assert run_failures(plain) == []
    output = dataclasses.replace(plain.output, valgrind_xml=REPORT)
    result = ScenarioResult.build(plain.scenario, output, [], tmp_path)
    read, leak = [f for f in run_failures(result) if f.kind == "memory"]
    assert (read.step, read.where) == (4, "destroy_module(A)")
    assert read.message.startswith("valgrind InvalidRead size=4 block=27648 in libQnnHtp.so")
    assert "gpe_delete [libQnnHtp.so]" in read.message
    assert str(tmp_path / "valgrind.xml") in read.message
    assert (leak.step, leak.where) == (None, "the run")

"""Crash sites: the runners' backtrace (harness/runner/native/crash_report.cpp) read into the one
`crash site:` line a known issue matches, and kept out of the log tails."""

from harness.results.crash_site import crash_site_line, parse_crash, without_crash_report

REPORT = """[INFO] [Qnn ExecuTorch]: Use cached delegate handle for current method: forward
harness-runner: fatal signal 11 (SIGSEGV) at fault address 0x20 in thread 4242
harness-runner: backtrace of the crashing thread:
harness-runner:   #0 pc 0x7f0000020ef4 libexecutorch_backend_qnn.so+0x20ef4
harness-runner:   #1 pc 0x7f0000021355 libexecutorch_backend_qnn.so+0x21355
harness-runner:   #2 pc 0x7f00000184cc libexecutorch.so+0x184cc
harness-runner:   #3 pc 0x0 (not in any mapped file)
harness-runner: symbols of the crashing thread:
harness-runner:   #0
harness-runner:   #1
harness-runner:   #2 _ZN10executorch7runtime6Method7executeEv+0x1ec
harness-runner:   #3
[INFO] [Qnn ExecuTorch]: never reached
"""


def test_the_report_becomes_one_line_with_each_frame_and_its_symbol():
    site = parse_crash(REPORT)
    assert site is not None and site.signal == "SIGSEGV" and site.fault_address == 0x20
    assert [f.module for f in site.frames] == ["libexecutorch_backend_qnn.so",
                                               "libexecutorch_backend_qnn.so", "libexecutorch.so",
                                               "(not in any mapped file)"]
    line = crash_site_line(REPORT)
    assert line.startswith("crash site: SIGSEGV at fault address 0x20; frames: "
                           "#0 libexecutorch_backend_qnn.so+0x20ef4 <- ")
    assert "#2 libexecutorch.so+0x184cc executorch::runtime::Method::execute+0x1ec" in line
    assert "#3 0x0 (a call through a null function pointer)" in line


def test_no_report_is_an_unknown_site_which_no_exact_entry_matches():
    assert crash_site_line("Segmentation fault\n") == "crash site: unknown (no backtrace)"


def test_an_abort_has_no_fault_address():
    text = ("harness-runner: fatal signal 6 (SIGABRT) in thread 7\n"
            "harness-runner: backtrace of the crashing thread:\n"
            "harness-runner:   #0 pc 0x7f00008aeec libc.so.6+0x8aeec\n")
    assert crash_site_line(text) == "crash site: SIGABRT; frames: #0 libc.so.6+0x8aeec"


def test_log_tails_keep_the_runtimes_words_not_the_backtrace():
    kept = without_crash_report(REPORT)
    assert "Use cached delegate handle" in kept and "never reached" in kept
    assert "harness-runner:" not in kept


def test_a_report_other_threads_wrote_between_is_still_read():
    # Another thread logs while the crashing one reports: each report line is one write of its
    # own (after a newline), so the runtime's words fall between lines, never inside one.
    text = ("[INFO] [Qnn ExecuTorch]: \n"
            "harness-runner: fatal signal 11 (SIGSEGV) at fault address 0x20 in thread 9\n"
            "Destroy Qnn context\n\n"
            "harness-runner: backtrace of the crashing thread:\n\n"
            "harness-runner:   #0 pc 0x7f0000020ef4 libexecutorch_backend_qnn.so+0x20ef4\n")
    assert crash_site_line(text) == ("crash site: SIGSEGV at fault address 0x20; frames: "
                                     "#0 libexecutorch_backend_qnn.so+0x20ef4")
    assert without_crash_report(text).splitlines() == ["[INFO] [Qnn ExecuTorch]: ",
                                                      "Destroy Qnn context"]


def test_the_fault_address_is_placed_in_its_mapping():
    """A SIGBUS storing into a full disk's file mapping says which file and where in it."""
    text = ("harness-runner: fatal signal 7 (SIGBUS) at fault address 0x7ffff3ff4000 in mapping "
            "stack.xnncache+0x7ff000 in thread 9\n"
            "harness-runner: backtrace of the crashing thread:\n"
            "harness-runner:   #0 pc 0x7f0000001000 libc.so.6+0x1000\n")
    site = parse_crash(text)
    assert site is not None and site.fault_mapping == "stack.xnncache+0x7ff000"
    assert site.describe().startswith("crash site: SIGBUS at fault address 0x7ffff3ff4000 "
                                      "(inside stack.xnncache+0x7ff000); frames: #0 libc.so.6")
    anonymous = parse_crash(text.replace("stack.xnncache+0x7ff000", "(anonymous memory)"))
    assert anonymous is not None and anonymous.fault_mapping == "(anonymous memory)"
    assert "inside" not in anonymous.describe()  # only a mapped file is named


def test_the_registry_wrappers_frame_is_left_out():
    """--runtime-variant's wrapper sits between the runtime's frames of an init or execute: the
    crash site is the runtime's own with or without it (a known issue names those frames)."""
    head = ("harness-runner: fatal signal 11 (SIGSEGV) at fault address 0x0 in mapping (not in "
            "any mapped file) in thread 7\nharness-runner: backtrace of the crashing thread:\n")
    plain = head + ("harness-runner:   #0 pc 0x7f00000145d libexecutorch_backend_qnn.so+0x1445d\n"
                    "harness-runner:   #1 pc 0x7f000000e0d libexecutorch.so+0x14e0c\n")
    wrapped = head + ("harness-runner:   #0 pc 0x7f00000145d libexecutorch_backend_qnn.so+0x1445d\n"
                      "harness-runner:   #1 pc 0x7f00000734a libharness_registry_wrapper.so+0x7349\n"
                      "harness-runner:   #2 pc 0x7f000000e0d libexecutorch.so+0x14e0c\n")
    assert crash_site_line(wrapped) == crash_site_line(plain)
    assert "#1 libexecutorch.so+0x14e0c" in crash_site_line(wrapped)

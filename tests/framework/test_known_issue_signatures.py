"""Each known issue excuses its bug's own signature and nothing else in the same test.

For every entry of device_configs/known_issues.yaml: a failure in the bug's own words (the
runtime's message, the crash site the runners write, the wrong-output pattern) is covered, and
failures of another cause the same test could meet (another crash site, a bare signal with no
backtrace, an unrelated mismatch, another runtime error) are not. A new entry must be added
here, so no entry can excuse any crash or any accuracy regression by a bare signal or "outputs
differ".
"""

import json
from pathlib import Path

import pytest

from harness.results.failures import Failure
from harness.results.known_issues import BUG_CLASSES, load_known_issues

MISMATCH = ("outputs differ from the reference beyond tolerance (max abs diff 0.4577); reference: "
            "eager PyTorch on CPU; output 0 got [0.1 0.2], expected [0.5 0.6] (first 2 of 8)")
BARE_SEGV = "runner crashed with signal SIGSEGV\ncrash site: unknown (no backtrace)"
OTHER_SEGV = ("runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x8; "
              "frames: #0 harness-runner+0x1234 <- #1 libexecutorch.so+0x182e0 "
              "executorch::runtime::Method::execute+0x10")
OTHER_ERROR = ("execute(forward) failed: Error::Internal (0x1)\n[ERROR] [Qnn ExecuTorch]: "
               "qnn_graph_execute failed. Error 1002")
# a SIGBUS of the same frames outside the cache file's mapping (the program's own mapping)
OTHER_BUS = ("runner crashed with signal SIGBUS\ncrash site: SIGBUS at fault address 0x7fcc3c405000 "
             "(inside model.pte+0x1000); frames: #0 libc.so.6+0x16e0ba <- #3 "
             "libexecutorch_backend_xnnpack.so+0x54624 xnn_create_fully_connected_nc_f32+0x84 <- "
             "#6 libexecutorch_backend_xnnpack.so+0x2610b7 executorch::backends::xnnpack::"
             "delegate::XNNCompiler::compileModel+0xd97")
OTHER_ABORT = ("runner crashed with signal SIGABRT\ncrash site: SIGABRT; frames: #0 libc.so.6+0x8aeec"
               " <- #1 libc.so.6+0x3bfb1 gsignal+0x11 <- #2 libc.so.6+0x26471 abort+0xd2 <- #3 "
               "harness-runner+0x4242")
# valgrind findings (--valgrind) of other causes, as harness/results/valgrind.py signs them
OTHER_MEMORY = [
    # a definite leak under the QNN backend's init (another entry's, or none)
    "valgrind Leak_DefinitelyLost size=120 in libexecutorch_backend_qnn.so: ?? "
    "[libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so] <- "
    "executorch::runtime::BackendDelegate::Init [libexecutorch.so]",
    # init against init at another address of the library's data (not the delegate maps)
    "valgrind Race size=8 in libexecutorch_backend_qnn.so: ?? [libexecutorch_backend_qnn.so] <- ?? "
    "[libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so] <- ?? "
    "[libexecutorch_backend_qnn.so] <- executorch::runtime::BackendDelegate::Init [libexecutorch.so]"
    "; This conflicts with a previous write of size 8 by thread #3: ?? [libexecutorch_backend_qnn.so]"
    " <- ?? [libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so] <- ?? "
    "[libexecutorch_backend_qnn.so]",
    # a shared_ptr's control block released at two destroys
    "valgrind Race size=8 block=48 in libexecutorch_backend_qnn.so: ?? [libexecutorch_backend_qnn.so]"
    " <- ?? [libexecutorch_backend_qnn.so] <- std::_Sp_counted_base::_M_release_last_use_cold "
    "[harness-runner] <- ?? [libexecutorch_backend_qnn.so] <- executorch::runtime::Method::~Method "
    "[libexecutorch.so]; This conflicts with a previous read of size 8 by thread #2: ?? "
    "[libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so]",
    # an invalid read of another block in QNN's teardown
    "valgrind InvalidRead size=8 block=4096 in libQnnHtp.so: ?? [libQnnHtp.so] <- "
    "executorch::runtime::Method::~Method [libexecutorch.so]; Address 0x1 is 0 bytes inside a "
    "block of size 4,096 free'd: ?? [libQnnHtp.so] <- hexagon_nn_close [libQnnHtp.so]; Block was "
    "alloc'd at: ?? [libQnnHtp.so] <- hexagon_nn_open [libQnnHtp.so]",
    # an uninitialised value the runner itself made
    "valgrind UninitCondition in ?: memcmp [libc.so.6] <- harness::Runner::execute [harness-runner]"
    "; Uninitialised value was created by a heap allocation: harness::Runner::load_method "
    "[harness-runner]",
]
UNRELATED = [Failure("memory", words) for words in OTHER_MEMORY] + [
             Failure("crash", BARE_SEGV), Failure("crash", OTHER_SEGV), Failure("crash", OTHER_ABORT),
             Failure("crash", OTHER_BUS),
             Failure("mismatch", MISMATCH), Failure("error", OTHER_ERROR),
             Failure("check", "QNN context 0x2 is live after every module was destroyed"),
             Failure("timeout", "runner hung: killed after timeout")]

# The repeated-failure test's words: the heap per failed load, then the handles left.
CYCLES = ("heap grows {} B per cycle with every {} failing, a failed load must leave nothing "
          "(1824 B per cycle with nothing injected: the destroy leak of a load that succeeded); "
          "QNN still holds handles once every module is destroyed (live {{'backend': 1, "
          "'context': {}, 'device': 1}}) after 12 failed cycles")

# Each entry's own signature, as a run meets it (the words are the runtime's and the runners').
OWN = {
    "qnn-delegate-cache-module-lifetime": [Failure("error", (
        "execute(B.forward) failed: Error::Internal (0x1)\nE 00:00:00.069393 executorch:"
        "QnnExecuTorchBackend.cpp:128] DelegateHandle has been deleted"))],
    "qnn-delegate-cache-module-lifetime-orderings": [
        Failure("error", "DelegateHandle has been deleted"),
        Failure("check", "module B runs on context 0x1: it is using another module's cached context")],
    "xnnpack-weight-cache-unverified-contents": [
        Failure("mismatch", MISMATCH, scenario="x1_3_corrupted"),
        Failure("check", "a damaged XNNPACK packed-weight cache was used as it is (outputs "
                         "wrong with it, right without a cache)")],
    "qnn-init-failure-leaks-handles": [
        Failure("check", "scenario s6_bad_context: after the failed init of X, QNN still holds "
                "handles: after step 2 snapshot: LiveCounts(backend=1, context=1, device=1); after "
                "step 4 snapshot: LiveCounts(backend=1, context=1, device=1); after step 8 "
                "snapshot: LiveCounts(backend=1, context=1, device=1)\nQNN objects created by the "
                "failed init (none freed since):\n    seq 2 log_create rc=0"),
        Failure("check", "QNN still holds handles once every module is destroyed (live "
                "{'backend': 1, 'context': 0, 'device': 1}) after QnnContext_createFromBinary #1 "
                "failed in step 0 load(A)"),
        Failure("check", "QNN still holds handles once every module is destroyed (live "
                "{'backend': 1, 'context': 12, 'device': 1}) after QnnGraph_retrieve #1 failed"),
        Failure("check", "heap grows 688 B per cycle with every QnnBackend_create failing, a "
                "failed load must leave nothing (1808 B per cycle with nothing injected: the "
                "destroy leak of a load that succeeded)", scenario="cycles_qnnbackend_create"),
        Failure("check", CYCLES.format(4064, "QnnContext_createFromBinary", 0),
                scenario="cycles_qnncontext_createfrombinary"),
        Failure("check", CYCLES.format(206816, "QnnGraph_retrieve", 12),
                scenario="cycles_qnngraph_retrieve")],
    "qnn-concurrent-first-context-create-crash": [Failure("crash", (
        "runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x0; frames: "
        "#0 libQnnHtp.so+0xf7e339 <- #3 libQnnHtp.so+0xf25e71 hexagon_nn_deserialize_graph+0x621"
        " <- #11 libexecutorch_backend_qnn.so+0x27092 <- #14 libexecutorch.so+0x14e0c "
        "executorch::runtime::BackendDelegate::Init+0x33c"))],
    "qnn-delegate-cache-concurrent-execute": [
        Failure("check", "it is using another module's cached context"),
        Failure("mismatch", MISMATCH + "; pattern: the outputs are byte-identical to module A's "
                "execute of forward in the same parallel step (sha256 3f2a...), on other inputs")],
    "qnn-delegate-cache-destroy-during-execute": [
        Failure("crash", "runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault "
                "address 0x20; frames: #0 libexecutorch_backend_qnn.so+0x20ef4 "
                "std::_Hashtable<...>::find+0x14 <- #5 libexecutorch.so+0x184cc "
                "executorch::runtime::Method::execute+0x1ec"),
        Failure("error", "DelegateHandle has been deleted"),
        Failure("error", "<E> Context with handle 0x1: free in progress")],
    "qnn-delegate-cache-parallel-same-program": [
        Failure("check", "it is using another module's cached context")],
    "qnn-spill-fill-size-last-program-only": [
        Failure("check", "2 delegates without the program's spill-fill size")],
    "pybindings-abort-on-non-utf8-log": [Failure("crash", (
        "runner crashed with signal SIGABRT\ncrash site: SIGABRT; frames: #0 libc.so.6+0x8aeec <- "
        "#2 libc.so.6+0x26471 abort+0xd2 <- #3 libstdc++.so.6.0.30+0x9d918 <- #9 "
        "_C.cpython-311-x86_64-linux-gnu.so+0x11285 <- #12 libexecutorch.so+0x25802 "
        "executorch::runtime::internal::vlogf+0xa2"))],
    "qnn-mutable-buffer-initial-value": [
        Failure("mismatch", MISMATCH + "; pattern: output 0 is the method's output with its "
                "mutable buffers started at zero, not at their initial value (15 of 16 elements; "
                "1 other element(s), up to 131008 in magnitude: uninitialised memory)")],
    "qnn-mutable-buffer-shared-across-modules": [
        Failure("check", "modules A and B of one program do not each start from the program's "
                         "initial state and keep their own"),
        Failure("mismatch", MISMATCH + "; pattern: output 0 is the method's output at its "
                "execute 3 since a load (with its buffers started at zero), not at execute 1: "
                "it carries a state it did not make (14 of 16 elements; 2 other element(s), up "
                "to 131008 in magnitude: uninitialised memory)")],
    "qnn-destroy-leaks-qnn-manager": [Failure("check", (
        "memory grows per load/destroy cycle: malloc in use grows +1888 B/cycle"))],
    "qnn-runtime-option-wrong-type-accepted": [
        Failure("check", "a wrongly typed runtime option was accepted")],
    "qnn-per-load-options-ignored": [
        Failure("check", "a per-load QNN runtime option had no effect")],
    "qnn-log-level-change-frees-live-log-handle": [Failure("check", (
        "log_free of log handle 0x1 while backend#1, device#1 created with it live"))],
    "qnn-online-prepare-crash-in-qnnsystem": [Failure("crash", (
        "runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x7f78d20d6767;"
        " frames: #0 libQnnSystem.so+0x92841 <- #1 libexecutorch_backend_qnn.so+0x26ba3 <- #2 "
        "libexecutorch_backend_qnn.so+0x27117 <- #5 libexecutorch.so+0x14e0c "
        "executorch::runtime::BackendDelegate::Init+0x33c"))],
    "qnn-backend-bundle-first-program-soc": [
        Failure("check", "a program's context lives on a device created for another SoC")],
    "xnnpack-cache-full-disk-sigbus": [Failure("crash", (
        "runner crashed with signal SIGBUS\ncrash site: SIGBUS at fault address 0x7fcc3c405000 "
        "(inside stack.xnncache+0x800000); frames: #0 libc.so.6+0x16e0ba <- #1 "
        "libexecutorch_backend_xnnpack.so+0x64faf <- #3 libexecutorch_backend_xnnpack.so+0x54624 "
        "xnn_create_fully_connected_nc_f32+0x84 <- #6 libexecutorch_backend_xnnpack.so+0x2610b7 "
        "executorch::backends::xnnpack::delegate::XNNCompiler::compileModel+0xd97"))],
    "qnn-shared-buffer-alloc-calls-null-off-android": [Failure("crash", (
        "runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x0; frames: "
        "#0 0x0 (a call through a null function pointer) <- #1 "
        "libexecutorch_backend_qnn.so+0x1aed6"))],
    "qnn-delegated-mutable-buffer-read-uninitialised": [Failure("memory", (
        "valgrind UninitCondition in libQnnHtp.so: ?? [libQnnHtp.so] <- ?? [libQnnHtp.so] <- "
        "continue_execution_bkgrnd_thread [libQnnHtp.so] <- Graph::exec_bkgrnd_worker [libQnnHtp.so]"
        "; Uninitialised value was created by a heap allocation: ?? [libexecutorch_backend_qnn.so] "
        "<- ?? [libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so] <- "
        "executorch::runtime::BackendDelegate::Init [libexecutorch.so]")),
        Failure("memory", (
            "valgrind SyscallParam block=1921 in ?: harness::emit_event [harness-runner] <- "
            "harness::Runner::run [harness-runner]; Address 0xcf54d3c is 236 bytes inside a block of "
            "size 1,921 alloc'd: harness::::append_text [harness-runner]; Uninitialised value was "
            "created by a heap allocation: ?? [libexecutorch_backend_qnn.so] <- ?? "
            "[libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so] <- "
            "executorch::runtime::BackendDelegate::Init [libexecutorch.so]"))],
    "qnn-context-free-reads-freed-block-qairt-2.49": [Failure("memory", (
        "valgrind InvalidRead size=4 block=27648 in libQnnHtp.so: ?? [libQnnHtp.so] <- ?? "
        "[libQnnHtp.so] <- ?? [libexecutorch_backend_qnn.so] <- executorch::runtime::Method::~Method "
        "[libexecutorch.so]; Address 0xcc05580 is 0 bytes inside a block of size 27,648 free'd: ?? "
        "[libQnnHtp.so] <- ?? [libQnnHtp.so] <- gpe_delete [libQnnHtp.so] <- ?? [libQnnHtp.so]; "
        "Block was alloc'd at: ?? [libQnnHtp.so] <- ?? [libQnnHtp.so] <- "
        "hexagon_nn_deserialize_graph [libQnnHtp.so] <- ?? [libQnnHtp.so]"))],
    "qnn-init-crashes-without-its-compile-spec": [Failure("crash", (
        "runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x0; frames: #0 "
        "libexecutorch_backend_qnn.so+0x1445d <- #1 libexecutorch_backend_qnn.so+0xf503 <- #2 "
        "libexecutorch.so+0x14e0c executorch::runtime::BackendDelegate::Init+0x33c <- #3 "
        "libexecutorch.so+0x1981f executorch::runtime::Method::init+0x34f"))],
    "qnn-delegate-maps-read-unlocked": [
        Failure("memory", (
            "valgrind Race size=8 in libexecutorch_backend_qnn.so: ?? [libexecutorch_backend_qnn.so]"
            " <- executorch::runtime::Method::execute_instruction [libexecutorch.so] <- "
            "executorch::runtime::Method::execute [libexecutorch.so]; This conflicts with a previous "
            "write of size 8 by thread #2: ?? [libexecutorch_backend_qnn.so] <- "
            "executorch::runtime::Method::~Method [libexecutorch.so]")),
        Failure("memory", (
            "valgrind Race size=8 in libexecutorch_backend_qnn.so: ?? [libexecutorch_backend_qnn.so]"
            " <- executorch::runtime::Method::~Method [libexecutorch.so] <- "
            "harness::Runner::destroy_module [harness-runner]; This conflicts with a previous write "
            "of size 8 by thread #3: std::__detail::_Map_base::operator[] "
            "[libexecutorch_backend_qnn.so] <- ?? [libexecutorch_backend_qnn.so] <- "
            "executorch::runtime::BackendDelegate::Init [libexecutorch.so]"))],
    "xnnpack-missing-external-data-crashes": [Failure("crash", (
        "runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x0; frames: "
        "#0 libexecutorch_backend_xnnpack.so+0x25e217 executorch::backends::xnnpack::delegate::"
        "getConstantDataPtr+0x347 <- #1 libexecutorch_backend_xnnpack.so+0x25e54f "
        "executorch::backends::xnnpack::delegate::getConstantDataPtr+0x3f <- #2 "
        "libexecutorch_backend_xnnpack.so+0x25eb33 executorch::backends::xnnpack::delegate::"
        "defineTensor+0x243 <- #3 libexecutorch_backend_xnnpack.so+0x2609e5 "
        "executorch::backends::xnnpack::delegate::XNNCompiler::compileModel+0x6c5"))],
}
OWN["qnn-delegate-cache-forced-warm-hit"] = OWN["qnn-delegate-cache-parallel-same-program"]
OWN["qnn-delegate-cache-forced-concurrent-execute"] = OWN["qnn-delegate-cache-parallel-same-program"]
OWN["qnn-delegate-cache-forced-destroy-during-execute"] = OWN["qnn-delegate-cache-module-lifetime"]
OWN["qnn-delegate-cache-forced-execute-on-freed-context"] = [
    Failure("error", "[ERROR] [Qnn ExecuTorch]: qnn_graph_execute failed. Error 6001"),
    Failure("error", "<E> Context with handle 0x1: free in progress"),
    Failure("error", "DelegateHandle has been deleted")]
OWN["qnn-delegate-cache-forced-destroy-under-execute-step"] = \
    OWN["qnn-delegate-cache-destroy-during-execute"][:1]
OWN["qnn-concurrent-first-context-create-crash-forced"] = \
    OWN["qnn-concurrent-first-context-create-crash"]

ENTRIES = {issue.id: issue for issue in load_known_issues()}


def test_every_entry_has_its_signatures_here():
    assert set(OWN) == set(ENTRIES)


@pytest.mark.parametrize("entry_id", sorted(ENTRIES))
def test_the_entry_covers_its_own_signature(entry_id):
    entry = ENTRIES[entry_id]
    for failure in OWN[entry_id]:
        assert entry.covers(failure), f"{entry_id} does not cover its own {failure.kind}"


@pytest.mark.parametrize("entry_id", sorted(ENTRIES))
def test_the_entry_does_not_excuse_another_cause_in_the_same_test(entry_id):
    entry = ENTRIES[entry_id]
    excused = [f.describe() for f in UNRELATED if entry.covers(f)]
    assert not excused, f"{entry_id} excuses failures of another cause: {excused}"


def test_a_mismatch_of_the_control_launch_is_not_the_cache_design_limit():
    entry = ENTRIES["xnnpack-weight-cache-unverified-contents"]
    assert not entry.covers(Failure("mismatch", MISMATCH, scenario="x1_2_control_no_cache"))


@pytest.mark.parametrize("entry_id", sorted(ENTRIES))
def test_bugs_found_name_a_reproduction_and_others_say_what_they_are(entry_id):
    entry = ENTRIES[entry_id]
    if entry.where in BUG_CLASSES:
        assert entry.reproduce, entry_id
    else:
        assert not entry.is_bug
        assert any(w in entry.reason for w in ("not a defect", "Not reportable", "design limit",
                                                 "missing feature", "Lowering flow",
                                                 "lowered program")), entry_id


def test_no_reason_cites_the_closed_upstream_issue_of_another_crash():
    assert not [i.id for i in ENTRIES.values() if "21804" in i.reason]


# Failures like those `harness mutate`'s mutants produce in an entry's own tests, at the edges
# of the sized entries (a leak a tenth of the entry's, a second bundle's device): none of which
# the entry may excuse: the mutant is another defect met where the known one is, and a known
# issue excusing it would hide the next regression there. RECORDED below holds the failures
# the mutants really produced.
MUTANT_FAILURES = {
    "qnn-destroy-leaks-qnn-manager": [
        # init-leaks-16k in test_soak_one_module_in_each_load_mode[...-File]: 16 kB per init
        # beside the entry's 1.8 kB, below glibc's mmap threshold (in malloc's arenas)
        Failure("check", "memory grows per load/destroy cycle: malloc in use grows +18253.7 B/cycle",
                scenario="soak_one_module_File"),
        # init-leaks-200k: above the mmap threshold, so Rss grows and the arenas keep the
        # entry's own rate
        Failure("check", "memory grows per load/destroy cycle: Rss grows +205.3 kB/cycle; "
                "malloc in use grows +1846.9 B/cycle", scenario="soak_one_module_File"),
        # a leak a tenth of the entry's (another, smaller defect)
        Failure("check", "memory grows per load/destroy cycle: malloc in use grows +190.2 B/cycle",
                scenario="soak_one_module_File"),
    ],
    "qnn-init-failure-leaks-handles": [
        # a good module's own context left live beside the failed init's handles
        Failure("check", "scenario s6_bad_context: after the failed init of X, QNN still holds "
                "handles: after step 2 snapshot: LiveCounts(backend=1, context=1, device=1); after "
                "step 8 snapshot: LiveCounts(backend=1, context=2, device=1)\nQNN objects created"),
        Failure("check", "QNN still holds handles once every module is destroyed (live "
                "{'backend': 1, 'context': 2, 'device': 1}) after QnnGraph_retrieve #1 failed"),
        # a failed create's path keeping 16 kB per failed load, 25 times the manager's
        Failure("check", "heap grows 16960 B per cycle with every QnnDevice_create failing, a "
                "failed load must leave nothing (1824 B per cycle with nothing injected: the "
                "destroy leak of a load that succeeded)", scenario="cycles_qnndevice_create"),
        # a failed context creation or graph retrieve keeping 16 times what the bug keeps: the
        # handles the same words name must not excuse the heap
        Failure("check", CYCLES.format(65024, "QnnContext_createFromBinary", 0),
                scenario="cycles_qnncontext_createfrombinary"),
        Failure("check", CYCLES.format(3309056, "QnnGraph_retrieve", 12),
                scenario="cycles_qnngraph_retrieve"),
        # qnn-device-free-fails: a device never freed, a second bundle's
        Failure("check", "QNN still holds handles once every module is destroyed (live "
                "{'backend': 1, 'context': 0, 'device': 2}) after QnnContext_createFromBinary #1 "
                "failed"),
    ],
    "qnn-mutable-buffer-initial-value": [
        # output-carried-across-reload in test_destroy_and_reload_starts_over: the reload's first
        # execute gives the destroyed module's last output (the state carried over), its words
        Failure("check", "step 5 execute(A.forward): module A's execute 1 of forward gave [ "
                "1.0000e+00  1.0000e+00  1.0000e+00  1.0000e+00 -1.3101e+05  1.0000e+00], module "
                "A's execute 1 (step 1) gave [ 5.0000e-01  5.0000e-01  5.0000e-01  5.0000e-01 "
                "-1.3101e+05  5.0000e-01]: module A did not start from the same state after it "
                "was loaded again", scenario="stateful_reload"),
    ],
}


@pytest.mark.parametrize("entry_id", sorted(MUTANT_FAILURES))
def test_the_entry_does_not_excuse_what_a_mutant_does_in_its_tests(entry_id):
    entry = ENTRIES[entry_id]
    excused = [f.describe() for f in MUTANT_FAILURES[entry_id] if entry.covers(f)]
    assert not excused, f"{entry_id} excuses a mutant's failures: {excused}"


# The failures the catalogue's mutants really produced in each entry's own tests, recorded
# from runs by scripts/mutant_failures.py (every mutant over every entry's XFAILs, no -x; only
# failures the unmutated run did not have): re-record it when the catalogue, an entry's tests
# or a runner's words change.
RECORDED = json.loads((Path(__file__).parent / "data" / "mutant_failures.json").read_text())


def test_the_recorded_failures_are_of_this_catalogue_and_these_entries():
    from harness.runtime.mutants import load_mutants

    names = {m.name for m in load_mutants()}
    accounted = set(RECORDED["mutants_run"]) | set(RECORDED["not_run"])
    assert accounted == names, sorted(accounted ^ names)
    assert set(RECORDED["entries"]) <= set(ENTRIES)
    assert sum(map(len, RECORDED["entries"].values())) > 0


# Words an entry cannot tell from its own bug's: the delegated buffer's stray elements are
# uninitialised memory, any value (-48.97 and +-131008 seen), so a wrong element among them is
# the bug's words too (the mutants that make one are killed by programs without the defect).
ITS_OWN_WORDS = {"qnn-mutable-buffer-initial-value": "in magnitude: uninitialised memory)"}


@pytest.mark.parametrize("entry_id", sorted(RECORDED["entries"]))
def test_the_entry_excuses_nothing_the_mutants_did_in_its_tests(entry_id):
    entry = ENTRIES[entry_id]
    own = ITS_OWN_WORDS.get(entry_id)
    excused = [f"{r['mutant']} in {r['test']}: {r['kind']}: {r['message'][:200]}"
               for r in RECORDED["entries"][entry_id]
               if not (own and own in r["message"])
               and entry.covers(Failure(r["kind"], r["message"], r["scenario"]))]
    assert not excused, f"{entry_id} excuses what a mutant did in its tests: {excused}"


def test_a_sized_entry_covers_the_sizes_it_was_measured_at():
    entry = ENTRIES["qnn-destroy-leaks-qnn-manager"]
    for rate in ("1833.1", "1846.9", "2455.1", "3856.0"):  # one module, two, prefill_decode
        assert entry.covers(Failure("check", "memory grows per load/destroy cycle: malloc in "
                                    f"use grows +{rate} B/cycle")), rate


def test_byte_identical_outputs_are_the_cache_pattern_only_when_the_other_was_right():
    """Two modules of one parallel step returning the same bytes is the shared-buffer
    signature of qnn-delegate-cache-concurrent-execute only when the other module's execute
    was right for its own inputs; both wrong with the same bytes (a zeroed or perturbed
    output, harness mutate's output-zeroed) is a wrong output the entry must not excuse."""
    from types import SimpleNamespace as NS

    from harness.results.failures import _same_bytes_as_another

    a, b = (NS(module=m, op="execute", method="forward") for m in "AB")
    same = [{"sha256": "3f2a" * 16}]
    for other_status, pattern in (("ok", True), ("mismatch", False)):
        step = NS(step=NS(substeps=[a, b]),
                  event={"substeps": [{"status": other_status, "outputs": same},
                                      {"status": "mismatch", "outputs": same}]})
        words = _same_bytes_as_another(step, b, {"outputs": same})
        assert bool(words) is pattern, (other_status, words)
        failure = Failure("mismatch", MISMATCH + (f"; pattern: {words}" if words else ""))
        assert ENTRIES["qnn-delegate-cache-concurrent-execute"].covers(failure) is pattern


def test_a_finding_beside_the_entrys_own_is_not_excused():
    """A test that reports several findings as one failure (a fault sweep's sites, a heap that
    grows and handles left) is excused only when each finding is the entry's: the handles a
    failed create leaves do not excuse a mismatch beside them (output-perturbed-first-execute
    in test_fault_sweep[two_methods-QnnContext_createFromBinary] was excused that way)."""
    from harness.results.failures import HilFailure, failure_parts
    from harness.results.known_issues import uncovered

    scenario = "sweep_two_methods_sweep_qnncontext_createfrombinary_1"
    handles = Failure("check", "QNN still holds handles once every module is destroyed (live "
                      "{'backend': 1, 'context': 0, 'device': 1}) after QnnContext_createFromBinary "
                      "#1 failed in step 1 load_method(A.prefill)", scenario)
    mismatch = Failure("mismatch", "step 9 execute(R.prefill): outputs differ from the "
                       "no-injection run's same execute of prefill", scenario)
    joined = Failure("check", f"{mismatch.message}\n{handles.message}", scenario)
    entry = ENTRIES["qnn-init-failure-leaks-handles"]
    assert entry.covers(joined)  # the entry's words are found in the joined report
    assert uncovered(entry, failure_parts(HilFailure("report", joined, [mismatch, handles]))) \
        == [mismatch]
    assert failure_parts(HilFailure("report", joined)) == [joined]

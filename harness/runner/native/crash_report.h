// The crashing thread's backtrace on stderr before the runner dies of a signal.
//
// A known issue excuses a crash only by where it crashed (its frames), never by the bare
// signal, so the runner writes, in the scenario's stderr (the crashing step's log):
//
//   harness-runner: fatal signal 11 (SIGSEGV) at fault address 0x0 in thread 1234
//   harness-runner: backtrace of the crashing thread:
//   harness-runner:   #0 pc 0x0 (not in any mapped file)
//   harness-runner:   #1 pc 0x7f12... libexecutorch_backend_qnn.so+0x10d0c QnnExecuTorchAllocCustomMem+0x1c
//
// Each frame is the module (from /proc/self/maps, read without the loader lock) and its offset,
// then the nearest exported symbol that contains the address (mangled; the harness demangles).
// Then the default action runs, so the process still dies of the same signal.
#pragma once

namespace harness {

// Installs the handler for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (idempotent).
void install_crash_report();

}  // namespace harness

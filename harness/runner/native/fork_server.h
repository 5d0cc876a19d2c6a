// The fork server (docs/runner-protocol.md, "Fork server"): one process that
// has loaded the runtime and the QNN libraries once, and runs each scenario in
// a fork() of itself, so a scenario starts with no backend, program or context
// created, without paying for loading the libraries again.
#pragma once

#include <string>
#include <vector>

namespace harness {

// Runs a scenario in this process, as `harness-runner <scenario.json>` does,
// and returns its exit code (0 ok, 1 a step failed, 2 unrunnable).
int run_scenario_file(const char* path);

// `harness-runner --serve [--preload LIB]...`: dlopens each LIB (RTLD_NOW |
// RTLD_LOCAL, by name through the library path or by path, as the runtime
// later asks for it), checks that it is still a single thread, then serves
// requests from stdin until EOF. Returns the process exit code.
int serve(const std::vector<std::string>& preload);

}  // namespace harness

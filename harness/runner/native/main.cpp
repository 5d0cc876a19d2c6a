// harness-runner: the native lifecycle runner (docs/runner-protocol.md).
//
//   harness-runner <scenario.json>     run a scenario, events on stdout
//   harness-runner --list-backends     print the registered backends
//   harness-runner --serve [--preload LIB]...
//                                      the fork server (fork_server.h)
//
// Exit codes: 0 every step ok, 1 some step error/mismatch, 2 the scenario
// could not be run (bad invocation, unreadable/invalid scenario, missing .pte
// or tensor file).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>

#include "fork_server.h"

namespace {

constexpr int kExitUnrunnable = 2;

void usage(FILE* to) {
  std::fprintf(
      to,
      "usage: harness-runner <scenario.json>\n"
      "       harness-runner --list-backends\n"
      "       harness-runner --serve [--preload LIB]...\n"
      "Runs an ExecuTorch lifecycle scenario and writes one\n"
      "'HARNESS_EVENT {json}' line per step to stdout "
      "(see docs/runner-protocol.md).\n");
}

int list_backends() {
  executorch::runtime::runtime_init();
  size_t n = executorch::runtime::get_num_registered_backends();
  for (size_t i = 0; i < n; ++i) {
    auto name = executorch::runtime::get_backend_name(i);
    if (name.ok()) {
      std::printf("%s\n", *name);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list-backends") == 0) {
    return list_backends();
  }
  if (argc == 2 &&
      (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--serve") == 0) {
    std::vector<std::string> preload;
    for (int i = 2; i < argc; i += 2) {
      if (std::strcmp(argv[i], "--preload") != 0 || i + 1 >= argc) {
        usage(stderr);
        return kExitUnrunnable;
      }
      preload.emplace_back(argv[i + 1]);
    }
    return harness::serve(preload);
  }
  if (argc != 2 || argv[1][0] == '\0') {
    usage(stderr);
    return kExitUnrunnable;
  }
  return harness::run_scenario_file(argv[1]);
}

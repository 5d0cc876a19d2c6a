#include "fork_server.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include <executorch/runtime/platform/runtime.h>

#include "runner.h"
#include "scenario.h"

namespace harness {

namespace {

constexpr int kExitUnrunnable = 2;

// Replies go to a private copy of the original stdout; fd 1 itself is pointed
// at stderr, so whatever a library prints while loading (the simulator prints
// a notice) cannot be taken for a reply.
int reply_fd = -1;

void reply(const std::string& line) {
  std::string text = line + "\n";
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(reply_fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::_Exit(kExitUnrunnable);  // the harness is gone
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Threads of this process, from /proc/self/task (-1 when unreadable). fork()
// copies only the calling thread: a library that started a thread at load time
// would leave its children with that thread's locks held and its work undone.
int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

int open_onto(const std::string& path, int flags, int target) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  if (::dup2(fd, target) < 0) return -1;  // dup2 clears O_CLOEXEC on target
  ::close(fd);
  return 0;
}

// In the child: become what `harness-runner <scenario>` started with these
// streams and this environment would be, run the scenario, exit.
[[noreturn]] void run_child(const nlohmann::json& request) {
  ::setpgid(0, 0);
  ::close(reply_fd);
  const int wr = O_WRONLY | O_CREAT | O_TRUNC;
  if (open_onto("/dev/null", O_RDONLY, 0) != 0 ||
      open_onto(request.at("stdout").get<std::string>(), wr, 1) != 0 ||
      open_onto(request.at("stderr").get<std::string>(), wr, 2) != 0) {
    std::_Exit(kExitUnrunnable);
  }
  ::clearenv();
  for (const auto& [key, value] : request.at("env").items()) {
    ::setenv(key.c_str(), value.get<std::string>().c_str(), 1);
  }
  const std::string scenario = request.at("scenario").get<std::string>();
  int code = run_scenario_file(scenario.c_str());
  std::fflush(nullptr);
  std::exit(code);  // atexit handlers and static destructors run, as after main
}

std::string wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return "error " + std::to_string(errno);
  }
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int run_scenario_file(const char* path) {
  Scenario scenario;
  try {
    scenario = load_scenario(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "harness-runner: cannot run scenario: %s\n", e.what());
    return kExitUnrunnable;
  }
  executorch::runtime::runtime_init();
  Runner runner(scenario);
  return runner.run();
}

int serve(const std::vector<std::string>& preload) {
  reply_fd = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (reply_fd < 0 || ::dup2(2, 1) < 0) {
    std::perror("harness-runner --serve");
    return kExitUnrunnable;
  }
  for (const auto& lib : preload) {
    if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      const char* why = ::dlerror();
      reply(nlohmann::json{{"error", "cannot preload " + lib + ": " + (why ? why : "?")}}.dump());
      return kExitUnrunnable;
    }
  }
  int threads = thread_count();
  nlohmann::json ready{{"ready", ::getpid()}, {"threads", threads}, {"preloaded", preload}};
  if (threads != 1) {
    ready["error"] = "not safe to fork: " + std::to_string(threads) +
                     " threads after loading the libraries (fork copies only one)";
    reply(ready.dump());
    return kExitUnrunnable;
  }
  reply(ready.dump());

  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json request;
    try {
      request = nlohmann::json::parse(line);
      for (const char* key : {"scenario", "stdout", "stderr"}) {
        if (!request.at(key).is_string()) throw std::invalid_argument(key);
      }
      for (const auto& item : request.at("env").items()) {
        if (!item.value().is_string()) throw std::invalid_argument("env values are strings");
      }
    } catch (const std::exception& e) {
      reply(nlohmann::json{{"error", std::string("bad request: ") + e.what()}}.dump());
      continue;
    }
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      reply(nlohmann::json{{"error", "fork failed: errno " + std::to_string(errno)}}.dump());
      continue;
    }
    if (pid == 0) run_child(request);
    ::setpgid(pid, pid);  // also here, so a kill right after this reply finds the group
    reply(nlohmann::json{{"child", pid}}.dump());
    std::string status = wait_status(pid);
    auto space = status.find(' ');
    reply(nlohmann::json{{"done", pid}, {status.substr(0, space), std::stoi(status.substr(space + 1))}}.dump());
  }
  return 0;
}

}  // namespace harness

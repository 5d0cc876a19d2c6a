#include "fork_server.h"

#include "crash_report.h"

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
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
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

// The request's run directory ("dir", optional): where its relative file
// names are, and the child's working directory.
std::string in_dir(const nlohmann::json& request, const std::string& name) {
  if (!request.contains("dir") || (!name.empty() && name[0] == '/')) return name;
  return request.at("dir").get<std::string>() + "/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A file's text within `limit` bytes (its first and last halves around a line
// that says what was left out; 0: no limit), and its size: a runtime stuck in a
// log loop must not make the reply, or the host reading it, as large as its log.
std::string read_capped(const std::string& path, long long limit, long long* size) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  *size = in ? static_cast<long long>(in.tellg()) : 0;
  if (!in || limit <= 0 || *size <= limit) return read_text(path);
  long long head = limit / 2, tail = limit - head;
  std::string first(static_cast<size_t>(head), '\0'), last(static_cast<size_t>(tail), '\0');
  in.seekg(0);
  in.read(first.data(), head);
  in.seekg(*size - tail);
  in.read(last.data(), tail);
  return first + "\n[harness: output limit reached: " + std::to_string(*size) +
         " bytes were written, the middle " + std::to_string(*size - limit) +
         " bytes are omitted here]\n" + last;
}

// Before the fork, for a client that has no other way to reach the device's
// files in the same round trip (an adb device): create "dir", write each
// "write" file that is not there yet (the scenario file; its run directory
// is named by its content), empty each "truncate" file (the QNN trace).
nlohmann::json prepare_run(const nlohmann::json& request) {
  nlohmann::json written = nlohmann::json::array(), kept = nlohmann::json::array();
  if (request.contains("dir")) {
    std::filesystem::create_directories(request.at("dir").get<std::string>());
  }
  if (request.contains("write")) {
    for (const auto& [name, text] : request.at("write").items()) {
      std::string path = in_dir(request, name);
      if (std::filesystem::exists(path)) {
        kept.push_back(name);
        continue;
      }
      std::string tmp = path + ".tmp";
      std::ofstream out(tmp, std::ios::binary);
      out << text.get<std::string>();
      out.close();
      // A short write (a full disk) must not leave a file that later runs would keep.
      if (!out) throw std::runtime_error("cannot write " + tmp);
      std::filesystem::rename(tmp, path);  // whole or not at all
      written.push_back(name);
    }
  }
  if (request.contains("truncate")) {
    for (const auto& name : request.at("truncate")) {
      // A trace left with an earlier run's lines would be read as this run's.
      std::string path = in_dir(request, name.get<std::string>());
      if (!std::ofstream(path, std::ios::trunc)) throw std::runtime_error("cannot empty " + path);
    }
  }
  return {{"written", written}, {"kept", kept}};
}

// In the child: become what `harness-runner <scenario>` started with these
// streams and this environment would be, run the scenario, exit.
[[noreturn]] void run_child(const nlohmann::json& request) {
  ::setpgid(0, 0);
  ::close(reply_fd);
  if (request.contains("dir") && ::chdir(request.at("dir").get<std::string>().c_str()) != 0) {
    std::_Exit(kExitUnrunnable);
  }
  const int wr = O_WRONLY | O_CREAT | O_TRUNC;
  if (open_onto("/dev/null", O_RDONLY, 0) != 0 ||
      open_onto(request.at("stdout").get<std::string>(), wr, 1) != 0 ||
      open_onto(request.at("stderr").get<std::string>(), wr, 2) != 0) {
    std::_Exit(kExitUnrunnable);
  }
  // "inherit_env": the server's environment (what the device's shell gave it)
  // with "env" on top; otherwise exactly "env".
  if (!request.value("inherit_env", false)) ::clearenv();
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
  install_crash_report();
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
      for (const char* key : {"dir", "pid_file"}) {
        if (request.contains(key) && !request.at(key).is_string()) throw std::invalid_argument(key);
      }
      if (request.contains("write")) {
        for (const auto& item : request.at("write").items()) {
          if (!item.value().is_string()) throw std::invalid_argument("write values are strings");
        }
      }
      for (const char* key : {"truncate", "read"}) {
        if (!request.contains(key)) continue;
        for (const auto& name : request.at(key)) {
          if (!name.is_string()) throw std::invalid_argument(key);
        }
      }
    } catch (const std::exception& e) {
      reply(nlohmann::json{{"error", std::string("bad request: ") + e.what()}}.dump());
      continue;
    }
    nlohmann::json started;
    try {
      started = prepare_run(request);
    } catch (const std::exception& e) {
      reply(nlohmann::json{{"error", std::string("cannot prepare the run: ") + e.what()}}.dump());
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
    std::string pid_file = request.contains("pid_file")
                               ? in_dir(request, request.at("pid_file").get<std::string>())
                               : "";
    if (!pid_file.empty()) std::ofstream(pid_file) << pid << "\n";  // for a later session
    started["child"] = pid;
    started["time"] = static_cast<long long>(std::time(nullptr));  // device time, for logs
    reply(started.dump());
    std::string status = wait_status(pid);
    auto space = status.find(' ');
    nlohmann::json done{{"done", pid},
                        {status.substr(0, space), std::stoi(status.substr(space + 1))}};
    if (!pid_file.empty()) ::unlink(pid_file.c_str());
    if (request.contains("read")) {
      nlohmann::json files = nlohmann::json::object(), sizes = nlohmann::json::object();
      long long limit = request.contains("read_limit") && request.at("read_limit").is_number()
                            ? request.at("read_limit").get<long long>()
                            : 0;
      for (const auto& name : request.at("read")) {
        long long size = 0;
        files[name.get<std::string>()] =
            read_capped(in_dir(request, name.get<std::string>()), limit, &size);
        sizes[name.get<std::string>()] = size;
      }
      done["files"] = files;
      done["sizes"] = sizes;
    }
    // A runner's output need not be UTF-8: replace what is not, never fail the reply.
    reply(done.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return 0;
}

}  // namespace harness

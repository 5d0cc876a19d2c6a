// Reproductions on executorch's C++ API (extension::Module and the backend-options channel):
// what the Python pybindings cannot do (threads executing at once, runtime backend options).
//
//   module_repro wrong-type-option BACKEND KEY          exit 1: a wrongly typed value accepted
//   module_repro destroy-during-execute A.pte B.pte IN  exit 1: A's execute broke
//   module_repro xnnpack-cache PTE CACHE IN             load PTE with XNNPACK's packed-weight
//                                                       cache at CACHE, execute forward once
//                                                       (exit 0; a crash is the finding)
//
// Exit 0 when the behaviour is correct, 2 when it could not run. A crash is the caller's to
// judge (it runs this in a child process): a fatal signal prints one line
//   FATAL <signal> thread=<A's executor|main> phase=<before|during|after> B's destroy
// and the crashing thread's frames (glibc backtrace: library+offset), so the caller can tell
// the defect's crash (in A's execute, inside the QNN backend, once B's destroy began) from any
// other.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/backend_options_map.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/platform/runtime.h>

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::extension::make_tensor_ptr;
using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Span;

namespace {

// Where the run is, for the crash line: 0 before B's destroy, 1 during it, 2 after.
std::atomic<int> g_phase{0};
thread_local const char* t_role = "main";

void on_fatal(int sig) {
  static const char* phases[] = {"before", "during", "after"};
  char line[160];
  int n = std::snprintf(line, sizeof line, "FATAL %s thread=%s phase=%s B's destroy\n",
                        sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGABRT
                        ? "SIGABRT" : "signal", t_role, phases[g_phase.load() % 3]);
  if (n > 0) (void)!write(2, line, static_cast<size_t>(n));
  void* frames[48];
  int depth = backtrace(frames, 48);
  backtrace_symbols_fd(frames, depth, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

void catch_fatal_signals() {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc_s now, not inside the handler
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT}) signal(sig, on_fatal);
}

// A float32 [1, N] input from a raw file.
TensorPtr input(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> data((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> values(data.size() / 4);
  std::memcpy(values.data(), data.data(), values.size() * 4);
  std::vector<executorch::aten::SizesType> shape = {1, static_cast<int>(values.size())};
  return make_tensor_ptr(shape, std::move(values));
}

// The first output's bytes, or "" (and the error printed) when execute failed.
std::string run(Module& m, const TensorPtr& x, const char* who) {
  auto out = m.execute("forward", {EValue(x)});
  if (!out.ok()) {
    std::printf("%s: execute(forward) failed with error 0x%x\n", who, static_cast<int>(out.error()));
    std::fflush(stdout);
    return "";
  }
  const auto& t = out->at(0).toTensor();
  return std::string(static_cast<const char*>(t.const_data_ptr()), t.nbytes());
}

BackendOption option(const char* key) {
  BackendOption o;
  std::strncpy(o.key, key, executorch::runtime::kMaxOptionKeyLength - 1);
  return o;
}

int wrong_type_option(const char* backend, const char* key) {
  executorch::runtime::runtime_init();
  BackendOption good = option(key);
  good.value = 2;
  Error set_good = executorch::runtime::set_option(backend, Span<BackendOption>(&good, 1));
  std::printf("set_option(%s, %s = 2 (int)): 0x%x\n", backend, key, static_cast<int>(set_good));
  BackendOption wrong = option(key);
  std::array<char, executorch::runtime::kMaxOptionValueLength> text{};
  std::strncpy(text.data(), "3", text.size() - 1);
  wrong.value = text;
  Error set_wrong = executorch::runtime::set_option(backend, Span<BackendOption>(&wrong, 1));
  std::printf("set_option(%s, %s = \"3\" (string)): 0x%x\n", backend, key, static_cast<int>(set_wrong));
  BackendOption read = option(key);
  read.value = 0;
  Error got = executorch::runtime::get_option(backend, Span<BackendOption>(&read, 1));
  const int* value = std::get_if<int>(&read.value);
  std::printf("get_option(%s, %s): 0x%x, value %d\n", backend, key, static_cast<int>(got),
              value ? *value : -1);
  std::fflush(stdout);
  if (set_good != Error::Ok) return 2;  // the key is not this backend's: cannot tell
  return set_wrong == Error::Ok ? 1 : 0;
}

int destroy_during_execute(const char* a_pte, const char* b_pte, const char* in) {
  catch_fatal_signals();
  TensorPtr x = input(in);
  Module a(a_pte);
  std::string first = run(a, x, "A");
  if (first.empty()) return 2;
  std::atomic<bool> failed{false};
  for (int round = 0; round < 20 && !failed; ++round) {
    g_phase = 0;
    Module* b = new Module(b_pte);
    if (run(*b, x, "B").empty()) return 2;
    std::thread executor([&] {
      t_role = "A's executor";
      for (int i = 0; i < 5; ++i) {
        if (run(a, x, "A (racing B's destroy)") != first) failed = true;
      }
    });
    g_phase = 1;
    delete b;  // B's destroy while A executes
    g_phase = 2;
    executor.join();
    if (run(a, x, "A (after B's destroy)") != first) failed = true;
  }
  std::printf(failed ? "A's executes broke after B was destroyed\n"
                     : "A's executes all gave its first outputs\n");
  return failed ? 1 : 0;
}

// On SIGBUS: the fault address and the /proc/self/maps line that holds it (a store into a file
// mapping whose page the filesystem cannot back), then die of the signal. Only
// async-signal-safe calls.
void say_fault(int sig, siginfo_t* info, void*) {
  char buf[1 << 16];
  auto hex = [](uintptr_t v, char* out) {
    char tmp[17];
    int n = 0;
    do { tmp[n++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    int k = 0;
    out[k++] = '0';
    out[k++] = 'x';
    while (n) out[k++] = tmp[--n];
    return k;
  };
  uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  char head[96] = "SIGBUS at fault address ";
  int len = 24;
  len += hex(addr, head + len);
  head[len++] = '\n';
  (void)!::write(2, head, len);
  int fd = ::open("/proc/self/maps", O_RDONLY);
  ssize_t n = fd >= 0 ? ::read(fd, buf, sizeof buf - 1) : -1;
  for (ssize_t r = n; fd >= 0 && r > 0 && n < static_cast<ssize_t>(sizeof buf) - 1;) {
    r = ::read(fd, buf + n, sizeof buf - 1 - n);
    if (r > 0) n += r;
  }
  if (fd >= 0) ::close(fd);
  for (char *line = buf, *end = buf + (n > 0 ? n : 0); line < end;) {
    char* nl = static_cast<char*>(std::memchr(line, '\n', end - line));
    if (!nl) nl = end;
    char* p = line;
    uintptr_t lo = std::strtoull(p, &p, 16), hi = std::strtoull(p + 1, &p, 16);
    if (addr >= lo && addr < hi) {
      (void)!::write(2, "inside the mapping: ", 20);
      (void)!::write(2, line, nl - line + 1);
    }
    line = nl + 1;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Module::load with the backend options an app passes to use XNNPACK's packed-weight cache
// file (weight_cache_enabled, packed_cache_path), then one execute.
int xnnpack_cache(const char* pte, const char* cache, const char* in) {
  executorch::runtime::runtime_init();
  struct sigaction action {};
  action.sa_sigaction = say_fault;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGBUS, &action, nullptr);
  BackendOption enabled = option("weight_cache_enabled");
  enabled.value = true;
  BackendOption path = option("packed_cache_path");
  std::array<char, executorch::runtime::kMaxOptionValueLength> text{};
  std::strncpy(text.data(), cache, text.size() - 1);
  path.value = text;
  std::vector<BackendOption> options = {enabled, path};
  executorch::runtime::LoadBackendOptionsMap map;
  if (map.set_options("XnnpackBackend", Span<BackendOption>(options.data(), options.size())) !=
      Error::Ok) {
    std::printf("LoadBackendOptionsMap refused the XNNPACK cache options\n");
    return 2;
  }
  Module m(pte);
  Error loaded = m.load(map);
  std::printf("Module::load with the cache at %s: 0x%x\n", cache, static_cast<int>(loaded));
  std::fflush(stdout);
  if (loaded != Error::Ok) return 2;
  TensorPtr x = input(in);
  std::string out = run(m, x, "forward");
  std::printf("execute(forward): %s\n", out.empty() ? "failed" : "ok");
  return out.empty() ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "wrong-type-option" && argc == 4) return wrong_type_option(argv[2], argv[3]);
  if (mode == "xnnpack-cache" && argc == 5) return xnnpack_cache(argv[2], argv[3], argv[4]);
  if (mode == "destroy-during-execute" && argc == 5)
    return destroy_during_execute(argv[2], argv[3], argv[4]);
  std::fprintf(stderr, "usage: see the header of module_repro.cpp\n");
  return 2;
}

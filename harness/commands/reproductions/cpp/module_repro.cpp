// Reproductions on executorch's C++ API (extension::Module and the backend-options channel):
// what the Python pybindings cannot do (threads executing at once, runtime backend options).
//
//   module_repro wrong-type-option BACKEND KEY          exit 1: a wrongly typed value accepted
//   module_repro destroy-during-execute A.pte B.pte IN  exit 1: A's execute broke
//   module_repro xnnpack-cache PTE CACHE IN             load PTE with XNNPACK's packed-weight
//                                                       cache at CACHE, execute forward once
//                                                       (exit 0; a crash is the finding)
//   module_repro handoff A.pte A_IN B.pte B_IN relaxed|locked
//                                                       Module A and Module B on two threads:
//                                                       A loads, executes; B loads, executes; A
//                                                       is destroyed; B executes, is destroyed
//                                                       (exit 0; the finding is helgrind's or
//                                                       DRD's report; see handoff())
//   module_repro execute-once PTE IN                    load PTE, execute forward once, print
//                                                       the first output's floats (memcheck's
//                                                       report on what it read is the finding)
//   module_repro execute-with-data PTE PTD IN           the same with PTD (a .ptd file) as the
//                                                       program's external data map, or none
//                                                       when PTD is "-"
//   module_repro cycles PTE IN N                        N times: load PTE, execute forward once,
//                                                       destroy the Module (exit 0; memcheck's
//                                                       definite leaks per cycle are the finding)
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
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
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
bool g_phase_used = false;  // only destroy-during-execute has phases
thread_local const char* t_role = "main";

void on_fatal(int sig) {
  static const char* phases[] = {"before", "during", "after"};
  char line[160];
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGABRT
                     ? "SIGABRT" : "signal";
  int n = g_phase_used
      ? std::snprintf(line, sizeof line, "FATAL %s thread=%s phase=%s B's destroy\n", name,
                      t_role, phases[g_phase.load() % 3])
      : std::snprintf(line, sizeof line, "FATAL %s thread=%s\n", name, t_role);
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
  g_phase_used = true;
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

// A float32 input shaped as the method's first input, from a raw file.
TensorPtr shaped_input(Module& m, const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  std::vector<executorch::aten::SizesType> shape = {static_cast<int>(values.size())};
  auto meta = m.method_meta("forward");
  if (meta.ok()) {
    auto in = meta->input_tensor_meta(0);
    if (in.ok()) shape.assign(in->sizes().begin(), in->sizes().end());
  }
  return make_tensor_ptr(shape, std::move(values));
}


// Module A (program A) and Module B (program B) on two threads, handed off step by step: A loads
// and executes; then B loads and executes; then A is destroyed; then B executes again and is
// destroyed. `relaxed`: each hand-off is a relaxed atomic flag, which gives no happens-before
// (C++ [intro.races]; valgrind's race detectors do not see it either), so every access the
// runtime makes to state the two threads share is ordered only by the runtime's own locks. `locked`
// (the control): each hand-off under a mutex and condition variable, which orders everything.
struct Handoff {
  bool locked;
  std::atomic<int> step{0};
  std::mutex m;
  std::condition_variable cv;
  int locked_step = 0;
  void wait_for(int n) {
    if (locked) {
      std::unique_lock<std::mutex> g(m);
      cv.wait(g, [&] { return locked_step >= n; });
      return;
    }
    while (step.load(std::memory_order_relaxed) < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void reach(int n) {
    if (locked) {
      std::lock_guard<std::mutex> g(m);
      locked_step = n;
      cv.notify_all();
      return;
    }
    step.store(n, std::memory_order_relaxed);
  }
};

int handoff(const char* a_pte, const char* a_in, const char* b_pte, const char* b_in, bool locked) {
  executorch::runtime::runtime_init();
  Handoff h;
  h.locked = locked;
  std::atomic<bool> ok{true};
  auto check = [&](bool good, const char* what) {
    std::printf("%s: %s\n", what, good ? "ok" : "failed");
    std::fflush(stdout);
    if (!good) ok = false;
  };
  std::thread a([&] {
    {
      Module m(a_pte);
      check(!run(m, shaped_input(m, a_in), "A").empty(), "A load + execute");
      h.reach(1);
      h.wait_for(2);
    }  // A's destroy
    check(true, "A destroyed");
    h.reach(3);
  });
  std::thread b([&] {
    h.wait_for(1);
    Module m(b_pte);
    TensorPtr x = shaped_input(m, b_in);
    check(!run(m, x, "B").empty(), "B load + execute");
    h.reach(2);
    h.wait_for(3);
    check(!run(m, x, "B").empty(), "B execute after A's destroy");
  });  // B's destroy
  a.join();
  b.join();
  return ok ? 0 : 2;
}

int execute_once(const char* pte, const char* in, const char* ptd = nullptr) {
  catch_fatal_signals();  // a crash prints its frames (the caller judges them)
  executorch::runtime::runtime_init();
  auto module = ptd ? std::make_unique<Module>(pte, std::string(ptd)) : std::make_unique<Module>(pte);
  Module& m = *module;
  auto out = m.execute("forward", {EValue(shaped_input(m, in))});
  if (!out.ok()) {
    std::printf("execute(forward) failed with error 0x%x\n", static_cast<int>(out.error()));
    return 2;
  }
  const auto& t = out->at(0).toTensor();
  const float* v = t.const_data_ptr<float>();
  std::printf("forward:");
  for (ssize_t i = 0; i < t.numel(); ++i) std::printf(" %.9g", v[i]);
  std::printf("\n");
  return 0;
}

int cycles(const char* pte, const char* in, int n) {
  executorch::runtime::runtime_init();
  for (int i = 0; i < n; ++i) {
    Module m(pte);
    if (run(m, shaped_input(m, in), "cycle").empty()) return 2;
  }  // each Module destroyed before the next load: nothing lives between cycles
  std::printf("cycles: %d\n", n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "wrong-type-option" && argc == 4) return wrong_type_option(argv[2], argv[3]);
  if (mode == "xnnpack-cache" && argc == 5) return xnnpack_cache(argv[2], argv[3], argv[4]);
  if (mode == "destroy-during-execute" && argc == 5)
    return destroy_during_execute(argv[2], argv[3], argv[4]);
  if (mode == "handoff" && argc == 7 && (std::string(argv[6]) == "relaxed" ||
                                          std::string(argv[6]) == "locked"))
    return handoff(argv[2], argv[3], argv[4], argv[5], std::string(argv[6]) == "locked");
  if (mode == "execute-once" && argc == 4) return execute_once(argv[2], argv[3]);
  if (mode == "execute-with-data" && argc == 5)
    return execute_once(argv[2], argv[4], std::string(argv[3]) == "-" ? nullptr : argv[3]);
  if (mode == "cycles" && argc == 5) return cycles(argv[2], argv[3], std::atoi(argv[4]));
  std::fprintf(stderr, "usage: see the header of module_repro.cpp\n");
  return 2;
}

// @@TITLE@@
//
// Exported by executorch-qnn-hil (`python -m harness export --format cpp`) from the run
// @@SOURCE@@
//
// Scenario: @@SCENARIO@@
// Ordering: @@ORDERING@@
//
// What the framework asserted, and this test asserts again:
//  - every step returns Error::Ok@@ALLOWED@@ (a parallel step's sub-steps run on one
//    thread each, released together);
//  - every execute's outputs equal the reference (|out - exp| <= atol + rtol * |exp|) and are
//    identical to the first execute of the same program's method in this run;
//  - with the QNN call trace interposer preloaded (HARNESS_QNN_TRACE names its trace file),
//    the live QNN contexts after each step are one per live module with a loaded method of a
//    QNN program (the reference model's count: modules never share a context).
//  - with nemesis rules (the scenario's forced interleavings and injected QNN failures, made
//    by the QNN interposer: harness/protocol/nemesis.py), the run followed them: each rule took
//    effect and no held thread gave up waiting. As the framework's native runner does, the test
//    hands the rules to the interposer, names each thread after the module of the step it runs
//    (a rule's actor) and marks entering and leaving each step (its step.* points).
// A failing step does not stop the run (as in the framework's runner): every step runs, each
// failure is printed, and the exit status is 1 when any check failed, 0 when all held.
//
// Usage: <binary> [DATA_DIR]   (DATA_DIR holds the programs and tensors; default ./data)
// Its lines go to stdout, flushed at once, and the runtime's log to stderr: run it with 2>&1
// and each step's runtime lines follow the step's own line.

#include <dlfcn.h>
#include <pthread.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

namespace {

struct Spec {
  const char* file;
  ScalarType dtype;
  std::vector<int64_t> shape;
};

std::string g_data = "data";
int g_failures = 0;
int g_step = -1;
std::string g_where;
std::map<std::string, std::vector<std::vector<uint8_t>>> g_first_outputs;
std::mutex g_mutex;  // the failures and first outputs, shared by a parallel step's threads
thread_local std::string t_sub;  // the sub-step a parallel step's thread runs
thread_local int t_failures = 0;  // this thread's failures

void fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_failures;
  ++t_failures;
  std::printf("FAILED step %d %s%s: %s\n", g_step, g_where.c_str(),
              t_sub.empty() ? "" : (" / " + t_sub).c_str(), what.c_str());
  std::fflush(stdout);
}

// The scenario's nemesis rules, in the interposer's grammar (harness/protocol/nemesis.py).
const std::vector<std::string> kNemesis = @@NEMESIS@@;
using StepPointFn = void (*)(const char*, int);
StepPointFn g_step_point = nullptr;  // the interposer's harness_qnn_step

// Hands the rules to the interposer (it reads HARNESS_QNN_NEMESIS at the first QNN call of the
// process) and finds its step points, before any step, as the native runner does.
void start_nemesis() {
  if (kNemesis.empty()) {
    return;
  }
  std::string joined;
  for (const auto& rule : kNemesis) {
    joined += (joined.empty() ? "" : ";") + rule;
  }
  ::setenv("HARNESS_QNN_NEMESIS", joined.c_str(), 1);
  void* lib = ::dlopen("libQnnHtp.so", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) {
    g_step_point = reinterpret_cast<StepPointFn>(::dlsym(lib, "harness_qnn_step"));
  }
  if (g_step_point == nullptr) {
    std::printf("nemesis: the QNN interposer's step points are not reachable (%s): rules on "
                "step.* points will not take effect\n",
                lib == nullptr ? "libQnnHtp.so does not load" : "no harness_qnn_step");
  }
}

// Around one step (or a parallel step's sub-step): with rules, names the calling thread after
// the step's module (15 bytes at most: a rule's actor) and marks entering and leaving the step
// for the interposer (step.<op>), as the native runner does.
class Point {
 public:
  Point(const char* module, const char* op) : op_(op) {
    if (kNemesis.empty()) {
      return;
    }
    ::pthread_setname_np(::pthread_self(), std::string(module).substr(0, 15).c_str());
    if (g_step_point != nullptr) {
      g_step_point(op_, 0);
    }
  }
  ~Point() {
    if (!kNemesis.empty() && g_step_point != nullptr) {
      g_step_point(op_, 1);
    }
  }
  Point(const Point&) = delete;
  Point& operator=(const Point&) = delete;

 private:
  const char* op_;
};

// The step functions below are [[maybe_unused]]: a scenario calls the ones its ops need.
// A parallel step: one thread per sub-step, released together once every thread has
// started (as the framework's runner does), all joined before the step ends.
[[maybe_unused]] void parallel(const std::vector<std::pair<const char*, std::function<void()>>>& subs) {
  std::mutex mu;
  std::condition_variable cv;
  size_t waiting = subs.size();
  std::vector<std::thread> threads;
  for (const auto& sub : subs) {
    threads.emplace_back([&mu, &cv, &waiting, &sub] {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (--waiting == 0) {
          cv.notify_all();
        } else {
          cv.wait(lock, [&waiting] { return waiting == 0; });
        }
      }
      t_sub = sub.first;
      sub.second();
    });
  }
  for (auto& t : threads) {
    t.join();
  }
}

void begin(int index, const char* where) {
  g_step = index;
  g_where = where;
  std::printf("step %d %s\n", index, where);
  std::fflush(stdout);
}

void check_status(Error err, const std::string& call, bool allowed) {
  if (err == Error::Ok) {
    return;
  }
  char code[16];
  std::snprintf(code, sizeof(code), "0x%x", static_cast<int>(err));
  std::string what = call + " returned " + executorch::runtime::to_string(err) +
      " (" + code + ")";
  if (allowed) {
    std::printf("  %s (allowed: the framework expects this step to fail)\n", what.c_str());
  } else {
    fail(what);
  }
}

// A step the framework's runner refuses itself (a module that is not live, a method already
// loaded): a failure, unless the framework expects the step to fail.
void refuse(const std::string& what, bool allowed) {
  if (allowed) {
    std::printf("  %s (allowed: the framework expects this step to fail)\n", what.c_str());
  } else {
    fail(what);
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(2);
  }
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

double element(ScalarType t, const void* data, size_t i) {
  const auto* base = static_cast<const unsigned char*>(data);
  switch (t) {
#define EXPORT_CASE(ctype, name)                                \
  case ScalarType::name: {                                      \
    ctype v;                                                    \
    std::memcpy(&v, base + i * sizeof(ctype), sizeof(ctype));   \
    return static_cast<double>(v);                              \
  }
    ET_FORALL_REALHBF16_TYPES(EXPORT_CASE)
    EXPORT_CASE(uint16_t, UInt16)
    EXPORT_CASE(uint32_t, UInt32)
    EXPORT_CASE(uint64_t, UInt64)
#undef EXPORT_CASE
    case ScalarType::Bool:
      return base[i] != 0 ? 1.0 : 0.0;
    default:
      return NAN;
  }
}

// Live QNN contexts in the interposer's trace: successful creates minus successful frees;
// -1 when the trace has no QNN call yet (no interposer, or QNN not started).
int live_contexts(const char* trace) {
  std::ifstream in(trace);
  std::string line;
  int live = 0;
  bool traced = false;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string seq, kind, rc;
    words >> seq >> kind >> rc;
    traced = true;
    if (rc != "rc=0") {
      continue;
    }
    if (kind == "context_create") {
      ++live;
    } else if (kind == "context_free") {
      --live;
    }
  }
  return traced ? live : -1;
}

// The nemesis lines of the interposer's trace, judged as the framework judges a run
// (harness.protocol.nemesis.nemesis_problems): the interposer read the rules, each took effect,
// and no hold timed out. A hold whose awaited point came only after it gave up (nemesis_late)
// is an interleaving the runtime itself makes impossible: said, and judged on what ran.
void check_nemesis() {
  if (kNemesis.empty()) {
    return;
  }
  const char* trace = std::getenv("HARNESS_QNN_TRACE");
  if (trace == nullptr) {
    std::printf("nemesis rules: not checked (HARNESS_QNN_TRACE does not name the trace)\n");
    return;
  }
  const size_t n = kNemesis.size();
  std::vector<bool> took(n, false), late(n, false);
  std::vector<std::string> timed_out(n), held_thread(n);
  std::vector<std::string> problems;
  bool read = false;
  std::ifstream in(trace);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string seq, kind, field;
    words >> seq >> kind;
    if (kind.rfind("nemesis_", 0) != 0) {
      continue;
    }
    long rule = -1;
    std::string waited = "?", actor;
    while (words >> field) {
      if (field.rfind("rule=", 0) == 0) {
        rule = std::strtol(field.c_str() + 5, nullptr, 10);
      } else if (field.rfind("waited_ms=", 0) == 0) {
        waited = field.substr(10);
      } else if (field.rfind("actor=", 0) == 0) {
        actor = field.substr(6);
      }
    }
    if (kind == "nemesis_rules") {
      read = true;
    } else if (kind == "nemesis_bad") {
      problems.push_back("the QNN interposer could not read a rule: " + line);
    }
    if (rule < 0 || static_cast<size_t>(rule) >= n) {
      continue;
    }
    if (kind == "nemesis_hold" || kind == "nemesis_fail") {
      took[rule] = true;
      if (kind == "nemesis_hold") {
        held_thread[rule] = actor;
      }
    } else if (kind == "nemesis_timeout") {
      timed_out[rule] = waited;
    } else if (kind == "nemesis_late") {
      late[rule] = true;
    }
  }
  if (!read) {
    problems.push_back("the QNN interposer never read the nemesis rules (it is not in front of "
                       "the QNN libraries, or no QNN call was made): run.sh puts it there");
  }
  for (size_t i = 0; read && i < n; ++i) {
    std::string rule = "rule " + std::to_string(i) + " '" + kNemesis[i] + "'";
    if (!timed_out[i].empty() && late[i]) {
      std::printf("nemesis %s: the point it waited for came only after it gave up: the runtime "
                  "orders these calls itself, so this interleaving cannot happen on it (judged "
                  "on the run that happened)\n", rule.c_str());
    } else if (!timed_out[i].empty()) {
      std::string who = held_thread[i].empty() ? std::string("the held thread")
                                                : "thread '" + held_thread[i] + "'";
      problems.push_back("rendezvous timed out after " + timed_out[i] + " ms: " + rule + ": " +
                         who + " waited for a point no thread reached");
    } else if (!took[i]) {
      problems.push_back(rule + " never took effect: the runtime did not reach that point");
    }
  }
  for (const auto& problem : problems) {
    ++g_failures;
    std::printf("FAILED nemesis: %s\n", problem.c_str());
  }
  if (problems.empty()) {
    std::printf("nemesis: every rule took effect\n");
  }
  std::fflush(stdout);
}

void end(int expected_contexts) {
  const char* trace = std::getenv("HARNESS_QNN_TRACE");
  if (trace == nullptr || expected_contexts < 0) {
    return;
  }
  int live = live_contexts(trace);
  if (live < 0) {
    if (expected_contexts > 0) {
      std::printf("  live QNN contexts: not checked (no QNN call in %s: the trace interposer "
                  "is not loaded)\n", trace);
    }
    return;
  }
  std::printf("  live QNN contexts: %d (expected %d)\n", live, expected_contexts);
  if (live != expected_contexts) {
    fail(std::to_string(live) + " live QNN contexts, expected " +
         std::to_string(expected_contexts) +
         " (one per live module with a loaded method: modules must not share a context)");
  }
}

// A module of the scenario: its Module while live (null otherwise) and the methods it has
// loaded, in load order (what destroy_module unloads, as the framework's runner does).
// A buffer for one output the program does not memory-plan (an LLM export lowered with
// alloc_graph_output=False leaves its logits and KV caches to the app).
struct UnplannedOutput {
  size_t index = 0;
  std::vector<uint8_t> data;
  executorch::extension::TensorPtr tensor;
};

struct Live {
  const char* name;
  // Before `module`, so that it outlives the methods that point into it.
  std::map<std::string, std::vector<UnplannedOutput>> unplanned;
  std::unique_ptr<Module> module;
  std::vector<std::string> methods;
};

// Binds a buffer of this program's own to each output `method` does not memory-plan (made at
// the first execute after a load), as an app must before every execute; false if refused.
bool bind_unplanned_outputs(Live& m, const char* method, bool allowed) {
  auto it = m.unplanned.find(method);
  if (it == m.unplanned.end()) {
    auto meta = m.module->method_meta(method);
    if (!meta.ok()) {
      return true;  // execute reports the runtime's own error
    }
    std::vector<UnplannedOutput> owned;
    for (size_t i = 0; i < meta->num_outputs(); ++i) {
      auto tag = meta->output_tag(i);
      auto info = meta->output_tensor_meta(i);
      if (!tag.ok() || tag.get() != executorch::runtime::Tag::Tensor || !info.ok() ||
          info->is_memory_planned()) {
        continue;
      }
      UnplannedOutput out;
      out.index = i;
      out.data.assign(info->nbytes(), 0);
      std::vector<executorch::aten::SizesType> sizes(info->sizes().begin(), info->sizes().end());
      std::vector<executorch::aten::DimOrderType> order(info->dim_order().begin(),
                                                        info->dim_order().end());
      out.tensor = executorch::extension::make_tensor_ptr(
          std::move(sizes), out.data.empty() ? nullptr : out.data.data(), std::move(order), {},
          info->scalar_type());
      owned.push_back(std::move(out));
    }
    it = m.unplanned.emplace(method, std::move(owned)).first;
  }
  for (auto& out : it->second) {
    Error err = m.module->set_output(method, EValue(*out.tensor), out.index);
    if (err != Error::Ok) {
      check_status(err, std::string("set_output(") + method + ", " + std::to_string(out.index) +
                   ")", allowed);
      return false;
    }
  }
  return true;
}

void note_method(Live& m, const std::string& method) {
  for (const auto& name : m.methods) {
    if (name == method) {
      return;
    }
  }
  m.methods.push_back(method);
}

bool live(Live& m, bool allowed) {
  if (!m.module) {
    refuse(std::string("module ") + m.name + " is not live", allowed);
  }
  return m.module != nullptr;
}

// Module::LoadMode by the name the scenario gives it.
Module::LoadMode load_mode(const std::string& name) {
  if (name == "File") return Module::LoadMode::File;
  if (name == "Mmap") return Module::LoadMode::Mmap;
  if (name == "MmapUseMlock") return Module::LoadMode::MmapUseMlock;
  return Module::LoadMode::MmapUseMlockIgnoreErrors;
}

[[maybe_unused]] void load_module(Live& m, const char* pte, const char* mode, bool allowed) {
  Point point(m.name, "load_module");
  if (m.module) {
    refuse(std::string("module ") + m.name + " is already live", allowed);
    return;
  }
  // The loader the recorded run used (the framework's default, and the pybindings' for a
  // file, is MmapUseMlockIgnoreErrors: mmap, mlock when permitted).
  m.module = std::make_unique<Module>(g_data + "/" + pte, load_mode(mode));
  Error err = m.module->load();
  check_status(err, std::string("Module::load(") + pte + ")", allowed);
  if (err != Error::Ok) {
    m.module.reset();
  }
}

[[maybe_unused]] void load_method(Live& m, const char* method, bool allowed) {
  Point point(m.name, "load_method");
  if (!live(m, allowed)) {
    return;
  }
  if (m.module->is_method_loaded(method)) {
    refuse(std::string("method ") + method + " of module " + m.name + " is already loaded",
           allowed);
    return;
  }
  Error err = m.module->load_method(method);
  check_status(err, std::string("load_method(") + method + ")", allowed);
  if (err == Error::Ok) {
    note_method(m, method);
  }
}

[[maybe_unused]] void unload_method(Live& m, const char* method, bool allowed) {
  Point point(m.name, "unload_method");
  if (!live(m, allowed)) {
    return;
  }
  // Erases the method's holder: the Method (its delegate handles destroyed), its memory
  // manager and planned buffers; other methods and the program stay.
  if (!m.module->unload_method(method)) {
    refuse(std::string("method ") + method + " of module " + m.name + " is not loaded",
           allowed);
    return;
  }
  for (auto it = m.methods.begin(); it != m.methods.end(); ++it) {
    if (*it == method) {
      m.methods.erase(it);
      break;
    }
  }
  m.unplanned.erase(method);  // freed with the method
}

// Every method in load order, then the Module itself (its program, data loader and
// allocators), as the framework's runner destroys a module.
[[maybe_unused]] void destroy_module(Live& m, bool allowed) {
  Point point(m.name, "destroy_module");
  if (!live(m, allowed)) {
    return;
  }
  for (const auto& method : m.methods) {
    m.module->unload_method(method);
  }
  m.methods.clear();
  m.module.reset();
  m.unplanned.clear();  // after the methods that pointed into them
}

[[maybe_unused]] void execute(Live& m, const char* program, const char* method, const std::vector<Spec>& inputs,
             const std::vector<Spec>& expected, double atol, double rtol, bool allowed) {
  Point point(m.name, "execute");
  if (!live(m, allowed)) {
    return;
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> values;
  buffers.reserve(inputs.size());
  for (const Spec& spec : inputs) {
    buffers.push_back(read_file(g_data + "/" + spec.file));
    std::vector<executorch::aten::SizesType> sizes(spec.shape.begin(), spec.shape.end());
    tensors.push_back(executorch::extension::make_tensor_ptr(
        std::move(sizes), buffers.back().data(), spec.dtype));
    values.emplace_back(*tensors.back());
  }
  // Loads the method first when it is not loaded, as the framework's runner's execute does.
  if (!bind_unplanned_outputs(m, method, allowed)) {
    if (m.module->is_method_loaded(method)) {
      note_method(m, method);
    }
    return;
  }
  auto result = m.module->execute(method, values);
  if (m.module->is_method_loaded(method)) {
    note_method(m, method);
  }
  if (!result.ok()) {
    check_status(result.error(), std::string("execute(") + method + ")", allowed);
    return;
  }
  const std::vector<EValue>& outputs = *result;
  if (outputs.size() != expected.size()) {
    fail("returned " + std::to_string(outputs.size()) + " outputs, expected " +
         std::to_string(expected.size()));
    return;
  }
  const int failures_before = t_failures;
  std::vector<std::vector<uint8_t>> got;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!outputs[o].isTensor()) {
      fail("output " + std::to_string(o) + " is not a tensor");
      return;
    }
    const auto& t = outputs[o].toTensor();
    const auto* bytes = static_cast<const uint8_t*>(t.const_data_ptr());
    got.emplace_back(bytes, bytes + t.nbytes());
    std::vector<uint8_t> want = read_file(g_data + "/" + expected[o].file);
    double worst = 0;
    bool match = static_cast<size_t>(t.numel()) * executorch::runtime::elementSize(expected[o].dtype) ==
        want.size();
    for (size_t i = 0; match && i < static_cast<size_t>(t.numel()); ++i) {
      double a = element(t.scalar_type(), t.const_data_ptr(), i);
      double b = element(expected[o].dtype, want.data(), i);
      double diff = std::fabs(a - b);
      worst = diff > worst ? diff : worst;
      if (!(diff <= atol + rtol * std::fabs(b))) {
        match = false;
      }
    }
    if (!match) {
      fail("output " + std::to_string(o) + " differs from the reference beyond atol " +
           std::to_string(atol) + " rtol " + std::to_string(rtol) + " (max abs diff " +
           std::to_string(worst) + ")");
    }
  }
  std::string key = std::string(program) + "/" + method;
  std::unique_lock<std::mutex> lock(g_mutex);
  auto first = g_first_outputs.find(key);
  if (first == g_first_outputs.end()) {
    g_first_outputs[key] = got;
  } else if (first->second != got) {
    lock.unlock();
    fail("outputs differ from the first execute of " + key + " on the same inputs");
  }
  if (lock.owns_lock()) {
    lock.unlock();
  }
  if (t_failures == failures_before) {
    std::printf("  outputs match the reference\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    g_data = argv[1];
  }
  std::printf("scenario @@SCENARIO@@\n");
  start_nemesis();
@@DECLARATIONS@@
@@STEPS@@
  check_nemesis();
  if (g_failures > 0) {
    std::printf("scenario @@SCENARIO@@: %d check(s) FAILED\n", g_failures);
    return 1;
  }
  std::printf("scenario @@SCENARIO@@: every check held\n");
  return 0;
}

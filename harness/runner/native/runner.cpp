#include "runner.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <executorch/runtime/backend/interface.h>

#include "backend_options.h"
#include "shared_mem.h"
#include "events.h"
#include "memory.h"
#include "tensors.h"

namespace harness {

using executorch::extension::Module;
using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Span;

std::string runtime_error_message(const std::string& what, int code) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), " (0x%x)", code);
  return what + " failed: " +
      executorch::runtime::to_string(static_cast<Error>(code)) + buf;
}

namespace {

Json nullable_string(const std::string& s) {
  return s.empty() ? Json() : Json(s);
}

double rounded_ms(std::chrono::steady_clock::duration d) {
  double ms = std::chrono::duration<double, std::milli>(d).count();
  return std::round(ms * 1000.0) / 1000.0;
}

// Start gate of a parallel step (C++17 has no std::barrier): every sub-step
// thread arrives and blocks until the last one has arrived, so the sub-steps
// start together. open() releases everyone early (a thread failed to start).
class StartGate {
 public:
  explicit StartGate(size_t n) : waiting_(n) {}

  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (waiting_ > 0 && --waiting_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [this] { return waiting_ == 0; });
  }

  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_ = 0;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t waiting_;
};

// The QNN interposer's step points (harness_qnn_step in
// harness/qnn/interposer.c); null without the interposer or without rules.
using StepPointFn = void (*)(const char*, int);
StepPointFn step_point = nullptr;
bool nemesis_on = false;

// Names the calling thread after the module of the step it runs: the
// interposer's nemesis tells threads apart by name (15 bytes at most). Only
// with nemesis rules: otherwise the process keeps its name.
void name_thread(const std::string& module) {
  if (!nemesis_on) return;
  std::string name = module.empty() ? std::string("runner") : module.substr(0, 15);
  ::pthread_setname_np(::pthread_self(), name.c_str());
}

// With nemesis rules: hands them to the interposer (it reads the variable at
// the first QNN call of this process) and opens it now, so that the step
// points before the runtime's first QNN load reach it too.
void start_nemesis(const std::vector<std::string>& rules) {
  if (rules.empty()) return;
  nemesis_on = true;
  std::string joined;
  for (const auto& rule : rules) joined += (joined.empty() ? "" : ";") + rule;
  ::setenv("HARNESS_QNN_NEMESIS", joined.c_str(), 1);
  void* lib = ::dlopen("libQnnHtp.so", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) {
    step_point = reinterpret_cast<StepPointFn>(::dlsym(lib, "harness_qnn_step"));
  }
  if (step_point == nullptr) {
    std::fprintf(stderr, "harness-runner: qnn_nemesis rules given but the QNN interposer's "
                 "step points are not reachable (%s); only QNN call points apply\n",
                 lib == nullptr ? "libQnnHtp.so does not load" : "no harness_qnn_step");
  }
}

}  // namespace

Runner::LiveModule* Runner::find(const std::string& name) {
  std::lock_guard<std::mutex> lock(modules_mutex_);
  for (auto& m : modules_) {
    if (m->name == name) {
      return m.get();
    }
  }
  return nullptr;
}

std::unique_ptr<Runner::LiveModule> Runner::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(modules_mutex_);
  for (auto it = modules_.begin(); it != modules_.end(); ++it) {
    if ((*it)->name == name) {
      std::unique_ptr<LiveModule> out = std::move(*it);
      modules_.erase(it);
      return out;
    }
  }
  return nullptr;
}

bool Runner::insert(std::unique_ptr<LiveModule> live) {
  std::lock_guard<std::mutex> lock(modules_mutex_);
  for (auto& m : modules_) {
    if (m->name == live->name) {
      return false;
    }
  }
  modules_.push_back(std::move(live));
  return true;
}

void Runner::note_method(LiveModule& m, const std::string& method) {
  for (const auto& name : m.methods) {
    if (name == method) {
      return;
    }
  }
  m.methods.push_back(method);
}

// Drops every method (in load order), then the Module (its program, data
// loader and allocators) through its destructor.
void Runner::destroy(LiveModule& m) {
  for (const auto& method : m.methods) {
    m.module->unload_method(method);
  }
  m.methods.clear();
  m.module.reset();
  m.unplanned_outputs.clear();  // after the methods that pointed into them
}

bool Runner::any_feed(const std::vector<Step>& steps) {
  for (const auto& step : steps) {
    if (!step.feed.empty() || step.decode.given || any_feed(step.substeps)) {
      return true;
    }
  }
  return false;
}

namespace {

// The value of element `i` of raw `data` of `type`, as a double (for an
// argmax); false for a type a logits output is not.
bool element_value(const std::vector<uint8_t>& data, executorch::aten::ScalarType type,
                   size_t i, double& out) {
  using executorch::aten::ScalarType;
  auto at = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, data.data() + i * sizeof(v), sizeof(v));
    out = static_cast<double>(v);
  };
  switch (type) {
    case ScalarType::Float: at(float{}); return true;
    case ScalarType::Double: at(double{}); return true;
    case ScalarType::Byte: at(uint8_t{}); return true;
    case ScalarType::Char: at(int8_t{}); return true;
    case ScalarType::Short: at(int16_t{}); return true;
    case ScalarType::UInt16: at(uint16_t{}); return true;
    case ScalarType::Int: at(int32_t{}); return true;
    case ScalarType::Long: at(int64_t{}); return true;
    default: return false;
  }
}

}  // namespace

bool Runner::decode_inputs(const Step& step, const LiveModule& m,
                           std::vector<std::vector<uint8_t>>& buffers, StepResult& r,
                           int64_t& token) {
  const DecodeSpec& d = step.decode;
  auto fail = [&](const std::string& what) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "decode: " + what;
    return false;
  };
  if (m.last_outputs.empty()) {
    return fail("module '" + step.module + "' has no earlier execute to decode from");
  }
  if (d.logits >= m.last_outputs.size() || m.last_outputs[d.logits].empty()) {
    return fail("output " + std::to_string(d.logits) + " of the previous execute has no row " +
                std::to_string(d.row) + " of " + std::to_string(d.vocab) + " logits");
  }
  const auto& logits = m.last_outputs[d.logits];
  auto type = m.last_output_types[d.logits];
  size_t item = executorch::runtime::elementSize(type);
  size_t numel = logits.size() / item;
  if (numel % d.vocab != 0 || d.row >= numel / d.vocab) {
    return fail("output " + std::to_string(d.logits) + " of the previous execute has no row " +
                std::to_string(d.row) + " of " + std::to_string(d.vocab) +
                " logits (it has " + std::to_string(numel) + " values)");
  }
  // The first maximum, as numpy's argmax.
  size_t best = 0;
  double best_value = 0.0;
  for (size_t j = 0; j < d.vocab; ++j) {
    double v = 0.0;
    if (!element_value(logits, type, d.row * d.vocab + j, v)) {
      return fail(std::string("output ") + std::to_string(d.logits) + " is " +
                  dtype_name(type) + ": no argmax of it");
    }
    if (j == 0 || v > best_value) {
      best = j;
      best_value = v;
    }
  }
  auto& tok = buffers[d.token];
  if (step.inputs[d.token].dtype == executorch::aten::ScalarType::Long) {
    int64_t v = static_cast<int64_t>(best);
    std::memcpy(tok.data(), &v, sizeof(v));
  } else {
    int32_t v = static_cast<int32_t>(best);
    std::memcpy(tok.data(), &v, sizeof(v));
  }
  token = static_cast<int64_t>(best);
  for (const auto& c : d.caches) {
    const TensorSpec& spec = step.inputs[c.input];
    size_t outer = 1, inner = executorch::runtime::elementSize(spec.dtype);
    for (size_t a = 0; a < c.axis; ++a) {
      outer *= static_cast<size_t>(spec.shape[a]);
    }
    for (size_t a = c.axis + 1; a < spec.shape.size(); ++a) {
      inner *= static_cast<size_t>(spec.shape[a]);
    }
    size_t length = static_cast<size_t>(spec.shape[c.axis]);
    size_t block = outer * inner;
    const std::vector<uint8_t>* old =
        c.input < m.last_inputs.size() ? &m.last_inputs[c.input] : nullptr;
    const std::vector<uint8_t>* out =
        c.output < m.last_outputs.size() ? &m.last_outputs[c.output] : nullptr;
    if (old == nullptr || out == nullptr || out->empty() || block == 0 ||
        old->size() % block != 0 || out->size() % block != 0 ||
        m.last_output_types[c.output] != spec.dtype) {
      return fail("input " + std::to_string(c.input) + " (a cache, axis " +
                  std::to_string(c.axis) + ", " + dtype_name(spec.dtype) +
                  ") cannot be built from input " + std::to_string(c.input) +
                  " and output " + std::to_string(c.output) + " of the previous execute");
    }
    size_t old_len = old->size() / block, new_len = out->size() / block;
    if (d.new_entries > new_len || d.past > old_len || d.past + d.new_entries > length) {
      return fail("input " + std::to_string(c.input) + ": " + std::to_string(d.new_entries) +
                  " new entries at " + std::to_string(d.past) + " do not fit (the cache holds " +
                  std::to_string(length) + ", the previous one " + std::to_string(old_len) +
                  ", output " + std::to_string(c.output) + " has " + std::to_string(new_len) +
                  ")");
    }
    auto& cur = buffers[c.input];
    size_t keep = std::min(old_len, length);
    for (size_t o = 0; o < outer; ++o) {
      uint8_t* row = cur.data() + o * length * inner;
      std::memcpy(row, old->data() + o * old_len * inner, keep * inner);
      std::memcpy(row + d.past * inner, out->data() + o * new_len * inner,
                  d.new_entries * inner);
    }
  }
  return true;
}

bool Runner::bind_unplanned_outputs(LiveModule& m, const std::string& method,
                                    StepResult& r) {
  auto it = m.unplanned_outputs.find(method);
  if (it == m.unplanned_outputs.end()) {
    auto meta = m.module->method_meta(method);
    if (!meta.ok()) {
      return true;  // execute gives the runtime's own error for this method
    }
    std::vector<UnplannedOutput> owned;
    for (size_t i = 0; i < meta->num_outputs(); ++i) {
      auto tag = meta->output_tag(i);
      if (!tag.ok() || tag.get() != executorch::runtime::Tag::Tensor) {
        continue;
      }
      auto info = meta->output_tensor_meta(i);
      if (!info.ok() || info->is_memory_planned()) {
        continue;
      }
      UnplannedOutput out;
      out.index = i;
      out.data.assign(info->nbytes(), 0);
      std::vector<executorch::aten::SizesType> sizes(
          info->sizes().begin(), info->sizes().end());
      std::vector<executorch::aten::DimOrderType> dim_order(
          info->dim_order().begin(), info->dim_order().end());
      out.tensor = executorch::extension::make_tensor_ptr(
          std::move(sizes), out.data.empty() ? nullptr : out.data.data(),
          std::move(dim_order), {}, info->scalar_type());
      owned.push_back(std::move(out));
    }
    it = m.unplanned_outputs.emplace(method, std::move(owned)).first;
  }
  for (auto& out : it->second) {
    // Loads the method first when it is not loaded, as execute would.
    Error err = m.module->set_output(method, EValue(*out.tensor), out.index);
    if (err != Error::Ok) {
      r.status = "error";
      r.error_code = static_cast<int>(err);
      r.message = runtime_error_message(
          "set_output(" + method + ", " + std::to_string(out.index) + ")",
          r.error_code);
      return false;
    }
  }
  return true;
}

namespace {
Module::LoadMode load_mode(const std::string& name) {
  if (name == "File") {
    return Module::LoadMode::File;
  }
  if (name == "Mmap") {
    return Module::LoadMode::Mmap;
  }
  if (name == "MmapUseMlock") {
    return Module::LoadMode::MmapUseMlock;
  }
  return Module::LoadMode::MmapUseMlockIgnoreErrors;  // validated: the only other
}
}  // namespace

Runner::StepResult Runner::load_module(const Step& step) {
  StepResult r;
  if (find(step.module) != nullptr) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "module '" + step.module + "' is already live";
    return r;
  }
  // The step's loader; the default is the pybindings' one for a file (mmap,
  // mlock when permitted).
  auto module = std::make_unique<Module>(step.pte, load_mode(step.load_mode));
  Error err;
  if (step.backend_options.empty()) {
    err = module->load();
  } else {
    LoadOptions opts;
    std::string why;
    if (!opts.build(step.backend_options, why)) {
      r.status = "error";
      r.error_code = static_cast<int>(Error::InvalidArgument);
      r.message = why;
      return r;
    }
    // Module deep-copies the map; every later load_method (explicit or the
    // implicit one in execute) passes it to the backends' init.
    err = module->load(opts.map());
  }
  if (err != Error::Ok) {
    r.status = "error";
    r.error_code = static_cast<int>(err);
    r.message =
        runtime_error_message("Module::load(" + step.pte + ")", r.error_code);
    return r;
  }
  auto live = std::make_unique<LiveModule>();
  live->name = step.module;
  live->module = std::move(module);
  if (!insert(std::move(live))) {
    // Only a concurrent load of the same name gets here, which scenario
    // validation rules out; the loaded module is dropped with `live`.
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "module '" + step.module + "' is already live";
  }
  return r;
}

Runner::StepResult Runner::load_method(const Step& step) {
  StepResult r;
  LiveModule* m = find(step.module);
  if (m == nullptr) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "module '" + step.module + "' is not live";
    return r;
  }
  if (m->module->is_method_loaded(step.method)) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "method '" + step.method + "' of module '" + step.module +
        "' is already loaded";
    return r;
  }
  Error err = m->module->load_method(step.method);
  if (err != Error::Ok) {
    r.status = "error";
    r.error_code = static_cast<int>(err);
    r.message =
        runtime_error_message("load_method(" + step.method + ")", r.error_code);
    return r;
  }
  note_method(*m, step.method);
  return r;
}

Runner::StepResult Runner::execute(const Step& step) {
  StepResult r;
  LiveModule* m = find(step.module);
  if (m == nullptr) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "module '" + step.module + "' is not live";
    return r;
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> inputs;
  buffers.reserve(step.inputs.size());
  for (const auto& spec : step.inputs) {
    buffers.push_back(read_tensor_file(spec));
  }
  // Fed inputs take the module's previous outputs, as an app's decode loop
  // passes each step's KV caches to the next.
  for (const auto& [in, from] : step.feed) {
    if (from >= m->last_outputs.size()) {
      r.status = "error";
      r.error_code = kHarnessErrorCode;
      r.message = "feed: module '" + step.module + "' has no output " +
          std::to_string(from) + " of an earlier execute (it gave " +
          std::to_string(m->last_outputs.size()) + ")";
      return r;
    }
    if (m->last_outputs[from].size() != buffers[in].size()) {
      r.status = "error";
      r.error_code = kHarnessErrorCode;
      r.message = "feed: output " + std::to_string(from) + " of the previous execute has " +
          std::to_string(m->last_outputs[from].size()) + " bytes; input " +
          std::to_string(in) + " takes " + std::to_string(buffers[in].size());
      return r;
    }
    buffers[in] = m->last_outputs[from];
  }
  int64_t token = 0;
  if (step.decode.given && !decode_inputs(step, *m, buffers, r, token)) {
    return r;
  }
  // Freed when the step ends, after the execute and the comparison.
  SharedInputs shared;
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    if (step.shared_inputs) {
      std::string why;
      void* held = shared.hold(buffers[i].data(), buffers[i].size(), why);
      if (held == nullptr) {
        r.status = "error";
        r.error_code = kHarnessErrorCode;
        r.message = "shared_inputs: input " + std::to_string(i) + ": " + why;
        return r;
      }
      tensors.push_back(make_input_at(step.inputs[i], held));
    } else {
      tensors.push_back(make_input(step.inputs[i], buffers[i]));
    }
    inputs.emplace_back(*tensors.back());
  }
  // Outputs the program leaves to the app get this runner's buffers (inputs
  // need nothing: Method::set_input points an unplanned input at the data it
  // is given). Loads the method first when it is not loaded (with the
  // module's backend options), exactly as the protocol's implicit load asks.
  if (!bind_unplanned_outputs(*m, step.method, r)) {
    if (m->module->is_method_loaded(step.method)) {
      note_method(*m, step.method);
    }
    return r;
  }
  auto result = m->module->execute(step.method, inputs);
  if (m->module->is_method_loaded(step.method)) {
    note_method(*m, step.method);
  }
  if (!result.ok()) {
    r.status = "error";
    r.error_code = static_cast<int>(result.error());
    r.message =
        runtime_error_message("execute(" + step.method + ")", r.error_code);
    return r;
  }
  if (step.decode.given) {
    r.token = token;  // reported once the execute ran on it, as the Python runner does
  }
  const std::vector<EValue>& outputs = *result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    try {
      r.outputs.push_back(describe_output(outputs[i], step.emit_outputs));
    } catch (const UndescribableOutput& e) {
      r.outputs.clear();
      r.status = "error";
      r.error_code = kHarnessErrorCode;
      r.message = "method '" + step.method + "' output " + std::to_string(i) + " is " +
          e.what() +
          ", which the runner cannot describe (it reports tensors, int, double, bool, "
          "string and none values, and lists of int, double or bool)";
      return r;
    }
  }
  if (keeps_outputs_) {
    m->last_outputs.assign(outputs.size(), {});
    m->last_output_types.assign(outputs.size(), executorch::aten::ScalarType::Undefined);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].isTensor()) {
        const auto& t = outputs[i].toTensor();
        const auto* p = static_cast<const uint8_t*>(t.const_data_ptr());
        m->last_outputs[i].assign(p, p + t.nbytes());
        m->last_output_types[i] = t.scalar_type();
      }
    }
    m->last_inputs = buffers;
  }
  r.max_abs_diff = 0.0;
  if (!step.expected.empty()) {
    Comparison c = compare_outputs(outputs, step.expected, step.atol, step.rtol);
    r.max_abs_diff = c.max_abs_diff;
    if (!c.match) {
      r.status = "mismatch";
      r.message = c.message;
    }
  }
  return r;
}

Runner::StepResult Runner::unload_method(const Step& step) {
  StepResult r;
  LiveModule* m = find(step.module);
  if (m == nullptr) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "module '" + step.module + "' is not live";
    return r;
  }
  // Module::unload_method erases the method's holder: the Method (delegate
  // handles destroyed), its memory manager and planned buffers. Other methods
  // and the program stay.
  if (!m->module->unload_method(step.method)) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "method '" + step.method + "' of module '" + step.module +
        "' is not loaded";
    return r;
  }
  for (auto it = m->methods.begin(); it != m->methods.end(); ++it) {
    if (*it == step.method) {
      m->methods.erase(it);
      break;
    }
  }
  m->unplanned_outputs.erase(step.method);  // freed with the method
  return r;
}

Runner::StepResult Runner::destroy_module(const Step& step) {
  StepResult r;
  // Out of the list first, then torn down without the lock, so destroys in
  // a parallel step overlap.
  std::unique_ptr<LiveModule> m = take(step.module);
  if (m != nullptr) {
    destroy(*m);
    return r;
  }
  r.status = "error";
  r.error_code = kHarnessErrorCode;
  r.message = "module '" + step.module + "' is not live";
  return r;
}

Runner::StepResult Runner::set_option(const Step& step) {
  StepResult r;
  BackendOption opt = make_backend_option(step.key, step.value);
  Error err = executorch::runtime::set_option(
      step.backend.c_str(), Span<BackendOption>(&opt, 1));
  r.option = {{"backend", step.backend},
              {"key", step.key},
              {"value", backend_option_value(opt)},
              {"supported", err == Error::Ok}};
  if (err != Error::Ok) {
    r.status = "error";
    r.error_code = static_cast<int>(err);
    r.message = runtime_error_message(
        "set_option(" + step.backend + ", " + step.key + ")", r.error_code);
  }
  return r;
}

Runner::StepResult Runner::get_option(const Step& step) {
  StepResult r;
  // The value's type tells the backend which type the caller expects.
  BackendOption opt = make_backend_option(step.key, step.value);
  Error err = executorch::runtime::get_option(
      step.backend.c_str(), Span<BackendOption>(&opt, 1));
  r.option = {{"backend", step.backend},
              {"key", step.key},
              {"value", err == Error::Ok ? backend_option_value(opt) : Json()},
              {"supported", err == Error::Ok}};
  if (err != Error::Ok) {
    r.status = "error";
    r.error_code = static_cast<int>(err);
    r.message = runtime_error_message(
        "get_option(" + step.backend + ", " + step.key + ")", r.error_code);
  }
  return r;
}

Runner::StepResult Runner::parallel(const Step& step) {
  const size_t n = step.substeps.size();
  std::vector<StepResult> results(n);
  std::vector<double> elapsed(n, 0.0);
  std::vector<bool> started(n, false);
  StartGate gate(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  std::string spawn_error;
  for (size_t j = 0; j < n; ++j) {
    try {
      threads.emplace_back([this, &step, &results, &elapsed, &gate, j] {
        name_thread(step.substeps[j].module);
        gate.arrive_and_wait();
        auto t0 = std::chrono::steady_clock::now();
        results[j] = run_one(step.substeps[j]);
        elapsed[j] = rounded_ms(std::chrono::steady_clock::now() - t0);
      });
      started[j] = true;
    } catch (const std::exception& e) {
      // No thread: release the ones waiting for it, report the rest unrun.
      spawn_error = std::string("cannot start a thread: ") + e.what();
      gate.open();
      break;
    }
  }
  for (auto& t : threads) {
    t.join();
  }

  StepResult r;
  r.substeps = Json::array();
  bool have_diff = false;
  double max_diff = 0.0;
  for (size_t j = 0; j < n; ++j) {
    const Step& sub = step.substeps[j];
    StepResult& sr = results[j];
    if (!started[j]) {
      sr = StepResult();
      sr.status = "error";
      sr.error_code = kHarnessErrorCode;
      sr.message = "runner error: " + spawn_error;
    }
    if (sr.status != "ok" && r.status == "ok") {
      r.status = sr.status;
      r.error_code = sr.error_code;
      r.message = sr.message;
    }
    for (const Json& out : sr.outputs) {
      r.outputs.push_back(out);
    }
    if (sr.max_abs_diff.is_number()) {
      double d = sr.max_abs_diff.get<double>();
      max_diff = have_diff ? std::max(max_diff, d) : d;
      have_diff = true;
    }
    r.substeps.push_back({{"op", op_name(sub.op)},
                          {"module", nullable_string(sub.module)},
                          {"method", nullable_string(sub.method)},
                          {"status", sr.status},
                          {"error_code", sr.error_code},
                          {"message", sr.message},
                          {"outputs", std::move(sr.outputs)},
                          {"max_abs_diff", std::move(sr.max_abs_diff)},
                          {"elapsed_ms", elapsed[j]}});
    if (!sr.token.is_null()) {
      r.substeps.back()["token"] = std::move(sr.token);
    }
  }
  if (have_diff) {
    r.max_abs_diff = max_diff;
  }
  return r;
}

Runner::StepResult Runner::run_one(const Step& step) {
  StepResult r;
  const bool point = step_point != nullptr && step.op != Op::Parallel;
  if (point) step_point(op_name(step.op), 0);
  try {
    switch (step.op) {
      case Op::LoadModule:
        r = load_module(step);
        break;
      case Op::LoadMethod:
        r = load_method(step);
        break;
      case Op::Execute:
        r = execute(step);
        break;
      case Op::UnloadMethod:
        r = unload_method(step);
        break;
      case Op::DestroyModule:
        r = destroy_module(step);
        break;
      case Op::Snapshot:
        break;
      case Op::SetOption:
        r = set_option(step);
        break;
      case Op::GetOption:
        r = get_option(step);
        break;
      case Op::Parallel:
        r = parallel(step);
        break;
    }
  } catch (const std::exception& e) {
    r = StepResult();
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = std::string("runner error: ") + e.what();
  }
  if (point) step_point(op_name(step.op), 1);
  return r;
}

int Runner::run() {
  emit_event({{"event", "start"},
              {"runner", "native"},
              {"pid", static_cast<int64_t>(getpid())},
              {"scenario", scenario_.name}});
  start_nemesis(scenario_.qnn_nemesis);

  size_t failed = 0;
  for (const Step& step : scenario_.steps) {
    emit_step_marker(static_cast<long>(step.index));
    name_thread(step.op == Op::Parallel ? std::string() : step.module);
    auto t0 = std::chrono::steady_clock::now();
    StepResult r = run_one(step);
    double elapsed_ms = rounded_ms(std::chrono::steady_clock::now() - t0);
    if (r.status != "ok") {
      ++failed;
    }

    Json ev = {{"event", "step"},
               {"index", static_cast<int64_t>(step.index)},
               {"op", op_name(step.op)},
               {"module", nullable_string(step.module)},
               {"method", nullable_string(step.method)},
               {"status", r.status},
               {"error_code", r.error_code},
               {"message", r.message},
               {"elapsed_ms", elapsed_ms},
               {"outputs", std::move(r.outputs)},
               {"max_abs_diff", std::move(r.max_abs_diff)},
               {"option", std::move(r.option)}};
    if (!r.token.is_null()) {
      ev["token"] = std::move(r.token);
    }
    if (step.op == Op::Parallel) {
      // One thread per sub-step, all joined before this event (and the
      // memory and trace readings below) is written.
      ev["substeps"] = std::move(r.substeps);
    }
    ev["trace_offset"] = trace_offset();
    ev["memory"] = measure_memory(scenario_.watch_mappings);
    emit_event(ev);
  }

  emit_step_marker(-1);  // teardown: runtime lines after this belong to no step
  // Modules the scenario left live are torn down before "end", so a crash in
  // teardown shows as a signal with every step reported and no end event.
  for (auto& m : modules_) {
    name_thread(m->name);
    destroy(*m);
  }
  modules_.clear();

  emit_event({{"event", "end"},
              {"status", failed == 0 ? "ok" : "failed"},
              {"steps", static_cast<int64_t>(scenario_.steps.size())},
              {"failed_steps", static_cast<int64_t>(failed)}});
  return failed == 0 ? 0 : 1;
}

}  // namespace harness

#include "runner.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>

#include <executorch/runtime/backend/interface.h>

#include "backend_options.h"
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

json::Value nullable_string(const std::string& s) {
  return s.empty() ? json::Value::null() : json::Value::string(s);
}

}  // namespace

Runner::LiveModule* Runner::find(const std::string& name) {
  for (auto& m : modules_) {
    if (m->name == name) {
      return m.get();
    }
  }
  return nullptr;
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
}

Runner::StepResult Runner::load_module(const Step& step) {
  StepResult r;
  if (find(step.module) != nullptr) {
    r.status = "error";
    r.error_code = kHarnessErrorCode;
    r.message = "module '" + step.module + "' is already live";
    return r;
  }
  // Same loader the pybindings use for a file: mmap, mlock when permitted.
  auto module = std::make_unique<Module>(
      step.pte, Module::LoadMode::MmapUseMlockIgnoreErrors);
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
  modules_.push_back(std::move(live));
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
    tensors.push_back(make_input(spec, buffers.back()));
    inputs.emplace_back(*tensors.back());
  }
  // Loads the method first when it is not loaded (with the module's backend
  // options), exactly as the protocol's implicit load asks.
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
  const std::vector<EValue>& outputs = *result;
  for (const auto& out : outputs) {
    r.outputs.push(describe_output(out));
  }
  r.max_abs_diff = json::Value::number(0.0);
  if (!step.expected.empty()) {
    Comparison c = compare_outputs(outputs, step.expected, step.atol, step.rtol);
    r.max_abs_diff = json::Value::number(c.max_abs_diff);
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
  return r;
}

Runner::StepResult Runner::destroy_module(const Step& step) {
  StepResult r;
  for (auto it = modules_.begin(); it != modules_.end(); ++it) {
    if ((*it)->name == step.module) {
      destroy(**it);
      modules_.erase(it);
      return r;
    }
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
  r.option = json::Value::object();
  r.option.set("backend", json::Value::string(step.backend));
  r.option.set("key", json::Value::string(step.key));
  r.option.set("value", backend_option_value(opt));
  r.option.set("supported", json::Value::boolean(err == Error::Ok));
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
  r.option = json::Value::object();
  r.option.set("backend", json::Value::string(step.backend));
  r.option.set("key", json::Value::string(step.key));
  r.option.set(
      "value",
      err == Error::Ok ? backend_option_value(opt) : json::Value::null());
  r.option.set("supported", json::Value::boolean(err == Error::Ok));
  if (err != Error::Ok) {
    r.status = "error";
    r.error_code = static_cast<int>(err);
    r.message = runtime_error_message(
        "get_option(" + step.backend + ", " + step.key + ")", r.error_code);
  }
  return r;
}

int Runner::run() {
  json::Value start = json::Value::object();
  start.set("event", json::Value::string("start"));
  start.set("runner", json::Value::string("native"));
  start.set("pid", json::Value::integer(static_cast<int64_t>(getpid())));
  start.set("scenario", json::Value::string(scenario_.name));
  emit_event(start);

  size_t failed = 0;
  for (const Step& step : scenario_.steps) {
    StepResult r;
    auto t0 = std::chrono::steady_clock::now();
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
      }
    } catch (const std::exception& e) {
      r = StepResult();
      r.status = "error";
      r.error_code = kHarnessErrorCode;
      r.message = std::string("runner error: ") + e.what();
    }
    auto t1 = std::chrono::steady_clock::now();
    double elapsed_ms =
        std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (r.status != "ok") {
      ++failed;
    }

    json::Value ev = json::Value::object();
    ev.set("event", json::Value::string("step"));
    ev.set("index", json::Value::integer(static_cast<int64_t>(step.index)));
    ev.set("op", json::Value::string(op_name(step.op)));
    ev.set("module", nullable_string(step.module));
    ev.set("method", nullable_string(step.method));
    ev.set("status", json::Value::string(r.status));
    ev.set("error_code", json::Value::integer(r.error_code));
    ev.set("message", json::Value::string(r.message));
    ev.set("elapsed_ms", json::Value::number(std::round(elapsed_ms * 1000.0) / 1000.0));
    ev.set("outputs", std::move(r.outputs));
    ev.set("max_abs_diff", std::move(r.max_abs_diff));
    ev.set("option", std::move(r.option));
    ev.set("trace_offset", json::Value::integer(trace_offset()));
    ev.set("memory", measure_memory(scenario_.watch_mappings));
    emit_event(ev);
  }

  // Modules the scenario left live are torn down before "end", so a crash in
  // teardown shows as a signal with every step reported and no end event.
  for (auto& m : modules_) {
    destroy(*m);
  }
  modules_.clear();

  json::Value end = json::Value::object();
  end.set("event", json::Value::string("end"));
  end.set("status", json::Value::string(failed == 0 ? "ok" : "failed"));
  end.set("steps", json::Value::integer(static_cast<int64_t>(scenario_.steps.size())));
  end.set("failed_steps", json::Value::integer(static_cast<int64_t>(failed)));
  emit_event(end);
  return failed == 0 ? 0 : 1;
}

}  // namespace harness

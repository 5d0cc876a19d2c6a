// Scenario file model and validation (runner-protocol.md, "Scenario file").
//
// Everything that can make a scenario unrunnable is checked here, before the
// first step, so the runner exits 2 without having done anything: unreadable or
// invalid JSON, unknown ops, missing fields, unknown dtypes, missing .pte
// files, missing tensor files or tensor files whose size does not match their
// shape. Tensor contents are read later, by the step that uses them, so the
// memory reported before that step does not include them.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include "memory.h"

namespace harness {

class ScenarioError : public std::runtime_error {
 public:
  explicit ScenarioError(const std::string& what) : std::runtime_error(what) {}
};

// Protocol dtype names (numpy's spelling) <-> ScalarType, the same list as
// harness.protocol.scenario_file.DTYPES (runner-protocol.md); dtype_name says "unknown" for
// the types outside it (complex, quantized, bits, float8).
bool parse_dtype(const std::string& name, executorch::aten::ScalarType& out);
const char* dtype_name(executorch::aten::ScalarType type);
// "float32, float16, ... or bool": the names parse_dtype takes.
// `with_values`: and the non-tensor value kinds an `expected` entry may name.
std::string dtype_names_text(bool with_values = false);

struct TensorSpec {
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  std::vector<int64_t> shape;
  std::string file;  // absolute (resolved against the scenario directory)
  size_t numel = 0;
  size_t nbytes = 0;
  // An expected non-tensor value: its kind (int, float, bool, string, none;
  // harness.protocol.scenario_file.VALUE_KINDS), else empty. `dtype` is then
  // unused; a string's file may have any size.
  std::string kind;
};

// A backend option value: bool, int or string, as in the JSON.
struct OptionValue {
  enum class Kind { Bool, Int, String };
  Kind kind = Kind::Int;
  bool b = false;
  int64_t i = 0;
  std::string s;
};

struct BackendOptionSet {
  std::string backend;
  std::vector<std::pair<std::string, OptionValue>> options;
};

enum class Op {
  LoadModule,
  LoadMethod,
  Execute,
  UnloadMethod,
  DestroyModule,
  Snapshot,
  SetOption,
  GetOption,
  Parallel,
};

// At most this many sub-steps (threads) in one parallel step.
constexpr size_t kMaxParallel = 16;

const char* op_name(Op op);

// An execute's `decode` (harness.protocol.scenario_file.DecodeSpec): the
// token is the argmax of row `row` of the previous execute's output `logits`
// (rows of `vocab`), written to element 0 of input `token`; each cache input
// (input, output, axis) is the previous execute's same input with the previous
// output's first `new_entries` entries along `axis` written at `past`.
struct DecodeCache {
  size_t input = 0;
  size_t output = 0;
  size_t axis = 0;
};

struct DecodeSpec {
  bool given = false;
  size_t token = 0;
  size_t logits = 0;
  size_t row = 0;
  size_t vocab = 0;
  size_t past = 0;
  size_t new_entries = 0;
  std::vector<DecodeCache> caches;
};

struct Step {
  size_t index = 0;
  Op op = Op::Snapshot;
  std::string module;  // empty when the op has none
  std::string method;  // empty when the op has none
  // load_module
  std::string pte;
  std::vector<BackendOptionSet> backend_options;
  // Module::LoadMode by its enumerator name (File, Mmap, MmapUseMlock,
  // MmapUseMlockIgnoreErrors); the validator allows no other.
  std::string load_mode = "MmapUseMlockIgnoreErrors";
  // execute
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> expected;  // empty: outputs are not compared
  double atol = 0.0;
  double rtol = 0.0;
  bool emit_outputs = false;  // put each output tensor's bytes in the event
  // inputs in QNN shared memory (QnnExecuTorchAllocCustomMem), not the heap
  bool shared_inputs = false;
  // (input index, output index): that input takes that output of the module's
  // previous execute instead of its file's data (a decode loop).
  std::vector<std::pair<size_t, size_t>> feed;
  DecodeSpec decode;  // `given` when the execute builds its inputs as a decode step
  // set_option / get_option
  std::string backend;
  std::string key;
  OptionValue value;  // set_option: the value; get_option: its kind
  // parallel: the sub-steps, one thread each. Each is a load_module,
  // load_method, execute, unload_method or destroy_module on its own module
  // (no two on the same module, none nested); their `index` is the parallel
  // step's.
  std::vector<Step> substeps;
};

struct Scenario {
  std::string path;
  std::string dir;
  std::string name;
  std::vector<WatchedPath> watch_mappings;
  // Rules for the QNN interposer's nemesis (harness/protocol/nemesis.py): held
  // threads and injected QNN failures, passed to it as HARNESS_QNN_NEMESIS.
  std::vector<std::string> qnn_nemesis;
  std::vector<Step> steps;
};

// Reads and validates a scenario file. Throws ScenarioError.
Scenario load_scenario(const std::string& path);

// Tolerances for an execute step that names none: exact match (as the
// Python runner).
constexpr double kDefaultAtol = 0.0;
constexpr double kDefaultRtol = 0.0;

}  // namespace harness

// Executes a validated scenario step by step and writes the event stream.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>

#include "events.h"
#include "scenario.h"

namespace harness {

// error_code reported for step errors the harness itself detects (a module
// name that is not live, a method that is not loaded, ...), as opposed to an
// executorch::runtime::Error the runtime returned.
constexpr int kHarnessErrorCode = -1;

class Runner {
 public:
  explicit Runner(const Scenario& scenario)
      : scenario_(scenario), keeps_outputs_(any_feed(scenario.steps)) {}

  // Runs every step, writes start/step/end events. Returns the exit code
  // (0 every step ok, 1 some step error/mismatch).
  int run();

 private:
  struct StepResult {
    std::string status = "ok";  // ok | error | mismatch
    int error_code = 0;
    std::string message;
    Json outputs = Json::array();  // execute's outputs
    Json max_abs_diff;  // null unless execute produced outputs
    Json option;        // null unless set_option/get_option
    Json substeps;      // null unless parallel: one object per sub-step
    Json token;         // null unless an execute with `decode`: the token it fed
  };

  // One live module: the ExecuTorch Module plus the methods this runner
  // loaded through it, in load order.
  // Storage for one method output the program does not memory-plan (an LLM
  // export's logits and KV caches, lowered with alloc_graph_output=False):
  // the app owns it, so this runner does, as an app must.
  struct UnplannedOutput {
    size_t index = 0;
    std::vector<uint8_t> data;
    executorch::extension::TensorPtr tensor;
  };

  struct LiveModule {
    std::string name;
    // Declared before `module` so that it outlives the methods that point
    // into it, whatever order the members are destroyed in.
    std::map<std::string, std::vector<UnplannedOutput>> unplanned_outputs;
    std::unique_ptr<executorch::extension::Module> module;
    std::vector<std::string> methods;
    // The bytes of each output of the module's last execute (empty for a
    // non-tensor output), kept when some step feeds outputs back as inputs.
    std::vector<std::vector<uint8_t>> last_outputs;
    std::vector<executorch::aten::ScalarType> last_output_types;
    // Its last execute's inputs, kept alike (a decode step builds its caches
    // from them).
    std::vector<std::vector<uint8_t>> last_inputs;
  };

  static bool any_feed(const std::vector<Step>& steps);

  // Builds a decode step's token and cache inputs in `buffers` from the
  // module's previous execute (Step::decode); false with `r` set when they
  // cannot be built; `token` the token it wrote.
  static bool decode_inputs(const Step& step, const LiveModule& m,
                            std::vector<std::vector<uint8_t>>& buffers, StepResult& r,
                            int64_t& token);

  // Binds the method's unplanned outputs (allocated at the first execute
  // after each load of the method) with Module::set_output before an execute;
  // false with `r` holding the runtime's error when it refuses one.
  bool bind_unplanned_outputs(LiveModule& m, const std::string& method,
                              StepResult& r);

  StepResult load_module(const Step& step);
  StepResult load_method(const Step& step);
  StepResult execute(const Step& step);
  StepResult unload_method(const Step& step);
  StepResult destroy_module(const Step& step);
  StepResult set_option(const Step& step);
  StepResult get_option(const Step& step);
  StepResult parallel(const Step& step);

  // Runs one step (any op), turning an exception into an error result.
  StepResult run_one(const Step& step);

  // modules_ is shared by the threads of a parallel step; while steps run,
  // these three are the only places that touch the vector, each under
  // modules_mutex_. The
  // LiveModule objects themselves are used without the lock: the sub-steps
  // of a parallel step each work on a different module.
  LiveModule* find(const std::string& name);
  std::unique_ptr<LiveModule> take(const std::string& name);
  bool insert(std::unique_ptr<LiveModule> live);
  void destroy(LiveModule& m);
  static void note_method(LiveModule& m, const std::string& method);

  const Scenario& scenario_;
  const bool keeps_outputs_;
  std::mutex modules_mutex_;
  std::vector<std::unique_ptr<LiveModule>> modules_;  // creation order
};

// "<what> failed: Error::<Name> (0x<code>)"
std::string runtime_error_message(const std::string& what, int code);

}  // namespace harness

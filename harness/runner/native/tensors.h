// Input tensors from raw files, output fingerprints and output comparison.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/core/evalue.h>

#include "events.h"
#include "scenario.h"

namespace harness {

// Reads a tensor file (its size was validated with the scenario).
// Throws std::runtime_error when it cannot be read now.
std::vector<uint8_t> read_tensor_file(const TensorSpec& spec);

// A tensor viewing `data` (which must outlive it) with the spec's shape/dtype.
executorch::extension::TensorPtr make_input(
    const TensorSpec& spec,
    std::vector<uint8_t>& data);

// A tensor of `spec` over memory the caller keeps (a shared-memory input).
executorch::extension::TensorPtr make_input_at(const TensorSpec& spec, void* data);

// An output the runner cannot report (a list of tensors): the execute's one
// error names the method and output index with what().
class UndescribableOutput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// {"dtype": ..., "shape": [...], "sha256": ...} for one method output.
// A non-tensor value (int, double, bool, string, none, or a list of int,
// double or bool; harness.protocol.values) has its kind as dtype, shape []
// ([n] for a list), "value", and its canonical bytes hashed (and as "data").
// Throws UndescribableOutput for anything else.
// `with_data`: also "data", the tensor's raw little-endian bytes in base64 (a
// reference run whose outputs become the expected tensors of later runs).
Json describe_output(const executorch::runtime::EValue& value,
                     bool with_data = false);

struct Comparison {
  bool match = true;
  double max_abs_diff = 0;  // over every compared element of every output
  std::string message;      // why it does not match
};

// Elementwise |out - exp| <= atol + rtol * |exp| over every expected output.
Comparison compare_outputs(
    const std::vector<executorch::runtime::EValue>& outputs,
    const std::vector<TensorSpec>& expected,
    double atol,
    double rtol);

}  // namespace harness

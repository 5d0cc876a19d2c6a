#include "tensors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include "sha256.h"

namespace harness {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::EValue;

namespace {

// Element i of a tensor buffer of type `t` as double; false for the types
// the runner does not compare (complex, quantized, bits, float8).
bool load_element(ScalarType t, const void* data, size_t i, double& out) {
  const auto* base = static_cast<const unsigned char*>(data);
  if (t == ScalarType::Bool) {
    out = base[i] != 0 ? 1.0 : 0.0;  // any nonzero byte is true
    return true;
  }
  switch (t) {
#define HARNESS_LOAD_CASE(ctype, name)                          \
  case ScalarType::name: {                                      \
    ctype v;                                                    \
    std::memcpy(&v, base + i * sizeof(ctype), sizeof(ctype));   \
    out = static_cast<double>(v);                               \
    return true;                                                \
  }
    ET_FORALL_REALHBF16_TYPES(HARNESS_LOAD_CASE)
    HARNESS_LOAD_CASE(uint16_t, UInt16)
    HARNESS_LOAD_CASE(uint32_t, UInt32)
    HARNESS_LOAD_CASE(uint64_t, UInt64)
#undef HARNESS_LOAD_CASE
    default:
      return false;
  }
}

// Integers and booleans compare exactly (bit for bit: a double would round
// 64-bit values), floating types within tolerance.
bool is_exact_type(ScalarType t) {
  return t == ScalarType::Bool ||
      executorch::runtime::isIntegralType(t, /*includeBool=*/false) ||
      executorch::runtime::isBarebonesUnsignedType(t);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) {
      s += ", ";
    }
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace

std::vector<uint8_t> read_tensor_file(const TensorSpec& spec) {
  std::vector<uint8_t> data(spec.nbytes);
  FILE* f = std::fopen(spec.file.c_str(), "rb");
  if (f == nullptr) {
    throw std::runtime_error("cannot open tensor file " + spec.file);
  }
  size_t got = spec.nbytes == 0 ? 0 : std::fread(data.data(), 1, spec.nbytes, f);
  std::fclose(f);
  if (got != spec.nbytes) {
    throw std::runtime_error("short read from tensor file " + spec.file);
  }
  return data;
}

executorch::extension::TensorPtr make_input_at(const TensorSpec& spec, void* data) {
  std::vector<executorch::aten::SizesType> sizes;
  sizes.reserve(spec.shape.size());
  for (int64_t d : spec.shape) {
    sizes.push_back(static_cast<executorch::aten::SizesType>(d));
  }
  return executorch::extension::make_tensor_ptr(std::move(sizes), data, spec.dtype);
}

executorch::extension::TensorPtr make_input(
    const TensorSpec& spec,
    std::vector<uint8_t>& data) {
  return make_input_at(spec, data.empty() ? nullptr : data.data());
}

namespace {

std::string base64(const void* data, size_t size) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    uint32_t n = static_cast<uint32_t>(p[i]) << 16;
    if (i + 1 < size) n |= static_cast<uint32_t>(p[i + 1]) << 8;
    if (i + 2 < size) n |= p[i + 2];
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(i + 1 < size ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back(i + 2 < size ? kAlphabet[n & 63] : '=');
  }
  return out;
}

}  // namespace

Json describe_output(const EValue& value, bool with_data) {
  if (value.isTensor()) {
    const Tensor& t = value.toTensor();
    Json shape = Json::array();
    for (auto d : t.sizes()) {
      shape.push_back(static_cast<int64_t>(d));
    }
    Json out = {{"dtype", dtype_name(t.scalar_type())},
                {"shape", std::move(shape)},
                {"sha256", sha256_hex(t.const_data_ptr(), t.nbytes())}};
    if (with_data) {
      out["data"] = base64(t.const_data_ptr(), t.nbytes());
    }
    return out;
  }
  auto scalar = [](const char* dtype, Json sha256) {
    return Json{
        {"dtype", dtype}, {"shape", Json::array()}, {"sha256", std::move(sha256)}};
  };
  if (value.isInt()) {
    int64_t v = value.toInt();
    return scalar("int", sha256_hex(&v, sizeof(v)));
  }
  if (value.isDouble()) {
    double v = value.toDouble();
    return scalar("float", sha256_hex(&v, sizeof(v)));
  }
  if (value.isBool()) {
    uint8_t v = value.toBool() ? 1 : 0;
    return scalar("bool", sha256_hex(&v, sizeof(v)));
  }
  return scalar(value.isNone() ? "none" : "other", nullptr);
}

Comparison compare_outputs(
    const std::vector<EValue>& outputs,
    const std::vector<TensorSpec>& expected,
    double atol,
    double rtol) {
  Comparison c;
  if (outputs.size() != expected.size()) {
    c.match = false;
    c.message = "method returned " + std::to_string(outputs.size()) +
        " outputs, expected " + std::to_string(expected.size());
  }
  size_t n = std::min(outputs.size(), expected.size());
  size_t bad_elements = 0;
  for (size_t o = 0; o < n; ++o) {
    const TensorSpec& exp = expected[o];
    if (!outputs[o].isTensor()) {
      c.match = false;
      if (c.message.empty()) {
        c.message = "output " + std::to_string(o) + " is not a tensor";
      }
      continue;
    }
    const Tensor& t = outputs[o].toTensor();
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    if (shape != exp.shape) {
      c.match = false;
      if (c.message.empty()) {
        c.message = "output " + std::to_string(o) + " has shape " +
            shape_string(shape) + ", expected " + shape_string(exp.shape);
      }
      continue;
    }
    std::vector<uint8_t> expected_data;
    try {
      expected_data = read_tensor_file(exp);
    } catch (const std::exception& e) {
      c.match = false;
      if (c.message.empty()) {
        c.message = e.what();
      }
      continue;
    }
    if (t.scalar_type() != exp.dtype) {
      c.match = false;
      if (c.message.empty()) {
        c.message = "output " + std::to_string(o) + " has dtype " +
            dtype_name(t.scalar_type()) + ", expected " + dtype_name(exp.dtype);
      }
      continue;
    }
    const void* data = t.const_data_ptr();
    const bool exact = is_exact_type(exp.dtype);
    const size_t size = executorch::runtime::elementSize(exp.dtype);
    for (size_t i = 0; i < exp.numel; ++i) {
      double got = 0.0;
      if (!load_element(t.scalar_type(), data, i, got)) {
        c.match = false;
        if (c.message.empty()) {
          c.message = "output " + std::to_string(o) +
              " has an element type the runner cannot compare";
        }
        break;
      }
      double want = 0.0;
      load_element(exp.dtype, expected_data.data(), i, want);
      // As numpy: NaN (or inf - inf) never compares within tolerance and
      // never raises the reported maximum.
      double diff = std::fabs(got - want);
      if (diff > c.max_abs_diff) {
        c.max_abs_diff = diff;
      }
      bool same = exact
          ? (exp.dtype == ScalarType::Bool
                 ? (got != 0.0) == (want != 0.0)
                 : std::memcmp(static_cast<const uint8_t*>(data) + i * size,
                               expected_data.data() + i * size, size) == 0)
          : diff <= atol + rtol * std::fabs(want);
      if (!same) {
        ++bad_elements;
      }
    }
  }
  if (bad_elements > 0) {
    c.match = false;
    char buf[200];
    std::snprintf(
        buf,
        sizeof(buf),
        "%zu element(s) differ (integers exactly, floats beyond atol=%g "
        "rtol=%g; max abs diff %g)",
        bad_elements,
        atol,
        rtol,
        c.max_abs_diff);
    if (c.message.empty()) {
      c.message = buf;
    } else {
      c.message += "; ";
      c.message += buf;
    }
  }
  return c;
}

}  // namespace harness

#include "tensors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "sha256.h"

namespace harness {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::EValue;

namespace {

ScalarType to_scalar_type(Dtype d) {
  switch (d) {
    case Dtype::Float32:
      return ScalarType::Float;
    case Dtype::Float16:
      return ScalarType::Half;
    case Dtype::Int64:
      return ScalarType::Long;
    case Dtype::Int32:
      return ScalarType::Int;
    case Dtype::Int8:
      return ScalarType::Char;
    case Dtype::Uint8:
      return ScalarType::Byte;
    case Dtype::Bool:
      return ScalarType::Bool;
  }
  return ScalarType::Float;
}

// Protocol name of an output element type (numpy spelling beyond the input
// set, so both runners name e.g. a double output the same way).
const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return "float32";
    case ScalarType::Half:
      return "float16";
    case ScalarType::Long:
      return "int64";
    case ScalarType::Int:
      return "int32";
    case ScalarType::Char:
      return "int8";
    case ScalarType::Byte:
      return "uint8";
    case ScalarType::Bool:
      return "bool";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Short:
      return "int16";
    case ScalarType::BFloat16:
      return "bfloat16";
    default:
      return "unknown";
  }
}

// Element i of a tensor buffer as double; false for unsupported types.
bool load_element(ScalarType t, const void* data, size_t i, double& out) {
  const unsigned char* base = static_cast<const unsigned char*>(data);
  switch (t) {
    case ScalarType::Float:
      out = dtype_load(Dtype::Float32, data, i);
      return true;
    case ScalarType::Half:
      out = dtype_load(Dtype::Float16, data, i);
      return true;
    case ScalarType::Long:
      out = dtype_load(Dtype::Int64, data, i);
      return true;
    case ScalarType::Int:
      out = dtype_load(Dtype::Int32, data, i);
      return true;
    case ScalarType::Char:
      out = dtype_load(Dtype::Int8, data, i);
      return true;
    case ScalarType::Byte:
      out = dtype_load(Dtype::Uint8, data, i);
      return true;
    case ScalarType::Bool:
      out = dtype_load(Dtype::Bool, data, i);
      return true;
    case ScalarType::Double: {
      double v;
      std::memcpy(&v, base + i * sizeof(double), sizeof(v));
      out = v;
      return true;
    }
    case ScalarType::Short: {
      int16_t v;
      std::memcpy(&v, base + i * sizeof(int16_t), sizeof(v));
      out = v;
      return true;
    }
    case ScalarType::BFloat16: {
      uint16_t v;
      std::memcpy(&v, base + i * sizeof(uint16_t), sizeof(v));
      uint32_t bits = static_cast<uint32_t>(v) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      out = f;
      return true;
    }
    default:
      return false;
  }
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

executorch::extension::TensorPtr make_input(
    const TensorSpec& spec,
    std::vector<uint8_t>& data) {
  std::vector<executorch::aten::SizesType> sizes;
  sizes.reserve(spec.shape.size());
  for (int64_t d : spec.shape) {
    sizes.push_back(static_cast<executorch::aten::SizesType>(d));
  }
  return executorch::extension::make_tensor_ptr(
      std::move(sizes),
      data.empty() ? nullptr : data.data(),
      to_scalar_type(spec.dtype));
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

json::Value describe_output(const EValue& value, bool with_data) {
  json::Value out = json::Value::object();
  if (value.isTensor()) {
    const Tensor& t = value.toTensor();
    out.set("dtype", json::Value::string(scalar_type_name(t.scalar_type())));
    json::Value shape = json::Value::array();
    for (auto d : t.sizes()) {
      shape.push(json::Value::integer(d));
    }
    out.set("shape", std::move(shape));
    out.set(
        "sha256", json::Value::string(sha256_hex(t.const_data_ptr(), t.nbytes())));
    if (with_data) {
      out.set("data", json::Value::string(base64(t.const_data_ptr(), t.nbytes())));
    }
    return out;
  }
  if (value.isInt()) {
    int64_t v = value.toInt();
    out.set("dtype", json::Value::string("int"));
    out.set("shape", json::Value::array());
    out.set("sha256", json::Value::string(sha256_hex(&v, sizeof(v))));
  } else if (value.isDouble()) {
    double v = value.toDouble();
    out.set("dtype", json::Value::string("float"));
    out.set("shape", json::Value::array());
    out.set("sha256", json::Value::string(sha256_hex(&v, sizeof(v))));
  } else if (value.isBool()) {
    uint8_t v = value.toBool() ? 1 : 0;
    out.set("dtype", json::Value::string("bool"));
    out.set("shape", json::Value::array());
    out.set("sha256", json::Value::string(sha256_hex(&v, sizeof(v))));
  } else {
    out.set("dtype", json::Value::string(value.isNone() ? "none" : "other"));
    out.set("shape", json::Value::array());
    out.set("sha256", json::Value::null());
  }
  return out;
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
    const void* data = t.const_data_ptr();
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
      double want = dtype_load(exp.dtype, expected_data.data(), i);
      // As numpy: NaN (or inf - inf) never compares within tolerance and
      // never raises the reported maximum.
      double diff = std::fabs(got - want);
      if (diff > c.max_abs_diff) {
        c.max_abs_diff = diff;
      }
      if (!(diff <= atol + rtol * std::fabs(want))) {
        ++bad_elements;
      }
    }
  }
  if (bad_elements > 0) {
    c.match = false;
    char buf[160];
    std::snprintf(
        buf,
        sizeof(buf),
        "%zu element(s) outside atol=%g rtol=%g (max abs diff %g)",
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

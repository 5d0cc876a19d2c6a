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
  // A non-tensor value (harness.protocol.values): its kind, shape [] (a list:
  // [n]), its value, and the hash (and base64) of its canonical bytes.
  auto described = [with_data](const char* kind, Json shape, Json v,
                               const std::string& bytes) {
    Json out{{"dtype", kind},
             {"shape", std::move(shape)},
             {"sha256", sha256_hex(bytes.data(), bytes.size())},
             {"value", std::move(v)}};
    if (with_data) {
      out["data"] = base64(bytes.data(), bytes.size());
    }
    return out;
  };
  auto raw = [](const void* p, size_t n) {
    return std::string(static_cast<const char*>(p), n);
  };
  // JSON has no NaN or infinity: such a double is null (its bytes still say it).
  auto number = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  if (value.isInt()) {
    int64_t v = value.toInt();
    return described("int", Json::array(), v, raw(&v, sizeof(v)));
  }
  if (value.isDouble()) {
    double v = value.toDouble();
    return described("float", Json::array(), number(v), raw(&v, sizeof(v)));
  }
  if (value.isBool()) {
    uint8_t v = value.toBool() ? 1 : 0;
    return described("boolean", Json::array(), value.toBool(), raw(&v, 1));
  }
  if (value.isString()) {
    std::string_view v = value.toString();
    std::string text(v.data(), v.size());
    // A string that is not UTF-8 cannot be a JSON string: one clear error.
    try {
      (void)Json(text).dump();
    } catch (const Json::exception&) {
      throw UndescribableOutput("a string that is not UTF-8");
    }
    return described("string", Json::array(), text, text);
  }
  if (value.isNone()) {
    return described("none", Json::array(), nullptr, std::string());
  }
  if (value.isIntList()) {
    auto list = value.toIntList();
    Json items = Json::array();
    for (int64_t v : list) items.push_back(v);
    return described("int", Json::array({list.size()}), std::move(items),
                     raw(list.data(), list.size() * sizeof(int64_t)));
  }
  if (value.isDoubleList()) {
    auto list = value.toDoubleList();
    Json items = Json::array();
    for (double v : list) items.push_back(number(v));
    return described("float", Json::array({list.size()}), std::move(items),
                     raw(list.data(), list.size() * sizeof(double)));
  }
  if (value.isBoolList()) {
    auto list = value.toBoolList();
    Json items = Json::array();
    std::string bytes;
    for (bool v : list) {
      items.push_back(v);
      bytes.push_back(v ? 1 : 0);
    }
    return described("boolean", Json::array({list.size()}), std::move(items), bytes);
  }
  if (value.isTensorList()) {
    throw UndescribableOutput("a list of tensors");
  }
  if (value.isListOptionalTensor()) {
    throw UndescribableOutput("a list of optional tensors");
  }
  throw UndescribableOutput("an EValue of tag " +
                            std::to_string(static_cast<uint32_t>(value.tag)));
}

namespace {

const char* kind_of(const EValue& v) {
  if (v.isInt() || v.isIntList()) return "int";
  if (v.isDouble() || v.isDoubleList()) return "float";
  if (v.isBool() || v.isBoolList()) return "boolean";
  if (v.isString()) return "string";
  if (v.isNone()) return "none";
  if (v.isTensor()) return "tensor";
  return "other";
}

// "an int", "a string".
std::string with_article(const std::string& kind) {
  bool vowel = !kind.empty() && std::string("aeiou").find(kind[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + kind;
}

// The output's value as text for a message: a string quoted.
std::string shown(const EValue& v) {
  if (v.isString()) {
    return Json(std::string(v.toString())).dump(-1, ' ', false,
                                                Json::error_handler_t::replace);
  }
  try {
    return describe_output(v, false)["value"].dump();
  } catch (const std::exception&) {
    return kind_of(v);
  }
}

std::string shown_expected(const TensorSpec& exp, const std::vector<uint8_t>& data) {
  if (exp.kind == "string") {
    return Json(std::string(data.begin(), data.end()))
        .dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  if (exp.kind == "none") {
    return "null";
  }
  Json items = Json::array();
  size_t n = exp.shape.empty() ? 1 : static_cast<size_t>(exp.shape[0]);
  for (size_t i = 0; i < n; ++i) {
    if (exp.kind == "boolean") {
      items.push_back(data[i] != 0);
    } else if (exp.kind == "int") {
      int64_t v;
      std::memcpy(&v, data.data() + i * 8, 8);
      items.push_back(v);
    } else {
      double v;
      std::memcpy(&v, data.data() + i * 8, 8);
      items.push_back(v);
    }
  }
  return exp.shape.empty() ? items[0].dump() : items.dump();
}

// Compares a non-tensor output against its expected value file: a double
// within tolerance (as a float scalar), everything else exactly. Returns ""
// on a match, else why.
std::string compare_value(const EValue& got, const TensorSpec& exp, double atol,
                          double rtol, double& max_abs_diff) {
  std::string kind = kind_of(got);
  if (kind != exp.kind) {
    return "is " + with_article(kind) +
        (got.isTensor() ? "" : " (" + shown(got) + ")") + ", expected " +
        with_article(exp.kind);
  }
  std::vector<uint8_t> data = read_tensor_file(exp);
  std::string mismatch = "is " + shown(got) + ", expected " + shown_expected(exp, data);
  bool listed = got.isIntList() || got.isDoubleList() || got.isBoolList();
  if (listed != !exp.shape.empty()) {
    return mismatch;
  }
  if (got.isString()) {
    std::string_view v = got.toString();
    return v == std::string_view(reinterpret_cast<const char*>(data.data()), data.size())
        ? ""
        : mismatch;
  }
  if (got.isNone()) {
    return "";
  }
  size_t n = exp.shape.empty() ? 1 : static_cast<size_t>(exp.shape[0]);
  size_t have = 1;
  if (got.isIntList()) have = got.toIntList().size();
  if (got.isDoubleList()) have = got.toDoubleList().size();
  if (got.isBoolList()) have = got.toBoolList().size();
  if (have != n) {
    return mismatch;
  }
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    if (kind == "boolean") {
      bool g = got.isBool() ? got.toBool() : got.toBoolList()[i];
      bad = bad || g != (data[i] != 0);
      continue;
    }
    if (kind == "int") {
      int64_t g = got.isInt() ? got.toInt() : got.toIntList()[i];
      int64_t w;
      std::memcpy(&w, data.data() + i * 8, 8);
      double diff = std::fabs(static_cast<double>(g) - static_cast<double>(w));
      max_abs_diff = std::max(max_abs_diff, diff);
      bad = bad || g != w;
      continue;
    }
    double g = got.isDouble() ? got.toDouble() : got.toDoubleList()[i];
    double w;
    std::memcpy(&w, data.data() + i * 8, 8);
    double diff = std::fabs(g - w);
    if (diff > max_abs_diff) {
      max_abs_diff = diff;  // NaN never raises it, as for tensors
    }
    bad = bad || !(diff <= atol + rtol * std::fabs(w));
  }
  return bad ? mismatch : "";
}

}  // namespace

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
    if (!exp.kind.empty() || !outputs[o].isTensor()) {
      std::string why;
      if (exp.kind.empty()) {
        why = "is " + with_article(kind_of(outputs[o])) + " (" + shown(outputs[o]) +
            "), expected " + with_article(dtype_name(exp.dtype)) + " tensor";
      } else {
        try {
          why = compare_value(outputs[o], exp, atol, rtol, c.max_abs_diff);
        } catch (const std::exception& e) {
          why = e.what();
        }
      }
      if (!why.empty()) {
        c.match = false;
        if (c.message.empty()) {
          c.message = "output " + std::to_string(o) + " " + why;
        }
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

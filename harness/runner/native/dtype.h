// Tensor element types named in scenario files (runner-protocol.md).
#pragma once

#include <cstddef>
#include <string>

namespace harness {

enum class Dtype { Float32, Float16, Int64, Int32, Int8, Uint8, Bool };

// Parses a protocol dtype name; false if unknown.
bool parse_dtype(const std::string& name, Dtype& out);

const char* dtype_name(Dtype d);

size_t dtype_size(Dtype d);

// Element `i` of a raw little-endian buffer of type `d`, widened to double.
double dtype_load(Dtype d, const void* data, size_t i);

// IEEE half -> float.
float half_to_float(unsigned short h);

}  // namespace harness

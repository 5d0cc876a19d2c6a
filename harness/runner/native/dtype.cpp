#include "dtype.h"

#include <cstdint>
#include <cstring>

namespace harness {

bool parse_dtype(const std::string& name, Dtype& out) {
  struct Entry {
    const char* name;
    Dtype dtype;
  };
  static const Entry kEntries[] = {
      {"float32", Dtype::Float32},
      {"float16", Dtype::Float16},
      {"int64", Dtype::Int64},
      {"int32", Dtype::Int32},
      {"int8", Dtype::Int8},
      {"uint8", Dtype::Uint8},
      {"bool", Dtype::Bool},
  };
  for (const auto& e : kEntries) {
    if (name == e.name) {
      out = e.dtype;
      return true;
    }
  }
  return false;
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::Float32:
      return "float32";
    case Dtype::Float16:
      return "float16";
    case Dtype::Int64:
      return "int64";
    case Dtype::Int32:
      return "int32";
    case Dtype::Int8:
      return "int8";
    case Dtype::Uint8:
      return "uint8";
    case Dtype::Bool:
      return "bool";
  }
  return "?";
}

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::Float32:
      return 4;
    case Dtype::Float16:
      return 2;
    case Dtype::Int64:
      return 8;
    case Dtype::Int32:
      return 4;
    case Dtype::Int8:
    case Dtype::Uint8:
    case Dtype::Bool:
      return 1;
  }
  return 1;
}

float half_to_float(unsigned short h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal: normalise.
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FFu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

double dtype_load(Dtype d, const void* data, size_t i) {
  const unsigned char* p =
      static_cast<const unsigned char*>(data) + i * dtype_size(d);
  switch (d) {
    case Dtype::Float32: {
      float v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
    case Dtype::Float16: {
      unsigned short v;
      std::memcpy(&v, p, sizeof(v));
      return half_to_float(v);
    }
    case Dtype::Int64: {
      int64_t v;
      std::memcpy(&v, p, sizeof(v));
      return static_cast<double>(v);
    }
    case Dtype::Int32: {
      int32_t v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
    case Dtype::Int8:
      return static_cast<int8_t>(*p);
    case Dtype::Uint8:
      return *p;
    case Dtype::Bool:
      return *p != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

}  // namespace harness

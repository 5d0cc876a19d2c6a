// SHA-256 (FIPS 180-4) of a byte buffer, as a lowercase hex digest.
// Used to fingerprint output tensors the same way the Python runner does
// (hashlib.sha256 over the raw C-contiguous bytes).
#pragma once

#include <cstddef>
#include <string>

namespace harness {

std::string sha256_hex(const void* data, size_t size);

}  // namespace harness

#include "paths.h"

#include <climits>
#include <cstdlib>

namespace harness {

std::string canonical_path(const std::string& p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf) != nullptr) {
    return buf;
  }
  size_t slash = p.find_last_of('/');
  if (slash == std::string::npos || slash == 0) {
    return "";
  }
  if (realpath(p.substr(0, slash).c_str(), buf) != nullptr) {
    return std::string(buf) + p.substr(slash);
  }
  return "";
}

}  // namespace harness

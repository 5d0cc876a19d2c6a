// Path spelling shared by scenario loading and memory readings.
#pragma once

#include <string>

namespace harness {

// realpath() of `p` (the spelling the kernel prints in /proc/self/smaps), or
// of its directory plus the file name when the file does not exist yet (a
// cache file the run creates); empty when neither resolves.
std::string canonical_path(const std::string& p);

}  // namespace harness

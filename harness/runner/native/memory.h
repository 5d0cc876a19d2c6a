// Per-step process measurements reported in every step event:
//   rollup   - every "<Field>: <n> kB" line of /proc/self/smaps_rollup
//   mappings - for each watched path, the kB fields of /proc/self/smaps summed
//              over every mapping of that path
//   dmabuf   - /proc/self/fdinfo entries carrying exp_name (count, bytes)
//   heap     - malloc's bytes in use in its arenas, in mmap'd chunks, and its
//              arena size (mallinfo2 / bionic mallinfo); absent where the C
//              library has neither
// and the QNN trace file size (trace_offset).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "events.h"

namespace harness {

// A path named in the scenario's watch_mappings, plus the canonical spelling
// the kernel prints when the given one goes through a symlink.
struct WatchedPath {
  std::string reported;   // the key used in the event (as given, resolved)
  std::string canonical;  // realpath() at start, empty if unresolved
};

// {"rollup": {...}, "mappings": {...}, "dmabuf": {"count": n, "bytes": n},
//  "heap": {"in_use": n, "mmapped": n, "arena": n}}
Json measure_memory(const std::vector<WatchedPath>& watched);

// Size in bytes of the file named by $HARNESS_QNN_TRACE; 0 if unset/missing.
int64_t trace_offset();

}  // namespace harness

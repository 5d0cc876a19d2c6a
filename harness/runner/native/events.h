// The event stream: one "HARNESS_EVENT {json}" line per event on stdout.
#pragma once

#include <nlohmann/json.hpp>

namespace harness {

// Events and their parts. Ordered: keys are written in insertion order, the
// field order documented in runner-protocol.md.
using Json = nlohmann::ordered_json;

// Writes one event line, in the format of the Python runner's json.dumps
// (", " and ": " separators, non-finite numbers as null; bytes that are not
// UTF-8 become U+FFFD), and makes sure it has left the process before
// returning (so a later crash cannot lose it). Whatever the runtime printed to
// stdout through stdio is flushed first, so lines never interleave.
void emit_event(const Json& event);

// Writes "HARNESS_STEP <index>" to stderr before step `index` starts (-1 before
// teardown), so the harness can tell which step the runtime's own log lines
// belong to (docs/runner-protocol.md, "Step markers").
void emit_step_marker(long index);

}  // namespace harness

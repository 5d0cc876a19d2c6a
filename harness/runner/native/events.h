// The event stream: one "HARNESS_EVENT {json}" line per event on stdout.
#pragma once

#include "json.h"

namespace harness {

// Writes one event line and makes sure it has left the process before
// returning (so a later crash cannot lose it). Whatever the runtime printed to
// stdout through stdio is flushed first, so lines never interleave.
void emit_event(const json::Value& event);

// Writes "HARNESS_STEP <index>" to stderr before step `index` starts (-1 before
// teardown), so the harness can tell which step the runtime's own log lines
// belong to (docs/runner-protocol.md, "Step markers").
void emit_step_marker(long index);

}  // namespace harness

// The event stream: one "HARNESS_EVENT {json}" line per event on stdout.
#pragma once

#include "json.h"

namespace harness {

// Writes one event line and makes sure it has left the process before
// returning (so a later crash cannot lose it). Whatever the runtime printed to
// stdout through stdio is flushed first, so lines never interleave.
void emit_event(const json::Value& event);

}  // namespace harness

// Scenario option values <-> executorch::runtime::BackendOption, used by
// load_module's backend_options (LoadBackendOptionsMap) and by the
// set_option/get_option steps (the runtime's backend options channel).
#pragma once

#include <string>
#include <vector>

#include <executorch/runtime/backend/backend_options_map.h>
#include <executorch/runtime/backend/options.h>

#include "events.h"
#include "scenario.h"

namespace harness {

executorch::runtime::BackendOption make_backend_option(
    const std::string& key,
    const OptionValue& value);

// The option's current value as JSON (bool, int or string).
Json backend_option_value(const executorch::runtime::BackendOption& opt);

// Owns the option arrays a LoadBackendOptionsMap only points at. Module::load
// deep-copies the map, so this only has to live across that call.
class LoadOptions {
 public:
  // Returns false (and sets `error`) when the runtime map rejects an entry.
  bool build(const std::vector<BackendOptionSet>& sets, std::string& error);
  const executorch::runtime::LoadBackendOptionsMap& map() const {
    return map_;
  }
  bool empty() const {
    return storage_.empty();
  }

 private:
  std::vector<std::vector<executorch::runtime::BackendOption>> storage_;
  executorch::runtime::LoadBackendOptionsMap map_;
};

}  // namespace harness

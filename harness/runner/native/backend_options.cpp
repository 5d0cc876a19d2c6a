#include "backend_options.h"

#include <cstring>
#include <variant>

namespace harness {

using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::kMaxOptionKeyLength;
using executorch::runtime::kMaxOptionValueLength;
using executorch::runtime::Span;

BackendOption make_backend_option(
    const std::string& key,
    const OptionValue& value) {
  BackendOption opt;
  std::strncpy(opt.key, key.c_str(), kMaxOptionKeyLength - 1);
  opt.key[kMaxOptionKeyLength - 1] = '\0';
  switch (value.kind) {
    case OptionValue::Kind::Bool:
      opt.value = value.b;
      break;
    case OptionValue::Kind::Int:
      opt.value = static_cast<int>(value.i);
      break;
    case OptionValue::Kind::String: {
      std::array<char, kMaxOptionValueLength> arr{};
      std::strncpy(arr.data(), value.s.c_str(), kMaxOptionValueLength - 1);
      opt.value = arr;
      break;
    }
  }
  return opt;
}

Json backend_option_value(const BackendOption& opt) {
  if (const bool* b = std::get_if<bool>(&opt.value)) {
    return *b;
  }
  if (const int* i = std::get_if<int>(&opt.value)) {
    return *i;
  }
  if (const auto* arr =
          std::get_if<std::array<char, kMaxOptionValueLength>>(&opt.value)) {
    return std::string(arr->data(), strnlen(arr->data(), arr->size()));
  }
  return nullptr;
}

bool LoadOptions::build(
    const std::vector<BackendOptionSet>& sets,
    std::string& error) {
  storage_.clear();
  storage_.reserve(sets.size());  // spans below must not move
  for (const auto& set : sets) {
    std::vector<BackendOption> opts;
    for (const auto& kv : set.options) {
      opts.push_back(make_backend_option(kv.first, kv.second));
    }
    storage_.push_back(std::move(opts));
  }
  for (size_t i = 0; i < sets.size(); ++i) {
    Error err = map_.set_options(
        sets[i].backend.c_str(),
        Span<BackendOption>(storage_[i].data(), storage_[i].size()));
    if (err != Error::Ok) {
      error = "LoadBackendOptionsMap rejected the options for backend '" +
          sets[i].backend + "'";
      return false;
    }
  }
  return true;
}

}  // namespace harness

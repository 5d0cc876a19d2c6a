// Minimal JSON value, parser and serializer for the native lifecycle runner.
//
// Scenario files are small, so a straightforward recursive-descent parser
// building a value tree is enough. Objects keep their key order, so the events
// the runner writes have the field order documented in runner-protocol.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace harness {
namespace json {

class ParseError : public std::runtime_error {
 public:
  explicit ParseError(const std::string& what) : std::runtime_error(what) {}
};

class Value {
 public:
  enum class Type { Null, Bool, Int, Float, String, Array, Object };

  Value() = default;
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);  // NaN/inf serialize as null
  static Value string(std::string s);
  static Value array();
  static Value object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const {
    return type_ == Type::Int ? static_cast<double>(i_) : d_;
  }
  const std::string& as_string() const { return s_; }
  const std::vector<Value>& items() const { return arr_; }
  const std::vector<std::pair<std::string, Value>>& members() const {
    return obj_;
  }

  // Object lookup; nullptr when absent or when this is not an object.
  const Value* find(const std::string& key) const;

  // Builders. `set` replaces an existing key, keeping its position.
  Value& push(Value v);
  Value& set(const std::string& key, Value v);

  std::string dump() const;
  void dump_to(std::string& out) const;

 private:
  Type type_ = Type::Null;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
  std::vector<Value> arr_;
  std::vector<std::pair<std::string, Value>> obj_;
};

// Parses a complete JSON document; throws ParseError with line/column.
Value parse(const std::string& text);

// A human-readable name of a value's type, for validation messages.
const char* type_name(Value::Type t);

}  // namespace json
}  // namespace harness

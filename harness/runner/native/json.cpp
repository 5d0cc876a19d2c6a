#include "json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace harness {
namespace json {

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::Bool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::Int;
  v.i_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.type_ = Type::Float;
  v.d_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::String;
  v.s_ = std::move(s);
  return v;
}

Value Value::array() {
  Value v;
  v.type_ = Type::Array;
  return v;
}

Value Value::object() {
  Value v;
  v.type_ = Type::Object;
  return v;
}

const Value* Value::find(const std::string& key) const {
  if (type_ != Type::Object) {
    return nullptr;
  }
  for (const auto& kv : obj_) {
    if (kv.first == key) {
      return &kv.second;
    }
  }
  return nullptr;
}

Value& Value::push(Value v) {
  type_ = Type::Array;
  arr_.push_back(std::move(v));
  return arr_.back();
}

Value& Value::set(const std::string& key, Value v) {
  type_ = Type::Object;
  for (auto& kv : obj_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return kv.second;
    }
  }
  obj_.emplace_back(key, std::move(v));
  return obj_.back().second;
}

const char* type_name(Value::Type t) {
  switch (t) {
    case Value::Type::Null:
      return "null";
    case Value::Type::Bool:
      return "bool";
    case Value::Type::Int:
      return "integer";
    case Value::Type::Float:
      return "number";
    case Value::Type::String:
      return "string";
    case Value::Type::Array:
      return "array";
    case Value::Type::Object:
      return "object";
  }
  return "?";
}

// ---------------------------------------------------------------- serializer

namespace {

void dump_string(const std::string& s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

}  // namespace

void Value::dump_to(std::string& out) const {
  switch (type_) {
    case Type::Null:
      out += "null";
      break;
    case Type::Bool:
      out += b_ ? "true" : "false";
      break;
    case Type::Int:
      out += std::to_string(i_);
      break;
    case Type::Float: {
      if (!std::isfinite(d_)) {
        out += "null";
        break;
      }
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", d_);
      // Shortest form that round-trips, so 3.2 prints as 3.2.
      for (int prec = 1; prec <= 17; ++prec) {
        char tmp[32];
        std::snprintf(tmp, sizeof(tmp), "%.*g", prec, d_);
        if (std::strtod(tmp, nullptr) == d_) {
          std::snprintf(buf, sizeof(buf), "%s", tmp);
          break;
        }
      }
      std::string s(buf);
      // Keep it a JSON float (Python's json reads "3" back as int).
      if (s.find_first_of(".eEn") == std::string::npos) {
        s += ".0";
      }
      out += s;
      break;
    }
    case Type::String:
      dump_string(s_, out);
      break;
    case Type::Array: {
      out.push_back('[');
      bool first = true;
      for (const auto& v : arr_) {
        if (!first) {
          out += ", ";
        }
        first = false;
        v.dump_to(out);
      }
      out.push_back(']');
      break;
    }
    case Type::Object: {
      out.push_back('{');
      bool first = true;
      for (const auto& kv : obj_) {
        if (!first) {
          out += ", ";
        }
        first = false;
        dump_string(kv.first, out);
        out += ": ";
        kv.second.dump_to(out);
      }
      out.push_back('}');
      break;
    }
  }
}

std::string Value::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

// -------------------------------------------------------------------- parser

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : t_(text) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != t_.size()) {
      fail("unexpected trailing characters");
    }
    return v;
  }

 private:
  const std::string& t_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    size_t col = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw ParseError(
        what + " at line " + std::to_string(line) + " column " +
        std::to_string(col));
  }

  void skip_ws() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' ||
            t_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume_literal(const char* lit) {
    size_t n = 0;
    while (lit[n] != '\0') {
      ++n;
    }
    if (t_.compare(pos_, n, lit) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  Value parse_value(int depth) {
    if (depth > 64) {
      fail("nesting too deep");
    }
    if (pos_ >= t_.size()) {
      fail("unexpected end of input");
    }
    char c = t_[pos_];
    if (c == '{') {
      return parse_object(depth);
    }
    if (c == '[') {
      return parse_array(depth);
    }
    if (c == '"') {
      return Value::string(parse_string());
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      return parse_number();
    }
    if (consume_literal("true")) {
      return Value::boolean(true);
    }
    if (consume_literal("false")) {
      return Value::boolean(false);
    }
    if (consume_literal("null")) {
      return Value::null();
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  Value parse_object(int depth) {
    Value obj = Value::object();
    ++pos_;  // '{'
    skip_ws();
    if (pos_ < t_.size() && t_[pos_] == '}') {
      ++pos_;
      return obj;
    }
    while (true) {
      skip_ws();
      if (pos_ >= t_.size() || t_[pos_] != '"') {
        fail("expected a string key");
      }
      std::string key = parse_string();
      skip_ws();
      if (pos_ >= t_.size() || t_[pos_] != ':') {
        fail("expected ':'");
      }
      ++pos_;
      skip_ws();
      obj.set(key, parse_value(depth + 1));
      skip_ws();
      if (pos_ < t_.size() && t_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < t_.size() && t_[pos_] == '}') {
        ++pos_;
        return obj;
      }
      fail("expected ',' or '}'");
    }
  }

  Value parse_array(int depth) {
    Value arr = Value::array();
    ++pos_;  // '['
    skip_ws();
    if (pos_ < t_.size() && t_[pos_] == ']') {
      ++pos_;
      return arr;
    }
    while (true) {
      skip_ws();
      arr.push(parse_value(depth + 1));
      skip_ws();
      if (pos_ < t_.size() && t_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < t_.size() && t_[pos_] == ']') {
        ++pos_;
        return arr;
      }
      fail("expected ',' or ']'");
    }
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > t_.size()) {
      fail("truncated \\u escape");
    }
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = t_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("bad \\u escape");
      }
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= t_.size()) {
        fail("unterminated string");
      }
      char c = t_[pos_++];
      if (c == '"') {
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        fail("control character in string");
      }
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= t_.size()) {
        fail("unterminated escape");
      }
      char e = t_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned cp = parse_hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && pos_ + 6 <= t_.size() &&
              t_[pos_] == '\\' && t_[pos_ + 1] == 'u') {
            pos_ += 2;
            unsigned lo = parse_hex4();
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              fail("bad surrogate pair");
            }
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  Value parse_number() {
    size_t start = pos_;
    bool is_float = false;
    if (t_[pos_] == '-') {
      ++pos_;
    }
    auto digits = [&]() {
      size_t s = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
        ++pos_;
      }
      return pos_ > s;
    };
    if (!digits()) {
      fail("bad number");
    }
    if (pos_ < t_.size() && t_[pos_] == '.') {
      is_float = true;
      ++pos_;
      if (!digits()) {
        fail("bad number");
      }
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      is_float = true;
      ++pos_;
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-')) {
        ++pos_;
      }
      if (!digits()) {
        fail("bad number");
      }
    }
    std::string tok = t_.substr(start, pos_ - start);
    if (!is_float) {
      errno = 0;
      long long v = std::strtoll(tok.c_str(), nullptr, 10);
      if (errno == 0) {
        return Value::integer(v);
      }
    }
    return Value::number(std::strtod(tok.c_str(), nullptr));
  }
};

}  // namespace

Value parse(const std::string& text) {
  Parser p(text);
  return p.parse_document();
}

}  // namespace json
}  // namespace harness

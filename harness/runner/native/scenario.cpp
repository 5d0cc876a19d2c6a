#include "scenario.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include "events.h"
#include "paths.h"

namespace harness {

using executorch::aten::ScalarType;

namespace {

// Protocol dtype names (numpy's spelling; bfloat16 as ml_dtypes and torch
// spell it); ExecuTorch's own toString() says "Float", "Char", ... Every
// ScalarType a method's inputs and outputs may hold as plain numbers
// (complex, quantized, bits and float8 types are not among them).
struct DtypeName {
  const char* name;
  ScalarType type;
};
constexpr DtypeName kDtypeNames[] = {
    {"float32", ScalarType::Float},   {"float16", ScalarType::Half},
    {"bfloat16", ScalarType::BFloat16}, {"float64", ScalarType::Double},
    {"int64", ScalarType::Long},      {"int32", ScalarType::Int},
    {"int16", ScalarType::Short},     {"int8", ScalarType::Char},
    {"uint64", ScalarType::UInt64},   {"uint32", ScalarType::UInt32},
    {"uint16", ScalarType::UInt16},   {"uint8", ScalarType::Byte},
    {"bool", ScalarType::Bool},
};

using Type = Json::value_t;

// Type names in validation messages: "integer" and "number" (any number) are
// told apart, unlike in nlohmann::json's own type_name().
const char* type_name(Type t) {
  switch (t) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "bool";
    case Type::number_integer:
    case Type::number_unsigned:
      return "integer";
    case Type::number_float:
      return "number";
    case Type::string:
      return "string";
    case Type::array:
      return "array";
    case Type::object:
      return "object";
    default:
      return "?";
  }
}

// The value of an integer that fits in int64_t; nullopt for anything else,
// a larger integer included.
std::optional<int64_t> as_int(const Json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(INT64_MAX)
        ? std::optional<int64_t>(static_cast<int64_t>(u))
        : std::nullopt;
  }
  if (v.is_number_integer()) {
    return v.get<int64_t>();
  }
  return std::nullopt;
}

// Member `key` of object `v`; nullptr when absent or when `v` is no object.
const Json* find(const Json& v, const char* key) {
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

// Limits of executorch::runtime::BackendOption (runtime/backend/options.h):
// the key and string value are fixed char arrays including the terminator.
constexpr size_t kMaxOptionKeyChars = 63;
constexpr size_t kMaxOptionValueChars = 255;

std::string dirname_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  if (slash == 0) {
    return "/";
  }
  return path.substr(0, slash);
}

std::string resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') {
    return p;
  }
  return dir + "/" + p;
}


bool file_size(const std::string& path, int64_t& size, bool& is_regular) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return false;
  }
  size = st.st_size;
  is_regular = S_ISREG(st.st_mode);
  return true;
}

bool allowed_in_parallel(Op op) {
  switch (op) {
    case Op::LoadModule:
    case Op::LoadMethod:
    case Op::Execute:
    case Op::UnloadMethod:
    case Op::DestroyModule:
      return true;
    default:
      return false;
  }
}

class StepReader {
 public:
  // `where` names the step in errors: "step 3" or "step 3 sub-step 1".
  StepReader(
      const Json& v,
      size_t index,
      const std::string& dir,
      std::string where = "",
      bool in_parallel = false)
      : v_(v),
        index_(index),
        dir_(dir),
        where_(where.empty() ? "step " + std::to_string(index) : where),
        in_parallel_(in_parallel) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ScenarioError(where_ + ": " + what);
  }

  // Member `key` of type `type` (number_float: any number), nullptr when
  // absent or null.
  const Json* opt(const char* key, Type type) const {
    const Json* f = find(v_, key);
    if (f == nullptr || f->is_null()) {
      return nullptr;
    }
    bool ok = f->type() == type ||
        (type == Type::number_float && f->is_number());
    if (!ok) {
      fail(
          std::string("field '") + key + "' must be " + type_name(type) +
          ", got " + type_name(f->type()));
    }
    return f;
  }

  const Json& req(const char* key, Type type) const {
    const Json* f = opt(key, type);
    if (f == nullptr) {
      fail(std::string("missing field '") + key + "'");
    }
    return *f;
  }

  std::string req_string(const char* key) const {
    const auto& s = req(key, Type::string).get_ref<const std::string&>();
    if (s.empty()) {
      fail(std::string("field '") + key + "' is empty");
    }
    return s;
  }

  double number(const char* key, double dflt) const {
    const Json* f = opt(key, Type::number_float);
    if (f == nullptr) {
      return dflt;
    }
    double d = f->get<double>();
    if (!(d >= 0.0)) {
      fail(std::string("field '") + key + "' must be >= 0");
    }
    return d;
  }

  DecodeSpec decode(const std::vector<TensorSpec>& inputs,
                    const std::vector<std::pair<size_t, size_t>>& fed) const {
    DecodeSpec d;
    const Json* obj = opt("decode", Type::object);
    if (obj == nullptr) {
      return d;
    }
    d.given = true;
    for (auto it = obj->begin(); it != obj->end(); ++it) {
      const std::string& k = it.key();
      if (k != "token" && k != "past" && k != "new" && k != "caches") {
        fail("decode: unknown field '" + k + "'");
      }
    }
    auto ints = [&](const Json* v, size_t n, const std::string& where,
                    const std::string& what) {
      std::vector<size_t> out;
      if (v != nullptr && v->is_array() && v->size() == n) {
        for (const Json& e : *v) {
          std::optional<int64_t> x = as_int(e);
          if (!x || *x < 0 || *x > INT32_MAX) {
            break;
          }
          out.push_back(static_cast<size_t>(*x));
        }
      }
      if (out.size() != n) {
        fail("decode: " + where + " must be " + what);
      }
      return out;
    };
    auto tok = ints(find(*obj, "token"), 4, "'token'",
                    "[input, output, row, vocab], non-negative integers");
    d.token = tok[0];
    d.logits = tok[1];
    d.row = tok[2];
    d.vocab = tok[3];
    for (const char* k : {"past", "new"}) {
      const Json* v = find(*obj, k);
      std::optional<int64_t> x;
      if (v != nullptr) {
        x = as_int(*v);
      }
      if (!x || *x < 0 || *x > INT32_MAX) {
        fail(std::string("decode: '") + k + "' must be a non-negative integer");
      }
      (std::string(k) == "past" ? d.past : d.new_entries) = static_cast<size_t>(*x);
    }
    if (d.vocab == 0 || d.new_entries == 0) {
      fail("decode: 'vocab' and 'new' must be positive");
    }
    const Json* caches = find(*obj, "caches");
    if (caches != nullptr && !caches->is_array()) {
      fail(std::string("decode: 'caches' must be an array, got ") + type_name(caches->type()));
    }
    std::vector<size_t> used = {d.token};
    if (caches != nullptr) {
      size_t i = 0;
      for (const Json& c : *caches) {
        auto v = ints(&c, 3, "caches[" + std::to_string(i++) + "]",
                      "[input, output, axis], non-negative integers");
        d.caches.push_back({v[0], v[1], v[2]});
        used.push_back(v[0]);
      }
    }
    for (size_t in : used) {
      if (in >= inputs.size()) {
        fail("decode: input " + std::to_string(in) + " is not one of the step's " +
             std::to_string(inputs.size()) + " inputs");
      }
    }
    for (size_t a = 0; a < used.size(); ++a) {
      bool clash = false;
      for (size_t b = a + 1; b < used.size(); ++b) {
        clash = clash || used[a] == used[b];
      }
      for (const auto& p : fed) {
        clash = clash || p.first == used[a];
      }
      if (clash) {
        fail("decode: the token and cache inputs must be distinct and not fed");
      }
    }
    for (size_t i = 0; i < d.caches.size(); ++i) {
      const auto& shape = inputs[d.caches[i].input].shape;
      if (d.caches[i].axis >= shape.size()) {
        std::string dims;
        for (size_t j = 0; j < shape.size(); ++j) {
          dims += (j ? ", " : "") + std::to_string(shape[j]);
        }
        fail("decode: caches[" + std::to_string(i) + "]: axis " +
             std::to_string(d.caches[i].axis) + " is not an axis of input " +
             std::to_string(d.caches[i].input) + " (shape [" + dims + "])");
      }
    }
    auto t = inputs[d.token].dtype;
    if (t != executorch::aten::ScalarType::Int && t != executorch::aten::ScalarType::Long) {
      fail("decode: input " + std::to_string(d.token) +
           " takes the token: it must be int32 or int64, not " + dtype_name(t));
    }
    return d;
  }

  std::vector<std::pair<size_t, size_t>> feed(size_t inputs) const {
    std::vector<std::pair<size_t, size_t>> out;
    const Json* arr = opt("feed", Type::array);
    if (arr == nullptr) {
      return out;
    }
    size_t i = 0;
    for (const Json& pair : *arr) {
      std::string where = "feed[" + std::to_string(i++) + "]";
      std::optional<int64_t> in, from;
      if (pair.is_array() && pair.size() == 2) {
        in = as_int(pair[0]);
        from = as_int(pair[1]);
      }
      if (!in || !from || *in < 0 || *from < 0 || *in > INT32_MAX || *from > INT32_MAX) {
        fail(where + " must be [input index, output index], two non-negative integers");
      }
      if (static_cast<size_t>(*in) >= inputs) {
        fail(where + ": input " + std::to_string(*in) + " is not one of the step's " +
             std::to_string(inputs) + " inputs");
      }
      for (const auto& p : out) {
        if (p.first == static_cast<size_t>(*in)) {
          fail(where + ": input " + std::to_string(*in) + " is fed twice");
        }
      }
      out.emplace_back(static_cast<size_t>(*in), static_cast<size_t>(*from));
    }
    return out;
  }

  std::vector<TensorSpec> tensors(const char* key) const {
    std::vector<TensorSpec> out;
    const Json* arr = opt(key, Type::array);
    if (arr == nullptr) {
      return out;
    }
    size_t i = 0;
    for (const Json& t : *arr) {
      std::string where = std::string(key) + "[" + std::to_string(i++) + "]";
      if (!t.is_object()) {
        fail(where + " must be an object");
      }
      TensorSpec spec;
      const Json* dt = find(t, "dtype");
      if (dt == nullptr || !dt->is_string()) {
        fail(where + ": missing string field 'dtype'");
      }
      const auto& dtype = dt->get_ref<const std::string&>();
      // A method's output may be a non-tensor value (VALUE_KINDS): only
      // `expected` names one; 0 is a string's item size (any length).
      static const std::pair<const char*, size_t> kValueKinds[] = {
          {"int", 8}, {"float", 8}, {"boolean", 1}, {"string", 0}, {"none", 0}};
      const bool values = std::string(key) == "expected";
      size_t value_item = 0;
      for (const auto& k : kValueKinds) {
        if (values && dtype == k.first) {
          spec.kind = dtype;
          value_item = k.second;
        }
      }
      if (spec.kind.empty() && !parse_dtype(dtype, spec.dtype)) {
        fail(
            where + ": unknown dtype '" + dtype + "' (expected " +
            (values ? dtype_names_text(true) : dtype_names_text()) + ")");
      }
      const Json* shape = find(t, "shape");
      if (shape == nullptr || !shape->is_array()) {
        fail(where + ": missing array field 'shape'");
      }
      spec.numel = 1;
      for (const Json& d : *shape) {
        std::optional<int64_t> n = as_int(d);
        if (!n || *n < 0 || *n > INT32_MAX) {
          fail(where + ": shape entries must be non-negative integers");
        }
        spec.shape.push_back(*n);
        spec.numel *= static_cast<size_t>(*n);
      }
      const bool one_value = spec.kind == "string" || spec.kind == "none";
      if (!spec.kind.empty() &&
          (spec.shape.size() > 1 || (one_value && !spec.shape.empty()))) {
        fail(where + ": a " + spec.kind + " value has shape [] (one value)" +
             (one_value ? "" : " or [n] (a list of n)") + ", got " +
             shape->dump());
      }
      spec.nbytes = spec.kind.empty()
          ? spec.numel * executorch::runtime::elementSize(spec.dtype)
          : spec.numel * value_item;
      const Json* file = find(t, "file");
      if (file == nullptr || !file->is_string() ||
          file->get_ref<const std::string&>().empty()) {
        fail(where + ": missing string field 'file'");
      }
      spec.file = resolve(dir_, file->get<std::string>());
      int64_t size = 0;
      bool regular = false;
      if (!file_size(spec.file, size, regular) || !regular) {
        fail(where + ": tensor file not found: " + spec.file);
      }
      if (spec.kind == "string") {
        spec.nbytes = static_cast<size_t>(size);
      } else if (static_cast<size_t>(size) != spec.nbytes) {
        fail(
            where + ": tensor file " + spec.file + " has " +
            std::to_string(size) + " bytes, shape and dtype need " +
            std::to_string(spec.nbytes));
      }
      out.push_back(std::move(spec));
    }
    return out;
  }

  OptionValue option_value(const Json& v, const std::string& where) const {
    OptionValue out;
    if (v.is_boolean()) {
      out.kind = OptionValue::Kind::Bool;
      out.b = v.get<bool>();
    } else if (std::optional<int64_t> i = as_int(v)) {
      if (*i < INT_MIN || *i > INT_MAX) {
        fail(where + ": integer option value out of int range");
      }
      out.kind = OptionValue::Kind::Int;
      out.i = *i;
    } else if (v.is_string()) {
      out.s = v.get<std::string>();
      if (out.s.size() > kMaxOptionValueChars) {
        fail(where + ": string option value longer than 255 characters");
      }
      out.kind = OptionValue::Kind::String;
    } else {
      fail(where + ": option values must be bool, int or string");
    }
    return out;
  }

  void check_key(const std::string& key, const std::string& where) const {
    if (key.empty() || key.size() > kMaxOptionKeyChars) {
      fail(where + ": option key must have 1 to 63 characters");
    }
  }

  std::vector<BackendOptionSet> backend_options() const {
    std::vector<BackendOptionSet> out;
    const Json* bo = opt("backend_options", Type::object);
    if (bo == nullptr) {
      return out;
    }
    for (auto backend = bo->begin(); backend != bo->end(); ++backend) {
      const std::string& name = backend.key();
      if (!backend->is_object()) {
        fail("backend_options['" + name + "'] must be an object");
      }
      if (name.empty() || name.size() >= 64) {
        fail("backend_options: backend name must have 1 to 63 characters");
      }
      BackendOptionSet set;
      set.backend = name;
      for (auto kv = backend->begin(); kv != backend->end(); ++kv) {
        std::string where =
            "backend_options['" + name + "']['" + kv.key() + "']";
        check_key(kv.key(), where);
        set.options.emplace_back(kv.key(), option_value(kv.value(), where));
      }
      out.push_back(std::move(set));
    }
    // LoadBackendOptionsMap holds at most 8 backends.
    if (out.size() > 8) {
      fail("backend_options: at most 8 backends");
    }
    return out;
  }

  Step read() const {
    if (!v_.is_object()) {
      fail("must be an object");
    }
    Step s;
    s.index = index_;
    const std::string op = req_string("op");
    static const Op kOps[] = {
        Op::LoadModule,
        Op::LoadMethod,
        Op::Execute,
        Op::UnloadMethod,
        Op::DestroyModule,
        Op::Snapshot,
        Op::SetOption,
        Op::GetOption,
        Op::Parallel};
    bool known = false;
    for (Op o : kOps) {
      if (op == op_name(o)) {
        s.op = o;
        known = true;
      }
    }
    if (!known) {
      fail("unknown op '" + op + "'");
    }
    if (in_parallel_ && !allowed_in_parallel(s.op)) {
      fail(
          "op '" + op +
          "' cannot run in a parallel step (load_module, load_method, "
          "execute, unload_method or destroy_module only)");
    }
    switch (s.op) {
      case Op::LoadModule: {
        s.module = req_string("module");
        s.pte = resolve(dir_, req_string("pte"));
        int64_t size = 0;
        bool regular = false;
        if (!file_size(s.pte, size, regular) || !regular) {
          fail("program file not found: " + s.pte);
        }
        s.backend_options = backend_options();
        if (const Json* mode = opt("load_mode", Type::string)) {
          const auto& m = mode->get_ref<const std::string&>();
          if (m != "File" && m != "Mmap" && m != "MmapUseMlock" &&
              m != "MmapUseMlockIgnoreErrors") {
            fail("field 'load_mode' must be one of File, Mmap, MmapUseMlock, "
                 "MmapUseMlockIgnoreErrors, got '" + m + "'");
          }
          s.load_mode = m;
        }
        break;
      }
      case Op::LoadMethod:
      case Op::UnloadMethod:
        s.module = req_string("module");
        s.method = req_string("method");
        break;
      case Op::Execute:
        s.module = req_string("module");
        s.method = req_string("method");
        s.inputs = tensors("inputs");
        s.expected = tensors("expected");
        s.atol = number("atol", kDefaultAtol);
        s.rtol = number("rtol", kDefaultRtol);
        if (const Json* e = opt("emit_outputs", Type::boolean)) {
          s.emit_outputs = e->get<bool>();
        }
        if (const Json* e = opt("shared_inputs", Type::boolean)) {
          s.shared_inputs = e->get<bool>();
        }
        s.feed = feed(s.inputs.size());
        s.decode = decode(s.inputs, s.feed);
        break;
      case Op::DestroyModule:
        s.module = req_string("module");
        break;
      case Op::Snapshot:
        break;
      case Op::SetOption: {
        s.backend = req_string("backend");
        s.key = req_string("key");
        check_key(s.key, "key");
        const Json* v = find(v_, "value");
        if (v == nullptr) {
          fail("missing field 'value'");
        }
        s.value = option_value(*v, "value");
        break;
      }
      case Op::GetOption: {
        s.backend = req_string("backend");
        s.key = req_string("key");
        check_key(s.key, "key");
        const Json* t = opt("type", Type::string);
        std::string type = t == nullptr ? "int" : t->get<std::string>();
        if (type == "int") {
          s.value.kind = OptionValue::Kind::Int;
        } else if (type == "bool") {
          s.value.kind = OptionValue::Kind::Bool;
        } else if (type == "string" || type == "str") {
          s.value.kind = OptionValue::Kind::String;
        } else {
          fail("field 'type' must be int, bool or string");
        }
        break;
      }
      case Op::Parallel: {
        const Json& subs = req("steps", Type::array);
        if (subs.empty() || subs.size() > kMaxParallel) {
          fail(
              "field 'steps' must hold 1 to " + std::to_string(kMaxParallel) +
              " sub-steps");
        }
        size_t j = 0;
        for (const Json& sub : subs) {
          std::string where = where_ + " sub-step " + std::to_string(j++);
          Step child = StepReader(sub, index_, dir_, where, true).read();
          for (const Step& other : s.substeps) {
            if (other.module == child.module) {
              fail(
                  "two sub-steps on module '" + child.module +
                  "' (each sub-step of a parallel step must use a different "
                  "module)");
            }
          }
          s.substeps.push_back(std::move(child));
        }
        break;
      }
    }
    return s;
  }

 private:
  const Json& v_;
  size_t index_;
  const std::string& dir_;
  std::string where_;
  bool in_parallel_;
};

}  // namespace

bool parse_dtype(const std::string& name, ScalarType& out) {
  for (const DtypeName& d : kDtypeNames) {
    if (name == d.name) {
      out = d.type;
      return true;
    }
  }
  return false;
}

std::string dtype_names_text(bool with_values) {
  std::vector<std::string> names;
  for (const DtypeName& d : kDtypeNames) {
    names.push_back(d.name);
  }
  if (with_values) {
    for (const char* k : {"int", "float", "boolean", "string", "none"}) {
      names.push_back(k);
    }
  }
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += i == 0 ? "" : (i + 1 == names.size() ? " or " : ", ");
    text += names[i];
  }
  return text;
}

const char* dtype_name(ScalarType type) {
  for (const DtypeName& d : kDtypeNames) {
    if (d.type == type) {
      return d.name;
    }
  }
  return "unknown";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::LoadModule:
      return "load_module";
    case Op::LoadMethod:
      return "load_method";
    case Op::Execute:
      return "execute";
    case Op::UnloadMethod:
      return "unload_method";
    case Op::DestroyModule:
      return "destroy_module";
    case Op::Snapshot:
      return "snapshot";
    case Op::SetOption:
      return "set_option";
    case Op::GetOption:
      return "get_option";
    case Op::Parallel:
      return "parallel";
  }
  return "?";
}

Scenario load_scenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ScenarioError("cannot read scenario file: " + path);
  }
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    throw ScenarioError("cannot read scenario file: " + path);
  }
  Json root;
  try {
    root = Json::parse(buf.str());
  } catch (const Json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5:
    // syntax error while parsing value - ...", without the bracketed id.
    std::string what = e.what();
    size_t id_end = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && id_end != std::string::npos) {
      what.erase(0, id_end + 2);
    }
    throw ScenarioError(
        "scenario file " + path + " is not valid JSON: " + what);
  }
  if (!root.is_object()) {
    throw ScenarioError("scenario file " + path + ": top level must be an object");
  }

  Scenario sc;
  sc.path = path;
  sc.dir = dirname_of(path);

  const Json* version = find(root, "version");
  if (version != nullptr && as_int(*version) != 1) {
    throw ScenarioError("unsupported scenario version (this runner reads 1)");
  }
  const Json* name = find(root, "name");
  if (name != nullptr && !name->is_null()) {
    if (!name->is_string()) {
      throw ScenarioError("field 'name' must be a string");
    }
    sc.name = name->get<std::string>();
  }

  const Json* watch = find(root, "watch_mappings");
  if (watch != nullptr && !watch->is_null()) {
    if (!watch->is_array()) {
      throw ScenarioError("field 'watch_mappings' must be an array of paths");
    }
    for (const Json& w : *watch) {
      if (!w.is_string() || w.get_ref<const std::string&>().empty()) {
        throw ScenarioError("field 'watch_mappings' must be an array of paths");
      }
      WatchedPath wp;
      wp.reported = resolve(sc.dir, w.get<std::string>());
      wp.canonical = canonical_path(wp.reported);
      sc.watch_mappings.push_back(std::move(wp));
    }
  }
  const Json* nemesis = find(root, "qnn_nemesis");
  if (nemesis != nullptr && !nemesis->is_null()) {
    if (!nemesis->is_array()) {
      throw ScenarioError("field 'qnn_nemesis' must be an array of rules");
    }
    for (const Json& rule : *nemesis) {
      // ';' separates the rules in the interposer's variable.
      if (!rule.is_string() || rule.get_ref<const std::string&>().empty() ||
          rule.get_ref<const std::string&>().find(';') != std::string::npos) {
        throw ScenarioError("field 'qnn_nemesis' must be an array of rules (strings without ';')");
      }
      sc.qnn_nemesis.push_back(rule.get<std::string>());
    }
  }
  const Json* steps = find(root, "steps");
  if (steps == nullptr || !steps->is_array()) {
    throw ScenarioError("missing array field 'steps'");
  }
  size_t index = 0;
  for (const Json& st : *steps) {
    sc.steps.push_back(StepReader(st, index, sc.dir).read());
    ++index;
  }
  return sc;
}

}  // namespace harness

#include "scenario.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "json.h"
#include "paths.h"

namespace harness {
namespace {

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
      const json::Value& v,
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

  const json::Value* opt(const char* key, json::Value::Type type) const {
    const json::Value* f = v_.find(key);
    if (f == nullptr || f->is_null()) {
      return nullptr;
    }
    bool ok = f->type() == type ||
        (type == json::Value::Type::Float && f->is_number());
    if (!ok) {
      fail(
          std::string("field '") + key + "' must be " + json::type_name(type) +
          ", got " + json::type_name(f->type()));
    }
    return f;
  }

  const json::Value& req(const char* key, json::Value::Type type) const {
    const json::Value* f = opt(key, type);
    if (f == nullptr) {
      fail(std::string("missing field '") + key + "'");
    }
    return *f;
  }

  std::string req_string(const char* key) const {
    const std::string& s = req(key, json::Value::Type::String).as_string();
    if (s.empty()) {
      fail(std::string("field '") + key + "' is empty");
    }
    return s;
  }

  double number(const char* key, double dflt) const {
    const json::Value* f = opt(key, json::Value::Type::Float);
    if (f == nullptr) {
      return dflt;
    }
    double d = f->as_double();
    if (!(d >= 0.0)) {
      fail(std::string("field '") + key + "' must be >= 0");
    }
    return d;
  }

  std::vector<TensorSpec> tensors(const char* key) const {
    std::vector<TensorSpec> out;
    const json::Value* arr = opt(key, json::Value::Type::Array);
    if (arr == nullptr) {
      return out;
    }
    size_t i = 0;
    for (const auto& t : arr->items()) {
      std::string where = std::string(key) + "[" + std::to_string(i++) + "]";
      if (!t.is_object()) {
        fail(where + " must be an object");
      }
      TensorSpec spec;
      const json::Value* dt = t.find("dtype");
      if (dt == nullptr || !dt->is_string()) {
        fail(where + ": missing string field 'dtype'");
      }
      if (!parse_dtype(dt->as_string(), spec.dtype)) {
        fail(
            where + ": unknown dtype '" + dt->as_string() +
            "' (expected float32, float16, int64, int32, int8, uint8 or bool)");
      }
      const json::Value* shape = t.find("shape");
      if (shape == nullptr || !shape->is_array()) {
        fail(where + ": missing array field 'shape'");
      }
      spec.numel = 1;
      for (const auto& d : shape->items()) {
        if (!d.is_int() || d.as_int() < 0 || d.as_int() > INT32_MAX) {
          fail(where + ": shape entries must be non-negative integers");
        }
        spec.shape.push_back(d.as_int());
        spec.numel *= static_cast<size_t>(d.as_int());
      }
      spec.nbytes = spec.numel * dtype_size(spec.dtype);
      const json::Value* file = t.find("file");
      if (file == nullptr || !file->is_string() || file->as_string().empty()) {
        fail(where + ": missing string field 'file'");
      }
      spec.file = resolve(dir_, file->as_string());
      int64_t size = 0;
      bool regular = false;
      if (!file_size(spec.file, size, regular) || !regular) {
        fail(where + ": tensor file not found: " + spec.file);
      }
      if (static_cast<size_t>(size) != spec.nbytes) {
        fail(
            where + ": tensor file " + spec.file + " has " +
            std::to_string(size) + " bytes, shape and dtype need " +
            std::to_string(spec.nbytes));
      }
      out.push_back(std::move(spec));
    }
    return out;
  }

  OptionValue option_value(const json::Value& v, const std::string& where)
      const {
    OptionValue out;
    if (v.is_bool()) {
      out.kind = OptionValue::Kind::Bool;
      out.b = v.as_bool();
    } else if (v.is_int()) {
      if (v.as_int() < INT_MIN || v.as_int() > INT_MAX) {
        fail(where + ": integer option value out of int range");
      }
      out.kind = OptionValue::Kind::Int;
      out.i = v.as_int();
    } else if (v.is_string()) {
      if (v.as_string().size() > kMaxOptionValueChars) {
        fail(where + ": string option value longer than 255 characters");
      }
      out.kind = OptionValue::Kind::String;
      out.s = v.as_string();
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
    const json::Value* bo = opt("backend_options", json::Value::Type::Object);
    if (bo == nullptr) {
      return out;
    }
    for (const auto& backend : bo->members()) {
      if (!backend.second.is_object()) {
        fail("backend_options['" + backend.first + "'] must be an object");
      }
      if (backend.first.empty() || backend.first.size() >= 64) {
        fail("backend_options: backend name must have 1 to 63 characters");
      }
      BackendOptionSet set;
      set.backend = backend.first;
      for (const auto& kv : backend.second.members()) {
        std::string where =
            "backend_options['" + backend.first + "']['" + kv.first + "']";
        check_key(kv.first, where);
        set.options.emplace_back(kv.first, option_value(kv.second, where));
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
        if (const json::Value* e = opt("emit_outputs", json::Value::Type::Bool)) {
          s.emit_outputs = e->as_bool();
        }
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
        const json::Value* v = v_.find("value");
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
        const json::Value* t = opt("type", json::Value::Type::String);
        std::string type = t == nullptr ? "int" : t->as_string();
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
        const json::Value& subs = req("steps", json::Value::Type::Array);
        if (subs.items().empty() || subs.items().size() > kMaxParallel) {
          fail(
              "field 'steps' must hold 1 to " + std::to_string(kMaxParallel) +
              " sub-steps");
        }
        size_t j = 0;
        for (const auto& sub : subs.items()) {
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
  const json::Value& v_;
  size_t index_;
  const std::string& dir_;
  std::string where_;
  bool in_parallel_;
};

}  // namespace

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
  json::Value root;
  try {
    root = json::parse(buf.str());
  } catch (const json::ParseError& e) {
    throw ScenarioError(
        "scenario file " + path + " is not valid JSON: " + e.what());
  }
  if (!root.is_object()) {
    throw ScenarioError("scenario file " + path + ": top level must be an object");
  }

  Scenario sc;
  sc.path = path;
  sc.dir = dirname_of(path);

  const json::Value* version = root.find("version");
  if (version != nullptr &&
      !(version->is_int() && version->as_int() == 1)) {
    throw ScenarioError("unsupported scenario version (this runner reads 1)");
  }
  const json::Value* name = root.find("name");
  if (name != nullptr && !name->is_null()) {
    if (!name->is_string()) {
      throw ScenarioError("field 'name' must be a string");
    }
    sc.name = name->as_string();
  }

  const json::Value* watch = root.find("watch_mappings");
  if (watch != nullptr && !watch->is_null()) {
    if (!watch->is_array()) {
      throw ScenarioError("field 'watch_mappings' must be an array of paths");
    }
    for (const auto& w : watch->items()) {
      if (!w.is_string() || w.as_string().empty()) {
        throw ScenarioError("field 'watch_mappings' must be an array of paths");
      }
      WatchedPath wp;
      wp.reported = resolve(sc.dir, w.as_string());
      wp.canonical = canonical_path(wp.reported);
      sc.watch_mappings.push_back(std::move(wp));
    }
  }
  const json::Value* steps = root.find("steps");
  if (steps == nullptr || !steps->is_array()) {
    throw ScenarioError("missing array field 'steps'");
  }
  size_t index = 0;
  for (const auto& st : steps->items()) {
    sc.steps.push_back(StepReader(st, index, sc.dir).read());
    ++index;
  }
  return sc;
}

}  // namespace harness

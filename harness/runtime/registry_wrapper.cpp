// Runtime variants at ExecuTorch's backend registry: a library preloaded into runner processes
// (never into pytest) that sees every backend register itself and puts a wrapper in its place.
//
// libexecutorch_backend_qnn.so and libexecutorch_backend_xnnpack.so register from static
// initializers through a PLT call to executorch::runtime::register_backend(const Backend&);
// a preloaded definition of that symbol is found first, keeps the real BackendInterface* and
// registers a Wrapper under the same name through the real function (dlsym RTLD_NEXT). That
// works for the native runner's Module and for the pybindings (_C loads the same backend
// library). Built against the runtime's own headers, per release (the mangled names follow
// ET_RUNTIME_NAMESPACE), by harness/runtime/variants.py.
//
// What the wrapper does is read from the environment when the first backend call is made (so a
// fork of a pre-loaded runner can be told another variant than its server):
//
//   HARNESS_RUNTIME_VARIANT
//     stock          every call forwarded unchanged: verdicts must equal no wrapper at all.
//     fix-model      a MODEL of upstream's "Isolate cached delegates by Module lifetime" (it is
//                    not upstream's code): init copies the QNN blob with its context signature
//                    made unique per runtime allocator (methods of one Module share a context,
//                    Modules do not), counts users per handle and destroys at zero; an init
//                    that loses a race for a key destroys its candidate and takes the winner's.
//     fix-model-serialized
//                    the same, and whole executes kept apart from inits and destroys (a
//                    reader/writer lock): stronger than the fix, which only takes its mutex
//                    for the membership check inside execute.
//   HARNESS_RUNTIME_MUTANT   OPERATOR[:key=value[:key=value...]] (harness/runtime/mutants.yaml),
//                    one injected defect on top of the variant; see apply_* below.
//   HARNESS_RUNTIME_VARIANT_LOG  a file to append one line per wrapped call to (tests).
//
// The first line the wrapper writes to stderr on its first call names the variant and mutant,
// so a run's log says which runtime ran.

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>

namespace et = ::executorch::runtime;
using et::ArrayRef;
using et::Backend;
using et::BackendExecutionContext;
using et::BackendInitContext;
using et::BackendInterface;
using et::BackendOption;
using et::BackendOptionContext;
using et::CompileSpec;
using et::DelegateHandle;
using et::Error;
using et::EValue;
using et::FreeableBuffer;
using et::Result;
using et::Span;

namespace {

constexpr uint32_t kQnnCustomMagic = 0x5678ABCD;  // QnnCustomProtocol's header: magic at 0,
constexpr size_t kSignatureOffset = 4;             // the i64 context signature at 4.

enum class Variant { Stock, FixModel, FixModelSerialized };

struct Mutant {
  std::string op;  // empty: none
  std::map<std::string, std::string> args;
  long num(const char* key, long fallback) const {
    auto it = args.find(key);
    return it == args.end() ? fallback : std::strtol(it->second.c_str(), nullptr, 10);
  }
  std::string text(const char* key, const char* fallback) const {
    auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
  }
};

struct Config {
  Variant variant = Variant::Stock;
  Mutant mutant;
  std::string backend;  // the backend the mutant applies to ("" = every wrapped backend)
  FILE* log = nullptr;
};

std::once_flag config_once;
Config config;

const Config& cfg() {
  std::call_once(config_once, [] {
    const char* v = getenv("HARNESS_RUNTIME_VARIANT");
    std::string name = v ? v : "stock";
    if (name == "fix-model") config.variant = Variant::FixModel;
    else if (name == "fix-model-serialized") config.variant = Variant::FixModelSerialized;
    else if (name != "stock") {
      fprintf(stderr, "[harness registry wrapper] unknown HARNESS_RUNTIME_VARIANT '%s'\n",
              name.c_str());
      _exit(70);
    }
    const char* m = getenv("HARNESS_RUNTIME_MUTANT");
    if (m && *m) {
      std::string spec = m;
      size_t start = 0;
      bool first = true;
      while (start <= spec.size()) {
        size_t end = spec.find(':', start);
        if (end == std::string::npos) end = spec.size();
        std::string part = spec.substr(start, end - start);
        if (first) config.mutant.op = part, first = false;
        else if (!part.empty()) {
          size_t eq = part.find('=');
          config.mutant.args[part.substr(0, eq)] = eq == std::string::npos ? "" : part.substr(eq + 1);
        }
        start = end + 1;
      }
      config.backend = config.mutant.text("backend", "QnnBackend");
    }
    const char* logpath = getenv("HARNESS_RUNTIME_VARIANT_LOG");
    if (logpath && *logpath) config.log = fopen(logpath, "a");
    fprintf(stderr, "[harness registry wrapper] runtime variant %s%s%s\n", name.c_str(),
            config.mutant.op.empty() ? "" : ", mutant ", m && *m ? m : "");
  });
  return config;
}

void log_call(const char* backend, const char* what, const void* handle, long extra) {
  const Config& c = cfg();
  if (!c.log) return;
  static std::mutex lock;
  std::lock_guard<std::mutex> guard(lock);
  fprintf(c.log, "%d %s %s handle=%p %ld\n", getpid(), backend, what, handle, extra);
  fflush(c.log);
}

// ---- the fix model's bookkeeping (one set per wrapped backend) ----
struct Entry {
  DelegateHandle* handle = nullptr;
  long users = 0;
};

struct FixState {
  std::mutex lock;                                        // the maps below
  std::shared_mutex exec_gate;                            // serialized form only
  std::map<std::pair<const void*, int64_t>, int64_t> key_of;  // (allocator, signature) -> key
  std::map<int64_t, Entry> entries;                       // key -> handle and its users
  std::map<DelegateHandle*, int64_t> key_of_handle;
  int64_t next_key = 0x7000000000000000LL;               // positive, unlike any timestamp
};

// ---- mutant state ----
std::atomic<long> init_calls{0}, execute_calls{0}, destroy_calls{0};
std::mutex remembered_lock;
std::vector<char> remembered_output;       // output_cross: the last output of some execute
const EValue* remembered_owner = nullptr;   // ... and the EValue it came from
std::map<const EValue*, std::vector<char>> stale_outputs;  // output_stale: per output EValue
std::vector<char> last_output;     // output_carry: the last output any execute returned ...
std::vector<char> carried_output;  // ... kept by a destroy, for the first execute of a reload
bool carry_armed = false;          // an init came after that destroy

std::mutex leaked_lock;
std::vector<void*> leaked;  // the leaked blocks escape here: a malloc whose pointer never
                            // escapes (and its memset) is removed by the optimiser

void leak(long bytes) {
  if (bytes <= 0) return;
  void* p = malloc(static_cast<size_t>(bytes));
  if (!p) return;
  memset(p, 0x5a, static_cast<size_t>(bytes));  // touched: counted in use and in Rss
  std::lock_guard<std::mutex> guard(leaked_lock);
  leaked.push_back(p);
}

bool at_nth(const Mutant& m, long count) {
  long nth = m.num("nth", 1);
  return m.args.count("every") ? count >= nth : count == nth;
}

[[noreturn]] void crash_now() {
  raise(SIGSEGV);
  _exit(139);
}

class Wrapper final : public BackendInterface {
 public:
  Wrapper(const char* name, BackendInterface* real) : name_(name), real_(real) {}
  ~Wrapper() override = default;

  bool is_available() const override { return real_->is_available(); }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec> compile_specs) const override {
    const Config& c = cfg();
    const Mutant* m = mutant();
    long n = m ? ++init_calls : 0;
    if (m) {
      if (m->op == "init_delay") std::this_thread::sleep_for(std::chrono::milliseconds(m->num("ms", 3000)));
      if (m->op == "init_fail" && at_nth(*m, n)) {
        log_call(name_, "init-fail-injected", nullptr, n);
        return Error::Internal;
      }
      if (m->op == "init_crash" && at_nth(*m, n)) crash_now();
      if (m->op == "init_hang" && at_nth(*m, n)) for (;;) pause();
    }
    Result<DelegateHandle*> out = c.variant == Variant::Stock || !is_qnn()
        ? real_->init(context, processed, compile_specs)
        : fix_init(context, processed, compile_specs);
    if (m && out.ok()) {
      if (m->op == "init_leak") leak(m->num("bytes", 204800));
      if (m->op == "output_carry") {
        std::lock_guard<std::mutex> guard(remembered_lock);
        carry_armed = !carried_output.empty();
      }
    }
    if (m && !out.ok() && m->op == "init_swallow_error") {
      // An init that failed reported as a success with no handle: the runtime goes on with it.
      log_call(name_, "init-error-swallowed", nullptr, static_cast<long>(out.error()));
      return static_cast<DelegateHandle*>(nullptr);
    }
    if (m && out.ok() && out.get() != nullptr) {
      std::lock_guard<std::mutex> guard(live_lock_);
      live_[out.get()]++;
    }
    log_call(name_, "init", out.ok() ? out.get() : nullptr, out.ok() ? 0 : static_cast<long>(out.error()));
    return out;
  }

  Error execute(BackendExecutionContext& context, DelegateHandle* handle,
                Span<EValue*> args) const override {
    const Config& c = cfg();
    const Mutant* m = mutant();
    long n = m ? ++execute_calls : 0;
    if (m) {
      if (m->op == "execute_delay") std::this_thread::sleep_for(std::chrono::milliseconds(m->num("ms", 500)));
      if (m->op == "execute_fail" && at_nth(*m, n)) return Error::Internal;
      if (m->op == "execute_crash" && at_nth(*m, n)) crash_now();
      if (m->op == "execute_hang" && at_nth(*m, n)) for (;;) pause();
    }
    Error err;
    if (c.variant == Variant::FixModelSerialized && is_qnn()) {
      std::shared_lock<std::shared_mutex> gate(state_.exec_gate);
      err = real_->execute(context, handle, args);
    } else {
      err = real_->execute(context, handle, args);
    }
    if (m) err = mutate_execute(*m, n, err, args);
    return err;
  }

  void destroy(DelegateHandle* handle) const override {
    const Config& c = cfg();
    const Mutant* m = mutant();
    long n = m ? ++destroy_calls : 0;
    if (m) {
      if (m->op == "destroy_crash" && at_nth(*m, n)) crash_now();
      if (m->op == "destroy_skip" && at_nth(*m, n)) {
        log_call(name_, "destroy-skipped", handle, n);
        return;
      }
    }
    if (m && m->op == "destroy_other") {
      DelegateHandle* other = take_other_live(handle);
      if (other != nullptr) {
        log_call(name_, "destroy-other", other, 0);
        handle = other;  // this module's handle stays; another module's goes in its place
      }
    }
    if (m && m->op == "output_carry") {
      std::lock_guard<std::mutex> guard(remembered_lock);
      carried_output = last_output;  // what the module being destroyed returned last
    }
    bool stock = c.variant == Variant::Stock || !is_qnn();
    if (stock && m && m->op == "users_off_by_one" && !forget_live(handle)) {
      log_call(name_, "destroy-kept-by-count", handle, 0);  // one user too many: never freed
      return;
    }
    if (stock) {
      real_->destroy(handle);
      if (m && m->op == "destroy_twice" && at_nth(*m, n)) real_->destroy(handle);
    } else {
      long off_by = m && m->op == "users_off_by_one" ? 1 : 0;
      fix_destroy(handle, off_by);
      // Made twice at this boundary: the fix's own destroy runs again on the same handle, so a
      // manager methods of one Module share loses two users for one destroy.
      if (m && m->op == "destroy_twice" && at_nth(*m, n)) fix_destroy(handle, off_by);
    }
    log_call(name_, "destroy", handle, 0);
  }

  Error set_option(BackendOptionContext& context, const Span<BackendOption>& options) override {
    return real_->set_option(context, options);
  }

  Error get_option(BackendOptionContext& context, Span<BackendOption>& options) override {
    return real_->get_option(context, options);
  }

 private:
  bool is_qnn() const { return std::strcmp(name_, "QnnBackend") == 0; }

  // Live handles and their inits, kept while a mutant is on (destroy_other, users_off_by_one).
  DelegateHandle* take_other_live(DelegateHandle* mine) const {
    std::lock_guard<std::mutex> guard(live_lock_);
    for (auto& [h, users] : live_) {
      if (h != mine && users > 0) {
        live_.erase(h);
        return h;
      }
    }
    return nullptr;
  }

  // users_off_by_one on stock: a count one too many, so the destroy of the last user is held
  // back for a user that is not there (the handle is never freed); earlier destroys go on as
  // stock's do. True: forward this destroy.
  bool forget_live(DelegateHandle* h) const {
    std::lock_guard<std::mutex> guard(live_lock_);
    auto it = live_.find(h);
    if (it == live_.end()) return true;
    long left = --it->second;
    if (left <= 0) live_.erase(it);
    return left > 0;
  }

  const Mutant* mutant() const {
    const Config& c = cfg();
    if (c.mutant.op.empty()) return nullptr;
    if (!c.backend.empty() && c.backend != name_) return nullptr;
    return &c.mutant;
  }

  static ::executorch::aten::Tensor* last_tensor(Span<EValue*> args) {
    if (args.size() == 0 || args[args.size() - 1] == nullptr) return nullptr;
    EValue* v = args[args.size() - 1];
    return v->isTensor() ? &v->toTensor() : nullptr;
  }

  Error mutate_execute(const Mutant& m, long n, Error err, Span<EValue*> args) const {
    if (m.op == "execute_swallow_error" && err != Error::Ok) {
      log_call(name_, "execute-error-swallowed", nullptr, static_cast<long>(err));
      return Error::Ok;
    }
    if (m.op == "execute_leak" && err == Error::Ok) leak(m.num("bytes", 65536));
    ::executorch::aten::Tensor* out = last_tensor(args);
    if (err != Error::Ok || out == nullptr || out->nbytes() == 0) return err;
    char* bytes = static_cast<char*>(out->mutable_data_ptr());
    size_t size = out->nbytes();
    const EValue* owner = args[args.size() - 1];
    if (m.op == "output_perturb" && at_nth(m, n)) {
      // One element off by a small amount: only a reference that knows the meaning sees it.
      if (out->scalar_type() == ::executorch::aten::ScalarType::Float) {
        static_cast<float*>(out->mutable_data_ptr())[0] += static_cast<float>(m.num("delta_milli", 250)) / 1000.0f;
      } else {
        bytes[0] = static_cast<char>(bytes[0] ^ 0x10);
      }
    } else if (m.op == "output_zero" && at_nth(m, n)) {
      memset(bytes, 0, size);
    } else if (m.op == "output_cross") {
      // Outputs crossing between live modules: another module's last output of the same size
      // replaces this one's (every time one is there to take).
      std::lock_guard<std::mutex> guard(remembered_lock);
      if (remembered_owner != nullptr && remembered_owner != owner && remembered_output.size() == size) {
        std::vector<char> mine(bytes, bytes + size);
        memcpy(bytes, remembered_output.data(), size);
        remembered_output.swap(mine);
      } else {
        remembered_output.assign(bytes, bytes + size);
      }
      remembered_owner = owner;
    } else if (m.op == "output_stale") {
      // State lost within a module: from the nth execute on, each execute returns the output
      // its module's previous execute returned.
      std::lock_guard<std::mutex> guard(remembered_lock);
      auto& prev = stale_outputs[owner];
      std::vector<char> now(bytes, bytes + size);
      if (n >= m.num("nth", 2) && prev.size() == size) memcpy(bytes, prev.data(), size);
      prev.swap(now);
    } else if (m.op == "output_carry") {
      // State kept across a reload: the first execute after a destroy and a new init returns
      // the output the destroyed module returned last (a new load starting where the old one
      // ended instead of from the program's initial state).
      std::lock_guard<std::mutex> guard(remembered_lock);
      std::vector<char> now(bytes, bytes + size);
      if (carry_armed && carried_output.size() == size) {
        memcpy(bytes, carried_output.data(), size);
        carry_armed = false;
        carried_output.clear();
      }
      last_output.swap(now);
    }
    return err;
  }

  // The fix model's init: the blob's context signature made unique per runtime allocator.
  Result<DelegateHandle*> fix_init(BackendInitContext& context, FreeableBuffer* processed,
                                   ArrayRef<CompileSpec> compile_specs) const {
    std::unique_lock<std::shared_mutex> gate(state_.exec_gate, std::defer_lock);
    if (cfg().variant == Variant::FixModelSerialized) gate.lock();
    const auto* data = static_cast<const uint8_t*>(processed->data());
    size_t size = processed->size();
    uint32_t magic = 0;
    if (data == nullptr || size < kSignatureOffset + sizeof(int64_t)) {
      return real_->init(context, processed, compile_specs);
    }
    memcpy(&magic, data, sizeof magic);
    if (magic != kQnnCustomMagic) {
      // Online-prepare (DLC) blobs carry no custom header: nothing to key on, passed through.
      return real_->init(context, processed, compile_specs);
    }
    int64_t signature = 0;
    memcpy(&signature, data + kSignatureOffset, sizeof signature);
    const void* allocator = context.get_runtime_allocator();
    int64_t key;
    {
      std::lock_guard<std::mutex> guard(state_.lock);
      auto found = state_.key_of.find({allocator, signature});
      if (found == state_.key_of.end()) {
        key = state_.next_key++;
        state_.key_of[{allocator, signature}] = key;
      } else {
        key = found->second;
      }
    }
    void* copy = malloc(size);
    if (copy == nullptr) return Error::MemoryAllocationFailed;
    memcpy(copy, data, size);
    memcpy(static_cast<uint8_t*>(copy) + kSignatureOffset, &key, sizeof key);
    FreeableBuffer mine(copy, size, [](void*, void* d, size_t) { free(d); });
    Result<DelegateHandle*> out = real_->init(context, &mine, compile_specs);
    mine.Free();
    processed->Free();  // as the real init does on a miss; the copy stood in for it
    if (!out.ok()) {
      std::lock_guard<std::mutex> guard(state_.lock);
      if (state_.entries.find(key) == state_.entries.end()) state_.key_of.erase({allocator, signature});
      return out;
    }
    DelegateHandle* handle = out.get();
    DelegateHandle* loser = nullptr;
    {
      std::lock_guard<std::mutex> guard(state_.lock);
      Entry& e = state_.entries[key];
      if (e.handle != nullptr && e.handle != handle) {
        loser = handle;  // another init of this key published first: take its handle
        handle = e.handle;
      }
      e.handle = handle;
      e.users++;
      state_.key_of_handle[handle] = key;
    }
    if (loser != nullptr) real_->destroy(loser);
    return handle;
  }

  void fix_destroy(DelegateHandle* handle, long off_by) const {
    std::unique_lock<std::shared_mutex> gate(state_.exec_gate, std::defer_lock);
    if (cfg().variant == Variant::FixModelSerialized) gate.lock();
    bool last = true;
    {
      std::lock_guard<std::mutex> guard(state_.lock);
      auto k = state_.key_of_handle.find(handle);
      if (k != state_.key_of_handle.end()) {
        Entry& e = state_.entries[k->second];
        last = --e.users <= off_by;
        if (last) {
          int64_t key = k->second;
          state_.entries.erase(key);
          state_.key_of_handle.erase(k);
          for (auto it = state_.key_of.begin(); it != state_.key_of.end();) {
            it = it->second == key ? state_.key_of.erase(it) : std::next(it);
          }
        }
      }
    }
    if (last) real_->destroy(handle);
  }

  const char* name_;
  BackendInterface* real_;
  mutable FixState state_;
  mutable std::mutex live_lock_;
  mutable std::map<DelegateHandle*, long> live_;
};

using RegisterFn = Error (*)(const Backend&);

RegisterFn real_register() {
  static RegisterFn fn = reinterpret_cast<RegisterFn>(
      dlsym(RTLD_NEXT, "_ZN10executorch7runtime16register_backendERKNS0_7BackendE"));
  return fn;
}

}  // namespace

namespace executorch {
namespace runtime {

// The registry's entry point, defined here first: the real backend is kept and its wrapper
// registered under the same name.
Error register_backend(const Backend& backend) {
  RegisterFn real = real_register();
  if (real == nullptr) {
    fprintf(stderr, "[harness registry wrapper] the real register_backend was not found\n");
    return Error::Internal;
  }
  if (backend.name == nullptr || backend.backend == nullptr) return real(backend);
  // Never freed: a backend stays registered for the process's life.
  auto* wrapper = new Wrapper(backend.name, backend.backend);
  return real(Backend{backend.name, wrapper});
}

}  // namespace runtime
}  // namespace executorch

// See crash_report.h. Everything before the symbol lookup is async-signal-safe (write, open,
// read, backtrace after its first call); dladdr1 may need the loader lock, so it runs last and
// under an alarm that re-raises the original signal if it blocks.
#include "crash_report.h"

#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace harness {
namespace {

constexpr int kMaxFrames = 48;
constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
volatile sig_atomic_t crashing = 0;
volatile sig_atomic_t crash_signal = 0;
char maps[1 << 16];  // /proc/self/maps, read once per crash
size_t maps_len = 0;

// The line being written: other threads go on logging while this one reports, so each line
// goes out in one write(), never interleaved with theirs.
char line_buf[1024] = "\n";  // a leading newline ends whatever line another thread left open
size_t line_len = 1;

void put(const char* s) {
  size_t n = std::strlen(s);
  if (line_len + n > sizeof line_buf - 2) n = sizeof line_buf - 2 - line_len;
  std::memcpy(line_buf + line_len, s, n);
  line_len += n;
}

void end_line() {
  line_buf[line_len++] = '\n';
  const char* p = line_buf;
  size_t n = line_len;
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, p, n);
    if (w <= 0) break;
    p += w;
    n -= static_cast<size_t>(w);
  }
  line_len = 1;
}

void put_hex(uintptr_t v) {
  char buf[19];
  int i = 18;
  buf[i--] = 0;
  do {
    buf[i--] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && i > 1);
  buf[i--] = 'x';
  buf[i] = '0';
  put(buf + i);
}

void put_dec(long v) {
  char buf[24];
  int i = 23;
  buf[i--] = 0;
  bool neg = v < 0;
  unsigned long u = neg ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
  do {
    buf[i--] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u);
  if (neg) buf[i--] = '-';
  put(buf + i + 1);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

uintptr_t parse_hex(const char*& p) {
  uintptr_t v = 0;
  for (;; ++p) {
    char c = *p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return v;
    v = v * 16 + static_cast<uintptr_t>(d);
  }
}

void read_maps() {
  maps_len = 0;
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t r;
  while (maps_len < sizeof maps - 1 &&
         (r = ::read(fd, maps + maps_len, sizeof maps - 1 - maps_len)) > 0) {
    maps_len += static_cast<size_t>(r);
  }
  ::close(fd);
  maps[maps_len] = 0;
}

// Writes "libname.so+0xoff" for `pc` from the maps (the file offset of its mapping plus the
// distance into it), or "(not in any mapped file)".
void put_module(uintptr_t pc) {
  const char* line = maps;
  while (line < maps + maps_len && *line) {
    const char* end = std::strchr(line, '\n');
    if (!end) end = maps + maps_len;
    const char* p = line;
    uintptr_t lo = parse_hex(p);
    ++p;
    uintptr_t hi = parse_hex(p);
    if (pc >= lo && pc < hi) {
      while (p < end && *p != ' ') ++p;  // " perms"
      ++p;
      while (p < end && *p != ' ') ++p;
      ++p;
      uintptr_t off = parse_hex(p);
      const char* path = nullptr;
      for (const char* q = p; q < end; ++q) {
        if (*q == '/' || *q == '[') { path = q; break; }
      }
      if (path) {
        const char* base = path;
        for (const char* q = path; q < end; ++q) if (*q == '/') base = q + 1;
        char name[256];
        size_t n = static_cast<size_t>(end - base) < sizeof name - 1 ? static_cast<size_t>(end - base) : sizeof name - 1;
        std::memcpy(name, base, n);
        name[n] = 0;
        put(name);
        put("+");
        put_hex(pc - lo + off);
        return;
      }
      put("(anonymous memory)");
      return;
    }
    line = end + 1;
  }
  put("(not in any mapped file)");
}

void put_symbol(uintptr_t pc) {
  Dl_info info;
  void* entry = nullptr;
  if (pc == 0 || !dladdr1(reinterpret_cast<void*>(pc), &info, &entry, RTLD_DL_SYMENT) ||
      !info.dli_sname || !entry) {
    return;
  }
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  uintptr_t start = reinterpret_cast<uintptr_t>(info.dli_saddr);
  if (pc < start || (sym->st_size && pc >= start + sym->st_size)) return;  // not inside it
  put(" ");
  put(info.dli_sname);
  put("+");
  put_hex(pc - start);
}

void on_alarm(int) {
  // The symbol lookup blocked (the loader lock was held when the crash came): die of the
  // original signal with what was written so far.
  ::signal(crash_signal, SIG_DFL);
  ::raise(crash_signal);
  ::_exit(128 + crash_signal);
}

void handler(int sig, siginfo_t* info, void* context) {
  if (crashing) {  // a second crash (another thread, or inside this handler)
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  crashing = 1;
  crash_signal = sig;
  read_maps();
  put("harness-runner: fatal signal ");
  put_dec(sig);
  put(" (");
  put(signal_name(sig));
  put(")");
  if (sig != SIGABRT) {
    put(" at fault address ");
    put_hex(reinterpret_cast<uintptr_t>(info->si_addr));
    // What the address is: a store into a file's shared mapping whose page the filesystem
    // cannot back (a full disk) is a SIGBUS inside that file's mapping.
    put(" in mapping ");
    put_module(reinterpret_cast<uintptr_t>(info->si_addr));
  }
  put(" in thread ");
  put_dec(static_cast<long>(::syscall(SYS_gettid)));
  end_line();
  void* frames[kMaxFrames];
  int n = ::backtrace(frames, kMaxFrames);
  // The frames up to the signal trampoline are this handler's; the crashing pc comes from the
  // signal context (the unwinder cannot step out of a jump to address 0).
  uintptr_t pc = 0, caller = 0;
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  if (pc == 0) caller = *reinterpret_cast<const uintptr_t*>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  pc = static_cast<uintptr_t>(uc->uc_mcontext.pc);
  if (pc == 0) caller = static_cast<uintptr_t>(uc->uc_mcontext.regs[30]);
#endif
  int first = 0;
  for (int i = 0; i < n; ++i) {
    if (reinterpret_cast<uintptr_t>(frames[i]) == pc ||
        reinterpret_cast<uintptr_t>(frames[i]) == pc + 1) {
      first = i;
      break;
    }
  }
  uintptr_t pcs[kMaxFrames + 2];
  int count = 0;
  if (first == 0 && sig != SIGABRT) {  // the crashing pc is not on the unwound stack
    pcs[count++] = pc;
    if (caller) pcs[count++] = caller;
    for (int i = 2; i < n && count < kMaxFrames; ++i) {  // skip the handler and trampoline
      uintptr_t f = reinterpret_cast<uintptr_t>(frames[i]);
      if (f != pc && f != caller) pcs[count++] = f;
    }
  } else {
    for (int i = first ? first : 1; i < n && count < kMaxFrames; ++i) {
      pcs[count++] = reinterpret_cast<uintptr_t>(frames[i]);
    }
  }
  put("harness-runner: backtrace of the crashing thread:");
  end_line();
  // Module and offset first, for every frame: safe whatever state the process is in.
  for (int i = 0; i < count; ++i) {
    put("harness-runner:   #");
    put_dec(i);
    put(" pc ");
    put_hex(pcs[i]);
    put(" ");
    // Return addresses point after the call: look the caller up one byte back.
    put_module(i == 0 ? pcs[i] : pcs[i] - 1);
    end_line();
  }
  // Then the exported symbols, which may need the loader lock: bounded by an alarm.
  ::signal(SIGALRM, on_alarm);
  ::alarm(3);
  put("harness-runner: symbols of the crashing thread:");
  end_line();
  for (int i = 0; i < count; ++i) {
    put("harness-runner:   #");
    put_dec(i);
    put_symbol(i == 0 ? pcs[i] : pcs[i] - 1);
    end_line();
  }
  ::alarm(0);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_report() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  static char alt_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) ::sigaction(sig, &sa, nullptr);
}

}  // namespace harness

#ifdef HARNESS_CRASH_REPORT_PRELOAD
// Built alone as a preloaded library (harness/runner/crash_report_build.py) for a runner that
// is not this binary (the Python runner: the interpreter's faulthandler prints no C frames).
__attribute__((constructor)) static void harness_crash_report_preload() {
  harness::install_crash_report();
}
#endif

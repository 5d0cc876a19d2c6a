#include "events.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace harness {

void emit_event(const json::Value& event) {
  std::string line = "HARNESS_EVENT ";
  event.dump_to(line);
  line.push_back('\n');
  std::fflush(stdout);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return;  // stdout is gone; nothing sensible left to do
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace harness

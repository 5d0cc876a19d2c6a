#include "events.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace harness {

namespace {

void write_all(int fd, const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
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

}  // namespace

void emit_event(const json::Value& event) {
  std::string line = "HARNESS_EVENT ";
  event.dump_to(line);
  line.push_back('\n');
  std::fflush(stdout);
  write_all(STDOUT_FILENO, line);
}

void emit_step_marker(long index) {
  std::fflush(stderr);
  write_all(STDERR_FILENO, "HARNESS_STEP " + std::to_string(index) + "\n");
}

}  // namespace harness

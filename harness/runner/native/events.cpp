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

// `v` as the Python runner's json.dumps writes it (see emit_event).
void append_text(const Json& v, std::string& out) {
  const char* sep = "";
  if (v.is_object()) {
    out += '{';
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += sep;
      sep = ", ";
      append_text(Json(it.key()), out);
      out += ": ";
      append_text(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (const Json& item : v) {
      out += sep;
      sep = ", ";
      append_text(item, out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

}  // namespace

void emit_event(const Json& event) {
  std::string line = "HARNESS_EVENT ";
  append_text(event, line);
  line.push_back('\n');
  std::fflush(stdout);
  write_all(STDOUT_FILENO, line);
}

void emit_step_marker(long index) {
  std::fflush(stderr);
  write_all(STDERR_FILENO, "HARNESS_STEP " + std::to_string(index) + "\n");
}

}  // namespace harness

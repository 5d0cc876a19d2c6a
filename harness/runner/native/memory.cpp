#include "memory.h"
#include "paths.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace harness {
namespace {

// Parses "Name:   123 kB". Returns false for any other line shape (mapping
// headers, VmFlags, THPeligible, ...).
bool parse_kb_line(const char* line, std::string& name, int64_t& kb) {
  const char* colon = std::strchr(line, ':');
  if (colon == nullptr || colon == line) {
    return false;
  }
  for (const char* p = line; p < colon; ++p) {
    if (*p == ' ' || *p == '\t') {
      return false;
    }
  }
  char* end = nullptr;
  long long v = std::strtoll(colon + 1, &end, 10);
  if (end == colon + 1) {
    return false;
  }
  while (*end == ' ' || *end == '\t') {
    ++end;
  }
  if (std::strncmp(end, "kB", 2) != 0) {
    return false;
  }
  name.assign(line, colon);
  kb = v;
  return true;
}

// A smaps mapping header: "start-end perms offset dev inode [path]".
// Sets `path` (possibly empty) and returns true when the line is a header.
bool parse_mapping_header(const char* line, std::string& path) {
  unsigned long start = 0, end = 0, offset = 0, inode = 0;
  char perms[8];
  char dev[16];
  int consumed = 0;
  if (std::sscanf(
          line,
          "%lx-%lx %7s %lx %15s %lu%n",
          &start,
          &end,
          perms,
          &offset,
          dev,
          &inode,
          &consumed) < 6) {
    return false;
  }
  const char* p = line + consumed;
  while (*p == ' ' || *p == '\t') {
    ++p;
  }
  path.assign(p);
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) {
    path.pop_back();
  }
  return true;
}

Json read_rollup() {
  Json rollup = Json::object();
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) {
    return rollup;
  }
  char line[512];
  std::string name;
  int64_t kb = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (parse_kb_line(line, name, kb)) {
      rollup[name] = kb;
    }
  }
  std::fclose(f);
  return rollup;
}

// "/a/./b/../c" -> "/a/c": the absolute, lexically normalized spelling of
// `p` (relative paths are taken against the working directory). This is what
// the kernel prints in /proc/self/smaps for a path without symlinks.
std::string lexically_normal_absolute(const std::string& p) {
  std::string full = p;
  if (full.empty() || full[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return p;
    }
    full = std::string(cwd) + "/" + full;
  }
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= full.size()) {
    size_t j = full.find('/', i);
    if (j == std::string::npos) {
      j = full.size();
    }
    std::string part = full.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) {
        parts.pop_back();
      }
    } else if (!part.empty() && part != ".") {
      parts.push_back(std::move(part));
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& part : parts) {
    out += "/" + part;
  }
  return out.empty() ? "/" : out;
}


// The spellings one watched path may have in /proc/self/smaps, and the key it
// is reported under: the absolute normalized path, so a scenario that names
// "../../scratch/x.bin" (relative to its own directory) gets a key that equals
// the path the kernel prints. Resolved on every reading, because a watched
// file or its directory may only appear while the scenario runs.
struct WatchSpellings {
  std::string key;
  std::vector<std::string> names;
};

WatchSpellings spellings(const WatchedPath& w) {
  WatchSpellings s;
  s.key = lexically_normal_absolute(w.reported);
  std::string now = canonical_path(s.key);
  const std::string candidates[] = {s.key, w.reported, w.canonical, now};
  for (const std::string& name : candidates) {
    if (name.empty()) {
      continue;
    }
    bool seen = false;
    for (const auto& n : s.names) {
      seen = seen || n == name;
    }
    if (!seen) {
      s.names.push_back(name);
    }
  }
  return s;
}

Json read_mappings(const std::vector<WatchedPath>& watched) {
  // Field order: the fields every watched entry reports even when the path is
  // not mapped, then whatever else smaps prints, in the kernel's order.
  static const char* kBaseFields[] = {
      "Size",
      "Rss",
      "Pss",
      "Shared_Clean",
      "Shared_Dirty",
      "Private_Clean",
      "Private_Dirty",
      "Anonymous",
      "Swap",
      "Locked"};
  std::vector<WatchSpellings> names;
  names.reserve(watched.size());
  for (const auto& w : watched) {
    names.push_back(spellings(w));
  }
  std::vector<std::vector<std::pair<std::string, int64_t>>> sums(
      watched.size());
  for (auto& s : sums) {
    for (const char* field : kBaseFields) {
      s.emplace_back(field, 0);
    }
  }
  if (!watched.empty()) {
    FILE* f = std::fopen("/proc/self/smaps", "r");
    if (f != nullptr) {
      char line[4096];
      std::string name;
      std::string path;
      int64_t kb = 0;
      int current = -1;  // index into watched, -1 when not watched
      while (std::fgets(line, sizeof(line), f) != nullptr) {
        if (parse_kb_line(line, name, kb)) {
          if (current >= 0) {
            auto& s = sums[current];
            bool found = false;
            for (auto& kv : s) {
              if (kv.first == name) {
                kv.second += kb;
                found = true;
                break;
              }
            }
            if (!found) {
              s.emplace_back(name, kb);
            }
          }
          continue;
        }
        if (parse_mapping_header(line, path)) {
          current = -1;
          static const char kDeleted[] = " (deleted)";
          const size_t dl = sizeof(kDeleted) - 1;
          std::string undeleted = path;
          if (undeleted.size() > dl &&
              undeleted.compare(undeleted.size() - dl, dl, kDeleted) == 0) {
            undeleted.resize(undeleted.size() - dl);
          }
          for (size_t i = 0; i < names.size() && current < 0; ++i) {
            for (const auto& name : names[i].names) {
              if (path == name || undeleted == name) {
                current = static_cast<int>(i);
                break;
              }
            }
          }
        }
      }
      std::fclose(f);
    }
  }
  Json mappings = Json::object();
  for (size_t i = 0; i < watched.size(); ++i) {
    bool duplicate = false;  // two spellings of one file: the first one counted
    for (size_t k = 0; k < i; ++k) {
      duplicate = duplicate || names[k].key == names[i].key;
    }
    if (duplicate) {
      continue;
    }
    Json entry = Json::object();
    for (const auto& kv : sums[i]) {
      entry[kv.first] = kv.second;
    }
    mappings[names[i].key] = std::move(entry);
  }
  return mappings;
}

Json read_dmabuf() {
  int64_t count = 0;
  int64_t bytes = 0;
  DIR* dir = opendir("/proc/self/fdinfo");
  if (dir != nullptr) {
    struct dirent* ent;
    char path[300];
    char line[256];
    while ((ent = readdir(dir)) != nullptr) {
      if (ent->d_name[0] < '0' || ent->d_name[0] > '9') {
        continue;
      }
      std::snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", ent->d_name);
      FILE* f = std::fopen(path, "r");
      if (f == nullptr) {
        continue;
      }
      bool is_dmabuf = false;
      int64_t size = 0;
      while (std::fgets(line, sizeof(line), f) != nullptr) {
        if (std::strncmp(line, "exp_name:", 9) == 0) {
          is_dmabuf = true;
        } else if (std::strncmp(line, "size:", 5) == 0) {
          size = std::strtoll(line + 5, nullptr, 10);
        }
      }
      std::fclose(f);
      if (is_dmabuf) {
        ++count;
        bytes += size;
      }
    }
    closedir(dir);
  }
  return Json{{"count", count}, {"bytes", bytes}};
}

// The C library's own count of malloc'd bytes: what a leak of runtime objects
// grows, without the page-granular noise of Rss (a freed 5 MB chunk handed back
// to the kernel moves Rss, not this). glibc 2.33+ has mallinfo2 (size_t fields,
// every arena); bionic's mallinfo already has size_t fields. Null elsewhere.
Json read_heap() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  struct mallinfo2 mi = mallinfo2();
#elif defined(__BIONIC__)
  struct mallinfo mi = mallinfo();
#else
  return Json();
#endif
#if defined(__GLIBC__) || defined(__BIONIC__)
  // uordblks: bytes allocated from the arenas; hblkhd: bytes in mmap'd chunks
  // (allocations above the mmap threshold), kept apart because one large
  // buffer coming and going would hide a slope of the rest.
  return Json{{"in_use", static_cast<int64_t>(mi.uordblks)},
              {"mmapped", static_cast<int64_t>(mi.hblkhd)},
              {"arena", static_cast<int64_t>(mi.arena)}};
#endif
}

}  // namespace

Json measure_memory(const std::vector<WatchedPath>& watched) {
  Json memory{{"rollup", read_rollup()},
              {"mappings", read_mappings(watched)},
              {"dmabuf", read_dmabuf()}};
  Json heap = read_heap();
  if (!heap.is_null()) {
    memory["heap"] = heap;
  }
  return memory;
}

int64_t trace_offset() {
  const char* path = std::getenv("HARNESS_QNN_TRACE");
  if (path == nullptr || path[0] == '\0') {
    return 0;
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    return 0;
  }
  return static_cast<int64_t>(st.st_size);
}

}  // namespace harness

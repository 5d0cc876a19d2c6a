/*
 * A phone's DSP heap readings over the HTP simulator, for testing the harness's DSP heap path
 * where no phone exists.
 *
 * On a phone, QNN reports DSP heap usage as profile events of unit bytes
 * (DSP:before_context_created, DSP:after_context_freed, ...) when a context is created from a
 * binary with QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED and a profile handle.
 * The x86_64 simulator refuses that config (QNN_COMMON_ERROR_NOT_SUPPORTED). This library stands
 * where the device's libQnnHtp.so would (the interposer's HARNESS_QNN_REAL_HTP points here) and
 * forwards every call to the simulator library at $DSP_EMULATION_REAL_HTP, except that it:
 *  - accepts the DSP memory profiling config, and strips it before forwarding;
 *  - keeps a DSP heap: DSP_EMULATION_BASE_BYTES (default 8 MiB), plus, per live context, its
 *    binary's size and DSP_EMULATION_CONTEXT_BYTES (default 1 MiB); a freed context returns all
 *    of it but DSP_EMULATION_LEAK_BYTES (default 0: a leaking DSP, to see the check fail);
 *  - appends to the call's profile the four events a phone reports, for contexts created with
 *    the config.
 * It speaks the QNN C interface only: the interposer above it is the code phones run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef uint64_t qnn_err_t;
typedef void *qnn_handle_t;
typedef struct { uint32_t major, minor, patch; } qnn_version_t;
typedef struct {
  uint32_t backend_id;
  const char *provider_name;
  qnn_version_t core_api, backend_api;
  void *table[];
} qnn_interface_t;

enum {
  FN_CONTEXT_CREATE_FROM_BINARY = 13,
  FN_CONTEXT_FREE = 14,
  FN_PROFILE_GET_EVENTS = 30,
  FN_PROFILE_GET_EVENT_DATA = 32,
  FN_PROFILE_FREE = 34,
  FN_COUNT = 44,
  DSP_MEMORY_PROFILING = 4,
  UNIT_BYTES = 2,
  TYPE_INIT = 100,
  TYPE_DEINIT = 500,
  MAX_EVENTS = 4096,
  MAX_PROFILES = 64,
  MAX_CONTEXTS = 256
};
#define OURS (1ULL << 63)

typedef struct { uint32_t type, unit; uint64_t value; const char *identifier; } event_data_t;
typedef struct { uint32_t option; void *payload; } context_config_t;
typedef struct { uint32_t option; uint32_t pad; uint8_t flag; } htp_context_config_t;
typedef qnn_err_t (*get_providers_fn)(const qnn_interface_t ***, uint32_t *);
typedef qnn_err_t (*from_binary_fn)(qnn_handle_t, qnn_handle_t, const void **, const void *,
                                    uint64_t, qnn_handle_t *, qnn_handle_t);
typedef qnn_err_t (*context_free_fn)(qnn_handle_t, qnn_handle_t);
typedef qnn_err_t (*get_events_fn)(qnn_handle_t, const uint64_t **, uint32_t *);
typedef qnn_err_t (*event_data_fn)(uint64_t, event_data_t *);
typedef qnn_err_t (*profile_free_fn)(qnn_handle_t);

static void *real[FN_COUNT];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static event_data_t events[MAX_EVENTS];
static uint32_t event_count;
static struct { qnn_handle_t profile; uint64_t *ids; uint32_t n, cap; uint64_t *merged; } profiles[MAX_PROFILES];
static struct { qnn_handle_t context; uint64_t bytes; } contexts[MAX_CONTEXTS];
static uint64_t heap;
static int heap_started;

static uint64_t env_bytes(const char *name, uint64_t fallback) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 10) : fallback;
}

static void start_heap(void) {
  if (!heap_started) {
    heap = env_bytes("DSP_EMULATION_BASE_BYTES", 8u << 20);
    heap_started = 1;
  }
}

/* Record one event for `profile` (called with the lock held). */
static void add_event(qnn_handle_t profile, const char *name, uint32_t type) {
  if (!profile || event_count >= MAX_EVENTS) return;
  int slot = -1;
  for (int i = 0; i < MAX_PROFILES; i++)
    if (profiles[i].profile == profile) { slot = i; break; }
  for (int i = 0; slot < 0 && i < MAX_PROFILES; i++)
    if (!profiles[i].profile) { slot = i; profiles[i].profile = profile; }
  if (slot < 0) return;
  if (profiles[slot].n == profiles[slot].cap) {
    uint32_t cap = profiles[slot].cap ? 2 * profiles[slot].cap : 8;
    uint64_t *ids = realloc(profiles[slot].ids, cap * sizeof *ids);
    if (!ids) return;
    profiles[slot].ids = ids;
    profiles[slot].cap = cap;
  }
  events[event_count] = (event_data_t){type, UNIT_BYTES, heap, name};
  profiles[slot].ids[profiles[slot].n++] = OURS | event_count++;
}

static qnn_err_t e_from_binary(qnn_handle_t b, qnn_handle_t d, const void **cfg, const void *buf,
                               uint64_t size, qnn_handle_t *out, qnn_handle_t prof) {
  size_t n = 0, kept = 0;
  int profiling = 0;
  while (cfg && cfg[n]) n++;
  const void **rest = calloc(n + 1, sizeof *rest);
  if (!rest) return 1002; /* QNN_COMMON_ERROR_MEM_ALLOC */
  for (size_t i = 0; i < n; i++) {
    const context_config_t *c = cfg[i];
    const htp_context_config_t *h = c->payload;
    if (c->option == 0 && h && h->option == DSP_MEMORY_PROFILING) {
      profiling = h->flag;
      continue;
    }
    rest[kept++] = cfg[i];
  }
  pthread_mutex_lock(&lock);
  start_heap();
  if (profiling) add_event(prof, "DSP:before_context_created", TYPE_INIT);
  pthread_mutex_unlock(&lock);
  qnn_err_t rc = ((from_binary_fn)real[FN_CONTEXT_CREATE_FROM_BINARY])(b, d, n == kept ? cfg : rest,
                                                                      buf, size, out, prof);
  free(rest);
  pthread_mutex_lock(&lock);
  if (rc == 0 && out) {
    uint64_t bytes = size + env_bytes("DSP_EMULATION_CONTEXT_BYTES", 1u << 20);
    for (int i = 0; i < MAX_CONTEXTS; i++)
      if (!contexts[i].context) { contexts[i].context = *out; contexts[i].bytes = bytes; break; }
    heap += bytes;
  }
  if (profiling) add_event(prof, "DSP:after_context_created", TYPE_INIT);
  pthread_mutex_unlock(&lock);
  return rc;
}

static qnn_err_t e_context_free(qnn_handle_t h, qnn_handle_t prof) {
  pthread_mutex_lock(&lock);
  start_heap();
  add_event(prof, "DSP:before_context_freed", TYPE_DEINIT);
  pthread_mutex_unlock(&lock);
  qnn_err_t rc = ((context_free_fn)real[FN_CONTEXT_FREE])(h, prof);
  pthread_mutex_lock(&lock);
  for (int i = 0; rc == 0 && i < MAX_CONTEXTS; i++) {
    if (contexts[i].context == h) {
      uint64_t leak = env_bytes("DSP_EMULATION_LEAK_BYTES", 0);
      heap -= contexts[i].bytes > leak ? contexts[i].bytes - leak : 0;
      contexts[i].context = NULL;
      break;
    }
  }
  add_event(prof, "DSP:after_context_freed", TYPE_DEINIT);
  pthread_mutex_unlock(&lock);
  return rc;
}

static qnn_err_t e_get_events(qnn_handle_t prof, const uint64_t **ids, uint32_t *n) {
  const uint64_t *theirs = NULL;
  uint32_t count = 0;
  qnn_err_t rc = ((get_events_fn)real[FN_PROFILE_GET_EVENTS])(prof, &theirs, &count);
  if (rc != 0) return rc;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_PROFILES; i++) {
    if (profiles[i].profile != prof) continue;
    free(profiles[i].merged);
    profiles[i].merged = malloc((count + profiles[i].n) * sizeof(uint64_t));
    if (profiles[i].merged) {
      if (count) memcpy(profiles[i].merged, theirs, count * sizeof(uint64_t));
      memcpy(profiles[i].merged + count, profiles[i].ids, profiles[i].n * sizeof(uint64_t));
      theirs = profiles[i].merged;
      count += profiles[i].n;
    }
    break;
  }
  pthread_mutex_unlock(&lock);
  *ids = theirs;
  *n = count;
  return 0;
}

static qnn_err_t e_event_data(uint64_t id, event_data_t *data) {
  if (!(id & OURS)) return ((event_data_fn)real[FN_PROFILE_GET_EVENT_DATA])(id, data);
  uint64_t index = id & ~OURS;
  if (index >= event_count || !data) return 4; /* invalid argument */
  *data = events[index];
  return 0;
}

static qnn_err_t e_profile_free(qnn_handle_t prof) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_PROFILES; i++) {
    if (profiles[i].profile == prof) {
      free(profiles[i].ids);
      free(profiles[i].merged);
      memset(&profiles[i], 0, sizeof profiles[i]);
    }
  }
  pthread_mutex_unlock(&lock);
  return ((profile_free_fn)real[FN_PROFILE_FREE])(prof);
}

static void *const wrappers[FN_COUNT] = {
    [FN_CONTEXT_CREATE_FROM_BINARY] = (void *)e_from_binary,
    [FN_CONTEXT_FREE] = (void *)e_context_free,
    [FN_PROFILE_GET_EVENTS] = (void *)e_get_events,
    [FN_PROFILE_GET_EVENT_DATA] = (void *)e_event_data,
    [FN_PROFILE_FREE] = (void *)e_profile_free,
};

qnn_err_t QnnInterface_getProviders(const qnn_interface_t ***providers, uint32_t *count) {
  static get_providers_fn real_get;
  pthread_mutex_lock(&lock);
  if (!real_get) {
    const char *path = getenv("DSP_EMULATION_REAL_HTP");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) : NULL;
    real_get = lib ? (get_providers_fn)dlsym(lib, "QnnInterface_getProviders") : NULL;
    if (!real_get) {
      fprintf(stderr, "[dsp emulation] cannot load DSP_EMULATION_REAL_HTP=%s\n", path ? path : "");
      pthread_mutex_unlock(&lock);
      return 1;
    }
  }
  pthread_mutex_unlock(&lock);
  qnn_err_t rc = real_get(providers, count);
  if (rc != 0 || !providers || !*providers || !count) return rc;
  pthread_mutex_lock(&lock);
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (uint32_t p = 0; p < *count; p++) {
    qnn_interface_t *iface = (qnn_interface_t *)(*providers)[p];
    uintptr_t start = (uintptr_t)&iface->table[0] & ~(page - 1);
    if (mprotect((void *)start, (uintptr_t)&iface->table[FN_COUNT] - start,
                 PROT_READ | PROT_WRITE) != 0)
      continue;
    for (int i = 0; i < FN_COUNT; i++) {
      if (!wrappers[i] || iface->table[i] == wrappers[i]) continue;
      if (!real[i]) real[i] = iface->table[i];
      if (iface->table[i] == real[i]) iface->table[i] = wrappers[i];
    }
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

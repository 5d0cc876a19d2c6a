/*
 * libQnnHtp.so interposer: ABI bridge and QNN call tracer.
 *
 * Placed earlier on the library path than the real libQnnHtp.so, it exports
 * QnnInterface_getProviders, forwards to the real library and patches each provider's
 * function table in place:
 *
 *  - ABI bridge: executorch 1.5.1 was compiled against QAIRT 2.37 headers, where the union in
 *    QnnHtpDevice_CustomConfig_t sits at byte 4. Newer QAIRT put it at byte 8, but not every
 *    newer release: QAIRT 2.47, 2.48, 2.50 and 2.51 (core API 2.36, 2.37, 2.39, 2.40) read it
 *    at byte 8, QAIRT 2.49 (core API 2.38) at byte 4. So no threshold decides it: the harness
 *    passes the measured offset per core API version (HARNESS_QNN_UNION_AT), the interposer
 *    looks up the library's and the caller's, and deviceCreate re-lays every custom device
 *    config from the caller's offset to the library's when they differ. A library whose version
 *    is not in the table gets no guess: its deviceCreate with a custom config fails, and stderr
 *    and the trace name the version.
 *  - Tracer: log/backend/device/context create and free, shared-memory register/deregister,
 *    graph create/retrieve/execute are written
 *    as one text line each to $HARNESS_QNN_TRACE. The harness reads it as the ground truth for
 *    handle isolation and live counts.
 *  - DSP heap (phones): with HARNESS_QNN_DSP_HEAP=1 every QnnContext_createFromBinary gets the
 *    HTP context config DSP_MEMORY_PROFILING_ENABLED and, like every QnnContext_free, a
 *    profile handle (the caller's, else one of ours); the profile's byte events named "DSP:..."
 *    (DSP:before_context_created, DSP:after_context_freed, ...) are traced as `dsp_heap` lines.
 *    ExecuTorch does this only around its first and last context and only with profiling on;
 *    this reads it at every create and free. A library that answers NOT_SUPPORTED (the x86_64
 *    simulator does, with 1000) is asked again without it, once, and traced as
 *    `dsp_heap_unsupported`; the call sequence is the runtime's own from then on.
 *
 * Unloading: ExecuTorch dlcloses libQnnHtp.so when its last backend bundle goes. With
 * HARNESS_QNN_UNLOADABLE=1 (the harness measured that the real library leaves the process when
 * closed: harness/qnn/unload_probe.py) nothing here pins either library: the destructor puts
 * every patched table entry back (the table belongs to the real library, which may outlive
 * this one) and closes the real library, so a full teardown really unloads QNN and the next
 * load opens it afresh. Otherwise the interposer pins itself and the real library: a real
 * library left resident would answer the next dlopen("libQnnHtp.so") by its soname, past the
 * interposer. The trace says which: `library_open pinned=0|1` from the constructor,
 * `library_close` from the destructor of a dlclose. At process exit the destructor does
 * nothing (the runtime's static destructors may still call through the table, and the trace
 * ends with the runner): the constructor registers, with no DSO attached, an exit handler that
 * marks the exit in the environment (putenv), which a dlclose does not run.
 *
 * Environment:
 *   HARNESS_QNN_REAL_HTP      path of the real libQnnHtp.so (required)
 *   HARNESS_QNN_TRACE         trace file (optional; no tracing without it)
 *   HARNESS_QNN_ABI_BRIDGE    "1" force on (union from byte 4 to byte 8), "0" force off,
 *                             "auto"/unset: from the two variables below
 *   HARNESS_QNN_UNION_AT      where each QNN core API version's libQnnHtp.so reads the union of
 *                             QnnHtpDevice_CustomConfig_t: "2.27:4,2.36:8,..." (major.minor:byte)
 *   HARNESS_QNN_CALLER_API    the core API version the runtime was built against ("2.27"), whose
 *                             offset in that table is the one the caller writes
 *   HARNESS_QNN_DSP_HEAP      "1": read DSP heap usage through QNN profiling (see above)
 *   HARNESS_QNN_UNLOADABLE    "1": the real library can be unloaded, so pin nothing (see above)
 *   HARNESS_QNN_NEMESIS       rules holding threads at named points and failing chosen QNN
 *                             calls (the "nemesis" section below), read at the first call
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "api_names.h"

typedef uint64_t qnn_err_t; /* Qnn_ErrorHandle_t */
typedef void *qnn_handle_t;

typedef struct { uint32_t major, minor, patch; } qnn_version_t;

/* Leading part of QnnInterface_t: backendId, providerName, apiVersion, then the v2 table. */
typedef struct {
  uint32_t backend_id;
  const char *provider_name;
  qnn_version_t core_api;
  qnn_version_t backend_api;
  void *table[]; /* QNN_INTERFACE_VER_TYPE, one function pointer per entry */
} qnn_interface_t;

enum { /* indices into the function table (QnnInterface.h order) */
  FN_BACKEND_CREATE = 1,
  FN_BACKEND_FREE = 8,
  FN_CONTEXT_CREATE = 9,
  FN_CONTEXT_CREATE_FROM_BINARY = 13,
  FN_CONTEXT_FREE = 14,
  FN_GRAPH_CREATE = 15,
  FN_GRAPH_RETRIEVE = 20,
  FN_GRAPH_EXECUTE = 21,
  FN_LOG_CREATE = 25,
  FN_LOG_FREE = 27,
  FN_PROFILE_CREATE = 28,
  FN_PROFILE_GET_EVENTS = 30,
  FN_PROFILE_GET_EVENT_DATA = 32,
  FN_PROFILE_FREE = 34,
  FN_MEM_REGISTER = 35,
  FN_MEM_DEREGISTER = 36,
  FN_DEVICE_CREATE = 40,
  FN_DEVICE_FREE = 43,
  FN_LEGACY_COUNT = 44, /* the table's length before core API 2.27 wrapped nothing past here */
  FN_COUNT = 69 /* QNN_INTERFACE_VER_TYPE as executorch 1.5.1 was built (core API 2.27): 592-byte
                 * QnnInterface_t, 40 bytes of header and 69 entries */
};
/* Entries 7 and 18 (QnnBackend_validateOpConfig, QnnGraph_addNode) take a struct by value
 * (Qnn_OpConfig_t): no generic wrapper can forward them, and the runtime calls neither once a
 * program is prepared, so they are left as they are. */

typedef qnn_err_t (*get_providers_fn)(const qnn_interface_t ***, uint32_t *);
typedef qnn_err_t (*backend_create_fn)(qnn_handle_t, const void **, qnn_handle_t *);
typedef qnn_err_t (*free1_fn)(qnn_handle_t);
typedef qnn_err_t (*device_create_fn)(qnn_handle_t, const void **, qnn_handle_t *);
typedef qnn_err_t (*context_create_fn)(qnn_handle_t, qnn_handle_t, const void **, qnn_handle_t *);
typedef qnn_err_t (*context_from_binary_fn)(qnn_handle_t, qnn_handle_t, const void **,
                                            const void *, uint64_t, qnn_handle_t *, qnn_handle_t);
typedef qnn_err_t (*context_free_fn)(qnn_handle_t, qnn_handle_t);
typedef qnn_err_t (*graph_create_fn)(qnn_handle_t, const char *, const void **, qnn_handle_t *);
typedef qnn_err_t (*graph_retrieve_fn)(qnn_handle_t, const char *, qnn_handle_t *);
typedef qnn_err_t (*graph_execute_fn)(qnn_handle_t, const void *, uint32_t, void *, uint32_t,
                                      qnn_handle_t, qnn_handle_t);

typedef qnn_err_t (*mem_register_fn)(qnn_handle_t, const void *, uint32_t, qnn_handle_t *);
typedef qnn_err_t (*mem_deregister_fn)(const qnn_handle_t *, uint32_t);
typedef qnn_err_t (*log_create_fn)(void *, int, qnn_handle_t *); /* callback, max level, out */
typedef qnn_err_t (*profile_create_fn)(qnn_handle_t, uint32_t, qnn_handle_t *);
typedef qnn_err_t (*profile_events_fn)(qnn_handle_t, const uint64_t **, uint32_t *);
typedef struct { uint32_t type, unit; uint64_t value; const char *identifier; } event_data_t;
typedef qnn_err_t (*profile_event_data_fn)(uint64_t, event_data_t *);

static void *real_table[FN_COUNT]; /* every entry of the real table, wrapped or not */
/* The ABI bridge: move the union of every HTP custom device config from byte relay_from to
 * byte relay_to (0, 0: leave them); layout_unknown: the library's (or the caller's) offset is
 * not known, so no custom config can be passed on. */
static int relay_from = 0, relay_to = 0, layout_unknown = 0;
/* Where the runtime writes that union (0: not known), to read the SoC and arch it asks for. */
static int caller_union_at = 0;
static char layout_problem[768];
static pthread_mutex_t patch_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t trace_seq = 0;

static void trace(const char *fmt, ...) {
  const char *path = getenv("HARNESS_QNN_TRACE");
  if (!path || !*path) return;
  char line[512];
  uint64_t seq = __atomic_add_fetch(&trace_seq, 1, __ATOMIC_SEQ_CST);
  int n = snprintf(line, sizeof line, "%" PRIu64 " ", seq);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 2, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, (size_t)n); /* one write: lines never interleave */
  (void)ignored;
  close(fd);
}

#define H(p) ((uintptr_t)(p))
#define OUT(pp) ((pp) ? H(*(pp)) : 0)

/* ---- nemesis: held threads and injected failures (HARNESS_QNN_NEMESIS) ------------------
 *
 * Rules, separated by ';' (harness/protocol/nemesis.py writes and checks them):
 *   fail [ACTOR:]API#N[+] rc=CODE
 *       the N-th call of API (by threads named ACTOR, or by any thread) returns CODE without
 *       calling the real function; with '+', that call and every later one.
 *   hold enter|leave [ACTOR:]API#N until enter|leave [ACTOR:]API#N [timeout_ms=T]
 *       the thread reaching the first point (entering the call, or leaving it after the real
 *       function returned) waits there until some thread has reached the second point, at most
 *       T ms (default 10000); then it goes on and the trace says `nemesis_timeout`, and
 *       `nemesis_late` if the second point comes after all (the runtime held it back itself).
 * API is a QNN function name (QnnContext_createFromBinary, ...) or a runner step point
 * (step.load_method, ...: the runner calls harness_qnn_step around each step it runs). An
 * actor is a thread's name (pthread_setname_np): the runner names each thread after the module
 * of the step it runs. Occurrences count per process from the first call after start-up or
 * fork, per API and per (API, actor). Every held, released, timed-out and injected point is
 * one trace line. */

enum { API_GET_PROVIDERS = FN_COUNT, API_STEP_FIRST,
       API_DLOPEN_FIRST = API_STEP_FIRST + HARNESS_STEP_COUNT,
       API_SYSTEM_FIRST = API_DLOPEN_FIRST + HARNESS_DLOPEN_COUNT, SYSTEM_COUNT = 4,
       API_SYSTEM_PROVIDERS = API_SYSTEM_FIRST + HARNESS_SYSTEM_COUNT,
       API_COUNT = API_SYSTEM_PROVIDERS + HARNESS_SYSTEM_PROVIDERS_COUNT };
_Static_assert(HARNESS_QNN_TABLE_COUNT == FN_COUNT,
               "QNN_TABLE (harness/protocol/nemesis.py) must name the FN_COUNT table entries");
_Static_assert(HARNESS_SYSTEM_PROVIDERS_COUNT == 1,
               "libQnnSystem.so's entry point (QnnSystemInterface_getProviders) is one name");
_Static_assert(HARNESS_SYSTEM_COUNT == SYSTEM_COUNT,
               "QNN_SYSTEM_TABLE (harness/protocol/nemesis.py) must name the entries sys_N wrap");

/* Every entry of the function table by its QNN function's name (QnnInterface.h order), then
 * QnnInterface_getProviders, the runner's step points, the libraries the runtime dlopens
 * (HARNESS_DLOPEN_SHIM build, below), libQnnSystem.so's first entries (the dlopen shim
 * patches them) and its entry point QnnSystemInterface_getProviders (which the runtime finds
 * by dlsym on the handle the shim gave it, the shim's own), so a rule may name any of them and the trace names every call (`call
 * api=...`). One list with the rules' checker: api_names.h is generated from
 * harness/protocol/nemesis.py (`python -m harness.qnn.api_names`). */
static const char *const api_names[API_COUNT] = {HARNESS_API_NAMES};

enum { NEMESIS_MAX_RULES = 32, NEMESIS_MAX_ACTORS = 32, ACTOR_LEN = 16 };
enum { PHASE_ENTER = 0, PHASE_LEAVE = 1 };

typedef struct {
  int api;                /* index into api_names */
  char actor[ACTOR_LEN];  /* "" = any thread */
  uint64_t n;             /* occurrence, from 1 */
  int from_on;            /* fail: '+' */
  int phase;              /* hold points */
} nemesis_point_t;

typedef struct {
  int hold; /* 1 hold, 0 fail */
  nemesis_point_t at, until;
  uint64_t rc;
  long timeout_ms;
  int fired, until_reached, timed_out; /* timed_out: the hold gave up before `until` came */
} nemesis_rule_t;

static pthread_mutex_t nemesis_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nemesis_cond = PTHREAD_COND_INITIALIZER;
static pid_t nemesis_pid = 0; /* the process the state below belongs to (a fork starts over) */
static nemesis_rule_t rules[NEMESIS_MAX_RULES];
static int rule_count = 0;
static uint64_t calls_any[API_COUNT];
static struct { char actor[ACTOR_LEN]; uint64_t calls[API_COUNT]; } actors[NEMESIS_MAX_ACTORS];
static int actor_count = 0;

static int api_index(const char *name, size_t len) {
  for (int i = 0; i < API_COUNT; i++)
    if (api_names[i] && strlen(api_names[i]) == len && strncmp(api_names[i], name, len) == 0)
      return i;
  return -1;
}

/* "[ACTOR:]API#N[+]" at *s; advances *s past it; 0 on success. */
static int parse_call(const char **s, nemesis_point_t *p, int allow_plus) {
  const char *q = *s;
  while (*q == ' ') q++;
  const char *hash = strchr(q, '#');
  if (!hash) return -1;
  const char *colon = memchr(q, ':', (size_t)(hash - q));
  memset(p, 0, sizeof *p);
  if (colon) {
    size_t alen = (size_t)(colon - q);
    if (alen == 0 || alen >= ACTOR_LEN) return -1;
    memcpy(p->actor, q, alen);
    q = colon + 1;
  }
  p->api = api_index(q, (size_t)(hash - q));
  if (p->api < 0) return -1;
  char *end;
  unsigned long long n = strtoull(hash + 1, &end, 10);
  if (end == hash + 1 || n == 0) return -1;
  p->n = n;
  if (*end == '+') {
    if (!allow_plus) return -1;
    p->from_on = 1;
    end++;
  }
  *s = end;
  return 0;
}

static int parse_phase(const char **s, int *phase) {
  const char *q = *s;
  while (*q == ' ') q++;
  if (strncmp(q, "enter ", 6) == 0) *phase = PHASE_ENTER, q += 6;
  else if (strncmp(q, "leave ", 6) == 0) *phase = PHASE_LEAVE, q += 6;
  else return -1;
  *s = q;
  return 0;
}

static int parse_rule(const char *text, nemesis_rule_t *r) {
  memset(r, 0, sizeof *r);
  r->timeout_ms = 10000;
  const char *s = text;
  while (*s == ' ') s++;
  if (strncmp(s, "fail ", 5) == 0) {
    s += 5;
    if (parse_call(&s, &r->at, 1) != 0) return -1;
    while (*s == ' ') s++;
    if (strncmp(s, "rc=", 3) != 0) return -1;
    char *end;
    r->rc = strtoull(s + 3, &end, 10);
    if (end == s + 3 || r->rc == 0) return -1;
    s = end;
  } else if (strncmp(s, "hold ", 5) == 0) {
    r->hold = 1;
    s += 5;
    if (parse_phase(&s, &r->at.phase) != 0) return -1;
    int phase = r->at.phase;
    if (parse_call(&s, &r->at, 0) != 0) return -1;
    r->at.phase = phase;
    while (*s == ' ') s++;
    if (strncmp(s, "until ", 6) != 0) return -1;
    s += 6;
    if (parse_phase(&s, &phase) != 0) return -1;
    if (parse_call(&s, &r->until, 0) != 0) return -1;
    r->until.phase = phase;
    while (*s == ' ') s++;
    if (strncmp(s, "timeout_ms=", 11) == 0) {
      char *end;
      r->timeout_ms = strtol(s + 11, &end, 10);
      if (end == s + 11 || r->timeout_ms <= 0) return -1;
      s = end;
    }
  } else {
    return -1;
  }
  while (*s == ' ') s++;
  return *s ? -1 : 0;
}

/* Under nemesis_lock: start this process's state (first point after start-up or a fork). */
static void nemesis_init_locked(void) {
  pid_t pid = getpid();
  if (nemesis_pid == pid) return;
  nemesis_pid = pid;
  rule_count = actor_count = 0;
  memset(calls_any, 0, sizeof calls_any);
  /* A fork copies a locked mutex's state, never a waiter: a fresh condition variable. */
  pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
  nemesis_cond = fresh;
  /* The scenario's rules, then a mutant's (harness/runtime/mutants.yaml, boundary qnn: rules
   * every run of a `harness mutate` pass gets, numbered after the scenario's). */
  const char *spec = getenv("HARNESS_QNN_NEMESIS");
  const char *mutant = getenv("HARNESS_QNN_MUTANT");
  if ((!spec || !*spec) && (!mutant || !*mutant)) return;
  size_t len = (spec ? strlen(spec) : 0) + (mutant ? strlen(mutant) : 0) + 2;
  char *copy = malloc(len);
  if (!copy) return;
  snprintf(copy, len, "%s;%s", spec ? spec : "", mutant ? mutant : "");
  char *save = NULL;
  for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    if (rule_count == NEMESIS_MAX_RULES || parse_rule(tok, &rules[rule_count]) != 0) {
#ifndef HARNESS_DLOPEN_SHIM /* the interposer reads the same rules and says it once */
      fprintf(stderr, "[harness interposer] HARNESS_QNN_NEMESIS: cannot read rule '%s'\n", tok);
      trace("nemesis_bad rule=%d", rule_count);
#endif
      continue;
    }
    rule_count++;
  }
  free(copy);
#ifndef HARNESS_DLOPEN_SHIM
  trace("nemesis_rules count=%d", rule_count);
#endif
}

static uint64_t *actor_calls(const char *actor) {
  for (int i = 0; i < actor_count; i++)
    if (strcmp(actors[i].actor, actor) == 0) return actors[i].calls;
  if (actor_count == NEMESIS_MAX_ACTORS) return NULL;
  memset(&actors[actor_count], 0, sizeof actors[actor_count]);
  snprintf(actors[actor_count].actor, ACTOR_LEN, "%s", actor);
  return actors[actor_count++].calls;
}

static int point_matches(const nemesis_point_t *p, int api, int phase, const char *actor,
                         uint64_t n_any, uint64_t n_actor) {
  if (p->api != api || p->phase != phase) return 0;
  if (p->actor[0] && strcmp(p->actor, actor) != 0) return 0;
  uint64_t n = p->actor[0] ? n_actor : n_any;
  return p->from_on ? n >= p->n : n == p->n;
}

static void this_actor(char *out) {
  out[0] = 0;
  if (pthread_getname_np(pthread_self(), out, ACTOR_LEN) != 0) out[0] = 0;
  for (char *c = out; *c; c++)
    if (*c == ' ' || *c == '=' || *c == ';' || *c == ':' || *c == '#') *c = '_';
}

/* Per thread: the occurrences of the call it is inside (enter and leave name the same one). */
static __thread uint64_t inside_any[API_COUNT], inside_actor[API_COUNT];

/* A thread reached a point. Marks the holds it releases, then waits at every hold it is the
 * held side of. Returns 1 when a fail rule says this call must fail (enter only; *rc set). */
static int nemesis_point(int api, int phase, uint64_t *rc) {
  const char *spec = getenv("HARNESS_QNN_NEMESIS");
  const char *mutant = getenv("HARNESS_QNN_MUTANT");
  if ((!spec || !*spec) && (!mutant || !*mutant) && nemesis_pid == getpid()) return 0;
  char actor[ACTOR_LEN];
  this_actor(actor);
  int injected = 0;
  pthread_mutex_lock(&nemesis_lock);
  nemesis_init_locked();
  if (rule_count == 0) {
    pthread_mutex_unlock(&nemesis_lock);
    return 0;
  }
  uint64_t n_any, n_actor;
  if (phase == PHASE_ENTER) {
    uint64_t *mine = actor_calls(actor);
    n_any = ++calls_any[api];
    n_actor = mine ? ++mine[api] : 0;
    inside_any[api] = n_any, inside_actor[api] = n_actor;
  } else {
    n_any = inside_any[api], n_actor = inside_actor[api];
  }
  int released = 0;
  for (int i = 0; i < rule_count; i++) {
    nemesis_rule_t *r = &rules[i];
    if (r->hold && !r->until_reached &&
        point_matches(&r->until, api, phase, actor, n_any, n_actor)) {
      r->until_reached = 1;
      released = 1;
      /* The point came only after the held thread gave up: the runtime itself kept it from
       * coming while that thread waited (it orders these calls), so the rendezvous could
       * not happen, rather than a point that is never reached. */
      if (r->timed_out)
        trace("nemesis_late rule=%d point=%s api=%s actor=%s", i,
              phase == PHASE_ENTER ? "enter" : "leave", api_names[api], actor);
    }
  }
  if (released) pthread_cond_broadcast(&nemesis_cond);
  for (int i = 0; i < rule_count; i++) {
    nemesis_rule_t *r = &rules[i];
    if (!r->hold || r->fired || !point_matches(&r->at, api, phase, actor, n_any, n_actor))
      continue;
    r->fired = 1;
    const char *ph = phase == PHASE_ENTER ? "enter" : "leave";
    trace("nemesis_hold rule=%d point=%s api=%s actor=%s n=%" PRIu64, i, ph, api_names[api],
          actor, r->at.actor[0] ? n_actor : n_any);
    struct timespec t0, deadline;
    clock_gettime(CLOCK_REALTIME, &t0);
    deadline = t0;
    deadline.tv_sec += r->timeout_ms / 1000;
    deadline.tv_nsec += (r->timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    int timed_out = 0;
    while (!r->until_reached && !timed_out)
      timed_out = pthread_cond_timedwait(&nemesis_cond, &nemesis_lock, &deadline) == ETIMEDOUT;
    struct timespec t1;
    clock_gettime(CLOCK_REALTIME, &t1);
    long waited = (t1.tv_sec - t0.tv_sec) * 1000L + (t1.tv_nsec - t0.tv_nsec) / 1000000L;
    if (r->until_reached) {
      trace("nemesis_release rule=%d waited_ms=%ld", i, waited);
    } else {
      fprintf(stderr, "[harness interposer] rendezvous timed out: rule %d held %s %s on thread "
              "'%s' for %ld ms and the point it waits for was never reached\n", i, ph,
              api_names[api], actor, waited);
      trace("nemesis_timeout rule=%d waited_ms=%ld", i, waited);
      r->timed_out = 1;
    }
  }
  for (int i = 0; phase == PHASE_ENTER && !injected && i < rule_count; i++) {
    nemesis_rule_t *r = &rules[i];
    if (r->hold || !point_matches(&r->at, api, PHASE_ENTER, actor, n_any, n_actor)) continue;
    r->fired = 1;
    *rc = r->rc;
    injected = 1;
    trace("nemesis_fail rule=%d api=%s actor=%s n=%" PRIu64 " rc=%" PRIu64, i, api_names[api],
          actor, r->at.actor[0] ? n_actor : n_any, r->rc);
  }
  pthread_mutex_unlock(&nemesis_lock);
  return injected;
}

#define ENTER(fn, rc) nemesis_point((fn), PHASE_ENTER, &(rc))
#define LEAVE(fn) do { uint64_t ignored_rc_; nemesis_point((fn), PHASE_LEAVE, &ignored_rc_); } while (0)

#ifdef HARNESS_DLOPEN_SHIM
/* ---- the dlopen shim (built from this file with -DHARNESS_DLOPEN_SHIM, preloaded) ----------
 *
 * The runtime opens each QNN library itself (QnnImplementation::Load, QnnSysImplementation::Load,
 * SharedBuffer::Load: pal::dynamic_loading::DlOpen, ::dlopen). A library preloaded into the
 * runner defines dlopen, so those calls reach it first: a call whose file's base name is one
 * of the dlopen points above is traced (`dlopen lib=NAME rc=0|1`) and a `fail
 * dlopen.NAME#N rc=CODE` rule makes it fail. The failure is a real one: the call is made on a
 * path that does not exist, so dlerror() says why as the loader does. Everything else passes
 * through. (libfiu cannot do this: it has no dlopen point, and the loader opens files with
 * glibc's internal open, which no preload sees.) */
static int dlopen_api(const char *file) {
  if (!file) return -1;
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char name[64];
  if (snprintf(name, sizeof name, "dlopen.%s", base) >= (int)sizeof name) return -1;
  int api = api_index(name, strlen(name));
  return api >= API_DLOPEN_FIRST ? api : -1;
}

/* Per thread and library: 1 when its last counted call was a probe (RTLD_NOLOAD) that found
 * nothing, 2 when that probe's failure was injected. */
static __thread int probe_failed[API_COUNT];

/* Whether the call at `caller` is the runtime's: made from an ExecuTorch shared library (a
 * file whose name holds "executorch" and ".so": libexecutorch_backend_qnn.so,
 * libqnn_executorch_backend.so), not the runner's own dlopen of the interposer for its step
 * points, made only when a scenario has rules (it would shift the occurrences against a run
 * without; on a device the runner is named executorch_hil_runner), nor the interposer's of
 * the real library. */
static int from_runtime(void *caller) {
  Dl_info info;
  if (!dladdr(caller, &info) || !info.dli_fname) return 0;
  const char *base = strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  return strstr(base, "executorch") != NULL && strstr(base, ".so") != NULL;
}

/* libQnnSystem.so's calls: QnnSystemInterface_t is {u32 backendId; const char *providerName;
 * Qnn_Version_t systemApiVersion; table}, the table at byte 32 (checked against QAIRT 2.51's
 * library); its first entries, systemContextCreate, GetBinaryInfo, GetMetadata and Free
 * (QnnSystemInterface.h order), take pointers, handles and sizes. When the runtime opens the
 * library, the shim asks it for its providers and puts traced wrappers (`call api=NAME rc=N`,
 * open to rules like the interposer's) in those entries; the table goes with the library. */
typedef qnn_err_t (*system_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
static void *system_real[SYSTEM_COUNT];
#define SYSTEM_WRAPPER(i)                                                                    \
  static qnn_err_t sys_##i(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e,       \
                           uint64_t f) {                                                     \
    qnn_err_t rc = 0;                                                                        \
    if (!ENTER(API_SYSTEM_FIRST + i, rc)) rc = ((system_fn)system_real[i])(a, b, c, d, e, f); \
    trace("call api=%s rc=%" PRIu64, api_names[API_SYSTEM_FIRST + i], rc);                   \
    LEAVE(API_SYSTEM_FIRST + i);                                                             \
    return rc;                                                                               \
  }
SYSTEM_WRAPPER(0) SYSTEM_WRAPPER(1) SYSTEM_WRAPPER(2) SYSTEM_WRAPPER(3)
static void *const system_wrappers[SYSTEM_COUNT] = {(void *)sys_0, (void *)sys_1, (void *)sys_2,
                                                    (void *)sys_3};

static void patch_system_library(void *handle) {
  typedef qnn_err_t (*providers_fn)(const void ***, uint32_t *);
  providers_fn get = (providers_fn)dlsym(handle, "QnnSystemInterface_getProviders");
  const void **providers = NULL;
  uint32_t count = 0;
  if (!get || get(&providers, &count) != 0 || !providers) return;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (uint32_t k = 0; k < count; k++) {
    const uint32_t *version = (const uint32_t *)((const char *)providers[k] + 16);
    if (version[0] != 1) continue; /* only the v1 table's layout is known */
    void **table = (void **)((char *)providers[k] + 32);
    uintptr_t start = (uintptr_t)table & ~(page - 1);
    if (mprotect((void *)start, (uintptr_t)&table[SYSTEM_COUNT] - start,
                 PROT_READ | PROT_WRITE) != 0) {
      trace("error mprotect errno=%d", errno);
      continue;
    }
    for (int i = 0; i < SYSTEM_COUNT; i++) {
      if (!table[i] || table[i] == system_wrappers[i]) continue;
      system_real[i] = table[i];
      table[i] = system_wrappers[i];
    }
  }
}

/* libQnnSystem.so's entry point. The runtime finds QnnSystemInterface_getProviders with dlsym
 * on the handle dlopen gave it, which no preload can see; so the runtime's handle of
 * libQnnSystem.so is this library's own (opened again with RTLD_NOLOAD: a preload never
 * unloads), whose dlsym finds the traced wrapper below, which forwards to the real library's.
 * The real library stays open as long as the runtime holds that handle: its dlclose of it
 * (below) closes the real library too, so the library unloads when the runtime lets it go. One
 * real library per process: every open of it gives the same handle. */
static void *(*real_dlopen)(const char *, int) = NULL;
static int (*real_dlclose)(void *) = NULL;
static pthread_mutex_t system_lock = PTHREAD_MUTEX_INITIALIZER;
static void *system_real_lib = NULL; /* the real libQnnSystem.so the runtime's handle stands for */
static void *system_self = NULL;     /* this library's handle, given to the runtime */
static int system_opens = 0;         /* the runtime's opens of it not yet closed */

static void *system_front(void *real) {
  Dl_info self;
  if (!dladdr((void *)system_front, &self) || !self.dli_fname) return real;
  void *me = real_dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (!me) return real;
  pthread_mutex_lock(&system_lock);
  system_real_lib = real;
  system_self = me;
  system_opens++;
  pthread_mutex_unlock(&system_lock);
  return me;
}

typedef qnn_err_t (*system_providers_fn)(const void ***, uint32_t *);

__attribute__((visibility("default"))) qnn_err_t QnnSystemInterface_getProviders(
    const void ***providers, uint32_t *count) {
  qnn_err_t rc = 0;
  if (!ENTER(API_SYSTEM_PROVIDERS, rc)) {
    pthread_mutex_lock(&system_lock);
    void *lib = system_real_lib;
    pthread_mutex_unlock(&system_lock);
    system_providers_fn get =
        lib ? (system_providers_fn)dlsym(lib, "QnnSystemInterface_getProviders") : NULL;
    rc = get ? get(providers, count) : 1; /* no library behind it: QNN_COMMON_ERROR-like */
  }
  trace("call api=QnnSystemInterface_getProviders rc=%" PRIu64, rc);
  LEAVE(API_SYSTEM_PROVIDERS);
  return rc;
}

__attribute__((visibility("default"))) int dlclose(void *handle) {
  if (!real_dlclose) real_dlclose = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
  void *real = NULL;
  pthread_mutex_lock(&system_lock);
  if (system_self && handle == system_self && system_opens > 0) {
    system_opens--;
    real = system_real_lib;
  }
  pthread_mutex_unlock(&system_lock);
  if (real) real_dlclose(real);
  return real_dlclose(handle);
}

__attribute__((visibility("default"))) void *dlopen(const char *file, int mode) {
  if (!real_dlopen) real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  int api = dlopen_api(file);
  if (api < 0 || !from_runtime(__builtin_return_address(0))) return real_dlopen(file, mode);
  const char *lib = api_names[api] + strlen("dlopen.");
  int probe = (mode & RTLD_NOLOAD) != 0;
  char missing[160];
  snprintf(missing, sizeof missing, "/nonexistent/harness-injected-failure/%s", lib);
  /* One attempt to open a library may be two calls: the runtime asks whether it is loaded
   * (RTLD_NOLOAD) and opens it when not (QnnImplementation::StartBackend). The open after a
   * probe that found nothing is the same attempt: not counted again, and failed too when the
   * probe's failure was injected. */
  if (!probe && probe_failed[api]) {
    int injected = probe_failed[api] == 2;
    probe_failed[api] = 0;
    void *handle = real_dlopen(injected ? missing : file, mode);
    trace("dlopen lib=%s rc=%d after_probe=1%s", lib, handle ? 0 : 1,
          injected ? " injected=1" : "");
    if (handle && api == API_DLOPEN_FIRST + 1) {
      patch_system_library(handle);
      handle = system_front(handle);
    }
    return handle;
  }
  uint64_t rc = 0;
  if (ENTER(api, rc)) {
    void *none = real_dlopen(missing, mode); /* NULL, and dlerror() names the cause */
    probe_failed[api] = probe ? 2 : 0;
    trace("dlopen lib=%s rc=%" PRIu64 " noload=%d injected=1", lib, rc, probe);
    LEAVE(api);
    return none;
  }
  void *handle = real_dlopen(file, mode);
  probe_failed[api] = probe && !handle ? 1 : 0;
  trace("dlopen lib=%s rc=%d noload=%d", lib, handle ? 0 : 1, probe);
  if (handle && api == API_DLOPEN_FIRST + 1) {
    patch_system_library(handle);
    handle = system_front(handle);
  }
  LEAVE(api);
  return handle;
}
#else

/* Called by the runner around each step it runs (found with dlsym on this library): the step
 * points of the rules above. `op`: the step's op; `leave`: 0 before the step, 1 after. */
__attribute__((visibility("default"))) void harness_qnn_step(const char *op, int leave) {
  if (!op) return;
  char name[40];
  snprintf(name, sizeof name, "step.%s", op);
  int api = api_index(name, strlen(name));
  if (api < 0) return;
  uint64_t rc = 0;
  nemesis_point(api, leave ? PHASE_LEAVE : PHASE_ENTER, &rc);
}


static qnn_err_t w_backend_create(qnn_handle_t log, const void **cfg, qnn_handle_t *out) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_BACKEND_CREATE, rc)) rc = ((backend_create_fn)real_table[FN_BACKEND_CREATE])(log, cfg, out);
  trace("backend_create rc=%" PRIu64 " handle=0x%" PRIxPTR " log=0x%" PRIxPTR, rc,
        rc ? 0 : OUT(out), H(log));
  LEAVE(FN_BACKEND_CREATE);
  return rc;
}

/* The log handles backends and devices are created with: freeing one while they live leaves
 * them logging through a freed handle. */
static qnn_err_t w_log_create(void *callback, int level, qnn_handle_t *out) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_LOG_CREATE, rc)) rc = ((log_create_fn)real_table[FN_LOG_CREATE])(callback, level, out);
  trace("log_create rc=%" PRIu64 " handle=0x%" PRIxPTR " level=%d", rc, rc ? 0 : OUT(out),
        level);
  LEAVE(FN_LOG_CREATE);
  return rc;
}

/* Shared memory (rpcmem) a context reads graph inputs and outputs from: registrations and
 * deregistrations must balance by the time the context goes. */
static qnn_err_t w_mem_register(qnn_handle_t ctx, const void *descriptors, uint32_t n,
                                qnn_handle_t *handles) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_MEM_REGISTER, rc)) rc = ((mem_register_fn)real_table[FN_MEM_REGISTER])(ctx, descriptors, n, handles);
  trace("mem_register rc=%" PRIu64 " context=0x%" PRIxPTR " count=%u", rc, H(ctx), n);
  LEAVE(FN_MEM_REGISTER);
  return rc;
}

static qnn_err_t w_mem_deregister(const qnn_handle_t *handles, uint32_t n) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_MEM_DEREGISTER, rc)) rc = ((mem_deregister_fn)real_table[FN_MEM_DEREGISTER])(handles, n);
  trace("mem_deregister rc=%" PRIu64 " count=%u", rc, n);
  LEAVE(FN_MEM_DEREGISTER);
  return rc;
}

static qnn_err_t w_log_free(qnn_handle_t h) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_LOG_FREE, rc)) rc = ((free1_fn)real_table[FN_LOG_FREE])(h);
  trace("log_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
  LEAVE(FN_LOG_FREE);
  return rc;
}

static qnn_err_t w_backend_free(qnn_handle_t h) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_BACKEND_FREE, rc)) rc = ((free1_fn)real_table[FN_BACKEND_FREE])(h);
  trace("backend_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
  LEAVE(FN_BACKEND_FREE);
  return rc;
}

/* QnnDevice_Config_t: {uint32 option; pad; void *payload}; option 0 is CUSTOM, whose payload
 * points at a QnnHtpDevice_CustomConfig_t {uint32 option; union} with the union at byte 4
 * (old headers, and QAIRT 2.49) or byte 8 (the others since). The old union holds only
 * 4-byte-aligned members of at most 8 bytes, so 8 bytes are moved. */
typedef struct { uint32_t option; void *payload; } device_config_t;

enum { INTERPOSER_ERROR_LAYOUT_UNKNOWN = 1100 }; /* QNN_COMMON_ERROR_GENERAL */

static qnn_err_t w_device_create(qnn_handle_t log, const void **cfg, qnn_handle_t *out) {
  size_t n = 0, relaid = 0, customs_in = 0;
  while (cfg && cfg[n]) n++;
  for (size_t i = 0; i < n; i++)
    if (((const device_config_t *)cfg[i])->option == 0) customs_in++;
  if (layout_unknown && customs_in) {
    fprintf(stderr, "[harness interposer] deviceCreate refused: %s\n", layout_problem);
    trace("device_create rc=%d handle=0x0 bridged=0 layout=unknown", INTERPOSER_ERROR_LAYOUT_UNKNOWN);
    return INTERPOSER_ERROR_LAYOUT_UNKNOWN;
  }
  /* The SoC model and HTP arch the runtime asks for (HTP custom options 0 and 1, the arch
   * option's union {u32 deviceId; u32 arch}), read where the runtime writes the union. */
  long soc = -1, arch = -1;
  for (size_t i = 0; caller_union_at && i < n; i++) {
    const device_config_t *c = cfg[i];
    if (c->option != 0 || !c->payload) continue;
    uint32_t htp_option, word[2];
    memcpy(&htp_option, c->payload, 4);
    memcpy(word, (const char *)c->payload + caller_union_at, 8);
    if (htp_option == 0) soc = word[0];
    if (htp_option == 1) arch = word[1];
  }
  const void **fixed = NULL;
  device_config_t *copies = NULL;
  unsigned char *customs = NULL;
  if (relay_from != relay_to && customs_in) {
    fixed = calloc(n + 1, sizeof *fixed);
    copies = calloc(n, sizeof *copies);
    customs = calloc(n, 32);
  }
  if (fixed && copies && customs) {
    for (size_t i = 0; i < n; i++) {
      const device_config_t *c = cfg[i];
      copies[i] = *c;
      if (c->option == 0 && c->payload) {
        unsigned char *dst = customs + 32 * i;
        memcpy(dst, c->payload, 4);                                        /* option */
        memcpy(dst + relay_to, (const char *)c->payload + relay_from, 8); /* the union */
        copies[i].payload = dst;
        relaid++;
      }
      fixed[i] = &copies[i];
    }
    cfg = fixed;
  }
  qnn_err_t rc = 0;
  if (!ENTER(FN_DEVICE_CREATE, rc)) rc = ((device_create_fn)real_table[FN_DEVICE_CREATE])(log, cfg, out);
  trace("device_create rc=%" PRIu64 " handle=0x%" PRIxPTR " bridged=%zu log=0x%" PRIxPTR
        " soc=%ld arch=%ld", rc, rc ? 0 : OUT(out), relaid, H(log), soc, arch);
  free(customs);
  free(copies);
  free(fixed);
  LEAVE(FN_DEVICE_CREATE);
  return rc;
}

static qnn_err_t w_device_free(qnn_handle_t h) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_DEVICE_FREE, rc)) rc = ((free1_fn)real_table[FN_DEVICE_FREE])(h);
  trace("device_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
  LEAVE(FN_DEVICE_FREE);
  return rc;
}

/* ---- DSP heap through QNN profiling ---------------------------------------------------- */

enum {
  QNN_NOT_SUPPORTED = 1000,          /* QNN_COMMON_ERROR_NOT_SUPPORTED */
  CONTEXT_CONFIG_CUSTOM = 0,         /* QNN_CONTEXT_CONFIG_OPTION_CUSTOM */
  HTP_CONTEXT_DSP_MEMORY_PROFILING = 4, /* QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED */
  PROFILE_LEVEL_BASIC = 1,
  EVENT_UNIT_BYTES = 2,
  MAX_CONTEXTS = 256
};

/* QnnContext_Config_t {u32 option; union at 8} and QnnHtpContext_CustomConfig_t {u32 option;
 * union at 8 (it holds a pointer and a u64)}; sized past the real unions, zero-filled. */
typedef struct { uint32_t option; void *payload; unsigned char rest[48]; } context_config_t;
typedef struct { uint32_t option; uint8_t flag __attribute__((aligned(8))); unsigned char rest[23]; }
    htp_context_config_t;

static int dsp_state = -1; /* -1 not read yet, 0 off, 1 on, 2 the library refused it */
static struct { qnn_handle_t context, backend; } context_backends[MAX_CONTEXTS];
static pthread_mutex_t dsp_lock = PTHREAD_MUTEX_INITIALIZER;

static int dsp_heap_on(void) {
  if (__atomic_load_n(&dsp_state, __ATOMIC_ACQUIRE) < 0) {
    const char *v = getenv("HARNESS_QNN_DSP_HEAP");
    int on = v && strcmp(v, "1") == 0 && real_table[FN_PROFILE_CREATE] &&
             real_table[FN_PROFILE_GET_EVENTS] && real_table[FN_PROFILE_GET_EVENT_DATA] &&
             real_table[FN_PROFILE_FREE];
    int unread = -1;
    __atomic_compare_exchange_n(&dsp_state, &unread, on, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  return __atomic_load_n(&dsp_state, __ATOMIC_ACQUIRE) == 1;
}

/* Which backend a context belongs to: QnnContext_free has no backend argument, and a profile
 * handle is made per backend. */
static void remember_backend(qnn_handle_t context, qnn_handle_t backend) {
  pthread_mutex_lock(&dsp_lock);
  for (int i = 0; i < MAX_CONTEXTS; i++) {
    if (!context_backends[i].context) {
      context_backends[i].context = context;
      context_backends[i].backend = backend;
      break;
    }
  }
  pthread_mutex_unlock(&dsp_lock);
}

static qnn_handle_t forget_backend(qnn_handle_t context) {
  qnn_handle_t backend = NULL;
  pthread_mutex_lock(&dsp_lock);
  for (int i = 0; i < MAX_CONTEXTS; i++) {
    if (context_backends[i].context == context) {
      backend = context_backends[i].backend;
      context_backends[i].context = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&dsp_lock);
  return backend;
}

static uint32_t profile_event_count(qnn_handle_t profile) {
  const uint64_t *ids = NULL;
  uint32_t n = 0;
  if (((profile_events_fn)real_table[FN_PROFILE_GET_EVENTS])(profile, &ids, &n) != 0) return 0;
  return n;
}

/* The profile's byte events named DSP:... past the first `seen`, one trace line each. */
static void trace_dsp_events(qnn_handle_t profile, uint32_t seen, const char *op,
                             qnn_handle_t context) {
  const uint64_t *ids = NULL;
  uint32_t n = 0;
  if (((profile_events_fn)real_table[FN_PROFILE_GET_EVENTS])(profile, &ids, &n) != 0 || !ids)
    return;
  for (uint32_t i = seen; i < n; i++) {
    event_data_t e;
    memset(&e, 0, sizeof e);
    if (((profile_event_data_fn)real_table[FN_PROFILE_GET_EVENT_DATA])(ids[i], &e) != 0) continue;
    if (e.unit != EVENT_UNIT_BYTES || !e.identifier || strncmp(e.identifier, "DSP:", 4) != 0)
      continue;
    char name[96];
    size_t k = 0;
    for (; e.identifier[k] && k < sizeof name - 1; k++)
      name[k] = (e.identifier[k] == ' ' || e.identifier[k] == '=') ? '_' : e.identifier[k];
    name[k] = 0;
    trace("dsp_heap op=%s context=0x%" PRIxPTR " event=%s bytes=%" PRIu64, op, H(context), name,
          e.value);
  }
}

/* A profile for one call: the caller's if it passed one, else a new one on `backend`. */
static qnn_handle_t call_profile(qnn_handle_t caller, qnn_handle_t backend, qnn_handle_t *own) {
  *own = NULL;
  if (caller || !backend) return caller;
  if (((profile_create_fn)real_table[FN_PROFILE_CREATE])(backend, PROFILE_LEVEL_BASIC, own) != 0)
    *own = NULL;
  return *own;
}

static void free_own_profile(qnn_handle_t own) {
  if (own) ((free1_fn)real_table[FN_PROFILE_FREE])(own);
}

static qnn_err_t w_context_create(qnn_handle_t b, qnn_handle_t d, const void **cfg,
                                  qnn_handle_t *out) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_CONTEXT_CREATE, rc)) rc = ((context_create_fn)real_table[FN_CONTEXT_CREATE])(b, d, cfg, out);
  trace("context_create rc=%" PRIu64 " handle=0x%" PRIxPTR " backend=0x%" PRIxPTR
        " device=0x%" PRIxPTR, rc, rc ? 0 : OUT(out), H(b), H(d));
  LEAVE(FN_CONTEXT_CREATE);
  return rc;
}

static void trace_binary_create(qnn_err_t rc, qnn_handle_t *out, qnn_handle_t b, qnn_handle_t d,
                                uint64_t size) {
  trace("context_create rc=%" PRIu64 " handle=0x%" PRIxPTR " backend=0x%" PRIxPTR
        " device=0x%" PRIxPTR " binary=%" PRIu64, rc, rc ? 0 : OUT(out), H(b), H(d), size);
}

static qnn_err_t w_context_from_binary(qnn_handle_t b, qnn_handle_t d, const void **cfg,
                                       const void *buf, uint64_t size, qnn_handle_t *out,
                                       qnn_handle_t prof) {
  context_from_binary_fn real = (context_from_binary_fn)real_table[FN_CONTEXT_CREATE_FROM_BINARY];
  qnn_err_t rc = 0;
  if (ENTER(FN_CONTEXT_CREATE_FROM_BINARY, rc) || !dsp_heap_on()) {
    if (!rc) rc = real(b, d, cfg, buf, size, out, prof);
    trace_binary_create(rc, out, b, d, size);
    LEAVE(FN_CONTEXT_CREATE_FROM_BINARY);
    return rc;
  }
  /* The caller's configs plus DSP memory profiling. */
  size_t n = 0;
  while (cfg && cfg[n]) n++;
  const void **with = calloc(n + 2, sizeof *with);
  context_config_t custom = {.option = CONTEXT_CONFIG_CUSTOM};
  htp_context_config_t htp = {.option = HTP_CONTEXT_DSP_MEMORY_PROFILING, .flag = 1};
  custom.payload = &htp;
  if (!with) {
    rc = real(b, d, cfg, buf, size, out, prof);
    LEAVE(FN_CONTEXT_CREATE_FROM_BINARY);
    return rc;
  }
  for (size_t i = 0; i < n; i++) with[i] = cfg[i];
  with[n] = &custom;
  qnn_handle_t own;
  qnn_handle_t profile = call_profile(prof, b, &own);
  uint32_t seen = profile ? profile_event_count(profile) : 0;
  rc = real(b, d, with, buf, size, out, profile);
  free(with);
  if (rc == QNN_NOT_SUPPORTED) {
    __atomic_store_n(&dsp_state, 2, __ATOMIC_RELEASE);
    trace("dsp_heap_unsupported rc=%" PRIu64 " op=create", rc);
    free_own_profile(own);
    own = profile = NULL;
    rc = real(b, d, cfg, buf, size, out, prof);
  }
  trace_binary_create(rc, out, b, d, size);
  if (rc == 0 && out) remember_backend(*out, b);
  if (profile) trace_dsp_events(profile, seen, "create", rc ? NULL : *out);
  free_own_profile(own);
  LEAVE(FN_CONTEXT_CREATE_FROM_BINARY);
  return rc;
}

static qnn_err_t w_context_free(qnn_handle_t h, qnn_handle_t prof) {
  context_free_fn real = (context_free_fn)real_table[FN_CONTEXT_FREE];
  qnn_err_t rc = 0;
  if (ENTER(FN_CONTEXT_FREE, rc)) {
    trace("context_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
    LEAVE(FN_CONTEXT_FREE);
    return rc;
  }
  qnn_handle_t backend = forget_backend(h);
  qnn_handle_t own = NULL, profile = NULL;
  if (dsp_heap_on()) profile = call_profile(prof, backend, &own);
  uint32_t seen = profile ? profile_event_count(profile) : 0;
  rc = real(h, profile ? profile : prof);
  trace("context_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
  if (profile) trace_dsp_events(profile, seen, "free", h);
  free_own_profile(own);
  LEAVE(FN_CONTEXT_FREE);
  return rc;
}

static qnn_err_t w_graph_create(qnn_handle_t ctx, const char *name, const void **cfg,
                                qnn_handle_t *out) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_GRAPH_CREATE, rc)) rc = ((graph_create_fn)real_table[FN_GRAPH_CREATE])(ctx, name, cfg, out);
  trace("graph_create rc=%" PRIu64 " handle=0x%" PRIxPTR " context=0x%" PRIxPTR " name=%s", rc,
        rc ? 0 : OUT(out), H(ctx), name ? name : "");
  LEAVE(FN_GRAPH_CREATE);
  return rc;
}

static qnn_err_t w_graph_retrieve(qnn_handle_t ctx, const char *name, qnn_handle_t *out) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_GRAPH_RETRIEVE, rc)) rc = ((graph_retrieve_fn)real_table[FN_GRAPH_RETRIEVE])(ctx, name, out);
  trace("graph_retrieve rc=%" PRIu64 " handle=0x%" PRIxPTR " context=0x%" PRIxPTR " name=%s",
        rc, rc ? 0 : OUT(out), H(ctx), name ? name : "");
  LEAVE(FN_GRAPH_RETRIEVE);
  return rc;
}

static qnn_err_t w_graph_execute(qnn_handle_t g, const void *in, uint32_t nin, void *out,
                                 uint32_t nout, qnn_handle_t prof, qnn_handle_t sig) {
  qnn_err_t rc = 0;
  if (!ENTER(FN_GRAPH_EXECUTE, rc)) rc = ((graph_execute_fn)real_table[FN_GRAPH_EXECUTE])(g, in, nin, out, nout, prof, sig);
  trace("graph_execute rc=%" PRIu64 " graph=0x%" PRIxPTR, rc, H(g));
  LEAVE(FN_GRAPH_EXECUTE);
  return rc;
}

/* Every other entry: traced (`call api=NAME rc=N`) and open to nemesis rules, forwarded with
 * ten integer-class arguments (every QNN function takes pointers, handles and integers, at
 * most nine; extra ones are ignored by the callee). */
typedef qnn_err_t (*generic_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                                uint64_t, uint64_t, uint64_t, uint64_t);
#define GENERIC(i)                                                                           \
  static qnn_err_t g_##i(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e,         \
                         uint64_t f, uint64_t g, uint64_t h, uint64_t j, uint64_t k) {       \
    qnn_err_t rc = 0;                                                                        \
    if (!ENTER(i, rc)) rc = ((generic_fn)real_table[i])(a, b, c, d, e, f, g, h, j, k);       \
    trace("call api=%s rc=%" PRIu64, api_names[i], rc);                                      \
    LEAVE(i);                                                                                \
    return rc;                                                                               \
  }
GENERIC(0) GENERIC(2) GENERIC(3) GENERIC(4) GENERIC(5) GENERIC(6) GENERIC(10) GENERIC(11)
GENERIC(12) GENERIC(16) GENERIC(17) GENERIC(19) GENERIC(22) GENERIC(23) GENERIC(24)
GENERIC(26) GENERIC(28) GENERIC(29) GENERIC(30) GENERIC(31) GENERIC(32) GENERIC(33)
GENERIC(34) GENERIC(37) GENERIC(38) GENERIC(39) GENERIC(41) GENERIC(42) GENERIC(44)
GENERIC(45) GENERIC(46) GENERIC(47) GENERIC(48) GENERIC(49) GENERIC(50) GENERIC(51)
GENERIC(52) GENERIC(53) GENERIC(54) GENERIC(55) GENERIC(56) GENERIC(57) GENERIC(58)
GENERIC(59) GENERIC(60) GENERIC(61) GENERIC(62) GENERIC(63) GENERIC(64) GENERIC(65)
GENERIC(66) GENERIC(67) GENERIC(68)

static void *const wrappers[FN_COUNT] = {
    [0] = (void *)g_0, [2] = (void *)g_2, [3] = (void *)g_3, [4] = (void *)g_4,
    [5] = (void *)g_5, [6] = (void *)g_6, [10] = (void *)g_10, [11] = (void *)g_11,
    [12] = (void *)g_12, [16] = (void *)g_16, [17] = (void *)g_17, [19] = (void *)g_19,
    [22] = (void *)g_22, [23] = (void *)g_23, [24] = (void *)g_24, [26] = (void *)g_26,
    [28] = (void *)g_28, [29] = (void *)g_29, [30] = (void *)g_30, [31] = (void *)g_31,
    [32] = (void *)g_32, [33] = (void *)g_33, [34] = (void *)g_34, [37] = (void *)g_37,
    [38] = (void *)g_38, [39] = (void *)g_39, [41] = (void *)g_41, [42] = (void *)g_42,
    [44] = (void *)g_44, [45] = (void *)g_45, [46] = (void *)g_46, [47] = (void *)g_47,
    [48] = (void *)g_48, [49] = (void *)g_49, [50] = (void *)g_50, [51] = (void *)g_51,
    [52] = (void *)g_52, [53] = (void *)g_53, [54] = (void *)g_54, [55] = (void *)g_55,
    [56] = (void *)g_56, [57] = (void *)g_57, [58] = (void *)g_58, [59] = (void *)g_59,
    [60] = (void *)g_60, [61] = (void *)g_61, [62] = (void *)g_62, [63] = (void *)g_63,
    [64] = (void *)g_64, [65] = (void *)g_65, [66] = (void *)g_66, [67] = (void *)g_67,
    [68] = (void *)g_68,
    [FN_BACKEND_CREATE] = (void *)w_backend_create,
    [FN_BACKEND_FREE] = (void *)w_backend_free,
    [FN_CONTEXT_CREATE] = (void *)w_context_create,
    [FN_CONTEXT_CREATE_FROM_BINARY] = (void *)w_context_from_binary,
    [FN_CONTEXT_FREE] = (void *)w_context_free,
    [FN_GRAPH_CREATE] = (void *)w_graph_create,
    [FN_GRAPH_RETRIEVE] = (void *)w_graph_retrieve,
    [FN_GRAPH_EXECUTE] = (void *)w_graph_execute,
    [FN_LOG_CREATE] = (void *)w_log_create,
    [FN_LOG_FREE] = (void *)w_log_free,
    [FN_MEM_REGISTER] = (void *)w_mem_register,
    [FN_MEM_DEREGISTER] = (void *)w_mem_deregister,
    [FN_DEVICE_CREATE] = (void *)w_device_create,
    [FN_DEVICE_FREE] = (void *)w_device_free,
};

/* The byte at which `table` ("2.36:8,2.38:4,...") says core API major.minor reads the union, or
 * 0 when it does not say. */
static int union_at(const char *table, unsigned major, unsigned minor) {
  for (const char *p = table; p && *p;) {
    unsigned maj, min, at;
    if (sscanf(p, "%u.%u:%u", &maj, &min, &at) == 3 && maj == major && min == minor &&
        (at == 4 || at == 8))
      return (int)at;
    p = strchr(p, ',');
    if (p) p++;
  }
  return 0;
}

/* Sets relay_from / relay_to / layout_unknown for the library `p`; returns the trace's
 * bridge= value: 1 re-lays, 0 does not, -1 unknown. */
static int decide_bridge(const qnn_interface_t *p) {
  relay_from = relay_to = layout_unknown = caller_union_at = 0;
  layout_problem[0] = 0;
  const char *force = getenv("HARNESS_QNN_ABI_BRIDGE");
  if (force && strcmp(force, "1") == 0) {
    relay_from = caller_union_at = 4, relay_to = 8;
    return 1;
  }
  if (force && strcmp(force, "0") == 0) return 0;
  const char *table = getenv("HARNESS_QNN_UNION_AT");
  const char *caller = getenv("HARNESS_QNN_CALLER_API");
  unsigned cmaj = 0, cmin = 0;
  int caller_at = caller && sscanf(caller, "%u.%u", &cmaj, &cmin) == 2 ? union_at(table, cmaj, cmin) : 0;
  int lib_at = union_at(table, p->core_api.major, p->core_api.minor);
  caller_union_at = caller_at;
  if (!lib_at || !caller_at) {
    layout_unknown = 1;
    int n = 0;
    if (!caller_at)
      n = snprintf(layout_problem, sizeof layout_problem,
                   "the ABI bridge does not know where the runtime (built against QNN core API "
                   "%s) writes the union of QnnHtpDevice_CustomConfig_t; ",
                   caller && *caller ? caller : "(HARNESS_QNN_CALLER_API unset)");
    if (!lib_at)
      n += snprintf(layout_problem + n, sizeof layout_problem - (size_t)n,
                    "the ABI bridge does not know where this libQnnHtp.so (QNN core API %u.%u.%u, "
                    "HTP backend API %u.%u.%u) reads the union of QnnHtpDevice_CustomConfig_t; ",
                    p->core_api.major, p->core_api.minor, p->core_api.patch, p->backend_api.major,
                    p->backend_api.minor, p->backend_api.patch);
    snprintf(layout_problem + n, sizeof layout_problem - (size_t)n,
             "known core API versions: %s. Measure it and add it to HTP_DEVICE_UNION_AT in "
             "harness/qnn/sdk.py, or force --qnn-abi-bridge on/off",
             table && *table ? table : "(none)");
    return -1;
  }
  if (lib_at == caller_at) return 0;
  relay_from = caller_at, relay_to = lib_at;
  return 1;
}

/* Providers whose tables hold our wrappers, for the destructor to put back. */
static qnn_interface_t *patched[16];
static size_t patched_count = 0;

/* How many entries of `p`'s table exist: all FN_COUNT from core API 2.27 on (the table
 * executorch 1.5.1 was built with), the first FN_LEGACY_COUNT before. */
static int table_length(const qnn_interface_t *p) {
  return p->core_api.major > 2 || (p->core_api.major == 2 && p->core_api.minor >= 27)
             ? FN_COUNT : FN_LEGACY_COUNT;
}

/* Makes the pages of `p`'s function table writable; 0 on success. */
static int table_writable(qnn_interface_t *p) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)&p->table[0] & ~(page - 1);
  uintptr_t end = (uintptr_t)&p->table[table_length(p)];
  return mprotect((void *)start, end - start, PROT_READ | PROT_WRITE);
}

static int patch_provider(qnn_interface_t *p) {
  if (table_writable(p) != 0) {
    trace("error mprotect errno=%d", errno);
    return -1;
  }
  for (int i = 0; i < table_length(p); i++) {
    if (!wrappers[i]) {
      if (!real_table[i]) real_table[i] = p->table[i]; /* called by the DSP heap reading */
      continue;
    }
    if (p->table[i] == wrappers[i]) continue;
    if (!p->table[i]) continue; /* not provided: the runtime must still see it missing */
    if (!real_table[i]) real_table[i] = p->table[i];
    if (p->table[i] == real_table[i]) p->table[i] = wrappers[i];
  }
  size_t k = 0;
  while (k < patched_count && patched[k] != p) k++;
  if (k == patched_count && patched_count < sizeof patched / sizeof patched[0])
    patched[patched_count++] = p;
  return 0;
}

/* ---- loading and unloading ------------------------------------------------------------ */

static void *real_lib = NULL; /* the real libQnnHtp.so, open while this library is loaded */
#define EXITING_ENV "HARNESS_QNN_INTERPOSER_EXITING"

extern int __cxa_atexit(void (*fn)(void *), void *arg, void *dso);

static int pinned = 1;

__attribute__((constructor)) static void on_load(void) {
  const char *unloadable = getenv("HARNESS_QNN_UNLOADABLE");
  pinned = !(unloadable && strcmp(unloadable, "1") == 0);
  if (pinned) {
    Dl_info self;
    if (dladdr((void *)on_load, &self) && self.dli_fname)
      dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
  /* Not tied to this DSO (dso NULL): runs at exit only, never at dlclose; its code (putenv)
   * and argument (heap) outlive this library. */
  char *mark = strdup(EXITING_ENV "=1");
  if (mark) __cxa_atexit((void (*)(void *))(void *)putenv, mark, NULL);
  /* unloadable: what the harness measured (1, 0), or "unknown" where it did not (a phone) */
  trace("library_open pid=%d pinned=%d unloadable=%s", (int)getpid(), pinned,
        unloadable && *unloadable ? unloadable : "unknown");
}

__attribute__((destructor)) static void on_unload(void) {
  /* At exit everything stays mapped and the runtime's own static destructors may still call
   * through the table: leave it all, and write nothing after the runner's end. */
  if (getenv(EXITING_ENV) != NULL) return;
  for (size_t k = 0; k < patched_count; k++) {
    qnn_interface_t *p = patched[k];
    if (table_writable(p) != 0) continue;
    for (int i = 0; i < table_length(p); i++)
      if (wrappers[i] && p->table[i] == wrappers[i]) p->table[i] = real_table[i];
  }
  trace("library_close pid=%d", (int)getpid());
  if (real_lib) dlclose(real_lib);
}

qnn_err_t QnnInterface_getProviders(const qnn_interface_t ***providers, uint32_t *count) {
  static get_providers_fn real_get = NULL;
  qnn_err_t injected = 0;
  if (ENTER(API_GET_PROVIDERS, injected)) { /* as if the library could not be used */
    LEAVE(API_GET_PROVIDERS);
    return injected;
  }
  pthread_mutex_lock(&patch_lock);
  if (!real_get) {
    const char *path = getenv("HARNESS_QNN_REAL_HTP");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL | (pinned ? RTLD_NODELETE : 0)) : NULL;
    if (!lib) {
      fprintf(stderr, "[harness interposer] cannot load real libQnnHtp.so from "
                      "HARNESS_QNN_REAL_HTP=%s: %s\n", path ? path : "(unset)", dlerror());
      pthread_mutex_unlock(&patch_lock);
      LEAVE(API_GET_PROVIDERS);
      return 1; /* QNN_COMMON_ERROR_GENERAL-like nonzero */
    }
    real_lib = lib;
    real_get = (get_providers_fn)dlsym(lib, "QnnInterface_getProviders");
    if (!real_get) {
      pthread_mutex_unlock(&patch_lock);
      LEAVE(API_GET_PROVIDERS);
      return 1;
    }
  }
  qnn_err_t rc = real_get(providers, count);
  if (rc == 0 && providers && *providers && count) {
    for (uint32_t i = 0; i < *count; i++) {
      qnn_interface_t *p = (qnn_interface_t *)(*providers)[i];
      if (i == 0) {
        int bridge = decide_bridge(p);
        char union_field[24] = "";
        if (bridge == 1) snprintf(union_field, sizeof union_field, " union=%d>%d", relay_from, relay_to);
        trace("api core=%u.%u.%u backend=%u.%u.%u provider=%s bridge=%s%s", p->core_api.major,
              p->core_api.minor, p->core_api.patch, p->backend_api.major, p->backend_api.minor,
              p->backend_api.patch, p->provider_name ? p->provider_name : "",
              bridge == 1 ? "1" : bridge == 0 ? "0" : "unknown", union_field);
        if (bridge < 0) fprintf(stderr, "[harness interposer] %s\n", layout_problem);
      }
      patch_provider(p);
    }
  }
  pthread_mutex_unlock(&patch_lock);
  LEAVE(API_GET_PROVIDERS);
  return rc;
}
#endif /* HARNESS_DLOPEN_SHIM */

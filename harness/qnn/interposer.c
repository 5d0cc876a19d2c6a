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
#include <unistd.h>

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
  FN_COUNT = 44
};

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

static qnn_err_t w_backend_create(qnn_handle_t log, const void **cfg, qnn_handle_t *out) {
  qnn_err_t rc = ((backend_create_fn)real_table[FN_BACKEND_CREATE])(log, cfg, out);
  trace("backend_create rc=%" PRIu64 " handle=0x%" PRIxPTR " log=0x%" PRIxPTR, rc,
        rc ? 0 : OUT(out), H(log));
  return rc;
}

/* The log handles backends and devices are created with: freeing one while they live leaves
 * them logging through a freed handle. */
static qnn_err_t w_log_create(void *callback, int level, qnn_handle_t *out) {
  qnn_err_t rc = ((log_create_fn)real_table[FN_LOG_CREATE])(callback, level, out);
  trace("log_create rc=%" PRIu64 " handle=0x%" PRIxPTR " level=%d", rc, rc ? 0 : OUT(out),
        level);
  return rc;
}

/* Shared memory (rpcmem) a context reads graph inputs and outputs from: registrations and
 * deregistrations must balance by the time the context goes. */
static qnn_err_t w_mem_register(qnn_handle_t ctx, const void *descriptors, uint32_t n,
                                qnn_handle_t *handles) {
  qnn_err_t rc = ((mem_register_fn)real_table[FN_MEM_REGISTER])(ctx, descriptors, n, handles);
  trace("mem_register rc=%" PRIu64 " context=0x%" PRIxPTR " count=%u", rc, H(ctx), n);
  return rc;
}

static qnn_err_t w_mem_deregister(const qnn_handle_t *handles, uint32_t n) {
  qnn_err_t rc = ((mem_deregister_fn)real_table[FN_MEM_DEREGISTER])(handles, n);
  trace("mem_deregister rc=%" PRIu64 " count=%u", rc, n);
  return rc;
}

static qnn_err_t w_log_free(qnn_handle_t h) {
  qnn_err_t rc = ((free1_fn)real_table[FN_LOG_FREE])(h);
  trace("log_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
  return rc;
}

static qnn_err_t w_backend_free(qnn_handle_t h) {
  qnn_err_t rc = ((free1_fn)real_table[FN_BACKEND_FREE])(h);
  trace("backend_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
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
  qnn_err_t rc = ((device_create_fn)real_table[FN_DEVICE_CREATE])(log, cfg, out);
  trace("device_create rc=%" PRIu64 " handle=0x%" PRIxPTR " bridged=%zu log=0x%" PRIxPTR
        " soc=%ld arch=%ld", rc, rc ? 0 : OUT(out), relaid, H(log), soc, arch);
  free(customs);
  free(copies);
  free(fixed);
  return rc;
}

static qnn_err_t w_device_free(qnn_handle_t h) {
  qnn_err_t rc = ((free1_fn)real_table[FN_DEVICE_FREE])(h);
  trace("device_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
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
  qnn_err_t rc = ((context_create_fn)real_table[FN_CONTEXT_CREATE])(b, d, cfg, out);
  trace("context_create rc=%" PRIu64 " handle=0x%" PRIxPTR " backend=0x%" PRIxPTR
        " device=0x%" PRIxPTR, rc, rc ? 0 : OUT(out), H(b), H(d));
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
  if (!dsp_heap_on()) {
    qnn_err_t rc = real(b, d, cfg, buf, size, out, prof);
    trace_binary_create(rc, out, b, d, size);
    return rc;
  }
  /* The caller's configs plus DSP memory profiling. */
  size_t n = 0;
  while (cfg && cfg[n]) n++;
  const void **with = calloc(n + 2, sizeof *with);
  context_config_t custom = {.option = CONTEXT_CONFIG_CUSTOM};
  htp_context_config_t htp = {.option = HTP_CONTEXT_DSP_MEMORY_PROFILING, .flag = 1};
  custom.payload = &htp;
  if (!with) return real(b, d, cfg, buf, size, out, prof);
  for (size_t i = 0; i < n; i++) with[i] = cfg[i];
  with[n] = &custom;
  qnn_handle_t own;
  qnn_handle_t profile = call_profile(prof, b, &own);
  uint32_t seen = profile ? profile_event_count(profile) : 0;
  qnn_err_t rc = real(b, d, with, buf, size, out, profile);
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
  return rc;
}

static qnn_err_t w_context_free(qnn_handle_t h, qnn_handle_t prof) {
  context_free_fn real = (context_free_fn)real_table[FN_CONTEXT_FREE];
  qnn_handle_t backend = forget_backend(h);
  qnn_handle_t own = NULL, profile = NULL;
  if (dsp_heap_on()) profile = call_profile(prof, backend, &own);
  uint32_t seen = profile ? profile_event_count(profile) : 0;
  qnn_err_t rc = real(h, profile ? profile : prof);
  trace("context_free rc=%" PRIu64 " handle=0x%" PRIxPTR, rc, H(h));
  if (profile) trace_dsp_events(profile, seen, "free", h);
  free_own_profile(own);
  return rc;
}

static qnn_err_t w_graph_create(qnn_handle_t ctx, const char *name, const void **cfg,
                                qnn_handle_t *out) {
  qnn_err_t rc = ((graph_create_fn)real_table[FN_GRAPH_CREATE])(ctx, name, cfg, out);
  trace("graph_create rc=%" PRIu64 " handle=0x%" PRIxPTR " context=0x%" PRIxPTR " name=%s", rc,
        rc ? 0 : OUT(out), H(ctx), name ? name : "");
  return rc;
}

static qnn_err_t w_graph_retrieve(qnn_handle_t ctx, const char *name, qnn_handle_t *out) {
  qnn_err_t rc = ((graph_retrieve_fn)real_table[FN_GRAPH_RETRIEVE])(ctx, name, out);
  trace("graph_retrieve rc=%" PRIu64 " handle=0x%" PRIxPTR " context=0x%" PRIxPTR " name=%s",
        rc, rc ? 0 : OUT(out), H(ctx), name ? name : "");
  return rc;
}

static qnn_err_t w_graph_execute(qnn_handle_t g, const void *in, uint32_t nin, void *out,
                                 uint32_t nout, qnn_handle_t prof, qnn_handle_t sig) {
  qnn_err_t rc = ((graph_execute_fn)real_table[FN_GRAPH_EXECUTE])(g, in, nin, out, nout, prof, sig);
  trace("graph_execute rc=%" PRIu64 " graph=0x%" PRIxPTR, rc, H(g));
  return rc;
}

static void *const wrappers[FN_COUNT] = {
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

/* Makes the pages of `p`'s function table writable; 0 on success. */
static int table_writable(qnn_interface_t *p) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)&p->table[0] & ~(page - 1);
  uintptr_t end = (uintptr_t)&p->table[FN_COUNT];
  return mprotect((void *)start, end - start, PROT_READ | PROT_WRITE);
}

static int patch_provider(qnn_interface_t *p) {
  if (table_writable(p) != 0) {
    trace("error mprotect errno=%d", errno);
    return -1;
  }
  for (int i = 0; i < FN_COUNT; i++) {
    if (!wrappers[i]) {
      if (!real_table[i]) real_table[i] = p->table[i]; /* called by the DSP heap reading */
      continue;
    }
    if (p->table[i] == wrappers[i]) continue;
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
    for (int i = 0; i < FN_COUNT; i++)
      if (wrappers[i] && p->table[i] == wrappers[i]) p->table[i] = real_table[i];
  }
  trace("library_close pid=%d", (int)getpid());
  if (real_lib) dlclose(real_lib);
}

qnn_err_t QnnInterface_getProviders(const qnn_interface_t ***providers, uint32_t *count) {
  static get_providers_fn real_get = NULL;
  pthread_mutex_lock(&patch_lock);
  if (!real_get) {
    const char *path = getenv("HARNESS_QNN_REAL_HTP");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL | (pinned ? RTLD_NODELETE : 0)) : NULL;
    if (!lib) {
      fprintf(stderr, "[harness interposer] cannot load real libQnnHtp.so from "
                      "HARNESS_QNN_REAL_HTP=%s: %s\n", path ? path : "(unset)", dlerror());
      pthread_mutex_unlock(&patch_lock);
      return 1; /* QNN_COMMON_ERROR_GENERAL-like nonzero */
    }
    real_lib = lib;
    real_get = (get_providers_fn)dlsym(lib, "QnnInterface_getProviders");
    if (!real_get) {
      pthread_mutex_unlock(&patch_lock);
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
  return rc;
}

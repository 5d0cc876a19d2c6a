/*
 * The layout of QnnHtpDevice_CustomConfig_t as each QAIRT release's libQnnHtp.so reads it, for
 * testing the interposer's ABI bridge without those releases installed.
 *
 * Built twice from this file:
 *  - with -DFAKE_HTP: a libQnnHtp.so that reports the QNN core / backend API version in
 *    $FAKE_HTP_CORE_API / $FAKE_HTP_BACKEND_API ("2.38.0") and whose deviceCreate reads the
 *    union of every custom config at byte $FAKE_HTP_UNION_AT (4 or 8), failing as the real
 *    library does when the SoC it reads there is 0 ("Failed to set scatter gather parameters:
 *    unknown custom config socModel 0", 14001). Everything else is absent.
 *  - without it: a caller laid out like executorch 1.5.1 (QAIRT 2.37 headers: the union at
 *    byte 4) that loads the interposer ($1), creates a device with one SOC custom config
 *    (SM8650, 57), or with no config when $2 is "none", and prints "rc=<n>"; with $3 "unload"
 *    it then closes the interposer and prints whether it and the fake library are still
 *    loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qnn_err_t;
typedef struct { uint32_t major, minor, patch; } qnn_version_t;
typedef struct {
  uint32_t backend_id;
  const char *provider_name;
  qnn_version_t core_api, backend_api;
  void *table[44];
} qnn_interface_t;
typedef struct { uint32_t option; void *payload; } device_config_t;
typedef qnn_err_t (*device_create_fn)(void *, const void **, void **);
typedef qnn_err_t (*get_providers_fn)(const qnn_interface_t ***, uint32_t *);

enum { FN_DEVICE_CREATE = 40, FN_DEVICE_FREE = 43, SM8650 = 57 };

#ifdef FAKE_HTP

static int device;

static qnn_err_t device_create(void *log, const void **cfg, void **out) {
  (void)log;
  const char *at_env = getenv("FAKE_HTP_UNION_AT");
  int at = at_env ? atoi(at_env) : 8;
  for (size_t i = 0; cfg && cfg[i]; i++) {
    const device_config_t *c = cfg[i];
    if (c->option != 0 || !c->payload) continue;
    uint32_t option, soc;
    memcpy(&option, c->payload, 4);
    memcpy(&soc, (const char *)c->payload + at, 4);
    if (option == 0 && soc != SM8650) {
      fprintf(stderr, " <E> Failed to set scatter gather parameters: unknown custom config "
                      "socModel %u\n", soc);
      return 14001;
    }
  }
  *out = &device;
  return 0;
}

static qnn_err_t device_free(void *h) {
  (void)h;
  return 0;
}

static qnn_interface_t provider = {.backend_id = 6, .provider_name = "FAKE_HTP"};
static const qnn_interface_t *providers[] = {&provider};

static void read_version(const char *name, qnn_version_t *v) {
  const char *s = getenv(name);
  if (s) sscanf(s, "%u.%u.%u", &v->major, &v->minor, &v->patch);
}

qnn_err_t QnnInterface_getProviders(const qnn_interface_t ***out, uint32_t *count) {
  read_version("FAKE_HTP_CORE_API", &provider.core_api);
  read_version("FAKE_HTP_BACKEND_API", &provider.backend_api);
  provider.table[FN_DEVICE_CREATE] = (void *)device_create;
  provider.table[FN_DEVICE_FREE] = (void *)device_free;
  *out = providers;
  *count = 1;
  return 0;
}

#else

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  get_providers_fn get = (get_providers_fn)dlsym(lib, "QnnInterface_getProviders");
  const qnn_interface_t **providers = NULL;
  uint32_t n = 0;
  if (!get || get(&providers, &n) != 0 || n == 0) return 3;
  struct { uint32_t option; uint32_t soc; uint32_t after[6]; } custom = {0, SM8650, {0}};
  device_config_t config = {0, &custom}; /* QNN_DEVICE_CONFIG_OPTION_CUSTOM */
  const void *configs[] = {&config, NULL};
  int none = argc > 2 && strcmp(argv[2], "none") == 0;
  void *handle = NULL;
  qnn_err_t rc = ((device_create_fn)providers[0]->table[FN_DEVICE_CREATE])(
      NULL, none ? NULL : configs, &handle);
  printf("rc=%llu\n", (unsigned long long)rc);
  if (argc > 3 && strcmp(argv[3], "unload") == 0) {
    /* As ExecuTorch at a full teardown: the last handle goes. Then: is anything still here? */
    dlclose(lib);
    const char *real = getenv("HARNESS_QNN_REAL_HTP");
    printf("interposer_resident=%d real_resident=%d\n",
           dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) != NULL,
           real && dlopen(real, RTLD_NOW | RTLD_NOLOAD) != NULL);
  }
  return 0;
}

#endif

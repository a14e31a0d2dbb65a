/*
 * fakenvml.c — a fake libnvidia-ml.so.1 for gputui's tests and benchmarks.
 *
 * The real nvidia-ml-py loads this library exactly as it would load the
 * driver's, so the whole Python side (ctypes structs, error classes, struct
 * versions, missing-symbol handling) is exercised for real on machines with
 * no GPU. Nothing in gputui knows it is talking to a fake.
 *
 * What it answers comes from a scenario file named by GPUTUI_FAKE_NVML_SCENARIO
 * (a line format written by tests/fakenvml/scenario.py; see parse_scenario()).
 * The file is re-read whenever its inode, size or mtime changes, so a test can
 * change values while a process is running (write a new file and rename it
 * over the old one).
 *
 * Every exported function counts its calls. The counts are written as a JSON
 * object to the file named by GPUTUI_FAKE_NVML_CALLS at nvmlShutdown, at exit,
 * on every scenario re-read, and whenever fakeNvmlDumpCalls() is called
 * (written to a temporary file and renamed, so a reader never sees half).
 *
 * A function can be left out of a build (so nvidia-ml-py raises
 * NVMLError_FunctionNotFound) by hiding its symbol with a linker version
 * script; scenario.py does that for FakeNvml(without=(...)).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- NVML types (layouts must match nvml.h / nvidia-ml-py's ctypes) ---- */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

/* A handle is a whole GPU (mig < 0) or MIG device `mig` of GPU `index`. */
typedef struct fake_handle { unsigned index; int mig; } *nvmlDevice_t;
typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
        sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* ---- the functions this library exports, for call counting ---- */

#define FAKE_FUNCS(X)                                         \
    X(nvmlInit)                                               \
    X(nvmlInit_v2)                                            \
    X(nvmlInitWithFlags)                                      \
    X(nvmlShutdown)                                           \
    X(nvmlErrorString)                                        \
    X(nvmlSystemGetDriverVersion)                             \
    X(nvmlSystemGetNVMLVersion)                               \
    X(nvmlSystemGetCudaDriverVersion)                         \
    X(nvmlSystemGetCudaDriverVersion_v2)                      \
    X(nvmlDeviceGetCount)                                     \
    X(nvmlDeviceGetCount_v2)                                  \
    X(nvmlDeviceGetHandleByIndex)                             \
    X(nvmlDeviceGetHandleByIndex_v2)                          \
    X(nvmlDeviceGetHandleByUUID)                              \
    X(nvmlDeviceGetIndex)                                     \
    X(nvmlDeviceGetName)                                      \
    X(nvmlDeviceGetUUID)                                      \
    X(nvmlDeviceGetPciInfo)                                   \
    X(nvmlDeviceGetPciInfo_v2)                                \
    X(nvmlDeviceGetPciInfo_v3)                                \
    X(nvmlDeviceGetMinorNumber)                               \
    X(nvmlDeviceGetMemoryInfo)                                \
    X(nvmlDeviceGetMemoryInfo_v2)                             \
    X(nvmlDeviceGetUtilizationRates)                          \
    X(nvmlDeviceGetTemperature)                               \
    X(nvmlDeviceGetPowerUsage)                                \
    X(nvmlDeviceGetEnforcedPowerLimit)                        \
    X(nvmlDeviceGetPowerManagementLimit)                      \
    X(nvmlDeviceGetFanSpeed)                                  \
    X(nvmlDeviceGetClockInfo)                                 \
    X(nvmlDeviceGetMaxClockInfo)                              \
    X(nvmlDeviceGetPerformanceState)                          \
    X(nvmlDeviceGetCurrentClocksThrottleReasons)              \
    X(nvmlDeviceGetCurrentClocksEventReasons)                 \
    X(nvmlDeviceGetTotalEccErrors)                            \
    X(nvmlDeviceGetEccMode)                                   \
    X(nvmlDeviceGetPersistenceMode)                           \
    X(nvmlDeviceGetComputeRunningProcesses)                   \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                \
    X(nvmlDeviceGetGraphicsRunningProcesses)                  \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2)               \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3)               \
    X(nvmlDeviceGetProcessUtilization)                        \
    X(nvmlDeviceGetRetiredPages)                              \
    X(nvmlDeviceGetRetiredPages_v2)                           \
    X(nvmlDeviceGetRetiredPagesPendingStatus)                 \
    X(nvmlDeviceGetRemappedRows)                              \
    X(nvmlDeviceGetComputeMode)                               \
    X(nvmlDeviceGetDisplayActive)                             \
    X(nvmlDeviceGetEncoderUtilization)                        \
    X(nvmlDeviceGetDecoderUtilization)                        \
    X(nvmlDeviceGetDriverModel)                               \
    X(nvmlDeviceGetDriverModel_v2)                            \
    X(nvmlDeviceGetMigMode)                                   \
    X(nvmlDeviceGetMaxMigDeviceCount)                         \
    X(nvmlDeviceGetMigDeviceHandleByIndex)                    \
    X(nvmlDeviceIsMigDeviceHandle)                            \
    X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)           \
    X(nvmlDeviceGetGpuInstanceId)                             \
    X(nvmlDeviceGetComputeInstanceId)                         \
    X(nvmlDeviceGetAttributes_v2)                             \
    X(nvmlDeviceGetBAR1MemoryInfo)                            \
    X(nvmlDeviceGetFieldValues)                               \
    X(nvmlDeviceGetSupportedEventTypes)                       \
    X(nvmlDeviceRegisterEvents)                               \
    X(nvmlEventSetCreate)                                     \
    X(nvmlEventSetWait)                                       \
    X(nvmlEventSetWait_v2)                                    \
    X(nvmlEventSetFree)                                       \
    X(nvmlDeviceGetTotalEnergyConsumption)                    \
    X(nvmlDeviceGetPcieReplayCounter)

enum {
#define X(name) F_##name,
    FAKE_FUNCS(X)
#undef X
    F_COUNT
};
static const char *const func_names[F_COUNT] = {
#define X(name) #name,
    FAKE_FUNCS(X)
#undef X
};
static unsigned long long call_counts[F_COUNT];
#define COUNT(name) __atomic_fetch_add(&call_counts[F_##name], 1ULL, __ATOMIC_RELAXED)

/* ---- fields a scenario can set, and fail per GPU ---- */

#define FIELDS(X)              \
    X(name)                    \
    X(uuid)                    \
    X(pci_bus_id)              \
    X(minor_number)            \
    X(memory)                  \
    X(utilization)             \
    X(temperature)             \
    X(power_draw)              \
    X(power_limit)             \
    X(fan_speed)               \
    X(clock_sm)                \
    X(clock_memory)            \
    X(clock_sm_max)            \
    X(clock_memory_max)        \
    X(pstate)                  \
    X(throttle_reasons)        \
    X(ecc_errors)              \
    X(ecc_mode)                \
    X(persistence_mode)        \
    X(compute_processes)       \
    X(graphics_processes)      \
    X(process_utilization)     \
    X(retired_pages)           \
    X(remapped_rows)           \
    X(driver_version)          \
    X(cuda_driver_version)     \
    X(nvml_version)            \
    X(device_count)            \
    X(compute_mode)            \
    X(display_active)          \
    X(encoder_utilization)     \
    X(decoder_utilization)     \
    X(mig_mode)                \
    X(mig_devices)             \
    X(attributes)              \
    X(memory_temperature)      \
    X(total_energy_consumption) \
    X(pcie_replay_counter)     \
    X(field_values)            \
    X(events)

enum {
#define X(name) E_##name,
    FIELDS(X)
#undef X
    E_COUNT
};
static const char *const field_names[E_COUNT] = {
#define X(name) #name,
    FIELDS(X)
#undef X
};

/* numeric values of a GPU */
#define VALUES(X)                \
    X(minor_number)              \
    X(memory_total)              \
    X(memory_used)               \
    X(memory_reserved)           \
    X(utilization_gpu)           \
    X(utilization_memory)        \
    X(temperature)               \
    X(power_draw_mw)             \
    X(power_limit_mw)            \
    X(fan_speed)                 \
    X(clock_sm)                  \
    X(clock_memory)              \
    X(clock_sm_max)              \
    X(clock_memory_max)          \
    X(pstate)                    \
    X(throttle_reasons)          \
    X(ecc_errors)                \
    X(ecc_corrected)             \
    X(ecc_mode)                  \
    X(persistence_mode)          \
    X(retired_sbe)               \
    X(retired_dbe)               \
    X(retired_pending)           \
    X(remapped_correctable)      \
    X(remapped_uncorrectable)    \
    X(remapped_pending)          \
    X(remapped_failure)          \
    X(compute_mode)              \
    X(display_active)            \
    X(encoder_utilization)       \
    X(decoder_utilization)       \
    X(lost)                      \
    X(mig_capable)               \
    X(mig_current)               \
    X(mig_pending)               \
    X(sm_count)                  \
    X(memory_temperature)        \
    X(energy_mj)                 \
    X(pcie_replay_counter)

enum {
#define X(name) V_##name,
    VALUES(X)
#undef X
    V_COUNT
};
static const char *const value_names[V_COUNT] = {
#define X(name) #name,
    VALUES(X)
#undef X
};

typedef struct {
    unsigned pid;
    long long used_memory; /* -1: not available */
    int sm;                /* -1: no utilization sample */
    int mem_util;
    int compute, graphics;
    int mig;               /* MIG device slot the process runs in, -1: none */
} fake_proc;

#define MAX_MIG 7 /* an A100/H100/H200 has at most seven MIG devices */
#define MAX_FI 64
#define MAX_XIDS 64
typedef struct {
    unsigned gi, ci, sm_count;
    long long memory_total, memory_used;
    char uuid[96];
    char name[128];
} fake_mig;

typedef struct {
    char name[96];
    char uuid[96];
    char bus_id[32];
    long long v[V_COUNT];
    int err[E_COUNT];
    fake_proc *procs;
    unsigned nprocs, cap;
    fake_mig migs[MAX_MIG];
    unsigned nmigs;
    unsigned fi_unsupported[MAX_FI]; /* field ids nvmlDeviceGetFieldValues answers NOT_SUPPORTED */
    unsigned nfi_unsupported;
    unsigned xids[MAX_XIDS];         /* XID critical errors, in the order they happened */
    unsigned nxids;
} fake_gpu;

typedef struct {
    int init_error;
    char driver_version[80];
    char nvml_version[80];
    int cuda_driver_version;
    int err[E_COUNT];
    fake_gpu *gpus;
    unsigned ngpus;
} scenario_t;

#define MAX_GPUS 256
static struct fake_handle handles[MAX_GPUS];
static struct fake_handle mig_handles[MAX_GPUS][MAX_MIG];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static scenario_t *current;
static int scenario_loaded;
static struct stat loaded_stat;
static int init_count;

static void dump_calls(void);

/* ---- scenario parsing ---- */

static void free_scenario(scenario_t *s) {
    if (!s) return;
    for (unsigned i = 0; i < s->ngpus; i++) free(s->gpus[i].procs);
    free(s->gpus);
    free(s);
}

static int field_index(const char *name) {
    for (int i = 0; i < E_COUNT; i++)
        if (strcmp(field_names[i], name) == 0) return i;
    return -1;
}

static int value_index(const char *name) {
    for (int i = 0; i < V_COUNT; i++)
        if (strcmp(value_names[i], name) == 0) return i;
    return -1;
}

static void copy_rest(char *dst, size_t n, const char *src) {
    while (*src == ' ') src++;
    snprintf(dst, n, "%s", src);
}

/*
 * The format, one item per line ("#" starts a comment):
 *   init_error <nvml error code>
 *   driver_version <text>        nvml_version <text>      cuda_driver_version <int>
 *   error <field> <code>         (system fields: driver_version, cuda_driver_version,
 *                                 nvml_version, device_count)
 *   gpu                          starts the next GPU (index = order)
 *     name <text> / uuid <text> / pci_bus_id <text>
 *     <value name> <integer>     (see VALUES)
 *     error <field> <code>       (see FIELDS; 3 = NOT_SUPPORTED)
 *     proc <pid> <used_memory|-1> <sm|-1> <c|g|cg> [mem_util] [mig slot]
 *     mig_mode <current> <pending>   (the GPU is MIG-capable; without it MIG queries answer NOT_SUPPORTED)
 *     mig <gi> <ci> <sm_count> <memory_total> <memory_used> <uuid> <name>
 *                                (the next MIG device; slot = order, processes name it by slot)
 *     fi_unsupported <field id>  (nvmlDeviceGetFieldValues answers NOT_SUPPORTED for that id only)
 *     xid <code>                 (an XID critical error that happened; events deliver each once)
 */
static scenario_t *parse_scenario(FILE *f) {
    scenario_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    unsigned gcap = 0;
    fake_gpu *g = NULL;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char key[64];
        int used = 0;
        if (sscanf(p, "%63s%n", key, &used) != 1) continue;
        char *rest = p + used;
        if (strcmp(key, "gpu") == 0) {
            if (s->ngpus == gcap) {
                gcap = gcap ? gcap * 2 : 8;
                fake_gpu *ng = realloc(s->gpus, gcap * sizeof *ng);
                if (!ng) break;
                s->gpus = ng;
            }
            g = &s->gpus[s->ngpus++];
            memset(g, 0, sizeof *g);
        } else if (strcmp(key, "init_error") == 0) {
            s->init_error = atoi(rest);
        } else if (strcmp(key, "driver_version") == 0) {
            copy_rest(s->driver_version, sizeof s->driver_version, rest);
        } else if (strcmp(key, "nvml_version") == 0) {
            copy_rest(s->nvml_version, sizeof s->nvml_version, rest);
        } else if (strcmp(key, "cuda_driver_version") == 0) {
            s->cuda_driver_version = atoi(rest);
        } else if (strcmp(key, "error") == 0) {
            char fname[64];
            int code = 0;
            if (sscanf(rest, "%63s %d", fname, &code) == 2) {
                int fi = field_index(fname);
                if (fi >= 0) {
                    if (g) g->err[fi] = code;
                    else s->err[fi] = code;
                }
            }
        } else if (!g) {
            continue; /* unknown system key: ignore */
        } else if (strcmp(key, "name") == 0) {
            copy_rest(g->name, sizeof g->name, rest);
        } else if (strcmp(key, "uuid") == 0) {
            copy_rest(g->uuid, sizeof g->uuid, rest);
        } else if (strcmp(key, "pci_bus_id") == 0) {
            copy_rest(g->bus_id, sizeof g->bus_id, rest);
        } else if (strcmp(key, "proc") == 0) {
            fake_proc pr = {0};
            char type[8] = "c";
            long long mem = -1;
            int sm = -1, mu = 0, slot = -1;
            int n = sscanf(rest, "%u %lld %d %7s %d %d", &pr.pid, &mem, &sm, type, &mu, &slot);
            if (n < 3) continue;
            pr.mig = slot;
            pr.used_memory = mem;
            pr.sm = sm;
            pr.mem_util = mu;
            pr.compute = strchr(type, 'c') != NULL;
            pr.graphics = strchr(type, 'g') != NULL;
            if (g->nprocs == g->cap) {
                g->cap = g->cap ? g->cap * 2 : 16;
                fake_proc *np = realloc(g->procs, g->cap * sizeof *np);
                if (!np) break;
                g->procs = np;
            }
            g->procs[g->nprocs++] = pr;
        } else if (strcmp(key, "fi_unsupported") == 0) {
            if (g->nfi_unsupported < MAX_FI) g->fi_unsupported[g->nfi_unsupported++] = (unsigned)strtoul(rest, NULL, 0);
        } else if (strcmp(key, "xid") == 0) {
            if (g->nxids < MAX_XIDS) g->xids[g->nxids++] = (unsigned)strtoul(rest, NULL, 0);
        } else if (strcmp(key, "mig_mode") == 0) {
            int cur = 0, pend = 0;
            sscanf(rest, "%d %d", &cur, &pend);
            g->v[V_mig_capable] = 1;
            g->v[V_mig_current] = cur;
            g->v[V_mig_pending] = pend;
        } else if (strcmp(key, "mig") == 0) {
            if (g->nmigs >= MAX_MIG) continue;
            fake_mig *m = &g->migs[g->nmigs];
            int used2 = 0;
            memset(m, 0, sizeof *m);
            if (sscanf(rest, "%u %u %u %lld %lld %95s %n", &m->gi, &m->ci, &m->sm_count, &m->memory_total,
                       &m->memory_used, m->uuid, &used2) < 6)
                continue;
            copy_rest(m->name, sizeof m->name, rest + used2);
            g->nmigs++;
        } else {
            int vi = value_index(key);
            if (vi >= 0) g->v[vi] = strtoll(rest, NULL, 0);
        }
    }
    if (s->ngpus > MAX_GPUS) s->ngpus = MAX_GPUS;
    return s;
}

/* Re-read the scenario if the file changed. Call with `lock` held. */
static void refresh(void) {
    const char *path = getenv("GPUTUI_FAKE_NVML_SCENARIO");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        if (scenario_loaded) return; /* keep the last good one while a file is replaced */
        free_scenario(current);
        current = NULL;
        return;
    }
    if (scenario_loaded && st.st_ino == loaded_stat.st_ino && st.st_size == loaded_stat.st_size &&
        st.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec && st.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    scenario_t *s = parse_scenario(f);
    fclose(f);
    if (!s) return;
    free_scenario(current);
    current = s;
    loaded_stat = st;
    scenario_loaded = 1;
    dump_calls();
}

/* ---- call counts ---- */

static void dump_calls(void) {
    const char *path = getenv("GPUTUI_FAKE_NVML_CALLS");
    if (!path || !*path) return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fputs("{", f);
    int first = 1;
    for (int i = 0; i < F_COUNT; i++) {
        unsigned long long n = __atomic_load_n(&call_counts[i], __ATOMIC_RELAXED);
        if (!n) continue;
        fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", func_names[i], n);
        first = 0;
    }
    fputs("}\n", f);
    if (fclose(f) == 0) rename(tmp, path);
    else unlink(tmp);
}

/* Not part of NVML: lets a test or benchmark take counts at a moment it chooses. */
void fakeNvmlDumpCalls(void) {
    pthread_mutex_lock(&lock);
    dump_calls();
    pthread_mutex_unlock(&lock);
}

/* Not part of NVML: start counting from zero (benchmarks measure one poll). */
void fakeNvmlResetCalls(void) {
    for (int i = 0; i < F_COUNT; i++) __atomic_store_n(&call_counts[i], 0ULL, __ATOMIC_RELAXED);
}

__attribute__((destructor)) static void at_unload(void) { dump_calls(); }

/* ---- helpers ---- */

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

static int copy_string(char *dst, unsigned len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/*
 * Look up the GPU behind a handle, with `lock` held on success. Returns an
 * NVML error (lock released) for a bad handle, an uninitialised library, a
 * lost GPU or a field the scenario makes fail.
 */
static int is_gpu_handle(nvmlDevice_t dev) { return dev && dev >= handles && dev < handles + MAX_GPUS; }
static int is_mig_handle(nvmlDevice_t dev) {
    return dev && dev >= &mig_handles[0][0] && dev < &mig_handles[0][0] + MAX_GPUS * MAX_MIG;
}

/*
 * Like begin_device(), for the functions that also answer on a MIG device
 * handle: *mig is its slot (-1 for a whole GPU). A MIG handle is valid while
 * its GPU is in MIG mode and has a device in that slot.
 */
static int begin_any(nvmlDevice_t dev, int field, fake_gpu **out, int *mig) {
    pthread_mutex_lock(&lock);
    refresh();
    int rc = NVML_SUCCESS;
    *mig = -1;
    if (init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
    else if (!current) rc = NVML_ERROR_UNKNOWN;
    else if (!(is_gpu_handle(dev) || is_mig_handle(dev)) || dev->index >= current->ngpus)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        fake_gpu *g = &current->gpus[dev->index];
        if (is_mig_handle(dev)) {
            *mig = dev->mig;
            if (!g->v[V_mig_current] || dev->mig < 0 || (unsigned)dev->mig >= g->nmigs) rc = NVML_ERROR_INVALID_ARGUMENT;
        }
        if (rc != NVML_SUCCESS) {
        } else if (g->v[V_lost]) rc = NVML_ERROR_GPU_IS_LOST;
        else if (field >= 0 && g->err[field]) rc = g->err[field];
        else *out = g;
    }
    if (rc != NVML_SUCCESS) pthread_mutex_unlock(&lock);
    return rc;
}

/*
 * Look up the GPU behind a whole-GPU handle. A MIG device handle answers
 * NOT_SUPPORTED here: sensors, clocks, power and health belong to the card.
 */
static int begin_device(nvmlDevice_t dev, int field, fake_gpu **out) {
    int mig = -1;
    int rc = begin_any(dev, field, out, &mig);
    if (rc == NVML_SUCCESS && mig >= 0) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return rc;
}

static int begin_system(int field) {
    pthread_mutex_lock(&lock);
    refresh();
    int rc = NVML_SUCCESS;
    if (init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
    else if (!current) rc = NVML_ERROR_UNKNOWN;
    else if (field >= 0 && current->err[field]) rc = current->err[field];
    if (rc != NVML_SUCCESS) pthread_mutex_unlock(&lock);
    return rc;
}

static int end(int rc) {
    pthread_mutex_unlock(&lock);
    return rc;
}

#define DEVICE_BEGIN(field)                      \
    fake_gpu *g = NULL;                          \
    int rc_ = begin_device(device, (field), &g); \
    if (rc_ != NVML_SUCCESS) return rc_;

#define ANY_BEGIN(field)                             \
    fake_gpu *g = NULL;                              \
    int mig = -1;                                    \
    int rc_ = begin_any(device, (field), &g, &mig);  \
    if (rc_ != NVML_SUCCESS) return rc_;

/* ---- init / shutdown / system ---- */

static nvmlReturn_t do_init(void) {
    pthread_mutex_lock(&lock);
    refresh();
    int rc = NVML_SUCCESS;
    if (!current) {
        const char *path = getenv("GPUTUI_FAKE_NVML_SCENARIO");
        fprintf(stderr, "fakenvml: cannot read the scenario file %s\n", path ? path : "(GPUTUI_FAKE_NVML_SCENARIO is not set)");
        rc = NVML_ERROR_UNKNOWN;
    } else if (current->init_error) {
        rc = current->init_error;
    } else {
        init_count++;
    }
    for (unsigned i = 0; i < MAX_GPUS; i++) {
        handles[i].index = i;
        handles[i].mig = -1;
        for (int k = 0; k < MAX_MIG; k++) {
            mig_handles[i][k].index = i;
            mig_handles[i][k].mig = k;
        }
    }
    return end(rc);
}

nvmlReturn_t nvmlInit(void) { COUNT(nvmlInit); return do_init(); }
nvmlReturn_t nvmlInit_v2(void) { COUNT(nvmlInit_v2); return do_init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; COUNT(nvmlInitWithFlags); return do_init(); }

nvmlReturn_t nvmlShutdown(void) {
    COUNT(nvmlShutdown);
    pthread_mutex_lock(&lock);
    int rc = NVML_SUCCESS;
    if (init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
    else init_count--;
    dump_calls();
    return end(rc);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    COUNT(nvmlErrorString);
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    COUNT(nvmlSystemGetDriverVersion);
    int rc = begin_system(E_driver_version);
    if (rc) return rc;
    return end(copy_string(version, length, current->driver_version));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    COUNT(nvmlSystemGetNVMLVersion);
    int rc = begin_system(E_nvml_version);
    if (rc) return rc;
    return end(copy_string(version, length, current->nvml_version));
}

static nvmlReturn_t cuda_version(int *v) {
    int rc = begin_system(E_cuda_driver_version);
    if (rc) return rc;
    if (!v) return end(NVML_ERROR_INVALID_ARGUMENT);
    *v = current->cuda_driver_version;
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { COUNT(nvmlSystemGetCudaDriverVersion); return cuda_version(v); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { COUNT(nvmlSystemGetCudaDriverVersion_v2); return cuda_version(v); }

/* ---- device enumeration ---- */

static nvmlReturn_t device_count(unsigned int *count) {
    int rc = begin_system(E_device_count);
    if (rc) return rc;
    if (!count) return end(NVML_ERROR_INVALID_ARGUMENT);
    *count = current->ngpus;
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { COUNT(nvmlDeviceGetCount); return device_count(c); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { COUNT(nvmlDeviceGetCount_v2); return device_count(c); }

static nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t *device) {
    int rc = begin_system(-1);
    if (rc) return rc;
    if (!device || index >= current->ngpus) return end(NVML_ERROR_INVALID_ARGUMENT);
    /* A lost GPU still has a handle (NVML enumerated it at init); its getters fail. */
    *device = &handles[index];
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { COUNT(nvmlDeviceGetHandleByIndex); return handle_by_index(i, d); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { COUNT(nvmlDeviceGetHandleByIndex_v2); return handle_by_index(i, d); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    COUNT(nvmlDeviceGetHandleByUUID);
    int rc = begin_system(-1);
    if (rc) return rc;
    if (!uuid || !device) return end(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < current->ngpus; i++) {
        fake_gpu *g = &current->gpus[i];
        if (strcmp(g->uuid, uuid) == 0) {
            *device = &handles[i];
            return end(NVML_SUCCESS);
        }
        for (unsigned k = 0; g->v[V_mig_current] && k < g->nmigs && i < MAX_GPUS; k++) {
            if (strcmp(g->migs[k].uuid, uuid) == 0) {
                *device = &mig_handles[i][k];
                return end(NVML_SUCCESS);
            }
        }
    }
    return end(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    COUNT(nvmlDeviceGetIndex);
    DEVICE_BEGIN(-1);
    if (!index) return end(NVML_ERROR_INVALID_ARGUMENT);
    *index = device->index;
    return end(NVML_SUCCESS);
}

/* ---- static facts ---- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    COUNT(nvmlDeviceGetName);
    ANY_BEGIN(E_name);
    return end(copy_string(name, length, mig >= 0 ? g->migs[mig].name : g->name));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    COUNT(nvmlDeviceGetUUID);
    ANY_BEGIN(E_uuid);
    return end(copy_string(uuid, length, mig >= 0 ? g->migs[mig].uuid : g->uuid));
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE_BEGIN(E_pci_bus_id);
    if (!pci) return end(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", g->bus_id);
    unsigned dom = 0, bus = 0, dev = 0;
    sscanf(g->bus_id, "%x:%x:%x", &dom, &bus, &dev);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0", dom & 0xffffu, bus & 0xffu, dev & 0xffu);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = 0x20B010DE;
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { COUNT(nvmlDeviceGetPciInfo); return pci_info(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { COUNT(nvmlDeviceGetPciInfo_v2); return pci_info(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { COUNT(nvmlDeviceGetPciInfo_v3); return pci_info(d, p); }

static nvmlReturn_t get_uint(nvmlDevice_t device, int field, int value, unsigned int *out) {
    DEVICE_BEGIN(field);
    if (!out) return end(NVML_ERROR_INVALID_ARGUMENT);
    *out = (unsigned int)g->v[value];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *m) {
    COUNT(nvmlDeviceGetMinorNumber);
    return get_uint(d, E_minor_number, V_minor_number, m);
}

/* ---- readings ---- */

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    COUNT(nvmlDeviceGetMemoryInfo);
    ANY_BEGIN(E_memory);
    if (!memory) return end(NVML_ERROR_INVALID_ARGUMENT);
    /* v1 counts reserved memory as used, as old drivers did; a MIG device reserves nothing */
    unsigned long long total = mig >= 0 ? g->migs[mig].memory_total : g->v[V_memory_total];
    unsigned long long used = mig >= 0 ? g->migs[mig].memory_used : g->v[V_memory_used] + g->v[V_memory_reserved];
    memory->total = total;
    memory->used = used;
    memory->free = total > used ? total - used : 0;
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    COUNT(nvmlDeviceGetMemoryInfo_v2);
    ANY_BEGIN(E_memory);
    if (!memory) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != NVML_MEMORY_V2) return end(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned long long total = g->v[V_memory_total], used = g->v[V_memory_used], reserved = g->v[V_memory_reserved];
    if (mig >= 0) {
        total = g->migs[mig].memory_total;
        used = g->migs[mig].memory_used;
        reserved = 0;
    }
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total > used + reserved ? total - used - reserved : 0;
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    COUNT(nvmlDeviceGetUtilizationRates);
    DEVICE_BEGIN(E_utilization);
    if (!util) return end(NVML_ERROR_INVALID_ARGUMENT);
    /* as real drivers: no GPU-wide load while the card is split into MIG devices */
    if (g->v[V_mig_current]) return end(NVML_ERROR_NOT_SUPPORTED);
    util->gpu = (unsigned)g->v[V_utilization_gpu];
    util->memory = (unsigned)g->v[V_utilization_memory];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    COUNT(nvmlDeviceGetTemperature);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(device, E_temperature, V_temperature, temp);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *p) {
    COUNT(nvmlDeviceGetPowerUsage);
    return get_uint(d, E_power_draw, V_power_draw_mw, p);
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *p) {
    COUNT(nvmlDeviceGetEnforcedPowerLimit);
    return get_uint(d, E_power_limit, V_power_limit_mw, p);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *p) {
    COUNT(nvmlDeviceGetPowerManagementLimit);
    return get_uint(d, E_power_limit, V_power_limit_mw, p);
}
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *s) {
    COUNT(nvmlDeviceGetFanSpeed);
    return get_uint(d, E_fan_speed, V_fan_speed, s);
}

/* clock types: 0 graphics, 1 SM, 2 memory, 3 video */
static nvmlReturn_t clock_value(nvmlDevice_t device, int type, int max, unsigned int *clk) {
    int field, value;
    if (type == 0 || type == 1 || type == 3) {
        field = max ? E_clock_sm_max : E_clock_sm;
        value = max ? V_clock_sm_max : V_clock_sm;
    } else if (type == 2) {
        field = max ? E_clock_memory_max : E_clock_memory;
        value = max ? V_clock_memory_max : V_clock_memory;
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return get_uint(device, field, value, clk);
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *c) {
    COUNT(nvmlDeviceGetClockInfo);
    return clock_value(d, type, 0, c);
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *c) {
    COUNT(nvmlDeviceGetMaxClockInfo);
    return clock_value(d, type, 1, c);
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, int *pstate) {
    COUNT(nvmlDeviceGetPerformanceState);
    DEVICE_BEGIN(E_pstate);
    if (!pstate) return end(NVML_ERROR_INVALID_ARGUMENT);
    *pstate = (int)g->v[V_pstate];
    return end(NVML_SUCCESS);
}

static nvmlReturn_t throttle(nvmlDevice_t device, unsigned long long *reasons) {
    DEVICE_BEGIN(E_throttle_reasons);
    if (!reasons) return end(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = (unsigned long long)g->v[V_throttle_reasons];
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    COUNT(nvmlDeviceGetCurrentClocksThrottleReasons);
    return throttle(d, r);
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    COUNT(nvmlDeviceGetCurrentClocksEventReasons);
    return throttle(d, r);
}

/* errorType: 0 corrected, 1 uncorrected; counterType: 0 volatile, 1 aggregate */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType, unsigned long long *count) {
    COUNT(nvmlDeviceGetTotalEccErrors);
    DEVICE_BEGIN(E_ecc_errors);
    if (!count || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    *count = (unsigned long long)(errorType == 1 ? g->v[V_ecc_errors] : g->v[V_ecc_corrected]);
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current_mode, int *pending) {
    COUNT(nvmlDeviceGetEccMode);
    DEVICE_BEGIN(E_ecc_mode);
    if (!current_mode || !pending) return end(NVML_ERROR_INVALID_ARGUMENT);
    *current_mode = *pending = (int)g->v[V_ecc_mode];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode) {
    COUNT(nvmlDeviceGetPersistenceMode);
    DEVICE_BEGIN(E_persistence_mode);
    if (!mode) return end(NVML_ERROR_INVALID_ARGUMENT);
    *mode = (int)g->v[V_persistence_mode];
    return end(NVML_SUCCESS);
}

/* ---- processes ---- */

/*
 * The NVML convention: with too small a buffer (or none), set *count to the
 * number needed and return INSUFFICIENT_SIZE; with no processes and no buffer,
 * return SUCCESS with *count = 0.
 */
/*
 * On a MIG device handle only that instance's processes are listed; on a card
 * in MIG mode all of them, each with its GPU/compute instance ids (0xFFFFFFFF
 * when the card is not in MIG mode).
 */
static int listed(const fake_proc *p, int graphics, int mig) {
    if (!(graphics ? p->graphics : p->compute)) return 0;
    return mig < 0 || p->mig == mig;
}

static nvmlReturn_t running(nvmlDevice_t device, int graphics, unsigned int *count, void *infos, int v1) {
    ANY_BEGIN(graphics ? E_graphics_processes : E_compute_processes);
    if (!count) return end(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned i = 0; i < g->nprocs; i++)
        if (listed(&g->procs[i], graphics, mig)) n++;
    if (n == 0) {
        *count = 0;
        return end(NVML_SUCCESS);
    }
    if (!infos || *count < n) {
        *count = n;
        return end(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < g->nprocs; i++) {
        fake_proc *p = &g->procs[i];
        if (!listed(p, graphics, mig)) continue;
        /* -1 is NVML's "not available"; any other negative value wraps, as a driver's counter underflow does */
        unsigned long long mem = p->used_memory == -1 ? ~0ULL : (unsigned long long)p->used_memory;
        if (v1) {
            nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + k;
            out->pid = p->pid;
            out->usedGpuMemory = mem;
        } else {
            nvmlProcessInfo_v2_t *out = (nvmlProcessInfo_v2_t *)infos + k;
            out->pid = p->pid;
            out->usedGpuMemory = mem;
            int in_mig = g->v[V_mig_current] && p->mig >= 0 && (unsigned)p->mig < g->nmigs;
            out->gpuInstanceId = in_mig ? g->migs[p->mig].gi : 0xFFFFFFFFu;
            out->computeInstanceId = in_mig ? g->migs[p->mig].ci : 0xFFFFFFFFu;
        }
        k++;
    }
    *count = k;
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) {
    COUNT(nvmlDeviceGetComputeRunningProcesses);
    return running(d, 0, c, i, 1);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) {
    COUNT(nvmlDeviceGetComputeRunningProcesses_v2);
    return running(d, 0, c, i, 0);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) {
    COUNT(nvmlDeviceGetComputeRunningProcesses_v3);
    return running(d, 0, c, i, 0);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) {
    COUNT(nvmlDeviceGetGraphicsRunningProcesses);
    return running(d, 1, c, i, 1);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) {
    COUNT(nvmlDeviceGetGraphicsRunningProcesses_v2);
    return running(d, 1, c, i, 0);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) {
    COUNT(nvmlDeviceGetGraphicsRunningProcesses_v3);
    return running(d, 1, c, i, 0);
}

/*
 * Every process with an "sm" value has one sample taken "now"; samples at or
 * before lastSeenTimeStamp are not returned. No samples: NVML_ERROR_NOT_FOUND,
 * as the real driver answers.
 */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count, unsigned long long lastSeenTimeStamp) {
    COUNT(nvmlDeviceGetProcessUtilization);
    DEVICE_BEGIN(E_process_utilization);
    if (!count) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (g->v[V_mig_current]) return end(NVML_ERROR_NOT_SUPPORTED);
    unsigned long long ts = now_us();
    unsigned n = 0;
    if (ts > lastSeenTimeStamp)
        for (unsigned i = 0; i < g->nprocs; i++)
            if (g->procs[i].sm >= 0) n++;
    if (n == 0) {
        *count = 0;
        return end(NVML_ERROR_NOT_FOUND);
    }
    if (!samples || *count < n) {
        *count = n;
        return end(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < g->nprocs; i++) {
        fake_proc *p = &g->procs[i];
        if (p->sm < 0) continue;
        samples[k].pid = p->pid;
        samples[k].timeStamp = ts;
        samples[k].smUtil = (unsigned)p->sm;
        samples[k].memUtil = (unsigned)p->mem_util;
        samples[k].encUtil = 0;
        samples[k].decUtil = 0;
        k++;
    }
    *count = k;
    return end(NVML_SUCCESS);
}

/* ---- health (gputui doctor) ---- */

/* cause: 0 multiple single-bit ECC errors, 1 double-bit ECC error */
static nvmlReturn_t retired(nvmlDevice_t device, int cause, unsigned int *count, unsigned long long *addresses,
                            unsigned long long *timestamps) {
    DEVICE_BEGIN(E_retired_pages);
    if (!count || cause < 0 || cause > 1) return end(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = (unsigned)(cause == 0 ? g->v[V_retired_sbe] : g->v[V_retired_dbe]);
    if (!addresses || *count < n) {
        *count = n;
        return end(n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < n; i++) {
        addresses[i] = 0x1000ULL * (i + 1) + (unsigned)cause;
        if (timestamps) timestamps[i] = 1700000000ULL + i;
    }
    *count = n;
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *c, unsigned long long *a) {
    COUNT(nvmlDeviceGetRetiredPages);
    return retired(d, cause, c, a, NULL);
}
nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t d, int cause, unsigned int *c, unsigned long long *a,
                                          unsigned long long *t) {
    COUNT(nvmlDeviceGetRetiredPages_v2);
    return retired(d, cause, c, a, t);
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending) {
    COUNT(nvmlDeviceGetRetiredPagesPendingStatus);
    DEVICE_BEGIN(E_retired_pages);
    if (!pending) return end(NVML_ERROR_INVALID_ARGUMENT);
    *pending = (int)g->v[V_retired_pending];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    COUNT(nvmlDeviceGetRemappedRows);
    DEVICE_BEGIN(E_remapped_rows);
    if (!corr || !unc || !pending || !failure) return end(NVML_ERROR_INVALID_ARGUMENT);
    *corr = (unsigned)g->v[V_remapped_correctable];
    *unc = (unsigned)g->v[V_remapped_uncorrectable];
    *pending = (unsigned)g->v[V_remapped_pending];
    *failure = (unsigned)g->v[V_remapped_failure];
    return end(NVML_SUCCESS);
}

/* ---- what other monitors (nvitop) also ask, so benchmarks compare like with like ---- */

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, int *mode) {
    COUNT(nvmlDeviceGetComputeMode);
    DEVICE_BEGIN(E_compute_mode);
    if (!mode) return end(NVML_ERROR_INVALID_ARGUMENT);
    *mode = (int)g->v[V_compute_mode];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, int *active) {
    COUNT(nvmlDeviceGetDisplayActive);
    DEVICE_BEGIN(E_display_active);
    if (!active) return end(NVML_ERROR_INVALID_ARGUMENT);
    *active = (int)g->v[V_display_active];
    return end(NVML_SUCCESS);
}

static nvmlReturn_t codec(nvmlDevice_t device, int field, int value, unsigned int *util, unsigned int *period) {
    DEVICE_BEGIN(field);
    if (!util || !period) return end(NVML_ERROR_INVALID_ARGUMENT);
    *util = (unsigned)g->v[value];
    *period = 167000;
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *p) {
    COUNT(nvmlDeviceGetEncoderUtilization);
    return codec(d, E_encoder_utilization, V_encoder_utilization, u, p);
}
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *p) {
    COUNT(nvmlDeviceGetDecoderUtilization);
    return codec(d, E_decoder_utilization, V_decoder_utilization, u, p);
}

/*
 * nvitop >= 1.5 reads BAR1 memory of every card and MIG device (an A100's
 * 128 GiB aperture, a MIG device gets an eighth per slice; a little is mapped).
 */
typedef struct { unsigned long long bar1Total, bar1Free, bar1Used; } nvmlBAR1Memory_t;
static unsigned mig_slices(const fake_mig *m) {
    const char *prof = strstr(m->name, "MIG ");
    unsigned slices = 1;
    if (prof) sscanf(prof + 4, "%ug", &slices);
    return slices;
}
nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1) {
    COUNT(nvmlDeviceGetBAR1MemoryInfo);
    ANY_BEGIN(-1);
    if (!bar1) return end(NVML_ERROR_INVALID_ARGUMENT);
    bar1->bar1Total = mig >= 0 ? (16ULL << 30) * mig_slices(&g->migs[mig]) : 128ULL << 30;
    bar1->bar1Used = 2ULL << 20;
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    return end(NVML_SUCCESS);
}

/* Windows only (WDDM/TCC): NOT_SUPPORTED on Linux, as the real driver answers. */
static nvmlReturn_t driver_model(nvmlDevice_t device, int *current_model, int *pending) {
    fake_gpu *g = NULL;
    int rc = begin_device(device, -1, &g);
    if (rc != NVML_SUCCESS) return rc;
    (void)current_model;
    (void)pending;
    return end(NVML_ERROR_NOT_SUPPORTED);
}
nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t d, int *c, int *p) {
    COUNT(nvmlDeviceGetDriverModel);
    return driver_model(d, c, p);
}
nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t d, int *c, int *p) {
    COUNT(nvmlDeviceGetDriverModel_v2);
    return driver_model(d, c, p);
}

/* ---- Multi-Instance GPU (A100/H100/H200) ---- */

/* A card that cannot do MIG answers NOT_SUPPORTED; MIG device handles have no MIG mode of their own. */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current_mode, unsigned int *pending) {
    COUNT(nvmlDeviceGetMigMode);
    DEVICE_BEGIN(E_mig_mode);
    if (!current_mode || !pending) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->v[V_mig_capable]) return end(NVML_ERROR_NOT_SUPPORTED);
    *current_mode = (unsigned)g->v[V_mig_current];
    *pending = (unsigned)g->v[V_mig_pending];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    COUNT(nvmlDeviceGetMaxMigDeviceCount);
    DEVICE_BEGIN(E_mig_devices);
    if (!count) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->v[V_mig_capable]) return end(NVML_ERROR_NOT_SUPPORTED);
    *count = g->v[V_mig_current] ? MAX_MIG : 0;
    return end(NVML_SUCCESS);
}

/* Slots without a MIG device answer NOT_FOUND, as the real driver does for gaps. */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig_device) {
    COUNT(nvmlDeviceGetMigDeviceHandleByIndex);
    DEVICE_BEGIN(E_mig_devices);
    if (!mig_device) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->v[V_mig_capable]) return end(NVML_ERROR_NOT_SUPPORTED);
    if (!g->v[V_mig_current] || index >= MAX_MIG) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= g->nmigs) return end(NVML_ERROR_NOT_FOUND);
    *mig_device = &mig_handles[device->index][index];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    COUNT(nvmlDeviceIsMigDeviceHandle);
    ANY_BEGIN(-1);
    (void)g;
    if (!is_mig) return end(NVML_ERROR_INVALID_ARGUMENT);
    *is_mig = mig >= 0;
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t device, nvmlDevice_t *parent) {
    COUNT(nvmlDeviceGetDeviceHandleFromMigDeviceHandle);
    ANY_BEGIN(-1);
    (void)g;
    if (!parent || mig < 0) return end(NVML_ERROR_INVALID_ARGUMENT);
    *parent = &handles[device->index];
    return end(NVML_SUCCESS);
}

static nvmlReturn_t instance_id(nvmlDevice_t device, int compute, unsigned int *id) {
    ANY_BEGIN(-1);
    if (!id || mig < 0) return end(NVML_ERROR_INVALID_ARGUMENT);
    *id = compute ? g->migs[mig].ci : g->migs[mig].gi;
    return end(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    COUNT(nvmlDeviceGetGpuInstanceId);
    return instance_id(d, 0, id);
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    COUNT(nvmlDeviceGetComputeInstanceId);
    return instance_id(d, 1, id);
}

/* The slice count is read from the profile in the name ("... MIG 3g.40gb" -> 3). */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attrs) {
    COUNT(nvmlDeviceGetAttributes_v2);
    ANY_BEGIN(E_attributes);
    if (!attrs) return end(NVML_ERROR_INVALID_ARGUMENT);
    memset(attrs, 0, sizeof *attrs);
    if (mig >= 0) {
        const fake_mig *m = &g->migs[mig];
        unsigned slices = mig_slices(m);
        attrs->multiprocessorCount = m->sm_count;
        attrs->gpuInstanceSliceCount = slices;
        attrs->computeInstanceSliceCount = slices;
        attrs->sharedCopyEngineCount = slices;
        attrs->sharedDecoderCount = slices / 2;
        attrs->memorySizeMB = (unsigned long long)m->memory_total >> 20;
    } else {
        attrs->multiprocessorCount = g->v[V_sm_count] ? (unsigned)g->v[V_sm_count] : 108;
        attrs->gpuInstanceSliceCount = 7;
        attrs->computeInstanceSliceCount = 7;
        attrs->sharedCopyEngineCount = 7;
        attrs->sharedDecoderCount = 5;
        attrs->memorySizeMB = (unsigned long long)g->v[V_memory_total] >> 20;
    }
    return end(NVML_SUCCESS);
}

/* ---- field values (nvmlDeviceGetFieldValues): many readings in one call ---- */

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

enum { VT_UINT = 1, VT_ULL = 3 };

/* The field ids this fake knows: id -> (the scenario field that can fail it, the value, its type). */
static const struct { unsigned id; int field; int value; unsigned type; } field_ids[] = {
    {82, E_memory_temperature, V_memory_temperature, VT_UINT},          /* NVML_FI_DEV_MEMORY_TEMP */
    {83, E_total_energy_consumption, V_energy_mj, VT_ULL},              /* NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION */
    {94, E_pcie_replay_counter, V_pcie_replay_counter, VT_UINT},        /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
    {142, E_remapped_rows, V_remapped_correctable, VT_UINT},            /* NVML_FI_DEV_REMAPPED_COR */
    {143, E_remapped_rows, V_remapped_uncorrectable, VT_UINT},          /* NVML_FI_DEV_REMAPPED_UNC */
    {144, E_remapped_rows, V_remapped_pending, VT_UINT},                /* NVML_FI_DEV_REMAPPED_PENDING */
    {145, E_remapped_rows, V_remapped_failure, VT_UINT},                /* NVML_FI_DEV_REMAPPED_FAILURE */
    {185, E_power_draw, V_power_draw_mw, VT_UINT},                      /* NVML_FI_DEV_POWER_AVERAGE (mW) */
    {186, E_power_draw, V_power_draw_mw, VT_UINT},                      /* NVML_FI_DEV_POWER_INSTANT (mW) */
    {190, E_power_limit, V_power_limit_mw, VT_UINT},                    /* NVML_FI_DEV_POWER_CURRENT_LIMIT (mW) */
    {4, E_ecc_errors, V_ecc_errors, VT_ULL},                            /* NVML_FI_DEV_ECC_DBE_VOL_TOTAL */
};

/*
 * Each entry gets its own nvmlReturn: NOT_SUPPORTED for an id the fake does not know or the
 * scenario lists in fi_unsupported, the scenario's error for its field; the call itself
 * succeeds unless the GPU is lost or "field_values" fails.
 */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    COUNT(nvmlDeviceGetFieldValues);
    DEVICE_BEGIN(E_field_values);
    if (!values || count < 0) return end(NVML_ERROR_INVALID_ARGUMENT);
    long long ts = (long long)now_us();
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *fv = &values[i];
        fv->timestamp = ts;
        fv->latencyUsec = 0;
        fv->value.ullVal = 0;
        fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        for (unsigned k = 0; k < g->nfi_unsupported; k++)
            if (g->fi_unsupported[k] == fv->fieldId) goto next;
        for (unsigned k = 0; k < sizeof field_ids / sizeof field_ids[0]; k++) {
            if (field_ids[k].id != fv->fieldId) continue;
            if (g->err[field_ids[k].field]) {
                fv->nvmlReturn = g->err[field_ids[k].field];
                break;
            }
            fv->valueType = field_ids[k].type;
            if (field_ids[k].type == VT_ULL) fv->value.ullVal = (unsigned long long)g->v[field_ids[k].value];
            else fv->value.uiVal = (unsigned)g->v[field_ids[k].value];
            fv->nvmlReturn = NVML_SUCCESS;
            break;
        }
    next:;
    }
    return end(NVML_SUCCESS);
}

/* ---- events: XID critical errors (what dcgm-exporter's DCGM_FI_DEV_XID_ERRORS reports) ---- */

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

#define EVENT_XID 0x8ULL
#define EVENTS_SUPPORTED (0x1ULL | 0x2ULL | 0x4ULL | EVENT_XID | 0x10ULL)
#define MAX_SETS 8
typedef struct fake_event_set {
    int used;
    unsigned long long types[MAX_GPUS];
    unsigned delivered[MAX_GPUS]; /* how many of the GPU's xids this set has handed out */
} *nvmlEventSet_t;
static struct fake_event_set event_sets[MAX_SETS];

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    COUNT(nvmlDeviceGetSupportedEventTypes);
    DEVICE_BEGIN(E_events);
    if (!types) return end(NVML_ERROR_INVALID_ARGUMENT);
    *types = EVENTS_SUPPORTED;
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    COUNT(nvmlEventSetCreate);
    int rc = begin_system(-1);
    if (rc) return rc;
    if (!set) return end(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < MAX_SETS; i++) {
        if (event_sets[i].used) continue;
        memset(&event_sets[i], 0, sizeof event_sets[i]);
        event_sets[i].used = 1;
        *set = &event_sets[i];
        return end(NVML_SUCCESS);
    }
    return end(NVML_ERROR_UNKNOWN);
}

static int valid_set(nvmlEventSet_t set) {
    return set && set >= event_sets && set < event_sets + MAX_SETS && set->used;
}

/* Only errors after registration are delivered, as with the real driver. */
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    COUNT(nvmlDeviceRegisterEvents);
    DEVICE_BEGIN(E_events);
    if (!valid_set(set)) return end(NVML_ERROR_INVALID_ARGUMENT);
    if (types & ~EVENTS_SUPPORTED) return end(NVML_ERROR_NOT_SUPPORTED);
    set->types[device->index] |= types;
    set->delivered[device->index] = g->nxids;
    return end(NVML_SUCCESS);
}

/* The next undelivered XID of a registered GPU; TIMEOUT at once when there is none (never sleeps). */
static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data) {
    int rc = begin_system(-1);
    if (rc) return rc;
    if (!valid_set(set) || !data) return end(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < current->ngpus && i < MAX_GPUS; i++) {
        fake_gpu *g = &current->gpus[i];
        if (!(set->types[i] & EVENT_XID) || g->v[V_lost] || g->err[E_events]) continue;
        if (set->delivered[i] > g->nxids) set->delivered[i] = g->nxids; /* the scenario forgot some */
        if (set->delivered[i] == g->nxids) continue;
        data->device = &handles[i];
        data->eventType = EVENT_XID;
        data->eventData = g->xids[set->delivered[i]++];
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        return end(NVML_SUCCESS);
    }
    return end(NVML_ERROR_TIMEOUT);
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    COUNT(nvmlEventSetWait);
    (void)timeout_ms;
    return event_wait(set, data);
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    COUNT(nvmlEventSetWait_v2);
    (void)timeout_ms;
    return event_wait(set, data);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    COUNT(nvmlEventSetFree);
    pthread_mutex_lock(&lock);
    if (!valid_set(set)) return end(NVML_ERROR_INVALID_ARGUMENT);
    set->used = 0;
    return end(NVML_SUCCESS);
}

/* ---- the single getters of the fields above that have one ---- */

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    COUNT(nvmlDeviceGetTotalEnergyConsumption);
    DEVICE_BEGIN(E_total_energy_consumption);
    if (!energy) return end(NVML_ERROR_INVALID_ARGUMENT);
    *energy = (unsigned long long)g->v[V_energy_mj];
    return end(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    COUNT(nvmlDeviceGetPcieReplayCounter);
    return get_uint(device, E_pcie_replay_counter, V_pcie_replay_counter, value);
}

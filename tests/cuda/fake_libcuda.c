/* A stand-in for the CUDA driver library (libcuda.so.1) that runs kernels on the host,
 * for xlac's tests on machines without a GPU. Test-only code.
 *
 * Build: cc -shared -fPIC -O2 -o libcuda.so.1 fake_libcuda.c -ldl
 * (C11 plus POSIX and glibc: dlopen/dladdr, mmap/mincore, mkstemp, ucontext, a pthread mutex).
 *
 * Device memory is host memory: a CUdeviceptr is a host address. Each allocation is
 * 256-byte aligned, rounded up to 256 bytes, and ends exactly at a PROT_NONE guard page, so
 * writing past a buffer whose size is a multiple of 256 faults (SIGSEGV). The bytes between
 * the requested size and the 256-byte boundary hold a canary that is checked after each
 * launch (CUDA_ERROR_ILLEGAL_ADDRESS when a kernel changed it). New memory reads 0xFF.
 * Copies and memsets must stay inside the allocation they touch; any other mapped host
 * memory passes for device memory too (a numpy array handed to a device entry point).
 *
 * A "module image" is the bytes of a host ELF shared object holding the kernels compiled for
 * the host. Its ABI:
 *   struct xlac_emu_state { uint32_t tid[3], ntid[3], ctaid[3], nctaid[3];
 *                           void (*barrier)(void); void *dynamic_shared; };
 *   struct xlac_emu_state *xlac_emu_state;  -- set by this library after dlopen
 *   void K__emu(void **params);               -- kernel K; params = cuLaunchKernel's array
 * A launch runs the blocks one after another (x fastest, then y, then z); the threads of a
 * block run as ucontext fibers, and barrier() (__syncthreads) switches back to the block's
 * scheduler, which resumes the threads one at a time (thread 0 first, or the last thread
 * first when XLAC_FAKE_CUDA_ORDER=reverse) until all wait at the barrier or have returned.
 * Some returned while others wait: a divergent barrier, CUDA_ERROR_LAUNCH_FAILED, and the
 * context stays failed (every call that needs it answers 719) until the primary context is
 * released by all its users and retained again.
 *
 * Environment, read at each call:
 *   XLAC_FAKE_CUDA_VERSION  driver version cuDriverGetVersion reports (default 12080)
 *   XLAC_FAKE_CUDA_DEVICES  device count (default 1, at most 8)
 *   XLAC_FAKE_CUDA_ORDER    forward (default) or reverse: the thread order in a block
 *   XLAC_FAKE_CUDA_FAIL     FUNCTION=CODE[@N],... make FUNCTION return CODE (on its N-th
 *                           call in this process, counting from 1; without @N every call)
 *   XLAC_FAKE_CUDA_LOG      file to append "launch NAME grid=X,Y,Z block=X,Y,Z shared=N"
 *                           per successful launch and "memcpy htod|dtoh|dtod BYTES" per copy
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

/* Without cuda.h, the driver API's types; a test compiles this file with the real cuda.h
   force-included (-include cuda.h) to check the signatures against it. */
#ifndef CUDA_VERSION
typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef int CUjit_option;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
enum {
  CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200, CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_OPERATING_SYSTEM = 304, CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, CUDA_ERROR_LAUNCH_FAILED = 719
};
#endif

/* ---- the image ABI ---------------------------------------------------------------- */

struct xlac_emu_state {
  uint32_t tid[3];
  uint32_t ntid[3];
  uint32_t ctaid[3];
  uint32_t nctaid[3];
  void (*barrier)(void);
  void *dynamic_shared;
};

typedef void (*emu_kernel)(void **params);

/* ---- the device ------------------------------------------------------------------- */

#define MAX_DEVICES 8
#define MAX_THREADS 1024
#define MAX_SHARED 49152
#define ALIGN 256
#define CANARY 0xA5
#define STACK_BYTES (256 * 1024)
#define CTX_STACK_DEPTH 256

struct CUctx_st {
  int device;
  int refs;        /* retains minus releases; 0: inactive */
  CUresult sticky; /* a failed launch's error, until the context is reset */
};

struct alloc {
  struct alloc *next;
  CUcontext ctx;
  unsigned char *map;  /* the mapping: [map, map + span) */
  size_t span;
  unsigned char *ptr;  /* the CUdeviceptr */
  size_t size, rounded;
};

struct CUfunc_st {
  struct CUfunc_st *next;
  CUmodule module;
  emu_kernel entry;
  char name[];
};

struct CUmod_st {
  struct CUmod_st *next;
  CUcontext ctx;
  void *handle;
  struct xlac_emu_state *state;
  struct CUfunc_st *functions;
};

struct CUstream_st {
  struct CUstream_st *next;
  CUcontext ctx;
};

/* The exported functions, for call counting and error injection. */
#define API_LIST(X)                                                                       \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)   \
  X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)     \
  X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxGetCurrent) X(cuCtxSetCurrent)      \
  X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleUnload)         \
  X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2)              \
  X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2)   \
  X(cuMemcpyDtoDAsync_v2) X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuLaunchKernel)           \
  X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuGetErrorString)      \
  X(cuGetErrorName)

#define API_ENUM(name) FN_##name,
#define API_NAME(name) #name,
enum { API_LIST(API_ENUM) FN_COUNT };
static const char *const api_names[FN_COUNT] = {API_LIST(API_NAME)};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static unsigned long long call_count[FN_COUNT];
static struct CUctx_st primary[MAX_DEVICES];
static struct alloc *allocs;
static struct CUmod_st *modules;
static struct CUstream_st *streams;
static _Thread_local CUcontext ctx_stack[CTX_STACK_DEPTH];
static _Thread_local int ctx_depth;
static CUcontext current;  /* the calling thread's context, set by enter() under the lock */

__attribute__((format(printf, 1, 2))) static void warn(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fputs("fake libcuda: ", stderr);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  fflush(stderr);
  va_end(args);
}

/* The runtime dlopens and dlcloses the driver around each use; keep this library (its call
   counts, its allocations, the modules' barrier function) loaded for the whole process. */
__attribute__((constructor)) static void pin_library(void) {
  Dl_info info;
  if (dladdr(&lock, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static long env_long(const char *name, long fallback) {
  const char *s = getenv(name);
  if (!s || !*s) return fallback;
  char *end;
  long v = strtol(s, &end, 10);
  while (*end == ' ') end++;
  if (*end) {
    warn("ignoring %s=%s (not an integer)", name, s);
    return fallback;
  }
  return v;
}

static int device_count(void) {
  long n = env_long("XLAC_FAKE_CUDA_DEVICES", 1);
  return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : (int)n;
}

/* ---- error injection: XLAC_FAKE_CUDA_FAIL=FUNCTION=CODE[@N],... ------------------------ */

static int parse_rule(const char *rule, size_t len, int *fn, long *code, unsigned long long *nth) {
  char buf[128];
  while (len && (*rule == ' ' || *rule == '\t')) rule++, len--;
  while (len && (rule[len - 1] == ' ' || rule[len - 1] == '\t')) len--;
  if (len == 0 || len >= sizeof buf) return 0;
  memcpy(buf, rule, len);
  buf[len] = 0;
  char *eq = strchr(buf, '=');
  if (!eq) return 0;
  *eq = 0;
  *fn = -1;
  for (int f = 0; f < FN_COUNT; f++)
    if (!strcmp(buf, api_names[f])) *fn = f;
  if (*fn < 0) return 0;
  char *end;
  *code = strtol(eq + 1, &end, 10);
  if (end == eq + 1) return 0;
  *nth = 0;
  if (*end == '@') {
    char *at = end + 1;
    *nth = strtoull(at, &end, 10);
    if (end == at || *nth == 0) return 0;
  }
  return *end == 0;
}

/* Each malformed rule is reported once. */
static void malformed_rule(const char *rule, size_t len) {
  static char seen[16][128];
  static int seen_count;
  char text[128];
  snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), rule);
  for (int i = 0; i < seen_count; i++)
    if (!strcmp(seen[i], text)) return;
  if (seen_count < 16) memcpy(seen[seen_count++], text, sizeof text);
  warn("ignoring the rule '%s' in XLAC_FAKE_CUDA_FAIL (want FUNCTION=CODE or FUNCTION=CODE@N, "
       "FUNCTION one of this library's functions, N >= 1)", text);
}

static CUresult injected(int fn) {
  const char *spec = getenv("XLAC_FAKE_CUDA_FAIL");
  if (!spec || !*spec) return CUDA_SUCCESS;
  const char *p = spec;
  CUresult hit = CUDA_SUCCESS;
  int found = 0;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    int f;
    long code;
    unsigned long long nth;
    if (parse_rule(p, len, &f, &code, &nth)) {
      if (!found && f == fn && (nth == 0 || nth == call_count[fn])) {
        hit = (CUresult)code;
        found = 1;
      }
    } else if (strspn(p, " \t") < len) {  /* an empty rule (",,") is no mistake */
      malformed_rule(p, len);
    }
    if (!end) break;
    p = end + 1;
  }
  return hit;
}

/* ---- every call: lock, count, injected error, cuInit done, current context ---------- */

enum { NEED_INIT = 1, NEED_CTX = 2 };

static CUresult enter(int fn, int needs) {
  pthread_mutex_lock(&lock);
  call_count[fn]++;
  CUresult r = injected(fn);
  if (r) return r;
  if ((needs & NEED_INIT) && !initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (needs & NEED_CTX) {
    CUcontext c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    if (!c || c->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (c->sticky) return c->sticky;
    current = c;
  }
  return CUDA_SUCCESS;
}

static CUresult leave(CUresult r) {
  pthread_mutex_unlock(&lock);
  return r;
}

#define API(fn, needs, body)           \
  do {                                 \
    CUresult r_ = enter(FN_##fn, needs); \
    if (r_ == CUDA_SUCCESS) r_ = (body); \
    return leave(r_);                  \
  } while (0)

/* One line appended to the file XLAC_FAKE_CUDA_LOG names, if any. */
__attribute__((format(printf, 1, 2))) static void log_line(const char *fmt, ...) {
  const char *path = getenv("XLAC_FAKE_CUDA_LOG");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) {
    warn("cannot open XLAC_FAKE_CUDA_LOG=%s", path);
    return;
  }
  va_list args;
  va_start(args, fmt);
  vfprintf(f, fmt, args);
  va_end(args);
  fclose(f);
}

/* ---- errors ------------------------------------------------------------------------ */

static const struct { int code; const char *name, *text; } errors[] = {
  {0, "CUDA_SUCCESS", "no error"},
  {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
  {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
  {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
  {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
  {5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
  {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized"},
  {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started"},
  {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped"},
  {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
  {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
   "API call requires a newer CUDA driver"},
  {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
  {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
  {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
  {102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
  {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
  {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
  {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
  {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
  {206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
  {207, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
  {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
  {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
  {210, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
  {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
  {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
  {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
  {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
  {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
  {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
  {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
  {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
  {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"},
  {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
  {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
  {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
  {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
  {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
  {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
  {226, "CUDA_ERROR_CONTAINED", "an exception occurred on the device that is now contained by the GPU's error containment capability"},
  {227, "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION", "the loader version is insufficient"},
  {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
  {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
  {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
  {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
  {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
  {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
  {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
  {402, "CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy"},
  {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
  {600, "CUDA_ERROR_NOT_READY", "device not ready"},
  {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
  {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
  {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
  {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
  {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
  {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
  {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
  {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
  {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
  {711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
  {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
  {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
  {714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
  {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
  {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
  {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
  {718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
  {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
  {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
  {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", "tensor memory not completely freed"},
  {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
  {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
  {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
  {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
  {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
  {805, "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
  {806, "CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"},
  {807, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"},
  {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"},
  {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the hardware resources required to support device connections have been exhausted"},
  {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"},
  {811, "CUDA_ERROR_CDP_NOT_SUPPORTED", "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"},
  {812, "CUDA_ERROR_CDP_VERSION_MISMATCH", "unsupported interaction between different versions of CUDA Dynamic Parallelism"},
  {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
  {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
  {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
  {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
  {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
  {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
  {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
  {907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
  {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
  {909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
  {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
  {911, "CUDA_ERROR_EXTERNAL_DEVICE", "an async error has occured in external entity outside of CUDA"},
  {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "a kernel launch error has occurred due to cluster misconfiguration"},
  {913, "CUDA_ERROR_FUNCTION_NOT_LOADED", "the function handle is not loaded when calling an API that requires a loaded function"},
  {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "one or more resources passed in are not valid resource types for the operation"},
  {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "one or more resources are insufficient or non-applicable for the operation"},
  {916, "CUDA_ERROR_KEY_ROTATION", "an error happened during the key rotation sequence"},
  {917, "CUDA_ERROR_STREAM_DETACHED", "the stream is detached"},
  {918, "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE", "the graph recapture failed"},
  {919, "CUDA_ERROR_FABRIC_NOT_READY", "the fabric is not ready"},
  {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult code) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == (int)code) return (int)i;
  return -1;
}

/* ---- memory ------------------------------------------------------------------------ */

static size_t page_bytes(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

static size_t round_to(size_t n, size_t m) { return (n + m - 1) / m * m; }

static void free_alloc(struct alloc *a) {
  munmap(a->map, a->span);
  free(a);
}

/* Whether every page of [p, p + n) is mapped in this process. */
static int mapped(uintptr_t p, size_t n) {
  size_t page = page_bytes();
  uintptr_t at = p / page * page, end = p + n;
  unsigned char vec[256];
  while (at < end) {
    size_t pages = (end - at + page - 1) / page;
    if (pages > sizeof vec) pages = sizeof vec;
    if (mincore((void *)at, pages * page, vec)) return 0;
    at += pages * page;
  }
  return 1;
}

/* The device bytes of a copy or a memset. A range that touches an allocation (its guard
   page included) must lie inside the allocation's requested bytes: a copy past the end of a
   buffer is CUDA_ERROR_INVALID_VALUE. Since device memory is host memory here, other mapped
   host memory is accepted as device memory too (tests hand numpy arrays to the runtime's
   device entry points); unmapped memory is CUDA_ERROR_INVALID_VALUE. */
static CUresult device_range(int fn, CUdeviceptr p, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  uintptr_t lo = (uintptr_t)p;
  if (lo == 0 || n > UINTPTR_MAX - lo) {
    warn("%s: device range %#llx + %zu bytes is not valid", api_names[fn],
         (unsigned long long)p, n);
    return CUDA_ERROR_INVALID_VALUE;
  }
  uintptr_t hi = lo + n;
  for (struct alloc *a = allocs; a; a = a->next) {
    uintptr_t map = (uintptr_t)a->map, start = (uintptr_t)a->ptr;
    if (lo < map + a->span && hi > map) {
      if (lo >= start && hi <= start + a->size) return CUDA_SUCCESS;
      warn("%s: device range %#llx + %zu bytes is not inside the %zu-byte allocation at %p",
           api_names[fn], (unsigned long long)p, n, a->size, (void *)a->ptr);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (mapped(lo, n)) return CUDA_SUCCESS;
  warn("%s: device range %#llx + %zu bytes is not mapped", api_names[fn],
       (unsigned long long)p, n);
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult mem_alloc(CUdeviceptr *out, size_t n) {
  if (!out || n == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t page = page_bytes();
  if (n > SIZE_MAX / 2) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t rounded = round_to(n, ALIGN);
  size_t span = round_to(rounded, page) + page;
  struct alloc *a = malloc(sizeof *a);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  void *map = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (map == MAP_FAILED) {
    free(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->map = map;
  a->span = span;
  if (mprotect(a->map + span - page, page, PROT_NONE)) {
    free_alloc(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->ptr = a->map + span - page - rounded;
  a->size = n;
  a->rounded = rounded;
  a->ctx = current;
  memset(a->ptr, 0xFF, n);
  memset(a->ptr + n, CANARY, rounded - n);
  a->next = allocs;
  allocs = a;
  *out = (CUdeviceptr)(uintptr_t)a->ptr;
  return CUDA_SUCCESS;
}

static CUresult mem_free(CUdeviceptr p) {
  for (struct alloc **at = &allocs; *at; at = &(*at)->next)
    if ((uintptr_t)(*at)->ptr == (uintptr_t)p) {
      struct alloc *a = *at;
      *at = a->next;
      free_alloc(a);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

static int stream_ok(CUstream s) {
  if (s == NULL || (uintptr_t)s == 1 || (uintptr_t)s == 2) return 1;  /* NULL, LEGACY, PER_THREAD */
  for (struct CUstream_st *t = streams; t; t = t->next)
    if (t == s) return 1;
  return 0;
}

enum { HTOD, DTOH, DTOD };
static const char *const copy_words[] = {"htod", "dtoh", "dtod"};

static CUresult copy(int fn, int kind, void *to, const void *from, size_t n, CUstream stream,
                     int async) {
  if (async && !stream_ok(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n && (!to || !from)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  if (kind != HTOD) r = device_range(fn, (CUdeviceptr)(uintptr_t)from, n);
  if (!r && kind != DTOH) r = device_range(fn, (CUdeviceptr)(uintptr_t)to, n);
  if (r) return r;
  if (n) memmove(to, from, n);
  log_line("memcpy %s %zu\n", copy_words[kind], n);
  return CUDA_SUCCESS;
}

static CUresult memset8(int fn, CUdeviceptr p, unsigned char value, size_t n, CUstream stream,
                        int async) {
  if (async && !stream_ok(stream)) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = device_range(fn, p, n);
  if (!r && n) memset((void *)(uintptr_t)p, value, n);
  return r;
}

/* ---- contexts ------------------------------------------------------------------------ */

static int is_context(CUcontext c) {
  for (int d = 0; d < MAX_DEVICES; d++)
    if (c == &primary[d]) return 1;
  return 0;
}

static void unload(struct CUmod_st *m) {
  dlclose(m->handle);
  for (struct CUfunc_st *f = m->functions, *next; f; f = next) {
    next = f->next;
    free(f);
  }
  free(m->state);
  free(m);
}

/* The last release of a primary context: its memory, modules and streams go, and its
   sticky error with them. */
static void reset_context(CUcontext c) {
  for (struct alloc **at = &allocs; *at;) {
    struct alloc *a = *at;
    if (a->ctx == c) {
      *at = a->next;
      free_alloc(a);
    } else {
      at = &a->next;
    }
  }
  for (struct CUmod_st **at = &modules; *at;) {
    struct CUmod_st *m = *at;
    if (m->ctx == c) {
      *at = m->next;
      unload(m);
    } else {
      at = &m->next;
    }
  }
  for (struct CUstream_st **at = &streams; *at;) {
    struct CUstream_st *s = *at;
    if (s->ctx == c) {
      *at = s->next;
      free(s);
    } else {
      at = &s->next;
    }
  }
  c->sticky = CUDA_SUCCESS;
}

static CUresult retain(CUcontext *out, CUdevice dev) {
  if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  primary[dev].device = dev;
  primary[dev].refs++;
  *out = &primary[dev];
  return CUDA_SUCCESS;
}

static CUresult release(CUdevice dev) {
  if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  if (primary[dev].refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary[dev].refs == 0) reset_context(&primary[dev]);
  return CUDA_SUCCESS;
}

static CUresult push(CUcontext c) {
  if (!c || !is_context(c) || c->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth == CTX_STACK_DEPTH) return CUDA_ERROR_INVALID_VALUE;
  ctx_stack[ctx_depth++] = c;
  return CUDA_SUCCESS;
}

static CUresult pop(CUcontext *out) {
  if (ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext c = ctx_stack[--ctx_depth];
  if (out) *out = c;
  return CUDA_SUCCESS;
}

static CUresult set_current(CUcontext c) {
  if (!c) {
    if (ctx_depth) ctx_depth--;
    return CUDA_SUCCESS;
  }
  if (!is_context(c) || c->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth == 0) ctx_depth = 1;
  ctx_stack[ctx_depth - 1] = c;
  return CUDA_SUCCESS;
}

static CUresult get_current(CUcontext *out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
  return CUDA_SUCCESS;
}

/* ---- modules ----------------------------------------------------------------------- */

static void barrier(void);

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#endif

/* The image's size, from its ELF header: the section header table (last in files that cc
   and ld write) and every segment's bytes; 0 for anything but a host ELF shared object. */
static size_t image_size(const unsigned char *b) {
  /* byte by byte: a short non-ELF buffer is not read past its first wrong byte */
  if (b[0] != ELFMAG0 || b[1] != ELFMAG1 || b[2] != ELFMAG2 || b[3] != ELFMAG3) return 0;
  if (b[EI_CLASS] != ELFCLASS64) return 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (b[EI_DATA] != ELFDATA2LSB) return 0;
#elif defined(__BYTE_ORDER__)
  if (b[EI_DATA] != ELFDATA2MSB) return 0;
#endif
  Elf64_Ehdr eh;
  memcpy(&eh, b, sizeof eh);
  if (eh.e_type != ET_DYN) return 0;
#ifdef HOST_MACHINE
  if (eh.e_machine != HOST_MACHINE) return 0;
#endif
  uint64_t size = sizeof eh;
  if (eh.e_shoff) {
    uint64_t count = eh.e_shnum;
    if (eh.e_shentsize != sizeof(Elf64_Shdr)) return 0;
    if (count == 0) {  /* more than SHN_LORESERVE sections: the count is in section 0 */
      Elf64_Shdr first;
      memcpy(&first, b + eh.e_shoff, sizeof first);
      count = first.sh_size;
    }
    if (eh.e_shoff + count * eh.e_shentsize > size) size = eh.e_shoff + count * eh.e_shentsize;
  }
  if (eh.e_phoff && eh.e_phnum) {
    if (eh.e_phentsize != sizeof(Elf64_Phdr)) return 0;
    uint64_t end = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
    if (end > size) size = end;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
      Elf64_Phdr ph;
      memcpy(&ph, b + eh.e_phoff + (uint64_t)i * eh.e_phentsize, sizeof ph);
      if (ph.p_offset + ph.p_filesz > size) size = ph.p_offset + ph.p_filesz;
    }
  }
  if (size > ((uint64_t)1 << 34)) return 0;
  return (size_t)size;
}

static CUresult module_load(CUmodule *out, const void *image) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  size_t size = image_size(image);
  if (!size) return CUDA_ERROR_INVALID_IMAGE;
  const char *dir = getenv("TMPDIR");
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/xlac-fake-cuda-XXXXXX", dir && *dir ? dir : "/tmp") >=
      (int)sizeof path)
    return CUDA_ERROR_OPERATING_SYSTEM;
  int fd = mkstemp(path);
  if (fd < 0) {
    warn("cuModuleLoadData: cannot create a file like %s", path);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  const unsigned char *b = image;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, b + done, size - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  close(fd);
  void *handle = done == size ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (done == size && !handle) warn("cuModuleLoadData: dlopen failed: %s", dlerror());
  unlink(path);
  if (done != size) return CUDA_ERROR_OPERATING_SYSTEM;
  if (!handle) return CUDA_ERROR_INVALID_IMAGE;
  struct CUmod_st *m = calloc(1, sizeof *m);
  struct xlac_emu_state *state = calloc(1, sizeof *state);
  if (!m || !state) {
    free(m);
    free(state);
    dlclose(handle);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  state->barrier = barrier;
  struct xlac_emu_state **slot = dlsym(handle, "xlac_emu_state");
  if (slot) *slot = state;
  m->handle = handle;
  m->state = state;
  m->ctx = current;
  m->next = modules;
  modules = m;
  *out = m;
  return CUDA_SUCCESS;
}

static struct CUmod_st *find_module(CUmodule m) {
  for (struct CUmod_st *k = modules; k; k = k->next)
    if (k == m) return k;
  return NULL;
}

static CUresult module_unload(CUmodule m) {
  for (struct CUmod_st **at = &modules; *at; at = &(*at)->next)
    if (*at == m) {
      *at = m->next;
      unload(m);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult module_function(CUfunction *out, CUmodule m, const char *name) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!find_module(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (struct CUfunc_st *f = m->functions; f; f = f->next)
    if (!strcmp(f->name, name)) {
      *out = f;
      return CUDA_SUCCESS;
    }
  size_t len = strlen(name);
  char *symbol = malloc(len + sizeof "__emu");
  if (!symbol) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(symbol, name, len);
  memcpy(symbol + len, "__emu", sizeof "__emu");
  void *address = dlsym(m->handle, symbol);
  free(symbol);
  if (!address) return CUDA_ERROR_NOT_FOUND;
  struct CUfunc_st *f = malloc(sizeof *f + len + 1);
  if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(&f->entry, &address, sizeof f->entry);  /* POSIX: dlsym's result is callable */
  memcpy(f->name, name, len + 1);
  f->module = m;
  f->next = m->functions;
  m->functions = f;
  *out = f;
  return CUDA_SUCCESS;
}

static int is_function(CUfunction f) {
  for (struct CUmod_st *m = modules; m; m = m->next)
    for (struct CUfunc_st *k = m->functions; k; k = k->next)
      if (k == f) return 1;
  return 0;
}

/* ---- launches ---------------------------------------------------------------------- */

enum { READY, RUNNING, WAITING, DONE };

static struct {
  int active;
  ucontext_t scheduler;
  ucontext_t *fibers;            /* MAX_THREADS of them */
  unsigned char *stacks[MAX_THREADS];
  unsigned char status[MAX_THREADS];
  int stacks_made;
  int cur;
  emu_kernel entry;
  void **params;
  struct xlac_emu_state *state;
  unsigned char *shared_end;     /* dynamic shared memory ends at a guard page */
} run;

static void barrier(void) {
  if (!run.active) return;
  int me = run.cur;
  run.status[me] = WAITING;
  swapcontext(&run.fibers[me], &run.scheduler);
}

static void fiber_main(void) {
  int me = run.cur;
  run.entry(run.params);
  run.status[me] = DONE;
  /* returns to uc_link: the scheduler */
}

static CUresult make_fibers(int threads) {
  size_t page = page_bytes();
  if (!run.fibers) {
    run.fibers = calloc(MAX_THREADS, sizeof *run.fibers);
    if (!run.fibers) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!run.shared_end) {
    size_t bytes = round_to(MAX_SHARED, page);
    unsigned char *shared = mmap(NULL, bytes + page, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    if (mprotect(shared + bytes, page, PROT_NONE)) {
      munmap(shared, bytes + page);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    run.shared_end = shared + bytes;
  }
  while (run.stacks_made < threads) {
    void *s = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    mprotect(s, page, PROT_NONE);  /* stacks grow down: an overflow faults */
    run.stacks[run.stacks_made] = s;
    if (getcontext(&run.fibers[run.stacks_made])) return CUDA_ERROR_OPERATING_SYSTEM;
    run.stacks_made++;
  }
  return CUDA_SUCCESS;
}

/* One block; 0, or how many threads returned while others wait at a barrier. */
static int run_block(int threads, int reverse, const unsigned *block) {
  size_t page = page_bytes();
  for (int i = 0; i < threads; i++) {
    ucontext_t *u = &run.fibers[i];
    u->uc_stack.ss_sp = run.stacks[i] + page;
    u->uc_stack.ss_size = STACK_BYTES;
    u->uc_link = &run.scheduler;
    makecontext(u, fiber_main, 0);
    run.status[i] = READY;
  }
  struct xlac_emu_state *st = run.state;
  for (;;) {
    for (int k = 0; k < threads; k++) {
      int i = reverse ? threads - 1 - k : k;
      if (run.status[i] != READY) continue;
      st->tid[0] = (uint32_t)i % block[0];
      st->tid[1] = (uint32_t)i / block[0] % block[1];
      st->tid[2] = (uint32_t)i / (block[0] * block[1]);
      run.cur = i;
      run.status[i] = RUNNING;
      swapcontext(&run.scheduler, &run.fibers[i]);
    }
    /* Every thread now waits at the barrier or has returned. */
    int done = 0;
    for (int i = 0; i < threads; i++) done += run.status[i] == DONE;
    if (done == threads) return 0;
    if (done) return done;                                     /* a divergent barrier */
    for (int i = 0; i < threads; i++) run.status[i] = READY;  /* all waited: release */
  }
}

/* A kernel that wrote past the end of an allocation, into its last 256 bytes. */
static struct alloc *overrun(CUcontext c) {
  for (struct alloc *a = allocs; a; a = a->next) {
    if (a->ctx != c) continue;
    for (size_t i = a->size; i < a->rounded; i++)
      if (a->ptr[i] != CANARY) {
        memset(a->ptr + a->size, CANARY, a->rounded - a->size);
        return a;
      }
  }
  return NULL;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shared, CUstream stream,
                       void **params, void **extra) {
  if (!is_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (!stream_ok(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (extra) return CUDA_ERROR_INVALID_VALUE;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if (gx > 2147483647u || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (bx > 1024 || by > 1024 || bz > 64) return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned long long)bx * by * bz > MAX_THREADS) return CUDA_ERROR_INVALID_VALUE;
  if (shared > MAX_SHARED) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  int threads = (int)(bx * by * bz);
  CUresult r = make_fibers(threads);
  if (r) return r;
  const char *order = getenv("XLAC_FAKE_CUDA_ORDER");
  int reverse = order && !strcmp(order, "reverse");
  if (order && *order && !reverse && strcmp(order, "forward"))
    warn("ignoring XLAC_FAKE_CUDA_ORDER=%s (want forward or reverse)", order);
  struct xlac_emu_state *st = f->module->state;
  const unsigned block[3] = {bx, by, bz};
  st->ntid[0] = bx, st->ntid[1] = by, st->ntid[2] = bz;
  st->nctaid[0] = gx, st->nctaid[1] = gy, st->nctaid[2] = gz;
  unsigned char *dynamic = run.shared_end - round_to(shared, 16);
  st->dynamic_shared = dynamic;
  run.entry = f->entry;
  run.params = params;
  run.state = st;
  run.active = 1;
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        st->ctaid[0] = x, st->ctaid[1] = y, st->ctaid[2] = z;
        memset(dynamic, 0xCD, shared);
        int returned = run_block(threads, reverse, block);
        if (returned) {
          run.active = 0;
          fprintf(stderr,
                  "fake libcuda: kernel %s: divergent barrier in block (%u,%u,%u): %d of %d "
                  "threads returned while the others wait at a barrier "
                  "(CUDA_ERROR_LAUNCH_FAILED)\n", f->name, x, y, z, returned, threads);
          fflush(stderr);
          current->sticky = CUDA_ERROR_LAUNCH_FAILED;
          return CUDA_ERROR_LAUNCH_FAILED;
        }
      }
  run.active = 0;
  struct alloc *a = overrun(current);
  if (a) {
    fprintf(stderr, "fake libcuda: kernel %s wrote past the end of the %zu-byte allocation at "
            "%p (CUDA_ERROR_ILLEGAL_ADDRESS)\n", f->name, a->size, (void *)a->ptr);
    fflush(stderr);
    current->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  log_line("launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u\n", f->name, gx, gy, gz, bx, by,
           bz, shared);
  return CUDA_SUCCESS;
}

/* ---- streams ----------------------------------------------------------------------- */

static CUresult stream_create(CUstream *out, unsigned flags) {
  if (!out || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st *s = malloc(sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = current;
  s->next = streams;
  streams = s;
  *out = s;
  return CUDA_SUCCESS;
}

static CUresult stream_destroy(CUstream s) {
  for (struct CUstream_st **at = &streams; *at; at = &(*at)->next)
    if (*at == s) {
      *at = s->next;
      free(s);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_HANDLE;
}

/* ---- small queries ----------------------------------------------------------------- */

static CUresult driver_version(int *out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  long v = env_long("XLAC_FAKE_CUDA_VERSION", 12080);
  *out = v > INT_MAX || v < INT_MIN ? 12080 : (int)v;
  return CUDA_SUCCESS;
}

static CUresult device_get(CUdevice *out, int ordinal) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *out = ordinal;
  return CUDA_SUCCESS;
}

static CUresult device_count_of(int *out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = device_count();
  return CUDA_SUCCESS;
}

static CUresult device_name(char *name, int len, CUdevice dev) {
  if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "xlac fake CUDA device %d (host emulation)", dev);
  return CUDA_SUCCESS;
}

static CUresult device_attribute(int *out, int attribute, CUdevice dev) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  int v;
  switch (attribute) {
    case 1: v = MAX_THREADS; break;        /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: v = 1024; break;       /* MAX_BLOCK_DIM_X, _Y */
    case 4: v = 64; break;                 /* MAX_BLOCK_DIM_Z */
    case 5: v = 2147483647; break;         /* MAX_GRID_DIM_X */
    case 6: case 7: v = 65535; break;      /* MAX_GRID_DIM_Y, _Z */
    case 8: v = MAX_SHARED; break;         /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 10: v = 32; break;                /* WARP_SIZE */
    case 16: v = 4; break;                 /* MULTIPROCESSOR_COUNT */
    case 75: v = 8; break;                 /* COMPUTE_CAPABILITY_MAJOR */
    case 76: v = 0; break;                 /* COMPUTE_CAPABILITY_MINOR */
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  *out = v;
  return CUDA_SUCCESS;
}

static CUresult error_text(CUresult code, const char **out, int name) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  int i = error_index(code);
  *out = i < 0 ? NULL : name ? errors[i].name : errors[i].text;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult init(unsigned flags) {
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  initialized = 1;
  return CUDA_SUCCESS;
}

/* ---- the exported API ---------------------------------------------------------------- */

#define DEV(p) ((void *)(uintptr_t)(p))

CUresult cuInit(unsigned int Flags) { API(cuInit, 0, init(Flags)); }

CUresult cuDriverGetVersion(int *driverVersion) {
  API(cuDriverGetVersion, 0, driver_version(driverVersion));
}

CUresult cuDeviceGetCount(int *count) { API(cuDeviceGetCount, NEED_INIT, device_count_of(count)); }

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  API(cuDeviceGet, NEED_INIT, device_get(device, ordinal));
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  API(cuDeviceGetName, NEED_INIT, device_name(name, len, dev));
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  API(cuDeviceGetAttribute, NEED_INIT, device_attribute(pi, (int)attrib, dev));
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  API(cuDevicePrimaryCtxRetain, NEED_INIT, retain(pctx, dev));
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  API(cuDevicePrimaryCtxRelease_v2, NEED_INIT, release(dev));
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) { API(cuCtxPushCurrent_v2, NEED_INIT, push(ctx)); }

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) { API(cuCtxPopCurrent_v2, NEED_INIT, pop(pctx)); }

CUresult cuCtxGetCurrent(CUcontext *pctx) { API(cuCtxGetCurrent, NEED_INIT, get_current(pctx)); }

CUresult cuCtxSetCurrent(CUcontext ctx) { API(cuCtxSetCurrent, NEED_INIT, set_current(ctx)); }

CUresult cuCtxSynchronize(void) { API(cuCtxSynchronize, NEED_INIT | NEED_CTX, CUDA_SUCCESS); }

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  API(cuModuleLoadData, NEED_INIT | NEED_CTX, module_load(module, image));
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues) {
  API(cuModuleLoadDataEx, NEED_INIT | NEED_CTX,
      numOptions && (!options || !optionValues) ? CUDA_ERROR_INVALID_VALUE
                                                : module_load(module, image));
}

CUresult cuModuleUnload(CUmodule hmod) {
  API(cuModuleUnload, NEED_INIT | NEED_CTX, module_unload(hmod));
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  API(cuModuleGetFunction, NEED_INIT | NEED_CTX, module_function(hfunc, hmod, name));
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  API(cuMemAlloc_v2, NEED_INIT | NEED_CTX, mem_alloc(dptr, bytesize));
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  API(cuMemFree_v2, NEED_INIT | NEED_CTX, mem_free(dptr));
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  API(cuMemcpyHtoD_v2, NEED_INIT | NEED_CTX,
      copy(FN_cuMemcpyHtoD_v2, HTOD, DEV(dstDevice), srcHost, ByteCount, NULL, 0));
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  API(cuMemcpyDtoH_v2, NEED_INIT | NEED_CTX,
      copy(FN_cuMemcpyDtoH_v2, DTOH, dstHost, DEV(srcDevice), ByteCount, NULL, 0));
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  API(cuMemcpyDtoD_v2, NEED_INIT | NEED_CTX,
      copy(FN_cuMemcpyDtoD_v2, DTOD, DEV(dstDevice), DEV(srcDevice), ByteCount, NULL, 0));
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream) {
  API(cuMemcpyHtoDAsync_v2, NEED_INIT | NEED_CTX,
      copy(FN_cuMemcpyHtoDAsync_v2, HTOD, DEV(dstDevice), srcHost, ByteCount, hStream, 1));
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  API(cuMemcpyDtoHAsync_v2, NEED_INIT | NEED_CTX,
      copy(FN_cuMemcpyDtoHAsync_v2, DTOH, dstHost, DEV(srcDevice), ByteCount, hStream, 1));
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  API(cuMemcpyDtoDAsync_v2, NEED_INIT | NEED_CTX,
      copy(FN_cuMemcpyDtoDAsync_v2, DTOD, DEV(dstDevice), DEV(srcDevice), ByteCount, hStream,
           1));
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  API(cuMemsetD8_v2, NEED_INIT | NEED_CTX, memset8(FN_cuMemsetD8_v2, dstDevice, uc, N, NULL, 0));
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  API(cuMemsetD8Async, NEED_INIT | NEED_CTX,
      memset8(FN_cuMemsetD8Async, dstDevice, uc, N, hStream, 1));
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
  API(cuLaunchKernel, NEED_INIT | NEED_CTX,
      launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
             hStream, kernelParams, extra));
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  API(cuStreamCreate, NEED_INIT | NEED_CTX, stream_create(phStream, Flags));
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  API(cuStreamDestroy_v2, NEED_INIT | NEED_CTX, stream_destroy(hStream));
}

CUresult cuStreamSynchronize(CUstream hStream) {
  API(cuStreamSynchronize, NEED_INIT | NEED_CTX,
      stream_ok(hStream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
  API(cuGetErrorString, 0, error_text(error, pStr, 0));
}

CUresult cuGetErrorName(CUresult error, const char **pStr) {
  API(cuGetErrorName, 0, error_text(error, pStr, 1));
}

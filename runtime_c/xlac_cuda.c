/* xlac CUDA runtime: runs an xlac_cuda_program through the CUDA driver API, loaded
 * with dlopen at run time (xlac_cuda.h). C99 plus dlopen; link with -ldl where the C
 * library keeps it apart. XLAC_CUDA_DRIVER names another driver library to load
 * instead of libcuda.so.1 (a non-standard install, or the tests' stand-in driver). */
#include "xlac_cuda.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;   /* unsigned long long in cuda.h: the same 64 bits */

/* The driver functions, in ctx->fn's order. */
enum {
  F_INIT, F_DRIVER_VERSION, F_DEVICE_GET, F_DEVICE_ATTRIBUTE, F_CTX_RETAIN, F_CTX_RELEASE,
  F_CTX_PUSH, F_CTX_POP, F_MODULE_LOAD, F_MODULE_UNLOAD, F_MODULE_FUNCTION, F_MEM_ALLOC,
  F_MEM_FREE, F_HTOD, F_DTOH_ASYNC, F_HTOD_ASYNC, F_DTOD_ASYNC, F_LAUNCH,
  F_STREAM_SYNC, F_COUNT
};

static const char *const FUNCTION_NAMES[F_COUNT] = {
  "cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetAttribute",
  "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2",
  "cuCtxPopCurrent_v2", "cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction",
  "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoHAsync_v2",
  "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoDAsync_v2", "cuLaunchKernel", "cuStreamSynchronize"
};

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*version_fn)(int *);
typedef CUresult (*device_get_fn)(int *, int);
typedef CUresult (*attribute_fn)(int *, int, int);
typedef CUresult (*retain_fn)(void **, int);
typedef CUresult (*release_fn)(int);
typedef CUresult (*push_fn)(void *);
typedef CUresult (*pop_fn)(void **);
typedef CUresult (*load_fn)(void **, const void *);
typedef CUresult (*unload_fn)(void *);
typedef CUresult (*function_fn)(void **, void *, const char *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_async_fn)(void *, CUdeviceptr, size_t, void *);
typedef CUresult (*htod_async_fn)(CUdeviceptr, const void *, size_t, void *);
typedef CUresult (*dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, void *);
typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, void *, void **, void **);
typedef CUresult (*sync_fn)(void *);

#define CALL(ctx, type, f) ((type)(ctx)->fn[f])

/* CUresult values the statuses distinguish (cuda.h's numbers). */
enum {
  CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36, CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803
};
enum { ATTRIBUTE_CC_MAJOR = 75, ATTRIBUTE_CC_MINOR = 76 };

static int failed(xlac_cuda_ctx *ctx, CUresult r) {
  ctx->driver_error = r;
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return XLAC_ERROR_CUDA_OUT_OF_MEMORY;
    /* The stub libcuda of a toolkit without a driver behind it: no device to run on. */
    case CUDA_ERROR_NO_DEVICE: case CUDA_ERROR_INVALID_DEVICE: case CUDA_ERROR_STUB_LIBRARY:
      return XLAC_ERROR_CUDA_NO_DEVICE;
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER: case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return XLAC_ERROR_CUDA_DRIVER_TOO_OLD;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return XLAC_ERROR_CUDA_DEVICE_TOO_OLD;
    default: return XLAC_ERROR_CUDA_DRIVER;
  }
}

#define CHECK(ctx, call) do { CUresult r_ = (call); if (r_) return failed(ctx, r_); } while (0)

static void **kernels_of(xlac_cuda_ctx *ctx) { return (void **)(ctx + 1); }

static uint64_t round_up(uint64_t n) { return (n + 255) & ~(uint64_t)255; }

/* NAME_run_cuda's device buffers: the arena, then each input and output, 256-aligned. */
static uint64_t staging_bytes(const xlac_cuda_program *p) {
  uint64_t n = round_up(p->arena_bytes);
  for (int32_t i = 0; i < p->input_count; i++) n += round_up(p->input_bytes[i]);
  for (int32_t i = 0; i < p->output_count; i++) n += round_up(p->output_bytes[i]);
  return n;
}

static int load_driver(xlac_cuda_ctx *ctx) {
  const char *path = getenv("XLAC_CUDA_DRIVER");
  ctx->driver = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!ctx->driver) return XLAC_ERROR_CUDA_NO_DRIVER;
  for (int f = 0; f < F_COUNT; f++) {
    /* POSIX guarantees dlsym's result converts to a function pointer; ISO C has no
       cast for it, so the bits are copied. */
    void *symbol = dlsym(ctx->driver, FUNCTION_NAMES[f]);
    memcpy(&ctx->fn[f], &symbol, sizeof symbol);
    if (!symbol) {
      dlclose(ctx->driver);
      ctx->driver = NULL;
      return XLAC_ERROR_CUDA_DRIVER_TOO_OLD;
    }
  }
  return XLAC_OK;
}

static int load_module(xlac_cuda_ctx *ctx, const xlac_cuda_program *p) {
  /* The cubin where it is for this device; else the PTX, which the driver compiles. */
  if (p->image && CALL(ctx, load_fn, F_MODULE_LOAD)(&ctx->module, p->image) == 0) return 0;
  ctx->module = NULL;
  return CALL(ctx, load_fn, F_MODULE_LOAD)(&ctx->module, p->ptx);
}

static int setup(xlac_cuda_ctx *ctx, const xlac_cuda_program *p, int32_t device) {
  int status = load_driver(ctx);
  if (status) return status;
  CHECK(ctx, CALL(ctx, init_fn, F_INIT)(0));
  int version = 0, major = 0, minor = 0, dev = 0;
  CHECK(ctx, CALL(ctx, version_fn, F_DRIVER_VERSION)(&version));
  if (version < p->driver) return XLAC_ERROR_CUDA_DRIVER_TOO_OLD;
  CHECK(ctx, CALL(ctx, device_get_fn, F_DEVICE_GET)(&dev, device));
  CHECK(ctx, CALL(ctx, attribute_fn, F_DEVICE_ATTRIBUTE)(&major, ATTRIBUTE_CC_MAJOR, dev));
  CHECK(ctx, CALL(ctx, attribute_fn, F_DEVICE_ATTRIBUTE)(&minor, ATTRIBUTE_CC_MINOR, dev));
  if (major * 10 + minor < p->compute) return XLAC_ERROR_CUDA_DEVICE_TOO_OLD;
  ctx->device = dev;
  CHECK(ctx, CALL(ctx, retain_fn, F_CTX_RETAIN)(&ctx->context, dev));
  CHECK(ctx, CALL(ctx, push_fn, F_CTX_PUSH)(ctx->context));
  void *popped;
  CUresult r = load_module(ctx, p);
  const char *name = p->kernel_names;
  for (int32_t k = 0; r == 0 && k < p->kernel_count; k++) {
    r = CALL(ctx, function_fn, F_MODULE_FUNCTION)(&kernels_of(ctx)[k], ctx->module, name);
    name += strlen(name) + 1;
  }
  if (r == 0 && p->weights_bytes) {
    r = CALL(ctx, alloc_fn, F_MEM_ALLOC)(&ctx->weights, p->weights_bytes);
    if (r == 0) r = CALL(ctx, htod_fn, F_HTOD)(ctx->weights, p->weights, p->weights_bytes);
  }
  if (r == 0 && staging_bytes(p))   /* the driver refuses to allocate 0 bytes */
    r = CALL(ctx, alloc_fn, F_MEM_ALLOC)(&ctx->staging, staging_bytes(p));
  CALL(ctx, pop_fn, F_CTX_POP)(&popped);
  if (r) return failed(ctx, r);
  return XLAC_OK;
}

int xlac_cuda_init(xlac_cuda_ctx *ctx, const xlac_cuda_program *program, int32_t device) {
  if (!ctx || !program) return XLAC_ERROR_NULL_ARGUMENT;
  memset(ctx, 0, sizeof *ctx);
  ctx->kernel_count = program->kernel_count;
  memset(kernels_of(ctx), 0, sizeof(void *) * (size_t)program->kernel_count);
  int status = setup(ctx, program, device);
  if (status) {
    int error = ctx->driver_error;
    xlac_cuda_release(ctx);
    ctx->driver_error = error;
    return status;
  }
  ctx->ready = 1;
  return XLAC_OK;
}

void xlac_cuda_release(xlac_cuda_ctx *ctx) {
  if (!ctx || !ctx->driver) return;
  if (ctx->context) {
    void *popped;
    if (CALL(ctx, push_fn, F_CTX_PUSH)(ctx->context) == 0) {
      if (ctx->staging) CALL(ctx, free_fn, F_MEM_FREE)(ctx->staging);
      if (ctx->weights) CALL(ctx, free_fn, F_MEM_FREE)(ctx->weights);
      if (ctx->module) CALL(ctx, unload_fn, F_MODULE_UNLOAD)(ctx->module);
      CALL(ctx, pop_fn, F_CTX_POP)(&popped);
    }
    CALL(ctx, release_fn, F_CTX_RELEASE)(ctx->device);
  }
  dlclose(ctx->driver);
  int kernels = ctx->kernel_count;
  memset(ctx, 0, sizeof *ctx);
  memset(kernels_of(ctx), 0, sizeof(void *) * (size_t)kernels);
}

int xlac_cuda_driver_error(const xlac_cuda_ctx *ctx) { return ctx ? ctx->driver_error : 0; }

size_t xlac_cuda_ctx_size(const xlac_cuda_program *program) {
  return sizeof(xlac_cuda_ctx) + sizeof(void *) * (size_t)program->kernel_count;
}

typedef struct {
  xlac_cuda_ctx *ctx;
  const xlac_cuda_program *p;
  const uint64_t *inputs, *outputs;
  uint64_t arena;
  void *stream;
} run_state;

static uint64_t address(const run_state *s, const xlac_cuda_arg *a) {
  switch (a->space) {
    case XLAC_CUDA_ARENA: return s->arena + a->offset;
    case XLAC_CUDA_INPUT: return s->inputs[a->index] + a->offset;
    case XLAC_CUDA_OUTPUT: return s->outputs[a->index] + a->offset;
    default: return s->ctx->weights + a->offset;
  }
}

/* The bytes at a device argument, read back to the host (a loop's predicate, a
   branch index): the stream waits for them. */
static CUresult read_back(const run_state *s, const xlac_cuda_arg *a, void *to, size_t n) {
  CUresult r = CALL(s->ctx, dtoh_async_fn, F_DTOH_ASYNC)(to, address(s, a), n, s->stream);
  return r ? r : CALL(s->ctx, sync_fn, F_STREAM_SYNC)(s->stream);
}

static CUresult run_range(const run_state *s, int32_t range);

static CUresult run_step(const run_state *s, const xlac_cuda_step *st) {
  const xlac_cuda_program *p = s->p;
  const xlac_cuda_arg *args = p->args;
  xlac_cuda_ctx *ctx = s->ctx;
  switch (st->op) {
    case XLAC_CUDA_LAUNCH: {
      uint64_t values[XLAC_CUDA_MAX_ARGS];
      void *params[XLAC_CUDA_MAX_ARGS];
      for (int32_t i = 0; i < st->c; i++) {
        values[i] = address(s, &args[st->b + i]);
        params[i] = &values[i];
      }
      return CALL(ctx, launch_fn, F_LAUNCH)(kernels_of(ctx)[st->a], (unsigned)st->d, 1, 1,
                                            (unsigned)st->e, 1, 1, 0, s->stream, params, NULL);
    }
    case XLAC_CUDA_COPY:
      return CALL(ctx, dtod_async_fn, F_DTOD_ASYNC)(address(s, &args[st->b]),
                                                    address(s, &args[st->b + 1]),
                                                    (size_t)st->bytes, s->stream);
    case XLAC_CUDA_WHILE:
      for (;;) {
        unsigned char pred = 0;
        CUresult r = run_range(s, st->b);
        if (!r) r = read_back(s, &args[st->a], &pred, 1);
        if (r) return r;
        if (!pred) return 0;
        r = run_range(s, st->c);
        if (r) return r;
      }
    case XLAC_CUDA_IF: {
      unsigned char pred = 0;
      CUresult r = read_back(s, &args[st->a], &pred, 1);
      return r ? r : run_range(s, st->b + (pred ? 0 : 1));
    }
    default: {   /* XLAC_CUDA_SWITCH */
      int32_t i = 0;
      CUresult r = read_back(s, &args[st->a], &i, 4);
      if (r) return r;
      return run_range(s, st->b + (i >= 0 && i < st->c - 1 ? i : st->c - 1));
    }
  }
}

static CUresult run_range(const run_state *s, int32_t range) {
  const xlac_cuda_range *r = &s->p->ranges[range];
  for (int32_t k = 0; k < r->count; k++) {
    CUresult e = run_step(s, &s->p->steps[r->first + k]);
    if (e) return e;
  }
  return 0;
}

static int run(xlac_cuda_ctx *ctx, const xlac_cuda_program *p, const uint64_t *inputs,
               const uint64_t *outputs, uint64_t arena, void *stream) {
  run_state s = {ctx, p, inputs, outputs, arena, stream};
  return run_range(&s, 0);
}

int xlac_cuda_run_device(xlac_cuda_ctx *ctx, const xlac_cuda_program *program,
                         const uint64_t *inputs, const uint64_t *outputs, uint64_t arena,
                         void *stream) {
  if (!ctx || !program || (!inputs && program->input_count) ||
      (!outputs && program->output_count) || (!arena && program->arena_bytes))
    return XLAC_ERROR_NULL_ARGUMENT;
  if (!ctx->ready) return XLAC_ERROR_CUDA_NOT_INITIALIZED;
  if (arena % 256) return XLAC_ERROR_ARENA_ALIGNMENT;
  void *popped;
  CHECK(ctx, CALL(ctx, push_fn, F_CTX_PUSH)(ctx->context));
  CUresult r = run(ctx, program, inputs, outputs, arena, stream);
  CALL(ctx, pop_fn, F_CTX_POP)(&popped);
  return r ? failed(ctx, r) : XLAC_OK;
}

int xlac_cuda_run_host(xlac_cuda_ctx *ctx, const xlac_cuda_program *program,
                       const void *const *inputs, void *const *outputs) {
  if (!ctx || !program || (!inputs && program->input_count) ||
      (!outputs && program->output_count))
    return XLAC_ERROR_NULL_ARGUMENT;
  if (!ctx->ready) return XLAC_ERROR_CUDA_NOT_INITIALIZED;
  uint64_t in[XLAC_CUDA_MAX_ARGS], out[XLAC_CUDA_MAX_ARGS];
  if (program->input_count > XLAC_CUDA_MAX_ARGS || program->output_count > XLAC_CUDA_MAX_ARGS)
    return XLAC_ERROR_NULL_ARGUMENT;
  uint64_t at = ctx->staging + round_up(program->arena_bytes);
  for (int32_t i = 0; i < program->input_count; i++) {
    in[i] = at;
    at += round_up(program->input_bytes[i]);
  }
  for (int32_t i = 0; i < program->output_count; i++) {
    out[i] = at;
    at += round_up(program->output_bytes[i]);
  }
  void *popped;
  CHECK(ctx, CALL(ctx, push_fn, F_CTX_PUSH)(ctx->context));
  CUresult r = 0;
  for (int32_t i = 0; !r && i < program->input_count; i++)
    if (program->input_bytes[i])
      r = CALL(ctx, htod_async_fn, F_HTOD_ASYNC)(in[i], inputs[i], program->input_bytes[i],
                                                 NULL);
  if (!r) r = run(ctx, program, in, out, ctx->staging, NULL);
  for (int32_t i = 0; !r && i < program->output_count; i++)
    if (program->output_bytes[i])
      r = CALL(ctx, dtoh_async_fn, F_DTOH_ASYNC)(outputs[i], out[i],
                                                 program->output_bytes[i], NULL);
  if (!r) r = CALL(ctx, sync_fn, F_STREAM_SYNC)(NULL);
  CALL(ctx, pop_fn, F_CTX_POP)(&popped);
  return r ? failed(ctx, r) : XLAC_OK;
}

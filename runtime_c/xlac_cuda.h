/* xlac CUDA runtime: what an object compiled with --target cuda and its caller share.
 *
 * C99. The object holds the model's kernels (PTX, and a cubin where ptxas was found at
 * compile time), its weights and a program: the launches, copies and control flow of
 * one run. xlac_cuda.c carries the program out through the CUDA driver API, which it
 * loads with dlopen("libcuda.so.1") at run time: nothing here needs CUDA's headers or
 * libraries to build and link, and on a machine without a driver or a device the
 * entries return a status (xlac_status_string says which).
 *
 * The model header (NAME.h) declares NAME_cuda_ctx, which begins with an
 * xlac_cuda_ctx, and the entries NAME_cuda_init, NAME_run_device, NAME_run_cuda and
 * NAME_cuda_release that call the functions below with the model's program.
 * xlac's emitter reads this file's enums and structs (emitter/abi.py).
 */
#ifndef XLAC_CUDA_H
#define XLAC_CUDA_H

#include "xlac_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a kernel argument points into. */
typedef enum xlac_cuda_space {
  XLAC_CUDA_ARENA = 0,     /* the device arena, at offset */
  XLAC_CUDA_INPUT = 1,     /* input index, at offset */
  XLAC_CUDA_OUTPUT = 2,    /* output index, at offset */
  XLAC_CUDA_WEIGHTS = 3    /* the device copy of the weights, at offset */
} xlac_cuda_space;

/* One step of a program. */
typedef enum xlac_cuda_op {
  XLAC_CUDA_LAUNCH = 0,    /* kernel a with args[b .. b + c), grid d blocks of e threads */
  XLAC_CUDA_COPY = 1,      /* bytes from args[b + 1] to args[b] */
  XLAC_CUDA_WHILE = 2,     /* ranges[b] (the condition); while the pred at args[a] is
                              nonzero: ranges[c] (the body), then ranges[b] again */
  XLAC_CUDA_IF = 3,        /* the pred at args[a] picks ranges[b] (true) or ranges[b + 1] */
  XLAC_CUDA_SWITCH = 4     /* the int32 i at args[a] picks ranges[b + i], 0 <= i < c - 1;
                              any other i ranges[b + c - 1] */
} xlac_cuda_op;

typedef struct xlac_cuda_arg {
  int32_t space;           /* an xlac_cuda_space */
  int32_t index;
  uint64_t offset;
} xlac_cuda_arg;

typedef struct xlac_cuda_step {
  int32_t op;              /* an xlac_cuda_op */
  int32_t a;
  int32_t b;
  int32_t c;
  int32_t d;
  int32_t e;
  uint64_t bytes;
} xlac_cuda_step;

/* Steps first .. first + count - 1; ranges[0] is the whole run. */
typedef struct xlac_cuda_range {
  int32_t first;
  int32_t count;
} xlac_cuda_range;

typedef struct xlac_cuda_program {
  const char *name;
  const void *image;           /* loaded first where not NULL: a cubin (or a stand-in
                                  driver's image) */
  const char *ptx;             /* NUL-terminated PTX, which the driver compiles where the
                                  image is absent or not for this device */
  int32_t compute;             /* lowest compute capability, major * 10 + minor */
  int32_t driver;              /* lowest driver version (cuDriverGetVersion) for the PTX */
  int32_t kernel_count;
  int32_t arg_count;
  const char *kernel_names;    /* kernel_count NUL-terminated names, one after another */
  const xlac_cuda_step *steps;
  const xlac_cuda_range *ranges;
  const xlac_cuda_arg *args;
  const void *weights;         /* copied to the device by xlac_cuda_init */
  uint64_t weights_bytes;
  uint64_t arena_bytes;
  int32_t input_count;
  int32_t output_count;
  const uint64_t *input_bytes;
  const uint64_t *output_bytes;
} xlac_cuda_program;

/* The most driver functions xlac_cuda.c resolves, and the most arguments a kernel takes. */
#define XLAC_CUDA_DRIVER_FUNCTIONS 32
#define XLAC_CUDA_MAX_ARGS 256

/* A driver function, before xlac_cuda.c casts it to its type. */
typedef void (*xlac_cuda_fn)(void);

/* Owned by the caller (no mutable globals); xlac_cuda_init fills it. */
typedef struct xlac_cuda_ctx {
  void *driver;                              /* dlopen handle of libcuda.so.1 */
  xlac_cuda_fn fn[XLAC_CUDA_DRIVER_FUNCTIONS];   /* the driver functions, xlac_cuda.c's order */
  void *context;                             /* the device's primary context */
  void *module;
  uint64_t weights;                          /* device address of the weights */
  uint64_t staging;                          /* NAME_run_cuda's device buffers */
  int32_t device;
  int32_t driver_error;                      /* CUresult of the last failed driver call */
  int32_t ready;
  int32_t kernel_count;
} xlac_cuda_ctx;

/* ``ctx`` is followed in memory by program->kernel_count kernel handles (NAME_cuda_ctx),
   xlac_cuda_ctx_size(program) bytes in all. */
size_t xlac_cuda_ctx_size(const xlac_cuda_program *program);
int xlac_cuda_init(xlac_cuda_ctx *ctx, const xlac_cuda_program *program, int32_t device);
int xlac_cuda_run_device(xlac_cuda_ctx *ctx, const xlac_cuda_program *program,
                         const uint64_t *inputs, const uint64_t *outputs, uint64_t arena,
                         void *stream);
int xlac_cuda_run_host(xlac_cuda_ctx *ctx, const xlac_cuda_program *program,
                       const void *const *inputs, void *const *outputs);
void xlac_cuda_release(xlac_cuda_ctx *ctx);
/* The CUresult of the last driver call that failed (0: none). */
int xlac_cuda_driver_error(const xlac_cuda_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* XLAC_CUDA_H */

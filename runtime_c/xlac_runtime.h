/* xlac runtime: types shared by every compiled model and its callers.
 *
 * C99, no dependencies beyond <stdint.h> and <stddef.h>. A model's header
 * includes this file for the descriptor types; xlac_runtime.c holds the few
 * functions an object may call (see the model header's opening comment for
 * which, if any, that object needs).
 *
 * This file is the one definition of the ABI: xlac's emitter and loader read
 * its enums and structs (emitter/abi.py says the form they must keep).
 */
#ifndef XLAC_RUNTIME_H
#define XLAC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types; the numbering is part of the ABI (new types are appended).
   Every element takes whole bytes: the 4- and 2-bit types one byte each, with the
   value in the low bits (xlac ignores the bits above on input and writes them as 0);
   the float8/float4 types are their bit patterns (ml_dtypes' encodings). */
typedef enum xlac_dtype {
  XLAC_PRED = 0,
  XLAC_S8 = 1,
  XLAC_S16 = 2,
  XLAC_S32 = 3,
  XLAC_S64 = 4,
  XLAC_U8 = 5,
  XLAC_U16 = 6,
  XLAC_U32 = 7,
  XLAC_U64 = 8,
  XLAC_F16 = 9,
  XLAC_BF16 = 10,
  XLAC_F32 = 11,
  XLAC_F64 = 12,
  XLAC_S4 = 13,
  XLAC_U4 = 14,
  XLAC_S2 = 15,
  XLAC_U2 = 16,
  XLAC_F8E4M3FN = 17,
  XLAC_F8E4M3FNUZ = 18,
  XLAC_F8E5M2 = 19,
  XLAC_F8E5M2FNUZ = 20,
  XLAC_F4E2M1FN = 21,
  XLAC_F8E8M0FNU = 22
} xlac_dtype;

/* Status codes returned by NAME_run and NAME_run_v, and by the CUDA entries
   (xlac_cuda.h) where the driver or the device says no. */
typedef enum xlac_status {
  XLAC_OK = 0,
  XLAC_ERROR_NULL_ARGUMENT = 1,   /* an input, output or (non-empty) arena pointer is NULL */
  XLAC_ERROR_ARENA_ALIGNMENT = 2, /* the arena is not aligned to NAME_ARENA_ALIGN */
  XLAC_ERROR_CUDA_NO_DRIVER = 3,  /* libcuda.so.1 cannot be loaded (no NVIDIA driver) */
  XLAC_ERROR_CUDA_NO_DEVICE = 4,  /* no CUDA device, or none with the number asked for */
  XLAC_ERROR_CUDA_DRIVER_TOO_OLD = 5,  /* the driver predates the object's PTX version */
  XLAC_ERROR_CUDA_DEVICE_TOO_OLD = 6,  /* the device's compute capability is below the object's */
  XLAC_ERROR_CUDA_OUT_OF_MEMORY = 7,   /* device memory could not be allocated */
  XLAC_ERROR_CUDA_DRIVER = 8,     /* another driver error: xlac_cuda_driver_error(ctx) */
  XLAC_ERROR_CUDA_NOT_INITIALIZED = 9, /* the context was not initialized, or failed to */
  XLAC_ERROR_SIZE_OUT_OF_BOUNDS = 10   /* a run-time size is 0 or over its NAME_BOUND_ */
} xlac_status;

/* One input or output of a model. */
typedef struct xlac_tensor_info {
  const char *name;      /* name in the source model (ONNX tensor name) */
  const char *c_name;    /* the C identifier used in NAME_run's parameter list */
  int32_t dtype;         /* an xlac_dtype */
  int32_t rank;
  const int64_t *dims;   /* rank entries, row-major (C order) */
  uint64_t size_bytes;   /* bytes of the dense buffer */
} xlac_tensor_info;

/* What an input or output of the source model is in compiled code; the numbering is
   part of the ABI. A sequence's length and an optional's presence are fixed at compile
   time: a sequence is one tensor per element, an optional its content or nothing. */
typedef enum xlac_value_kind {
  XLAC_VALUE_TENSOR = 0,    /* one tensor */
  XLAC_VALUE_SEQUENCE = 1,  /* count tensors: elements 0 .. count - 1, in order */
  XLAC_VALUE_ABSENT = 2     /* an optional compiled empty: no tensor */
} xlac_value_kind;

/* One input or output of the source model over the tensors of xlac_model_info. */
typedef struct xlac_value_info {
  const char *name;      /* name in the source model */
  int32_t kind;          /* an xlac_value_kind */
  int32_t optional;      /* 1 where the model declares it an optional */
  int32_t first;         /* index of its first tensor in inputs / outputs */
  int32_t count;         /* its tensors: 1, a sequence's length, 0 when absent */
} xlac_value_info;

/* Everything a generic driver needs to call NAME_run_v. */
typedef struct xlac_model_info {
  const char *name;             /* NAME, the symbol prefix */
  const char *target_triple;    /* what the object was built for */
  const char *target_cpu;
  const char *target_features;
  uint64_t arena_size;          /* == NAME_ARENA_SIZE */
  uint64_t arena_align;         /* == NAME_ARENA_ALIGN */
  int32_t num_inputs;           /* tensors NAME_run_v takes and writes */
  int32_t num_outputs;
  const xlac_tensor_info *inputs;
  const xlac_tensor_info *outputs;
  /* The source model's inputs and outputs over those tensors (appended fields: a
     model of tensors only has one value per tensor). */
  int32_t num_input_values;
  int32_t num_output_values;
  const xlac_value_info *input_values;
  const xlac_value_info *output_values;
} xlac_model_info;

/* The caller's parallel-for, for NAME_run_parallel (models compiled with --parallel).
   The object starts no thread: it splits its big loops and kernels into tasks and
   hands them to parallel_for, which must run task(task_ctx, i) once for every i in
   0 .. n-1, on any threads in any order, and return when all have finished (the
   pthreadpool / XNNPACK convention). ``threads`` is the most tasks a step is split
   into; the arena must hold NAME_ARENA_SIZE_THREADS(threads) bytes. */
typedef struct xlac_threadpool {
  void (*parallel_for)(void *ctx, void (*task)(void *task_ctx, size_t i), void *task_ctx,
                       size_t n);
  void *ctx;         /* passed to parallel_for as its first argument */
  size_t threads;
} xlac_threadpool;

/* A pthreads pool of ``threads`` threads (the caller's and threads - 1 workers), from
   xlac_threadpool.c: compile that file with -pthread where threads exist; bare-metal
   builds leave it out. create returns NULL when threads is 0 or a thread cannot be
   started. One pool runs one parallel_for at a time (concurrent calls take turns). */
xlac_threadpool *xlac_threadpool_create(size_t threads);
void xlac_threadpool_destroy(xlac_threadpool *pool);

/* Helpers from xlac_runtime.c (optional for callers). */
const char *xlac_status_string(int status);
size_t xlac_dtype_size(int32_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* XLAC_RUNTIME_H */

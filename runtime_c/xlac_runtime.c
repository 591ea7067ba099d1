/* xlac runtime: the C functions objects and drivers may call. C99. */
#include "xlac_runtime.h"

const char *xlac_status_string(int status) {
  switch (status) {
    case XLAC_OK: return "ok";
    case XLAC_ERROR_NULL_ARGUMENT: return "a required pointer argument is NULL";
    case XLAC_ERROR_ARENA_ALIGNMENT: return "the arena is not aligned to NAME_ARENA_ALIGN";
    case XLAC_ERROR_CUDA_NO_DRIVER: return "the CUDA driver (libcuda.so.1) cannot be loaded";
    case XLAC_ERROR_CUDA_NO_DEVICE: return "no CUDA device with that number";
    case XLAC_ERROR_CUDA_DRIVER_TOO_OLD:
      return "the CUDA driver is older than the object's PTX needs";
    case XLAC_ERROR_CUDA_DEVICE_TOO_OLD:
      return "the CUDA device's compute capability is below the object's";
    case XLAC_ERROR_CUDA_OUT_OF_MEMORY: return "out of CUDA device memory";
    case XLAC_ERROR_CUDA_DRIVER: return "a CUDA driver call failed";
    case XLAC_ERROR_CUDA_NOT_INITIALIZED: return "the CUDA context is not initialized";
    case XLAC_ERROR_SIZE_OUT_OF_BOUNDS: return "a size is 0 or over its bound";
    default: return "unknown xlac status";
  }
}

size_t xlac_dtype_size(int32_t dtype) {
  switch (dtype) {
    case XLAC_PRED: case XLAC_S8: case XLAC_U8: return 1;
    case XLAC_S4: case XLAC_U4: case XLAC_S2: case XLAC_U2: return 1;
    case XLAC_F8E4M3FN: case XLAC_F8E4M3FNUZ: case XLAC_F8E5M2: case XLAC_F8E5M2FNUZ:
    case XLAC_F4E2M1FN: case XLAC_F8E8M0FNU: return 1;
    case XLAC_S16: case XLAC_U16: case XLAC_F16: case XLAC_BF16: return 2;
    case XLAC_S32: case XLAC_U32: case XLAC_F32: return 4;
    case XLAC_S64: case XLAC_U64: case XLAC_F64: return 8;
    default: return 0;
  }
}

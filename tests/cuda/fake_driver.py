"""The stand-in CUDA driver of the tests (fake_libcuda.c): build it, compile host "module
images" for it, and call it from Python with ctypes.

``build_fake_driver(cache_dir)`` compiles ``fake_libcuda.c`` into
``<cache_dir>/fake-libcuda-<hash>/libcuda.so.1`` (the hash covers the source and the flags,
so an edited source is rebuilt and an unchanged one is not) and returns that path; point
``XLAC_CUDA_DRIVER`` at it, or load it with :class:`FakeCuda`.

A module image for it is a host ELF shared object (see the comment at the top of
fake_libcuda.c): ``EMU_PRELUDE`` declares its ABI for images written by hand in C, and
``build_image`` compiles one.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_libcuda.c")
CC = "cc"
CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra")
LIBS = ("-ldl",)

# The image ABI, for kernels written by hand: kernel K is ``void K__emu(void **params)``.
EMU_PRELUDE = r"""
#include <stdint.h>
struct xlac_emu_state {
  uint32_t tid[3]; uint32_t ntid[3]; uint32_t ctaid[3]; uint32_t nctaid[3];
  void (*barrier)(void); void *dynamic_shared;
};
struct xlac_emu_state *xlac_emu_state;
#define EMU (*xlac_emu_state)
#define ARG(i, type) (*(type *)params[i])
"""


def _compile(source: Path, flags: tuple[str, ...], libs: tuple[str, ...], key_text: bytes,
             cache_dir: str | os.PathLike, prefix: str, name: str) -> Path:
    """``<cache_dir>/<prefix>-<hash>/<name>``: ``cc flags -o name source libs``, cached on
    the hash of ``key_text`` and the command."""
    command = (CC, *flags, *libs)
    key = hashlib.sha256(key_text + "\0".join(command).encode()).hexdigest()[:16]
    out_dir = Path(cache_dir) / f"{prefix}-{key}"
    out = out_dir / name
    if out.exists():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    # Compile to a private name, then rename: a concurrent build never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".build-", suffix=".so")
    os.close(fd)
    try:
        done = subprocess.run([CC, *flags, "-o", tmp, str(source), *libs],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{CC} failed building {name} from {source}:\n{done.stderr}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def build_fake_driver(cache_dir: str | os.PathLike) -> Path:
    """``<cache_dir>/fake-libcuda-<hash>/libcuda.so.1``, compiled from fake_libcuda.c with
    ``cc -shared -fPIC -O2 -Wall -Wextra -o libcuda.so.1 fake_libcuda.c -ldl`` unless it is
    already there (the hash covers the source and the command)."""
    return _compile(SOURCE, CFLAGS, LIBS, SOURCE.read_bytes(), cache_dir, "fake-libcuda",
                    "libcuda.so.1")


def build_image(c_source: str, cache_dir: str | os.PathLike) -> Path:
    """A module image (a host shared object) from C source that uses ``EMU_PRELUDE``'s ABI,
    cached in ``cache_dir``; its bytes are what cuModuleLoadData takes."""
    digest = hashlib.sha256(c_source.encode()).hexdigest()[:16]
    src = Path(cache_dir) / f"image-{digest}.c"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=src.parent, prefix=".src-", suffix=".c")
        with os.fdopen(fd, "w") as f:
            f.write(c_source)
        os.replace(tmp, src)
    return _compile(src, ("-shared", "-fPIC", "-O2"), (), c_source.encode(), cache_dir,
                    "image", "image.so")


class CudaError(RuntimeError):
    def __init__(self, function: str, code: int):
        super().__init__(f"{function} returned {code}")
        self.function = function
        self.code = code


_P = ctypes.c_void_p
_U = ctypes.c_uint
_PTR = ctypes.c_ulonglong   # CUdeviceptr
_SIZE = ctypes.c_size_t
_INT = ctypes.c_int
_STR = ctypes.c_char_p
_PSTR = ctypes.POINTER(ctypes.c_char_p)

SIGNATURES = {
    "cuInit": [_U],
    "cuDriverGetVersion": [ctypes.POINTER(_INT)],
    "cuDeviceGetCount": [ctypes.POINTER(_INT)],
    "cuDeviceGet": [ctypes.POINTER(_INT), _INT],
    "cuDeviceGetName": [ctypes.c_char_p, _INT, _INT],
    "cuDeviceGetAttribute": [ctypes.POINTER(_INT), _INT, _INT],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_P), _INT],
    "cuDevicePrimaryCtxRelease_v2": [_INT],
    "cuCtxPushCurrent_v2": [_P],
    "cuCtxPopCurrent_v2": [ctypes.POINTER(_P)],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuCtxSetCurrent": [_P],
    "cuCtxSynchronize": [],
    "cuModuleLoadData": [ctypes.POINTER(_P), _P],
    "cuModuleLoadDataEx": [ctypes.POINTER(_P), _P, _U, _P, _P],
    "cuModuleUnload": [_P],
    "cuModuleGetFunction": [ctypes.POINTER(_P), _P, _STR],
    "cuMemAlloc_v2": [ctypes.POINTER(_PTR), _SIZE],
    "cuMemFree_v2": [_PTR],
    "cuMemcpyHtoD_v2": [_PTR, _P, _SIZE],
    "cuMemcpyDtoH_v2": [_P, _PTR, _SIZE],
    "cuMemcpyDtoD_v2": [_PTR, _PTR, _SIZE],
    "cuMemcpyHtoDAsync_v2": [_PTR, _P, _SIZE, _P],
    "cuMemcpyDtoHAsync_v2": [_P, _PTR, _SIZE, _P],
    "cuMemcpyDtoDAsync_v2": [_PTR, _PTR, _SIZE, _P],
    "cuMemsetD8_v2": [_PTR, ctypes.c_ubyte, _SIZE],
    "cuMemsetD8Async": [_PTR, ctypes.c_ubyte, _SIZE, _P],
    "cuLaunchKernel": [_P, _U, _U, _U, _U, _U, _U, _U, _P, ctypes.POINTER(_P), _P],
    "cuStreamCreate": [ctypes.POINTER(_P), _U],
    "cuStreamDestroy_v2": [_P],
    "cuStreamSynchronize": [_P],
    "cuGetErrorString": [_INT, _PSTR],
    "cuGetErrorName": [_INT, _PSTR],
}


class FakeCuda:
    """The driver loaded with ctypes: ``self.lib.cuX(...)`` returns the CUresult; the
    helpers below raise :class:`CudaError` instead."""

    def __init__(self, path: str | os.PathLike):
        self.lib = ctypes.CDLL(str(path))
        for name, args in SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int

    def check(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code:
            raise CudaError(name, code)

    def setup(self, device: int = 0) -> int:
        """cuInit, retain device's primary context and push it; the context handle."""
        ctx = _P()
        self.check("cuInit", 0)
        self.check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), device)
        self.check("cuCtxPushCurrent_v2", ctx)
        return ctx.value

    def alloc(self, nbytes: int) -> int:
        ptr = _PTR()
        self.check("cuMemAlloc_v2", ctypes.byref(ptr), nbytes)
        return ptr.value

    def free(self, ptr: int) -> None:
        self.check("cuMemFree_v2", ptr)

    def htod(self, ptr: int, data: bytes) -> None:
        self.check("cuMemcpyHtoD_v2", ptr, data, len(data))

    def dtoh(self, ptr: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self.check("cuMemcpyDtoH_v2", buf, ptr, nbytes)
        return buf.raw

    def load(self, image: bytes) -> int:
        module = _P()
        self.check("cuModuleLoadData", ctypes.byref(module), image)
        return module.value

    def function(self, module: int, name: str) -> int:
        fn = _P()
        self.check("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
        return fn.value

    def launch(self, fn: int, grid, block, args=(), shared: int = 0, stream=None) -> int:
        """cuLaunchKernel's CUresult; ``args`` are ctypes values (c_uint64(ptr), ...)."""
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        params = (_P * max(1, len(args)))(*[ctypes.cast(ctypes.pointer(a), _P) for a in args])
        return self.lib.cuLaunchKernel(fn, *grid, *block, shared, stream, params, None)

"""The stand-in CUDA driver (fake_libcuda.c) that the CUDA backend's tests run kernels on:
its kernels-on-the-host ABI, barriers and thread orders, guarded device memory, error
injection and launch log. This process loads it once (the ``cuda`` fixture); tests that
need a fresh process (call counting, sticky errors, crashes) run a script in a subprocess.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fake_driver import (EMU_PRELUDE, SIGNATURES, SOURCE, FakeCuda, build_fake_driver,
                         build_image)

HERE = Path(__file__).resolve().parent

KERNELS = EMU_PRELUDE + r"""
/* Grid-stride c = a + b over n floats. */
void vadd__emu(void **params) {
  const float *a = ARG(0, const float *);
  const float *b = ARG(1, const float *);
  float *c = ARG(2, float *);
  uint32_t n = ARG(3, uint32_t);
  for (uint64_t i = (uint64_t)EMU.ctaid[0] * EMU.ntid[0] + EMU.tid[0]; i < n;
       i += (uint64_t)EMU.nctaid[0] * EMU.ntid[0])
    c[i] = a[i] + b[i];
}

/* Per thread, 12 words at its global linear number: tid before and after a barrier,
   ctaid, nctaid. */
void ids__emu(void **params) {
  uint32_t *out = ARG(0, uint32_t *);
  uint32_t before[3] = {EMU.tid[0], EMU.tid[1], EMU.tid[2]};
  EMU.barrier();
  uint32_t block = (EMU.ctaid[2] * EMU.nctaid[1] + EMU.ctaid[1]) * EMU.nctaid[0] + EMU.ctaid[0];
  uint32_t threads = EMU.ntid[0] * EMU.ntid[1] * EMU.ntid[2];
  uint32_t local = (EMU.tid[2] * EMU.ntid[1] + EMU.tid[1]) * EMU.ntid[0] + EMU.tid[0];
  uint32_t *o = out + 12 * (block * threads + local);
  for (int k = 0; k < 3; k++) {
    o[k] = before[k];
    o[3 + k] = EMU.tid[k];
    o[6 + k] = EMU.ctaid[k];
    o[9 + k] = EMU.nctaid[k];
  }
}

/* out[block] = the sum of the block's ntid.x inputs, by a tree reduction in dynamic shared
   memory (ntid.x a power of two); SYNC between the steps. */
#define BLOCK_SUM(name, SYNC)                                                   \
  void name##__emu(void **params) {                                             \
    const uint32_t *in = ARG(0, const uint32_t *);                              \
    uint32_t *out = ARG(1, uint32_t *);                                         \
    volatile uint32_t *sh = EMU.dynamic_shared;                                 \
    uint32_t t = EMU.tid[0], n = EMU.ntid[0];                                   \
    sh[t] = in[EMU.ctaid[0] * n + t];                                           \
    SYNC;                                                                       \
    for (uint32_t s = n / 2; s > 0; s >>= 1) {                                  \
      if (t < s) sh[t] += sh[t + s];                                            \
      SYNC;                                                                     \
    }                                                                           \
    if (t == 0) out[EMU.ctaid[0]] = sh[0];                                      \
  }
BLOCK_SUM(block_sum, EMU.barrier())
BLOCK_SUM(block_sum_racy, (void)0)

/* out[block * ntid.x + t] = dynamic shared byte t as the block found it; then scribbles. */
void shared_peek__emu(void **params) {
  uint8_t *out = ARG(0, uint8_t *);
  uint8_t *sh = EMU.dynamic_shared;
  uint32_t t = EMU.tid[0];
  out[EMU.ctaid[0] * EMU.ntid[0] + t] = sh[t];
  EMU.barrier();
  sh[t] = 0;
}

/* Odd threads return, even threads wait at a barrier. */
void diverge__emu(void **params) {
  (void)params;
  if (EMU.tid[0] % 2) return;
  EMU.barrier();
}

/* All meet at one barrier, then thread 0 alone waits at a second. */
void extra_barrier__emu(void **params) {
  (void)params;
  EMU.barrier();
  if (EMU.tid[0] == 0) EMU.barrier();
}

/* Thread 0 of block 0 stores 1.0f at p[i]. */
void poke__emu(void **params) {
  float *p = ARG(0, float *);
  uint64_t i = ARG(1, uint64_t);
  if (EMU.tid[0] == 0 && EMU.ctaid[0] == 0) p[i] = 1.0f;
}
"""

API = list(SIGNATURES)


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fake-cuda")


@pytest.fixture(scope="module")
def driver(build_dir) -> Path:
    return build_fake_driver(build_dir)


@pytest.fixture(scope="module")
def image(build_dir) -> bytes:
    return build_image(KERNELS, build_dir).read_bytes()


@pytest.fixture(scope="module")
def cuda(driver, image):
    """The driver in this process, initialised, device 0's primary context current, the
    kernels loaded: (FakeCuda, {kernel name: CUfunction})."""
    cu = FakeCuda(driver)
    cu.setup()
    module = cu.load(image)
    names = ["vadd", "ids", "block_sum", "block_sum_racy", "shared_peek", "poke"]
    return cu, {n: cu.function(module, n) for n in names}


def u64(v: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(v)


def run_script(driver: Path, image: bytes | None, body: str, env: dict | None = None,
               tmp_path: Path | None = None, argv: tuple = ()) -> subprocess.CompletedProcess:
    """``body`` in a fresh Python with ``cu`` (a FakeCuda of ``driver``), ``IMAGE`` (the
    kernels' bytes), ``u64`` and ``ARGV`` (``argv`` as strings) defined."""
    prelude = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {str(HERE)!r})
        from fake_driver import FakeCuda, CudaError
        cu = FakeCuda({str(driver)!r})
        IMAGE = open(sys.argv[1], "rb").read() if sys.argv[1] else None
        ARGV = sys.argv[2:]
        u64 = ctypes.c_uint64
    """)
    path = ""
    if image is not None:
        path = Path(tmp_path) / "kernels.so"
        path.write_bytes(image)
    args = [sys.executable, "-c", prelude + textwrap.dedent(body), str(path), *map(str, argv)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("XLAC_FAKE_CUDA_")}
    full_env.update(env or {})
    return subprocess.run(args, capture_output=True, text=True, env=full_env, timeout=60)


# ---- the library itself ----------------------------------------------------------------

def test_builds_cleanly_and_exports_exactly_the_driver_api(driver, tmp_path):
    for extra in ([], ["-std=c11", "-pedantic"]):
        out = tmp_path / "libcuda.so.1"
        done = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
                               *extra, "-o", str(out), str(SOURCE), "-ldl"],
                              capture_output=True, text=True)
        assert done.returncode == 0 and not done.stderr, done.stderr
    if shutil.which("nm"):
        nm = subprocess.run(["nm", "-D", "--defined-only", str(driver)], capture_output=True,
                            text=True, check=True).stdout
        exported = {line.split()[-1] for line in nm.splitlines()
                    if line.split() and line.split()[-2] in "TW"}
        assert exported == set(API)
    lib = ctypes.CDLL(str(driver))
    for name in API:
        assert hasattr(lib, name), name


def test_build_is_cached_on_the_source_hash(driver, build_dir):
    assert driver.name == "libcuda.so.1"
    mtime = driver.stat().st_mtime_ns
    assert build_fake_driver(build_dir) == driver
    assert driver.stat().st_mtime_ns == mtime


@pytest.mark.skipif(not list(Path("/usr/local").glob("cuda*/include/cuda.h")),
                    reason="no real cuda.h to compare the signatures with")
def test_signatures_match_the_real_cuda_h(tmp_path):
    header = sorted(Path("/usr/local").glob("cuda*/include/cuda.h"))[-1]
    out = tmp_path / "libcuda.so.1"
    done = subprocess.run(["cc", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                           "-D_GNU_SOURCE", "-include", str(header), "-o", str(out),
                           str(SOURCE), "-ldl"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    nm = subprocess.run(["nm", "-D", "--defined-only", str(out)], capture_output=True,
                        text=True).stdout
    assert all(f" {name}\n" in nm for name in API)


# ---- queries, contexts ----------------------------------------------------------------------

def test_calls_before_cuinit_fail_with_not_initialized(driver, tmp_path):
    done = run_script(driver, None, """
        n = ctypes.c_int(-1); s = ctypes.c_char_p()
        out = [cu.lib.cuDeviceGetCount(ctypes.byref(n)),
               cu.lib.cuDeviceGet(ctypes.byref(n), 0),
               cu.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctypes.c_void_p()), 0),
               cu.lib.cuMemAlloc_v2(ctypes.byref(ctypes.c_ulonglong()), 256),
               cu.lib.cuDriverGetVersion(ctypes.byref(n)), n.value,
               cu.lib.cuGetErrorName(3, ctypes.byref(s)), s.value.decode(),
               cu.lib.cuInit(0), cu.lib.cuDeviceGetCount(ctypes.byref(n)), n.value]
        print(out)
    """, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([3, 3, 3, 3, 0, 12080, 0, "CUDA_ERROR_NOT_INITIALIZED",
                                       0, 0, 1])


def test_device_queries(cuda, monkeypatch):
    cu, _ = cuda
    lib = cu.lib
    v = ctypes.c_int()
    assert lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value == 12080
    monkeypatch.setenv("XLAC_FAKE_CUDA_VERSION", "11020")
    assert lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value == 11020
    assert lib.cuDeviceGetCount(ctypes.byref(v)) == 0 and v.value == 1
    assert lib.cuDeviceGet(ctypes.byref(v), 0) == 0 and v.value == 0
    assert lib.cuDeviceGet(ctypes.byref(v), 1) == 101
    name = ctypes.create_string_buffer(64)
    assert lib.cuDeviceGetName(name, 64, 0) == 0 and name.value.startswith(b"xlac fake")
    expected = {1: 1024, 8: 49152, 10: 32, 16: 4, 75: 8, 76: 0}
    for attribute, value in expected.items():
        v.value = -1
        assert lib.cuDeviceGetAttribute(ctypes.byref(v), attribute, 0) == 0
        assert v.value == value, attribute
    assert lib.cuDeviceGetAttribute(ctypes.byref(v), 35, 0) == 1   # TCC_DRIVER: not answered
    assert lib.cuDeviceGetAttribute(ctypes.byref(v), 75, 3) == 101
    monkeypatch.setenv("XLAC_FAKE_CUDA_DEVICES", "0")
    assert lib.cuDeviceGetCount(ctypes.byref(v)) == 0 and v.value == 0
    assert lib.cuDeviceGet(ctypes.byref(v), 0) == 101
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctypes.c_void_p()), 0) == 101


def test_error_names_and_strings(cuda):
    lib = cuda[0].lib
    s = ctypes.c_char_p()
    for code, name in [(0, b"CUDA_SUCCESS"), (1, b"CUDA_ERROR_INVALID_VALUE"),
                       (200, b"CUDA_ERROR_INVALID_IMAGE"), (719, b"CUDA_ERROR_LAUNCH_FAILED"),
                       (999, b"CUDA_ERROR_UNKNOWN")]:
        assert lib.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value == name
    assert lib.cuGetErrorString(719, ctypes.byref(s)) == 0
    assert s.value == b"unspecified launch failure"
    assert lib.cuGetErrorName(12345, ctypes.byref(s)) == 1 and s.value is None


def test_context_stack(cuda):
    cu, _ = cuda
    lib = cu.lib
    ctx, other = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value
    try:
        assert lib.cuCtxPopCurrent_v2(ctypes.byref(other)) == 0 and other.value == ctx.value
        assert lib.cuCtxGetCurrent(ctypes.byref(other)) == 0 and other.value is None
        assert lib.cuCtxSynchronize() == 201                     # no current context
        assert lib.cuMemAlloc_v2(ctypes.byref(ctypes.c_ulonglong()), 256) == 201
        assert lib.cuCtxPopCurrent_v2(ctypes.byref(other)) == 201
        assert lib.cuCtxPushCurrent_v2(ctypes.c_void_p(0x1234)) == 201
    finally:
        assert lib.cuCtxSetCurrent(ctx) == 0                     # empty stack: pushes
    assert lib.cuCtxSynchronize() == 0
    stream = ctypes.c_void_p()
    assert lib.cuStreamCreate(ctypes.byref(stream), 0) == 0
    assert lib.cuStreamSynchronize(stream) == 0
    assert lib.cuStreamDestroy_v2(stream) == 0
    assert lib.cuStreamSynchronize(stream) == 400
    assert lib.cuStreamCreate(ctypes.byref(stream), 4) == 1


# ---- memory --------------------------------------------------------------------------

def test_allocations_are_aligned_and_start_as_ff(cuda):
    cu, _ = cuda
    for n in (1, 255, 256, 257, 4000, 100_000):
        p = cu.alloc(n)
        assert p % 256 == 0
        assert cu.dtoh(p, n) == b"\xff" * n
        cu.free(p)


def test_memory_errors(cuda):
    cu, _ = cuda
    lib = cu.lib
    p = ctypes.c_ulonglong()
    assert lib.cuMemAlloc_v2(ctypes.byref(p), 0) == 1
    assert lib.cuMemAlloc_v2(ctypes.byref(p), 1 << 62) == 2
    a = cu.alloc(256)
    b = cu.alloc(256)
    assert lib.cuMemcpyHtoD_v2(a, b"x" * 257, 257) == 1       # past the end
    assert lib.cuMemcpyHtoD_v2(a + 8, b"x" * 256, 256) == 1
    assert lib.cuMemcpyDtoD_v2(a, 0x1000, 16) == 1             # not mapped
    assert lib.cuMemcpyDtoD_v2(a, 0, 16) == 1
    assert lib.cuMemcpyDtoD_v2(a - 16, a, 16) == 1             # just before the buffer
    cu.htod(a + 8, b"hello")
    assert lib.cuMemcpyDtoD_v2(b, a, 256) == 0
    assert cu.dtoh(b, 16) == b"\xff" * 8 + b"hello\xff\xff\xff"
    assert lib.cuMemsetD8_v2(b, 7, 4) == 0
    assert lib.cuMemsetD8Async(b + 4, 9, 2, None) == 0
    assert cu.dtoh(b, 16) == b"\x07" * 4 + b"\x09" * 2 + b"\xff\xffhello\xff\xff\xff"
    assert lib.cuMemsetD8_v2(b, 7, 300) == 1
    buf = ctypes.create_string_buffer(4)
    assert lib.cuMemcpyDtoHAsync_v2(buf, b, 4, ctypes.c_void_p(0x999)) == 400  # bad stream
    # Other host memory passes for device memory (a numpy array given to the runtime).
    host = np.arange(64, dtype=np.uint8)
    assert lib.cuMemcpyDtoD_v2(host.ctypes.data + 8, b, 8) == 0
    assert lib.cuMemsetD8_v2(host.ctypes.data, 1, 4) == 0
    assert host[:16].tolist() == [1] * 4 + [4, 5, 6, 7] + [7] * 4 + [9, 9, 255, 255]
    cu.free(a)
    assert lib.cuMemFree_v2(a) == 1                            # twice
    assert lib.cuMemFree_v2(b + 16) == 1                       # not an allocation's start
    cu.free(b)


def test_write_one_element_past_a_buffer_faults(driver, image, tmp_path):
    """A 256-byte buffer ends at a guard page: poke at p[64] kills the process with
    SIGSEGV; p[63] is fine."""
    results = {index: run_script(driver, image, """
        cu.setup()
        f = cu.function(cu.load(IMAGE), "poke")
        p = cu.alloc(256)
        print("returned", cu.launch(f, (1,), (32,), [u64(p), u64(int(ARGV[0]))]))
    """, tmp_path=tmp_path, argv=(index,)) for index in (63, 64)}
    assert results[63].returncode == 0 and "returned 0" in results[63].stdout, results[63].stderr
    assert results[64].returncode == -signal.SIGSEGV


def test_write_into_the_rounding_slack_is_an_illegal_address(driver, image, tmp_path):
    """A 1000-byte buffer has 24 bytes to its 256-byte boundary: a write there is found
    after the launch (CUDA_ERROR_ILLEGAL_ADDRESS, sticky)."""
    done = run_script(driver, image, """
        cu.setup()
        f = cu.function(cu.load(IMAGE), "poke")
        p = cu.alloc(1000)
        print(cu.launch(f, (1,), (1,), [u64(p), u64(249)]),
              cu.launch(f, (1,), (1,), [u64(p), u64(250)]),
              cu.lib.cuCtxSynchronize())
    """, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "700", "700"]
    assert "kernel poke wrote past the end of the 1000-byte allocation" in done.stderr


# ---- modules -------------------------------------------------------------------------

def test_module_loading_errors(cuda, image, build_dir, tmp_path):
    cu, _ = cuda
    lib = cu.lib
    module = ctypes.c_void_p()
    assert lib.cuModuleLoadData(ctypes.byref(module), b"// PTX\n.version 8.0\n") == 200
    assert lib.cuModuleLoadData(ctypes.byref(module), b"\x7fELF" + b"\0" * 60) == 200
    # A relocatable object is ELF but not a shared object.
    src = tmp_path / "k.c"
    src.write_text(KERNELS)
    subprocess.run(["cc", "-c", "-fPIC", "-o", str(tmp_path / "k.o"), str(src)], check=True)
    assert lib.cuModuleLoadData(ctypes.byref(module), (tmp_path / "k.o").read_bytes()) == 200
    # Options of cuModuleLoadDataEx are accepted and ignored.
    assert lib.cuModuleLoadDataEx(ctypes.byref(module), image, 0, None, None) == 0
    fn = ctypes.c_void_p()
    assert lib.cuModuleGetFunction(ctypes.byref(fn), module, b"no_such_kernel") == 500
    assert lib.cuModuleGetFunction(ctypes.byref(fn), module, b"vadd") == 0
    again = ctypes.c_void_p()
    assert lib.cuModuleGetFunction(ctypes.byref(again), module, b"vadd") == 0
    assert again.value == fn.value
    assert lib.cuModuleUnload(module) == 0
    assert lib.cuModuleUnload(module) == 400
    assert cu.launch(fn.value, (1,), (1,)) == 400               # its module is gone


def test_image_size_comes_from_the_elf_header(driver, image, tmp_path):
    """The API gives no image size: the library reads it from the ELF header, so an image
    that ends right before a PROT_NONE page loads (reading one byte more would fault)."""
    e_shoff, = struct.unpack_from("<Q", image, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", image, 0x3A)
    assert e_shoff + e_shentsize * e_shnum == len(image)        # as cc writes them
    done = run_script(driver, image, """
        import mmap
        page = mmap.PAGESIZE
        total = (len(IMAGE) + page - 1) // page * page + page
        buf = mmap.mmap(-1, total)
        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        start = base + total - page - len(IMAGE)
        ctypes.memmove(start, IMAGE, len(IMAGE))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(base + total - page, page, 0) == 0   # PROT_NONE
        cu.setup()
        module = ctypes.c_void_p()
        print(cu.lib.cuModuleLoadData(ctypes.byref(module), start))
        f = cu.function(module.value, "poke")
        p = cu.alloc(256)
        print(cu.launch(f, (1,), (1,), [u64(p), u64(3)]), cu.dtoh(p, 16).hex())
    """, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "ff" * 12 + "0000803f"]


# ---- launches ------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("grid,block", [(1, 1), (3, 32), (40, 256), (2, 1024)])
def test_vector_add(cuda, monkeypatch, order, grid, block):
    cu, k = cuda
    monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
    n = 10_000
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a, b, c = cu.alloc(4 * n), cu.alloc(4 * n), cu.alloc(4 * n)
    cu.htod(a, x.tobytes())
    cu.htod(b, y.tobytes())
    assert cu.launch(k["vadd"], (grid,), (block,),
                     [u64(a), u64(b), u64(c), ctypes.c_uint32(n)]) == 0
    np.testing.assert_array_equal(np.frombuffer(cu.dtoh(c, 4 * n), np.float32), x + y)
    for p in (a, b, c):
        cu.free(p)


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_thread_and_block_numbers(cuda, monkeypatch, order):
    cu, k = cuda
    monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
    grid, block = (2, 3, 2), (4, 2, 3)
    blocks, threads = int(np.prod(grid)), int(np.prod(block))
    out = cu.alloc(4 * 12 * blocks * threads)
    assert cu.launch(k["ids"], grid, block, [u64(out)]) == 0
    got = np.frombuffer(cu.dtoh(out, 4 * 12 * blocks * threads), np.uint32).reshape(-1, 12)
    expected = []
    for bz in range(grid[2]):
        for by in range(grid[1]):
            for bx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            expected.append([tx, ty, tz] * 2 + [bx, by, bz, *grid])
    np.testing.assert_array_equal(got, np.array(expected, np.uint32))
    cu.free(out)


def block_sums(cu, fn, values: np.ndarray, block: int) -> np.ndarray:
    blocks = len(values) // block
    src, dst = cu.alloc(values.nbytes), cu.alloc(4 * blocks)
    cu.htod(src, values.tobytes())
    assert cu.launch(fn, (blocks,), (block,), [u64(src), u64(dst)], shared=4 * block) == 0
    out = np.frombuffer(cu.dtoh(dst, 4 * blocks), np.uint32).copy()
    cu.free(src)
    cu.free(dst)
    return out


@pytest.mark.parametrize("block", [2, 64, 1024])
def test_block_sum_with_barriers_is_right_in_both_orders(cuda, monkeypatch, block):
    cu, k = cuda
    values = np.random.default_rng(1).integers(0, 1000, 3 * block, dtype=np.uint32)
    expected = values.reshape(3, block).sum(axis=1, dtype=np.uint32)
    for order in ("forward", "reverse"):
        monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        np.testing.assert_array_equal(block_sums(cu, k["block_sum"], values, block), expected)


def test_block_sum_without_barriers_depends_on_the_order(cuda, monkeypatch):
    """Forward, thread 0 reads its partners' slots before they store them (the 0xCD of
    fresh shared memory); in reverse, every partner has finished first. A missing barrier
    shows in one of the two orders, which is why the suite runs both."""
    cu, k = cuda
    values = np.random.default_rng(2).integers(0, 1000, 4 * 64, dtype=np.uint32)
    expected = values.reshape(4, 64).sum(axis=1, dtype=np.uint32)
    got = {}
    for order in ("forward", "reverse"):
        monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        got[order] = block_sums(cu, k["block_sum_racy"], values, 64)
    assert not np.array_equal(got["forward"], got["reverse"])
    assert not (np.array_equal(got["forward"], expected)
                and np.array_equal(got["reverse"], expected))
    np.testing.assert_array_equal(got["reverse"], expected)


def test_dynamic_shared_memory_starts_as_cd_in_every_block(cuda):
    cu, k = cuda
    out = cu.alloc(3 * 64)
    assert cu.launch(k["shared_peek"], (3,), (64,), [u64(out)], shared=64) == 0
    assert cu.dtoh(out, 3 * 64) == b"\xcd" * (3 * 64)
    cu.free(out)


def test_launch_validation(cuda):
    cu, k = cuda
    lib = cu.lib
    f = k["poke"]
    out = cu.alloc(1024)
    args = [u64(out), u64(0)]
    assert cu.launch(f, (1,), (1025,), args) == 1
    assert cu.launch(f, (1,), (32, 32, 2), args) == 1
    assert cu.launch(f, (1,), (1, 1, 65), args) == 1
    assert cu.launch(f, (0,), (32,), args) == 1
    assert cu.launch(f, (1,), (0,), args) == 1
    assert cu.launch(f, (1, 65536), (1,), args) == 1
    assert cu.launch(f, (1,), (32,), args, shared=49153) == 701
    assert cu.launch(f, (1,), (32,), args, shared=49152) == 0
    assert cu.launch(0xdead, (1,), (1,), args) == 400
    assert cu.launch(f, (1,), (32,), args, stream=0x999) == 400
    params = (ctypes.c_void_p * 2)(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                     for a in args])
    extra = (ctypes.c_void_p * 1)()
    assert lib.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, params, extra) == 1
    assert lib.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, params, None) == 0
    assert lib.cuCtxSynchronize() == 0                         # none of those was sticky
    cu.free(out)


def test_launch_log(cuda, monkeypatch, tmp_path):
    cu, k = cuda
    log = tmp_path / "launches.log"
    monkeypatch.setenv("XLAC_FAKE_CUDA_LOG", str(log))
    n = 64
    a, b, c = cu.alloc(4 * n), cu.alloc(4 * n), cu.alloc(4 * n)
    data = np.arange(n, dtype=np.float32).tobytes()
    cu.htod(a, data)
    cu.check("cuMemcpyHtoDAsync_v2", b, data, 4 * n, None)
    args = [u64(a), u64(b), u64(c), ctypes.c_uint32(n)]
    assert cu.launch(k["vadd"], (2,), (8, 2), args, shared=128) == 0
    assert cu.launch(k["vadd"], (2,), (2000,), args) == 1      # failed: not logged
    cu.check("cuMemcpyDtoD_v2", a, c, 16)
    cu.dtoh(a, 12)
    assert log.read_text().splitlines() == [
        "memcpy htod 256",
        "memcpy htod 256",
        "launch vadd grid=2,1,1 block=8,2,1 shared=128",
        "memcpy dtod 16",
        "memcpy dtoh 12",
    ]
    for p in (a, b, c):
        cu.free(p)


# ---- sticky failures, error injection (fresh processes) ----------------------------------

@pytest.mark.parametrize("kernel", ["diverge", "extra_barrier"])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_divergent_barrier_fails_the_launch_and_the_context(driver, image, tmp_path, kernel,
                                                            order):
    done = run_script(driver, image, f"""
        ctx = cu.setup()
        module = cu.load(IMAGE)
        f = cu.function(module, {kernel!r})
        vadd = cu.function(module, "vadd")
        p = ctypes.c_ulonglong()
        print("launch", cu.launch(f, (2,), (64,)))
        print("after", cu.lib.cuMemAlloc_v2(ctypes.byref(p), 256), cu.lib.cuCtxSynchronize(),
              cu.lib.cuStreamSynchronize(None), cu.launch(vadd, (1,), (1,)))
        cu.check("cuCtxPopCurrent_v2", None)
        cu.check("cuDevicePrimaryCtxRelease_v2", 0)    # the last user: the context resets
        ctx = cu.setup()
        module = cu.load(IMAGE)
        f = cu.function(module, "vadd")
        a = cu.alloc(16)
        print("reset", cu.launch(f, (1,), (4,), [u64(a), u64(a), u64(a), ctypes.c_uint32(4)]))
    """, env={"XLAC_FAKE_CUDA_ORDER": order}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["launch 719", "after 719 719 719 719", "reset 0"]
    lines = [line for line in done.stderr.splitlines() if line]
    assert len(lines) == 1 and f"kernel {kernel}: divergent barrier" in lines[0]


def test_sticky_error_stays_while_another_user_holds_the_context(driver, image, tmp_path):
    done = run_script(driver, image, """
        cu.setup()
        cu.check("cuDevicePrimaryCtxRetain", ctypes.byref(ctypes.c_void_p()), 0)  # 2 users
        f = cu.function(cu.load(IMAGE), "diverge")
        print(cu.launch(f, (1,), (2,)))
        cu.check("cuDevicePrimaryCtxRelease_v2", 0)
        print(cu.lib.cuCtxSynchronize())
        cu.check("cuDevicePrimaryCtxRelease_v2", 0)
        print(cu.lib.cuCtxSynchronize())               # reset: no longer active
        print(cu.lib.cuDevicePrimaryCtxRelease_v2(0))  # released more than retained
    """, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["719", "719", "201", "201"]


# Arguments for each function under injection; never used when the injection works.
INJECTION_SWEEP = """
    import json
    P, N = ctypes.c_void_p, ctypes.c_ulonglong
    i, p, n, s = ctypes.c_int(), P(), N(), ctypes.c_char_p()
    buf = ctypes.create_string_buffer(16)
    calls = {
        "cuInit": (0,), "cuDriverGetVersion": (ctypes.byref(i),),
        "cuDeviceGetCount": (ctypes.byref(i),), "cuDeviceGet": (ctypes.byref(i), 0),
        "cuDeviceGetName": (buf, 16, 0), "cuDeviceGetAttribute": (ctypes.byref(i), 75, 0),
        "cuDevicePrimaryCtxRetain": (ctypes.byref(p), 0), "cuDevicePrimaryCtxRelease_v2": (0,),
        "cuCtxPushCurrent_v2": (CTX,), "cuCtxPopCurrent_v2": (ctypes.byref(p),),
        "cuCtxGetCurrent": (ctypes.byref(p),), "cuCtxSetCurrent": (CTX,),
        "cuCtxSynchronize": (), "cuModuleLoadData": (ctypes.byref(p), IMAGE),
        "cuModuleLoadDataEx": (ctypes.byref(p), IMAGE, 0, None, None),
        "cuModuleUnload": (MODULE,), "cuModuleGetFunction": (ctypes.byref(p), MODULE, b"vadd"),
        "cuMemAlloc_v2": (ctypes.byref(n), 256), "cuMemFree_v2": (MEM,),
        "cuMemcpyHtoD_v2": (MEM, buf, 16), "cuMemcpyDtoH_v2": (buf, MEM, 16),
        "cuMemcpyDtoD_v2": (MEM, MEM, 16), "cuMemcpyHtoDAsync_v2": (MEM, buf, 16, None),
        "cuMemcpyDtoHAsync_v2": (buf, MEM, 16, None), "cuMemcpyDtoDAsync_v2": (MEM, MEM, 16, None),
        "cuMemsetD8_v2": (MEM, 0, 16), "cuMemsetD8Async": (MEM, 0, 16, None),
        "cuLaunchKernel": (FN, 1, 1, 1, 1, 1, 1, 0, None, None, None),
        "cuStreamCreate": (ctypes.byref(p), 0), "cuStreamDestroy_v2": (None,),
        "cuStreamSynchronize": (None,), "cuGetErrorString": (0, ctypes.byref(s)),
        "cuGetErrorName": (0, ctypes.byref(s)),
    }
"""


def test_every_function_returns_its_injected_error(driver, image, tmp_path):
    done = run_script(driver, image, textwrap.dedent("""
        import os
        CTX = cu.setup()
        MODULE = cu.load(IMAGE)
        FN = cu.function(MODULE, "vadd")
        MEM = cu.alloc(256)
    """) + textwrap.dedent(INJECTION_SWEEP) + textwrap.dedent("""
        got = {}
        for k, (name, args) in enumerate(calls.items()):
            os.environ["XLAC_FAKE_CUDA_FAIL"] = f"cuNothing_v9=5, {name}={900 + k}"
            got[name] = getattr(cu.lib, name)(*args)
        del os.environ["XLAC_FAKE_CUDA_FAIL"]
        got["after"] = [cu.lib.cuCtxSynchronize(), cu.lib.cuMemFree_v2(MEM)]
        print(json.dumps(got))
    """), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert set(got) == set(API) | {"after"}
    assert {name: got[name] for name in API} == {name: 900 + k for k, name in
                                                 enumerate(got) if name != "after"}
    assert got["after"] == [0, 0]          # injections changed nothing
    assert done.stderr.count("ignoring the rule 'cuNothing_v9=5'") == 1  # reported once


def test_injection_on_the_nth_call(driver, tmp_path):
    done = run_script(driver, None, """
        cu.setup()
        p = ctypes.c_ulonglong()
        print([cu.lib.cuMemAlloc_v2(ctypes.byref(p), 256) for _ in range(5)])
    """, env={"XLAC_FAKE_CUDA_FAIL": "cuMemAlloc_v2=2@3,cuMemAlloc_v2=700@5"},
        tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 0, 2, 0, 700]"


def test_no_device(driver, tmp_path):
    done = run_script(driver, None, """
        n = ctypes.c_int(-1)
        print(cu.lib.cuInit(0), cu.lib.cuDeviceGetCount(ctypes.byref(n)))
    """, env={"XLAC_FAKE_CUDA_FAIL": "cuInit=100"}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["100", "3"]


def test_the_library_outlives_dlclose(driver, tmp_path):
    """The runtime dlopens and dlcloses the driver around each use: call counts (and
    allocations) survive a dlclose."""
    done = run_script(driver, None, f"""
        import _ctypes
        first = cu.lib.cuInit(0)
        _ctypes.dlclose(cu.lib._handle)
        again = FakeCuda({str(driver)!r})
        print(first, again.lib.cuInit(0), again.lib.cuInit(0))
    """, env={"XLAC_FAKE_CUDA_FAIL": "cuInit=100@2"}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "100", "0"]

"""``xlac.load``: call a compiled model from Python through cffi.

    m = xlac.load("build/model.o")
    y, = m(x)                                 # checks dtypes / shapes, allocates outputs
    m.inputs, m.outputs, m.arena_size         # from NAME_info
    m.run([x], [y], m.new_arena())            # caller-managed memory

``m(...)`` takes and returns the model's own inputs and outputs: a list of arrays for a
sequence, None for an optional output compiled empty (an optional input compiled empty
is no argument). ``run`` and ``bind`` take the flat tensors of NAME_run_v, ``m.inputs``
and ``m.outputs``; ``m.input_values`` and ``m.output_values`` say which make which.

The object and ``runtime_c/xlac_runtime.c`` are linked by the system C compiler
(``cc -shared -fPIC``) into a shared library kept in a cache folder, keyed by a
hash of the object, the runtime sources and NAME, so loading the same object
again costs no link (cache.py keeps that folder within its bounds). The library
is opened in cffi's ABI mode (no C compiler at import, only at link) and called
through ``NAME_run_v``; cffi releases the GIL during the call, so threads with
their own arenas run in parallel.

NAME and the target come from the header beside the object (``OUT.h``): NAME from
its ``#define NAME_ARENA_SIZE`` line, the target from its opening comment, so an
object built for another architecture or for CPU features this machine lacks is
refused before it is linked or run.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import cffi
import llvmlite.binding as llvm
import numpy as np

from . import cache, runtime_c
from .custom_calls import Bridge, check_given, read_calls, shim_source
from .emitter.abi import CUDA_DECLARATIONS, DECLARATIONS, XLAC_DTYPE, XLAC_VALUE_KIND
from .hlo import XlacError

RUNTIME_DIR = Path(os.path.dirname(runtime_c.__file__))

# enum xlac_dtype of xlac_runtime.h (the numbering is ABI) -> our DType (.np: numpy).
_XLAC_DTYPES = {number: dtype for dtype, number in XLAC_DTYPE.items()}
_VALUE_KINDS = {number: kind for kind, number in XLAC_VALUE_KIND.items()}


@dataclass(frozen=True)
class TensorInfo:
    name: str                  # name in the source model
    c_name: str                # parameter name of NAME_run
    dtype: np.dtype
    shape: tuple[int, ...]
    size_bytes: int


@dataclass(frozen=True)
class ValueInfo:
    """An input or output of the source model over the flat tensors: ``count`` of them
    from ``first``."""
    name: str
    kind: str                  # "tensor", "sequence" or "absent" (an optional compiled empty)
    optional: bool
    first: int
    count: int


@dataclass(frozen=True)
class ModelInfo:
    """NAME_info, read into Python values."""
    name: str
    target_triple: str
    target_cpu: str
    target_features: str
    arena_size: int
    arena_align: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    input_values: tuple[ValueInfo, ...]
    output_values: tuple[ValueInfo, ...]


@dataclass(frozen=True)
class HeaderFacts:
    """What ``load`` needs from OUT.h before it links anything."""
    name: str
    triple: str | None
    features: tuple[str, ...] | None   # LLVM features, "+avx2", "-avx512f", ...
    # NAME_THREAD_SCRATCH_BASE and _SIZE where the object has NAME_run_parallel
    thread_scratch: tuple[int, int] | None = None
    cuda: bool = False                 # built for CUDA (the header has NAME_CUDA_KERNELS)
    # (symbol, limit) of a bounded batch (NAME_BOUND_<symbol>): NAME_run_sized_v
    bound: tuple[str, int] | None = None
    # target -> its calls' signatures: the C functions the linking program defines
    custom_calls: dict = field(default_factory=dict)


def read_header(path: Path) -> HeaderFacts:
    """NAME and the target of the model header at ``path``."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise XlacError(f"cannot read the model header '{path}' (xlac writes it beside the "
                        f"object): {e.strerror or e}") from None
    m = re.search(r"^#define (\w+)_ARENA_SIZE\b", text, re.MULTILINE)
    if m is None:
        raise XlacError(f"'{path}' is not a header written by xlac (no NAME_ARENA_SIZE)")
    triple = re.search(r"^ \* Target triple: *(\S+)", text, re.MULTILINE)
    # The features follow their title line, one or more " *   +a,+b,..." lines.
    features = re.search(r"^ \* Features[^\n]*\n((?: \*   \S.*\n)+)", text, re.MULTILINE)
    feature_list = None
    if features is not None:
        # Wrapped lines of space-separated features, or "(none)".
        words = features.group(1).replace("*", " ").split()
        feature_list = tuple(w for w in words if w != "(none)")
    name = m.group(1)
    scratch = [re.search(rf"^#define {name}_THREAD_SCRATCH_{what} (\d+)u", text, re.MULTILINE)
               for what in ("BASE", "SIZE")]
    thread_scratch = None if None in scratch else tuple(int(x.group(1)) for x in scratch)
    cuda = re.search(rf"^#define {name}_CUDA_KERNELS ", text, re.MULTILINE) is not None
    bound = re.search(rf"^#define {name}_BOUND_(\w+) (\d+)u", text, re.MULTILINE)
    return HeaderFacts(name, triple.group(1) if triple else None, feature_list,
                       thread_scratch, cuda,
                       (bound.group(1), int(bound.group(2))) if bound else None,
                       read_calls(text))


def _arch(triple: str) -> str:
    arch = triple.split("-", 1)[0]
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


def check_runs_here(facts: HeaderFacts, object_path: Path) -> None:
    """Refuse an object built for another architecture or for CPU features this host lacks."""
    if facts.triple is None:
        return
    host = llvm.get_process_triple()
    if _arch(facts.triple) != _arch(host):
        problem = (f"'{object_path}' was built for {facts.triple}, which cannot run on this "
                   f"machine ({host}); compile it without ")
        raise XlacError(problem + "target= to load it here",
                        cli=problem + "--target to load it here")
    if facts.features:
        have = {f for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
        missing = sorted({f for f in facts.features if f.startswith("+")} - have)
        if missing:
            shown = ",".join(missing[:8]) + (",..." if len(missing) > 8 else "")
            problem = (f"'{object_path}' needs CPU features this machine lacks ({shown}); "
                       "compile it here, or with a ")
            raise XlacError(problem + "cpu= this machine has",
                            cli=problem + "--cpu this machine has")


_RUNTIME_C = ("xlac_runtime.c", "xlac_threadpool.c", "xlac_cuda.c")


def _runtime_sources() -> list[Path]:
    return [RUNTIME_DIR / f for f in (*_RUNTIME_C, "xlac_runtime.h", "xlac_cuda.h")]


def link_shared_library(object_path: Path, name: str, sources: tuple = (),
                        shim: str = "") -> Path:
    """The cached shared library of the object plus the C runtime (linked on first use),
    and ``sources`` (C or object files) and the C text ``shim``: the custom calls'."""
    try:
        obj = object_path.read_bytes()
        extra = [Path(p).read_bytes() for p in sources]
    except OSError as e:
        raise XlacError(f"cannot read '{e.filename}': {e.strerror or e}") from None
    digest = hashlib.sha256(obj)
    for src in _runtime_sources():
        digest.update(src.read_bytes())
    digest.update(name.encode())
    for data in [*extra, shim.encode()]:
        digest.update(hashlib.sha256(data).digest())
    folder = cache.cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir()) / f"xlac-cache-{os.getuid()}"
        folder.mkdir(parents=True, exist_ok=True)
    library = folder / f"{name}-{digest.hexdigest()[:24]}.so"
    if library.exists():
        cache.mark_used(library)
        return library
    # Link to a private name, then rename: another process linking the same object at
    # the same time never sees (or dlopens) a half-written library.
    temp = folder / f".{library.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    shim_path = temp.with_suffix(".shim.c")
    if shim:
        shim_path.write_text(shim)
    cmd = [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", str(temp), str(object_path),
           *(str(RUNTIME_DIR / f) for f in _RUNTIME_C), *map(str, sources),
           *([str(shim_path)] if shim else []), f"-I{RUNTIME_DIR}", "-lm", "-pthread", "-ldl"]
    if sys.platform.startswith("linux"):
        # The model's calls into its own symbols stay inside this library even when
        # another loaded library exports the same NAME_* symbols.
        cmd.append("-Wl,-Bsymbolic")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise XlacError(f"cannot run the C compiler '{cmd[0]}' to link '{object_path}': "
                        f"{e.strerror or e}") from None
    finally:
        shim_path.unlink(missing_ok=True)
    if done.returncode != 0:
        temp.unlink(missing_ok=True)
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        telling = [line for line in lines if re.search(
            r"error|undefined reference|multiple definition", line)]
        raise XlacError(f"linking '{object_path}' failed: {(telling or lines or [''])[0]}")
    os.replace(temp, library)
    cache.prune(folder)
    return library


def _tensor_infos(ffi, array, count: int) -> tuple[TensorInfo, ...]:
    out = []
    for k in range(count):
        t = array[k]
        out.append(TensorInfo(ffi.string(t.name).decode(), ffi.string(t.c_name).decode(),
                              _XLAC_DTYPES[t.dtype].np, tuple(t.dims[d] for d in range(t.rank)),
                              t.size_bytes))
    return tuple(out)


def _value_infos(ffi, array, count: int) -> tuple[ValueInfo, ...]:
    return tuple(ValueInfo(ffi.string(v.name).decode(), _VALUE_KINDS[v.kind], bool(v.optional),
                           v.first, v.count) for v in (array[k] for k in range(count)))


def _model_info(ffi, info) -> ModelInfo:
    return ModelInfo(
        ffi.string(info.name).decode(), ffi.string(info.target_triple).decode(),
        ffi.string(info.target_cpu).decode(), ffi.string(info.target_features).decode(),
        info.arena_size, info.arena_align,
        _tensor_infos(ffi, info.inputs, info.num_inputs),
        _tensor_infos(ffi, info.outputs, info.num_outputs),
        _value_infos(ffi, info.input_values, info.num_input_values),
        _value_infos(ffi, info.output_values, info.num_output_values))


def _ports_text(tensors: tuple[TensorInfo, ...]) -> str:
    return ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in tensors)


class Model:
    """A loaded model: ``m(*inputs) -> [outputs]`` or ``m.run(inputs, outputs, arena)``.
    With ``threads`` (and ``thread_scratch``, the header's NAME_THREAD_SCRATCH_BASE and
    _SIZE) calls go through NAME_run_parallel_v with a pthreads pool of that many
    threads (``pool``), owned by the Model."""

    def __init__(self, library_path: Path, name: str, threads: int | None = None,
                 thread_scratch: tuple[int, int] | None = None,
                 bound: tuple[str, int] | None = None, calls: dict | None = None,
                 python_calls: dict | None = None):
        self.name = name
        self.library_path = library_path
        self.threads = threads
        self.bound = bound       # (symbol, limit): inputs take 1 to limit samples
        self._ffi = ffi = cffi.FFI()
        ffi.cdef(DECLARATIONS)      # xlac_runtime.h's, as they are
        # A bounded object's sized entries take the batch first (NAME_run_sized_v).
        sized, sizes = ("_sized", "const size_t *sizes, ") if bound else ("", "")
        # Declared without const: cffi's ABI mode reads a "const" global as a constant,
        # which it supports only for integers. Python only reads it.
        ffi.cdef(f"int {name}_run{sized}_v({sizes}const void *const *inputs, "
                 f"void *const *outputs, void *arena);\nextern xlac_model_info {name}_info;")
        if threads is not None:
            ffi.cdef(f"int {name}_run_parallel{sized}_v({sizes}const void *const *inputs, "
                     "void *const *outputs, void *arena, const xlac_threadpool *pool);")
        try:
            self._lib = ffi.dlopen(str(library_path))
            self._run_v = getattr(self._lib, f"{name}_run{sized}_v")
            self.info = _model_info(ffi, getattr(self._lib, f"{name}_info"))
            if threads is not None:
                parallel_v = getattr(self._lib, f"{name}_run_parallel{sized}_v")
        except (OSError, AttributeError) as e:
            raise XlacError(f"cannot load model {name} from '{library_path}': {e}") from None
        self._arena_size = self.info.arena_size
        self.pool = None
        if threads is not None:
            pool = self._lib.xlac_threadpool_create(threads)
            if pool == ffi.NULL:
                raise XlacError(f"cannot start a pool of {threads} threads")
            self.pool = ffi.gc(pool, self._lib.xlac_threadpool_destroy)
            base, slot = thread_scratch
            if threads > 1:
                self._arena_size = base + (threads - 1) * slot
            pool = self.pool
            self._run_v = lambda *args: parallel_v(*args, pool)
        self._bridge = None
        if python_calls:
            self._bridge = bridge = Bridge(ffi, self._lib, calls, python_calls)
            run = self._run_v

            def checked(*args):
                status = run(*args)
                bridge.check()
                return status
            self._run_v = checked
        self._arenas = threading.local()

    @property
    def arena_size(self) -> int:
        """Arena bytes a call needs: NAME_ARENA_SIZE, or with ``threads``
        NAME_ARENA_SIZE_THREADS(threads)."""
        return self._arena_size

    @property
    def inputs(self) -> tuple[TensorInfo, ...]:
        return self.info.inputs

    @property
    def outputs(self) -> tuple[TensorInfo, ...]:
        return self.info.outputs

    @property
    def input_values(self) -> tuple[ValueInfo, ...]:
        """The model's own inputs over ``inputs`` (a sequence is several, an absent
        optional none)."""
        return self.info.input_values

    @property
    def output_values(self) -> tuple[ValueInfo, ...]:
        return self.info.output_values

    def __repr__(self) -> str:
        return (f"<xlac.Model {self.name} ({_ports_text(self.inputs)}) -> "
                f"({_ports_text(self.outputs)})>")

    def new_arena(self) -> np.ndarray:
        """A fresh arena: ``arena_size`` bytes (uint8) at an ``arena_align``-aligned address."""
        size, align = self.arena_size, self.info.arena_align
        raw = np.zeros(size + align, dtype=np.uint8)
        skip = (-raw.ctypes.data) % align
        return raw[skip:skip + size]     # a view: keeps ``raw`` alive

    def _thread_arena(self) -> np.ndarray:
        arena = getattr(self._arenas, "arena", None)
        if arena is None:
            arena = self._arenas.arena = self.new_arena()
        return arena

    def __call__(self, *inputs) -> list:
        """Run on ``inputs`` (array-likes in graph order; a list of them for a sequence; no
        argument for an optional compiled empty) with this thread's arena; returns new
        output arrays (a list of them for a sequence, None for an empty optional)."""
        arrays = self._check_inputs(self._flat_inputs(inputs))
        outputs = [np.empty(t.shape, dtype=t.dtype) for t in self._output_shapes(arrays)]
        self._call(arrays, outputs, self._thread_arena())
        return [None if v.kind == "absent" else
                outputs[v.first:v.first + v.count] if v.kind == "sequence" else
                outputs[v.first] for v in self.output_values]

    def _flat_inputs(self, inputs) -> list:
        """The tensors of the model's inputs, in NAME_run_v's order."""
        values = [v for v in self.input_values if v.kind != "absent"]
        if len(inputs) != len(values):
            raise XlacError(f"{self.name} takes {len(values)} input(s) "
                            f"({', '.join(v.name for v in values)}), got {len(inputs)}")
        flat = []
        for v, x in zip(values, inputs):
            if v.kind == "tensor":
                flat.append(x)
            elif not isinstance(x, (list, tuple)) or len(x) != v.count:
                got = (f"{len(x)} element(s)" if isinstance(x, (list, tuple))
                       else f"a {type(x).__name__}")
                raise XlacError(f"input '{v.name}' is a sequence of {v.count} tensor(s), "
                                f"given as a list; got {got}")
            else:
                flat.extend(x)
        return flat

    def run(self, inputs, outputs, arena) -> None:
        """Run with caller-provided memory: ``outputs`` are C-contiguous, writable arrays
        of the output dtypes and shapes; ``arena`` is an array of at least ``arena_size``
        bytes at an ``arena_align``-aligned address (``new_arena()`` makes one)."""
        arrays = self._check_inputs(inputs)
        outputs = list(outputs)
        if len(outputs) != len(self.outputs):
            raise XlacError(f"{self.name} has {len(self.outputs)} output(s), "
                            f"got {len(outputs)} output array(s)")
        for t, o in zip(self._output_shapes(arrays), outputs):
            if not isinstance(o, np.ndarray) or o.dtype != t.dtype or o.shape != t.shape:
                got = f"{o.dtype}{list(o.shape)}" if isinstance(o, np.ndarray) else type(o).__name__
                raise XlacError(f"output '{t.name}' must be a {t.dtype}{list(t.shape)} array, "
                                f"got {got}")
            if not (o.flags.c_contiguous and o.flags.writeable):
                raise XlacError(f"output '{t.name}' must be a C-contiguous, writable array")
        self._check_arena(arena)
        self._call(arrays, outputs, arena)

    def bind(self, inputs, outputs, arena) -> Callable[[], None]:
        """A call of the model on these buffers, checked once (as ``run`` checks them):
        each call of the result runs ``NAME_run_v`` with no Python-side work beyond the
        cffi call, for timing loops. The buffers must stay unchanged in place."""
        arrays = self._check_inputs(inputs)
        outputs = list(outputs)
        self.run(arrays, outputs, arena)     # checks the outputs and the arena
        ffi = self._ffi
        in_ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in arrays] or 1)
        out_ptrs = ffi.new("void *[]", [ffi.cast("void *", o.ctypes.data) for o in outputs]
                           or 1)
        arena_ptr = ffi.cast("void *", arena.ctypes.data)
        args = (*self._sizes(arrays), in_ptrs, out_ptrs, arena_ptr)
        run_v = self._run_v

        def call() -> None:
            status = run_v(*args)
            if status != 0:
                raise XlacError(f"{self.name}_run_v failed with status {status}")
        call.buffers = (arrays, outputs, arena)   # keep them alive while ``call`` is
        return call

    def _check_inputs(self, inputs) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise XlacError(f"{self.name} takes {len(self.inputs)} input(s) "
                            f"({', '.join(t.name for t in self.inputs)}), got {len(inputs)}")
        arrays = []
        for t, x in zip(self.inputs, inputs):
            # Arrays must already have the model's dtype (a silent float64 -> float32 cast
            # hides bugs); plain Python values are converted to it.
            a = x if isinstance(x, np.ndarray) else np.asarray(x, dtype=t.dtype)
            if a.dtype != t.dtype:
                raise XlacError(f"input '{t.name}' must have dtype {t.dtype}, got {a.dtype}")
            if self.bound is None and a.shape != t.shape:
                raise XlacError(f"input '{t.name}' must have shape {t.shape}, got {a.shape}")
            if self.bound is not None and (a.shape[1:] != t.shape[1:] or a.ndim != len(t.shape)
                                           or not 1 <= a.shape[0] <= self.bound[1]):
                symbol, limit = self.bound
                raise XlacError(f"input '{t.name}' must have shape ({symbol}, "
                                f"{', '.join(map(str, t.shape[1:]))}) with 1 <= {symbol} <= "
                                f"{limit}, got {a.shape}")
            arrays.append(np.ascontiguousarray(a))
        if self.bound is not None and len({a.shape[0] for a in arrays}) > 1:
            raise XlacError(f"the inputs of {self.name} must hold one batch size, got "
                            f"{', '.join(str(a.shape[0]) for a in arrays)}")
        return arrays

    def _batch(self, arrays) -> int | None:
        """The inputs' batch size (a bounded object's), else None."""
        return arrays[0].shape[0] if self.bound is not None and arrays else None

    def _output_shapes(self, arrays) -> list[TensorInfo]:
        """The outputs for these inputs: a bounded object's at their batch."""
        n = self._batch(arrays)
        if n is None:
            return list(self.outputs)
        return [replace(t, shape=(n, *t.shape[1:]),
                        size_bytes=t.size_bytes // self.bound[1] * n) for t in self.outputs]

    def _sizes(self, arrays) -> tuple:
        """NAME_run_sized_v's leading argument, where the object has it."""
        n = self._batch(arrays)
        return () if n is None else (self._ffi.new("size_t[1]", [n]),)

    def _check_arena(self, arena) -> None:
        if not isinstance(arena, np.ndarray) or not arena.flags.c_contiguous:
            raise XlacError("the arena must be a C-contiguous numpy array (see new_arena())")
        if arena.nbytes < self.arena_size:
            raise XlacError(f"the arena has {arena.nbytes} bytes; {self.name} needs "
                            f"{self.arena_size}")
        # NAME_run_v ignores an empty arena; numpy gives an empty view its base's address.
        if self.info.arena_size and arena.ctypes.data % self.info.arena_align:
            raise XlacError(f"the arena must be aligned to {self.info.arena_align} bytes "
                            "(see new_arena())")
        if not arena.flags.writeable:
            raise XlacError("the arena must be writable")

    def _call(self, inputs, outputs, arena) -> None:
        ffi = self._ffi
        # cffi cannot make a zero-length array; the callee never reads an empty list.
        in_ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in inputs] or 1)
        out_ptrs = ffi.new("void *[]", [ffi.cast("void *", o.ctypes.data) for o in outputs] or 1)
        status = self._run_v(*self._sizes(inputs), in_ptrs, out_ptrs,
                             ffi.cast("void *", arena.ctypes.data))
        if status != 0:
            reason = ffi.string(self._lib.xlac_status_string(status)).decode()
            raise XlacError(f"{self.name}_run_v failed with status {status}: {reason}")


def load(path, threads: int | None = None, device: int = 0,
         custom_calls: dict | None = None) -> Model:
    """Load the object at ``path``; its header (same name, suffix ``.h``) must be beside it.
    ``threads``: run NAME_run_parallel on a pool of that many threads (the object must be
    compiled with ``parallel=True``). An object compiled for CUDA runs on GPU ``device``
    (a CudaModel). ``custom_calls``: target -> a Python callable or the path of a C
    source or object file, for each custom call the object makes (cli/custom_calls.py)."""
    object_path = Path(os.fspath(path))
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise XlacError(f"threads must be a positive int, got {threads!r}")
    if not object_path.is_file():
        raise XlacError(f"no compiled model at '{object_path}'")
    facts = read_header(object_path.with_suffix(".h"))
    check_runs_here(facts, object_path)
    if threads is not None and facts.thread_scratch is None:
        raise XlacError(f"'{object_path}' has no {facts.name}_run_parallel; compile it with "
                        "parallel=True to load it with threads=",
                        cli=f"'{object_path}' has no {facts.name}_run_parallel; compile it "
                        "with --parallel")
    given = check_given(facts.custom_calls, custom_calls, object_path)
    python = {t: f for t, f in given.items() if callable(f)}
    library = link_shared_library(
        object_path, facts.name, tuple(f for f in given.values() if not callable(f)),
        shim_source(sorted(python)) if python else "")
    if facts.cuda:
        if threads is not None:
            raise XlacError(f"'{object_path}' is compiled for CUDA: it takes no threads=")
        return CudaModel(library, facts.name, device)
    return Model(library, facts.name, threads, facts.thread_scratch, facts.bound,
                 facts.custom_calls, python)


class CudaModel(Model):
    """A model compiled for CUDA, on one device: ``m(*inputs)`` takes and returns numpy
    arrays (NAME_run_cuda copies them in and out); ``m.run_device`` takes device
    arrays (``__cuda_array_interface__``: PyTorch, CuPy) without a copy. The context
    (NAME_cuda_init) lives as long as the model."""

    def __init__(self, library_path: Path, name: str, device: int = 0):
        self.name = name
        self.library_path = library_path
        self.threads = None
        self.bound = None        # --bound is refused for CUDA
        self.pool = None
        self._ffi = ffi = cffi.FFI()
        ffi.cdef(DECLARATIONS)
        ffi.cdef(CUDA_DECLARATIONS)
        ffi.cdef(f"int {name}_cuda_init(void *ctx, int32_t device);\n"
                 f"int {name}_run_cuda(void *ctx, const void *const *inputs, "
                 "void *const *outputs);\n"
                 f"int {name}_run_device(void *ctx, const uint64_t *inputs, "
                 "const uint64_t *outputs, uint64_t arena, void *stream);\n"
                 f"void {name}_cuda_release(void *ctx);\n"
                 f"size_t {name}_cuda_ctx_size(void);\n"
                 f"extern xlac_model_info {name}_info;")
        try:
            self._lib = lib = ffi.dlopen(str(library_path))
            self.info = _model_info(ffi, getattr(lib, f"{name}_info"))
            init = getattr(lib, f"{name}_cuda_init")
            run_cuda = getattr(lib, f"{name}_run_cuda")
            self._run_device = getattr(lib, f"{name}_run_device")
            release = getattr(lib, f"{name}_cuda_release")
            ctx_size = getattr(lib, f"{name}_cuda_ctx_size")()
        except (OSError, AttributeError) as e:
            raise XlacError(f"cannot load model {name} from '{library_path}': {e}") from None
        # NAME_cuda_ctx, sized by the object itself (not the header, which may be stale).
        self._ctx = ffi.new("char[]", ctx_size)
        status = init(self._ctx, device)
        if status != 0:
            self._fail(f"{name}_cuda_init", status)
        self._release = weakref.finalize(self, release, self._ctx)
        self._lock = threading.Lock()     # NAME_run_cuda's device buffers are the context's
        ctx = self._ctx

        def run_v(inputs, outputs, arena):
            with self._lock:
                return run_cuda(ctx, inputs, outputs)
        self._run_v = run_v
        self._arena_size = 0    # the device arena is the context's
        self._arenas = threading.local()

    @property
    def device_arena_size(self) -> int:
        """Bytes of the device arena ``run_device`` takes (NAME_ARENA_SIZE)."""
        return self.info.arena_size

    def _fail(self, what: str, status: int):
        reason = self._ffi.string(self._lib.xlac_status_string(status)).decode()
        error = self._lib.xlac_cuda_driver_error(self._ffi.cast("xlac_cuda_ctx *", self._ctx))
        detail = f" (CUDA error {error})" if error else ""
        raise XlacError(f"{what} failed with status {status}: {reason}{detail}")

    def _call(self, inputs, outputs, arena) -> None:
        ffi = self._ffi
        in_ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in inputs] or 1)
        out_ptrs = ffi.new("void *[]", [ffi.cast("void *", o.ctypes.data) for o in outputs] or 1)
        status = self._run_v(in_ptrs, out_ptrs, None)
        if status != 0:
            self._fail(f"{self.name}_run_cuda", status)

    def run_device(self, inputs, outputs, arena, stream: int = 0) -> None:
        """NAME_run_device on device arrays (objects with ``__cuda_array_interface__``,
        C-contiguous, of the model's dtypes and shapes; ``arena``: at least
        ``device_arena_size`` bytes, 256-aligned) on the CUstream ``stream`` (an int
        handle, 0: the default stream). Returns once the work is queued."""
        inputs, outputs = list(inputs), list(outputs)
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise XlacError(f"{self.name} takes {len(self.inputs)} input(s) and "
                            f"{len(self.outputs)} output(s), got {len(inputs)} and "
                            f"{len(outputs)}")
        ins = [_device_pointer(x, t, "input") for x, t in zip(inputs, self.inputs)]
        outs = [_device_pointer(x, t, "output") for x, t in zip(outputs, self.outputs)]
        arena_ptr = 0
        if self.device_arena_size:
            spec = _cuda_interface(arena, "arena")
            nbytes = int(np.prod(spec["shape"])) * np.dtype(spec["typestr"]).itemsize
            if nbytes < self.device_arena_size:
                raise XlacError(f"the arena has {nbytes} bytes; {self.name} needs "
                                f"{self.device_arena_size}")
            arena_ptr = spec["data"][0]
        ffi = self._ffi
        status = self._run_device(self._ctx, ffi.new("uint64_t[]", ins or [0]),
                                  ffi.new("uint64_t[]", outs or [0]), arena_ptr,
                                  ffi.cast("void *", stream))
        if status != 0:
            self._fail(f"{self.name}_run_device", status)


def _cuda_interface(x, what: str) -> dict:
    spec = getattr(x, "__cuda_array_interface__", None)
    if spec is None:
        raise XlacError(f"the {what} must be a device array (__cuda_array_interface__), "
                        f"got a {type(x).__name__}")
    return spec


def _device_pointer(x, t: TensorInfo, what: str) -> int:
    spec = _cuda_interface(x, what)
    dtype, shape = np.dtype(spec["typestr"]), tuple(spec["shape"])
    if dtype != t.dtype or shape != t.shape:
        raise XlacError(f"{what} '{t.name}' must be a {t.dtype}{list(t.shape)} device array, "
                        f"got {dtype}{list(shape)}")
    strides = spec.get("strides")
    if strides is not None and tuple(strides) != tuple(
            int(np.prod(shape[k + 1:])) * dtype.itemsize for k in range(len(shape))):
        raise XlacError(f"{what} '{t.name}' must be C-contiguous")
    return spec["data"][0]

"""emitter/mathlib.py: accuracy against numpy over dense sweeps and special values, both
as scalar loops (left to LLVM's vectorizer) and as explicit <8 x T> vector code, and
object code free of libm calls on x86-64, AArch64 and Cortex-M4.

Every function is JIT-compiled twice: for this machine's CPU (with FMA where it has it;
the CPU $XLAC_HOST_CPU names where it is set) and for the generic CPU of its architecture (no FMA on x86-64), since the algorithms must
hold with and without fused multiply-add. Run with -s to see the error table.
"""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from xlac.emitter import mathlib
from xlac.emitter.irutil import I64, PTR, VOID, for_range, gep_elem
from xlac.emitter.target import make_target

BINARY = {"atan2", "pow"}
LANES = 8
N = 1 << 18             # points per sweep segment; each function gets a few segments
# f32 limit in ulps; f64 limit as a relative error.
F32_ULPS = 4.0
F64_REL = 1e-14
# sin/cos/tan are accurate up to this |x| (finite and within [-1, 1] beyond, tested apart).
TRIG_LIMIT = {np.float32: 1e5, np.float64: 1e9}
TRIG = {"sin", "cos", "tan"}

llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
TARGET_DATA = llvm.create_target_data("e")


# --- building and running ---------------------------------------------------------------

def _llvm_elem(dtype):
    return ir.FloatType() if dtype == np.float32 else ir.DoubleType()


def _kernel(module: ir.Module, name: str, fn, elem: ir.Type, lanes: int | None):
    """void name(T *x, T *y, T *out, i64 n): out[i] = fn(x[i], y[i]) over n elements,
    one element (lanes None) or one <lanes x T> vector per iteration."""
    f = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, PTR, I64]), name)
    f.attributes.add("nounwind")     # no unwind tables: they would import __aeabi_unwind_*
    x, y, out, n = f.args
    b = ir.IRBuilder(f.append_basic_block("entry"))
    ty = elem if lanes is None else ir.VectorType(elem, lanes)
    count = n if lanes is None else b.sdiv(n, ir.Constant(I64, lanes))
    align = elem.get_abi_size(TARGET_DATA)     # numpy only aligns to the element
    with for_range(b, count) as i:
        args = [b.load(gep_elem(b, p, ty, i), typ=ty, align=align) for p in (x, y)]
        if name.split("_")[0] not in BINARY:
            args = args[:1]
        b.store(fn(b, *args), gep_elem(b, out, ty, i), align=align)
    b.ret_void()


def _module(triple: str, dtypes, vector: bool = True) -> ir.Module:
    module = ir.Module(name="mathlib_test")
    module.triple = triple
    for dtype in dtypes:
        elem = _llvm_elem(dtype)
        tag = np.dtype(dtype).name
        for name, fn in mathlib.FUNCTIONS.items():
            _kernel(module, f"{name}_{tag}_s", fn, elem, None)
            if vector:
                _kernel(module, f"{name}_{tag}_v", fn, elem, LANES)
    return module


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine):
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pto.loop_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


class Jit:
    """All kernels for one CPU, optimized at -O2 with the loop vectorizer on."""

    def __init__(self, cpu: str, features: str, vector: bool):
        target = llvm.Target.from_default_triple()
        self.tm = target.create_target_machine(cpu=cpu, features=features, opt=2)
        mod = llvm.parse_assembly(str(_module(llvm.get_default_triple(),
                                              (np.float32, np.float64), vector)))
        mod.verify()
        _optimize(mod, self.tm)
        self.ir = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, self.tm)
        self.engine.finalize_object()

    def run(self, kernel: str, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        fty = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_int64)
        f = fty(self.engine.get_function_address(kernel))
        n = len(x)
        pad = -n % LANES                 # the vector kernels take whole vectors
        x = np.ascontiguousarray(np.concatenate([x, np.zeros(pad, x.dtype)]))
        y = x if y is None else np.ascontiguousarray(np.concatenate([y, np.zeros(pad, x.dtype)]))
        out = np.empty_like(x)
        f(x.ctypes.data, y.ctypes.data, out.ctypes.data, len(x))
        return out[:n]


@pytest.fixture(scope="module")
def jits():
    info, _ = make_target()          # the host's CPU and features
    host = Jit(info.cpu, info.features, vector=True)
    generic = Jit("generic", "", vector=False)
    return {"host": host, "generic": generic}


# --- references and inputs --------------------------------------------------------------

def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _logistic(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


REFERENCE = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
    "logistic": _logistic, "erf": _erf, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "atan2": np.arctan2, "pow": np.power, "cbrt": np.cbrt, "atan": np.arctan,
    "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}


def _specials(dtype) -> np.ndarray:
    fi = np.finfo(dtype)
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0,
         fi.tiny, -fi.tiny, fi.smallest_subnormal, -fi.smallest_subnormal,
         fi.smallest_subnormal * 12345, fi.max, -fi.max, fi.eps, -fi.eps]
    return np.array(v, dtype)


def _logspace_both(dtype, n, lo, hi, rng):
    """n values of random sign with log2 |x| uniform in [lo, hi]."""
    x = np.exp2(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)
    return x.astype(dtype)


def _unary_inputs(name: str, dtype, rng) -> np.ndarray:
    fi = np.finfo(dtype)
    f32 = dtype == np.float32
    lin = lambda a, b: np.linspace(a, b, N, dtype=dtype)     # noqa: E731
    tiny = _logspace_both(dtype, N // 4, math.log2(fi.smallest_subnormal), 0, rng)
    anywhere = _logspace_both(dtype, N // 4, math.log2(fi.smallest_subnormal),
                              math.log2(fi.max), rng)
    ranges = {
        "exp": [lin(-110, 92) if f32 else lin(-750, 712), lin(-1, 1)],
        "expm1": [lin(-20, 92) if f32 else lin(-40, 712), lin(-1, 1)],
        "log": [lin(0, 4), np.abs(anywhere), lin(0.7, 1.5)],
        "log1p": [lin(-1, 4), np.abs(anywhere) - 1, lin(-0.3, 0.5)],
        "tanh": [lin(-12, 12) if f32 else lin(-22, 22), lin(-1, 1)],
        "logistic": [lin(-110, 110) if f32 else lin(-750, 750), lin(-4, 4)],
        "erf": [lin(-5, 5) if f32 else lin(-7, 7), lin(-1.1, 1.1)],
        "sin": [lin(-1e5, 1e5) if f32 else lin(-1e9, 1e9), lin(-10, 10), lin(-1e4, 1e4)],
        "cbrt": [anywhere, lin(-10, 10)],
        "atan": [anywhere, lin(-10, 10), lin(-1.2, 1.2)],
        "asin": [lin(-1.1, 1.1), 1 - np.abs(tiny), np.abs(tiny) - 1],
        "sinh": [lin(-90, 90) if f32 else lin(-711, 711), lin(-1, 1), anywhere],
        "asinh": [anywhere, lin(-10, 10), lin(-1e4, 1e4)],
        "acosh": [1 + np.abs(tiny), np.abs(anywhere), lin(0.9, 10), lin(1, 1e5)],
        "atanh": [lin(-1.05, 1.05), 1 - np.abs(tiny), np.abs(tiny) - 1],
    }
    ranges["acos"] = ranges["asin"]
    ranges["cosh"] = ranges["sinh"]
    ranges["cos"] = ranges["tan"] = ranges["sin"]
    return np.concatenate(ranges[name] + [tiny, _specials(dtype)]).astype(dtype)


def _binary_inputs(name: str, dtype, rng):
    f32 = dtype == np.float32
    s = _specials(dtype)
    sx, sy = np.meshgrid(s, s)
    if name == "atan2":
        x = _logspace_both(dtype, N, -30, 30, rng)
        y = _logspace_both(dtype, N, -30, 30, rng)
    else:
        # |x| across the whole range with y keeping x**y mostly in range, plus the
        # hardest case: |log x| up to ln 2 with |y log x| up to the overflow threshold.
        emax = 128 if f32 else 1024
        x = _logspace_both(dtype, N, -emax, emax, rng)
        y = (rng.uniform(-1, 1, N) * emax / np.maximum(np.abs(np.log2(np.abs(x))), 1))
        xn = np.exp2(rng.uniform(-0.5, 0.5, N)).astype(dtype)
        yn = (rng.uniform(-1, 1, N) * emax * 0.69 / np.abs(np.log(xn.astype(np.float64))))
        ints = rng.integers(-40, 40, N // 4).astype(dtype)
        xi = _logspace_both(dtype, N // 4, -3, 3, rng)
        x = np.concatenate([x, xn, xi])
        y = np.concatenate([y, yn, ints]).astype(dtype)
    x = np.concatenate([x, sx.ravel(), s, np.full_like(s, -2.0)]).astype(dtype)
    y = np.concatenate([y, sy.ravel(), np.full_like(s, 3.0), s]).astype(dtype)
    return x, y


# --- error measurement ------------------------------------------------------------------

def _errors(name, dtype, x, got, ref):
    """(error per point in ulps for f32 or relative for f64, mask of mismatched specials)."""
    fi = np.finfo(dtype)
    got = got.astype(np.float64)
    with np.errstate(over="ignore"):
        rounded = ref.astype(dtype).astype(np.float64)
    finite = np.isfinite(rounded) & np.isfinite(got)
    # Non-finite results must match exactly; exact zeros must have the right sign.
    bad = ~finite & ~((got == rounded) | (np.isnan(got) & np.isnan(rounded)))
    bad |= (ref == 0) & (got == 0) & (np.signbit(got) != np.signbit(ref))
    ref = np.where(finite, ref, 0.0)
    diff = np.where(finite, np.abs(got - ref), 0.0)
    mag = np.maximum(np.abs(ref), fi.tiny)
    if dtype == np.float32:
        err = diff / np.exp2(np.floor(np.log2(mag)) - fi.nmant)
    else:
        err = diff / mag
    if name in TRIG:
        beyond = np.isfinite(x) & (np.abs(x) > TRIG_LIMIT[dtype])
        err = np.where(beyond, 0.0, err)
        bad &= ~beyond
    return err, bad


# (JIT, kernel suffix): the scalar loop for both CPUs, the explicit vectors for the host.
KERNELS = [("host", "_s"), ("host", "_v"), ("generic", "_s")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(mathlib.FUNCTIONS))
def test_accuracy(jits, name, dtype):
    rng = np.random.default_rng(1234)
    tag = np.dtype(dtype).name
    limit = F32_ULPS if dtype == np.float32 else F64_REL
    if name in BINARY:
        x, y = _binary_inputs(name, dtype, rng)
        with np.errstate(all="ignore"):
            ref = REFERENCE[name](x.astype(np.float64), y.astype(np.float64))
    else:
        x, y = _unary_inputs(name, dtype, rng), None
        with np.errstate(all="ignore"):
            ref = REFERENCE[name](x.astype(np.float64))
    for which, variant in KERNELS:
        got = jits[which].run(f"{name}_{tag}{variant}", x, y)
        err, bad = _errors(name, dtype, x, got, ref)
        worst = int(np.argmax(err))
        at = f"x={x[worst]!r}" + ("" if y is None else f" y={y[worst]!r}")
        print(f"{name:9s} {tag} {which:7s}{variant}: max error {err[worst]:.3g} at {at}")
        assert not bad.any(), (f"{which}{variant}: special values wrong at x={x[bad][:5]}"
                               + ("" if y is None else f" y={y[bad][:5]}")
                               + f": got {got[bad][:5]}, want {ref[bad][:5]}")
        assert err[worst] <= limit, f"{which}{variant}: error {err[worst]} at {at}"


def test_trig_past_accurate_range_is_bounded(jits):
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        fi = np.finfo(dtype)
        x = _logspace_both(dtype, 1 << 14, math.log2(TRIG_LIMIT[dtype]), math.log2(fi.max), rng)
        x = np.concatenate([x, np.array([fi.max, -fi.max], dtype)])
        tag = np.dtype(dtype).name
        for name in ("sin", "cos"):
            got = jits["host"].run(f"{name}_{tag}_v", x)
            assert np.all(np.abs(got) <= 1), name
        assert not np.isnan(jits["host"].run(f"tan_{tag}_v", x)).any()


@pytest.mark.parametrize("name", sorted(mathlib.FUNCTIONS))
def test_straight_line_code(name):
    """One basic block, and the only calls are to LLVM intrinsics."""
    module = ir.Module()
    for elem in (ir.FloatType(), ir.VectorType(ir.DoubleType(), 4)):
        arity = 2 if name in BINARY else 1
        f = ir.Function(module, ir.FunctionType(elem, [elem] * arity), f"f{len(module.globals)}")
        b = ir.IRBuilder(f.append_basic_block())
        b.ret(mathlib.FUNCTIONS[name](b, *f.args))
        assert len(f.blocks) == 1
    callees = {g.name for g in module.globals.values() if g.is_declaration}
    assert callees and all(c.startswith("llvm.") for c in callees), callees


def test_rejects_non_float_types():
    f = ir.Function(ir.Module(), ir.FunctionType(I64, [I64]), "f")
    b = ir.IRBuilder(f.append_basic_block())
    with pytest.raises(TypeError, match="f32/f64"):
        mathlib.exp(b, f.args[0])


def test_scalar_loops_are_vectorized(jits):
    """The loop vectorizer widens every scalar loop: nothing in the math stops it."""
    bodies = jits["host"].ir.split("\ndefine ")
    for name in mathlib.FUNCTIONS:
        for tag, elem in (("float32", "float"), ("float64", "double")):
            body = next(t for t in bodies if t.startswith(f'void @"{name}_{tag}_s"')
                        or t.startswith(f"void @{name}_{tag}_s("))
            assert f"x {elem}>" in body, f"{name}_{tag}_s was not vectorized"


# Cross-compilation: (triple, cpu). Cortex-M4 has a single-precision FPU, so f64 there
# is soft-float: compiler-rt's __aeabi_*/__*df* helpers are expected, libm is not.
TARGETS = [("x86_64-unknown-linux-gnu", "x86-64"), ("aarch64-unknown-linux-gnu", "generic"),
           ("thumbv7em-none-eabihf", "cortex-m4")]
ALLOWED = {"memcpy", "memset", "_GLOBAL_OFFSET_TABLE_"}


def _undefined_symbols(triple: str, cpu: str, dtypes, tmp_path) -> set[str]:
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, opt=2, reloc="pic")
    mod = llvm.parse_assembly(str(_module(triple, dtypes)))
    _optimize(mod, tm)
    path = tmp_path / f"{triple}-{len(dtypes)}.o"
    path.write_bytes(tm.emit_object(mod))
    nm = shutil.which("llvm-nm") or shutil.which("nm")
    out = subprocess.run([nm, "-u", str(path)], check=True, capture_output=True, text=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.parametrize("triple,cpu", TARGETS, ids=[t[0].split("-")[0] for t in TARGETS])
def test_no_library_calls(triple, cpu, tmp_path):
    soft_f64 = triple.startswith("thumb")
    undefined = _undefined_symbols(triple, cpu, (np.float32,) if soft_f64 else
                                   (np.float32, np.float64), tmp_path)
    assert undefined <= ALLOWED, undefined - ALLOWED
    if soft_f64:
        undefined = _undefined_symbols(triple, cpu, (np.float64,), tmp_path)
        assert all(s.startswith("__") or s in ALLOWED for s in undefined), undefined

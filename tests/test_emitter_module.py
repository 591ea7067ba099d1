"""Whole-model emission: IR structure, targets, symbols, header, NAME_info, entry checks."""
from __future__ import annotations

import re
import subprocess
import threading

import cffi
import numpy as np
import pytest
from llvmlite import ir

from emit_util import RUNTIME_DIR, compile_module, emit_module
from xlac.emitter.abi import DECLARATIONS
from xlac.emitter.constants import ConstantPool
from xlac.emitter.elemental import ElementalEmitter
from xlac.emitter.loops import PointerArg, concatenation_cuts, emit_elemental_function
from xlac.emitter.names import c_identifier, c_identifier_for_model, unique_c_identifiers
from xlac.emitter.target import make_target, vector_bytes_for
from xlac.hlo import Builder, Module, Opcode, Shape, Signature, TensorSpec, XlacError, dtypes
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module

F32 = dtypes.F32
# Big enough that LLVM keeps the loops (and so the weights global) instead of unrolling.
WEIGHTS = np.arange(4000, dtype=np.float32).reshape(16, 250) * 0.5


def small_model(name="small") -> Module:
    """y = max(x * W + W, 0), z = x with a tuple root; W a 16000-byte constant used twice
    through two identical literals (stored once)."""
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (16, 250)), "x")
    w1, w2 = b.constant(WEIGHTS), b.constant(WEIGHTS.copy())
    y = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, x, w1), w2)
    zero = b.broadcast(b.constant(np.float32(0)), (16, 250), ())
    y = b.op(Opcode.MAXIMUM, y, zero)
    m = Module(name)
    m.add_computation(b.build(b.tuple([y, x])), entry=True)
    m.signature = Signature([TensorSpec("input:0", F32, (16, 250))],
                            [TensorSpec("relu/out", F32, (16, 250)),
                             TensorSpec("int", F32, (16, 250))])
    return m


def _emit(module, **kw):
    return emit_module(module, **kw)[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("small")
    return compile_module(small_model(), work, name="small"), work


def expected(x):
    return [np.maximum(x * WEIGHTS + WEIGHTS, 0), x]


# --- LLVM IR ---------------------------------------------------------------

def test_ir_has_entry_points_and_byte_string_constants():
    ir_text = _emit(small_model(), kinds=("llvm",)).llvm_ir
    for sym in ("@small_run(", "@small_run_v(", "@small_info ="):
        assert sym in ir_text
    consts = re.findall(r"private unnamed_addr constant \[(\d+) x i8\] c\"", ir_text)
    assert consts.count("16000") == 1, "identical weights are stored once, as one byte string"
    assert not re.search(r"\[\d+ x float\] \[float", ir_text), "no per-element constant arrays"
    # In the model's weights section (ELF), 64-byte aligned.
    assert re.search(r"constant \[16000 x i8\] c\"[^\"]*\", section \".rodata.small.weights\", "
                     r"align 64", ir_text)


def test_large_constants_embed_through_incbin_in_host_objects(tmp_path):
    """Weights over 64 KiB skip the IR (.incbin of a temp file); the object must still
    carry them itself, as local read-only data, once the temp file is gone."""
    big = np.random.default_rng(0).standard_normal((300, 250)).astype(np.float32)
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (300, 250)), "x")
    y = b.op(Opcode.MULTIPLY, x, b.constant(big))
    m = Module("big")
    m.add_computation(b.build(y), entry=True)
    m.signature = Signature([TensorSpec("x", F32, (300, 250))], [TensorSpec("y", F32, (300, 250))])
    model = compile_module(m, tmp_path, name="big")
    x0 = np.random.default_rng(1).standard_normal((300, 250)).astype(np.float32)
    np.testing.assert_array_equal(model(x0)[0], x0 * big)
    syms = subprocess.run(["nm", str(tmp_path / "big.o")], capture_output=True, text=True).stdout
    const_lines = [line for line in syms.splitlines() if "const" in line]
    assert const_lines and all(line.split()[1] == "r" for line in const_lines), syms


def test_inner_loop_is_vectorized():
    ir_text = _emit(small_model(), kinds=("llvm",)).llvm_ir
    assert re.search(r"<\d+ x float>", ir_text)


REQUANTIZED_CONCAT = """HloModule requantized_concat

%fused_computation (a: s8[1,16,3,5], b: s8[1,32,3,5]) -> s8[1,48,3,5]{1,3,2,0} {
  %a = s8[1,16,3,5] parameter(0)
  %fa = f32[1,16,3,5]{1,3,2,0} convert(%a)
  %sa = f32[] constant(0.75)
  %ba = f32[1,16,3,5]{1,3,2,0} broadcast(%sa), dimensions={}
  %ma = f32[1,16,3,5]{1,3,2,0} multiply(%fa, %ba)
  %b = s8[1,32,3,5] parameter(1)
  %fb = f32[1,32,3,5]{1,3,2,0} convert(%b)
  %sb = f32[] constant(1.25)
  %bb = f32[1,32,3,5]{1,3,2,0} broadcast(%sb), dimensions={}
  %mb = f32[1,32,3,5]{1,3,2,0} multiply(%fb, %bb)
  %c = f32[1,48,3,5]{1,3,2,0} concatenate(%ma, %mb), dimensions={DIM}
  %r = f32[1,48,3,5]{1,3,2,0} round-nearest-even(%c)
  %lo = f32[] constant(-128)
  %hi = f32[] constant(127)
  %k = f32[1,48,3,5]{1,3,2,0} clamp(%lo, %r, %hi)
  ROOT %q = s8[1,48,3,5]{1,3,2,0} convert(%k)
}

ENTRY %main (x: s8[1,16,3,5], y: s8[1,32,3,5]) -> s8[1,48,3,5] {
  %x = s8[1,16,3,5] parameter(0)
  %y = s8[1,32,3,5] parameter(1)
  %fusion = s8[1,48,3,5]{1,3,2,0} fusion(%x, %y), kind=kLoop, calls=%fused_computation
  ROOT %out = s8[1,48,3,5] copy(%fusion)
}
"""


def test_concatenation_along_the_minor_dim_splits_the_innermost_loop(tmp_path):
    """Channels minor, a requantizing concatenation over the channels runs one inner loop
    per operand: no branch per element, so each loop vectorizes; values as evaluated."""
    module = parse_module(REQUANTIZED_CONCAT.replace("DIM", "1"))
    fusion = module.entry.root.operands[0]
    assert concatenation_cuts(fusion) == [16]
    llvm_module = ir.Module("m")
    fn = emit_elemental_function(
        llvm_module, fusion, "f", lambda b: ElementalEmitter(b, ConstantPool(llvm_module, "m")),
        PointerArg(64, True), [PointerArg(64, True)] * 2, [0])
    inner = [blk.name for blk in fn.blocks if blk.name.startswith("i1.head")]
    assert len(inner) == 2         # channels 0-15, then 16-47
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 16, 3, 5)).astype(np.int8)
    y = rng.integers(-128, 128, (1, 32, 3, 5)).astype(np.int8)
    compiled = compile_module(parse_module(REQUANTIZED_CONCAT.replace("DIM", "1")), tmp_path)
    (want,) = evaluate(module, [x, y])
    np.testing.assert_array_equal(compiled(x, y)[0], want)


def test_does_not_split_loops_at_a_concatenation_along_another_dim():
    text = REQUANTIZED_CONCAT.replace("DIM", "2").replace("48,3,5", "16,9,5") \
        .replace("%b = s8[1,32,3,5]", "%b = s8[1,16,6,5]").replace("s8[1,32,3,5]", "s8[1,16,6,5]") \
        .replace("f32[1,32,3,5]", "f32[1,16,6,5]")
    assert concatenation_cuts(parse_module(text).entry.root.operands[0]) == []


# --- targets and symbols ---------------------------------------------------

@pytest.mark.parametrize("triple,cpu,elf_class,machine", [
    ("aarch64-unknown-linux-gnu", None, 2, 183),
    ("thumbv7em-none-eabihf", "cortex-m4", 1, 40),
    ("riscv64-unknown-linux-gnu", None, 2, 243),
])
def test_cross_targets_produce_elf_objects(triple, cpu, elf_class, machine):
    art = _emit(small_model(), triple=triple, cpu=cpu)
    obj = art.object_code
    assert obj[:4] == b"\x7fELF" and obj[4] == elf_class
    assert int.from_bytes(obj[18:20], "little") == machine
    assert f"Target triple: {triple}" in art.header


def test_unknown_triple_is_a_clear_error():
    with pytest.raises(XlacError, match="unknown target triple"):
        make_target("nosucharch-unknown-none")


def test_vector_width_follows_features():
    assert vector_bytes_for("x86_64-pc-linux-gnu", "+avx512f,+avx2") == 64
    assert vector_bytes_for("x86_64-pc-linux-gnu", "+avx2,-avx512f") == 32
    assert vector_bytes_for("x86_64-pc-linux-gnu", "") == 16
    assert vector_bytes_for("aarch64-unknown-linux-gnu", "") == 16
    assert vector_bytes_for("thumbv7em-none-eabihf", "") == 4


def test_object_needs_only_memcpy_memset_and_runtime(tmp_path):
    obj = tmp_path / "small.o"
    obj.write_bytes(_emit(small_model()).object_code)
    undefined = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True,
                               check=True).stdout.split()
    names = [s for s in undefined if s not in ("U", "w")]
    assert all(n in ("memcpy", "memset") or n.startswith("xlac_") for n in names), names


# --- header ----------------------------------------------------------------

def test_header_declares_the_interface(built):
    header = built[0].artifact.header
    assert "#define small_ARENA_SIZE" in header and "#define small_ARENA_ALIGN 64u" in header
    assert "#define small_NUM_INPUTS 1" in header and "#define small_NUM_OUTPUTS 2" in header
    assert "#define small_input_0_SIZE 16000u" in header
    assert "int small_run(const float *input_0, float *relu_out, float *t_int, void *arena);" \
        in header
    assert "extern const xlac_model_info small_info;" in header
    assert '"relu/out", f32[16x250]' in header


@pytest.mark.parametrize("compiler,flags", [
    ("cc", ["-x", "c", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]),
    ("g++", ["-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror"]),
])
def test_header_compiles_standalone(built, compiler, flags):
    _, work = built
    src = work / f"include_{compiler}.c"
    src.write_text('#include "small.h"\nint main(void) { return (int)small_NUM_INPUTS - 1; }\n')
    subprocess.run([compiler, *flags, f"-I{RUNTIME_DIR}", f"-I{work}", "-c", str(src),
                    "-o", str(work / f"include_{compiler}.o")], check=True)


def test_c_program_links_and_runs(built):
    """The typed entry from a real C program: the cffi path alone can hide a bad header."""
    _, work = built
    src = work / "main.c"
    src.write_text(r'''
#include <stdio.h>
#include <string.h>
#include "small.h"
static _Alignas(64) unsigned char arena[small_ARENA_SIZE + 1];
int main(void) {
  static float x[small_input_0_COUNT], y[small_relu_out_COUNT], z[small_t_int_COUNT];
  for (unsigned i = 0; i < small_input_0_COUNT; i++) x[i] = (float)i - 500.0f;
  int status = small_run(x, y, z, arena);
  double sum = 0;
  for (unsigned i = 0; i < small_relu_out_COUNT; i++) sum += y[i];
  printf("%d %.1f %d %s\n", status, sum, memcmp(x, z, sizeof x) == 0,
         xlac_status_string(small_run(x, y, z, NULL)));
  return 0;
}
''')
    exe = work / "main"
    subprocess.run(["cc", "-std=c11", f"-I{RUNTIME_DIR}", f"-I{work}", str(src),
                    str(work / "small.o"), str(RUNTIME_DIR / "xlac_runtime.c"), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    x = np.arange(4000, dtype=np.float32).reshape(16, 250) - 500
    want = float(expected(x)[0].astype(np.float64).sum())
    assert out[0] == "0" and abs(float(out[1]) - want) <= 1e-6 * abs(want) and out[2] == "1"
    assert " ".join(out[3:]) == "a required pointer argument is NULL"


def test_narrow_types_through_a_c_program(tmp_path):
    """float8 and 4-bit values cross the C interface as bytes: the 4-bit ones in the low
    bits (the bits above are ignored on input and written as zero), and NAME_info names
    their xlac_dtype."""
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F8E4M3FN, (4,)), "x")
    k = b.parameter(1, Shape.array(dtypes.S4, (4,)), "k")
    y = b.op(Opcode.CONVERT, x, shape=x.shape.with_dtype(F32))
    z = b.op(Opcode.ADD, k, k)
    m = Module("narrow")
    m.add_computation(b.build(b.tuple([y, z])), entry=True)
    m.signature = Signature([TensorSpec("x", dtypes.F8E4M3FN, (4,)),
                             TensorSpec("k", dtypes.S4, (4,))],
                            [TensorSpec("y", F32, (4,)), TensorSpec("z", dtypes.S4, (4,))])
    compile_module(m, tmp_path, name="narrow")
    header = (tmp_path / "narrow.h").read_text()
    assert ("int narrow_run(const uint8_t *x, const uint8_t *k, float *y, uint8_t *z, "
            "void *arena);") in header
    src = tmp_path / "main.c"
    src.write_text(r'''
#include <stdio.h>
#include "narrow.h"
int main(void) {
  /* 1.0, -2.0, 448, NaN in f8e4m3fn; 7, -8, 3 (with garbage above), -1 in s4 */
  static const uint8_t x[4] = {0x38, 0xC0, 0x7E, 0x7F}, k[4] = {0x07, 0x08, 0xF3, 0x0F};
  float y[4];
  uint8_t z[4];
  int status = narrow_run(x, k, y, z, NULL);
  printf("%d %g %g %g %d %d %d %d %d %d %d\n", status, y[0], y[1], y[2], y[3] != y[3],
         z[0], z[1], z[2], z[3], narrow_info.inputs[0].dtype == XLAC_F8E4M3FN,
         narrow_info.outputs[1].dtype == XLAC_S4);
  return 0;
}
''')
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-I{RUNTIME_DIR}", f"-I{tmp_path}",
                    str(src), str(tmp_path / "narrow.o"), str(RUNTIME_DIR / "xlac_runtime.c"),
                    "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    # 7+7 = 14 wraps to -2 (0x0E), -8-8 to 0, 3+3 = 6, -1-1 = -2
    assert out == ["0", "1", "-2", "448", "1", "14", "0", "6", "14", "1", "1"]


# --- calling conventions ---------------------------------------------------

def test_outputs_and_status_codes(built):
    model, _ = built
    x = np.random.default_rng(1).standard_normal((16, 250)).astype(np.float32)
    for got, want in zip(model(x), expected(x)):
        np.testing.assert_array_equal(got, want)
    ffi = model.ffi
    keep, arena = model.arena()
    misaligned = ffi.cast("void *", int(ffi.cast("uintptr_t", arena)) + 4)
    assert model.call([x], misaligned)[0] == 2
    assert model.call([x], ffi.NULL)[0] == 1
    in_null = ffi.new("void *[]", [ffi.NULL])
    outs = ffi.new("void *[]", 2)
    assert model.run_v(in_null, outs, arena) == 1
    assert model.run_v(ffi.NULL, outs, arena) == 1


def test_two_threads_with_two_arenas_agree(built):
    model, _ = built
    xs = [np.random.default_rng(s).standard_normal((16, 250)).astype(np.float32)
          for s in (2, 3)]
    results = {}

    def worker(k):
        keep, arena = model.arena()
        results[k] = [model.call([xs[k]], arena)[1] for _ in range(50)]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        for outs in results[k]:
            np.testing.assert_array_equal(outs[0], expected(xs[k])[0])


def test_model_info_describes_the_model(built):
    model, work = built
    ffi = cffi.FFI()
    # Declared without const: cffi's ABI mode cannot read const globals.
    ffi.cdef(DECLARATIONS + "extern xlac_model_info small_info;")
    lib = ffi.dlopen(str(work / "libmodels.so"))
    info = lib.small_info
    assert ffi.string(info.name) == b"small"
    assert info.arena_size == model.assignment.arena_size and info.arena_align == 64
    assert (info.num_inputs, info.num_outputs) == (1, 2)
    out = info.outputs[0]
    assert ffi.string(out.name) == b"relu/out" and ffi.string(out.c_name) == b"relu_out"
    assert out.dtype == 11 and out.rank == 2 and list(out.dims[0:2]) == [16, 250]
    assert out.size_bytes == 16000
    assert ffi.string(info.target_triple) == model.artifact.target.triple.encode()


# --- names -----------------------------------------------------------------

@pytest.mark.parametrize("name,ident", [
    ("input:0", "input_0"), ("0abc", "t0abc"), ("_x", "t_x"), ("int", "t_int"),
    ("class", "t_class"), ("arena", "t_arena"), ("ARENA", "t_ARENA"), ("size_t", "t_size_t"),
    ("INT8_MAX", "t_INT8_MAX"), ("", "t"), ("ok_name", "ok_name"),
])
def test_c_identifier_rule(name, ident):
    assert c_identifier(name) == ident


def test_c_identifiers_are_unique():
    assert unique_c_identifiers(["a.b", "a:b", "a_b", "x"]) == ["a_b", "a_b_2", "a_b_3", "x"]


def test_model_name_identifier():
    assert c_identifier_for_model("my-model.v2") == "my_model_v2"
    assert c_identifier_for_model("3net") == "m3net"

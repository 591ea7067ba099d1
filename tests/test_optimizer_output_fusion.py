"""Output fusion: an integer convolution or dot takes its requantization, on HLO text."""
import numpy as np

from xlac.hlo import Opcode, dtypes
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module
from xlac.hlo.verifier import verify
from xlac.optimizer import DeadCodeElimination, InstructionFusion
from xlac.hlo.fusion import output_fusion_core
from xlac.optimizer.fusion import OutputFusion
from hlo_util import CPU, parse
from test_optimizer_quantization import integers, lit, module, shape

X, Y = (1, 2, 5, 5), (1, 3, 5, 5)
S32, F32 = shape("s32", Y), shape("f32", Y)


def requantized(tail: str = "", root: str | None = None, residual: str = "") -> str:
    """conv(pad(x, -3), w) in s32, then T(clamp(lo, round(f32(acc + B(b)) * B(m)) + zy,
    hi)); ``tail`` goes on after the s8 value %y."""
    w = integers((3, 2, 3, 3))
    params = f"x: {shape('s8', X)}" + (f", r: {shape('s8', Y)}" if residual else "")
    body = f"""
      %x = {shape('s8', X)} parameter(0){residual}
      %zx = s8[]{{}} constant(-3)
      %pad = {shape('s8', (1, 2, 7, 7))} pad({shape('s8', X)} %x, s8[]{{}} %zx), padding=0_0x0_0x1_1x1_1
      %w = {shape('s8', (3, 2, 3, 3))} constant({lit(w, dtypes.S8)})
      %conv = {S32} convolution({shape('s8', (1, 2, 7, 7))} %pad, {shape('s8', (3, 2, 3, 3))} %w), window={{size=3x3}}, dim_labels=bf01_oi01->bf01
      %b = s32[3]{{0}} constant({{100, -2000, 7}})
      %bb = {S32} broadcast(s32[3]{{0}} %b), dimensions={{1}}
      %acc = {S32} add({S32} %conv, {S32} %bb)
      %f = {F32} convert({S32} %acc)
      %m = f32[3]{{0}} constant({{0.001, 0.0005, 0.002}})
      %mb = {F32} broadcast(f32[3]{{0}} %m), dimensions={{1}}
      %scaled = {F32} multiply({F32} %f, {F32} %mb)
      %rounded = {F32} round-nearest-even({F32} %scaled)
      %lo = f32[]{{}} constant(-128)
      %hi = f32[]{{}} constant(127)
      %clamped = {F32} clamp(f32[]{{}} %lo, {F32} %rounded, f32[]{{}} %hi)
      %y = {shape('s8', Y)} convert({F32} %clamped){tail}"""
    if root:
        body += f"\n      ROOT {root}"
    return module(params, root.split(" ")[2] if root else shape("s8", Y), body)


def fused(text: str, loop_fusion: bool = False):
    m = parse_module(text)
    args = [integers(p.shape.dims) for p in m.entry.parameters]
    before = evaluate(m, args)
    changed = OutputFusion(CPU).run(m)
    if loop_fusion:
        InstructionFusion(CPU).run(m)
    DeadCodeElimination().run(m)
    verify(m)
    for a, b in zip(before, evaluate(m, args)):
        np.testing.assert_array_equal(a, b)
    return m, changed


def output_fusions(m):
    return [i for i in m.entry.instructions
            if i.opcode is Opcode.FUSION and i.attrs["kind"] == "kOutput"]


def fused_ops(fusion) -> list[str]:
    return [i.opcode.text for i in fusion.called[0].instructions
            if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT)]


def test_integer_convolution_takes_its_requantization_and_its_input_padding():
    m, changed = fused(requantized())
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion and fusion.shape.dtype == dtypes.S8
    assert fused_ops(fusion)[:2] == ["pad", "convolution"]
    assert fused_ops(fusion)[-1] == "convert"
    x = m.entry.parameters[0]
    assert fusion.operands[0] is x      # the kernel reads x and pads as it reads


def test_epilogue_is_cut_back_to_its_narrowest_value():
    # y is dequantized again for a reduction: the s8 value is what goes to memory
    text = requantized(tail=f"""
      %yf = {F32} convert({shape('s8', Y)} %y)
      %zero = f32[]{{}} constant(0)""", root=f"%sum = f32[]{{}} reduce({F32} %yf, f32[]{{}} "
                                           f"%zero), dimensions={{0,1,2,3}}, to_apply=%add")
    text = text.replace("HloModule m\n", "HloModule m\n\n%add (a: f32[]{}, b: f32[]{}) -> "
                        "f32[]{} {\n  %a = f32[]{} parameter(0)\n  %b = f32[]{} parameter(1)\n"
                        "  ROOT %s = f32[]{} add(f32[]{} %a, f32[]{} %b)\n}\n")
    m, changed = fused(text)
    (fusion,) = output_fusions(m)
    assert fusion.shape.dtype == dtypes.S8


DEQUANTIZED = f"""
      %yf = {F32} convert({shape('s8', Y)} %y)
      %zy = f32[]{{}} constant(-3)
      %zb = {F32} broadcast(f32[]{{}} %zy), dimensions={{}}
      %ys = {F32} subtract({F32} %yf, {F32} %zb)
      %sy = f32[]{{}} constant(0.25)
      %sb = {F32} broadcast(f32[]{{}} %sy), dimensions={{}}"""


def test_epilogue_that_reaches_the_model_output_is_not_cut():
    # the last layer dequantized: the kernel writes the f32 output, no s8 copy in the arena
    m, changed = fused(requantized(tail=DEQUANTIZED, root=f"%out = {F32} multiply({F32} %ys, "
                                                         f"{F32} %sb)"))
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion and fusion.shape.dtype == dtypes.F32
    assert fusion.called[0].root.opcode is Opcode.MULTIPLY and "subtract" in fused_ops(fusion)


def test_does_not_take_a_dequantization_that_is_no_model_output():
    # the f32 value goes on to a transpose, which the epilogue cannot index: cut back to s8
    m, changed = fused(requantized(tail=DEQUANTIZED + f"""
      %out = {F32} multiply({F32} %ys, {F32} %sb)""",
        root=f"%t = {F32} transpose({F32} %out), dimensions={{0,1,3,2}}"))
    (fusion,) = output_fusions(m)
    assert fusion.shape.dtype == dtypes.S8


def quantized_input(op: str = "", contraction: str = "dot") -> str:
    """An integer dot (or 1x1 convolution) of a model input quantized to s8, with ``op``
    (an element-wise opcode) applied to the input first."""
    w = integers((37, 5) if contraction == "dot" else (5, 37, 1, 1))
    x = "%x" if not op else "%e"
    first = f"\n  %e = f32[1,37,1,1] {op}(%x)" if op else ""
    if contraction == "dot":
        shapes, wshape = ("f32[2,37]", "s8[2,37]", "s32[2,5]"), "s8[37,5]"
        core = "dot(%q, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    else:
        shapes, wshape = ("f32[1,37,1,1]", "s8[1,37,1,1]", "s32[1,5,1,1]"), "s8[5,37,1,1]"
        core = "convolution(%q, %w), window={size=1x1}, dim_labels=bf01_oi01->bf01"
    f, q, acc = shapes
    first = first.replace("f32[1,37,1,1]", f)
    return f"""HloModule m

ENTRY %main (x: {f}) -> {acc} {{
  %x = {f} parameter(0){first}
  %s = f32[] constant(0.03)
  %sb = {f} broadcast(%s), dimensions={{}}
  %d = {f} divide({x}, %sb)
  %r = {f} round-nearest-even(%d)
  %lo = f32[] constant(-128)
  %hi = f32[] constant(127)
  %c = {f} clamp(%lo, %r, %hi)
  %q = {q} convert(%c)
  %w = {wshape} constant({lit(w, dtypes.S8)})
  ROOT %acc = {acc} {core}
}}
"""


def prologue_fused(text: str):
    m = parse(text)
    x = np.random.default_rng(2).standard_normal(m.entry.parameters[0].shape.dims) * 3
    args = [x.astype(np.float32)]
    before = evaluate(m, args)
    changed = OutputFusion(CPU).run(m)
    DeadCodeElimination().run(m)
    verify(m)
    for a, b in zip(before, evaluate(m, args)):
        np.testing.assert_array_equal(a, b)
    return m, changed


def dynamic_dot(contraction: str = "s32") -> str:
    """Dynamic quantization's MatMulIntegerToFloat: u8 activations times constant s8
    weights in s32, split into heads by a reshape, rescaled by the run-time scale (the
    same in f32 when ``contraction`` is f32)."""
    integer = contraction == "s32"
    a = shape("u8" if integer else "f32", (4, 8))
    w = shape("s8" if integer else "f32", (8, 6))
    acc, heads = shape(contraction, (4, 6)), shape(contraction, (4, 2, 3))
    out = shape("f32", (4, 2, 3))
    weights = lit(integers((8, 6)), dtypes.S8 if integer else dtypes.F32)
    return module(f"a: {a}, s: f32[]{{}}", out, f"""
      %a = {a} parameter(0)
      %s = f32[]{{}} parameter(1)
      %w = {w} constant({weights})
      %dot = {acc} dot({a} %a, {w} %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
      %r = {heads} reshape({acc} %dot)
      %f = {out} convert({heads} %r)
      %sb = {out} broadcast(f32[]{{}} %s), dimensions={{}}
      %y = {out} multiply({out} %f, {out} %sb)""")


def _dynamic_args(m):
    rng = np.random.default_rng(3)
    args = []
    for p in m.entry.parameters:
        dt = p.shape.dtype
        if dt == dtypes.U8:
            args.append(rng.integers(0, 255, p.shape.dims, endpoint=True).astype(np.uint8))
        elif dt == dtypes.S8:
            args.append(integers(p.shape.dims))
        else:
            args.append(rng.standard_normal(p.shape.dims).astype(np.float32))
    return args


def test_integer_dot_without_an_epilogue_is_a_fusion_of_its_own():
    # the reshape ends the chain before any narrower value: the dot is still an output
    # fusion, which the integer kernels run; the rescaling stays a loop after it
    m = parse_module(dynamic_dot())
    args = _dynamic_args(m)
    before = evaluate(m, args)
    assert OutputFusion(CPU).run(m)
    DeadCodeElimination().run(m)
    verify(m)
    (fusion,) = output_fusions(m)
    assert fused_ops(fusion) == ["dot"] and fusion.shape.dtype == dtypes.S32
    assert output_fusion_core(fusion.called[0]).opcode is Opcode.DOT
    assert m.entry.root.opcode is Opcode.MULTIPLY
    for x, y in zip(before, evaluate(m, args)):
        np.testing.assert_array_equal(x, y)


def test_does_not_wrap_a_float_dot_without_an_epilogue():
    # a float dot's kernels run the bare dot; only its epilogue makes a fusion
    m = parse_module(dynamic_dot("f32"))
    assert not OutputFusion(CPU).run(m)
    assert not output_fusions(m)


def test_does_not_quantize_the_input_of_a_dot_as_it_reads():
    # the kernel reads each lhs element once per panel of output columns: quantized as it
    # reads, the divide would run that many times (a quantized MLP's first layer); a loop
    # writes the s8 copy once, the kernel reads it
    for op in ("", "tanh"):
        m, _ = prologue_fused(quantized_input(op))
        (fusion,) = output_fusions(m)
        assert fused_ops(fusion) == ["dot"]
        assert fusion.operands[0].opcode is Opcode.CONVERT


def test_does_not_quantize_the_input_of_a_convolution_as_it_reads():
    # a convolution reads each input element once per tap: it reads the s8 copy
    m, _ = prologue_fused(quantized_input(contraction="convolution"))
    (fusion,) = output_fusions(m)
    assert fused_ops(fusion) == ["convolution"]
    assert fusion.operands[0].opcode is Opcode.CONVERT


def test_does_not_fuse_a_float_convolution_into_a_non_elementwise_consumer():
    # the transpose reads the convolution's elements elsewhere than it stores them
    text = f"""HloModule m

ENTRY %main (x: {shape('f32', X)}, w: {shape('f32', (3, 2, 3, 3))}) -> {F32} {{
  %x = {shape('f32', X)} parameter(0)
  %w = {shape('f32', (3, 2, 3, 3))} parameter(1)
  %conv = {F32} convolution({shape('f32', X)} %x, {shape('f32', (3, 2, 3, 3))} %w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01
  ROOT %t = {F32} transpose({F32} %conv), dimensions={{0,1,3,2}}
}}
"""
    m = parse_module(text)
    assert not OutputFusion(CPU).run(m)


def test_does_not_take_a_value_the_epilogue_cannot_index():
    # the transpose reads y at other elements: the epilogue stops before it
    text = requantized(tail=f"""
      %yt = {shape('s8', Y)} transpose({shape('s8', Y)} %y), dimensions={{0,1,3,2}}
      %yy = {shape('s8', Y)} add({shape('s8', Y)} %y, {shape('s8', Y)} %yt)""")
    m, _ = fused(text, loop_fusion=True)
    (fusion,) = output_fusions(m)
    assert fused_ops(fusion)[-1] == "convert" and "transpose" not in fused_ops(fusion)


def test_loop_fusion_brings_a_dequantized_residual_into_the_epilogue():
    # y + dq(r): the dequantization of the other input runs inside the kernel's epilogue
    text = requantized(residual=f"""
      %r = {shape('s8', Y)} parameter(1)""", tail=f"""
      %yf = {F32} convert({shape('s8', Y)} %y)
      %rf = {F32} convert({shape('s8', Y)} %r)
      %half = f32[]{{}} constant(0.5)
      %halfb = {F32} broadcast(f32[]{{}} %half), dimensions={{}}
      %rs = {F32} multiply({F32} %rf, {F32} %halfb)
      %sum = {F32} add({F32} %yf, {F32} %rs)
      %out = {shape('s8', Y)} convert({F32} %sum)""")
    m, _ = fused(text, loop_fusion=True)
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion
    r = m.entry.parameters[1]
    assert r in fusion.operands and "multiply" in fused_ops(fusion)[-4:]


# -- float convolutions: the epilogue their kernel applies ------------------------------

XD, WD = (1, 3, 6, 6), (3, 1, 3, 3)
FY = shape("f32", (1, 3, 6, 6))


def depthwise(tail: str, groups: int = 3, wd=WD) -> str:
    """A float depthwise convolution %conv with a bias %bb and scalars %zero, %six;
    ``tail`` computes on from %conv (its last line is the root)."""
    y = shape("f32", (1, wd[0], 6, 6))
    body = f"""
      %x = {shape('f32', XD)} parameter(0)
      %r = {y} parameter(1)
      %w = {shape('f32', wd)} constant({lit(np.linspace(-1, 1, np.prod(wd)).reshape(wd), dtypes.F32)})
      %conv = {y} convolution({shape('f32', XD)} %x, {shape('f32', wd)} %w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01, feature_group_count={groups}
      %b = f32[{wd[0]}]{{0}} constant({lit(np.arange(wd[0]) - 1.5, dtypes.F32)})
      %bb = {y} broadcast(f32[{wd[0]}]{{0}} %b), dimensions={{1}}
      %zero = f32[]{{}} constant(0)
      %six = f32[]{{}} constant(6){tail}"""
    return module(f"x: {shape('f32', XD)}, r: {y}", y, body)


def float_fused(text: str, loop_fusion: bool = False):
    m = parse_module(text)
    rng = np.random.default_rng(5)
    args = [(rng.standard_normal(p.shape.dims) * 4).astype(np.float32)
            for p in m.entry.parameters]
    before = evaluate(m, args)
    changed = OutputFusion(CPU).run(m)
    if loop_fusion:
        InstructionFusion(CPU).run(m)
    DeadCodeElimination().run(m)
    verify(m)
    for a, b in zip(before, evaluate(m, args)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return m, changed


def test_float_depthwise_convolution_takes_its_bias_and_relu6():
    m, changed = float_fused(depthwise(f"""
      %a = {FY} add({FY} %conv, {FY} %bb)
      %y = {FY} clamp(f32[]{{}} %zero, {FY} %a, f32[]{{}} %six)"""), loop_fusion=True)
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion
    assert fused_ops(fusion) == ["convolution", "broadcast", "add", "clamp"]
    assert fusion.operands[0] is m.entry.parameters[0]


def test_float_depthwise_epilogue_stops_at_what_its_kernel_cannot_apply():
    # floor is no epilogue step (a library call on baseline x86-64)
    m, _ = float_fused(depthwise(f"""
      %a = {FY} add({FY} %conv, {FY} %bb)
      %y = {FY} floor({FY} %a)"""), loop_fusion=True)
    (fusion,) = output_fusions(m)
    assert fused_ops(fusion) == ["convolution", "broadcast", "add"]
    assert m.entry.root is not fusion


def test_float_convolution_takes_the_residual_add_and_the_relu_after_it():
    # relu(conv(x) + b + r): r is read at the element stored, the ReLU after it goes too
    m, changed = float_fused(depthwise(f"""
      %a = {FY} add({FY} %conv, {FY} %bb)
      %s = {FY} add({FY} %r, {FY} %a)
      %zb = {FY} broadcast(f32[]{{}} %zero), dimensions={{}}
      %y = {FY} maximum({FY} %s, {FY} %zb)"""), loop_fusion=True)
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion
    assert fused_ops(fusion) == ["convolution", "broadcast", "add", "add", "broadcast",
                                 "maximum"]
    x, r = m.entry.parameters
    assert fusion.operands[0] is x and r in fusion.operands[2:]


def test_each_convolution_of_a_chain_takes_its_epilogue():
    # Fused from the last: each fusion replaces values the epilogues before it read (the
    # first ReLU is the second convolution's input and the third's residual), and every
    # ReLU reads one broadcast zero
    def conv(n: int, x: str) -> str:
        return (f"%c{n} = {FY} convolution({FY} %{x}, {shape('f32', WD)} %w), window="
                "{size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=3")
    m, changed = float_fused(depthwise(f"""
      %zb = {FY} broadcast(f32[]{{}} %zero), dimensions={{}}
      %a = {FY} add({FY} %conv, {FY} %bb)
      %y0 = {FY} maximum({FY} %a, {FY} %zb)
      {conv(1, "y0")}
      %a1 = {FY} add({FY} %c1, {FY} %bb)
      %y1 = {FY} maximum({FY} %a1, {FY} %zb)
      {conv(2, "y1")}
      %s2 = {FY} add({FY} %c2, {FY} %y0)
      %y = {FY} maximum({FY} %s2, {FY} %zb)"""), loop_fusion=True)
    assert changed
    f0, f1, f2 = output_fusions(m)
    assert m.entry.root is f2
    assert f0.operands[0] is m.entry.parameters[0]
    assert f1.operands[0] is f0 and f2.operands[0] is f1 and f0 in f2.operands[2:]
    assert fused_ops(f2) == ["convolution", "add", "broadcast", "maximum"]


def test_a_residual_that_is_the_convolutions_input_is_passed_again():
    # x + conv(x): the kernel reads x as its input (operand 0) and as the residual (2)
    m, changed = float_fused(depthwise(f"""
      %y = {FY} add({FY} %conv, {FY} %x)"""))
    assert changed
    (fusion,) = output_fusions(m)
    x = m.entry.parameters[0]
    assert fusion.operands[0] is x and fusion.operands[2] is x
    fused_params = fusion.called[0].parameters
    assert len(fused_params) == 3 and fusion.called[0].root.operands[1] is fused_params[2]


def test_the_residual_keeps_its_buffer():
    # r is read again after the convolution; the fusion overwrites no operand in place
    # (a GEMM stores partial sums before it reads the residual), so nothing it reads
    # changes under it, in any order
    from xlac.optimizer.aliasing import in_place_operands
    from xlac.optimizer.memory_model import MemoryModel
    m, _ = float_fused(depthwise(f"""
      %s = {FY} add({FY} %conv, {FY} %r)
      %t = {FY} tanh({FY} %r)
      %y = {FY} divide({FY} %s, {FY} %t)"""), loop_fusion=True)
    (fusion,) = output_fusions(m)
    assert fused_ops(fusion) == ["convolution", "add", "divide"]
    assert in_place_operands(fusion) == []
    assert fusion not in MemoryModel(m).in_place


def test_does_not_take_a_residual_that_broadcasts():
    # a value broadcast along a spatial dim is neither per channel nor read at the
    # stored element: the epilogue stops before it
    m, changed = float_fused(depthwise(f"""
      %v = f32[6]{{0}} constant({{1, 2, 3, 4, 5, 6}})
      %vb = {FY} broadcast(f32[6]{{0}} %v), dimensions={{3}}
      %y = {FY} add({FY} %conv, {FY} %vb)"""))
    assert not changed and not output_fusions(m)


def test_grouped_float_convolution_takes_its_epilogue_too():
    # three groups of one input channel, two outputs each: the GEMM kernel's epilogue
    y = shape("f32", (1, 6, 6, 6))
    m, changed = float_fused(depthwise(f"""
      %y = {y} maximum({y} %conv, {y} %bb)""", wd=(6, 1, 3, 3)))
    assert changed
    (fusion,) = output_fusions(m)
    assert fused_ops(fusion) == ["convolution", "broadcast", "maximum"]


def test_does_not_fuse_a_float_convolution_of_other_dimension_numbers():
    # NHWC: the naive loop nest runs it, which applies no epilogue
    text = f"""HloModule m

ENTRY %main (x: f32[1,6,6,3]{{3,2,1,0}}, w: f32[3,3,1,3]{{3,2,1,0}}) -> f32[1,6,6,3]{{3,2,1,0}} {{
  %x = f32[1,6,6,3]{{3,2,1,0}} parameter(0)
  %w = f32[3,3,1,3]{{3,2,1,0}} parameter(1)
  %conv = f32[1,6,6,3]{{3,2,1,0}} convolution(f32[1,6,6,3]{{3,2,1,0}} %x, f32[3,3,1,3]{{3,2,1,0}} %w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, feature_group_count=3
  %zero = f32[]{{}} constant(0)
  %z = f32[1,6,6,3]{{3,2,1,0}} broadcast(f32[]{{}} %zero), dimensions={{}}
  ROOT %y = f32[1,6,6,3]{{3,2,1,0}} maximum(f32[1,6,6,3]{{3,2,1,0}} %conv, f32[1,6,6,3]{{3,2,1,0}} %z)
}}
"""
    m = parse_module(text)
    assert not OutputFusion(CPU).run(m)


def test_float_convolution_takes_the_running_value_as_any_operand():
    m, changed = float_fused(depthwise(f"""
      %y = {FY} subtract({FY} %bb, {FY} %conv)"""))
    assert changed


# -- float dots: bias per column, activation, residual ----------------------------------

ADD = """
%add (a: f32[]{}, b: f32[]{}) -> f32[]{} {
  %a = f32[]{} parameter(0)
  %b = f32[]{} parameter(1)
  ROOT %s = f32[]{} add(f32[]{} %a, f32[]{} %b)
}
"""
MAX = ADD.replace("%add", "%max").replace("} add(", "} maximum(")


def dot_module(tail: str, rhs=(16, 12), out=(8, 12), dims="lhs_contracting_dims={1}, "
               "rhs_contracting_dims={0}", computations: str = "") -> str:
    """%d = a (8 x 16) . w, with %b, %zero and %r (of the result's shape) to read;
    ``tail`` computes on from %d; ``computations`` (reducers) go before the entry."""
    y = shape("f32", out)
    wv = np.linspace(-1, 1, int(np.prod(rhs))).reshape(rhs)
    body = f"""
      %a = {shape('f32', (8, 16))} parameter(0)
      %r = {y} parameter(1)
      %w = {shape('f32', rhs)} constant({lit(wv, dtypes.F32)})
      %d = {y} dot({shape('f32', (8, 16))} %a, {shape('f32', rhs)} %w), {dims}
      %zero = f32[]{{}} constant(0){tail}"""
    return module(f"a: {shape('f32', (8, 16))}, r: {y}", y, body, computations)


DY = shape("f32", (8, 12))
DOT_BIAS = f"""
      %b = f32[12]{{0}} constant({lit(np.arange(12) - 5.5, dtypes.F32)})
      %bb = {DY} broadcast(f32[12]{{0}} %b), dimensions={{1}}"""


def test_float_dot_takes_its_bias_residual_and_relu():
    m, changed = float_fused(dot_module(DOT_BIAS + f"""
      %s = {DY} add({DY} %d, {DY} %bb)
      %t = {DY} add({DY} %s, {DY} %r)
      %zb = {DY} broadcast(f32[]{{}} %zero), dimensions={{}}
      %y = {DY} maximum({DY} %t, {DY} %zb)"""), loop_fusion=True)
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion
    assert fused_ops(fusion) == ["dot", "broadcast", "add", "add", "broadcast", "maximum"]


GELU = f"""
      %s = {DY} add({DY} %d, {DY} %bb)
      %c = f32[]{{}} constant(0.70710677)
      %cb = {DY} broadcast(f32[]{{}} %c), dimensions={{}}
      %h = {DY} multiply({DY} %s, {DY} %cb)
      %e = {DY} erf({DY} %h)
      %one = f32[]{{}} constant(1)
      %oneb = {DY} broadcast(f32[]{{}} %one), dimensions={{}}
      %p = {DY} add({DY} %e, {DY} %oneb)
      %q = {DY} multiply({DY} %s, {DY} %p)
      %half = f32[]{{}} constant(0.5)
      %halfb = {DY} broadcast(f32[]{{}} %half), dimensions={{}}"""


def test_float_dot_takes_its_bias_and_gelu():
    # GELU reads the biased value twice (erf's argument and the product): the epilogue
    # is the whole diamond, one value leaves the kernel
    m, changed = float_fused(dot_module(DOT_BIAS + GELU + f"""
      %y = {DY} multiply({DY} %q, {DY} %halfb)"""), loop_fusion=True)
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion
    assert [op for op in fused_ops(fusion) if op != "broadcast"] == \
        ["dot", "add", "multiply", "erf", "add", "multiply", "multiply"]


def test_float_dot_takes_a_select_by_a_compare():
    # LeakyReLU: x >= 0 ? x : 0.1 x
    m, changed = float_fused(dot_module(f"""
      %zb = {DY} broadcast(f32[]{{}} %zero), dimensions={{}}
      %ge = pred[8,12]{{1,0}} compare({DY} %d, {DY} %zb), direction=GE
      %k = f32[]{{}} constant(0.1)
      %kb = {DY} broadcast(f32[]{{}} %k), dimensions={{}}
      %n = {DY} multiply({DY} %d, {DY} %kb)
      %y = {DY} select(pred[8,12]{{1,0}} %ge, {DY} %d, {DY} %n)"""), loop_fusion=True)
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion
    assert [op for op in fused_ops(fusion) if op != "broadcast"] == \
        ["dot", "compare", "multiply", "select"]


def test_float_dot_epilogue_ends_where_a_value_is_read_outside():
    # %p is read by the kernel's root and by a reduce: GELU's last product stays out,
    # and so does everything %p needs but the dot's own chain up to %s
    m, _ = float_fused(dot_module(DOT_BIAS + GELU + f"""
      %z2 = f32[]{{}} constant(0)
      %sum = f32[]{{}} reduce({DY} %p, f32[]{{}} %z2), dimensions={{0,1}}, to_apply=%add
      %sb = {DY} broadcast(f32[]{{}} %sum), dimensions={{}}
      %y = {DY} add({DY} %q, {DY} %sb)""", computations=ADD), loop_fusion=False)
    (fusion,) = output_fusions(m)
    assert [op for op in fused_ops(fusion) if op != "broadcast"] == ["dot", "add"]


def test_does_not_take_a_diamond_whose_branch_is_read_outside():
    # exp(d) + tanh(d), exp(d) also read by a reduce: no single exit holds the dot
    m, changed = float_fused(dot_module(f"""
      %ex = {DY} exponential({DY} %d)
      %th = {DY} tanh({DY} %d)
      %z2 = f32[]{{}} constant(0)
      %sum = f32[]{{}} reduce({DY} %ex, f32[]{{}} %z2), dimensions={{0,1}}, to_apply=%add
      %sb = {DY} broadcast(f32[]{{}} %sum), dimensions={{}}
      %t = {DY} add({DY} %ex, {DY} %th)
      %y = {DY} add({DY} %t, {DY} %sb)""", computations=ADD))
    assert not changed and not output_fusions(m)


def test_does_not_take_an_operand_computed_from_the_dot():
    # d - max over rows of d, broadcast along the columns: the kernel would need its
    # own result before storing it (a softmax's shift)
    m, changed = float_fused(dot_module(f"""
      %lo = f32[]{{}} constant(-inf)
      %mx = f32[12]{{0}} reduce({DY} %d, f32[]{{}} %lo), dimensions={{0}}, to_apply=%max
      %mb = {DY} broadcast(f32[12]{{0}} %mx), dimensions={{1}}
      %y = {DY} subtract({DY} %d, {DY} %mb)""", computations=MAX))
    assert not changed and not output_fusions(m)


def test_does_not_fuse_a_bias_along_a_dots_rows():
    m, changed = float_fused(dot_module(f"""
      %b = f32[8]{{0}} constant({lit(np.arange(8) - 3.5, dtypes.F32)})
      %bb = {DY} broadcast(f32[8]{{0}} %b), dimensions={{0}}
      %y = {DY} add({DY} %d, {DY} %bb)"""))
    assert not changed and not output_fusions(m)


def test_does_not_fuse_a_dot_whose_columns_are_not_its_last_dim():
    # w's two free dims (3, 4) make the product's columns: channel c of the last dim is
    # not column c, so the kernel could not index a bias by it
    y = shape("f32", (8, 3, 4))
    m, changed = float_fused(dot_module(f"""
      %b = f32[4]{{0}} constant({{1, 2, 3, 4}})
      %bb = {y} broadcast(f32[4]{{0}} %b), dimensions={{2}}
      %y = {y} add({y} %d, {y} %bb)""", rhs=(16, 3, 4), out=(8, 3, 4)))
    assert not changed and not output_fusions(m)


def test_float_dot_takes_its_bias_through_the_reshape_that_gives_back_batch_dims():
    # a 3-D MatMul: dot over (batch * rows, k), reshaped back, then bias and ReLU: the
    # reshape keeps the last dim (the channels) and every element's place
    y3 = shape("f32", (2, 4, 12))
    m, changed = float_fused(dot_module(DOT_BIAS.replace(DY, y3).replace(
        "dimensions={1}", "dimensions={2}") + f"""
      %d3 = {y3} reshape({DY} %d)
      %s = {y3} add({y3} %d3, {y3} %bb)
      %zb = {y3} broadcast(f32[]{{}} %zero), dimensions={{}}
      %y = {y3} maximum({y3} %s, {y3} %zb)""").replace(f"-> {DY}", f"-> {y3}"),
        loop_fusion=True)
    assert changed
    (fusion,) = output_fusions(m)
    assert m.entry.root is fusion and fusion.shape.dims == (2, 4, 12)
    assert fused_ops(fusion) == ["dot", "reshape", "broadcast", "add", "broadcast", "maximum"]


def test_does_not_take_a_reshape_that_moves_a_dots_columns():
    # (8, 12) -> (8, 3, 4): channel c is no longer along the last dim
    y3 = shape("f32", (8, 3, 4))
    m, changed = float_fused(dot_module(f"""
      %d3 = {y3} reshape({DY} %d)
      %zb = {y3} broadcast(f32[]{{}} %zero), dimensions={{}}
      %y = {y3} maximum({y3} %d3, {y3} %zb)""").replace(f"-> {DY}", f"-> {y3}"))
    assert not changed and not output_fusions(m)


def test_a_dot_of_a_value_with_itself_reads_it_as_both_operands():
    # a . a^T-like products of one value: the kernel still finds lhs and rhs as
    # parameters 0 and 1
    sq = shape("f32", (8, 8))
    text = module(f"a: {sq}", sq, f"""
      %a = {sq} parameter(0)
      %d = {sq} dot({sq} %a, {sq} %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
      %y = {sq} add({sq} %d, {sq} %a)""")
    m, changed = float_fused(text)
    (fusion,) = output_fusions(m)
    a = m.entry.parameters[0]
    assert fusion.operands == [a, a, a]
    assert [p.attrs["number"] for p in output_fusion_core(fusion.called[0]).operands] == [0, 1]

"""Quantized arithmetic: QDQ models onto their integers, on HLO text.

Each case is a module in the importer's form of DequantizeLinear / QuantizeLinear (see
importers/onnx/quantization.py), run through the pass and DCE; the result is checked in
its text and by evaluating both modules: exactly equal where the rule is exact, within
one quantization step where it is onnxruntime's integer arithmetic in place of the
float model's.
"""
import numpy as np
import pytest

from xlac.hlo import dtypes
from xlac.hlo.evaluator import evaluate
from xlac.hlo.literal_text import format_literal
from xlac.hlo.text import parse_module, print_module
from xlac.hlo.verifier import verify
from xlac.optimizer import DeadCodeElimination
from xlac.optimizer import quantization
from xlac.optimizer.quantization import QuantizedArithmetic

RNG = np.random.default_rng(8)


def lit(value, dtype) -> str:
    return format_literal(np.asarray(value, dtype.np), dtype)


def shape(dtype: str, dims) -> str:
    layout = ",".join(str(d) for d in reversed(range(len(dims))))
    return f"{dtype}[{','.join(map(str, dims))}]{{{layout}}}"


def dq(name: str, src: str, dims, zero_point, scale, axis=None, src_type="s8") -> str:
    """DequantizeLinear as the importer writes it: (f32(src) - B(zp)) * B(scale)."""
    f, one = shape("f32", dims), "f32[]{}" if axis is None else shape("f32", (dims[axis],))
    bdims = "" if axis is None else str(axis)
    return f"""
      %{name}.f = {f} convert({shape(src_type, dims)} %{src})
      %{name}.zp = {one} constant({lit(zero_point, dtypes.F32)})
      %{name}.zpb = {f} broadcast({one} %{name}.zp), dimensions={{{bdims}}}
      %{name}.c = {f} subtract({f} %{name}.f, {f} %{name}.zpb)
      %{name}.s = {one} constant({lit(scale, dtypes.F32)})
      %{name}.sb = {f} broadcast({one} %{name}.s), dimensions={{{bdims}}}
      %{name} = {f} multiply({f} %{name}.c, {f} %{name}.sb)"""


def q(name: str, src: str, dims, zero_point, scale, out="s8") -> str:
    """QuantizeLinear as the importer writes it: T(clamp(lo, round(y / B(s)) + B(zp), hi))."""
    f = shape("f32", dims)
    info = np.iinfo(dtypes.by_name(out).np)
    return f"""
      %{name}.s = f32[]{{}} constant({lit(scale, dtypes.F32)})
      %{name}.sb = {f} broadcast(f32[]{{}} %{name}.s), dimensions={{}}
      %{name}.d = {f} divide({f} %{src}, {f} %{name}.sb)
      %{name}.r = {f} round-nearest-even({f} %{name}.d)
      %{name}.zp = f32[]{{}} constant({zero_point})
      %{name}.zpb = {f} broadcast(f32[]{{}} %{name}.zp), dimensions={{}}
      %{name}.a = {f} add({f} %{name}.r, {f} %{name}.zpb)
      %{name}.lo = f32[]{{}} constant({info.min})
      %{name}.hi = f32[]{{}} constant({info.max})
      %{name}.k = {f} clamp(f32[]{{}} %{name}.lo, {f} %{name}.a, f32[]{{}} %{name}.hi)
      %{name} = {shape(out, dims)} convert({f} %{name}.k)"""


def module(params: str, result: str, body: str, extra: str = "") -> str:
    """An entry over ``body``'s instructions, the last of them the root."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if not any(line.startswith("ROOT ") for line in lines):
        lines[-1] = "ROOT " + lines[-1]
    return (f"HloModule m\n{extra}\nENTRY %main ({params}) -> {result} {{\n"
            + "".join(f"  {line}\n" for line in lines) + "}\n")


def rewrite(text: str, soft_float: bool = False):
    """(module before, module after, whether the pass changed it)."""
    before, after = parse_module(text), parse_module(text)
    changed = QuantizedArithmetic(soft_float).run(after)
    DeadCodeElimination().run(after)
    verify(after)
    return before, after, changed


def integers(dims, dtype=np.int8):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, dims, endpoint=True).astype(dtype)


def steps_apart(before, after, args) -> np.ndarray:
    (a,), (b,) = evaluate(before, args), evaluate(after, args)
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


# --- rule 1: QDQ convolutions and dots -----------------------------------------------

X = (1, 2, 5, 5)
Y = (1, 3, 7, 7)
SX = np.float32(0.05)
SW = np.array([0.01, 0.02, 0.03], np.float32)
W = np.array([[[[90]], [[-20]]], [[[-127]], [[33]]], [[[5]], [[64]]]], np.int8)
BQ = np.array([700, -1500, 0], np.int32)


def qdq_conv(bias_values, relu=True, shared=False, per_input_channel=False, y_scale=0.1):
    """q(relu(conv(dq(x), dq(w)) + B(bias))) with a 1x1 kernel and padding 1; ``shared``:
    the float convolution also feeds a second output; ``per_input_channel``: the weight
    scales vary along the weights' input channels."""
    f = shape("f32", Y)
    act = f"""
      %zero = f32[]{{}} constant(0)
      %zerob = {f} broadcast(f32[]{{}} %zero), dimensions={{}}
      %act = {f} maximum({f} %biased, {f} %zerob)""" if relu else ""
    w_dq = dq("dqw", "w", W.shape, np.zeros(2), SW[:2], axis=1) if per_input_channel \
        else dq("dqw", "w", W.shape, np.zeros(3), SW, axis=0)
    body = f"""
      %x = {shape('s8', X)} parameter(0)""" + dq("dqx", "x", X, -3, SX) + f"""
      %w = {shape('s8', W.shape)} constant({lit(W, dtypes.S8)})""" + w_dq + f"""
      %conv = {f} convolution({shape('f32', X)} %dqx, {shape('f32', W.shape)} %dqw), window={{size=1x1 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01
      %bias = f32[3]{{0}} constant({lit(bias_values, dtypes.F32)})
      %biasb = {f} broadcast(f32[3]{{0}} %bias), dimensions={{1}}
      %biased = {f} add({f} %conv, {f} %biasb)""" + act + q("out", "act" if relu else "biased",
                                                             Y, -100, y_scale)
    if not shared:
        return module(f"x: {shape('s8', X)}", shape("s8", Y), body)
    both = f"({shape('s8', Y)}, {f})"
    return module(f"x: {shape('s8', X)}", both, body + f"""
      ROOT %t = {both} tuple({shape('s8', Y)} %out, {f} %conv)""")


def conv_args():
    return [integers(X)]


def test_qdq_convolution_runs_on_int8_with_the_zero_point_as_padding():
    bias = (BQ * (SX * SW).astype(np.float32)).astype(np.float32)
    before, after, changed = rewrite(qdq_conv(bias))
    assert changed
    text = print_module(after)
    assert "f32[1,3,7,7]{3,2,1,0} convolution" not in text
    assert "s32[1,3,7,7]{3,2,1,0} convolution(s8[1,2,7,7]{3,2,1,0} %pad" in text
    assert "constant(-3)" in text and "padding=0_0x0_0x1_1x1_1" in text    # pad with zx
    assert "constant(-100)" in text          # ReLU: the lower bound is the zero point
    for _ in range(5):
        diff = steps_apart(before, after, conv_args())
        assert diff.max() <= 1 and (diff == 0).mean() > 0.95


def assert_same_on_convolution_inputs(after, floated, relu):
    """``after`` equals the float tail ``floated`` on 20 random inputs and the extremes,
    and those reach over 40 outputs, both bounds among them."""
    inputs = [integers(X) for _ in range(20)] + [np.full(X, v, np.int8) for v in (-128, 127)]
    for x in inputs:
        (a,), (b,) = evaluate(after, [x]), evaluate(floated, [x])
        np.testing.assert_array_equal(a, b)
    seen = {int(v) for x in inputs for v in evaluate(after, [x])[0].flat}
    assert len(seen) > 40 and 127 in seen and (-100 if relu else -128) in seen


@pytest.mark.parametrize("relu", [True, False])
def test_requantization_rounds_in_integers_bit_for_bit(relu, monkeypatch):
    # |f| < 2**22 (the weights bound the accumulators): round(f) + zy is the bits of
    # f + 1.5 * 2**23 less those of 1.5 * 2**23 plus zy, clamped on s32; equal to the
    # float tail (rint, add, clamp in f32) on every input, the extremes included
    bias = (BQ * (SX * SW).astype(np.float32)).astype(np.float32)
    _, after, _ = rewrite(qdq_conv(bias, relu=relu, y_scale=0.003))
    text = print_module(after)
    assert "bitcast-convert(" in text and "round-nearest-even" not in text
    assert "s32[1,3,7,7]{3,2,1,0} clamp(" in text
    monkeypatch.setattr(quantization, "_contraction_bound", lambda *args: None)
    _, floated, _ = rewrite(qdq_conv(bias, relu=relu, y_scale=0.003))
    assert "round-nearest-even" in print_module(floated)
    assert_same_on_convolution_inputs(after, floated, relu)


@pytest.mark.parametrize("relu", [True, False])
def test_soft_float_target_requantizes_in_fixed_point_bit_for_bit(relu):
    # no FPU: (s64(acc) * M + 2**31) >> 32 + zy, clamped, where M / 2**32 is the f32
    # multiplier exactly; equal to the float path on every input, the extremes included
    bias = (BQ * (SX * SW).astype(np.float32)).astype(np.float32)
    _, after, _ = rewrite(qdq_conv(bias, relu=relu, y_scale=0.00317), soft_float=True)
    text = print_module(after)
    assert "s64[1,3,7,7]{3,2,1,0} shift-right-arithmetic(" in text
    assert "f32[" not in text.split("ENTRY")[1].split("convolution")[1]
    _, floated, _ = rewrite(qdq_conv(bias, relu=relu, y_scale=0.00317))
    assert "shift-right-arithmetic" not in print_module(floated)
    assert_same_on_convolution_inputs(after, floated, relu)


@pytest.mark.parametrize("m", [0.00731, 0.0004123, 0.0173961, 0.7716])
def test_fixed_point_multipliers_equal_the_float_path_on_every_accumulator(m):
    m = np.float32(m)
    bound = min(2**17, int(1100 / m))
    fixed = quantization.fixed_point_multipliers(np.array([m]), np.array([bound]), -7, -128,
                                                 127)
    assert fixed is not None
    (mult,), shift = fixed
    assert mult / 2**shift == m
    a = np.arange(-bound, bound + 1, dtype=np.int64)
    want = np.clip(np.rint(a.astype(np.float32) * m).astype(np.int64) - 7, -128, 127)
    got = np.clip(((a * int(mult) + (1 << (shift - 1))) >> shift) - 7, -128, 127)
    np.testing.assert_array_equal(got, want)


def test_does_not_take_fixed_point_where_a_tie_rounds_the_other_way():
    # 0.5 * 1 is a tie: the float path rounds it to 0 (even), the shift up to 1
    assert quantization.fixed_point_multipliers(np.array([0.5], np.float32), np.array([300]),
                                                0, -128, 127) is None
    # f32(0.061) * 500 = 30.50000034: rounded to f32 it is the tie 30.5, then 30 (even);
    # the exact product rounds to 31
    assert quantization.fixed_point_multipliers(np.array([0.061], np.float32),
                                                np.array([600]), 0, -128, 127) is None
    assert quantization.fixed_point_multipliers(np.array([0.061], np.float32),
                                                np.array([499]), 0, -128, 127) is not None


def test_does_not_round_in_integers_where_the_scaled_accumulators_may_pass_2_22():
    # a tiny output scale: |f| may pass 2**22, where f + 1.5 * 2**23 no longer holds
    # round(f) in its low bits; the float tail stays
    bias = (BQ * (SX * SW).astype(np.float32)).astype(np.float32)
    _, after, changed = rewrite(qdq_conv(bias, y_scale=1e-7))
    assert changed
    text = print_module(after)
    assert "round-nearest-even" in text and "bitcast-convert" not in text


def test_qdq_convolution_keeps_a_bias_that_is_not_an_integer_in_float():
    bias = np.array([0.3, -0.01, 2.0], np.float32)
    before, after, changed = rewrite(qdq_conv(bias, relu=False))
    assert changed
    text = print_module(after)
    assert "s8[3,2,1,1]{3,2,1,0} constant" in text and " divide(" in text
    diff = steps_apart(before, after, conv_args())
    assert diff.max() <= 1


def test_does_not_rewrite_a_convolution_with_other_users():
    # the float convolution stays for its other user: computing it twice saves nothing
    _, _, changed = rewrite(qdq_conv(np.zeros(3, np.float32), shared=True))
    assert not changed


def test_does_not_rewrite_per_input_channel_weight_scales():
    # scales along the weights' input channels cannot leave the contraction
    _, _, changed = rewrite(qdq_conv(np.zeros(3, np.float32), per_input_channel=True))
    assert not changed


def qdq_gemm():
    """Gemm's dot (transB) with weights per output column and an integer bias."""
    x, w, y = (1, 4), (3, 4), (1, 3)
    wv = integers(w)
    bq = np.array([-50, 9, 1000], np.int32)
    f = shape("f32", y)
    return module(f"x: {shape('u8', x)}", shape("u8", y), f"""
      %x = {shape('u8', x)} parameter(0)""" + dq("dqx", "x", x, 128, SX, src_type="u8") + f"""
      %w = {shape('s8', w)} constant({lit(wv, dtypes.S8)})""" +
                  dq("dqw", "w", w, np.zeros(3), SW, axis=0) + f"""
      %dot = {f} dot({shape('f32', x)} %dqx, {shape('f32', w)} %dqw), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
      %bias = f32[3]{{0}} constant({lit(bq * (SX * SW).astype(np.float32), dtypes.F32)})
      %biasb = {f} broadcast(f32[3]{{0}} %bias), dimensions={{1}}
      %biased = {f} add({f} %dot, {f} %biasb)""" + q("out", "biased", y, 7, 0.2, out="u8"))


def test_qdq_dot_with_per_column_weights_runs_on_integers():
    before, after, changed = rewrite(qdq_gemm())
    assert changed
    text = print_module(after)
    assert "s32[1,3]{1,0} dot(u8[1,4]{1,0} %x, s8[3,4]{1,0} %" in text
    for _ in range(20):
        diff = steps_apart(before, after, [integers((1, 4), np.uint8)])
        assert diff.max() <= 1


# --- rule 2: integer contractions on the narrow types ---------------------------------

def integer_conv(w_zero_point: int) -> str:
    """ConvInteger's form: conv(s32(x) - B(zx), s32(w) - B(zw)) in s32."""
    x, w, y = (1, 2, 4, 4), (2, 2, 3, 3), (1, 2, 4, 4)
    s = {k: shape("s32", d) for k, d in (("x", x), ("w", w), ("y", y))}
    return module(f"x: {shape('u8', x)}", s["y"], f"""
      %x = {shape('u8', x)} parameter(0)
      %x32 = {s['x']} convert({shape('u8', x)} %x)
      %zx = s32[]{{}} constant(131)
      %zxb = {s['x']} broadcast(s32[]{{}} %zx), dimensions={{}}
      %xc = {s['x']} subtract({s['x']} %x32, {s['x']} %zxb)
      %w = {shape('u8', w)} constant({lit(integers(w, np.uint8), dtypes.U8)})
      %w32 = {s['w']} convert({shape('u8', w)} %w)
      %zw = s32[]{{}} constant({w_zero_point})
      %zwb = {s['w']} broadcast(s32[]{{}} %zw), dimensions={{}}
      %wc = {s['w']} subtract({s['w']} %w32, {s['w']} %zwb)
      ROOT %conv = {s['y']} convolution({s['x']} %xc, {s['w']} %wc), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01""")


@pytest.mark.parametrize("w_zero_point, w_type", [(128, "s8"), (100, "s16")])
def test_integer_convolution_reads_its_operands_narrow(w_zero_point, w_type):
    before, after, changed = rewrite(integer_conv(w_zero_point))
    assert changed
    text = print_module(after)
    assert f"convolution(u8[1,2,6,6]{{3,2,1,0}} %pad, {w_type}[2,2,3,3]" in text
    args = [integers((1, 2, 4, 4), np.uint8)]
    np.testing.assert_array_equal(evaluate(before, args)[0], evaluate(after, args)[0])


def test_integer_dot_subtracts_the_zero_point_times_the_weight_sums():
    x, w = (3, 5), (5, 2)
    s = {k: shape("s32", d) for k, d in (("x", x), ("w", w), ("y", (3, 2)))}
    text = module(f"x: {shape('s8', x)}", s["y"], f"""
      %x = {shape('s8', x)} parameter(0)
      %x32 = {s['x']} convert({shape('s8', x)} %x)
      %zx = s32[]{{}} constant(-17)
      %zxb = {s['x']} broadcast(s32[]{{}} %zx), dimensions={{}}
      %xc = {s['x']} subtract({s['x']} %x32, {s['x']} %zxb)
      %w = {s['w']} constant({lit(integers(w), dtypes.S32)})
      ROOT %dot = {s['y']} dot({s['x']} %xc, {s['w']} %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""")
    before, after, changed = rewrite(text)
    assert changed
    assert "dot(s8[3,5]{1,0} %x, s8[5,2]{1,0}" in print_module(after)
    args = [integers(x)]
    np.testing.assert_array_equal(evaluate(before, args)[0], evaluate(after, args)[0])


def test_integer_dot_takes_a_run_time_zero_point_through_a_reshape():
    # DynamicQuantizeLinear's zero point is computed; matmul_of flattens A's rows first.
    x, w = (2, 3, 5), (5, 2)
    s = {k: shape("s32", d) for k, d in (("x", x), ("r", (6, 5)), ("w", w), ("y", (6, 2)))}
    text = module(f"x: {shape('u8', x)}, z: u8[]{{}}", s["y"], f"""
      %x = {shape('u8', x)} parameter(0)
      %z = u8[]{{}} parameter(1)
      %x32 = {s['x']} convert({shape('u8', x)} %x)
      %zx = s32[]{{}} convert(u8[]{{}} %z)
      %zxb = {s['x']} broadcast(s32[]{{}} %zx), dimensions={{}}
      %xc = {s['x']} subtract({s['x']} %x32, {s['x']} %zxb)
      %rows = {s['r']} reshape({s['x']} %xc)
      %w = {s['w']} constant({lit(integers(w), dtypes.S32)})
      ROOT %dot = {s['y']} dot({s['r']} %rows, {s['w']} %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""")
    before, after, changed = rewrite(text)
    assert changed
    assert "dot(u8[6,5]{1,0} %reshape" in print_module(after)
    for z in (0, 77, 255):
        args = [integers(x, np.uint8), np.uint8(z)]
        np.testing.assert_array_equal(evaluate(before, args)[0], evaluate(after, args)[0])


def test_does_not_narrow_weights_known_only_at_run_time():
    x = (3, 5)
    s = shape("s32", x)
    text = module(f"x: {shape('s8', x)}, w: {shape('s32', (5, 2))}", shape("s32", (3, 2)), f"""
      %x = {shape('s8', x)} parameter(0)
      %w = {shape('s32', (5, 2))} parameter(1)
      %x32 = {s} convert({shape('s8', x)} %x)
      ROOT %dot = s32[3,2]{{1,0}} dot({s} %x32, s32[5,2]{{1,0}} %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""")
    _, _, changed = rewrite(text)
    assert not changed


# --- rule 3: movement and max-pooling on the integers ---------------------------------

MAX_S8 = """
%maximum_f32 (a: f32[]{}, b: f32[]{}) -> f32[]{} {
  %a = f32[]{} parameter(0)
  %b = f32[]{} parameter(1)
  ROOT %maximum = f32[]{} maximum(f32[]{} %a, f32[]{} %b)
}
"""


def pooled(q_scale: float) -> str:
    x, y = (1, 2, 4, 4), (1, 2, 2, 2)
    f = shape("f32", y)
    return module(f"x: {shape('s8', x)}", shape("s8", y), f"""
      %x = {shape('s8', x)} parameter(0)""" + dq("dqx", "x", x, 5, 0.25) + f"""
      %low = f32[]{{}} constant(-inf)
      %pool = {f} reduce-window({shape('f32', x)} %dqx, f32[]{{}} %low), window={{size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_0x1_0}}, to_apply=%maximum_f32""" +
                  q("out", "pool", y, 5, q_scale), extra=MAX_S8)


def test_max_pool_runs_on_the_integers():
    before, after, changed = rewrite(pooled(0.25))
    assert changed
    text = print_module(after)
    assert "s8[1,2,2,2]{3,2,1,0} reduce-window(s8[1,2,4,4]{3,2,1,0} %x, s8[]{} %" in text
    assert "f32[1,2,2,2]" not in text.split("ENTRY")[1]
    for _ in range(5):
        args = [integers((1, 2, 4, 4))]
        np.testing.assert_array_equal(evaluate(before, args)[0], evaluate(after, args)[0])


def test_does_not_pool_on_integers_that_change_scale():
    _, _, changed = rewrite(pooled(0.5))
    assert not changed


def test_reshape_and_transpose_pass_through_and_quantize_of_dequantize_is_the_value():
    x = (2, 3, 4)
    f = shape("f32", x)
    text = module(f"x: {shape('s8', x)}", shape("s8", (4, 6)), f"""
      %x = {shape('s8', x)} parameter(0)""" + dq("dqx", "x", x, -1, 0.5) + f"""
      %t = f32[4,2,3]{{2,1,0}} transpose({f} %dqx), dimensions={{2,0,1}}""" +
                  q("qt", "t", (4, 2, 3), -1, 0.5) + dq("dqt", "qt", (4, 2, 3), -1, 0.5) + f"""
      %r = f32[4,6]{{1,0}} reshape(f32[4,2,3]{{2,1,0}} %dqt)""" + q("out", "r", (4, 6), -1, 0.5))
    before, after, changed = rewrite(text)
    assert changed
    body = print_module(after).split("ENTRY")[1]
    assert "f32" not in body.split("->")[1]
    args = [integers(x)]
    np.testing.assert_array_equal(evaluate(before, args)[0], evaluate(after, args)[0])


# --- rule 4: softmax is onnxruntime's QLinearSoftmax ------------------------------------

ADD_F32 = MAX_S8 + """
%add_f32 (a: f32[]{}, b: f32[]{}) -> f32[]{} {
  %a = f32[]{} parameter(0)
  %b = f32[]{} parameter(1)
  ROOT %add = f32[]{} add(f32[]{} %a, f32[]{} %b)
}
"""


def qdq_softmax(x_scale, out="s8", zero_point=-128, y_scale=1 / 255):
    """q(softmax(dq(x))) over the last dim, in the importer's form (nn.softmax)."""
    x = (3, 6)
    f, row = shape("f32", x), "f32[3]{0}"
    return module(f"x: {shape('s8', x)}", shape(out, x), f"""
      %x = {shape('s8', x)} parameter(0)""" + dq("dqx", "x", x, 0, x_scale) + f"""
      %low = f32[]{{}} constant(-inf)
      %max = {row} reduce({f} %dqx, f32[]{{}} %low), dimensions={{1}}, to_apply=%maximum_f32
      %maxb = {f} broadcast({row} %max), dimensions={{0}}
      %shifted = {f} subtract({f} %dqx, {f} %maxb)
      %e = {f} exponential({f} %shifted)
      %zero = f32[]{{}} constant(0)
      %sum = {row} reduce({f} %e, f32[]{{}} %zero), dimensions={{1}}, to_apply=%add_f32
      %sumb = {f} broadcast({row} %sum), dimensions={{0}}
      %p = {f} divide({f} %e, {f} %sumb)""" + q("out", "p", x, zero_point, y_scale, out),
                  extra=ADD_F32)


def test_softmax_is_a_table_of_exponentials_summed_in_f32():
    before, after, changed = rewrite(qdq_softmax(0.5))
    assert changed
    body = print_module(after).split("ENTRY")[1]
    assert "exponential" not in body and "f32[256]{0} constant(" in body
    assert "gather(f32[256]{0} %" in body
    x = integers((3, 6))
    x[0] = [127, -128, -128, -128, -128, -128]      # one certain class
    x[1] = 5                                        # six equal ones
    (got,), (floated,) = evaluate(after, [x]), evaluate(before, [x])
    # floor(1 / (1/255)) = 254: onnxruntime's certain class is zy + 254, the float one 127
    assert got[0].tolist() == [126, -128, -128, -128, -128, -128] and floated[0, 0] == 127
    assert got[1].tolist() == [-86] * 6         # round(254 / 6) - 128
    assert np.abs(got.astype(int) - floated).max() <= 1


def test_softmax_saturates_to_the_type_range():
    # at 1/256 the certain class rounds to 256: -128 + 256 = 128 saturates to 127 (not
    # -128), as onnxruntime 1.32's QLinearSoftmax gives it
    _, after, changed = rewrite(qdq_softmax(0.5, y_scale=1 / 256))
    assert changed
    x = integers((3, 6))
    x[0] = [127, -128, -128, -128, -128, -128]
    (got,) = evaluate(after, [x])
    assert got[0, 0] == 127


def test_does_not_rewrite_a_softmax_quantized_to_another_type():
    _, _, changed = rewrite(qdq_softmax(0.5, out="u8", zero_point=0))
    assert not changed


# --- rule 5: a global mean is onnxruntime's QLinearGlobalAveragePool ---------------------

def qdq_mean(window: str = "size=1x1x4x4 stride=1x1x4x4", zx=-3, zy=5, sx=0.05, sy=0.04):
    """q(reduce-window sum(dq(x)) / 16) over a 4x4 image, as AveragePool lowers it."""
    x, y = (1, 3, 4, 4), (1, 3, 1, 1)
    return module(f"x: {shape('s8', x)}", shape("s8", y), f"""
      %x = {shape('s8', x)} parameter(0)""" + dq("dqx", "x", x, zx, sx) + f"""
      %zero = f32[]{{}} constant(0)
      %sum = {shape('f32', y)} reduce-window({shape('f32', x)} %dqx, f32[]{{}} %zero), window={{{window}}}, to_apply=%add_f32
      %n = f32[]{{}} constant(16)
      %nb = {shape('f32', y)} broadcast(f32[]{{}} %n), dimensions={{}}
      %mean = {shape('f32', y)} divide({shape('f32', y)} %sum, {shape('f32', y)} %nb)"""
                  + q("out", "mean", y, zy, sy), extra=ADD_F32)


def test_global_mean_sums_the_integers_and_scales_once():
    before, after, changed = rewrite(qdq_mean())
    assert changed
    body = print_module(after).split("ENTRY")[1]
    assert "s32[1,3,1,1]{3,2,1,0} reduce-window(s32[1,3,4,4]" in body
    assert "divide" not in body
    x = integers((1, 3, 4, 4))
    x[0, 0] = 7                         # (7 + 3) * 0.05 / 0.04 = 12.5: rounds to even
    (got,) = evaluate(after, [x])
    m = np.float32(np.float32(0.05) / np.float32(np.float32(0.04) * np.float32(16)))
    want = np.rint((x.astype(np.int32).sum((2, 3)) + 3 * 16).astype(np.float32) * m) + 5
    np.testing.assert_array_equal(got.reshape(-1), np.clip(want, -128, 127).reshape(-1))
    assert got[0, 0, 0, 0] == 12 + 5


def test_does_not_rewrite_a_mean_over_part_of_the_image():
    # an average pool of 2x2 windows is no global mean: onnxruntime sums those in float
    text = qdq_mean("size=1x1x2x2 stride=1x1x2x2").replace("1,3,1,1]", "1,3,2,2]") \
        .replace("constant(16)", "constant(4)")
    _, _, changed = rewrite(text)
    assert not changed


# --- rule 6: a quantized sum (a residual connection) without a divide ------------------

def qdq_sum(sa, sb, sy, za=-3, zb=9, zy=-5, relu=True, clamp=None):
    """q(relu(dq(a) + dq(b))) over every pair of s8 values: a along dim 0, b along 1;
    ``clamp=(lo, hi)``: clamp(lo, sum, hi) instead of the ReLU (lo None: a run-time
    scalar, parameter 2)."""
    d = (256, 256)
    f = shape("f32", d)
    params = f"a: {shape('s8', d)}, b: {shape('s8', d)}"
    if clamp is not None:
        bounds = [f"%{n} = f32[]{{}} " + ("parameter(2)" if v is None else f"constant({v})")
                  for n, v in zip(("lo", "hi"), clamp)]    # only lo may be None
        params += ", lo: f32[]{}" if clamp[0] is None else ""
        act = "\n      " + "\n      ".join(bounds) + f"""
      %act = {f} clamp(f32[]{{}} %lo, {f} %sum, f32[]{{}} %hi)"""
    elif relu:
        act = f"""
      %zero = f32[]{{}} constant(0)
      %zerob = {f} broadcast(f32[]{{}} %zero), dimensions={{}}
      %act = {f} maximum({f} %sum, {f} %zerob)"""
    else:
        act = ""
    return module(params, shape("s8", d), f"""
      %a = {shape('s8', d)} parameter(0)
      %b = {shape('s8', d)} parameter(1)""" + dq("dqa", "a", d, za, sa) + dq("dqb", "b", d, zb, sb)
                  + f"""
      %sum = {f} add({f} %dqa, {f} %dqb)""" + act + q("out", "sum" if not act else "act", d,
                                                      zy, sy))


def every_pair():
    v = np.arange(-128, 128, dtype=np.int8)
    return [np.repeat(v[:, None], 256, 1), np.repeat(v[None, :], 256, 0)]


@pytest.mark.parametrize("relu", [True, False])
def test_quantized_sum_multiplies_instead_of_dividing_bit_for_bit(relu):
    # round(A * f32(sa / sy) + B * f32(sb / sy)) is q's round((A * sa + B * sb) / sy) on
    # all 65,536 pairs for these scales (checked at compile time), and rounds in integers
    before, after, changed = rewrite(qdq_sum(0.06732655, 0.034280803, 0.013687617,
                                             relu=relu))
    assert changed
    body = print_module(after).split("ENTRY")[1]
    assert "divide" not in body and "round-nearest-even" not in body
    assert "bitcast-convert(" in body
    (want,), (got,) = evaluate(before, every_pair()), evaluate(after, every_pair())
    np.testing.assert_array_equal(got, want)
    assert want.min() == (-5 if relu else -128) and want.max() == 127


def test_does_not_multiply_a_sum_where_some_pair_would_round_differently():
    # with these scales some (a, b) lands on the other side of a tie when multiplied by
    # f32(sa / sy) instead of divided by sy: the division stays
    _, after, changed = rewrite(qdq_sum(0.038968246, 0.063487, 0.04041201, 2, 10, -5))
    assert not changed
    assert "divide" in print_module(after)


def test_quantized_sum_folds_a_clamp_by_constants_into_its_bounds_bit_for_bit():
    # q(clamp(lo, y, hi)) = clamp(q(lo), q(y), q(hi)): q is monotonic; the clamp leaves
    # the f32 code and its bounds become the integer clamp's, -42 and 68 here
    before, after, changed = rewrite(qdq_sum(0.06732655, 0.034280803, 0.013687617,
                                             clamp=(-0.5, 1.0)))
    assert changed
    body = print_module(after).split("ENTRY")[1]
    assert "divide" not in body and "f32[256,256]{1,0} clamp(" not in body
    (want,), (got,) = evaluate(before, every_pair()), evaluate(after, every_pair())
    np.testing.assert_array_equal(got, want)
    assert (want.min(), want.max()) == (-42, 68)


def test_does_not_fold_a_clamp_whose_bound_is_known_only_at_run_time():
    _, after, changed = rewrite(qdq_sum(0.06732655, 0.034280803, 0.013687617,
                                        clamp=(None, 1.0)))
    assert not changed
    assert "divide" in print_module(after)


# --- rule 7: a model input's quantization rounds in integers ---------------------------

def quantized_input(op: str = ""):
    """q(x) of a model input x (``op``: an element-wise op on x first)."""
    d = (64,)
    f = shape("f32", d)
    first = f"\n      %e = {f} {op}({f} %x)" if op else ""
    return module(f"x: {f}", shape("s8", d), f"""
      %x = {f} parameter(0){first}""" + q("out", "e" if op else "x", d, -5, 0.0371))


def test_model_input_quantization_rounds_in_integers_bit_for_bit():
    # the bits of x / s + 1.5 * 2**23 (0 where negative) less those of 1.5 * 2**23, plus
    # the zero point, clamped on s32; a NaN gives 0 as the float tail's convert does
    before, after, changed = rewrite(quantized_input())
    assert changed
    body = print_module(after).split("ENTRY")[1]
    assert "round-nearest-even" not in body and "bitcast-convert(" in body
    assert "s32[64]{0} clamp(" in body and "compare(" in body
    s = np.float32(0.0371)
    ties = ((np.arange(-140, 140) + 0.5) * s).astype(np.float32)
    x = np.concatenate([
        np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e-45,
                  -1.5 * 2**23 * s, 2**22 * s], np.float32),
        ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)),
        (RNG.standard_normal(4096) * 1e3).astype(np.float32)])
    for chunk in np.array_split(x, len(x) // 64 + 1):
        xs = np.resize(chunk, 64).astype(np.float32)
        (want,), (got,) = evaluate(before, [xs]), evaluate(after, [xs])
        np.testing.assert_array_equal(got, want)


def test_does_not_round_in_integers_what_is_not_a_model_input():
    # q(tanh(x)): the tanh's result keeps the float tail (rule 7 takes model inputs only)
    _, _, changed = rewrite(quantized_input("tanh"))
    assert not changed


@pytest.mark.parametrize("triple,cpu,soft", [
    ("thumbv7m-none-eabi", "cortex-m3", True), ("thumbv7em-none-eabihf", "cortex-m4", False),
    ("thumbv8m.main-none-eabihf", "cortex-m33", False),
    ("riscv64-unknown-linux-gnu", "generic-rv64", False),
    ("aarch64-unknown-linux-gnu", "generic", False),
    ("x86_64-unknown-linux-gnu", "x86-64-v3", False)])
def test_soft_float_is_a_target_without_an_fpu(triple, cpu, soft):
    """What QuantizedArithmetic asks the backend before it requantizes in fixed point."""
    from xlac.backends import make_backend
    assert make_backend(triple, cpu).soft_float is soft

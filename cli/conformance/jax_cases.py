"""The JAX programs xlac is checked on (tests/test_hlo_import.py runs them; the support
report, xla_report.py, counts them): one program per feature (``CASES``), real
programs (``PROGRAMS``) and programs xlac refuses (``REFUSALS``), each with its
arguments and tolerance. Importing this module imports jax (a test extra)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

lax = jax.lax

_rng = np.random.default_rng(0)


def f32(*shape, scale=1.0):
    return (_rng.standard_normal(shape) * scale).astype(np.float32)


def i32(*shape, lo=-50, hi=50):
    return _rng.integers(lo, hi, shape).astype(np.int32)


@dataclass
class Case:
    fn: Callable
    args: tuple
    rtol: float = 1e-6          # float results: |got - want| <= atol + rtol * |want|
    atol: float = 1e-6
    # lowered for these platforms rather than this machine's (what JAX writes for a
    # platform without LAPACK); run by jaxlib on the CPU
    platforms: tuple[str, ...] | None = None
    forms: tuple[str, ...] = ("hlo", "stablehlo")    # the printed forms xlac reads it from


def lower(case: Case):
    if case.platforms is None:
        return jax.jit(case.fn).lower(*case.args)
    return jax.jit(case.fn).trace(*case.args).lower(lowering_platforms=case.platforms)


# The two forms JAX prints a lowered program in.
FORMS = {"hlo": lambda lowered: lowered.as_text(dialect="hlo"),
         "stablehlo": lambda lowered: lowered.as_text()}


def hlo_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text(dialect="hlo")


def lowered_text(form: str, fn, *args) -> str:
    return FORMS[form](jax.jit(fn).lower(*args))


def jax_outputs(fn, args) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def assert_matches(got, want, case: Case) -> None:
    """xlac's outputs ``got`` against JAX's ``want``: integers and booleans bit for bit,
    floats within the case's tolerance, infinities and NaNs where JAX has them."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if not jnp.issubdtype(w.dtype, jnp.floating):     # bf16 too, whose numpy kind is V
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol, equal_nan=True)


def _conv(x, w, **kw):
    return lax.conv_general_dilated(x, w, **kw)


def _scan_cumulative(xs):
    def step(carry, x):
        carry = carry * 0.5 + x
        return carry, carry * 2.0
    return lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs)


def _while_collatz(n):
    def body(state):
        value, steps = state
        value = jnp.where(value <= 1, value, jnp.where(value % 2 == 0, value // 2, 3 * value + 1))
        return value, steps + 1
    return lax.while_loop(lambda s: jnp.any(s[0] > 1), body, (n, jnp.int32(0)))


def _complex_control(x, y, i):
    """Complex values in a loop's state, a branch, a product reduce, gathers and pads."""
    z = lax.fori_loop(0, 3, lambda k, z: z * (1 + 1j) + k, x + 1j * y)
    w = lax.cond(x[0] > 0, lambda z: z * 2j, lambda z: z - 1, z)
    rows = jnp.concatenate([w[:6], lax.dynamic_slice(w, (i,), (6,))]).reshape(6, 2)
    m = jnp.pad(z.reshape(4, 4), 1) @ rows
    return (jnp.abs(w), jnp.real(jnp.prod(z[:5])), jnp.imag(jnp.prod(z[:5])),
            jnp.angle(m), jnp.abs(z[jnp.array([3, 1, 4])] == w[jnp.array([3, 1, 4])]))


def _complex_program(x, y):
    z = x + 1j * y
    spectrum = jnp.fft.rfft(x)
    return (jnp.abs(spectrum), jnp.fft.irfft(spectrum * jnp.exp(1j * jnp.arange(9) / 3)),
            jnp.fft.fft(x).imag, jnp.abs(jnp.fft.fft2(x.reshape(4, 4))),
            jnp.fft.ifft(jnp.fft.fft(z)).real, jnp.abs(z * z / (z + 1j)),
            jnp.real(jnp.log(z + 2)), jnp.imag(jnp.exp(z)), jnp.abs(z @ jnp.conj(z)),
            jnp.real(jnp.sum(z * jnp.exp(1j * y))), jnp.abs(jnp.fft.rfftn(
                jnp.tile(x, 6).reshape(6, 16))), jnp.abs(jnp.fft.fft(jnp.tile(x, 6)[:37])))


# One program per feature; integer-only cases are compared bit for bit.
CASES = {
    "add_mul_sub_div": Case(lambda a, b: (a + b, a * b, a - b, a / b), (f32(3, 4), f32(3, 4))),
    "compare_select": Case(lambda a, b: (jnp.where(a < b, a * b, a - b), a >= b, a == b,
                                         a != b), (f32(5, 6), f32(5, 6))),
    "max_min_abs_neg": Case(lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), jnp.abs(a),
                                          -b, jnp.sign(a)), (f32(7), f32(7))),
    "rounding": Case(lambda x: (jnp.floor(x), jnp.ceil(x), jnp.round(x), jnp.trunc(x),
                                lax.round(x)),
                     (f32(4, 5, scale=4.0),)),
    "sqrt_rsqrt_pow": Case(lambda x: (jnp.sqrt(x), lax.rsqrt(x), x ** 1.7, x ** 2, jnp.cbrt(x)),
                           (np.abs(f32(6)) + 0.1,), rtol=4e-6),
    "exp_log_tanh": Case(lambda x: (jnp.exp(x), jnp.log(jnp.abs(x) + 0.5), jnp.tanh(x),
                                    jnp.log1p(jnp.abs(x)), jnp.expm1(x)),
                         (f32(4, 8, scale=2.0),), rtol=4e-6),
    "logistic_erf_gelu": Case(lambda x: (jax.nn.sigmoid(x), lax.erf(x),
                                         jax.nn.gelu(x, approximate=False),
                                         jax.nn.gelu(x, approximate=True)),
                              (f32(4, 8, scale=2.0),), rtol=1e-5, atol=2e-6),
    "sin_cos": Case(lambda x: (jnp.sin(x), jnp.cos(x)), (f32(16, scale=3.0),), atol=2e-6),
    "clamp_clip": Case(lambda x: (lax.clamp(-0.5, x, 0.5), jnp.clip(x, -1.0, 2.0)),
                       (f32(10),)),
    "integer_arith": Case(lambda a, b: (a + b, a * b, a - b, a // b, a % b, lax.div(a, b),
                                        lax.rem(a, b), jnp.maximum(a, b), jnp.abs(a)),
                          (i32(20), i32(20, lo=1, hi=9))),
    "shifts_bits": Case(lambda a, s: (a << s, a >> s, lax.shift_right_logical(a, s), a & s,
                                      a | s, a ^ s, ~a),
                        (i32(16, lo=-1000, hi=1000), i32(16, lo=0, hi=31))),
    "popcnt_clz": Case(lambda a: (lax.population_count(a), lax.clz(a),
                                  lax.population_count(a.astype(jnp.uint8)),
                                  lax.clz(a.astype(jnp.int16)), lax.clz(a.astype(jnp.uint16))),
                       (np.array([0, -1, 1, 2**31 - 1, -2**31, 12345, 255, 256], np.int32),)),
    # XLA's edge semantics, bit for bit: division by zero and INT_MIN / -1, shifts by the
    # width or more, float-to-int conversion of NaN, infinities and out-of-range values,
    # NaN and signed zeros in maximum and minimum
    "integer_division_edges": Case(
        lambda a, b: (lax.div(a, b), lax.rem(a, b)),
        (np.array([7, -7, 0, -2**31, -2**31, 5], np.int32),
         np.array([0, 0, 0, -1, 0, 3], np.int32))),
    "shift_by_width_or_more": Case(
        lambda a, s: (a << s, a >> s, lax.shift_right_logical(a, s)),
        (i32(6, lo=-1000, hi=1000), np.array([0, 31, 32, 33, -1, 40], np.int32))),
    "float_to_int_edges": Case(
        lambda x: (x.astype(jnp.int32), x.astype(jnp.uint8), x.astype(jnp.int8)),
        (np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 300.7, -1.5, 255.9], np.float32),)),
    "max_min_nan_signed_zero": Case(
        lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), jnp.fmax(a, b)),
        (np.array([np.nan, 1, -0.0, 0.0], np.float32),
         np.array([1, np.nan, 0.0, -0.0], np.float32))),
    "bincount_unique_fixed_size": Case(
        lambda i: (jnp.bincount(i, length=6), jnp.unique(i, size=5, fill_value=-1)),
        (i32(10, lo=0, hi=6),)),
    "uint32_threefry": Case(lambda k: jax.random.bits(jax.random.wrap_key_data(k), (8,)),
                            (np.array([7, 42], np.uint32),)),
    "convert": Case(lambda x: (x.astype(jnp.int32), x.astype(jnp.int8), (x > 0).astype(
        jnp.float32), x.astype(jnp.bfloat16), x.astype(jnp.float16).astype(jnp.float32)),
                    (f32(12, scale=50.0),)),
    "bitcast_convert": Case(lambda x: (lax.bitcast_convert_type(x, jnp.int32),
                                       lax.bitcast_convert_type(x.astype(jnp.float16),
                                                                jnp.uint16)), (f32(5),)),
    "iota_broadcast": Case(lambda x: (x + jnp.arange(6, dtype=jnp.float32),
                                      jnp.broadcast_to(x[:, None], (6, 4)).T),
                           (f32(6),)),
    "transpose_reshape": Case(lambda x: (x.transpose(2, 0, 1), x.reshape(6, 4),
                                         jnp.flip(x, 1)), (f32(2, 3, 4),)),
    "concatenate_slice": Case(lambda a, b: (jnp.concatenate([a, b, a], 1), a[:, 1:3],
                                            b[::2, ::-1]), (f32(4, 3), f32(4, 5))),
    "pad": Case(lambda x: (jnp.pad(x, ((1, 2), (0, 3))),
                           lax.pad(x, -1.0, ((1, -1, 1), (2, 0, 2)))), (f32(3, 4),)),
    "dot_general_batch": Case(lambda a, b: (jnp.einsum("bij,bjk->bik", a, b),
                                            jnp.einsum("bij,bkj->bki", a, a)),
                              (f32(3, 4, 5), f32(3, 5, 6)), rtol=1e-5, atol=1e-5),
    "matmul_vector": Case(lambda a, v: (a @ v, v @ a.T), (f32(7, 9), f32(9)),
                          rtol=1e-5, atol=1e-5),
    "conv_nchw_groups_dilation": Case(
        lambda x, w: _conv(x, w, window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 2),
                           feature_group_count=2),
        (f32(2, 4, 9, 9), f32(6, 2, 3, 3)), rtol=1e-5, atol=1e-5),
    "conv_nhwc_stride": Case(
        lambda x, w: _conv(x, w, window_strides=(2, 2), padding=((1, 0), (2, 1)),
                           dimension_numbers=("NHWC", "HWIO", "NHWC")),
        (f32(1, 8, 7, 3), f32(3, 3, 3, 5)), rtol=1e-5, atol=1e-5),
    "conv_transposed_lhs_dilation": Case(
        lambda x, w: _conv(x, w, window_strides=(1,), padding=((2, 2),), lhs_dilation=(2,)),
        (f32(1, 3, 6), f32(4, 3, 3)), rtol=1e-5, atol=1e-5),
    "depthwise_conv": Case(
        lambda x, w: _conv(x, w, window_strides=(1, 1), padding="VALID",
                           feature_group_count=4),
        (f32(1, 4, 6, 6), f32(4, 1, 3, 3)), rtol=1e-5, atol=1e-5),
    "reduce": Case(lambda x: (x.sum(1), x.max((0, 2)), x.mean(), x.min(-1), x.prod(0)),
                   (f32(3, 4, 5),), rtol=1e-5, atol=1e-5),
    "reduce_integer_bool": Case(lambda x: (x.sum(0), x.max(1), (x > 0).any(1), (x > 0).all(0)),
                                (i32(4, 6),)),
    "argmax_argmin": Case(lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 0)), (f32(5, 7),)),
    "max_pool_avg_pool": Case(
        lambda x: (lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME"),
                   lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4),
        (f32(2, 3, 8, 8),), rtol=1e-6),
    "cumsum_cummax": Case(lambda x: (jnp.cumsum(x, 0), lax.cummax(x, 1), jnp.cumprod(x, 1)),
                          (f32(5, 6),), rtol=1e-5, atol=1e-5),
    "sort_argsort": Case(lambda x: (jnp.sort(x, 1), jnp.argsort(x, 1), jnp.sort(x, 0)),
                         (f32(4, 6),)),
    "sort_total_order": Case(lambda x: (jnp.sort(x), jnp.argsort(x)),
                             (np.array([0.0, -0.0, np.nan, -np.inf, 1.0, np.inf, -1.0, 0.0],
                                       np.float32),)),
    "sort_16_bit_floats_nan_max": Case(
        lambda x: (jnp.sort(x.astype(jnp.float16)), jnp.argsort(x.astype(jnp.bfloat16)),
                   jnp.max(x), jnp.argmax(x), jnp.nanmax(x)),
        (np.array([0.0, -0.0, np.nan, -np.inf, 1.0, np.inf, -1.0, 0.5], np.float32),)),
    "sort_integer_descending": Case(lambda x: jnp.sort(x)[::-1], (i32(9),)),
    "top_k": Case(lambda x: lax.top_k(x, 3), (f32(4, 10),)),
    "gather_indexing": Case(lambda x, i, j: (x[i], x[:, j], x[i, j], jnp.take_along_axis(
        x, jnp.argsort(x, 1), 1)), (f32(5, 4), np.array([4, 0, 2], np.int32),
                                    np.array([3, 1, 1], np.int32))),
    "scatter_set_add": Case(lambda x, i, v: (x.at[i].set(v), x.at[i].add(v), x.at[i].max(v),
                                             x.at[:, 1].multiply(2.0)),
                            (f32(5, 3), np.array([1, 3], np.int32), f32(2, 3))),
    "dynamic_slice_update": Case(lambda x, i: (lax.dynamic_slice(x, (i, 1), (2, 2)),
                                               lax.dynamic_update_slice(x, x[:2, :2] * 10,
                                                                        (i, i))),
                                 (f32(5, 4), np.int32(2))),
    "fori_loop": Case(lambda x: lax.fori_loop(0, 5, lambda k, c: c * 1.5 + k, x), (f32(4),)),
    "while_loop": Case(_while_collatz, (np.array([27, 6, 1], np.int32),)),
    "scan": Case(_scan_cumulative, (f32(6, 3),), rtol=1e-6),
    "cond": Case(lambda p, x: lax.cond(p > 0, jnp.sin, lambda v: v * 2.0, x),
                 (np.float32(-1.0), f32(3))),
    "switch": Case(lambda k, x: lax.switch(k, [jnp.exp, jnp.tanh, lambda v: -v], x),
                   (np.int32(1), f32(3)), rtol=4e-6),
    "one_hot_take_clip": Case(lambda i, x: (jax.nn.one_hot(i, 5), jnp.take(x, i, mode="clip")),
                              (i32(4, lo=-2, hi=7), f32(6))),
    "searchsorted_median": Case(lambda a, v: (jnp.searchsorted(a, v), jnp.median(a)),
                                (np.sort(f32(10)), f32(4))),
    "nonzero_fixed_size": Case(lambda x: jnp.nonzero(x > 0, size=4, fill_value=-1)[0],
                               (f32(8),)),
    "sort_two_operands": Case(lambda k, v: lax.sort((k, v), num_keys=1),
                              (i32(8, lo=0, hi=3), f32(8))),
    "resize_bilinear": Case(lambda x: jax.image.resize(x, (8, 8), "bilinear"), (f32(4, 4),),
                            rtol=1e-5),
    "conv_transpose": Case(
        lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC")),
        (f32(1, 4, 4, 3), f32(3, 3, 3, 2)), rtol=1e-5, atol=1e-5),
    "f16_bf16": Case(lambda a, b: ((a.astype(jnp.float16) * 2 + 1).astype(jnp.float32),
                                   a.astype(jnp.bfloat16) @ b.astype(jnp.bfloat16)),
                     (f32(4, 8), f32(8, 3)), rtol=4e-3),    # one bf16 rounding
    "int8_uint32_bool": Case(lambda a, b: (a.astype(jnp.int8) * b.astype(jnp.int8),
                                           a.astype(jnp.uint32) * 987654321 >> 3,
                                           (a > 0) ^ (b > 3)), (i32(6), i32(6))),
    "nan_inf_tests": Case(lambda x: (jnp.isnan(x), jnp.isfinite(x), jnp.isinf(x)),
                          (np.array([1, np.nan, np.inf, -np.inf], np.float32),)),
    "atan2_lgamma_erf_inv": Case(lambda a, b: (jnp.arctan2(a, b), lax.lgamma(jnp.abs(a) + 0.5),
                                               lax.erf_inv(jnp.tanh(b))),
                                 (f32(6), f32(6)), rtol=1e-5, atol=1e-6),
    "checkpoint_grad_opt_barrier": Case(
        jax.grad(lambda x: jax.checkpoint(lambda v: jnp.sin(v) * v)(x).sum()), (f32(5),)),
    # a parameter, one value twice and a constant as outputs
    "outputs_that_are_not_computed": Case(lambda x: (x, x * 2, x * 2, jnp.ones(3)), (f32(3),)),
    "softmax_logsumexp": Case(lambda x: (jax.nn.softmax(x, -1), jax.nn.logsumexp(x, -1)),
                              (f32(3, 7),), rtol=4e-6),
    # CHLO's ops in StableHLO, which XLA expands in its HLO: poles, reflection, tails.
    # rtol: XLA's erf_inv(0.9999) is 3e-6 off the true 2.7510354 (scipy, f64); ours 1e-7
    "special_functions": Case(
        lambda x, e, u: (lax.lgamma(x), lax.digamma(x), lax.erfc(e), lax.erfc(
            e.astype(jnp.bfloat16)), lax.erf_inv(u), jnp.arcsinh(e), jnp.arccosh(
            jnp.abs(e) + 1), jnp.arctanh(u), jnp.sinh(e / 4), jnp.cosh(e / 4), jnp.arcsin(u),
            jnp.arccos(u), jnp.arctan(e), jnp.isposinf(x / 0), jnp.isneginf(x / 0),
            jnp.isinf(x / 0)),
        (np.array([-3.7, -2.5, -2.0, -0.3, 0.1, 0.5, 1.0, 1.5, 2.0, 3.3, 25.0, 150.0], np.float32),
         np.array([-9.0, -4.2, -1.0, -0.3, 0.0, 0.2, 1.9, 2.0, 2.5, 6.5, 9.5, 30.0], np.float32),
         np.array([-1.0, -0.999, -0.7, -0.2, 0.0, 1e-4, 0.3, 0.5, 0.9, 0.99, 0.9999, 1.0],
                  np.float32)), rtol=4e-6, atol=1e-6),
    # jax.scipy.special's CHLO ops: the power and asymptotic series of i1e on both sides
    # of |x| = 30, Hurwitz zeta, polygamma of orders 0 to 3
    "bessel_zeta_polygamma": Case(
        lambda x, q, s: (jax.scipy.special.i1e(x), jax.scipy.special.zeta(s, q),
                         *(jax.scipy.special.polygamma(n, q) for n in range(4))),
        (np.array([-45.0, -30.1, -29.9, -7.0, -0.7, -1e-3, 0.0, 0.5, 3.0, 12.0, 30.1, 500.0],
                  np.float32),
         np.array([0.3, 0.5, 0.9, 1.0, 1.7, 2.5, 3.3, 5.0, 7.5, 10.0, 40.0, 120.0], np.float32),
         np.array([1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 9.0, 12.0], np.float32)),
        rtol=2e-6, atol=1e-7),
    # linear algebra: JAX's CPU lowering calls LAPACK (potrf, trsm, getrf), mapped onto
    # expansions of XLA's cholesky and triangular-solve and an LU with partial pivoting
    "linalg_cholesky": Case(lambda x: (jnp.linalg.cholesky(spd(x)), jnp.linalg.cholesky(
        spd(x), upper=True), jnp.linalg.cholesky(x)), (f32(2, 5, 5),), rtol=4e-6, atol=1e-6),
    "linalg_triangular_solve": Case(
        lambda a, b: (jax.scipy.linalg.solve_triangular(a, b, lower=True),
                      jax.scipy.linalg.solve_triangular(a, b, lower=False, trans=1),
                      jax.scipy.linalg.solve_triangular(a, b, lower=True, unit_diagonal=True),
                      lax.linalg.triangular_solve(a, b.T, left_side=False, lower=True)),
        (f32(4, 4) + 4 * np.eye(4, dtype=np.float32), f32(4, 3)), rtol=1e-5, atol=1e-6),
    "linalg_solve_inv_det_lu": Case(
        lambda a, b: (jnp.linalg.solve(a, b[..., None]), jnp.linalg.inv(a), jnp.linalg.det(a),
                      jnp.linalg.slogdet(a)[1], *jax.scipy.linalg.lu(a[0]),
                      jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(spd(a[1])), b[1])),
        (f32(2, 5, 5), f32(2, 5)), rtol=2e-5, atol=1e-6),
    # lowered for a platform without LAPACK: XLA's own cholesky and triangular-solve ops
    "linalg_xla_ops": Case(
        lambda a, b: (jnp.linalg.cholesky(spd(a)), jax.scipy.linalg.solve_triangular(
            a, b, lower=False, trans=1), lax.linalg.triangular_solve(a, b.T, left_side=False)),
        (f32(4, 4) + 4 * np.eye(4, dtype=np.float32), f32(4, 2)), rtol=1e-5, atol=1e-6,
        platforms=("tpu",)),
    # the gradient of max pooling: select-and-scatter, ties to the first in the window
    "max_pool_gradient": Case(
        lambda x, t: (jax.grad(lambda v: lax.reduce_window(
            v, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME").sum())(x),
            jax.grad(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (2, 2), (1, 1),
                                                 "VALID").sum())(t)),
        (f32(2, 7, 7, 3), np.array([[1, 1, 0], [1, 1, 2], [0, 3, 3]], np.float32))),
    "reduce_precision": Case(
        lambda x: tuple(lax.reduce_precision(x, e, m) for e, m in ((5, 10), (8, 7), (4, 3),
                                                                   (5, 0), (11, 52))),
        (np.array([1.0, 1 / 3, 65504, 70000, 1e-8, -1e-5, np.inf, np.nan, -0.0, 3.14159,
                   2.0**-14, 2.0**-15], np.float32),)),
    # complex numbers and fft (pairs of real values)
    "fft_complex": Case(_complex_program, (f32(16), f32(16)), rtol=2e-5, atol=2e-5),
    "complex_control": Case(_complex_control, (f32(16), f32(16), np.int32(5)), rtol=2e-5,
                            atol=2e-5),
    # XLA's random bit generators, bit for bit: ThreeFry and Philox (DEFAULT on the CPU)
    # over each split of the shape into halves, and the rbg PRNG built on them
    "rng_bit_generator": Case(lambda k: tuple(
        lax.rng_bit_generator(k, shape, dtype, algorithm=getattr(lax.RandomAlgorithm, a))
        for a in ("RNG_DEFAULT", "RNG_THREE_FRY", "RNG_PHILOX")
        for shape, dtype in (((5, 3), jnp.uint32), ((7,), jnp.uint32), ((), jnp.uint32),
                             ((4, 2), jnp.uint16), ((3,), jnp.uint8), ((2, 3, 5), jnp.uint32))),
        (np.array([1, 2, 3, 4], np.uint32),)),
    "random_rbg": Case(lambda x: (x + jax.random.uniform(jax.random.key(0, impl="rbg"), (3,)),
                                  jax.random.normal(jax.random.split(jax.random.key(
                                      7, impl="unsafe_rbg"))[1], (2, 5))),
                       (f32(3),)),
    # between widths: the last dimension holds the parts, the first the least significant
    "bitcast_convert_widths": Case(lambda x: (
        lax.bitcast_convert_type(x, jnp.uint8),
        lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint16), jnp.float32),
        lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.int8), jnp.int32)),
        (np.array([1.5, -2.25, 3e9, 0.1, -0.0, 7.0], np.float32),)),
}


def spd(x):
    return x @ jnp.swapaxes(x, -1, -2) + 4 * jnp.eye(x.shape[-1])


def _dense(k, n_in, n_out):
    r = np.random.default_rng(k)
    return (r.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32), \
        (r.standard_normal(n_out) * 0.1).astype(np.float32)


def mlp():
    (w1, b1), (w2, b2) = _dense(1, 32, 64), _dense(2, 64, 10)
    return lambda x: jax.nn.softmax(jax.nn.relu(x @ w1 + b1) @ w2 + b2, -1)


def cnn():
    r = np.random.default_rng(3)
    k1 = (r.standard_normal((3, 3, 3, 8)) / 5).astype(np.float32)
    k2 = (r.standard_normal((3, 3, 8, 16)) / 8).astype(np.float32)
    wd, bd = _dense(4, 16, 10)
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x):
        h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dn))
        return jnp.argmax(h.mean((1, 2)) @ wd + bd, -1), h.mean((1, 2))
    return f


def _layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def transformer_block(d=32, heads=4):
    (wq, _), (wk, _), (wv, _), (wo, bo) = (_dense(k, d, d) for k in (5, 6, 7, 8))
    (w1, b1), (w2, b2) = _dense(9, d, 4 * d), _dense(10, 4 * d, d)
    g = np.linspace(0.5, 1.5, d, dtype=np.float32)

    def f(x):
        b, t, _ = x.shape
        h = _layer_norm(x, g, 0.1)
        q, k, v = ((h @ w).reshape(b, t, heads, d // heads) for w in (wq, wk, wv))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
        a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(b, t, d)
        x = x + a @ wo + bo
        return x + jax.nn.gelu(_layer_norm(x, g, -0.1) @ w1 + b1) @ w2 + b2
    return f


def scan_rnn(d=8, hidden=16):
    (wx, b), (wh, _), (wy, by) = _dense(11, d, hidden), _dense(12, hidden, hidden), \
        _dense(13, hidden, 4)

    def f(xs, h0):
        def step(h, x):
            h = jnp.tanh(x @ wx + h @ wh + b)
            return h, h @ wy + by
        return lax.scan(step, h0, xs)
    return f


# Flax (linen) modules, their initialized parameters closed over as constants: the
# deployed form of a trained model.
class _FlaxMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(64)(x))
        x = nn.gelu(nn.Dense(32)(x))
        return nn.log_softmax(nn.Dense(10)(x))


class _FlaxCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(16, (3, 3))(x)), (2, 2), (2, 2))
        x = nn.BatchNorm(use_running_average=True)(x)
        x = nn.avg_pool(nn.relu(nn.Conv(32, (3, 3), strides=2)(x)), (2, 2), (2, 2))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


class _FlaxBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + nn.MultiHeadDotProductAttention(num_heads=4)(h, h, mask=mask)
        return x + nn.Dense(32)(nn.gelu(nn.Dense(128)(nn.LayerNorm()(x))))


class _FlaxLSTM(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(4)(nn.RNN(nn.LSTMCell(24))(x))


def flax_program(module: nn.Module, x: np.ndarray) -> Callable:
    params = module.init(jax.random.key(0), x)
    return lambda v: module.apply(params, v)


PROGRAMS = {
    "mlp": Case(mlp(), (f32(8, 32),), rtol=1e-5, atol=1e-6),
    "mlp_gradient": Case(jax.grad(lambda x: mlp()(x).max(-1).sum()), (f32(8, 32),),
                         rtol=1e-4, atol=1e-6),
    "cnn": Case(cnn(), (f32(2, 16, 16, 3),), rtol=1e-5, atol=1e-5),
    "transformer_block": Case(transformer_block(), (f32(2, 8, 32),), rtol=1e-4, atol=1e-5),
    "causal_dot_product_attention": Case(
        lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
        (f32(1, 6, 2, 8), f32(1, 6, 2, 8), f32(1, 6, 2, 8)), rtol=1e-5, atol=1e-6),
    "scan_rnn": Case(scan_rnn(), (f32(10, 2, 8), f32(2, 16)), rtol=1e-5, atol=1e-5),
    **{name: Case(flax_program(module, x), (x,), rtol=1e-5, atol=1e-5) for name, module, x in (
        ("flax_mlp", _FlaxMLP(), f32(8, 20)), ("flax_cnn", _FlaxCNN(), f32(2, 16, 16, 3)),
        ("flax_transformer_block", _FlaxBlock(), f32(2, 8, 32)),
        ("flax_lstm", _FlaxLSTM(), f32(2, 12, 6)))},
}


REFUSALS = {      # name: (function, arguments, {form: message})
    # LAPACK routines other than potrf, trsm and getrf
    "eigh": (lambda x: jnp.linalg.eigh(x)[0], (f32(3, 3),),
             {"hlo": "custom-call lapack_ssyevd_ffi at %eigh",
              "stablehlo": "stablehlo.custom_call lapack_ssyevd_ffi at line"}),
    # complex numbers: not at the program's boundary
    "complex_output": (lambda x: jnp.fft.rfft(x), (f32(8),),
                       {form: "the program takes or returns complex numbers"
                        for form in ("hlo", "stablehlo")}),
}

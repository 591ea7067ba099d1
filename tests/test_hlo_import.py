"""JAX programs in: ``jax.jit(f).lower(args)`` printed as XLA's HLO text, compiled by
xlac, run through xlac.load and compared with JAX's own result (XLA's CPU compiler):
bit-exact for integer and boolean results, a stated float tolerance otherwise."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import xlac
from xlac.main import main

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
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
    kwargs: dict = field(default_factory=dict)


def hlo_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text(dialect="hlo")


def compile_hlo(text: str, folder, name: str) -> xlac.Model:
    path = folder / f"{name}.hlo"
    path.write_text(text)
    return xlac.load(xlac.compile(path, folder / f"{name}.o", name=name).output)


def jax_outputs(fn, args) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def assert_matches(got, want, case: Case) -> float:
    """Checks every output; returns the largest float error."""
    assert len(got) == len(want)
    worst = 0.0
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            continue
        np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol, equal_nan=True)
        finite = np.isfinite(w)
        assert np.array_equal(np.isfinite(g), finite)
        worst = max(worst, float(np.max(np.abs(g - w)[finite], initial=0.0)))
    return worst


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


# One program per feature; integer-only cases are compared bit for bit.
CASES = {
    "add_mul_sub_div": Case(lambda a, b: (a + b, a * b, a - b, a / b), (f32(3, 4), f32(3, 4))),
    "compare_select": Case(lambda a, b: (jnp.where(a < b, a * b, a - b), a >= b, a == b,
                                         a != b), (f32(5, 6), f32(5, 6))),
    "max_min_abs_neg": Case(lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), jnp.abs(a),
                                          -b, jnp.sign(a)), (f32(7), f32(7))),
    "rounding": Case(lambda x: (jnp.floor(x), jnp.ceil(x), jnp.round(x), jnp.trunc(x)),
                     (f32(4, 5, scale=4.0),)),
    "sqrt_rsqrt_pow": Case(lambda x: (jnp.sqrt(x), lax.rsqrt(x), x ** 1.7, x ** 2),
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
    "softmax_logsumexp": Case(lambda x: (jax.nn.softmax(x, -1), jax.nn.logsumexp(x, -1)),
                              (f32(3, 7),), rtol=4e-6),
}


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_jax_program_matches_jax(case_name, tmp_path):
    case = CASES[case_name]
    model = compile_hlo(hlo_text(case.fn, *case.args), tmp_path, case_name)
    assert_matches(model(*case.args), jax_outputs(case.fn, case.args), case)

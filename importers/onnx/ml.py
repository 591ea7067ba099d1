"""The ai.onnx.ml ops on numeric tensors: Binarizer, LabelEncoder.

LabelEncoder maps keys to values with a default; string keys or values are out of
scope (xlac holds no strings) and refused by the importer's type check.
"""
from __future__ import annotations

import numpy as np

from ...hlo import Opcode, dtypes
from .registry import register

ML = "ai.onnx.ml"


@register("Binarizer", since=1, domain=ML)
def binarizer(ctx, node):
    # x > threshold ? 1 : 0, in x's type
    x = ctx.input(node, 0)
    dt = x.shape.dtype
    above = ctx.b.compare(x, ctx.full(ctx.attr(node, "threshold", 0.0), dt, x.shape.dims),
                          "GT")
    return [ctx.b.convert(above, dt)]


def _table(ctx, node, prefix):
    """The keys or values of a LabelEncoder: (numpy array, name of the attribute)."""
    found = [(n, ctx.attr(node, f"{prefix}_{n}", None))
             for n in ("floats", "int64s", "strings", "tensor")]
    found = [(n, v) for n, v in found if v is not None]
    if len(found) != 1:
        raise ctx.error(node, f"needs exactly one of {prefix}_floats, {prefix}_int64s, "
                              f"{prefix}_strings, {prefix}_tensor")
    name, value = found[0]
    value = np.asarray(value, dtype={"floats": np.float32, "int64s": np.int64}.get(name))
    if name == "strings" or value.dtype.kind in "OSU":
        raise ctx.error(node, f"{prefix} are strings, which xlac does not support")
    return value.reshape(-1)


@register("LabelEncoder", since=2, domain=ML)
def label_encoder(ctx, node):
    # y = values[i] where x == keys[i], else the default: one select per key, the last
    # outermost, so that the last of duplicate keys wins (ONNX's reference builds a dict).
    x = ctx.input(node, 0)
    keys, values = _table(ctx, node, "keys"), _table(ctx, node, "values")
    if len(keys) != len(values):
        raise ctx.error(node, f"{len(keys)} keys but {len(values)} values")
    default = ctx.attr(node, "default_tensor", None)
    if default is None:
        default = {np.dtype(np.float32): ctx.attr(node, "default_float", -0.0),
                   np.dtype(np.int64): ctx.attr(node, "default_int64", -1)}.get(values.dtype)
        ctx.attr(node, "default_string", None)
    else:
        for name in ("default_float", "default_int64", "default_string"):
            ctx.attr(node, name, None)
    if default is None:
        raise ctx.error(node, "values_tensor needs default_tensor")
    out_dt = dtypes.from_numpy(values.dtype)
    key_dt = x.shape.dtype
    b, dims = ctx.b, x.shape.dims
    y = ctx.full(np.asarray(default).reshape(-1)[0], out_dt, dims)
    for k, v in zip(keys, values):
        hit = b.compare(x, ctx.full(k, key_dt, dims), "EQ")
        if key_dt.is_float and np.isnan(k):             # a NaN key matches NaN
            hit = b.compare(x, x, "NE")
        y = b.op(Opcode.SELECT, hit, ctx.full(v, out_dt, dims), y)
    return [y]

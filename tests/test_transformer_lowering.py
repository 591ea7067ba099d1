"""How the normalization and attention ops lower: the HLO they make, not only their
numbers (tests/onnx_ops.py checks those against onnxruntime).

The properties that keep them fast and small: grouped-query attention reads each KV
head once (no repeated copy of K or V), 3-D keys and values are read in place, f32
attention never stores the probabilities, and LayerNormalization needs no buffer as
large as X beyond its output. LinearAttention longer than a few tokens is a while over
the tokens, its body one token whatever the length.
"""
from __future__ import annotations

import numpy as np
import pytest

from onnx_ops import f32, make_model, node
from xlac.hlo import Opcode, XlacError
from xlac.importers.onnx import import_onnx
from xlac.importers.onnx.transformer import MAX_UNROLLED_STEPS
from xlac.optimizer import optimize
from hlo_util import CPU


def _entry(model, optimized=True):
    module = import_onnx(model)
    if optimized:
        optimize(module, CPU)
    return module.entry


def _attention(q, k, v, opset=23, **attrs):
    return make_model([node("Attention", ["q", "k", "v"], **attrs)],
                      {"q": q, "k": k, "v": v}, opset=opset)


def test_gqa_reads_each_kv_head_once():
    # 8 query heads over 2 KV heads: no value anywhere has 8 heads of keys or values.
    entry = _entry(_attention(f32(1, 8, 5, 16), f32(1, 2, 7, 16), f32(1, 2, 7, 16)), False)
    dots = [i for i in entry.instructions if i.opcode is Opcode.DOT]
    assert len(dots) == 2
    repeated = {(1, 8, 7, 16), (1, 4, 2, 7, 16), (1, 2, 4, 7, 16)}
    assert not [i for i in entry.instructions if i.shape.dims in repeated]
    k, v = entry.parameters[1:]
    assert dots[0].operands[1] is k and dots[1].operands[1] is v


def test_3d_keys_and_values_are_read_in_place():
    entry = _entry(_attention(f32(2, 5, 32), f32(2, 7, 32), f32(2, 7, 32), q_num_heads=4,
                              kv_num_heads=4), False)
    k, v = entry.parameters[1:]
    dots = [i for i in entry.instructions if i.opcode is Opcode.DOT]
    # (B, S, H*D) viewed as (B, S, H, D): a reshape, which is a view, then the dot
    for dot, x in zip(dots, (k, v)):
        assert dot.operands[1].opcode is Opcode.RESHAPE and dot.operands[1].operands[0] is x
    assert not [i for i in entry.instructions if i.opcode is Opcode.TRANSPOSE
                and i.operands[0].operands and i.operands[0].operands[0] in (k, v)]


def test_f32_attention_never_stores_the_probabilities():
    # exp(s - max) feeds the second dot; the division by the row sums comes after it, on
    # (Sq, Dv) values: no value of the scores' shape is divided.
    entry = _entry(_attention(f32(1, 2, 6, 8), f32(1, 2, 9, 8), f32(1, 2, 9, 8),
                              is_causal=1), False)
    scores = [i for i in entry.instructions if i.opcode is Opcode.DOT][0].shape.dims
    divides = [i for i in entry.instructions if i.opcode is Opcode.DIVIDE]
    assert divides and all(i.shape.dims != scores for i in divides)


def test_f16_attention_rounds_as_the_reference():
    # f16: sqrt(scale) on Q and on K, and the probabilities stored before the second dot
    entry = _entry(_attention(*(x.astype(np.float16) for x in
                                (f32(1, 2, 6, 8), f32(1, 2, 9, 8), f32(1, 2, 9, 8)))), False)
    dots = [i for i in entry.instructions if i.opcode is Opcode.DOT]
    assert all(o.opcode is Opcode.MULTIPLY for o in dots[0].operands)
    assert dots[1].operands[0].opcode is Opcode.DIVIDE


def test_layer_normalization_keeps_no_copy_of_x():
    # the statistics are reduced from X itself; one loop reads X again for the output
    model = make_model([node("LayerNormalization", ["x", "s", "b"])], {"x": f32(4, 16, 64)},
                       inits={"s": f32(64), "b": f32(64)}, opset=17)
    entry = _entry(model)
    x = entry.parameters[0]
    big = [i for i in entry.instructions if i.shape.dims == x.shape.dims and i is not x]
    assert big == [entry.root]
    readers = [i for i in entry.instructions if x in i.operands]
    assert len(readers) == 3 and all(i.opcode is Opcode.FUSION for i in readers)


def _linear_attention(steps):
    return make_model([node("LinearAttention", ["q", "k", "v"], ["y", "s"], q_num_heads=2,
                            kv_num_heads=2, update_rule="linear")],
                      {"q": f32(1, steps, 8), "k": f32(1, steps, 8), "v": f32(1, steps, 8)},
                      outputs=[("y", np.float32, (1, steps, 8)),
                               ("s", np.float32, (1, 2, 4, 4))], opset=27)


def _loop_body(steps):
    whiles = [i for i in import_onnx(_linear_attention(steps)).entry.instructions
              if i.opcode is Opcode.WHILE]
    assert len(whiles) == 1
    return whiles[0].called[1]


def test_long_linear_attention_is_a_while_of_one_token():
    body = _loop_body(500)
    # One token per iteration, whatever the length: the body's size does not grow.
    assert len(body.instructions) == len(_loop_body(MAX_UNROLLED_STEPS + 1).instructions)
    assert [i.shape.dims for i in body.instructions if i.opcode is Opcode.DYNAMIC_UPDATE_SLICE] \
        == [(1, 500, 8)]


def test_does_not_loop_over_a_short_linear_attention():
    entry = _entry(_linear_attention(MAX_UNROLLED_STEPS), False)
    assert not [i for i in entry.instructions if i.opcode is Opcode.WHILE]

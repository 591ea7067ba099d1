"""Batch separability (optimizer/batch_dims.py) on HLO text at batch size 3, and on
small ONNX models imported at batch size 2."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hlo_util import named, parse
from xlac.hlo import OpMetadata, Opcode, XlacError
from xlac.importers.onnx import import_onnx
from xlac.optimizer import batch_dims
from xlac.optimizer.batch_dims import check_batch_separable

N = 3

ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""
LESS2 = """%less2 (a: f32[], b: f32[], c: f32[], d: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = f32[] parameter(2)
  %d = f32[] parameter(3)
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}
"""
LESS = """%less (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}
"""


def entry(body: str, callees: str = "") -> str:
    return callees + "\nENTRY %main {\n" + body.strip() + "\n}\n"


def check(text: str) -> None:
    check_batch_separable(parse(text), N)


# (id, module text, None if accepted else the error it raises)
CASES = [
    ("elementwise_with_broadcast_constant", entry("""
  %x = f32[3,4] parameter(0)
  %c = f32[4] constant({1, 2, 3, 4})
  %b = f32[3,4] broadcast(%c), dimensions={1}
  %y = f32[3,4] add(%x, %b)
  %lo = f32[] constant(0)
  %hi = f32[] constant(6)
  ROOT %r = f32[3,4] clamp(%lo, %y, %hi)
"""), None),
    ("elementwise_with_constant_replicated_along_batch", entry("""
  %x = f32[3,2] parameter(0)
  %c = f32[3,2] constant({{1, 2}, {1, 2}, {1, 2}})
  ROOT %r = f32[3,2] multiply(%x, %c)
"""), None),
    ("elementwise_does_not_take_an_iota_along_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %i = f32[3,4] iota(), iota_dimension=0
  ROOT %r = f32[3,4] add(%x, %i)
"""), r"^bounded batch: add 'r' mixes samples: operand %i differs from sample to sample"),
    ("elementwise_does_not_take_a_constant_varying_along_the_batch", entry("""
  %x = f32[3,2] parameter(0)
  %c = f32[3,2] constant({{1, 2}, {1, 2}, {1, 5}})
  ROOT %r = f32[3,2] multiply(%x, %c)
"""), "operand %c differs from sample to sample"),
    ("elementwise_does_not_mix_batch_dims", entry("""
  %x = f32[3,3] parameter(0)
  %t = f32[3,3] transpose(%x), dimensions={1,0}
  ROOT %r = f32[3,3] add(%x, %t)
"""), r"carry the batch at different dims or blocks \[\(0, 1\), \(1, 1\)\]"),
    ("reshape_keeping_the_batch_dim", entry("""
  %x = f32[3,4,2] parameter(0)
  %a = f32[3,8] reshape(%x)
  %b = f32[1,3,2,4] bitcast(%a)
  ROOT %r = f32[3,8] reshape(%b)
"""), None),
    ("reshape_merges_the_batch_into_rows_and_back", entry("""
  %x = f32[3,5,4] parameter(0)
  %rows = f32[15,4] reshape(%x)
  %w = f32[4,2] constant({{1, 2}, {3, 4}, {5, 6}, {7, 8}})
  %d = f32[15,2] dot(%rows, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %halves = f32[6,5] reshape(%d)
  ROOT %r = f32[3,5,2] reshape(%halves)
"""), None),
    ("reshape_does_not_interleave_samples", entry("""
  %x = f32[3,4] parameter(0)
  %t = f32[4,3] transpose(%x), dimensions={1,0}
  %f = f32[12] reshape(%t)
  ROOT %r = f32[3,4] reshape(%f)
"""), "reshape 'f' mixes samples: it interleaves the samples of the batch dim 1"),
    ("elementwise_does_not_mix_blocks", entry("""
  %x = f32[3,4] parameter(0)
  %y = f32[3,2,2] parameter(1)
  %a = f32[12] reshape(%x)
  %b = f32[6,2] reshape(%y)
  %c = f32[12] reshape(%b)
  %t = f32[2,6] reshape(%c)
  %u = f32[12] reshape(%t)
  ROOT %r = f32[12] add(%a, %u)
"""), "reshape 't' mixes samples"),
    ("transpose_moves_the_batch_and_back", entry("""
  %x = f32[3,4,5] parameter(0)
  %t = f32[5,3,4] transpose(%x), dimensions={2,0,1}
  %e = f32[5,3,4] exponential(%t)
  ROOT %r = f32[3,4,5] transpose(%e), dimensions={1,2,0}
"""), None),
    ("broadcast_moves_the_batch", entry("""
  %x = f32[3] parameter(0)
  %b = f32[3,4] broadcast(%x), dimensions={0}
  %c = f32[4,3] broadcast(%x), dimensions={1}
  %t = f32[3,4] transpose(%c), dimensions={1,0}
  ROOT %r = f32[3,4] add(%b, %t)
"""), None),
    ("slice_of_the_whole_batch", entry("""
  %x = f32[3,4] parameter(0)
  ROOT %r = f32[3,2] slice(%x), slice={[0:3], [1:3]}
"""), None),
    ("slice_does_not_take_part_of_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %s = f32[2,4] slice(%x), slice={[1:3], [0:4]}
  %z = f32[] constant(0)
  ROOT %r = f32[3,4] pad(%s, %z), padding=1_0x0_0
"""), "slice 's' mixes samples: it takes part of the batch dim 0"),
    ("pad_of_other_dims", entry("""
  %x = f32[3,4] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[3,9] pad(%x, %z), padding=0_0_0x1_1_1
"""), None),
    ("pad_does_not_pad_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %z = f32[] constant(0)
  %p = f32[4,4] pad(%x, %z), padding=1_0x0_0
  ROOT %r = f32[3,4] slice(%p), slice={[0:3], [0:4]}
"""), "pad 'p' mixes samples: it pads the batch dim 0"),
    ("reverse_of_other_dims", entry("""
  %x = f32[3,4] parameter(0)
  ROOT %r = f32[3,4] reverse(%x), dimensions={1}
"""), None),
    ("reverse_does_not_reverse_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  ROOT %r = f32[3,4] reverse(%x), dimensions={0}
"""), "reverse 'r' mixes samples: it reverses the batch dim 0"),
    ("concatenate_along_another_dim", entry("""
  %x = f32[3,4] parameter(0)
  %z = f32[] constant(0)
  %c = f32[3,2] broadcast(%z), dimensions={}
  ROOT %r = f32[3,6] concatenate(%x, %c), dimensions={1}
"""), None),
    ("concatenate_does_not_join_along_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %y = f32[3,4] parameter(1)
  %c = f32[6,4] concatenate(%x, %y), dimensions={0}
  ROOT %r = f32[3,4] slice(%c), slice={[0:3], [0:4]}
"""), "concatenate 'c' mixes samples: it concatenates along the batch dim 0"),
    ("dot_over_a_free_batch_dim", entry("""
  %x = f32[3,4] parameter(0)
  %one = f32[] constant(1)
  %w = f32[4,5] broadcast(%one), dimensions={}
  ROOT %r = f32[3,5] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
"""), None),
    ("dot_with_the_batch_on_the_rhs", entry("""
  %x = f32[3,4] parameter(0)
  %one = f32[] constant(1)
  %w = f32[5,4] broadcast(%one), dimensions={}
  %d = f32[5,3] dot(%w, %x), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  ROOT %r = f32[3,5] transpose(%d), dimensions={1,0}
"""), None),
    ("dot_does_not_contract_over_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %one = f32[] constant(1)
  %w = f32[3,5] broadcast(%one), dimensions={}
  %d = f32[4,5] dot(%x, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT %r = f32[3,4,5] broadcast(%d), dimensions={1,2}
"""), "dot 'd' mixes samples: it contracts over the batch dim 0"),
    ("batched_dot_attention", entry("""
  %q = f32[3,2,4] parameter(0)
  %k = f32[3,2,4] parameter(1)
  %s = f32[3,2,2] dot(%q, %k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  %i = f32[3,2,2] iota(), iota_dimension=2
  %m = f32[3,2,2] multiply(%s, %i)
  ROOT %r = f32[3,2,4] dot(%m, %k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
"""), None),
    ("batched_dot_with_heads_first", entry("""
  %q = f32[3,2,4] parameter(0)
  %one = f32[] constant(1)
  %w = f32[2,4,5] broadcast(%one), dimensions={}
  %d = f32[2,3,5] dot(%q, %w), lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT %r = f32[3,2,5] transpose(%d), dimensions={1,0,2}
"""), None),
    ("dot_does_not_pair_two_batched_free_dims", entry("""
  %x = f32[3,4] parameter(0)
  %y = f32[3,4] parameter(1)
  ROOT %r = f32[3,3] dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={1}
"""), "dot 'r' mixes samples: both operands carry the batch"),
    ("dot_does_not_pair_the_batch_with_a_varying_uniform", entry("""
  %q = f32[3,2,4] parameter(0)
  %w = f32[3,4,5] iota(), iota_dimension=0
  ROOT %r = f32[3,2,5] dot(%q, %w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
"""), "dot 'r' mixes samples: an operand differs from sample to sample"),
    ("convolution_nchw", entry("""
  %x = f32[3,2,5,5] parameter(0)
  %one = f32[] constant(1)
  %k = f32[4,2,3,3] broadcast(%one), dimensions={}
  ROOT %r = f32[3,4,3,3] convolution(%x, %k), window={size=3x3}, dim_labels=bf01_oi01->bf01
"""), None),
    ("convolution_does_not_take_a_batched_kernel", entry("""
  %x = f32[3,2,5,5] parameter(0)
  %k = f32[3,2,3,3] parameter(1)
  %c = f32[3,3,3,3] convolution(%x, %k), window={size=3x3}, dim_labels=bf01_oi01->bf01
  ROOT %r = f32[3,3,3,3] transpose(%c), dimensions={1,0,2,3}
"""), "convolution 'c' mixes samples: its kernel carries the batch"),
    ("convolution_does_not_run_over_the_batch", entry("""
  %x = f32[3,2,5,5] parameter(0)
  %t = f32[2,3,5,5] transpose(%x), dimensions={1,0,2,3}
  %one = f32[] constant(1)
  %k = f32[4,3,3,3] broadcast(%one), dimensions={}
  %c = f32[2,4,3,3] convolution(%t, %k), window={size=3x3}, dim_labels=bf01_oi01->bf01
  ROOT %r = f32[3,2,5,5] negate(%x)
"""), "convolution 'c' mixes samples: it convolves over the batch dim 1"),
    ("reduce_over_other_dims", entry("""
  %x = f32[3,4,5] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[3] reduce(%x, %z), dimensions={1,2}, to_apply=%add
""", ADD), None),
    ("reduce_does_not_reduce_over_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %z = f32[] constant(0)
  %s = f32[4] reduce(%x, %z), dimensions={0}, to_apply=%add
  ROOT %r = f32[3,4] broadcast(%s), dimensions={1}
""", ADD), "reduce 's' mixes samples: it reduces over the batch dim 0"),
    ("reduce_window_of_size_one_on_the_batch", entry("""
  %x = f32[3,4,6] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[3,2,3] reduce-window(%x, %z), window={size=1x2x2 stride=1x2x2}, to_apply=%add
""", ADD), None),
    ("reduce_window_does_not_span_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[3,4] reduce-window(%x, %z), window={size=2x1 pad=1_0x0_0}, to_apply=%add
""", ADD), "reduce-window 'r' mixes samples: its window spans the batch dim 0"),
    ("gather_of_an_embedding_table_by_batched_ids", entry("""
  %ids = s32[3,5] parameter(0)
  %i = f32[10,4] iota(), iota_dimension=0
  ROOT %r = f32[3,5,4] gather(%i, %ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,4}
"""), None),
    ("gather_from_a_batched_operand_along_another_dim", entry("""
  %x = f32[3,10] parameter(0)
  %i = s32[5,1] iota(), iota_dimension=0
  ROOT %r = f32[3,5] gather(%x, %i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=1, slice_sizes={3,1}
"""), None),
    ("gather_does_not_index_into_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %i = s32[3,1] iota(), iota_dimension=0
  ROOT %r = f32[3,4] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
"""), "gather 'r' mixes samples: it indexes into the batch dim 0"),
    ("gather_does_not_take_batched_operand_and_indices", entry("""
  %x = f32[3,4] parameter(0)
  %ids = s32[3,1] parameter(1)
  ROOT %r = f32[3,1] gather(%x, %ids), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
"""), "gather 'r' mixes samples: both the operand and the indices carry the batch"),
    ("dynamic_slice_of_the_whole_batch", entry("""
  %x = f32[3,6] parameter(0)
  %k = s32[] constant(2)
  ROOT %r = f32[3,2] dynamic-slice(%x, %k, %k), dynamic_slice_sizes={3,2}
"""), None),
    ("dynamic_slice_does_not_take_part_of_the_batch", entry("""
  %x = f32[3,6] parameter(0)
  %k = s32[] constant(1)
  %z = f32[] constant(0)
  %d = f32[1,6] dynamic-slice(%x, %k, %k), dynamic_slice_sizes={1,6}
  ROOT %r = f32[3,6] pad(%d, %z), padding=2_0x0_0
"""), "dynamic-slice 'd' mixes samples: it takes part of the batch dim 0"),
    ("dynamic_update_slice_of_whole_samples", entry("""
  %x = f32[3,6] parameter(0)
  %u = f32[3,2] parameter(1)
  %k = s32[] constant(0)
  %one = f32[] constant(1)
  %c = f32[3,6] broadcast(%one), dimensions={}
  %a = f32[3,6] dynamic-update-slice(%x, %u, %k, %k)
  ROOT %r = f32[3,6] dynamic-update-slice(%c, %u, %k, %k)
"""), None),
    ("dynamic_update_slice_does_not_write_part_of_the_batch", entry("""
  %x = f32[3,6] parameter(0)
  %u = f32[1,6] constant({{1, 2, 3, 4, 5, 6}})
  %k = s32[] constant(0)
  ROOT %r = f32[3,6] dynamic-update-slice(%x, %u, %k, %k)
"""), "dynamic-update-slice 'r' mixes samples: it writes part of the batch dim 0"),
    ("sort_along_another_dim", entry("""
  %x = f32[3,6] parameter(0)
  %i = f32[3,6] iota(), iota_dimension=1
  %s = (f32[3,6], f32[3,6]) sort(%x, %i), dimensions={1}, to_apply=%less2
  ROOT %r = f32[3,6] get-tuple-element(%s), index=1
""", LESS2), None),
    ("sort_does_not_sort_along_the_batch", entry("""
  %x = f32[3,6] parameter(0)
  ROOT %r = f32[3,6] sort(%x), dimensions={0}, to_apply=%less
""", LESS), "sort 'r' mixes samples: it sorts along the batch dim 0"),
    ("topk_along_the_last_dim", entry("""
  %x = f32[3,6] parameter(0)
  %t = (f32[3,2], s32[3,2]) topk(%x), k=2, largest=true
  %v = f32[3,2] get-tuple-element(%t), index=0
  %i = s32[3,2] get-tuple-element(%t), index=1
  ROOT %r = (f32[3,2], s32[3,2]) tuple(%v, %i)
"""), None),
    ("topk_does_not_select_along_the_batch", entry("""
  %x = f32[3,6] parameter(0)
  %y = f32[6,3] transpose(%x), dimensions={1,0}
  %t = (f32[6,2], s32[6,2]) topk(%y), k=2, largest=true
  ROOT %r = f32[3,6] negate(%x)
"""), "topk 't' mixes samples: it selects along the batch dim 1"),
    ("scatter_of_uniforms", entry("""
  %x = f32[3,4] parameter(0)
  %z = f32[] constant(0)
  %o = f32[5,4] broadcast(%z), dimensions={}
  %i = s32[2,1] iota(), iota_dimension=0
  %u = f32[2,4] broadcast(%z), dimensions={}
  %s = f32[5,4] scatter(%o, %i, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  %w = f32[5,4] add(%s, %s)
  ROOT %r = f32[3,4] negate(%x)
""", ADD), None),
    ("scatter_does_not_take_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %i = s32[2,1] iota(), iota_dimension=0
  %u = f32[2,4] constant({{1, 2, 3, 4}, {5, 6, 7, 8}})
  ROOT %r = f32[3,4] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
""", ADD), "scatter 'r' reads the batch: scatter is not supported for bounded batch yet"),
    ("bitcast_does_not_change_the_layout_of_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %b = f32[3,4]{0,1} bitcast(%x)
  ROOT %r = f32[3,4] copy(%b)
"""), "bitcast 'b' mixes samples: it reorders elements between layouts"),
    ("convolution_does_not_group_samples", entry("""
  %x = f32[3,2,5,5] parameter(0)
  %one = f32[] constant(1)
  %k = f32[3,2,3,3] broadcast(%one), dimensions={}
  %c = f32[1,3,3,3] convolution(%x, %k), window={size=3x3}, dim_labels=bf01_oi01->bf01, batch_group_count=3
  ROOT %r = f32[3,2,5,5] negate(%x)
"""), "convolution 'c' mixes samples: its batch groups span samples"),
    ("gather_per_sample_rows_of_a_table", entry("""
  %ids = s32[3,2] parameter(0)
  %t = f32[3,5] iota(), iota_dimension=1
  ROOT %r = f32[3,2] gather(%t, %ids), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
"""), None),
    ("gather_does_not_read_a_table_row_per_sample_position", entry("""
  %ids = s32[3,2] parameter(0)
  %t = f32[3,5] iota(), iota_dimension=0
  ROOT %r = f32[3,2] gather(%t, %ids), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
"""), "gather 'r' mixes samples: sample i reads position i of operand dim 0"),
    ("gather_does_not_take_index_vectors_along_the_batch", entry("""
  %ids = s32[3] parameter(0)
  %t = f32[4,4,4] iota(), iota_dimension=0
  %g = f32[] gather(%t, %ids), offset_dims={}, collapsed_slice_dims={0,1,2}, start_index_map={0,1,2}, index_vector_dim=0, slice_sizes={1,1,1}
  ROOT %r = s32[3] negate(%ids)
"""), "gather 'g' mixes samples: its index vectors run along the batch dim 0"),
    ("output_uniform", entry("""
  %x = f32[3,4] parameter(0)
  %c = f32[3,4] iota(), iota_dimension=1
  ROOT %r = (f32[3,4], f32[3,4]) tuple(%x, %c)
"""), r"^bounded batch: output %c does not depend on the batch$"),
    ("output_batched_at_dim_1", entry("""
  %x = f32[3,4] parameter(0)
  ROOT %r = f32[4,3] transpose(%x), dimensions={1,0}
"""), r"^bounded batch: output %r carries the batch at dim 1, not 0$"),
    ("input_without_the_batch", entry("""
  %x = f32[3,4] parameter(0)
  %y = f32[4] parameter(1)
  %b = f32[3,4] broadcast(%y), dimensions={1}
  ROOT %r = f32[3,4] add(%x, %b)
"""), r"^bounded batch: input %y has shape f32\[4\]\{0\}, not a leading batch dimension of 3$"),
]


@pytest.mark.parametrize("text, error", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(text, error):
    if error is None:
        check(text)
    else:
        with pytest.raises(XlacError, match=error):
            check(text)


# Uniform values: %u of each case meets the batched %x in an add, which takes it only
# where the rules prove it the same along the batch dim 0.
UNIFORM = [
    ("broadcast_slice_reverse_copy", "3,4", """
  %i = f32[6] iota(), iota_dimension=0
  %b = f32[5,6] broadcast(%i), dimensions={1}
  %s = f32[3,4] slice(%b), slice={[1:4], [0:4]}
  %v = f32[3,4] reverse(%s), dimensions={0,1}
  %u = f32[3,4] copy(%v)
""", True),
    ("reshape_keeping_dims", "3,4", """
  %i = f32[4] iota(), iota_dimension=0
  %b = f32[3,4] broadcast(%i), dimensions={1}
  %r2 = f32[3,2,2] reshape(%b)
  %u = f32[3,4] reshape(%r2)
""", True),
    ("reshape_of_a_flat_iota", "3,4", """
  %i = f32[12] iota(), iota_dimension=0
  %u = f32[3,4] reshape(%i)
""", False),
    ("transpose", "3,4", """
  %i = f32[4,3] iota(), iota_dimension=0
  %u = f32[3,4] transpose(%i), dimensions={1,0}
""", True),
    ("transpose_of_an_iota_along_the_batch", "3,4", """
  %i = f32[4,3] iota(), iota_dimension=1
  %u = f32[3,4] transpose(%i), dimensions={1,0}
""", False),
    ("pad_of_another_dim", "3,4", """
  %i = f32[3,2] iota(), iota_dimension=1
  %z = f32[] constant(0)
  %u = f32[3,4] pad(%i, %z), padding=0_0x1_1
""", True),
    ("pad_of_the_batch_dim", "3,4", """
  %i = f32[1,4] iota(), iota_dimension=1
  %z = f32[] constant(0)
  %u = f32[3,4] pad(%i, %z), padding=1_1x0_0
""", False),
    ("concatenate_along_another_dim", "3,4", """
  %i = f32[3,2] iota(), iota_dimension=1
  %u = f32[3,4] concatenate(%i, %i), dimensions={1}
""", True),
    ("concatenate_along_the_batch_dim", "3,4", """
  %i = f32[1,4] iota(), iota_dimension=1
  %j = f32[2,4] iota(), iota_dimension=1
  %u = f32[3,4] concatenate(%i, %j), dimensions={0}
""", False),
    ("dynamic_slice", "3,4", """
  %i = f32[5,6] iota(), iota_dimension=1
  %k = s32[] constant(1)
  %u = f32[3,4] dynamic-slice(%i, %k, %k), dynamic_slice_sizes={3,4}
""", True),
    ("dynamic_update_slice_conservatively", "3,4", """
  %z = f32[] constant(0)
  %o = f32[3,4] broadcast(%z), dimensions={}
  %one = f32[] constant(1)
  %p = f32[3,1] broadcast(%one), dimensions={}
  %k = s32[] constant(0)
  %u = f32[3,4] dynamic-update-slice(%o, %p, %k, %k)
""", False),
    ("bitcast_between_layouts_conservatively", "3,4", """
  %i = f32[4] iota(), iota_dimension=0
  %b = f32[3,4] broadcast(%i), dimensions={1}
  %c = f32[3,4]{0,1} bitcast(%b)
  %u = f32[3,4] copy(%c)
""", False),
    ("gather_conservatively", "3,4", """
  %t = f32[5,4] iota(), iota_dimension=1
  %k = s32[3,1] constant({{0}, {0}, {0}})
  %u = f32[3,4] gather(%t, %k), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
""", False),
    ("convolution_conservatively", "3,4,1,1", """
  %one = f32[] constant(1)
  %a = f32[3,2,1,1] broadcast(%one), dimensions={}
  %k = f32[4,2,1,1] broadcast(%one), dimensions={}
  %u = f32[3,4,1,1] convolution(%a, %k), window={size=1x1}, dim_labels=bf01_oi01->bf01
""", False),
    ("dot_with_free_dims", "3,4", """
  %one = f32[] constant(1)
  %a = f32[3,5] broadcast(%one), dimensions={}
  %b = f32[5,4] iota(), iota_dimension=1
  %u = f32[3,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
""", True),
    ("dot_of_a_varying_lhs", "3,4", """
  %a = f32[3,5] iota(), iota_dimension=0
  %b = f32[5,4] iota(), iota_dimension=1
  %u = f32[3,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
""", False),
    ("dot_with_shared_batch_dims", "3,2,4", """
  %one = f32[] constant(1)
  %a = f32[3,2,5] broadcast(%one), dimensions={}
  %b = f32[3,5,4] iota(), iota_dimension=2
  %u = f32[3,2,4] dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
""", True),
    ("dot_with_a_batch_dim_varying_on_one_side", "3,2,4", """
  %one = f32[] constant(1)
  %a = f32[3,2,5] broadcast(%one), dimensions={}
  %b = f32[3,5,4] iota(), iota_dimension=0
  %u = f32[3,2,4] dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
""", False),
    ("reduce", "3,4", """
  %i = f32[3,4,5] iota(), iota_dimension=1
  %z = f32[] constant(0)
  %u = f32[3,4] reduce(%i, %z), dimensions={2}, to_apply=%add
""", True),
    ("reduce_of_an_iota_along_the_batch", "3,4", """
  %i = f32[5,3,4] iota(), iota_dimension=1
  %z = f32[] constant(0)
  %u = f32[3,4] reduce(%i, %z), dimensions={0}, to_apply=%add
""", False),
    ("reduce_window_along_another_dim", "3,4", """
  %i = f32[3,4] iota(), iota_dimension=1
  %z = f32[] constant(0)
  %u = f32[3,4] reduce-window(%i, %z), window={size=1x2 pad=0_0x0_1}, to_apply=%add
""", True),
    ("reduce_window_padding_the_batch_dim", "3,4", """
  %one = f32[] constant(1)
  %i = f32[3,4] broadcast(%one), dimensions={}
  %z = f32[] constant(0)
  %u = f32[3,4] reduce-window(%i, %z), window={size=2x1 pad=1_0x0_0}, to_apply=%add
""", False),
    ("sort", "3,4", """
  %i = f32[3,4] iota(), iota_dimension=1
  %u = f32[3,4] sort(%i), dimensions={1}, to_apply=%less
""", True),
    ("sort_along_the_batch_dim", "3,4", """
  %one = f32[] constant(1)
  %i = f32[3,4] broadcast(%one), dimensions={}
  %u = f32[3,4] sort(%i), dimensions={0}, to_apply=%less
""", False),
    ("topk", "3,4", """
  %i = f32[3,6] iota(), iota_dimension=1
  %t = (f32[3,4], s32[3,4]) topk(%i), k=4, largest=true
  %u = f32[3,4] get-tuple-element(%t), index=0
""", True),
]


@pytest.mark.parametrize("dims, body, accepted", [c[1:] for c in UNIFORM],
                         ids=[c[0] for c in UNIFORM])
def test_uniform(dims, body, accepted):
    text = entry(f"""
  %x = f32[{dims}] parameter(0)
{body.strip()}
  ROOT %r = f32[{dims}] add(%x, %u)
""", ADD + LESS)
    if accepted:
        check(text)
    else:
        with pytest.raises(XlacError, match="add 'r' mixes samples: operand %u differs"):
            check(text)


# --- control flow -----------------------------------------------------------------------

def loop(cond_body: str, init: str = "%acc0 = f32[3,4] broadcast(%zero), dimensions={}") -> str:
    """A loop over (counter, x, acc) that adds x to acc five times; ``cond_body`` is
    the condition's instructions after %s = the state."""
    return entry(f"""
  %x = f32[3,4] parameter(0)
  %zero = f32[] constant(0)
  %i0 = s32[] constant(0)
  {init}
  %init = (s32[], f32[3,4], f32[3,4]) tuple(%i0, %x, %acc0)
  %w = (s32[], f32[3,4], f32[3,4]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[3,4] get-tuple-element(%w), index=2
""", ADD + """
%cond (s: (s32[], f32[3,4], f32[3,4])) -> pred[] {
  %s = (s32[], f32[3,4], f32[3,4]) parameter(0)
""" + cond_body + """}

%body (t: (s32[], f32[3,4], f32[3,4])) -> (s32[], f32[3,4], f32[3,4]) {
  %t = (s32[], f32[3,4], f32[3,4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[3,4] get-tuple-element(%t), index=1
  %acc = f32[3,4] get-tuple-element(%t), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %sum = f32[3,4] add(%acc, %x)
  ROOT %out = (s32[], f32[3,4], f32[3,4]) tuple(%next, %x, %sum)
}
""")


COUNTER = """  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
"""


def test_while_whose_state_carries_the_batch():
    """The accumulator starts uniform (zeros) and becomes batched in the body."""
    check(loop(COUNTER))


def test_while_does_not_start_from_a_state_varying_along_the_batch():
    with pytest.raises(XlacError, match="add 'sum' mixes samples: operand %acc differs from "
                                        "sample to sample"):
        check(loop(COUNTER, init="%acc0 = f32[3,4] iota(), iota_dimension=0"))


def test_while_does_not_take_a_condition_on_the_batched_tensor():
    with pytest.raises(XlacError, match="reduce 'total' mixes samples: it reduces over the "
                                        "batch dim 0"):
        check(loop("""  %x = f32[3,4] get-tuple-element(%s), index=1
  %z = f32[] constant(0)
  %total = f32[] reduce(%x, %z), dimensions={0,1}, to_apply=%add
  %limit = f32[] constant(100)
  ROOT %lt = pred[] compare(%total, %limit), direction=LT
"""))


def test_while_does_not_move_the_batch():
    with pytest.raises(XlacError, match="while 'w' mixes samples: the batch moves from dim 0 "
                                        "to dim 1"):
        check(entry("""
  %x = f32[3,3] parameter(0)
  %w = f32[3,3] while(%x), condition=%cond, body=%body
  ROOT %r = f32[3,3] transpose(%w), dimensions={1,0}
""", """
%cond (s: f32[3,3]) -> pred[] {
  %s = f32[3,3] parameter(0)
  ROOT %t = pred[] constant(false)
}

%body (b: f32[3,3]) -> f32[3,3] {
  %b = f32[3,3] parameter(0)
  ROOT %t = f32[3,3] transpose(%b), dimensions={1,0}
}
"""))


BRANCHES = """%neg (a: f32[3,4]) -> f32[3,4] {
  %a = f32[3,4] parameter(0)
  ROOT %n = f32[3,4] negate(%a)
}

%other (b: f32[3,4]) -> f32[3,4] {
  %b = f32[3,4] parameter(0)
  ROOT %%ROOT%%
}
"""


def conditional(other_root: str) -> str:
    return entry("""
  %x = f32[3,4] parameter(0)
  %p = pred[] constant(true)
  ROOT %r = f32[3,4] conditional(%p, %x, %x), true_computation=%neg, false_computation=%other
""", BRANCHES.replace("%%ROOT%%", other_root))


def test_conditional_whose_branches_keep_the_batch():
    check(conditional("%e = f32[3,4] exponential(%b)"))


def test_conditional_does_not_join_a_batched_branch_with_one_varying_along_the_batch():
    with pytest.raises(XlacError, match="conditional 'r' mixes samples: a value that differs "
                                        "along the batch dim 0 meets a batched one"):
        check(conditional("%i = f32[3,4] iota(), iota_dimension=0"))


def test_fusion_is_analyzed_through_its_computation():
    fused = """%fused (p: f32[3,4]) -> f32[4,3] {
  %p = f32[3,4] parameter(0)
  ROOT %t = f32[4,3] transpose(%p), dimensions={1,0}
}
"""
    with pytest.raises(XlacError, match="output %f carries the batch at dim 1"):
        check(entry("""
  %x = f32[3,4] parameter(0)
  ROOT %f = f32[4,3] fusion(%x), kind=kLoop, calls=%fused
""", fused))


def test_names_the_onnx_node():
    m = parse(entry("""
  %x = f32[3,4] parameter(0)
  %w = f32[3,5] constant({{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}})
  %d = f32[4,5] dot(%x, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT %r = f32[3,4,5] broadcast(%d), dimensions={1,2}
"""))
    named(m, "d").metadata = OpMetadata("MatMul", "MatMul_12")
    with pytest.raises(XlacError) as e:
        check_batch_separable(m, N)
    assert str(e.value) == ("bounded batch: dot 'd' (ONNX node MatMul 'MatMul_12') mixes "
                            "samples: it contracts over the batch dim 0")


def test_does_not_pass_an_opcode_without_a_rule(monkeypatch):
    monkeypatch.delitem(batch_dims.RULES, Opcode.SORT)
    with pytest.raises(XlacError, match="sort 'r' reads the batch: sort is not supported"):
        check(entry("""
  %x = f32[3,6] parameter(0)
  %i = f32[3,6] iota(), iota_dimension=1
  %u = f32[3,6] sort(%i), dimensions={1}, to_apply=%less
  ROOT %r = f32[3,6] sort(%x), dimensions={1}, to_apply=%less
""", LESS))


# --- ONNX models --------------------------------------------------------------------------

def onnx_model(nodes, initializers, out_dims) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)],
        [numpy_helper.from_array(a, name) for name, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_accepts_an_imported_cnn():
    rng = np.random.default_rng(0)
    model = onnx_model(
        [helper.make_node("Conv", ["x", "k", "kb"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)],
        {"k": rng.standard_normal((4, 3, 3, 3), dtype=np.float32),
         "kb": rng.standard_normal(4, dtype=np.float32),
         "w": rng.standard_normal((5, 4), dtype=np.float32),
         "b": rng.standard_normal(5, dtype=np.float32)},
        ["N", 5])
    module = import_onnx(model, input_shapes={"x": (2, 3, 8, 8)})
    check_batch_separable(module, 2)


def test_rejects_an_imported_mean_over_the_batch():
    model = onnx_model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], keepdims=1)],
                       {}, [1, 3, 8, 8])
    module = import_onnx(model, input_shapes={"x": (2, 3, 8, 8)})
    with pytest.raises(XlacError, match=r"^bounded batch: reduce '[^']*' \(ONNX node "
                                        r"ReduceMean '[^']*'\) mixes samples: it reduces "
                                        r"over the batch dim 0$"):
        check_batch_separable(module, 2)

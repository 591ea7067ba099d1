"""A model with sequences and optionals at its boundary, shared by the tests of the C ABI
(test_sequence_io.py) and of the commands (test_commands.py): a sequence input s, a
tensor x and an optional input o."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def sequence_model() -> onnx.ModelProto:
    """y = concat(s); t = s with x appended (a sequence output); h = has_element(o);
    oo = o (an optional output)."""
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    graph = helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0),
         helper.make_node("SequenceInsert", ["s", "x"], ["t"]),
         helper.make_node("OptionalHasElement", ["o"], ["h"]),
         helper.make_node("Identity", ["o"], ["oo"])], "g",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
         helper.make_value_info("o", opt)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 3]),
         helper.make_tensor_sequence_value_info("t", TensorProto.FLOAT, [None, 3]),
         helper.make_tensor_value_info("h", TensorProto.BOOL, []),
         helper.make_value_info("oo", opt)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])

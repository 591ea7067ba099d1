"""ONNX tensor element types -> HLO element types."""
from __future__ import annotations

from onnx import TensorProto

from ...hlo import XlacError, dtypes

_TO_HLO = {
    TensorProto.FLOAT: dtypes.F32,
    TensorProto.DOUBLE: dtypes.F64,
    TensorProto.FLOAT16: dtypes.F16,
    TensorProto.BFLOAT16: dtypes.BF16,
    TensorProto.INT8: dtypes.S8,
    TensorProto.INT16: dtypes.S16,
    TensorProto.INT32: dtypes.S32,
    TensorProto.INT64: dtypes.S64,
    TensorProto.UINT8: dtypes.U8,
    TensorProto.UINT16: dtypes.U16,
    TensorProto.UINT32: dtypes.U32,
    TensorProto.UINT64: dtypes.U64,
    TensorProto.BOOL: dtypes.PRED,
}


def hlo_dtype(elem_type: int, what: str) -> dtypes.DType:
    """The HLO type for an ONNX ``TensorProto.DataType``; ``what`` names the value."""
    try:
        return _TO_HLO[elem_type]
    except KeyError:
        name = TensorProto.DataType.Name(elem_type) if elem_type in \
            TensorProto.DataType.values() else str(elem_type)
        raise XlacError(f"{what} has element type {name}, which xlac does not support") \
            from None

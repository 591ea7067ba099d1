"""ONNX tensor element types -> HLO element types.

``numpy_helper.to_array`` unpacks ONNX's packed 4-bit and 2-bit tensors into ml_dtypes
arrays of one element per byte, which is how xlac holds them everywhere.
"""
from __future__ import annotations

from onnx import TensorProto

from ...hlo import XlacError, dtypes
from .scope import strings_error

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
    TensorProto.INT4: dtypes.S4,
    TensorProto.UINT4: dtypes.U4,
    TensorProto.INT2: dtypes.S2,
    TensorProto.UINT2: dtypes.U2,
    TensorProto.FLOAT8E4M3FN: dtypes.F8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ: dtypes.F8E4M3FNUZ,
    TensorProto.FLOAT8E5M2: dtypes.F8E5M2,
    TensorProto.FLOAT8E5M2FNUZ: dtypes.F8E5M2FNUZ,
    TensorProto.FLOAT4E2M1: dtypes.F4E2M1FN,
    TensorProto.FLOAT8E8M0: dtypes.F8E8M0FNU,
}


def hlo_dtype(elem_type: int, what: str) -> dtypes.DType:
    """The HLO type for an ONNX ``TensorProto.DataType``; ``what`` names the value."""
    if elem_type == TensorProto.STRING:
        raise strings_error(what)
    try:
        return _TO_HLO[elem_type]
    except KeyError:
        name = TensorProto.DataType.Name(elem_type) if elem_type in \
            TensorProto.DataType.values() else str(elem_type)
        raise XlacError(f"{what} has element type {name}, which xlac does not support") \
            from None

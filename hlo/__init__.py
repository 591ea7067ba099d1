"""xlac.hlo: the IR (shapes, opcodes, instructions, computations, modules)."""
from . import dtypes
from .attributes import (ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers,
                         PaddingConfig, ScatterDimensionNumbers, SliceSpec, Window)
from .builder import Builder, scalar_computation
from .dtypes import DType
from .errors import XlacError, XlacWarning
from .ir import Computation, Instruction, Module, OpMetadata, Signature, TensorSpec, ValueSpec
from .opcodes import Opcode
from .shape import Shape
from .shape_inference import ShapeError, infer_shape

__all__ = [
    "dtypes", "DType", "Shape", "Opcode", "Instruction", "Computation", "Module", "OpMetadata",
    "Signature", "TensorSpec", "ValueSpec", "Builder", "scalar_computation", "infer_shape",
    "ShapeError", "XlacError", "XlacWarning", "Window", "ConvDimensionNumbers",
    "DotDimensionNumbers",
    "GatherDimensionNumbers", "PaddingConfig", "ScatterDimensionNumbers", "SliceSpec",
]

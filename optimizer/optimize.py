"""The optimization pipelines behind ``xlac -O0 .. -O3``."""
from __future__ import annotations

from ..hlo import Module
from .algebraic_simplifier import AlgebraicSimplifier
from .constant_folding import ConstantFolding
from .conv_phase_split import ConvPhaseSplit
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion import InstructionFusion, OutputFusion
from .layout_assignment import ChannelsMinorLayout
from .licm import WhileLoopInvariantCodeMotion
from .pipeline import DumpHook, Pipeline
from .quantization import QuantizedArithmetic


def make_pipeline(opt_level: int = 2, verify: bool = False,
                  dump: DumpHook | None = None) -> Pipeline:
    """-O0: only DCE. -O1 and up: quantized models onto their integers (before constant
    folding could turn their weights into floats), base-dilated convolutions split into
    dense phases, then simplify, fold, CSE, DCE and loop-invariant code motion to a fixed
    point, then output fusion (integer dots and convolutions with their requantization),
    loop fusion, channels-minor layouts for integer convolutions and a DCE that drops
    what fusion left unused."""
    if opt_level <= 0:
        return Pipeline("O0", [DeadCodeElimination()], verify=verify, dump=dump)
    simplify = Pipeline("simplify", [AlgebraicSimplifier(), ConstantFolding(),
                                     CommonSubexpressionElimination(), DeadCodeElimination(),
                                     WhileLoopInvariantCodeMotion()],
                        fixed_point=True, verify=verify, dump=dump)
    return Pipeline(f"O{opt_level}", [QuantizedArithmetic(), ConvPhaseSplit(), simplify,
                                      OutputFusion(), InstructionFusion(),
                                      ChannelsMinorLayout(), DeadCodeElimination()],
                    verify=verify, dump=dump)


def optimize(module: Module, opt_level: int = 2, verify: bool = False,
             dump: DumpHook | None = None) -> Module:
    """Optimize ``module`` in place (and return it, for chaining)."""
    make_pipeline(opt_level, verify, dump).run(module)
    return module

"""The optimization pipelines behind ``xlac -O0 .. -O3``."""
from __future__ import annotations

from ..hlo import Module, Opcode
from .algebraic_simplifier import AlgebraicSimplifier
from .constant_folding import ConstantFolding
from .conv_canonicalization import ConvCanonicalization
from .conv_phase_split import ConvPhaseSplit
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion import InstructionFusion, OutputFusion
from .layout_assignment import LayoutAssignment
from .licm import WhileLoopInvariantCodeMotion
from .pipeline import DumpHook, Pipeline
from .projection_sinking import ProjectionSinking
from .row_streaming import RowStreaming
from .policy import BackendPolicy
from .quantization import QuantizedArithmetic


def make_pipeline(opt_level: int, backend: BackendPolicy, verify: bool = False,
                  dump: DumpHook | None = None, stream: RowStreaming | None = None) -> Pipeline:
    """-O0: only DCE. -O1 and up: quantized models onto their integers (before constant
    folding could turn their weights into floats), convolutions into ONNX's dimension
    order where the backend's kernels want it, base-dilated ones split into dense phases, then simplify, fold, CSE, DCE and loop-invariant code motion to a fixed
    point, then output fusion (the backend's kernels with the epilogues they apply),
    loop fusion, the layouts the backend's kernels want and a DCE that drops what fusion
    left unused. ``stream`` (a RowStreaming, from ``--memory-budget``) runs after the
    simplification, before fusion, so that each band's layers fuse as the whole layers
    would. ``backend`` answers the passes' questions (optimizer/policy.py)."""
    if opt_level <= 0:
        return Pipeline("O0", [DeadCodeElimination()], verify=verify, dump=dump)
    simplify = Pipeline("simplify", [AlgebraicSimplifier(backend), ConstantFolding(backend),
                                     CommonSubexpressionElimination(), DeadCodeElimination(),
                                     WhileLoopInvariantCodeMotion()],
                        fixed_point=True, verify=verify, dump=dump)
    streaming = [stream, DeadCodeElimination()] if stream is not None else []
    canonical = [ConvCanonicalization()] if backend.convolutions_in_onnx_order else []
    return Pipeline(f"O{opt_level}", [QuantizedArithmetic(backend.soft_float), *canonical,
                                      ConvPhaseSplit(),
                                      simplify,
                                      *streaming,
                                      OutputFusion(backend), InstructionFusion(backend),
                                      LayoutAssignment(backend), DeadCodeElimination()],
                    verify=verify, dump=dump)


def optimize(module: Module, backend: BackendPolicy, opt_level: int = 2, verify: bool = False,
             dump: DumpHook | None = None, stream: RowStreaming | None = None) -> Module:
    """Optimize ``module`` for ``backend`` in place (and return it, for chaining)."""
    make_pipeline(opt_level, backend, verify, dump, stream).run(module)
    return module


def alternatives(module: Module) -> list[Module]:
    """``module``, then the rewrites of it that may need less memory for some speed, which
    the driver optimizes and plans too, keeping the smallest arena: today a copy whose
    recurrent loops compute their input projection per step (projection_sinking.py)."""
    if not any(i.opcode is Opcode.WHILE for c in module.computations for i in c.instructions):
        return [module]
    sunk = module.clone()
    return [module, sunk] if ProjectionSinking().run(sunk) else [module]

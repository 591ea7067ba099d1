"""xlac.optimizer: passes, pipelines, memory scheduling and buffer assignment."""
from .algebraic_simplifier import AlgebraicSimplifier
from .buffer_assignment import ArenaBlock, BufferAssignment, BufferLocation, assign_buffers
from .constant_folding import ConstantFolding
from .conv_canonicalization import ConvCanonicalization
from .conv_phase_split import ConvPhaseSplit
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion import InstructionFusion
from .heap_simulator import simulate_peak
from .licm import WhileLoopInvariantCodeMotion
from .memory_model import MemoryModel
from .memory_plan import plan_memory
from .optimize import alternatives, make_pipeline, optimize
from .pipeline import ComputationPass, Pass, Pipeline
from .projection_sinking import ProjectionSinking
from .row_streaming import RowStreaming
from .scheduling import (DEFAULT_SCHEDULERS, DefinitionOrderScheduler, ListScheduler,
                         PostOrderScheduler, ScheduleResult, Scheduler, check_order, schedule,
                         schedule_model)

__all__ = [
    "ComputationPass", "Pass", "Pipeline", "optimize", "make_pipeline", "alternatives",
    "AlgebraicSimplifier", "ConstantFolding", "CommonSubexpressionElimination",
    "ConvCanonicalization", "ConvPhaseSplit", "ProjectionSinking", "RowStreaming",
    "DeadCodeElimination", "InstructionFusion", "WhileLoopInvariantCodeMotion",
    "MemoryModel", "schedule", "schedule_model", "ScheduleResult", "Scheduler", "DefinitionOrderScheduler", "PostOrderScheduler",
    "ListScheduler", "DEFAULT_SCHEDULERS", "check_order", "simulate_peak",
    "assign_buffers", "ArenaBlock", "BufferAssignment", "BufferLocation", "plan_memory",
]

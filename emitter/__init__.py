"""xlac.emitter: the step list, and its CPU renderer: LLVM IR for a whole model, object code
for a target, and the C header. Reached through a backend (xlac.backends):

    backend = make_backend(triple, cpu, features, opt_level)
    art = backend.emit(module, plan_memory(module, backend), EmitOptions("mnist"))
    art.object_code, art.header
    art.footprint, art.stack_bytes      # what it costs on the target
"""
from __future__ import annotations

from .render import KINDS, Artifact, EmitOptions, weights_section
from .steps import build_steps, format_steps
from .target import TargetInfo, make_target

__all__ = ["EmitOptions", "Artifact", "TargetInfo", "make_target", "weights_section",
           "build_steps", "format_steps", "KINDS"]

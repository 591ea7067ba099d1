"""xlac.backends: one object per kind of target, carrying everything that differs.

    backend = make_backend(triple, cpu, features, opt_level)
    optimize(module, backend)                    # optimizer/policy.py: what passes ask
    assignment = plan_memory(module, backend)    # its alignment and kernel scratch
    artifact = backend.emit(module, assignment, EmitOptions("model"))

A backend answers the optimizer's questions (``optimizer.policy.BackendPolicy``,
``MemoryPolicy``), says which instructions are kernels (``kernel(instr, lean)``, which
the step list records) and renders the steps into code (``emit``). Today there is one,
the CPU's (cpu.py: LLVM for the host or a cross triple) and CUDA's (cuda.py: kernels
for an NVIDIA GPU and a host object that launches them, for ``cuda``). A new backend is
a class with the same methods, chosen here by its triple.
"""
from __future__ import annotations

from .cpu import CpuBackend, KernelChoice
from .cuda import CudaBackend, is_cuda_target


def make_backend(triple: str | None = None, cpu: str | None = None,
                 features: str | None = None, opt_level: int = 2):
    """The backend for a target triple (default: this machine); ``cpu`` and
    ``features`` as ``emitter.make_target`` takes them (for ``cuda``: the GPU's, e.g.
    sm_90)."""
    if is_cuda_target(triple):
        return CudaBackend.for_target(triple, cpu, features, opt_level)
    return CpuBackend.for_target(triple, cpu, features, opt_level)


__all__ = ["CpuBackend", "CudaBackend", "KernelChoice", "make_backend"]

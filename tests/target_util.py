"""Explicit targets for tests of choices that follow the vector width (kernel paths,
tiles, thread splits): such a test states its expectation per target and holds on any
machine. Numerics (compiling and running code) stay on the host.

The kernels count 32 vector registers at 64-byte vectors and 16 below
(``gemm.tiling_for``, ``conv.py``): AArch64's 32 NEON registers count as 16.
"""
from __future__ import annotations

from functools import lru_cache

import pytest

from xlac.backends import CpuBackend, make_backend
from xlac.emitter.target import TargetInfo, make_target

X86 = "x86_64-unknown-linux-gnu"
AARCH64 = "aarch64-unknown-linux-gnu"

# name: (triple, cpu, vector bytes, registers the kernels count)
TARGETS = {
    "sse2": (X86, "x86-64", 16, 16),
    "avx2": (X86, "x86-64-v3", 32, 16),
    "avx512": (X86, "x86-64-v4", 64, 32),
    "neon": (AARCH64, "generic", 16, 16),
}


@lru_cache(maxsize=None)
def target(name: str) -> TargetInfo:
    triple, cpu, vector_bytes, _ = TARGETS[name]
    info = make_target(triple, cpu)[0]
    assert info.vector_bytes == vector_bytes, (name, info.vector_bytes)
    return info


@lru_cache(maxsize=None)
def backend(name: str) -> CpuBackend:
    """The CPU backend of ``target(name)``."""
    triple, cpu, _, _ = TARGETS[name]
    return make_backend(triple, cpu)


def target_id(name: str) -> str:
    """``avx2-32B-16regs``: the width and register count a test's expectation assumes."""
    _, _, vector_bytes, registers = TARGETS[name]
    return f"{name}-{vector_bytes}B-{registers}regs"


def every_target(argname: str = "target_name"):
    """Parametrizes a test over TARGETS' names."""
    return pytest.mark.parametrize(argname, list(TARGETS), ids=[target_id(n) for n in TARGETS])


def by_width(sse, avx2, avx512) -> dict:
    """An expectation that differs with the vector width: {16: sse, 32: avx2, 64: avx512}
    (16 also AArch64's NEON)."""
    return {16: sse, 32: avx2, 64: avx512}


def expected(want, vector_bytes: int):
    """``want`` at ``vector_bytes``: the value itself where it holds at every width."""
    return want[vector_bytes] if isinstance(want, dict) else want

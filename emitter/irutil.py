"""Small LLVM IR idioms shared by the emitters (numba's cgutils style).

The builder is always passed explicitly; loop nests are nested ``with`` blocks:

    with for_range(b, n, "i") as i:
        ...
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache

from llvmlite import ir

from ..hlo import DType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()          # opaque pointer
VOID = ir.VoidType()

_INT = {8: I8, 16: ir.IntType(16), 32: I32, 64: I64}


def llvm_type(dtype: DType) -> ir.Type:
    """The LLVM type of one element in memory (pred is a byte, 0 or 1).

    llvmlite has no bfloat type: bf16 is stored as i16 and computed through f32. The
    float8 and float4 types are their bits in an i8; 4- and 2-bit integers an i8 holding
    the value in its low bits (one element per byte)."""
    if dtype.kind == "pred" or dtype.is_sub_byte:
        return I8
    if dtype.kind in ("s", "u"):
        return _INT[dtype.bits]
    return {"f16": ir.HalfType(), "bf16": ir.IntType(16), "f32": ir.FloatType(),
            "f64": ir.DoubleType()}.get(dtype.name, I8)


def i64(n: int) -> ir.Constant:
    return ir.Constant(I64, n)


def i32(n: int) -> ir.Constant:
    return ir.Constant(I32, n)


@contextmanager
def for_range(b: ir.IRBuilder, count, name: str = "i", start=0, step=1):
    """Emit ``for (i = start; i < count; i += step) { body }``; yields ``i`` (i64).

    ``count``/``start`` may be Python ints or i64 values. The body is emitted at the
    builder's position inside the ``with``; afterwards the builder sits after the loop.
    """
    # On a 32-bit target the counter is an i32 (sizes there fit one): an i64 counter
    # would take two registers and add-with-carry, compare-with-borrow in every latch.
    ty = I32 if pointer_bits(b.module.data_layout) == 32 else I64

    def as_ty(v):
        if isinstance(v, int):
            return ir.Constant(ty, v)
        return b.trunc(v, ty) if v.type != ty else v
    count, start = as_ty(count), as_ty(start)
    pre = b.block
    fn = pre.function
    head = fn.append_basic_block(f"{name}.head")
    body = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    idx = b.phi(ty, name=name)
    idx.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", idx, count), body, done)
    b.position_at_end(body)
    yield idx if ty is I64 else b.zext(idx, I64)
    nxt = b.add(idx, ir.Constant(ty, step), name=f"{name}.next", flags=["nsw"])
    idx.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


@lru_cache(maxsize=None)
def pointer_bits(data_layout: str | None) -> int:
    """The pointer width an LLVM data layout gives (64 where it names none)."""
    pointer = re.search(r"(?:^|-)p:(\d+)", data_layout or "")
    return int(pointer.group(1)) if pointer else 64


def alloca_once(b: ir.IRBuilder, ty: ir.Type, name: str = "", size=None) -> ir.AllocaInstr:
    """An alloca placed in the function's entry block (so LLVM promotes it to registers)."""
    with b.goto_entry_block():
        return b.alloca(ty, size=size, name=name)


def gep_bytes(b: ir.IRBuilder, base: ir.Value, offset) -> ir.Value:
    """``base + offset`` bytes (offset an int or an i64 value)."""
    off = i64(offset) if isinstance(offset, int) else offset
    if isinstance(offset, int) and offset == 0:
        return base
    return b.gep(base, [off], source_etype=I8, inbounds=True)


def gep_elem(b: ir.IRBuilder, base: ir.Value, ty: ir.Type, index) -> ir.Value:
    """Address of element ``index`` (i64) of an array of ``ty`` starting at ``base``."""
    return b.gep(base, [index], source_etype=ty, inbounds=True)

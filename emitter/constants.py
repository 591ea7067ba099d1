"""Constants as read-only globals: one ``c"..."`` byte string per distinct constant.

Weights can be hundreds of MB, so the initializer text is made by a vectorized
formatter (every byte as ``\\xx``, built with numpy from ``binascii.hexlify``)
instead of llvmlite's per-element constants. Identical bytes are stored once.
"""
from __future__ import annotations

import binascii
import hashlib

import numpy as np
from llvmlite import ir

from ..hlo import Instruction
from .irutil import I8

CONSTANT_ALIGN = 64


def storage_bytes(literal: np.ndarray, shape) -> bytes:
    """The literal's bytes as the emitter stores the shape: its layout, pred as 0/1 bytes,
    bf16 as its 16 bits."""
    arr = np.asarray(literal, dtype=shape.dtype.np)
    # minor_to_major -> the axis order from most major to most minor.
    physical = np.transpose(arr, tuple(reversed(shape.layout))) if arr.ndim else arr
    return np.ascontiguousarray(physical).tobytes()


def llvm_byte_string(data: bytes) -> str:
    """``c"\\01\\ab..."``: LLVM's string constant syntax, three characters per byte."""
    hexed = np.frombuffer(binascii.hexlify(data), dtype=np.uint8)
    out = np.empty(len(data) * 3, dtype=np.uint8)
    out[0::3] = ord("\\")
    out[1::3] = hexed[0::2]
    out[2::3] = hexed[1::2]
    return 'c"' + out.tobytes().decode("ascii") + '"'


class _ByteString(ir.Constant):
    """An ``[N x i8]`` constant whose textual form is made once, up front."""

    def __init__(self, data: bytes):
        super().__init__(ir.ArrayType(I8, len(data)), None)
        self._text = llvm_byte_string(data)

    def _get_reference(self):
        return self._text


class ConstantPool:
    """Makes and remembers the global of every constant instruction of a module."""

    def __init__(self, llvm_module: ir.Module, prefix: str):
        self._module = llvm_module
        self._prefix = prefix
        self._by_digest: dict[bytes, ir.GlobalVariable] = {}
        self._by_instr: dict[int, ir.GlobalVariable] = {}

    def global_for(self, instr: Instruction) -> ir.GlobalVariable:
        g = self._by_instr.get(id(instr))
        if g is None:
            data = storage_bytes(instr.literal, instr.shape)
            digest = hashlib.sha256(data).digest()
            g = self._by_digest.get(digest)
            if g is None:
                g = self._new_global(data)
                self._by_digest[digest] = g
            self._by_instr[id(instr)] = g
        return g

    def _new_global(self, data: bytes) -> ir.GlobalVariable:
        name = self._module.get_unique_name(f"{self._prefix}const")
        g = ir.GlobalVariable(self._module, ir.ArrayType(I8, len(data)), name)
        g.linkage = "private"
        g.unnamed_addr = True
        g.global_constant = True
        g.align = CONSTANT_ALIGN
        g.initializer = _ByteString(data)
        return g

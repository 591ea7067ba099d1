"""Constants as read-only globals: one ``c"..."`` byte string per distinct constant.

Weights can be hundreds of MB, so the initializer text is made by a vectorized
formatter (every byte as ``\\xx``, built with numpy from ``binascii.hexlify``)
instead of llvmlite's per-element constants. Identical bytes are stored once.

On ELF targets every constant goes to one section, ``.rodata.NAME.weights``: the
report measures it, and a linker script can place the weights in a memory of their own
(``*(.rodata.*.weights)``).

When an ELF object is emitted for the host, large constants skip LLVM IR entirely:
their bytes go to a file that module-level ``.incbin`` pulls into ``.rodata``
(~0.01 s instead of ~4 s per 100 MB). llvmlite registers only the host's assembly
parser, hence host only; small constants stay in the IR, where LLVM can fold loads.
"""
from __future__ import annotations

import binascii
import hashlib
from pathlib import Path

import numpy as np
from llvmlite import ir

from ..hlo import Instruction
from .irutil import I8

CONSTANT_ALIGN = 64
INCBIN_MIN_BYTES = 64 * 1024


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

    def __init__(self, llvm_module: ir.Module, prefix: str, incbin_dir: Path | None = None,
                 section: str | None = None):
        self._module = llvm_module
        self._prefix = prefix
        self._incbin_dir = incbin_dir
        self._section = section
        self._asm: list[str] = []
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

    def global_for_bytes(self, data: bytes, align: int = CONSTANT_ALIGN) -> ir.GlobalVariable:
        """A read-only global holding ``data`` (kernels' packed weights, an epilogue's
        scalars), stored once, aligned to at least ``align``."""
        digest = hashlib.sha256(data).digest()
        g = self._by_digest.get(digest)
        if g is None:
            g = self._new_global(data, align)
            self._by_digest[digest] = g
        elif g.align < align:       # stored first for a reader that asked for less
            g.align = align
        return g

    def module_asm(self) -> str:
        """Module-level assembly (``.incbin`` definitions) to append to the IR text."""
        return "".join(f'module asm "{line}"\n' for line in self._asm)

    def _new_global(self, data: bytes, align: int = CONSTANT_ALIGN) -> ir.GlobalVariable:
        name = self._module.get_unique_name(f"{self._prefix}const")
        g = ir.GlobalVariable(self._module, ir.ArrayType(I8, len(data)), name)
        g.global_constant = True
        g.align = align
        if self._section is not None:
            g.section = self._section
        if self._incbin_dir is not None and len(data) >= INCBIN_MIN_BYTES:
            # Declared here, defined by the assembly below as a local (non-.globl) symbol.
            g.linkage = "external"
            g.visibility = "hidden"
            path = self._incbin_dir / f"{name}.bin"
            path.write_bytes(data)
            section = self._section or f".rodata.{name}"
            self._asm += [f".section {section},\\22a\\22,@progbits",
                          f".p2align {align.bit_length() - 1}",
                          f".type {name},@object", f"{name}:",
                          f".incbin \\22{path}\\22", f".size {name}, {len(data)}", ".text"]
            return g
        g.linkage = "private"
        g.unnamed_addr = True
        g.initializer = _ByteString(data)
        return g

"""Custom calls: XLA's custom-call as a call of a C function the program that links the
object defines, with XLA's CPU signature plus the backend config:

    void TARGET(void *out, const void **in, const char *opaque, size_t opaque_len);

``out`` is the result's buffer or, for a tuple result, an array of pointers to its
elements' buffers; ``in`` points to the operands' buffers; all are row-major and do
not overlap. ``opaque`` holds the call's backend_config bytes (not NUL-terminated).
The function must be pure: xlac may drop a call whose result is unused or merge two
identical ones. The header declares each target (``declarations``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ..hlo import Instruction, Module, Opcode, Shape
from .irutil import I8, PTR, VOID, gep_bytes, pointer_bits
from .loops import PointerArg


@dataclass(frozen=True)
class CustomCall:
    """A target and the shapes of one call of it."""
    target: str
    result: Shape
    operands: tuple[Shape, ...]

    def signature_text(self) -> str:
        """``out f32[4]; in f32[4], s32[]``: what the header's comment (and the loader,
        which reads it) says a call passes."""
        return f"out {_shape_text(self.result)}; in " + ", ".join(
            _shape_text(s) for s in self.operands)


def _shape_text(s: Shape) -> str:
    if s.is_tuple:
        return "(" + ", ".join(_shape_text(t) for t in s.tuple_shapes) + ")"
    return f"{s.dtype.name}[{','.join(map(str, s.dims))}]"


def custom_calls(module: Module) -> list[CustomCall]:
    """Every distinct (target, shapes) the module calls, in order of appearance."""
    out: dict[CustomCall, None] = {}
    for comp in module.computations:
        for i in comp.instructions:
            if i.opcode is Opcode.CUSTOM_CALL:
                out[CustomCall(i.attrs["custom_call_target"], i.shape,
                               tuple(o.shape for o in i.operands))] = None
    return list(out)


def declarations(calls: Sequence[CustomCall]) -> list[str]:
    """The header's lines for the targets ``calls`` name."""
    if not calls:
        return []
    lines = ["/* Custom calls: C functions the program that links this object defines. out is",
             "   the result (for a tuple, an array of pointers to its elements), in the",
             "   operands, all row-major; opaque the call's backend_config, opaque_len bytes.",
             "   Each must be a pure function of its operands. The calls: */"]
    lines += [f"/* xlac custom call {c.target}: {c.signature_text()} */" for c in calls]
    for target in dict.fromkeys(c.target for c in calls):
        lines.append(f"void {target}(void *out, const void **in, const char *opaque, "
                     "size_t opaque_len);")
    return lines + [""]


def emit_custom_call_function(llvm_module: ir.Module, instr: Instruction, name: str,
                              em_factory, out: PointerArg, operands: Sequence[PointerArg],
                              offsets: Sequence[int]) -> ir.Function:
    """Define ``void name(ptr out, ptr operand...)``: the pointer tables on the stack,
    then the call of the target."""
    n = len(instr.operands)
    fn = ir.Function(llvm_module, ir.FunctionType(VOID, [PTR] * (1 + n)), name)
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    size_t = ir.IntType(pointer_bits(llvm_module.data_layout))
    ins = b.alloca(ir.ArrayType(PTR, max(n, 1)), name="in")
    for k in range(n):
        b.store(fn.args[1 + k], b.gep(ins, [ir.Constant(ir.IntType(32), 0),
                                           ir.Constant(ir.IntType(32), k)]))
    result = fn.args[0]
    if instr.shape.is_tuple:
        table = b.alloca(ir.ArrayType(PTR, len(offsets)), name="out")
        for k, offset in enumerate(offsets):
            b.store(gep_bytes(b, fn.args[0], offset),
                    b.gep(table, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), k)]))
        result = table
    target = instr.attrs["custom_call_target"]
    callee = llvm_module.globals.get(target)
    if callee is None:
        callee = ir.Function(llvm_module, ir.FunctionType(VOID, [PTR, PTR, PTR, size_t]), target)
    opaque = instr.attrs.get("backend_config", "").encode()
    data = ir.GlobalVariable(llvm_module, ir.ArrayType(I8, len(opaque) + 1),
                             llvm_module.get_unique_name(f"{name}.opaque"))
    data.global_constant, data.linkage, data.unnamed_addr = True, "private", True
    data.initializer = ir.Constant(ir.ArrayType(I8, len(opaque) + 1), bytearray(opaque + b"\0"))
    b.call(callee, [result, ins, data, ir.Constant(size_t, len(opaque))])
    b.ret_void()
    return fn

"""The kernel function frame shared by dot and convolution."""
from __future__ import annotations

from llvmlite import ir

from ..irutil import PTR, VOID


def kernel_function(module: ir.Module, name: str, with_scratch: bool
                    ) -> tuple[ir.Function, ir.IRBuilder]:
    """``void name(ptr out, ptr op0, ptr op1[, ptr scratch])``: internal, nounwind, noalias
    pointers. The builder sits in the body; the caller emits ``ret void`` at the end."""
    nargs = 4 if with_scratch else 3
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * nargs), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg, label in zip(fn.args, ("out", "lhs", "rhs", "scratch")):
        arg.name = label
        arg.add_attribute("noalias")
    entry = fn.append_basic_block("entry")
    body = fn.append_basic_block("body")
    b = ir.IRBuilder(entry)
    b.branch(body)          # allocas go in entry (alloca_once), code in body
    b.position_at_end(body)
    return fn, b

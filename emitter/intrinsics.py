"""LLVM intrinsics: the one place that declares them.

An overloaded intrinsic's name carries the types it is overloaded on
(``llvm.masked.load.v8f32.p0``); each is declared once per module, where first used.
"""
from __future__ import annotations

from llvmlite import ir


def declare_intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type],
                      overloads=()) -> ir.Function:
    """The declaration of ``name`` (``llvm.masked.load``, ...) overloaded on ``overloads``
    in ``module``: declared once, then reused."""
    full = ".".join([name] + [_suffix(t) for t in overloads])
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), full)
    return fn


def call_intrinsic(b: ir.IRBuilder, name: str, args, ret: ir.Type | None = None,
                   overloads=None) -> ir.Value:
    """A call of ``name`` on ``args``, overloaded on ``overloads`` (default: the first
    argument's type), returning ``ret`` (default: that type)."""
    overloads = overloads or [args[0].type]
    fn = declare_intrinsic(b.block.function.module, name, ret or args[0].type,
                           [a.type for a in args], overloads)
    return b.call(fn, list(args))


def _suffix(t: ir.Type) -> str:
    """A type as overloaded names spell it (llvmlite's vectors have no intrinsic_name)."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    return t.intrinsic_name

"""The kernel function frame and the plan that decides which instructions share one.

A kernel is ``void name(ptr out, ptr lhs, ptr rhs[, ptr extra...][, ptr scratch],
i64 size...)``, the extra pointers being what an output fusion's epilogue reads. The
``spec`` of a plan is everything its code is compiled from (path, window, tiling...):
a hashable value, so instructions with equal specs call one function. The sizes that
vary between layers (M/N/K, channels, image sizes, strides) are the trailing i64
arguments, so e.g. every 1x1 convolution of a model runs the same code.

A plan's sizes are a typed value of its kernel family (``ConvSizes``, ``DotSizes``)
whose ``arguments()`` are those i64 arguments; the frame holds the same type over the
function's arguments. Spec classes implement ``params`` (the names of the i64
arguments, in order), ``sizes_of(values)`` (the sizes whose arguments are ``values``;
specs without params need none), ``extra_operands`` (how many pointers follow lhs and
rhs: the instruction's operands after them, then one per ``constant_operands``, f32
values the caller passes so that code differing only in them is shared),
``scratch_bytes`` (the most any call uses, a KernelPlan saying where its call uses
less; or, where the scratch grows with the sizes, as Winograd's does, any positive
stand-in, every plan stating its own) and ``emit(frame)``; a spec with
``pack_weights(array, sizes)`` reads its rhs, a constant, in the order that returns (the
emitter packs it at compile time); ``emit`` sees the spec and the frame only, never the
instruction, so nothing shape-specific can leak into a shared function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol

from llvmlite import ir

from ..irutil import I64, PTR, VOID


class Sizes(Protocol):
    """A kernel family's sizes (``ConvSizes``, ``DotSizes``): ints in a plan, i64 values
    in a frame."""
    def arguments(self) -> tuple: ...


class KernelSpec(Hashable, Protocol):
    @property
    def params(self) -> tuple[str, ...]: ...

    def sizes_of(self, values: list[ir.Value]) -> Sizes: ...

    @property
    def extra_operands(self) -> int: ...

    @property
    def constant_operands(self) -> tuple[float, ...]: ...

    @property
    def scratch_bytes(self) -> int: ...

    def emit(self, frame: "Frame") -> None: ...


@dataclass(frozen=True)
class KernelPlan:
    """One instruction's kernel: the shared code (``spec``) and its own sizes (None for a
    spec without params); ``scratch`` the bytes of scratch this instruction's call needs
    where that is less than the spec's (the shared code writes no more than its sizes
    require)."""
    spec: KernelSpec
    sizes: Sizes | None = None
    scratch: int | None = None

    @property
    def scratch_bytes(self) -> int:
        return self.spec.scratch_bytes if self.scratch is None else self.scratch

    @property
    def arguments(self) -> list[int]:
        return [] if self.sizes is None else list(self.sizes.arguments())


@dataclass(frozen=True)
class Frame:
    """The function being emitted: the builder sits in its body."""
    fn: ir.Function
    b: ir.IRBuilder
    out: ir.Value
    lhs: ir.Value
    rhs: ir.Value
    scratch: ir.Value | None
    size: Sizes | None              # of the i64 size arguments
    extra: tuple[ir.Value, ...] = ()    # the operands after lhs and rhs


def kernel_function(module: ir.Module, name: str, spec: KernelSpec) -> ir.Function:
    """Define ``name`` from ``spec``: internal, nounwind, noalias pointers."""
    with_scratch = spec.scratch_bytes > 0
    labels = (["out", "lhs", "rhs"] + [f"in{k}" for k in range(spec.extra_operands)]
              + (["scratch"] if with_scratch else []))
    pointers = len(labels)
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * pointers + [I64] * len(spec.params)),
                     name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg, label in zip(fn.args[:pointers], labels):
        arg.name = label
        arg.add_attribute("noalias")
    sizes = fn.args[pointers:]
    for arg, label in zip(sizes, spec.params):
        arg.name = label
    entry = fn.append_basic_block("entry")
    body = fn.append_basic_block("body")
    b = ir.IRBuilder(entry)
    b.branch(body)          # allocas go in entry (alloca_once), code in body
    b.position_at_end(body)
    extra = tuple(fn.args[3:3 + spec.extra_operands])
    spec.emit(Frame(fn, b, *fn.args[:3], fn.args[pointers - 1] if with_scratch else None,
                    spec.sizes_of(sizes) if spec.params else None, extra))
    b.ret_void()
    return fn

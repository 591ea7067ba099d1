"""Worst-case stack depth of the entry points, from the code generator's frame sizes.

Every function of the module carries ``"warn-stack-size"="0"``, so LLVM's prologue and
epilogue inserter reports each frame it lays out ("stack frame size (N) exceeds limit
(0) in function 'f'"; target.emit_object collects them): the same figure LLVM's
``.stack_sizes`` section would hold, which llvmlite cannot ask for. The object's code
has no recursion and no indirect calls, so the deepest chain of frames through the call
graph of the optimized IR bounds what a call of the entry can use. Calls into the C
library (memcpy, memset, fmod) and the compiler's runtime are not counted: their frames
are the library's.
"""
from __future__ import annotations

import re

from llvmlite import ir

# A call in the textual IR: `call ... @name(` or `call ... @"name"(`.
_CALL = re.compile(r'\bcall\b[^\n@]*@("(?:[^"\\]|\\.)*"|[-\w.$]+)\(')


class FrameSizeAttributes(ir.values.FunctionAttributes):
    """llvmlite's attribute sets know only LLVM's enumerated attributes; this one also
    writes the string attribute that makes LLVM report the function's frame size."""

    def _to_list(self, ret_type):
        return super()._to_list(ret_type) + ['"warn-stack-size"="0"']


def report_frame_sizes(llvm_module: ir.Module) -> None:
    """Ask the code generator for the frame size of every function defined in the module."""
    for fn in llvm_module.functions:
        if fn.is_declaration:
            continue
        attrs = FrameSizeAttributes()
        set.update(attrs, fn.attributes)
        attrs.alignstack = fn.attributes.alignstack
        attrs.personality = fn.attributes.personality
        fn.attributes = attrs


def call_graph(parsed) -> dict[str, set[str]]:
    """{function defined in the (llvmlite.binding) module: names it calls}, intrinsics
    left out."""
    graph = {}
    for fn in parsed.functions:
        if fn.is_declaration:
            continue
        callees = {m.strip('"') for m in _CALL.findall(str(fn))}
        graph[fn.name] = {c for c in callees if not c.startswith("llvm.")}
    return graph


def stack_depth(graph: dict[str, set[str]], frames: dict[str, int], roots,
                return_address_bytes: int = 0) -> int:
    """The most stack bytes a call of any of ``roots`` uses: the largest sum of frames
    (plus the return address a call pushes, on x86) along a chain of calls. Functions
    outside ``graph`` (library functions) count as 0."""
    depth: dict[str, int] = {}

    def visit(fn: str, path: tuple[str, ...]) -> int:
        if fn not in graph:
            return 0
        if fn in path:
            raise ValueError(f"recursive call chain {' -> '.join((*path, fn))}")
        if fn not in depth:
            deepest = max((visit(c, (*path, fn)) for c in graph[fn]), default=0)
            depth[fn] = return_address_bytes + frames.get(fn, 0) + deepest
        return depth[fn]

    return max(visit(r, ()) for r in roots)

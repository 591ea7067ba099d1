"""Subgraphs (If's branches, the bodies of Loop and Scan) lowered into HLO
computations; the while loops the loops and the recurrent networks become are
``hlo.while_loop.WhileLoop``s.

An HLO computation closes over nothing: what a subgraph reads from enclosing graphs
(``free_names``) comes in as a compile-time constant when its value is known
(``Captures``: an initializer, a shape computation) and otherwise as an element of
the computation's parameter, for a loop an element of the state that the body
passes through unchanged (the memory planner leaves such an element where it is).
"""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from ...hlo import Builder, Instruction, Opcode, XlacError
from .context import ImportContext, flatten, rebuild
from .importer import lower_nodes
from .model_file import subgraphs
from .types import hlo_dtype


def free_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (and the subgraphs inside it) reads but does not define."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        reads = [n for n in node.input if n]
        for g in subgraphs(node):
            reads += free_names(g)
        free.update((n, None) for n in reads if n not in defined)
        defined.update(node.output)
    free.update((o.name, None) for o in graph.output if o.name not in defined)
    return list(free)


class Captures:
    """The outer values a subgraph reads, as tensors (a sequence or an optional known at
    compile time is its tensors, ``context.flatten``): ``constants`` ((name, k) -> array)
    are copied into the computation; ``values`` ((name, k), outer instruction) travel in
    at run time."""

    def __init__(self, ctx: ImportContext, names, what: str):
        self.constants: dict[tuple[str, int], tuple] = {}
        self.values: list[tuple[tuple[str, int], Instruction]] = []
        self._outer: dict[str, object] = {}
        for n in names:
            value = ctx.values.get(n)
            if value is None:
                raise XlacError(f"{what} reads '{n}', which no enclosing graph defines")
            self._outer[n] = value
            for k, x in enumerate(flatten(value)):
                literal = x.literal if x.opcode is Opcode.CONSTANT else ctx.value_of(x)
                if literal is not None:
                    self.constants[n, k] = (literal, x.shape.dtype)
                else:
                    self.values.append(((n, k), x))

    def bind(self, b: Builder, elements) -> dict:
        """Name -> value in ``b``: constants made there, run-time tensors given as
        ``elements`` (one per entry of ``values``, in order)."""
        tensors = {key: b.constant(lit, dtype, name=key[0])
                   for key, (lit, dtype) in self.constants.items()}
        tensors.update((key, e) for (key, _), e in zip(self.values, elements))
        return {n: rebuild(value, iter([tensors[n, k] for k in range(len(flatten(value)))]))
                for n, value in self._outer.items()}


def lower_subgraph(ctx: ImportContext, graph: onnx.GraphProto, b: Builder,
                   bindings: dict[str, Instruction], scope: str,
                   inline: bool = False) -> list[Instruction]:
    """Lower ``graph``'s nodes into ``b`` with its inputs and free names bound by
    ``bindings``; returns its outputs. ``inline``: ``b`` is ``ctx``'s own builder (an
    If whose branch is known), so values keep depending on the model's inputs."""
    sub = ctx.child(b, None if inline else scope)
    sub.values.update(bindings)
    for t in graph.initializer:
        dtype = hlo_dtype(t.data_type, f"initializer '{t.name}' of {scope}")
        sub.values[t.name] = b.constant(numpy_helper.to_array(t).astype(dtype.np, copy=False),
                                        dtype, name=t.name)
    lower_nodes(sub, graph)
    return [sub.values[o.name] for o in graph.output]


def inline_graph(ctx: ImportContext, graph: onnx.GraphProto, inputs: list) -> list:
    """Lower ``graph``, a graph attribute of the node being lowered (FlexAttention's
    score_mod), into the current computation with its inputs bound to ``inputs``; returns
    its outputs. The enclosing graph's values stay visible to it, as ONNX's scoping rules
    say. (Its ops were checked with the model's: reject_unsupported walks subgraphs.)"""
    if len(graph.input) != len(inputs):
        raise XlacError(f"subgraph '{graph.name}' takes {len(graph.input)} inputs, "
                        f"given {len(inputs)}")
    bindings = dict(ctx.values)
    for vi, x in zip(graph.input, inputs):
        dtype = hlo_dtype(vi.type.tensor_type.elem_type, f"subgraph input '{vi.name}'")
        if dtype != x.shape.dtype:
            raise XlacError(f"subgraph '{graph.name}' input '{vi.name}' is {dtype}, "
                            f"given {x.shape.dtype}")
        bindings[vi.name] = x
    return lower_subgraph(ctx, graph, ctx.b, bindings, f"subgraph '{graph.name}'",
                          inline=True)

"""XLA's HLO text (as JAX prints it) -> our Module.

    lowered = jax.jit(f).lower(x)
    text = lowered.as_text(dialect="hlo")   # or .compiler_ir("hlo").as_hlo_text(
                                            #        print_large_constants=True)

The parser (hlo/text.py) reads the text with ``XlaDialect`` for what our IR lacks.
Then: computations only reached through inlined calls are dropped, every layout
becomes row-major, and the entry's parameters and root become the signature. The
caller's buffers are row-major, as numpy and JAX hand them over: the layouts in JAX's
text are hints for XLA's layout assignment (its entry_computation_layout copies the
root's hint: ``f32[4,6]{0,1}`` for a transpose whose result JAX returns row-major),
and no op's meaning depends on them before XLA's passes (``bitcast`` is refused).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ...hlo import (Instruction, Module, Opcode, Shape, Signature, TensorSpec, XlacError)
from ...hlo.text import parse_module
from ..xla import refused_call
from .dialect import SUPPORTED_FOREIGN, XlaDialect

MAGIC = b"HloModule"
COMPLEX_BOUNDARY = ("the program takes or returns complex numbers: xlac compiles programs "
                    "whose inputs and outputs are real (return jnp.real(z) and jnp.imag(z))")
# How StableHLO's MLIR module opens (after any #loc aliases), custom or generic form.
MLIR_HEAD = re.compile(rb'^\s*(?:#loc.*\n\s*)*(?:module\b|"builtin\.module")')
# Ops XLA has and we do not, with what usually makes JAX write them.
REFUSED = {
    "rng": "lax.rng_uniform",
    "all-reduce": "a collective", "all-gather": "a collective", "all-to-all": "a collective",
    "reduce-scatter": "a collective", "collective-permute": "a collective",
    "partition-id": "SPMD partitioning", "replica-id": "replication",
    "infeed": "host I/O", "outfeed": "host I/O", "send": "host I/O", "recv": "host I/O",
    "after-all": "token ordering of side effects",
}
# An instruction line's opcode: the first word followed by '(' after the '='.
_OPCODE_OF_LINE = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\((.*)$", re.M)
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_DEVICES = re.compile(r"\b(num_partitions|replica_count)=(\d+)")
# Dimensions our shapes do not have: bounded dynamic ones (f32[<=8]).
_DYNAMIC = re.compile(r"\[[\d,]*<=")
_LAYOUT = re.compile(r"entry_computation_layout=\{(.*)\}")
_ENTRY = re.compile(r"^ENTRY\b.*?^\}", re.M | re.S)
# The shape of an entry parameter or of its ROOT: what the caller sees.
_BOUNDARY = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(\(.*?\)|\w+\[[^\]]*\])\s*"
                       r"(?:\{[\d,]*\}\s*)?(parameter\(|[a-z][\w\-]*\()", re.M)
_COMPLEX = re.compile(r"\bc(64|128)\[")


def is_hlo_text(model) -> bool:
    """Whether ``model`` (a path or bytes) is XLA's text: HLO (it opens with
    ``HloModule``) or StableHLO (an MLIR module, which ``import_stablehlo`` reads)."""
    head = read_head(model)
    return head.lstrip().startswith(MAGIC) or MLIR_HEAD.match(head) is not None


def read_head(model) -> bytes:
    """The first 4 KiB of ``model`` (a path or bytes), or nothing."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model[:4096])
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        with open(model, "rb") as f:
            return f.read(4096)
    return b""


def import_hlo(model, name: str | None = None) -> Module:
    """Lower HLO text (a path, or the bytes of one) to our Module."""
    text = read_text(model, "HLO text")
    check_supported(text)
    module = parse_module(text, XlaDialect())
    _drop_uncalled(module)
    _default_layouts(module)
    flatten_root(module)
    module.signature = _signature(module.entry)
    if name is not None:
        module.name = name
    return module


def read_text(model, what: str) -> str:
    """The text of ``model``, a path or bytes (XLA's text forms, ``what`` for messages)."""
    try:
        data = bytes(model) if isinstance(model, (bytes, bytearray)) else Path(model).read_bytes()
        return data.decode()
    except (OSError, UnicodeDecodeError) as e:
        raise XlacError(f"cannot read {what} '{model}': {getattr(e, 'strerror', None) or e}"
                        ) from None


def check_supported(text: str) -> None:
    """Refuse text we do not read (StableHLO, XLA's optimized HLO, several devices,
    complex numbers at its boundary, dynamic dimensions, elided constants), and, in one
    message, every op it uses that we cannot compile."""
    _check_form(text)
    _check_ops(text)
    _check_types(text)


def _check_form(text: str) -> None:
    if MLIR_HEAD.match(text[:4096].encode()):
        raise XlacError("this is StableHLO (MLIR text): import it with import_stablehlo")
    header = text.lstrip().partition("\n")[0]
    if "is_scheduled=true" in header:
        raise XlacError("this is HLO after XLA's optimizations (compiled.as_text()); give "
                        "the HLO before them: lowered.as_text(dialect='hlo')")
    for key, count in _DEVICES.findall(header):
        if int(count) > 1:
            raise XlacError(f"the program runs on several devices ({key}={count}); xlac "
                            "compiles single-device programs")
    if "constant({...})" in text:
        raise XlacError("the HLO text leaves large constants out ({...}): print it with "
                        "as_hlo_text(print_large_constants=True) or "
                        "lowered.as_text(dialect='hlo')")


def _check_ops(text: str) -> None:
    ours = {op.text for op in Opcode} | SUPPORTED_FOREIGN
    missing: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    for m in _OPCODE_OF_LINE.finditer(text):
        op = m.group(2)
        if op == "custom-call":
            target = _TARGET.search(m.group(3))
            why = refused_call(target.group(1)) if target else "no custom_call_target"
            if why is not None:
                missing.setdefault(f"custom-call {target.group(1) if target else '?'}",
                                   []).append(m.group(1))
                reasons[f"custom-call {target.group(1) if target else '?'}"] = why
        elif op not in ours:
            missing.setdefault(op, []).append(m.group(1))
    if missing:
        parts = [f"{op} at %{', %'.join(names)} "
                 f"({reasons.get(op) or REFUSED.get(op, 'not in the opcode table')})"
                 for op, names in missing.items()]
        raise XlacError("unsupported XLA ops: " + "; ".join(parts))


def _check_types(text: str) -> None:
    if _DYNAMIC.search(text):
        raise XlacError("the program uses dynamic dimensions (f32[<=N]); xlac does not "
                        "compile them: shapes are static")
    layout = _LAYOUT.search(text.lstrip().partition("\n")[0])
    entry = _ENTRY.search(text)
    boundary = [m.group(1) for m in _BOUNDARY.finditer(entry.group(0) if entry else "")
                if m.group(2) == "parameter(" or m.group(0).lstrip().startswith("ROOT")]
    if _COMPLEX.search(layout.group(1) if layout else "") or any(
            _COMPLEX.search(shape) for shape in boundary):
        raise XlacError(COMPLEX_BOUNDARY)


def _drop_uncalled(module: Module) -> None:
    keep: set[int] = set()
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        if id(comp) not in keep:
            keep.add(id(comp))
            stack += [c for i in comp.instructions for c in i.called]
    for comp in list(module.computations):
        if id(comp) not in keep:
            module.remove_computation(comp)


def _default_layouts(module: Module) -> None:
    for comp in module.computations:
        for i in comp.instructions:
            if i.opcode is Opcode.BITCAST:
                raise XlacError(f"bitcast %{i.name}: its meaning depends on XLA's layouts; "
                                "give the HLO before XLA's optimizations (jax's lower())")
            i.shape = _row_major(i.shape)


def _row_major(shape: Shape) -> Shape:
    if shape.is_tuple:
        return Shape.tuple_([_row_major(s) for s in shape.tuple_shapes])
    return Shape.array(shape.dtype, shape.dims)


def flatten_root(module: Module) -> None:
    """A root that is a tuple of one becomes that value; any other tuple-shaped root
    that is not a tuple op becomes one, so that each output is a value of its own."""
    entry = module.entry
    root = entry.root
    if not root.shape.is_tuple:
        return
    if any(s.is_tuple for s in root.shape.tuple_shapes):
        raise XlacError(f"the entry's result {root.shape} nests tuples; xlac returns a "
                        "flat list of arrays")
    if root.opcode is not Opcode.TUPLE:
        parts = [entry.add(Instruction(Opcode.GET_TUPLE_ELEMENT, s, [root], {"index": k}))
                 for k, s in enumerate(root.shape.tuple_shapes)]
        root = entry.add(Instruction(Opcode.TUPLE, root.shape, parts))
    entry.root = root.operands[0] if len(root.operands) == 1 else root


def _signature(entry) -> Signature:
    names: list[str] = []
    for p in entry.parameters:
        if p.shape.is_tuple:
            raise XlacError(f"entry parameter %{p.name} is a tuple {p.shape}; xlac takes "
                            "arrays (JAX passes one parameter per array)")
        # JAX names a pytree leaf by its path: p['w'] -> p__w__.1 -> p_w
        base = re.sub(r"_+", "_", re.sub(r"\.\d+$", "", p.name)).rstrip("_")
        ok = re.fullmatch(r"[A-Za-z_]\w*", base) and base not in names
        names.append(base if ok else f"arg{p.number}")
    inputs = [TensorSpec(n, p.shape.dtype, p.shape.dims)
              for n, p in zip(names, entry.parameters)]
    outputs = [TensorSpec(f"out{k}", o.shape.dtype, o.shape.dims)
               for k, o in enumerate(entry.outputs)]
    return Signature(inputs, outputs)

"""StableHLO as MLIR text (``jax.jit(f).lower(x).as_text()``) -> our Module.

The parser (mlir.py) reads every op into MLIR's generic form; lowering.py runs the
entry function, inlining calls and turning regions into called computations; ops.py
and chlo.py hold one rule per op. Ops without a rule are refused before lowering,
all in one message, as the HLO importer does.
"""
from __future__ import annotations

import re

from ...hlo import Module, Signature, TensorSpec, XlacError
from ..hlo.importer import MLIR_HEAD, flatten_root, read_head, read_text
from ..xla import refused_call
from .chlo import CHLO_RULES
from .complex import is_complex_op, lower_complex
from .lowering import lower_module
from .mlir import MlirModule, Operation, parse
from .ops import RULES

ALL_RULES = {**RULES, **CHLO_RULES}
_RETURNS = frozenset({"return", "func.return", "stablehlo.return"})
# Ops StableHLO has and we do not, with what usually makes JAX write them.
REFUSED = {
    "stablehlo.rng": "lax.rng_uniform",
    **{f"stablehlo.{c}": "a collective" for c in (
        "all_reduce", "all_gather", "all_to_all", "reduce_scatter", "collective_permute",
        "collective_broadcast")},
    "stablehlo.partition_id": "SPMD partitioning", "stablehlo.replica_id": "replication",
    **{f"stablehlo.{c}": "host I/O" for c in ("infeed", "outfeed", "send", "recv")},
    "stablehlo.after_all": "token ordering of side effects",
}


def is_stablehlo_text(model) -> bool:
    """Whether ``model`` (a path or bytes) is an MLIR module."""
    return MLIR_HEAD.match(read_head(model)) is not None


def import_stablehlo(model, name: str | None = None) -> Module:
    """Lower StableHLO text (a path, or the bytes of one) to our Module."""
    mlir = parse(read_text(model, "StableHLO text"))
    _check_devices(mlir)
    _check_ops(mlir)
    module = lower_module(mlir, ALL_RULES, name or "main", (is_complex_op, lower_complex))
    flatten_root(module)
    module.signature = _signature(module, mlir)
    return module


def _check_devices(mlir: MlirModule) -> None:
    for key in ("mhlo.num_partitions", "mhlo.num_replicas"):
        count = mlir.attributes.get(key, 1)
        if isinstance(count, int) and count > 1:
            raise XlacError(f"the program runs on several devices ({key} = {count}); xlac "
                            "compiles single-device programs")


def _operations(ops: list[Operation]):
    for op in ops:
        yield op
        for block in op.regions:
            yield from _operations(block.operations)


def _check_ops(mlir: MlirModule) -> None:
    missing: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    for fn in mlir.functions.values():
        for op in _operations(fn.body.operations):
            target = op.attributes.get("call_target_name", "?")
            why = refused_call(target) if op.name == "stablehlo.custom_call" else None
            if why is not None:
                what = f"{op.name} {target}"
                reasons[what] = why
            elif op.name in ALL_RULES or op.name in _RETURNS:
                continue
            else:
                what = op.name
            missing.setdefault(what, []).append(f"line {op.line}")
    if missing:
        parts = [f"{op} at {', '.join(lines)} "
                 f"({reasons.get(op) or REFUSED.get(op, 'not supported by xlac')})"
                 for op, lines in missing.items()]
        raise XlacError("unsupported StableHLO ops: " + "; ".join(parts))


def _signature(module: Module, mlir: MlirModule) -> Signature:
    """Inputs named as JAX's debug info names them (``loc("x")``, ``jax.arg_info``:
    ``as_text(debug_info=True)``), else arg0, arg1, ..."""
    main = mlir.functions.get("main") or next(
        f for f in mlir.functions.values() if f.visibility == "public")
    names: list[str] = []
    attributes = list(main.argument_attributes) + [{}] * len(main.body.arguments)
    for k, attrs in enumerate(attributes[:len(main.body.arguments)]):
        info = attrs.get("jax.arg_info", attrs.get("_loc"))
        base = re.sub(r"_+", "_", re.sub(r"\W", "_", info)).strip("_") if isinstance(
            info, str) else ""
        ok = re.fullmatch(r"[A-Za-z_]\w*", base) and base not in names
        names.append(base if ok else f"arg{k}")
    entry = module.entry
    inputs = [TensorSpec(n, p.shape.dtype, p.shape.dims)
              for n, p in zip(names, entry.parameters)]
    outputs = [TensorSpec(f"out{k}", o.shape.dtype, o.shape.dims)
               for k, o in enumerate(entry.outputs)]
    return Signature(inputs, outputs)

"""Bounded batch (``--bound SYMBOL=LIMIT``): one object for every batch of 1 to LIMIT.

Every input's leading dimension is SYMBOL: the model's own ``dim_param``, or a name
written in ``--input-shape`` (``x=Nx3x224x224``). The model is imported at two samples
and proved batch-separable (optimizer/batch_dims.py: each output sample depends on its
own input sample alone), and the one-sample import must hold the same constants as the
two-sample one (a graph that computes with the batch size itself, ``x / Shape(x)[0]``,
differs there). Then the one-sample module is compiled, and the object runs it once per
sample (emitter/entry.py): the time grows with the real batch, not the bound, and the
arena is one sample's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx

from .hlo import Module, Opcode, XlacError
from .importers.onnx.model_file import graph_inputs
from .optimizer.batch_dims import check_batch_separable
from .optimizer.dce import DeadCodeElimination

_SYMBOL = r"[A-Za-z_][A-Za-z0-9_]*"
_WHY = "--bound applies to a leading batch dimension"


def parse_bound(text: str) -> tuple[str, int]:
    """``"N=8"`` -> ``("N", 8)``."""
    m = re.fullmatch(rf"({_SYMBOL})=(\d+)", text)
    if m is None or int(m.group(2)) < 1:
        raise XlacError(f"bad --bound '{text}': expected SYMBOL=LIMIT with LIMIT >= 1, "
                        "e.g. --bound N=8 (N: the batch dimension's name in the model or "
                        "in --input-shape)")
    return m.group(1), int(m.group(2))


def bounds_from(specs: list[str]) -> dict[str, int]:
    """``["N=8"]`` (repeated ``--bound``) -> ``{"N": 8}``."""
    out: dict[str, int] = {}
    for spec in specs:
        symbol, limit = parse_bound(spec)
        if symbol in out:
            raise XlacError(f"--bound {symbol} is given twice")
        out[symbol] = limit
    return out


@dataclass(frozen=True)
class BatchBound:
    symbol: str
    limit: int
    rest: dict[str, tuple[int, ...]]    # each batched input's dims after the batch
    pinned: dict                        # the other --input-shape entries, as given

    def input_shapes(self, samples: int) -> dict:
        """--input-shape for an import at ``samples``."""
        return {**self.pinned, **{n: (samples, *r) for n, r in self.rest.items()}}


def batch_bound(model: onnx.ModelProto, bounds: dict[str, int], input_shapes: dict,
                const_inputs: dict, absent_inputs) -> BatchBound:
    """Which inputs the bound's symbol leads, from --input-shape or the model's dims;
    one-line errors where it is not every input's leading dimension alone."""
    if len(bounds) != 1:
        raise XlacError(f"one --bound per model, on its batch dimension; got "
                        f"{', '.join(sorted(bounds))}")
    (symbol, limit), = bounds.items()
    left_out = set(const_inputs) | set(absent_inputs or ())
    rest, pinned = {}, {}
    for vi in graph_inputs(model.graph):
        name = vi.name
        if name in left_out:
            continue
        if name in input_shapes:
            dims = input_shapes[name]
            if isinstance(dims, list):
                raise XlacError(f"{_WHY}: input '{name}' is a sequence")
        else:
            if not vi.type.HasField("tensor_type"):
                raise XlacError(f"{_WHY}: input '{name}' is not a tensor")
            dims = tuple(d.dim_value if d.HasField("dim_value") else
                         d.dim_param if d.HasField("dim_param") else None
                         for d in vi.type.tensor_type.shape.dim)
        shown = "x".join(str(d) if d is not None else "?" for d in dims)
        if not dims or dims[0] != symbol:
            raise XlacError(f"{_WHY}: input '{name}' ({shown}) does not lead with "
                            f"{symbol}; every input's first dimension must be the batch "
                            f"(e.g. --input-shape {name}={symbol}x...)")
        for d in dims[1:]:
            if not isinstance(d, int):
                what = f"{symbol} again" if d == symbol else f"the dynamic dimension {d or '?'}"
                raise XlacError(f"{_WHY}: input '{name}' ({shown}) has {what} after the "
                                f"batch; pin it with --input-shape {name}={symbol}x...")
        rest[name] = tuple(dims[1:])
    for name, dims in input_shapes.items():
        if name not in rest:
            pinned[name] = dims
    return BatchBound(symbol, limit, rest, pinned)


def check_separable(one: Module, two: Module) -> None:
    """Raise XlacError unless ``two`` (imported at two samples) keeps samples apart and
    ``one`` (at one sample) computes with the same constants. Both lose their dead
    code first: a Shape that only gives a Reshape its target leaves a dead constant."""
    for m in (one, two):
        DeadCodeElimination().run(m)
    check_batch_separable(two, 2)
    a, b = _constants(one), _constants(two)
    if len(a) != len(b):
        raise XlacError("bounded batch: the model's graph differs between batches of 1 and "
                        "2 samples; compile one object per batch size (--input-shape)")
    for x, y in zip(a, b):
        same = (x.literal.shape == y.literal.shape
                and np.array_equal(x.literal, y.literal, equal_nan=x.literal.dtype.kind == "f")
                ) or (_splat(x.literal) is not None and _splat(x.literal) == _splat(y.literal))
        if not same:
            where = f" (ONNX node {y.metadata})" if y.metadata else ""
            raise XlacError(f"bounded batch: constant '{y.name}'{where} differs between "
                            "batches of 1 and 2 samples: the model computes with the batch "
                            "size; compile one object per batch size (--input-shape)")


def _constants(module: Module) -> list:
    return [i for c in module.computations for i in c.instructions
            if i.opcode is Opcode.CONSTANT]


def _splat(literal: np.ndarray):
    """The one value every element holds, else None."""
    flat = literal.reshape(-1)
    if flat.size == 0 or not np.all(flat == flat[0]):
        return None
    return flat[0].item()

"""The model's C interface: NAME and each input / output with its C identifier.

Built once per emission so the header, the NAME_info descriptor and the typed entry
point agree on names, order and sizes. The ports are flat tensors; ``input_values`` and
``output_values`` say which ports make which input or output of the source model (a
sequence one port per element, named NAME_0, NAME_1, ... in C; an optional compiled
empty none).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..hlo import DType, Module, Signature, TensorSpec, ValueSpec, XlacError
from .names import unique_c_identifiers


@dataclass(frozen=True)
class Port:
    name: str            # name in the source model
    c_name: str          # C identifier (NAME_run parameter)
    dtype: DType
    dims: tuple[int, ...]
    quantization: tuple[float, int] | None = None   # (scale, zero point): int8_io

    @property
    def count(self) -> int:
        return prod(self.dims)

    @property
    def size_bytes(self) -> int:
        return self.count * self.dtype.itemsize


@dataclass(frozen=True)
class Bound:
    """A leading batch dimension of every input and output: NAME_run takes its size,
    1 to ``limit``, and runs the one-sample code once per sample (entry.py)."""
    symbol: str          # the dimension's name (--bound SYMBOL=LIMIT)
    c_name: str          # its C identifier: NAME_run's size parameter, NAME_BOUND_<c_name>
    limit: int


@dataclass(frozen=True)
class ModelInterface:
    name: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    input_values: tuple[ValueSpec, ...]
    output_values: tuple[ValueSpec, ...]
    bound: Bound | None = None    # the ports' dims are then those at the bound

    def ports_of(self, value: ValueSpec, which: str) -> tuple[Port, ...]:
        """The ports of one of ``input_values`` / ``output_values`` ("inputs" / "outputs")."""
        values = self.input_values if which == "inputs" else self.output_values
        ports = self.inputs if which == "inputs" else self.outputs
        first = sum(v.count for v in values[:values.index(value)])
        return ports[first:first + value.count]


def model_interface(module: Module, name: str,
                    bound: tuple[str, int] | None = None) -> ModelInterface:
    """Inputs and outputs from ``module.signature``, or, for modules built without one,
    from the entry parameters and outputs (named after their instructions). With
    ``bound`` (symbol, limit) ``module`` computes one sample: every port's dim 0 is 1,
    and the interface's ports hold ``limit`` samples."""
    sig = module.signature
    if sig is None:
        sig = Signature([TensorSpec(p.name, p.shape.dtype, p.shape.dims)
                          for p in module.entry.parameters],
                         [TensorSpec(o.name, o.shape.dtype, o.shape.dims)
                          for o in module.output_instructions])
    inputs, outputs = list(sig.inputs), list(sig.outputs)
    values = {w: tuple(sig.values(w)) for w in ("inputs", "outputs")}
    # A sequence's element k is NAME_k in C (its port name, "NAME[k]", is no identifier).
    bases = [f"{v.name}_{k}" if v.kind == "sequence" else v.name
             for w in ("inputs", "outputs") for v in values[w] for k in range(v.count)]
    # Inputs, outputs and a bound's size share one parameter list, so their C names are
    # unique together.
    c_names = unique_c_identifiers(bases + ([bound[0]] if bound is not None else []))
    ports = [Port(t.name, c, t.dtype, tuple(t.dims), t.quantization)
             for t, c in zip(inputs + outputs, c_names)]
    batch = None
    if bound is not None:
        symbol, limit = bound
        for p in ports:
            if not p.dims or p.dims[0] != 1:
                raise XlacError(f"bounded batch: '{p.name}' has no leading dimension of one "
                                "sample")
        ports = [Port(p.name, p.c_name, p.dtype, (limit,) + p.dims[1:], p.quantization)
                 for p in ports]
        batch = Bound(symbol, c_names[-1], limit)
    return ModelInterface(name, tuple(ports[:len(inputs)]), tuple(ports[len(inputs):]),
                          values["inputs"], values["outputs"], batch)


"""The model's C interface: NAME and each input / output with its C identifier.

Built once per emission so the header, the NAME_info descriptor and the typed entry
point agree on names, order and sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..hlo import DType, Module, TensorSpec
from .names import unique_c_identifiers


@dataclass(frozen=True)
class Port:
    name: str            # name in the source model
    c_name: str          # C identifier (NAME_run parameter)
    dtype: DType
    dims: tuple[int, ...]

    @property
    def count(self) -> int:
        return prod(self.dims)

    @property
    def size_bytes(self) -> int:
        return self.count * self.dtype.itemsize


@dataclass(frozen=True)
class ModelInterface:
    name: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]


def model_interface(module: Module, name: str) -> ModelInterface:
    """Inputs and outputs from ``module.signature``, or, for modules built without one,
    from the entry parameters and outputs (named after their instructions)."""
    sig = module.signature
    if sig is not None:
        inputs, outputs = list(sig.inputs), list(sig.outputs)
    else:
        inputs = [TensorSpec(p.name, p.shape.dtype, p.shape.dims)
                  for p in module.entry.parameters]
        outputs = [TensorSpec(o.name, o.shape.dtype, o.shape.dims)
                   for o in module.output_instructions]
    # Inputs and outputs share one parameter list, so their C names are unique together.
    c_names = unique_c_identifiers([t.name for t in inputs + outputs])
    ports = [Port(t.name, c, t.dtype, tuple(t.dims)) for t, c in zip(inputs + outputs, c_names)]
    return ModelInterface(name, tuple(ports[:len(inputs)]), tuple(ports[len(inputs):]))


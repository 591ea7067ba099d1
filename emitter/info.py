"""``NAME_info``: the ``xlac_model_info`` descriptor of runtime_c/xlac_runtime.h as a
read-only global. LLVM lays the structs (abi.py) out with the target's data layout, which
is the C ABI layout of the same fields (pointer size and i64 alignment included).
"""
from __future__ import annotations

from llvmlite import ir

from ..hlo import ValueSpec
from .abi import MODEL_INFO, TENSOR_INFO, VALUE_INFO, XLAC_DTYPE, XLAC_VALUE_KIND
from .interface import ModelInterface, Port
from .irutil import I32, I64, I8, PTR
from .target import TargetInfo


class _Strings:
    """NUL-terminated private string globals, one per distinct text."""

    def __init__(self, llvm_module: ir.Module, prefix: str):
        self._module, self._prefix, self._made = llvm_module, prefix, {}

    def __call__(self, text: str) -> ir.GlobalVariable:
        if text not in self._made:
            data = bytearray(text.encode("utf-8") + b"\0")
            self._made[text] = _private_constant(self._module, f"{self._prefix}str",
                                                 ir.Constant(ir.ArrayType(I8, len(data)), data))
        return self._made[text]


def _private_constant(llvm_module: ir.Module, name: str, init: ir.Constant) -> ir.GlobalVariable:
    g = ir.GlobalVariable(llvm_module, init.type, llvm_module.get_unique_name(name))
    g.linkage = "private"
    g.unnamed_addr = True
    g.global_constant = True
    g.initializer = init
    return g


def _tensor_infos(llvm_module, strings, ports: tuple[Port, ...], prefix: str):
    entries = []
    for p in ports:
        dims_ty = ir.ArrayType(I64, len(p.dims))
        dims = _private_constant(llvm_module, f"{prefix}dims", ir.Constant(dims_ty, list(p.dims)))
        entries.append(ir.Constant(TENSOR_INFO, [
            strings(p.name), strings(p.c_name), ir.Constant(I32, XLAC_DTYPE[p.dtype]),
            ir.Constant(I32, len(p.dims)), dims, ir.Constant(I64, p.size_bytes)]))
    if not entries:
        return ir.Constant(PTR, None)
    array = ir.Constant(ir.ArrayType(TENSOR_INFO, len(entries)), entries)
    return _private_constant(llvm_module, f"{prefix}tensors", array)


def _value_infos(llvm_module, strings, values: tuple[ValueSpec, ...], prefix: str):
    entries, first = [], 0
    for v in values:
        entries.append(ir.Constant(VALUE_INFO, [
            strings(v.name), ir.Constant(I32, XLAC_VALUE_KIND[v.kind]),
            ir.Constant(I32, int(v.optional)), ir.Constant(I32, first),
            ir.Constant(I32, v.count)]))
        first += v.count
    if not entries:
        return ir.Constant(PTR, None)
    array = ir.Constant(ir.ArrayType(VALUE_INFO, len(entries)), entries)
    return _private_constant(llvm_module, f"{prefix}values", array)


def emit_model_info(llvm_module: ir.Module, interface: ModelInterface, target: TargetInfo,
                    arena_size: int, arena_align: int) -> ir.GlobalVariable:
    """Define the exported constant ``NAME_info``."""
    prefix = f"{interface.name}_info."
    strings = _Strings(llvm_module, prefix)
    init = ir.Constant(MODEL_INFO, [
        strings(interface.name), strings(target.triple), strings(target.cpu),
        strings(target.features), ir.Constant(I64, arena_size), ir.Constant(I64, arena_align),
        ir.Constant(I32, len(interface.inputs)), ir.Constant(I32, len(interface.outputs)),
        _tensor_infos(llvm_module, strings, interface.inputs, prefix),
        _tensor_infos(llvm_module, strings, interface.outputs, prefix),
        ir.Constant(I32, len(interface.input_values)),
        ir.Constant(I32, len(interface.output_values)),
        _value_infos(llvm_module, strings, interface.input_values, prefix),
        _value_infos(llvm_module, strings, interface.output_values, prefix),
    ])
    g = ir.GlobalVariable(llvm_module, MODEL_INFO, f"{interface.name}_info")
    g.global_constant = True
    g.initializer = init
    return g

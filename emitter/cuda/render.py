"""The CUDA renderer: device kernels (PTX, and a cubin where ptxas is installed), and a
host object that holds them with the weights and the program, and the C header.

    artifact = render_cuda(backend, module, assignment, EmitOptions("mnist"))

The steps (emitter/steps.py) become kernels and a program (program.py); the host
object's entries NAME_cuda_init, NAME_run_device, NAME_run_cuda and NAME_cuda_release
hand that program to runtime_c/xlac_cuda.c, which runs it through the driver loaded
at run time. With ``backend.emulated`` the kernels are compiled for the host instead,
into a shared object a stand-in driver runs (tests/cuda), from the same IR.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir

from ...hlo import Module, XlacError
from ...optimizer.buffer_assignment import BufferAssignment
from ..abi import struct_type
from ..constants import ConstantPool, _ByteString
from ..elf import ElfObject
from ..info import emit_model_info
from ..interface import model_interface
from ..irutil import I32, I64, I8, PTR, VOID
from ..limits import check_fits
from ..render import KINDS, Artifact, EmitOptions, weights_section
from ..steps import build_steps
from ..target import emit_assembly, emit_object, optimize_ir
from .header import render_cuda_header
from .kernels import EmulationHooks, NvptxHooks, WeightsBlob
from .program import DEVICE_ALIGN, Program, build_program
from .ptxas import assemble, compute_capability, driver_version_for, find_ptxas


def render_cuda(backend, module: Module, assignment: BufferAssignment, options: EmitOptions,
                kinds=("obj",)) -> Artifact:
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise XlacError(f"unknown output kind(s) {sorted(unknown)}; choose from {list(KINDS)}")
    if options.parallel or options.profile:
        raise XlacError("the CUDA target has no NAME_run_parallel or profile counters: "
                        "compile it without parallel and profile",
                        cli="--target cuda takes neither --parallel nor --profile")
    host = backend.target
    interface = model_interface(module, options.name)
    check_fits(module, assignment, interface, host)
    steps = build_steps(module, assignment, backend)
    blob = WeightsBlob()
    arch = backend.device.cpu
    device_ir, program = _device_module(backend.device, NvptxHooks(), steps, assignment, blob,
                                        options.name)
    ptx = _ptx(backend, device_ir)
    if backend.emulated:
        # The same kernels for the host, for a stand-in driver; the PTX stays beside them.
        host_ir, _ = _device_module(host, EmulationHooks(), steps, assignment, blob,
                                    options.name)
        image = _host_image(backend, host_ir)
    else:
        ptxas = find_ptxas()
        image = assemble(ptx, arch, ptxas)[0] if ptxas is not None else None

    section = weights_section(options.name, host)
    with tempfile.TemporaryDirectory(prefix="xlac-") as tmp:
        use_incbin = set(kinds) == {"obj"} and host.is_host and "linux" in host.triple
        llvm_module = ir.Module(name=options.name)
        llvm_module.triple = host.triple
        llvm_module.data_layout = host.data_layout
        constants = ConstantPool(llvm_module, f"{options.name}.",
                                 Path(tmp) if use_incbin else None, section)
        prog = _program_global(llvm_module, options.name, program, ptx, image,
                               blob.data(), constants, assignment, interface,
                               compute_capability(arch), driver_version_for(ptx))
        _entries(llvm_module, options.name, prog)
        emit_model_info(llvm_module, interface, host, assignment.arena_size, DEVICE_ALIGN)
        parsed = None
        if kinds:
            parsed = llvm.parse_assembly(f"{llvm_module}\n{constants.module_asm()}")
            parsed.verify()
            optimize_ir(parsed, backend.machine, backend.opt_level)
        object_code = assembly = None
        footprint = None
        if "obj" in kinds:
            object_code, _ = emit_object(backend.machine, parsed)
            if host.is_elf:      # the host object's flash: weights, kernels, the program
                footprint = ElfObject(object_code).footprint(section)
        if "asm" in kinds:
            # The device code is what --emit asm is read for; the host part is a table.
            assembly = ptx
    symbols = ("dlclose", "dlopen", "dlsym", "getenv", "memset", "strlen")
    return Artifact(
        llvm_ir=str(parsed) if "llvm" in kinds else None,
        object_code=object_code,
        assembly=assembly,
        header=render_cuda_header(interface, host, backend.device, assignment.arena_size,
                                  len(blob.data()), len(program.kernels),
                                  "emulated" if backend.emulated else
                                  "cubin" if image is not None else "ptx"),
        target=host,
        footprint=footprint,
        symbols=symbols,
        device_code=ptx,
        launches=tuple(zip(program.kernels, program.kernel_params)),
    )


def _device_module(target, hooks, steps, assignment, blob, name: str):
    llvm_module = ir.Module(name=f"{name}.device")
    llvm_module.triple = target.triple
    llvm_module.data_layout = target.data_layout
    program = build_program(steps, assignment, llvm_module, hooks, blob, f"{name}_")
    return llvm_module, program


def _ptx(backend, device_ir: ir.Module) -> str:
    parsed = llvm.parse_assembly(str(device_ir))
    parsed.verify()
    optimize_ir(parsed, backend.device_machine, backend.opt_level)
    return emit_assembly(backend.device_machine, parsed)[0]


def _host_image(backend, host_ir: ir.Module) -> bytes:
    """The kernels compiled for this machine, as a shared object (the emulation)."""
    parsed = llvm.parse_assembly(str(host_ir))
    parsed.verify()
    optimize_ir(parsed, backend.machine, backend.opt_level)
    return _shared_object(emit_object(backend.machine, parsed)[0])


def _shared_object(obj: bytes) -> bytes:
    with tempfile.TemporaryDirectory(prefix="xlac-emu-") as tmp:
        o, so = Path(tmp) / "kernels.o", Path(tmp) / "kernels.so"
        o.write_bytes(obj)
        cmd = [os.environ.get("CC", "cc"), "-shared", "-o", str(so), str(o)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise XlacError(f"linking the emulated kernels failed: {done.stderr.strip()}")
        return so.read_bytes()


def _bytes_global(llvm_module: ir.Module, name: str, data: bytes) -> ir.GlobalVariable:
    g = ir.GlobalVariable(llvm_module, ir.ArrayType(I8, len(data)), name)
    g.linkage = "private"
    g.global_constant = True
    g.align = DEVICE_ALIGN
    g.initializer = _ByteString(data)
    return g


def _array_global(llvm_module: ir.Module, name: str, ty: ir.Type, values: list):
    if not values:
        return ir.Constant(PTR, None)
    arr = ir.ArrayType(ty, len(values))
    g = ir.GlobalVariable(llvm_module, arr, name)
    g.linkage = "private"
    g.global_constant = True
    g.initializer = ir.Constant(arr, values)
    return g


def _program_global(llvm_module, name: str, program: Program, ptx: str, image, weights: bytes,
                    constants: ConstantPool, assignment, interface, compute: int,
                    driver: int) -> ir.GlobalVariable:
    step_ty, range_ty, arg_ty = (struct_type(f"xlac_cuda_{t}") for t in ("step", "range", "arg"))
    steps = [ir.Constant(step_ty, [ir.Constant(I32, s.op), ir.Constant(I32, s.a),
                                   ir.Constant(I32, s.b), ir.Constant(I32, s.c),
                                   ir.Constant(I32, s.d), ir.Constant(I32, s.e),
                                   ir.Constant(I64, s.bytes)]) for s in program.steps]
    ranges = [ir.Constant(range_ty, [ir.Constant(I32, f), ir.Constant(I32, n)])
              for f, n in program.ranges]
    args = [ir.Constant(arg_ty, [ir.Constant(I32, a.space), ir.Constant(I32, a.index),
                                 ir.Constant(I64, a.offset)]) for a in program.args]
    names = b"".join(k.encode() + b"\0" for k in program.kernels)
    fields = [
        _bytes_global(llvm_module, f"{name}.cuda_name", name.encode() + b"\0"),
        _bytes_global(llvm_module, f"{name}.cuda_image", image) if image else ir.Constant(PTR, None),
        _bytes_global(llvm_module, f"{name}.cuda_ptx", ptx.encode() + b"\0"),
        ir.Constant(I32, compute), ir.Constant(I32, driver),
        ir.Constant(I32, len(program.kernels)), ir.Constant(I32, len(program.args)),
        _bytes_global(llvm_module, f"{name}.cuda_kernels", names or b"\0"),
        _array_global(llvm_module, f"{name}.cuda_steps", step_ty, steps),
        _array_global(llvm_module, f"{name}.cuda_ranges", range_ty, ranges),
        _array_global(llvm_module, f"{name}.cuda_args", arg_ty, args),
        constants.global_for_bytes(weights) if weights else ir.Constant(PTR, None),
        ir.Constant(I64, len(weights)), ir.Constant(I64, assignment.arena_size),
        ir.Constant(I32, len(interface.inputs)), ir.Constant(I32, len(interface.outputs)),
        _array_global(llvm_module, f"{name}.cuda_input_bytes", I64,
                      [ir.Constant(I64, p.size_bytes) for p in interface.inputs]),
        _array_global(llvm_module, f"{name}.cuda_output_bytes", I64,
                      [ir.Constant(I64, p.size_bytes) for p in interface.outputs]),
    ]
    ty = struct_type("xlac_cuda_program")
    g = ir.GlobalVariable(llvm_module, ty, f"{name}.cuda_program")
    g.linkage = "private"
    g.global_constant = True
    g.initializer = ir.Constant(ty, fields)
    return g


def _entries(llvm_module: ir.Module, name: str, program: ir.GlobalVariable) -> None:
    """NAME_cuda_init, NAME_run_device, NAME_run_cuda and NAME_cuda_release: each calls
    its xlac_cuda.c function with the model's program."""
    def runtime(fn_name, ret, params):
        return ir.Function(llvm_module, ir.FunctionType(ret, params), fn_name)

    init = runtime("xlac_cuda_init", I32, [PTR, PTR, I32])
    run_device = runtime("xlac_cuda_run_device", I32, [PTR, PTR, PTR, PTR, I64, PTR])
    run_host = runtime("xlac_cuda_run_host", I32, [PTR, PTR, PTR, PTR])
    release = runtime("xlac_cuda_release", VOID, [PTR])
    size_t = ir.IntType(64)       # the host object's: 64-bit Linux and macOS
    ctx_size = runtime("xlac_cuda_ctx_size", size_t, [PTR])
    for entry, params, callee, ret in (
            ("cuda_init", [PTR, I32], init, I32),
            ("run_device", [PTR, PTR, PTR, I64, PTR], run_device, I32),
            ("run_cuda", [PTR, PTR, PTR], run_host, I32),
            ("cuda_release", [PTR], release, VOID),
            ("cuda_ctx_size", [], ctx_size, size_t)):
        fn = ir.Function(llvm_module, ir.FunctionType(ret, params), f"{name}_{entry}")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = list(fn.args)
        if callee is ctx_size:
            call_args = [program]
        elif callee is release:
            call_args = args
        else:
            call_args = [args[0], program] + args[1:]
        result = b.call(callee, call_args)
        if ret is VOID:
            b.ret_void()
        else:
            b.ret(result)

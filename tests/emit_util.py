"""Compile HLO modules to a loadable shared library and call them (tests only).

    models = compile_modules({"add": module}, tmp_path)
    y, = models["add"](x)

The objects come from the CPU backend (``emit_module``) for the host, are linked with the C
runtime by the system compiler (``cc -shared``) and called through cffi's ABI
mode (``NAME_run_v``), with a fresh 64-byte-aligned arena per call.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cffi
import numpy as np

import xlac.runtime_c
from xlac.backends import make_backend
from xlac.emitter import EmitOptions
from xlac.hlo import Module
from xlac.optimizer import assign_buffers

RUNTIME_DIR = Path(os.path.dirname(xlac.runtime_c.__file__))


class CompiledModel:
    def __init__(self, ffi, lib, name: str, module: Module, assignment, artifact):
        self.ffi, self.lib, self.name = ffi, lib, name
        self.module, self.assignment, self.artifact = module, assignment, artifact
        self.run_v = getattr(lib, f"{name}_run_v")
        self.input_shapes = [p.shape for p in module.entry.parameters]
        self.output_shapes = [o.shape for o in module.output_instructions]

    def arena(self) -> tuple[np.ndarray, object]:
        """A zeroed arena buffer (kept alive by the caller) and its aligned pointer."""
        size, align = self.assignment.arena_size, self.assignment.alignment
        buf = np.zeros(size + align, dtype=np.uint8)
        skip = (-buf.ctypes.data) % align
        return buf, self.ffi.cast("void *", buf.ctypes.data + skip)

    def call(self, inputs, arena_ptr=None) -> tuple[int, list[np.ndarray]]:
        """Run once; returns the status and the outputs."""
        ffi = self.ffi
        ins = [np.ascontiguousarray(np.asarray(a).astype(s.dtype.np, copy=False))
               for a, s in zip(inputs, self.input_shapes)]
        # Filled with a byte pattern, so an output the code never writes shows up.
        outs = [np.frombuffer(bytearray(b"\xa5" * s.byte_size), dtype=s.dtype.np).reshape(s.dims)
                for s in self.output_shapes]
        keep = None
        if arena_ptr is None:
            keep, arena_ptr = self.arena()
        in_ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in ins] or 1)
        out_ptrs = ffi.new("void *[]", [ffi.cast("void *", o.ctypes.data) for o in outs] or 1)
        status = self.run_v(in_ptrs, out_ptrs, arena_ptr)
        del keep
        return status, outs

    def __call__(self, *inputs) -> list[np.ndarray]:
        status, outs = self.call(inputs)
        assert status == 0, f"{self.name}_run_v returned {status}"
        return outs


def link_shared(objects: list[Path], out: Path) -> Path:
    """``cc -shared`` the objects with the C runtime into ``out``."""
    cmd = ["cc", "-shared", "-fPIC", "-o", str(out), *map(str, objects),
           str(RUNTIME_DIR / "xlac_runtime.c"), f"-I{RUNTIME_DIR}", "-lm"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def emit_module(module: Module, name: str | None = None, kinds=("obj",), triple=None,
                cpu=None, features=None, opt_level: int = 2, **options):
    """(Artifact, BufferAssignment) of ``module`` (already optimized, or not) for the
    target, in definition order; ``options`` are EmitOptions'."""
    backend = make_backend(triple, cpu, features, opt_level)
    assignment = assign_buffers(module, scratch=backend.scratch_bytes)
    art = backend.emit(module, assignment, EmitOptions(name or module.name, **options), kinds)
    return art, assignment


def compile_modules(modules: dict[str, Module], workdir: Path, **options) -> dict:
    """Emit each module as NAME = its key, link them all into one library, load it."""
    workdir = Path(workdir)
    built = {}
    for name, module in modules.items():
        art, assignment = emit_module(module, name, **options)
        obj = workdir / f"{name}.o"
        obj.write_bytes(art.object_code)
        (workdir / f"{name}.h").write_text(art.header)
        built[name] = (module, assignment, art, obj)
    lib_path = link_shared([b[3] for b in built.values()], workdir / "libmodels.so")
    ffi = cffi.FFI()
    ffi.cdef("\n".join(f"int {n}_run_v(void **inputs, void **outputs, void *arena);"
                       for n in built))
    lib = ffi.dlopen(str(lib_path))
    return {n: CompiledModel(ffi, lib, n, m, a, art) for n, (m, a, art, _) in built.items()}


def compile_module(module: Module, workdir: Path, name: str = "model", **options) -> CompiledModel:
    return compile_modules({name: module}, workdir, **options)[name]

"""The compile pipeline behind both ``xlac`` and ``xlac.compile``.

    import -> optimize -> plan memory (schedule + assign buffers) -> emit -> write

Every stage is timed (``Progress``). User errors surface as ``XlacError`` from
whichever stage finds them; the output files are written last, together, so a
failure anywhere leaves no output behind.
"""
from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .archive import static_library
from .backends import make_backend
from .bounds import batch_bound, check_separable, parse_bound
from .emitter import EmitOptions, build_steps, format_steps
from .emitter.names import c_identifier_for_model
from .hlo import Module, XlacError, XlacWarning
from .hlo.text import print_module
from .importers.hlo import import_hlo, is_hlo_text
from .importers.onnx import import_onnx
from .importers.stablehlo import import_stablehlo, is_stablehlo_text
from .importers.onnx.int8_boundary import int8_boundary
from .importers.onnx.prepare import read_model
from .optimizer import RowStreaming, alternatives, optimize, plan_memory
from .optimizer.exact_scheduling import DEFAULT_BUDGET
from .outputs import write_files
from .progress import Progress
from .report import build_report, op_counts

EMIT_KINDS = ("obj", "lib", "asm", "llvm", "hlo", "steps")
OPT_LEVELS = (0, 1, 2, 3)
# Rows per band of the streamed plans --memory-budget tries, the fastest first.
STREAM_BAND_ROWS = (4, 2, 1)
# NAME prefixes every exported symbol; a leading underscore would make reserved C names.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CompileResult:
    paths: tuple[Path, ...]      # the written files: the -o output, then the header
    name: str                    # NAME, the C symbol prefix
    arena_size: int              # NAME_ARENA_SIZE
    report: dict | None          # build_report's dict, when asked for

    @property
    def output(self) -> Path:
        return self.paths[0]

    @property
    def header(self) -> Path:
        return self.paths[1]


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...] | list[tuple[int, ...]]]:
    """``"x=1x3x224x224"`` -> ``("x", (1, 3, 224, 224))``; a sequence input's element
    shapes in brackets, ``"s=[2x3,4x3]"`` -> ``("s", [(2, 3), (4, 3)])`` (``"s=[]"``: empty);
    the name may itself hold '='."""
    name, eq, dims = text.rpartition("=")
    shape = r"\d+(x\d+)*"
    # A tensor's first dimension may be a name that --bound gives a limit: N x 3 x 224.
    named = re.fullmatch(rf"([A-Za-z_][A-Za-z0-9_]*?)(?:x({shape}))?", dims)
    if eq and name and named:
        rest = named.group(2)
        return name, (named.group(1), *(int(d) for d in rest.split("x"))) if rest else (
            named.group(1),)
    if not eq or not name or not re.fullmatch(rf"{shape}|\[({shape}(,{shape})*)?\]", dims):
        raise XlacError(f"bad --input-shape '{text}': expected NAME=DIMxDIMx..., "
                        "e.g. input=1x3x224x224 (or input=Nx3x224x224 with --bound N=8), or "
                        "for a sequence input one shape per element in brackets, e.g. "
                        "'seq=[2x3,4x3]'")
    if dims.startswith("["):
        return name, [tuple(int(d) for d in e.split("x")) for e in dims[1:-1].split(",") if e]
    return name, tuple(int(d) for d in dims.split("x"))


def input_shapes_from(specs: list[str]) -> dict:
    """``["x=1x64", ...]`` (repeated ``--input-shape``) -> ``{"x": (1, 64), ...}``."""
    return _per_input(specs, parse_input_shape, "--input-shape")


def const_inputs_from(specs: list[str]) -> dict:
    """``["k=k.npy", ...]`` (repeated ``--const-input``) -> ``{"k": array, ...}``."""
    return _per_input(specs, load_const_input, "--const-input")


def bounds_from(specs: list[str]) -> dict[str, int]:
    """``["N=8"]`` (repeated ``--bound``) -> ``{"N": 8}``."""
    return _per_input(specs, parse_bound, "--bound", "dimension")


def custom_ops_from(specs: list[str]) -> dict[str, str]:
    """``["com.example.FancyOp=fancy_op"]`` (repeated ``--custom-op``) -> that mapping."""
    def parse(spec: str) -> tuple[str, str]:
        op, eq, function = spec.partition("=")
        if not eq or not op or not function:
            raise XlacError(f"--custom-op takes DOMAIN.OP=FUNCTION, got '{spec}'")
        return op, function
    return _per_input(specs, parse, "--custom-op", "op")


def _per_input(specs: list[str], parse, option: str, what: str = "input") -> dict:
    """{name: value} of ``parse(spec) -> (name, value)`` over the option's specs."""
    values = {}
    for spec in specs:
        name, value = parse(spec)
        if name in values:
            raise XlacError(f"{option} gives {what} '{name}' twice")
        values[name] = value
    return values


def _check_options(name: str, emit_kind: str, opt_level: int) -> None:
    if not _NAME.fullmatch(name):
        raise XlacError(f"bad model name '{name}': it must be a C identifier starting with "
                        "a letter (letters, digits, underscores)")
    if emit_kind not in EMIT_KINDS:
        raise XlacError(f"unknown output kind '{emit_kind}'; choose from {', '.join(EMIT_KINDS)}")
    if opt_level not in OPT_LEVELS:
        raise XlacError(f"bad optimization level {opt_level}; choose from 0, 1, 2, 3")


def _pass_dumper(folder: Path):
    """A ``dump(name, module)`` hook writing numbered HLO files into ``folder``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        reason = f"folder '{folder}': {e.strerror or e}"
        raise XlacError(f"cannot create the dump_passes {reason}",
                        cli=f"cannot create the --dump-passes {reason}") from None
    count = 0

    def dump(pass_name: str, module: Module) -> None:
        nonlocal count
        path = folder / f"{count:03d}-{pass_name.replace('/', '.')}.hlo"
        count += 1
        try:
            path.write_text(print_module(module, large_constants=False))
        except OSError as e:
            raise XlacError(f"cannot write '{path}': {e.strerror or e}") from None
    return dump


def load_const_input(text: str) -> tuple[str, "np.ndarray"]:
    """``"k=k.npy"`` -> ``("k", the array in k.npy)``; the name may itself hold '='."""
    name, eq, path = text.rpartition("=")
    if not eq or not name or not path:
        raise XlacError(f"bad --const-input '{text}': expected NAME=FILE.npy")
    try:
        return name, np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise XlacError(f"cannot read --const-input {name}={path}: "
                        f"{getattr(e, 'strerror', None) or e}") from None


def compile(model, output, *, name: str | None = None, target: str | None = None,
            cpu: str | None = None, features: str | None = None, emit: str = "obj",
            input_shapes: dict | None = None, absent_inputs=None,
            opt_level: int = 2, report: bool = False, dump_passes=None,
            const_inputs: dict | None = None, strict: bool = False, parallel: bool = False,
            memory_budget: int | None = None, bounds: dict | None = None,
            int8_io: bool = False, custom_ops: dict | None = None,
            progress: Progress | None = None) -> CompileResult:
    """Compile ``model`` (an ONNX path, bytes or ModelProto, or the path or bytes of
    XLA's HLO text as JAX prints it) into ``output`` and the header beside it
    (``output`` with suffix ``.h``).

    ``features`` adds (``+name``) or removes (``-name``) LLVM target features, comma
    separated. ``emit`` picks what ``output`` holds: an object file (``obj``), a static
    library of it and the runtime objects it needs (``lib``), assembly (``asm``),
    optimized LLVM IR (``llvm``) or the optimized HLO text (``hlo``). ``input_shapes``
    maps input names to dims that pin dynamic dimensions, and a sequence input's name to
    a list of dims, one per element (its length and element shapes: each element is an
    argument of NAME_run). ``absent_inputs`` names optional inputs compiled empty (they
    leave the signature). ``const_inputs`` maps input names to arrays: those inputs
    become weights and leave the signature (for inputs that give shapes, axes or
    counts). ``dump_passes`` names a
    folder that receives the HLO after each pass. Raises ``XlacError`` for bad input;
    warns (``XlacWarning``) where the model may be compiled wrong (an ONNX opset newer
    than the onnx package knows), which ``strict`` makes an error. ``parallel`` adds
    NAME_run_parallel, the entry that hands its big loops and kernels to the caller's
    thread pool (``xlac.load(..., threads=N)``); its code is separate from NAME_run's,
    which stays as it is. ``memory_budget`` (bytes) asks for the fastest plan whose arena
    fits: if the plain one does not, chains of convolutions are streamed a few rows at a
    time (optimizer/row_streaming.py), fewer rows per band until one fits; an
    ``XlacError`` names the smallest arena reachable when none does. ``bounds`` maps the
    name of every input's leading (batch) dimension to its largest size, ``{"N": 8}``:
    the object then takes the batch at run time (bounds.py). ``int8_io`` makes a quantized
    (QDQ) ONNX model's inputs and outputs the 8-bit values its QuantizeLinear and
    DequantizeLinear nodes compute, with their scale and zero point in the header
    (importers/onnx/int8_boundary.py). ``custom_ops`` maps ONNX ops of custom domains,
    ``"com.example.FancyOp"``, to the C functions that compute them, ``"fancy_op"``: each
    such node becomes a custom call (emitter/custom_call.py), its attributes the call's
    backend_config as JSON, its outputs' shapes the model's value_info.
    """
    if memory_budget is not None and (isinstance(memory_budget, bool)
                                      or not isinstance(memory_budget, int)
                                      or memory_budget <= 0):
        raise XlacError(f"memory_budget must be a positive number of bytes, "
                        f"got {memory_budget!r}",
                        cli=f"--memory-budget must be a positive number of bytes, "
                            f"got {memory_budget!r}")
    _check_mapping("input_shapes", input_shapes, '{"x": (1, 64)}')
    _check_mapping("const_inputs", const_inputs, '{"k": np.array([1, 2])}')
    _check_mapping("bounds", bounds, '{"N": 8}')
    _check_mapping("custom_ops", custom_ops, '{"com.example.FancyOp": "fancy_op"}')
    _check_symbols(input_shapes or {}, bounds or {})
    with warnings.catch_warnings():
        if strict:
            warnings.simplefilter("error", XlacWarning)
        try:
            return _compile(model, output, name=name, target=target, cpu=cpu,
                            features=features, emit_kind=emit,
                            input_shapes=input_shapes or {}, const_inputs=const_inputs or {},
                            absent_inputs=absent_inputs,
                            opt_level=opt_level, want_report=report, dump_passes=dump_passes,
                            parallel=parallel, memory_budget=memory_budget,
                            bounds=bounds or {}, int8_io=int8_io,
                            custom_ops=custom_ops or {}, progress=progress or Progress())
        except XlacWarning as w:
            raise XlacError(f"{w} (an error with strict=True)",
                            cli=f"{w} (an error with --strict)") from None


def _import(model, *, name, input_shapes, const_inputs, absent_inputs,
            onnx_order_bound, custom_ops=None) -> Module:
    """The front end by content: HLO text opens with ``HloModule``, StableHLO with an
    MLIR ``module``; anything else is read as ONNX."""
    if not is_hlo_text(model):
        return import_onnx(model, input_shapes=input_shapes, name=name,
                           const_inputs=const_inputs, absent_inputs=absent_inputs,
                           onnx_order_bound=onnx_order_bound, custom_ops=custom_ops)
    # HLO's shapes are static and all its parameters are inputs: nothing to pin.
    for what, option, value in (("input_shapes", "--input-shape", input_shapes),
                                ("const_inputs", "--const-input", const_inputs),
                                ("absent_inputs", "--absent-input", absent_inputs),
                                ("custom_ops", "--custom-op", custom_ops)):
        if value:
            raise XlacError(f"{what} applies to ONNX models, not HLO text",
                            cli=f"{option} applies to ONNX models, not HLO text")
    if is_stablehlo_text(model):
        return import_stablehlo(model, name=name)
    return import_hlo(model, name=name)


def _check_symbols(input_shapes: dict, bounds: dict) -> None:
    """Every dimension named in ``input_shapes`` has its bound."""
    for name, dims in input_shapes.items():
        for d in dims if isinstance(dims, tuple) else ():
            if isinstance(d, str) and d not in bounds:
                raise XlacError(f"input_shapes names the dimension {d} of '{name}': give its "
                                f"largest size in bounds, e.g. bounds={{'{d}': 8}}",
                                cli=f"--input-shape names the dimension {d} of '{name}': "
                                    f"give its largest size, e.g. --bound {d}=8")


def _import_bounded(model, bounds: dict, *, name, input_shapes, const_inputs, absent_inputs,
                    onnx_order_bound, custom_ops=None) -> tuple[Module, tuple[str, int]]:
    """The one-sample module of a batch-separable model, and its (symbol, limit)."""
    if is_hlo_text(model):
        raise XlacError("bounds apply to ONNX models, not HLO text",
                        cli="--bound applies to ONNX models, not HLO text")
    proto, _ = read_model(model)
    batch = batch_bound(proto, bounds, input_shapes, const_inputs, absent_inputs)
    given = dict(name=name, const_inputs=const_inputs, absent_inputs=absent_inputs,
                 custom_ops=custom_ops)
    one = import_onnx(proto, input_shapes=batch.input_shapes(1),
                      onnx_order_bound=onnx_order_bound, **given)
    check_separable(import_onnx(proto, input_shapes=batch.input_shapes(2), **given),
                    import_onnx(proto, input_shapes=batch.input_shapes(3), **given))
    return one, (batch.symbol, batch.limit)


def _record_quantization(signature, ports: dict[str, tuple[float, int]]) -> None:
    """Each int8_io port's (scale, zero point) in ``signature``."""
    for specs in (signature.inputs, signature.outputs):
        specs[:] = [replace(t, quantization=ports.get(t.name)) for t in specs]


def _check_mapping(what: str, value, example: str) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise XlacError(f"{what} must be a dict from input names, e.g. {what}={example}; "
                        f"got a {type(value).__name__}")


def _compile(model, output, *, name, target, cpu, features, emit_kind, input_shapes,
             const_inputs, absent_inputs, opt_level, want_report, dump_passes, parallel: bool,
             memory_budget: int | None, bounds: dict, int8_io: bool, custom_ops: dict,
             progress: Progress) -> CompileResult:
    output = Path(os.fspath(output))
    header = output.with_suffix(".h")
    if header == output:
        raise XlacError(f"output '{output}' would be overwritten by its own header; "
                        "name the output file with another suffix, e.g. model.o")
    name = name if name is not None else c_identifier_for_model(output.stem)
    _check_options(name, emit_kind, opt_level)
    # Fail before a long compile rather than after it; write_files still reports
    # whatever else goes wrong when writing.
    folder = output.parent
    if not folder.is_dir():
        raise XlacError(f"cannot write '{output}': folder '{folder}' does not exist")
    dump = _pass_dumper(Path(dump_passes)) if dump_passes is not None else None

    with progress:
        with progress.stage("import"):
            quantized_ports = {}
            if int8_io:
                if is_hlo_text(model):
                    raise XlacError("int8_io applies to ONNX models, not HLO text",
                                    cli="--int8-io applies to ONNX models, not HLO text")
                model, _ = read_model(model)
                quantized_ports = int8_boundary(model)
            bound = None
            if bounds:
                module, bound = _import_bounded(
                    model, bounds, name=name, input_shapes=input_shapes,
                    const_inputs=const_inputs, absent_inputs=absent_inputs,
                    onnx_order_bound=want_report, custom_ops=custom_ops)
            else:
                module = _import(model, name=name, input_shapes=input_shapes,
                                 const_inputs=const_inputs, absent_inputs=absent_inputs,
                                 onnx_order_bound=want_report, custom_ops=custom_ops)
            onnx_bound = module.source_order_bound
            if quantized_ports:
                _record_quantization(module.signature, quantized_ports)
            if dump is not None:
                dump("imported", module)
            # The module and its rewrites that may need less memory (a recurrent loop's
            # projection computed per step); footprint first: the smallest arena wins.
            candidates = alternatives(module)
            imported = [op_counts(m) if want_report else None for m in candidates]
            unoptimized = ([m.clone() for m in candidates] if memory_budget is not None
                           else None)
        backend = make_backend(target, cpu, features, opt_level)
        if bound is not None and backend.name == "cuda":
            raise XlacError("bounds are not supported for the CUDA target yet",
                            cli="--bound is not supported for the CUDA target yet")
        exact_budget = DEFAULT_BUDGET if opt_level >= 2 else 0
        with progress.stage("optimize"):
            for m, prefix in zip(candidates, ("", "step-projection/")):
                optimize(m, backend, opt_level=opt_level, dump=dump and (
                    lambda n, m, prefix=prefix: dump(prefix + n, m)))
        with progress.stage("plan"):
            plans = [plan_memory(m, backend, exact_budget=exact_budget) for m in candidates]
            best = min(range(len(plans)), key=lambda k: plans[k].arena_size)
            module, assignment, imported_ops = candidates[best], plans[best], imported[best]
        streaming = None
        if memory_budget is not None:
            with progress.stage("stream"):
                module, assignment, streaming = _fit_budget(
                    unoptimized[best], module, assignment, memory_budget, backend,
                    opt_level, exact_budget)
        with progress.stage("emit"):
            kinds = {"obj": ("obj",), "lib": ("obj",), "asm": ("asm",), "llvm": ("llvm",),
                     "hlo": (), "steps": ()}[emit_kind]
            artifact = backend.emit(module, assignment,
                                    EmitOptions(name, parallel=parallel, bound=bound),
                                    kinds=kinds)
            body = {
                "obj": lambda: artifact.object_code,
                "lib": lambda: static_library(name, artifact.object_code,
                                              artifact.target.is_host, artifact.target.triple),
                "asm": lambda: artifact.assembly.encode(),
                "llvm": lambda: artifact.llvm_ir.encode(),
                "hlo": lambda: print_module(module).encode(),
                "steps": lambda: (format_steps(build_steps(module, assignment, backend))
                                  + "\n").encode(),
            }[emit_kind]()
        with progress.stage("write"):
            write_files({output: body, header: artifact.header.encode()})

    paths = (output, header)
    built = None
    if want_report:
        built = build_report(name=name, target=artifact.target, imported_ops=imported_ops,
                             module=module, assignment=assignment,
                             onnx_order_bound=onnx_bound, const_inputs=sorted(const_inputs),
                             times=progress.times, files=[str(p) for p in paths],
                             footprint=artifact.footprint, stack_bytes=artifact.stack_bytes,
                             streaming=streaming, bound=bound)
    return CompileResult(paths, name, assignment.arena_size, built)


def _fit_budget(imported: Module, module: Module, assignment, budget: int, backend,
                opt_level: int, exact_budget: int):
    """The fastest plan whose arena fits ``budget``: ``module`` as planned, else
    ``imported`` optimized with its convolution chains streamed, fewer rows per band
    each try. Returns the module, its assignment and the report's account: the budget,
    the plans tried (rows per band, None for the plain one, and arena) and the chains
    streamed (none when the plain plan fits)."""
    tried = [{"band_rows": None, "arena_bytes": assignment.arena_size}]
    if assignment.arena_size <= budget:
        return module, assignment, {"budget": budget, "tried": tried, "chains": []}
    for rows in STREAM_BAND_ROWS:
        streamed, stream = imported.clone(), RowStreaming(rows)
        optimize(streamed, backend, opt_level=opt_level, stream=stream)
        if not stream.chains:
            break                        # nothing streams: no band size changes that
        plan = plan_memory(streamed, backend, exact_budget=exact_budget)
        tried.append({"band_rows": rows, "arena_bytes": plan.arena_size})
        if plan.arena_size <= budget:
            chains = [{"sink": c["sink"].name, "members": c["members"],
                       "onnx_node": str(c["sink"].metadata or ""),
                       "biggest_map_bytes": c["biggest_map_bytes"]} for c in stream.chains]
            return streamed, plan, {"budget": budget, "band_rows": rows, "tried": tried,
                                    "chains": chains}
    smallest = min(t["arena_bytes"] for t in tried)
    how = ("with its convolution chains streamed a row at a time"
           if any(t["band_rows"] for t in tried) else "(no convolution chain to stream)")
    raise XlacError(f"no plan fits the memory budget of {budget:,} bytes: the smallest "
                    f"arena reachable is {smallest:,} bytes {how}")

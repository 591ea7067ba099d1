"""OUT.h: the C99 header of one compiled model (also valid C++).

It needs only <stddef.h>, <stdint.h> and xlac_runtime.h (for the descriptor types),
and compiles with ``-std=c99 -Wall -Wextra -Werror -pedantic``.
"""
from __future__ import annotations

from ..hlo import DType
from .custom_call import declarations
from .interface import ModelInterface, Port
from .target import TargetInfo

# The C element type of each dtype in NAME_run's prototype: the narrow floats travel as
# their bits, the 4- and 2-bit integers one per byte in the low bits (xlac_runtime.h).
C_TYPES = {
    "pred": "uint8_t", "s8": "int8_t", "s16": "int16_t", "s32": "int32_t", "s64": "int64_t",
    "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double",
    "s4": "uint8_t", "u4": "uint8_t", "s2": "uint8_t", "u2": "uint8_t",
    "f8e4m3fn": "uint8_t", "f8e4m3fnuz": "uint8_t", "f8e5m2": "uint8_t",
    "f8e5m2fnuz": "uint8_t", "f4e2m1fn": "uint8_t", "f8e8m0fnu": "uint8_t",
}


def c_type(dtype: DType) -> str:
    return C_TYPES[dtype.name]


def _comment_text(text: str) -> str:
    """Text safe inside a /* */ comment (no terminator, no trigraph-ish surprises)."""
    return text.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?").encode(
        "ascii", "replace").decode()


def _port_lines(name: str, kind: str, k: int, port: Port) -> list[str]:
    dims = "x".join(str(d) for d in port.dims) or "scalar"
    macro = f"{name}_{port.c_name}"
    lines = [
        f"/* {kind} {k}: \"{_comment_text(port.name)}\", {port.dtype.name}[{dims}] */",
        f"#define {macro}_COUNT {port.count}u",
        f"#define {macro}_SIZE {port.size_bytes}u",
    ]
    if port.quantization is not None:
        scale, zero = port.quantization
        lines += [f"/* quantized: the real value is (q - {macro}_ZERO_POINT) * {macro}_SCALE */",
                  f"#define {macro}_SCALE {float(scale)!r}f",
                  f"#define {macro}_ZERO_POINT {int(zero)}"]
    return lines


def _value_lines(interface: ModelInterface) -> list[str]:
    """Which arguments of NAME_run make each sequence or optional input and output of the
    model (nothing for a model of tensors only, whose arguments are its inputs and
    outputs one to one)."""
    values = [(w, v) for w in ("inputs", "outputs")
              for v in (interface.input_values if w == "inputs" else interface.output_values)]
    if all(v.kind == "tensor" and not v.optional for _, v in values):
        return []
    out = [f"/* The model's inputs and outputs as arguments of {interface.name}_run: a "
           "sequence is one",
           "   argument per element (its length fixed at compile time), an optional its",
           "   content, or no argument when compiled empty."]
    for which, v in values:
        ports = interface.ports_of(v, which)
        what = f"   {which[:-1]} \"{_comment_text(v.name)}\": "
        opt = "an optional " if v.optional else ""
        if v.kind == "absent":
            out.append(what + "an optional compiled empty: no argument")
        elif v.kind == "sequence":
            args = ", ".join(p.c_name for p in ports) or "no argument"
            out += _wrap(f"{opt}{'holding ' if opt else ''}a sequence of {v.count} "
                         f"tensor{'s' if v.count != 1 else ''}: {args}".split(), "     ",
                         first=what)
        else:
            out.append(what + f"{opt}{'holding ' if opt else ''}a tensor: {ports[0].c_name}")
    out[-1] += " */"
    return out + [""]


def _wrap(words: list[str], indent: str, first: str = "", width: int = 88) -> list[str]:
    """``words`` joined by spaces into lines of at most ``width`` characters; the first
    line starts with ``first``, the others with ``indent``."""
    lines, line = [], first + words[0]
    for w in words[1:]:
        if len(line) + 1 + len(w) > width:
            lines.append(line)
            line = indent + w
        else:
            line = f"{line} {w}"
    return lines + [line]


def _float_abi_lines(target: TargetInfo) -> list[str]:
    if target.float_abi == "hard":
        return [" * Float ABI:     hard (floats in FPU registers; link with -mfloat-abi=hard)"]
    if target.float_abi == "soft":
        fpu = any(f in target.required for f in ("+fpregs", "+mve"))
        return [" * Float ABI:     soft (floats in integer registers; "
                + ("the code uses the FPU: -mfloat-abi=softfp)" if fpu
                   else "no FPU instructions: -mfloat-abi=soft)")]
    return []


def _parallel_lines(name: str, params: list[str], scratch, sized: bool = False) -> list[str]:
    """The arena rule and the prototypes of NAME_run_parallel(_v) (and, for a bounded
    object, _sized_v)."""
    words = [p + "," for p in params] + ["const xlac_threadpool *pool);"]
    return [
        "",
        f"/* {name}_run_parallel: {name}_run with its big loops and kernels split into",
        "   tasks for pool->parallel_for (xlac_runtime.h); the object starts no thread.",
        "   Results are those of NAME_run, bit for bit. A NULL pool, or one of fewer than",
        f"   two threads, calls {name}_run_v. The arena grows with the pool's threads:",
        f"   each thread past the first keeps its kernel scratch after {name}_ARENA_SIZE. */",
        f"#define {name}_THREAD_SCRATCH_BASE {scratch.base}u",
        f"#define {name}_THREAD_SCRATCH_SIZE {scratch.size}u",
        f"#define {name}_ARENA_SIZE_THREADS(n) ((n) > 1u ? {name}_THREAD_SCRATCH_BASE + "
        f"((size_t)(n) - 1u) * {name}_THREAD_SCRATCH_SIZE : (size_t){name}_ARENA_SIZE)",
        *_wrap(words, "    ", first=f"int {name}_run_parallel("),
        f"int {name}_run_parallel_v(const void *const *inputs, void *const *outputs, "
        "void *arena,",
        "    const xlac_threadpool *pool);",
        *([f"int {name}_run_parallel_sized_v(const size_t *sizes, const void *const *inputs,",
           "    void *const *outputs, void *arena, const xlac_threadpool *pool);"]
          if sized else []),
    ]


def closing_lines(name: str, guard: str) -> list[str]:
    """A model header's end: NAME_info, the extern "C" block and the include guard
    closed."""
    return [
        "",
        "/* Names, dtypes, shapes and sizes of the inputs and outputs. */",
        f"extern const xlac_model_info {name}_info;",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]


def render_header(interface: ModelInterface, target: TargetInfo, arena_size: int,
                  arena_align: int, symbols=(), stack_bytes: int | None = None,
                  thread_scratch=None, calls=()) -> str:
    """``symbols``: what the object needs from the C library and the compiler's runtime;
    ``stack_bytes``: the most stack its entry points use (None: not known);
    ``thread_scratch`` (entry.ThreadScratch): the object has NAME_run_parallel;
    ``calls`` (custom_call.CustomCall): the functions the linking program defines."""
    name = interface.name
    guard = f"XLAC_MODEL_{name}_H"
    needs = _wrap([s + "," for s in symbols[:-1]] + list(symbols[-1:]) or ["nothing."],
                  " *   ", first=" *   ")
    if symbols:
        needs[-1] += "."
    features = _wrap(list(target.required) or ["(none)"], " *   ", first=" *   ")
    if stack_bytes is None:
        stack = [" * Stack: not known (no machine code was generated)."]
    else:
        stack = [f" * Stack: a call of {name}_run or {name}_run_v uses at most {stack_bytes} "
                 "bytes",
                 f" * ({name}_STACK_SIZE: the deepest chain of the object's own frames)"
                 + (", plus" if symbols else ".")]
        stack += [" * what the library functions above take."] if symbols else []
        stack += [" * The custom calls below take stack of their own on top."] if calls else []
    out = [
        f"/* {name}: model compiled by xlac.",
        " *",
        f" * Target triple: {target.triple}",
        f" * CPU:           {target.cpu}",
        *_float_abi_lines(target),
        " * Features it requires (the CPU's and --features; it may fault on a CPU without them):",
        *features,
        " *",
        " * Runtime symbols the object needs: none from xlac_runtime.c; from the C library",
        " * and the compiler's runtime (libgcc or compiler-rt):",
        *needs,
        *stack,
        " * Inputs and outputs must not overlap one another or the arena.",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        "#include \"xlac_runtime.h\"",
        "",
        "#ifdef __cplusplus",
        "extern \"C\" {",
        "#endif",
        "",
        f"#define {name}_ARENA_SIZE {arena_size}u   /* scratch bytes the caller provides */",
        f"#define {name}_ARENA_ALIGN {arena_align}u",
        *([f"#define {name}_STACK_SIZE {stack_bytes}u   /* stack bytes a call uses at most */"]
          if stack_bytes is not None else []),
        f"#define {name}_NUM_INPUTS {len(interface.inputs)}",
        f"#define {name}_NUM_OUTPUTS {len(interface.outputs)}",
        "",
        *declarations(calls),
        *_value_lines(interface),
    ]
    for kind, ports in (("input", interface.inputs), ("output", interface.outputs)):
        for k, port in enumerate(ports):
            out += _port_lines(name, kind, k, port)
    bound = interface.bound
    params = [f"size_t {bound.c_name}"] if bound is not None else []
    params += [f"const {c_type(p.dtype)} *{p.c_name}" for p in interface.inputs]
    params += [f"{c_type(p.dtype)} *{p.c_name}" for p in interface.outputs]
    params.append("void *arena")
    words = [p + "," for p in params[:-1]] + [params[-1] + ");"]
    proto = _wrap(words, "    ", first=f"int {name}_run(")
    out += [
        "",
        *(_bound_lines(name, bound) if bound is not None else
          ["/* Typed entry: inputs then outputs in graph order, then the arena.",
           "   Returns 0 (XLAC_OK) on success, else an xlac_status. */"]),
        *proto,
        "",
        "/* Generic entry for drivers that do not know the model"
        + ("; it runs" if bound is not None else ". */"),
        *([f"   {name}_BOUND_{bound.c_name} samples, the shapes {name}_info gives. */"]
          if bound is not None else []),
        f"int {name}_run_v(const void *const *inputs, void *const *outputs, void *arena);",
        *([f"/* The same with the sizes first ({name}_NUM_BOUNDS of them, in the order of "
           "the bounds). */",
           f"int {name}_run_sized_v(const size_t *sizes, const void *const *inputs,",
           "    void *const *outputs, void *arena);"] if bound is not None else []),
        *(_parallel_lines(name, params, thread_scratch, bound is not None)
          if thread_scratch is not None else []),
        *closing_lines(name, guard),
    ]
    return "\n".join(out)


def _bound_lines(name: str, bound) -> list[str]:
    """The bound's macros and what NAME_run does with its size."""
    n = bound.c_name
    return [
        f"/* Bounded batch: the leading dimension of every input and output is the batch, "
        f"{n}",
        f"   samples of 1 to {name}_BOUND_{n}. The sizes above are at the bound; a call "
        f"reads and",
        f"   writes the first {n} samples of each buffer, and its time grows with {n}. "
        "The code",
        f"   computes one sample after another, so {name}_ARENA_SIZE is one sample's. */",
        f"#define {name}_NUM_BOUNDS 1",
        f"#define {name}_BOUND_{n} {bound.limit}u",
        "",
        f"/* Typed entry: {n}, then inputs then outputs in graph order, then the arena.",
        "   Returns 0 (XLAC_OK) on success, XLAC_ERROR_SIZE_OUT_OF_BOUNDS where "
        f"{n} is 0 or",
        f"   over {name}_BOUND_{n}, else another xlac_status. */",
    ]

"""OUT.h of an object compiled for CUDA: C99, needs xlac_cuda.h (and xlac_runtime.h)."""
from __future__ import annotations

from ..header import _port_lines, _value_lines, _wrap, closing_lines
from ..interface import ModelInterface
from ..target import TargetInfo
from .program import DEVICE_ALIGN

_IMAGES = {
    "cubin": "PTX and a cubin for {arch}: the cubin on a {arch} device, else the driver "
             "compiles the PTX",
    "ptx": "PTX only (no ptxas at compile time): the driver compiles it at "
           "{name}_cuda_init",
    "emulated": "kernels compiled for the host, for a stand-in driver (tests), and PTX",
}


def render_cuda_header(interface: ModelInterface, host: TargetInfo, device: TargetInfo,
                       arena_size: int, weights_bytes: int, kernels: int, image: str) -> str:
    name = interface.name
    guard = f"XLAC_MODEL_{name}_H"
    arch = device.cpu
    out = [
        f"/* {name}: model compiled by xlac for CUDA.",
        " *",
        f" * Target triple: {host.triple}",
        f" * CPU:           {host.cpu}",
        " * Features it requires (the host object's):",
        *_wrap(list(host.required) or ["(none)"], " *   ", first=" *   "),
        f" * Device:        {device.triple}, {arch} or newer",
        *_wrap(_IMAGES[image].format(arch=arch, name=name).split(), " *   ",
               first=" * Kernels:       "),
        " *",
        " * Link the object with xlac_cuda.c and xlac_runtime.c (xlac --runtime-dir) and",
        " * -ldl. The CUDA driver (libcuda.so.1) is loaded at run time: the program builds",
        " * and links without CUDA, and the entries return XLAC_ERROR_CUDA_* statuses",
        " * where there is no driver or device (xlac_status_string says which).",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        "#include \"xlac_cuda.h\"",
        "",
        "#ifdef __cplusplus",
        "extern \"C\" {",
        "#endif",
        "",
        f"#define {name}_ARENA_SIZE {arena_size}u   /* device scratch bytes "
        f"{name}_run_device takes */",
        f"#define {name}_ARENA_ALIGN {DEVICE_ALIGN}u   /* cuMemAlloc's alignment */",
        f"#define {name}_WEIGHTS_SIZE {weights_bytes}u   /* device bytes {name}_cuda_init "
        "copies the weights to */",
        f"#define {name}_CUDA_ARCH \"{arch}\"",
        f"#define {name}_CUDA_KERNELS {kernels}",
        f"#define {name}_NUM_INPUTS {len(interface.inputs)}",
        f"#define {name}_NUM_OUTPUTS {len(interface.outputs)}",
        "",
        *_value_lines(interface),
    ]
    for kind, ports in (("input", interface.inputs), ("output", interface.outputs)):
        for k, port in enumerate(ports):
            out += _port_lines(name, kind, k, port)
    out += [
        "",
        f"/* The caller's state of {name} on one device: zero it (or not), then",
        f"   {name}_cuda_init; {name}_cuda_release frees what init took. */",
        f"typedef struct {name}_cuda_ctx {{",
        "  xlac_cuda_ctx base;",
        f"  void *kernels[{max(kernels, 1)}];",
        f"}} {name}_cuda_ctx;",
        "",
        "/* Loads the driver, retains the device's primary context, loads the kernels,",
        f"   copies the weights ({name}_WEIGHTS_SIZE bytes) and allocates {name}_run_cuda's",
        "   buffers. Returns 0 (XLAC_OK) or an xlac_status. */",
        f"int {name}_cuda_init({name}_cuda_ctx *ctx, int32_t device);",
        "",
        "/* Runs on the caller's CUstream (NULL: the default stream), asynchronously where",
        "   the model has no loop or branch (those read their predicate back to the host),",
        "   so a stream capture records it into a CUDA graph. inputs and outputs are device",
        "   addresses in graph order; arena is a device buffer of ARENA_SIZE bytes,",
        "   256-aligned. */",
        f"int {name}_run_device({name}_cuda_ctx *ctx, const uint64_t *inputs, "
        "const uint64_t *outputs,",
        "    uint64_t arena, void *stream);",
        "",
        "/* Host arrays in and out, through device buffers of its own; returns when done. */",
        f"int {name}_run_cuda({name}_cuda_ctx *ctx, const void *const *inputs, "
        "void *const *outputs);",
        "",
        f"void {name}_cuda_release({name}_cuda_ctx *ctx);",
        "",
        f"/* sizeof({name}_cuda_ctx), from the object (for callers that allocate it). */",
        f"size_t {name}_cuda_ctx_size(void);",
        *closing_lines(name, guard),
    ]
    return "\n".join(out)

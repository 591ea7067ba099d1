"""The ``xlac`` command.

    xlac MODEL -o OUT.o [--name NAME] [--target TRIPLE] [--cpu CPU] [--features +F,-G]
         [--emit obj|lib|asm|llvm|hlo|steps] [--input-shape NAME=1x3x224x224 ...]
         [--const-input NAME=FILE.npy ...] [--absent-input NAME ...] [--report]
         [--report-json FILE]
         [--report-memory[=FILE.svg]] [--dump-passes DIR] [-O0|-O1|-O2|-O3] [--strict]
         [--memory-budget BYTES] [--bound SYMBOL=LIMIT] [--int8-io]
         [--custom-op DOMAIN.OP=FUNCTION ...]
    xlac --runtime-dir
    xlac --cmake-dir
    xlac --version
    xlac run | bench | cache ...   (commands.py)

MODEL is an ONNX model or XLA's HLO text as JAX prints it, told apart by content.

Exit status: 0 on success; 1 for anything the user can fix (bad model, bad
option, unwritable output), reported as one ``xlac: error: ...`` line on stderr;
2 for a bug in xlac, also one line (the traceback too with XLAC_DEBUG=1).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import onnx

from . import __version__, runtime_c
from .commands import COMMANDS
from .driver import (EMIT_KINDS, bounds_from, compile, const_inputs_from, custom_ops_from,
                     input_shapes_from)
from .hlo import XlacError, XlacWarning
from .memory_report import arena_svg, format_memory
from .outputs import write_files
from .progress import Progress
from .report import format_report

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage and exits with 2; a usage mistake is a user
    # error like any other: one line, exit status 1.
    def error(self, message):
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="xlac", description="Compile an ONNX model or XLA HLO text into an object file and a "
                "C header (weights embedded, one caller-provided arena, no malloc).",
                epilog="other commands: " + "; ".join(
                    f"xlac {name}: {doc}" for name, (doc, _, _) in COMMANDS.items())
                + " (xlac COMMAND --help)")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="the ONNX model, or XLA's HLO text (a file opening with HloModule)")
    p.add_argument("-o", dest="output", metavar="OUT.o",
                   help="output file; the header OUT.h is written beside it")
    p.add_argument("--name", help="C symbol prefix (default: OUT's stem as a C identifier)")
    p.add_argument("--target", metavar="TRIPLE", help="LLVM target triple, or cuda for an "
                   "NVIDIA GPU (--cpu sm_80, sm_90, ...); default: this machine")
    p.add_argument("--cpu", help="target CPU (default: this machine's for the host target, "
                   "a generic CPU otherwise)")
    p.add_argument("--features", metavar="+F,-G",
                   help="add (+name) or remove (-name) target features, comma separated, "
                   "e.g. +vfp4d16sp for an FPU on a soft-float ARM triple")
    p.add_argument("--emit", choices=EMIT_KINDS, default="obj",
                   help="what OUT holds: object code (default), a static library (the object "
                   "and the runtime objects it needs), assembly, LLVM IR, the optimized HLO text or "
                   "the step list the code runs (buffers resolved)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMxDIM...",
                   help="pin the shape of an input with dynamic dimensions; a sequence "
                   "input's element shapes in brackets, NAME=[2x3,4x3] (repeatable)")
    p.add_argument("--bound", action="append", default=[], metavar="SYMBOL=LIMIT",
                   help="compile for every batch of 1 to LIMIT: SYMBOL is every input's "
                   "leading dimension (the model's name for it, or one written in "
                   "--input-shape, e.g. x=Nx3x224x224 --bound N=8); NAME_run takes the "
                   "batch at run time")
    p.add_argument("--const-input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="compile input NAME as a constant with the value in FILE.npy, for "
                   "inputs that give shapes, axes or counts (repeatable)")
    p.add_argument("--absent-input", action="append", default=[], metavar="NAME",
                   help="compile optional input NAME empty; it leaves the signature "
                   "(repeatable)")
    p.add_argument("--custom-op", action="append", default=[], metavar="DOMAIN.OP=FUNCTION",
                   help="compile nodes of the custom-domain ONNX op DOMAIN.OP as calls of the "
                   "C function FUNCTION, which the program that links the object defines "
                   "(repeatable)")
    p.add_argument("--report", action="store_true",
                   help="print op counts, fusions, memory and compile times to stdout")
    p.add_argument("--report-json", metavar="FILE", help="write the report as JSON to FILE")
    p.add_argument("--report-memory", nargs="?", const="", metavar="FILE.svg",
                   help="print where the arena goes (the buffers live at the peak with their "
                   "ONNX nodes, kernel scratch, live bytes over the schedule); with FILE.svg, "
                   "also draw the arena over the schedule there")
    p.add_argument("--dump-passes", metavar="DIR",
                   help="write the HLO after import and after each optimization pass to DIR")
    p.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2,
                   metavar="LEVEL", help="optimization level -O0 .. -O3 (default -O2)")
    p.add_argument("--memory-budget", type=int, metavar="BYTES",
                   help="the most arena bytes the model may use: the fastest plan that fits, "
                        "streaming chains of convolutions a few rows at a time where needed "
                        "(an error names the smallest arena reachable)")
    p.add_argument("--parallel", action="store_true",
                   help="also emit NAME_run_parallel, which splits the big loops and kernels "
                   "into tasks for a thread pool the caller passes (xlac_threadpool)")
    p.add_argument("--int8-io", action="store_true",
                   help="a quantized (QDQ) ONNX model's inputs and outputs as the 8-bit "
                   "values its QuantizeLinear / DequantizeLinear compute (scale and zero "
                   "point in the header, NAME_x_SCALE, NAME_x_ZERO_POINT), as TensorFlow "
                   "Lite Micro takes them")
    p.add_argument("--strict", action="store_true",
                   help="make warnings errors (an ONNX opset newer than the onnx package knows)")
    p.add_argument("--runtime-dir", action="store_true",
                   help="print the folder holding xlac_runtime.h and xlac_runtime.c, and exit")
    p.add_argument("--cmake-dir", action="store_true",
                   help="print the folder holding xlac's CMake module (xlac_DIR for "
                   "find_package(xlac)), and exit")
    p.add_argument("--version", action="store_true",
                   help="print the versions of xlac and of what it builds on, and exit")
    return p


def _write_json(path: str, report: dict) -> None:
    try:
        with open(path, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise XlacError(f"cannot write '{path}': {e.strerror or e}") from None


def _run(argv) -> int:
    if argv and argv[0] in COMMANDS:
        doc, add_arguments, command = COMMANDS[argv[0]]
        p = _Parser(prog=f"xlac {argv[0]}", description=doc[0].upper() + doc[1:] + ".")
        add_arguments(p)
        return command(p.parse_args(argv[1:]))
    args = _parser().parse_args(argv)
    if args.version:
        print(_version_line())
        return 0
    if args.runtime_dir:
        print(os.path.dirname(os.path.abspath(runtime_c.__file__)))
        return 0
    if args.cmake_dir:
        print(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cmake"))
        return 0
    if args.model is None:
        raise _UsageError("no model given (usage: xlac MODEL.onnx -o OUT.o)")
    if args.output is None:
        raise _UsageError("no output given: add -o OUT.o")
    want_report = args.report or args.report_json is not None or args.report_memory is not None
    # Checked before compiling, so a bad report path does not fail after the outputs exist.
    for path in (args.report_json, args.report_memory or None):
        if path is not None and not os.path.isdir(os.path.dirname(path) or "."):
            raise XlacError(f"cannot write '{path}': its folder does not exist")
    result = compile(args.model, args.output, name=args.name, target=args.target,
                     cpu=args.cpu, features=args.features, emit=args.emit,
                     input_shapes=input_shapes_from(args.input_shape),
                     const_inputs=const_inputs_from(args.const_input),
                     absent_inputs=args.absent_input, opt_level=args.opt_level,
                     report=want_report, strict=args.strict, parallel=args.parallel,
                     memory_budget=args.memory_budget, bounds=bounds_from(args.bound),
                     int8_io=args.int8_io, dump_passes=args.dump_passes,
                     custom_ops=custom_ops_from(args.custom_op),
                     progress=Progress(sys.stderr))
    if args.report_json is not None:
        _write_json(args.report_json, result.report)
    if args.report:
        sys.stdout.write(format_report(result.report))
    if args.report_memory is not None:
        sys.stdout.write(format_memory(result.report["memory"]))
    if args.report_memory:
        write_files({Path(args.report_memory):
                     arena_svg(result.report["memory"], result.name).encode()})
        print(f"arena map: {args.report_memory}")
    return 0


def _version_line() -> str:
    llvm_version = ".".join(map(str, llvm.llvm_version_info))
    return (f"xlac {__version__} (Python {sys.version.split()[0]}, llvmlite {llvmlite.__version__} "
            f"with LLVM {llvm_version}, onnx {onnx.__version__} up to opset "
            f"{onnx.defs.onnx_opset_version()})")


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    # xlac's warnings read like its errors: one line, no source location.
    if issubclass(category, XlacWarning):
        print(f"xlac: warning: {_one_line(message)}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def main(argv=None) -> int:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", XlacWarning)
            warnings.showwarning = _show_warning
            return _run(sys.argv[1:] if argv is None else argv)
    except XlacError as e:
        print(f"xlac: error: {_one_line(e.cli)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except _UsageError as e:
        print(f"xlac: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("xlac: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Whoever read stdout stopped (xlac ... --report | head): end quietly, with
        # stdout pointed where flushing it at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_USER_ERROR
    except Exception as e:   # noqa: BLE001  (anything else is a bug in xlac)
        if os.environ.get("XLAC_DEBUG") == "1":
            traceback.print_exc()
        print(f"xlac: internal error in xlac ({type(e).__name__}: {_one_line(e)}); "
              "rerun with XLAC_DEBUG=1 for the traceback and please report it",
              file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())

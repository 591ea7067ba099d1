"""The networks of benchmarks/memory_models.py quantized as users quantize them
(benchmarks/int8.py: onnxruntime.quantization's QDQ, per channel, int8, calibrated on
seeded random inputs), and their outputs from xlac's build for this machine: integer
arithmetic gives every target the same bits, so builds for other targets must match it
exactly.

The weights have 7 bits (quantize_static's reduce_range, onnxruntime's advice for x86
without VNNI): its u8 x s8 kernels there (AVX2) add pairs of products in saturating i16,
so with 8-bit weights the oracle would change with the machine that runs the tests.
"""
from __future__ import annotations

import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx

import xlac

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from int8 import quantize  # noqa: E402
from memory_models import MODELS  # noqa: E402

SUFFIX = "_int8"


def is_quantized(name: str) -> bool:
    return name.endswith(SUFFIX)


@lru_cache(maxsize=None)
def _quantized_bytes(name: str, activations: str) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        return onnx.load(quantize(MODELS[name](), folder, name, "qdq", activations,
                                  reduce_range=True)).SerializeToString()


def quantized(name: str, activations: str = "int8") -> onnx.ModelProto:
    """``name`` + "_int8": the quantized model (a fresh copy, built once per session), its
    activations int8 (onnxruntime's default) or uint8."""
    return onnx.load_from_string(_quantized_bytes(name.removesuffix(SUFFIX), activations))


def host_outputs(model: onnx.ModelProto, inputs: list[np.ndarray], folder: Path):
    """The model's outputs from xlac's build for this machine."""
    result = xlac.compile(model, folder / "host.o", name="host")
    return xlac.load(result.output)(*inputs)

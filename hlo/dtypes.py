"""Element types of the IR, named as in XLA's HLO text (f32, s64, pred...)."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str        # HLO text name
    kind: str        # 'pred', 's' (signed int), 'u' (unsigned int), 'f' (float)
    bits: int

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def np(self) -> np.dtype:
        return _NUMPY[self.name]

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("s", "u")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("s", "f")

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


PRED = DType("pred", "pred", 8)
S8, S16, S32, S64 = (DType(f"s{b}", "s", b) for b in (8, 16, 32, 64))
U8, U16, U32, U64 = (DType(f"u{b}", "u", b) for b in (8, 16, 32, 64))
F16 = DType("f16", "f", 16)
BF16 = DType("bf16", "f", 16)
F32 = DType("f32", "f", 32)
F64 = DType("f64", "f", 64)

ALL = (PRED, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64)
BY_NAME = {d.name: d for d in ALL}

_NUMPY = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16),
    "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
}
_FROM_NUMPY = {v: BY_NAME[k] for k, v in _NUMPY.items()}


def by_name(name: str) -> DType:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown element type '{name}'") from None


def from_numpy(dtype) -> DType:
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"no HLO element type for numpy dtype {np.dtype(dtype)}") from None

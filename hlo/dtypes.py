"""Element types of the IR, named as in XLA's HLO text (f32, s64, pred, s4, f8e4m3fn...).

Every type has a numpy type (ml_dtypes for bf16, the 8-, 4- and 2-bit types). Types
narrower than a byte (s4, u4, s2, u2, f4e2m1fn) take one byte per element, unpacked, as
ml_dtypes arrays do: the value sits in the low bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str        # HLO text name
    kind: str        # 'pred', 's' (signed int), 'u' (unsigned int), 'f' (float), 'c'
    bits: int        # bits of the value (4 for s4, stored in a byte)

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

    @property
    def is_narrow_float(self) -> bool:
        """Floats below f32: stored in their own format, computed in f32."""
        return self.kind == "f" and self.bits < 32

    @property
    def is_sub_byte(self) -> bool:
        """4- and 2-bit integers (f4e2m1fn is a narrow float)."""
        return self.is_integer and self.bits < 8

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def part(self) -> "DType":
        """The element type of a complex number's real and imaginary parts."""
        return {"c64": F32, "c128": F64}[self.name]

    @property
    def info(self):
        """ml_dtypes' finfo / iinfo: min, max (and for floats tiny, eps...)."""
        if self.is_float:
            return ml_dtypes.finfo(self.np)
        if self.is_integer:
            return ml_dtypes.iinfo(self.np)
        raise ValueError("pred has no numeric info")

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
S2, S4 = (DType(f"s{b}", "s", b) for b in (2, 4))
U2, U4 = (DType(f"u{b}", "u", b) for b in (2, 4))
# The float8 types of the OCP spec (FN: no infinities) and of Graphcore (FNUZ: no
# infinities, no negative zero, NaN is 0x80), OCP's FP4 and the E8M0 scale type.
F8E4M3FN = DType("f8e4m3fn", "f", 8)
F8E4M3FNUZ = DType("f8e4m3fnuz", "f", 8)
F8E5M2 = DType("f8e5m2", "f", 8)
F8E5M2FNUZ = DType("f8e5m2fnuz", "f", 8)
F4E2M1FN = DType("f4e2m1fn", "f", 4)
F8E8M0FNU = DType("f8e8m0fnu", "f", 8)

ALL = (PRED, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64,
       S2, S4, U2, U4, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F4E2M1FN, F8E8M0FNU)
BY_NAME = {d.name: d for d in ALL}
# Complex numbers, as XLA's text names them. No module holds them: an importer stores
# each complex value as a pair of floats (importers/xla/complex.py).
C64 = DType("c64", "c", 64)
C128 = DType("c128", "c", 128)
COMPLEX = {d.name: d for d in (C64, C128)}

_NUMPY = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16),
    "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "s2": np.dtype(ml_dtypes.int2), "s4": np.dtype(ml_dtypes.int4),
    "u2": np.dtype(ml_dtypes.uint2), "u4": np.dtype(ml_dtypes.uint4),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "f8e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}
_FROM_NUMPY = {v: BY_NAME[k] for k, v in _NUMPY.items() if k in BY_NAME}


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

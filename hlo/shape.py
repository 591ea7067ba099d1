"""Shapes: an element type, dimensions and a minor-to-major layout, or a tuple."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .dtypes import DType


@dataclass(frozen=True)
class Shape:
    dtype: DType | None                       # None for tuples
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] = ()              # minor_to_major, a permutation of range(rank)
    tuple_shapes: tuple["Shape", ...] | None = None

    @staticmethod
    def array(dtype: DType, dims, layout=None) -> "Shape":
        dims = tuple(int(d) for d in dims)
        if any(d < 0 for d in dims):
            raise ValueError(f"negative dimension in {dims}")
        layout = tuple(range(len(dims) - 1, -1, -1)) if layout is None else tuple(layout)
        if sorted(layout) != list(range(len(dims))):
            raise ValueError(f"layout {layout} is not a permutation of the {len(dims)} dims")
        return Shape(dtype, dims, layout)

    @staticmethod
    def tuple_(shapes) -> "Shape":
        return Shape(None, (), (), tuple(shapes))

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        return prod(self.dims)

    @property
    def byte_size(self) -> int:
        """Bytes of a dense array; for a tuple, the sum of its leaves."""
        if self.is_tuple:
            return sum(s.byte_size for s in self.tuple_shapes)
        return self.num_elements * self.dtype.itemsize

    @property
    def has_default_layout(self) -> bool:
        return self.layout == tuple(range(self.rank - 1, -1, -1))

    def with_dims(self, dims) -> "Shape":
        return Shape.array(self.dtype, dims)

    def with_dtype(self, dtype: DType) -> "Shape":
        return Shape.array(dtype, self.dims, self.layout)

    def leaves(self) -> list["Shape"]:
        if not self.is_tuple:
            return [self]
        return [leaf for s in self.tuple_shapes for leaf in s.leaves()]

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        dims = ",".join(str(d) for d in self.dims)
        layout = ",".join(str(d) for d in self.layout)
        return f"{self.dtype.name}[{dims}]{{{layout}}}"

    def __repr__(self) -> str:
        return f"Shape({self})"


def channels_minor(shape: Shape) -> Shape:
    """``shape`` (N, C, spatial...) laid out with the channels as the minor dim, then the
    spatial dims from the last, then the batch (NHWC in memory for N C H W)."""
    rank = shape.rank
    return Shape.array(shape.dtype, shape.dims, (1,) + tuple(range(rank - 1, 1, -1)) + (0,))

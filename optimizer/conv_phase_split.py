"""Convolution phase splitting: a convolution with base (lhs) dilation, such as a
transposed convolution, becomes one dense convolution per output phase.

Along a spatial dim with base dilation L (window stride 1), output o reads the
dilated, padded input at o + k*D - P for window position k (window dilation D, low
padding P), and only positions that are multiples of L hold input elements. Which
window positions hit one depends only on the output's phase o % L: for phase f they
are k = k0 + t*m (m = L / gcd(D, L)), and output q of the phase (o = L*q + f) reads
input element q + c + t*D/gcd(D, L), c = (f + k0*D - P) / L. So the phase is a
dense convolution with the kernel taps k0, k0 + m, ..., window dilation
D / gcd(D, L) and low padding -c (a crop of the input where that is negative).
A phase that no tap reaches is zero.

The phases' outputs (ceil(O / L) each) are stacked on a new major dim, transposed
so that each phase index follows its output dim, merged and sliced to the output
extent O: one fused copy. The dilated form multiplies L^d - 1 zeros for every
useful product and runs the generic loop nest; the phases do only the useful
products, on the fast dense kernels, for one extra output-sized buffer. Dims
without base dilation keep their window as it is.
"""
from __future__ import annotations

from itertools import product
from math import gcd

import numpy as np

from ..hlo import Computation, Instruction, Opcode, Shape, SliceSpec, Window, infer_shape
from .pipeline import ComputationPass
from .rewrite import apply_replacements


class ConvPhaseSplit(ComputationPass):
    name = "conv-phase-split"

    def run_on_computation(self, comp: Computation) -> bool:
        replaced = {}
        for instr in list(comp.instructions):
            if _splittable(instr):
                replaced[instr] = _Splitter(comp, instr).run()
        if replaced:
            apply_replacements(comp, replaced)
        return bool(replaced)


def _splittable(instr: Instruction) -> bool:
    if instr.opcode is not Opcode.CONVOLUTION:
        return False
    w = instr.attrs["window"]
    dilated = [i for i in range(w.rank) if w.lhs_dilation[i] > 1]
    return (bool(dilated) and all(w.stride[i] == 1 for i in dilated)
            and instr.attrs.get("batch_group_count", 1) == 1
            and instr.shape.num_elements > 0
            and all(o.shape.has_default_layout for o in [instr, *instr.operands]))


class _Splitter:
    def __init__(self, comp: Computation, conv: Instruction):
        self.comp, self.conv = comp, conv
        self.window = conv.attrs["window"]
        self.dn = conv.attrs["dimension_numbers"]
        self.dilated = [i for i in range(self.window.rank) if self.window.lhs_dilation[i] > 1]

    def add(self, opcode: Opcode, *operands, shape: Shape | None = None, called=(),
            **attrs) -> Instruction:
        s = infer_shape(opcode, [o.shape for o in operands], attrs, called, shape)
        return self.comp.add(Instruction(opcode, s, operands, attrs, called,
                                         name=f"{self.conv.name}.phase",
                                         metadata=self.conv.metadata))

    def run(self) -> Instruction:
        w, dn, out = self.window, self.dn, self.conv.shape
        taps = {i: self._taps(i) for i in self.dilated}
        per_phase = {i: -(-out.dims[dn.output_spatial[i]] // w.lhs_dilation[i])
                     for i in self.dilated}
        phases = [self._phase({i: taps[i][f] for i, f in zip(self.dilated, combo)}, per_phase)
                  for combo in product(*(range(w.lhs_dilation[i]) for i in self.dilated))]
        return self._interleave(phases, per_phase)

    def _taps(self, i: int) -> list:
        """Per phase f of spatial dim i: (first tap k0, tap step m, taps T, offset c), or
        None when no window position reaches an input element."""
        w = self.window
        size, dil, low, lhs = w.size[i], w.rhs_dilation[i], w.pad_low[i], w.lhs_dilation[i]
        step = lhs // gcd(dil, lhs)
        out = []
        for f in range(lhs):
            k0 = next((k for k in range(step) if (f + k * dil - low) % lhs == 0), None)
            if k0 is None or k0 >= size:
                out.append(None)
                continue
            out.append((k0, step, -(-(size - k0) // step), (f + k0 * dil - low) // lhs))
        return out

    def _phase(self, taps: dict, per_phase: dict) -> Instruction:
        """The dense convolution computing one phase (per_phase[i] outputs along dim i)."""
        x, k = self.conv.operands
        w, dn = self.window, self.dn
        dims = list(self.conv.shape.dims)
        for i, q in per_phase.items():
            dims[dn.output_spatial[i]] = q
        if any(t is None for t in taps.values()):
            return self._zeros(dims)
        size, dil = list(w.size), list(w.rhs_dilation)
        low, high = list(w.pad_low), list(w.pad_high)
        x_start, x_limit = [0] * x.shape.rank, list(x.shape.dims)
        k_start, k_limit, k_stride = [0] * k.shape.rank, list(k.shape.dims), [1] * k.shape.rank
        for i, (k0, step, count, c) in taps.items():
            dx, dk = dn.input_spatial[i], dn.kernel_spatial[i]
            k_start[dk], k_limit[dk], k_stride[dk] = k0, k0 + (count - 1) * step + 1, step
            size[i], dil[i] = count, w.rhs_dilation[i] * step // w.lhs_dilation[i]
            # reads input q + c + t * dil for q < per_phase[i]: crop what it never reads
            lo, n = -c, x.shape.dims[dx]
            hi = per_phase[i] - n - lo + (count - 1) * dil[i]
            if lo < 0:
                x_start[dx], lo = -lo, 0
            if hi < 0:
                x_limit[dx], hi = n + hi, 0
            if x_limit[dx] <= x_start[dx]:
                return self._zeros(dims)
            low[i], high[i] = lo, hi
        if x_start != [0] * x.shape.rank or x_limit != list(x.shape.dims):
            x = self.add(Opcode.SLICE, x, slice=SliceSpec(x_start, x_limit,
                                                          (1,) * x.shape.rank))
        if k_start != [0] * k.shape.rank or k_limit != list(k.shape.dims) or any(
                s != 1 for s in k_stride):
            k = self.add(Opcode.SLICE, k, slice=SliceSpec(k_start, k_limit, k_stride))
        window = Window(size, w.stride, low, high, (1,) * w.rank, dil)
        return self.add(Opcode.CONVOLUTION, x, k, window=window, dimension_numbers=dn,
                        feature_group_count=self.conv.attrs.get("feature_group_count", 1),
                        batch_group_count=1)

    def _zeros(self, dims) -> Instruction:
        dtype = self.conv.shape.dtype
        zero = self.comp.add(Instruction(Opcode.CONSTANT, Shape.array(dtype, ()),
                                         literal=np.zeros((), dtype.np),
                                         metadata=self.conv.metadata))
        return self.add(Opcode.BROADCAST, zero, shape=Shape.array(dtype, dims), dimensions=())

    def _interleave(self, phases: list, per_phase: dict) -> Instruction:
        """Output element (..., L*q + f, ...) is element q of phase f along each dim."""
        dn, out = self.dn, self.conv.shape
        part = phases[0].shape
        stacked = self.add(Opcode.CONCATENATE, *[
            self.add(Opcode.RESHAPE, p, shape=part.with_dims((1,) + part.dims))
            for p in phases], dimension=0)
        lhs = [self.window.lhs_dilation[i] for i in self.dilated]
        split = self.add(Opcode.RESHAPE, stacked, shape=part.with_dims(tuple(lhs) + part.dims))
        where = {dn.output_spatial[i]: n for n, i in enumerate(self.dilated)}
        perm, merged = [], []
        for d in range(out.rank):
            perm.append(len(lhs) + d)
            if d in where:
                perm.append(where[d])
                merged.append(part.dims[d] * lhs[where[d]])
            else:
                merged.append(part.dims[d])
        moved = self.add(Opcode.TRANSPOSE, split, dimensions=tuple(perm))
        flat = self.add(Opcode.RESHAPE, moved, shape=part.with_dims(merged))
        if tuple(merged) == out.dims:
            return flat
        return self.add(Opcode.SLICE, flat, slice=SliceSpec((0,) * out.rank, out.dims,
                                                            (1,) * out.rank))


__all__ = ["ConvPhaseSplit"]

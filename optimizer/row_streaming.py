"""Row streaming: a chain of convolutions, pools and element-wise ops computed band by
band of rows, so that only a few rows of each map inside the chain are ever live.

While a layer runs, every planner keeps its whole input and its whole output. A chain
of layers need not: its last map can be computed a band of rows at a time, each band
from the rows of the maps before it that its windows reach. Kept from one band to the
next are only the rows a later band's windows still read (a convolution's
``kernel_h - stride`` rows), so nothing is computed twice: the chain's arithmetic is
the same, its maps' bytes a few rows each. The chain's input and its output stay
whole: the output is built in place band by band (a pad, then dynamic-update-slices);
an output that is a reduction over rows (global pooling) is accumulated band by band
and never exists as a map at all.

The chain (a *region*) is found from its sink, the last instruction: every
instruction it reaches through row operands (a convolution's or reduce-window's
input, every operand of an element-wise op) that is itself row-local, and whose
every use is a row operand of another member. Row-local: a 4-D row-major value with
rows on dimension 2 (NCHW, as the importer writes it) made by

    a convolution (bf01 dimension labels, no base dilation, one batch group),
    a reduce-window (a pool: a window of one along dimensions 0 and 1),
    a pad without interior padding (an integer convolution's zero point),
    an element-wise op of same-shaped (or scalar) operands.

Values from outside the chain (its input, the skip of a residual from before it,
constants) are read whole, a band's rows sliced from them; a broadcast that does not
broadcast into the rows (a bias, a ReLU's zero) is broadcast again to the band.

For band j the rows each member must compute come backwards from the sink: a user
needs the rows its windows reach for the rows it computes (clipped to the map; the
clipped part becomes the band's window padding). A member read by a window
(*retaining*) keeps its band as the rows still needed from the previous band followed
by the rows computed now; any other member computes exactly what its users need.

The rewrite trades memory for code: every band is instructions of its own. Whether
it pays is the memory planner's question: the driver plans the module with and
without it (``optimizer.alternatives``) and keeps the smaller arena.
"""
from __future__ import annotations

import numpy as np

from ..hlo import Computation, Instruction, Module, Opcode, Shape, SliceSpec, Window, infer_shape
from ..hlo.attributes import ConvDimensionNumbers, PaddingConfig
from ..hlo.dtypes import S32
from ..hlo.opcodes import ELEMENTWISE
from .rewrite import apply_replacements

ROW = 2                               # the rows of an NCHW map
_NCHW = ConvDimensionNumbers.nchw(2)
# Reducers whose partial results over bands combine with the reducer itself; init is
# applied once per band, so it must be the reducer's identity (max and min: any init).
_IDENTITY = {Opcode.ADD: 0.0, Opcode.MULTIPLY: 1.0, Opcode.MAXIMUM: None, Opcode.MINIMUM: None}


# The most band computations (a member's band) one region may become: each is code and
# a step of its own, and the planner's and LLVM's time grows with their number (a
# 96x96 MobileNet's region is about 1,100 at one row per band).
MAX_BANDS = 4000


class RowStreaming:
    """Stream every region of the entry computation, ``band_rows`` rows per band, that
    becomes at most ``max_bands`` band computations. ``chains`` says what it streamed
    (for ``--report-memory``): per region its sink, its members' count and its biggest
    map's bytes, which now live as bands."""
    name = "row-streaming"

    def __init__(self, band_rows: int = 1, max_bands: int = MAX_BANDS):
        self.band_rows = band_rows
        self.max_bands = max_bands
        self.chains: list[dict] = []

    def run(self, module: Module) -> bool:
        comp = module.entry
        outputs = set(module.output_instructions)
        made: set = set()              # what a rewrite wrote: bands already
        changed = False
        while True:
            region = _next_region(comp, outputs, made,
                                  lambda m: -(-m.shape.dims[ROW] // self.band_rows),
                                  self.max_bands)
            if region is None:
                return changed
            sink, members = region
            self.chains.append({"sink": sink, "members": len(members),
                                "biggest_map_bytes": max(m.shape.byte_size for m in members)})
            before = set(comp.instructions)
            new = _Streamer(comp, sink, members, self.band_rows).run()
            made |= set(comp.instructions) - before
            apply_replacements(comp, {sink: new})
            comp.instructions = comp.reachable()     # the chain it replaced
            changed = True


# -- which instructions stream ------------------------------------------------------------

def _map(shape: Shape) -> bool:
    return not shape.is_tuple and shape.rank == 4 and shape.has_default_layout \
        and shape.num_elements > 0


def row_window(instr: Instruction) -> tuple[int, int, int, int] | None:
    """(size, stride, pad_low, dilation) of ``instr``'s window along the rows, for the
    convolutions and reduce-windows that stream; None for any other instruction."""
    if instr.opcode is Opcode.CONVOLUTION:
        w = instr.attrs["window"]
        if (instr.attrs["dimension_numbers"] != _NCHW or w.rank != 2
                or any(d != 1 for d in w.lhs_dilation)
                or instr.attrs.get("batch_group_count", 1) != 1
                or not all(_map(o.shape) for o in instr.operands)):
            return None
        return w.size[0], w.stride[0], w.pad_low[0], w.rhs_dilation[0]
    if instr.opcode is Opcode.REDUCE_WINDOW:
        w = instr.attrs["window"]
        if (len(instr.operands) != 2 or w.rank != 4 or not _map(instr.operands[0].shape)
                or any(w.size[d] != 1 or w.stride[d] != 1 or w.pad_low[d] or w.pad_high[d]
                       or w.rhs_dilation[d] != 1 for d in (0, 1))
                or any(d != 1 for d in w.lhs_dilation)):
            return None
        return w.size[ROW], w.stride[ROW], w.pad_low[ROW], w.rhs_dilation[ROW]
    if instr.opcode is Opcode.PAD:
        # An edge pad is a window of one row: the zero point around an integer
        # convolution's input.
        p = instr.attrs["padding"]
        if any(p.interior) or not _map(instr.operands[0].shape):
            return None
        return 1, 1, p.low[ROW], 1
    return None


def _row_local(instr: Instruction) -> bool:
    if not _map(instr.shape):
        return False
    if instr.opcode in ELEMENTWISE:
        # Scalar operands: a clamp's bounds.
        return all(o.shape.rank == 0 or (o.shape.dims == instr.shape.dims
                                         and o.shape.has_default_layout)
                   for o in instr.operands)
    return row_window(instr) is not None and not _global_window(instr)


def _row_operands(instr: Instruction) -> tuple[int, ...]:
    """The operands whose rows ``instr``'s rows read."""
    if instr.opcode in (Opcode.CONVOLUTION, Opcode.REDUCE_WINDOW, Opcode.REDUCE, Opcode.PAD):
        return (0,)
    return tuple(k for k, o in enumerate(instr.operands) if o.shape.rank)


def _reduction_sink(instr: Instruction) -> bool:
    """A reduction over all rows whose per-band results combine with its reducer
    (global pooling): a reduce over the rows, or a reduce-window whose window is the
    whole map's rows."""
    if len(instr.operands) != 2 or not _map(instr.operands[0].shape):
        return False
    if instr.opcode is Opcode.REDUCE:
        if ROW not in instr.attrs["dimensions"]:
            return False
    elif not _global_window(instr):
        return False
    root, init = instr.called[0].root, instr.operands[1]
    if root.opcode not in _IDENTITY or init.opcode is not Opcode.CONSTANT:
        return False
    if {p.opcode for p in root.operands} != {Opcode.PARAMETER} or len(set(root.operands)) != 2:
        return False
    identity = _IDENTITY[root.opcode]
    return identity is None or float(init.literal) == identity


def _global_window(instr: Instruction) -> bool:
    """A reduce-window over every row at once, and over nothing else but columns."""
    if instr.opcode is not Opcode.REDUCE_WINDOW or row_window(instr) is None:
        return False
    w, height = instr.attrs["window"], instr.operands[0].shape.dims[ROW]
    return (w.size[ROW] == height and instr.shape.dims[ROW] == 1 and height > 1
            and not w.pad_low[ROW] and not w.pad_high[ROW] and w.rhs_dilation[ROW] == 1)


def _next_region(comp: Computation, outputs: set, made: set, bands, max_bands: int):
    """The last sink (in order) whose region holds a window and becomes at most
    ``max_bands`` bands (``bands(member)`` each), and its members. (A sink whose only
    window is its own reads its input from outside: nothing to stream.)"""
    users = comp.users()
    for sink in reversed(comp.instructions):
        if sink in made or not (_reduction_sink(sink) or _row_local(sink)):
            continue
        members = _region(sink, users, outputs, made)
        if any(row_window(m) is not None for m in members) \
                and sum(bands(m) for m in members) <= max_bands:
            return sink, members
    return None


def _region(sink: Instruction, users: dict, outputs: set, made: set) -> set:
    members: set = set()
    stack = [sink.operands[k] for k in _row_operands(sink)]
    while stack:
        i = stack.pop()
        if i in members or i in made or not _row_local(i):
            continue
        members.add(i)
        stack.extend(i.operands[k] for k in _row_operands(i))
    # A member read other than through a row operand of a member (a model output, a
    # layer after the chain, a kernel's weights) must exist whole: it leaves the
    # region, and so do the members only it reads.
    inside = members | {sink}
    changed = True
    while changed:
        changed = False
        for m in list(members):
            read_whole = m in outputs or any(
                u not in inside or any(u.operands[k] is m for k in range(len(u.operands))
                                       if k not in _row_operands(u))
                for u in users[m])
            if read_whole:
                members.discard(m)
                inside.discard(m)
                changed = True
    return members


# -- the rewrite ---------------------------------------------------------------------------

class _Streamer:
    def __init__(self, comp: Computation, sink: Instruction, members: set, band_rows: int):
        self.comp, self.sink, self.band_rows = comp, sink, band_rows
        self.reduction = _reduction_sink(sink)
        order = {id(i): n for n, i in enumerate(comp.instructions)}
        self.members = sorted(members, key=lambda i: order[id(i)])
        self.users = {m: [] for m in self.members}      # the members reading each
        for u in self.members + [sink]:
            for k in _row_operands(u):
                o = u.operands[k]
                if o in self.users and u not in self.users[o]:
                    self.users[o].append(u)
        self.held: dict = {}           # member -> (instruction, first row, end row)
        self.constants: dict = {}      # scalar constants, made once per rewrite
        self.done: dict = {m: 0 for m in self.members + [sink]}   # rows computed so far

    def add(self, opcode: Opcode, *operands, shape: Shape | None = None, called=(),
            like: Instruction | None = None, **attrs) -> Instruction:
        s = infer_shape(opcode, [o.shape for o in operands], attrs, called, shape)
        like = like or self.sink
        return self.comp.add(Instruction(opcode, s, operands, attrs, called,
                                         name=f"{like.name}.rows", metadata=like.metadata))

    def run(self) -> Instruction:
        height = self._sink_rows()
        acc = None
        for a in range(0, height, self.band_rows):
            b = min(a + self.band_rows, height)
            self._ensure_operands(self.sink, a, b)
            part = self._sink_band(a, b)
            self.done[self.sink] = b
            acc = self._accumulate(acc, part, a, height)
        return acc

    def _sink_rows(self) -> int:
        if self.reduction:
            return self.sink.operands[0].shape.dims[ROW]
        return self.sink.shape.dims[ROW]

    # -- which rows are computed when: pulled from the sink, a band at a time --
    def _reads(self, user: Instruction, a: int, b: int) -> tuple[int, int]:
        """The rows of its row operands that ``user`` reads for its rows [a, b)."""
        if user is self.sink and self.reduction:
            return a, b
        return _reads(user, (a, b))

    def _ensure_operands(self, m: Instruction, a: int, b: int) -> None:
        _, hi = self._reads(m, a, b)
        for k in _row_operands(m):
            o = m.operands[k]
            if o in self.done:
                self._ensure(o, hi)

    def _ensure(self, m: Instruction, hi: int) -> None:
        """Compute ``m``'s rows up to ``hi``, ``band_rows`` at a time, each band after
        the rows of its operands it reads: the chain fills row by row, so no map
        holds more than the rows its readers' windows still need."""
        while self.done[m] < hi:
            a = self.done[m]
            b = min(a + self.band_rows, hi)
            self._ensure_operands(m, a, b)
            self._compute(m, a, b)

    def _keep_from(self, m: Instruction) -> int:
        """The first row of ``m`` a reader still needs: where its next band's windows
        start."""
        return min(self._reads(u, self.done[u], self.done[u] + 1)[0] for u in self.users[m])

    def _compute(self, m: Instruction, a: int, b: int) -> None:
        new = self._band(m, a, b)
        keep = min(self._keep_from(m), a)
        value = new
        if keep < a:
            value = self.add(Opcode.CONCATENATE, self._rows(m, keep, a), new, like=m,
                             dimension=ROW)
        self.held[m] = (value, keep, b)
        self.done[m] = b

    def _rows(self, value: Instruction, lo: int, hi: int) -> Instruction:
        """Rows [lo, hi) of ``value``: a member's held band or a whole value from
        outside."""
        if value in self.held:
            instr, first, end = self.held[value]
            assert first <= lo and hi <= end, (value.name, first, end, lo, hi)
            lo, hi, value = lo - first, hi - first, instr
        dims = value.shape.dims
        if lo == 0 and hi == dims[ROW]:
            return value
        if value.opcode is Opcode.BROADCAST and ROW not in value.attrs["dimensions"]:
            return self.add(Opcode.BROADCAST, value.operands[0], like=value,
                            shape=value.shape.with_dims(_with_rows(dims, hi - lo)),
                            dimensions=value.attrs["dimensions"])
        starts = [0, 0, lo, 0]
        limits = list(dims[:ROW]) + [hi, dims[3]]
        return self.add(Opcode.SLICE, value, like=value,
                        slice=SliceSpec(starts, limits, (1, 1, 1, 1)))

    def _band(self, m: Instruction, a: int, b: int) -> Instruction:
        """``m``'s rows [a, b) computed from its operands' rows."""
        if m.opcode in ELEMENTWISE:
            return self.add(m.opcode, *(self._rows(o, a, b) if o.shape.rank else o
                                        for o in m.operands), like=m,
                            shape=m.shape.with_dims(_with_rows(m.shape.dims, b - a)),
                            **m.attrs)
        return self._windowed(m, a, b)

    def _windowed(self, m: Instruction, a: int, b: int) -> Instruction:
        x = m.operands[0]
        lo, hi = _reach(m, a, b)
        height = x.shape.dims[ROW]
        first, last = max(lo, 0), min(hi, height)
        shape = m.shape.with_dims(_with_rows(m.shape.dims, b - a))
        if first >= last:
            # Windows in the padding alone: the pad value (a pad's, a reduce-window's
            # init), or a convolution's zero.
            fill = (self._constant(np.zeros((), m.shape.dtype.np), m.shape.dtype)
                    if m.opcode is Opcode.CONVOLUTION else m.operands[1])
            return self.add(Opcode.BROADCAST, fill, like=m, shape=shape, dimensions=())
        band = self._rows(x, first, last)
        if m.opcode is Opcode.PAD:
            p = m.attrs["padding"]
            low, high = list(p.low), list(p.high)
            low[ROW], high[ROW] = first - lo, hi - last
            return self.add(Opcode.PAD, band, m.operands[1], like=m, shape=shape,
                            padding=PaddingConfig(low, high, p.interior))
        w = m.attrs["window"]
        d = 0 if m.opcode is Opcode.CONVOLUTION else ROW
        pad_low = list(w.pad_low)
        pad_high = list(w.pad_high)
        pad_low[d], pad_high[d] = first - lo, hi - last
        window = Window(w.size, w.stride, pad_low, pad_high, w.lhs_dilation, w.rhs_dilation)
        attrs = dict(m.attrs, window=window)
        return self.add(m.opcode, band, *m.operands[1:], like=m, called=m.called,
                        shape=shape, **attrs)

    # -- the sink --
    def _sink_band(self, a: int, b: int) -> Instruction:
        s = self.sink
        if not self.reduction:
            return self._band(s, a, b)
        attrs = dict(s.attrs)
        if s.opcode is Opcode.REDUCE_WINDOW:
            w = s.attrs["window"]
            size, stride = list(w.size), list(w.stride)
            size[ROW] = stride[ROW] = b - a
            attrs["window"] = Window(size, stride, w.pad_low, w.pad_high, w.lhs_dilation,
                                     w.rhs_dilation)
        return self.add(s.opcode, self._rows(s.operands[0], a, b), s.operands[1],
                        called=s.called, shape=s.shape, **attrs)

    def _accumulate(self, acc, part: Instruction, a: int, height: int) -> Instruction:
        s = self.sink
        if self.reduction:
            if acc is None:
                return part
            return self.add(s.called[0].root.opcode, acc, part)
        if acc is None:
            rows = part.shape.dims[ROW]
            if rows == height:
                return part
            zero = self._constant(np.zeros((), s.shape.dtype.np), s.shape.dtype)
            return self.add(Opcode.PAD, part, zero,
                            padding=PaddingConfig((0, 0, 0, 0), (0, 0, height - rows, 0),
                                                  (0, 0, 0, 0)))
        index = [self._constant(np.array(v, np.int32), S32) for v in (0, 0, a, 0)]
        return self.add(Opcode.DYNAMIC_UPDATE_SLICE, acc, part, *index)

    def _constant(self, value: np.ndarray, dtype) -> Instruction:
        """A scalar constant, one instruction for all the bands that use it."""
        key = (dtype.name, value.tobytes())
        if key not in self.constants:
            self.constants[key] = self.comp.add(Instruction(
                Opcode.CONSTANT, Shape.array(dtype, ()), literal=value, name="constant",
                metadata=self.sink.metadata))
        return self.constants[key]


def _with_rows(dims, rows: int) -> tuple:
    return tuple(dims[:ROW]) + (rows,) + tuple(dims[ROW + 1:])


def _reach(m: Instruction, a: int, b: int) -> tuple[int, int]:
    """The input rows [lo, hi) the windows of output rows [a, b) of ``m`` reach, padding
    included (lo may be negative, hi past the map)."""
    size, stride, pad_low, dilation = row_window(m)
    return a * stride - pad_low, (b - 1) * stride - pad_low + dilation * (size - 1) + 1


def _reads(user: Instruction, rows: tuple[int, int]) -> tuple[int, int]:
    """The rows of its row operand that ``user`` reads for its rows ``rows``, within
    the operand's map."""
    a, b = rows
    if row_window(user) is None:
        return a, b
    lo, hi = _reach(user, a, b)
    height = user.operands[0].shape.dims[ROW]
    return max(lo, 0), min(hi, height)

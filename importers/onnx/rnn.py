"""Recurrent ONNX ops: RNN, GRU and LSTM, each an HLO while over the time steps.

As real implementations do, the input projection of every time step (X W^T plus the
biases that do not depend on the state) is one matrix product before the loop. The
loop body does the recurrent
product (H R^T, batched over the directions), the gates and the state update, and
writes its step's rows of Y with dynamic-update-slice (in place in the loop state,
which lives in the caller's output buffer when Y is a model output). Both directions
of a bidirectional network run in the same loop; the reverse one reads and writes
step T-1-t.

The hoisted projection is a buffer of steps x batch x gates live across the whole
loop, often most of the arena of a small model. The other form projects each step's
inputs inside the loop (as TensorFlow Lite Micro does): one more product per step, no
such buffer; optimizer/projection_sinking.py rewrites the loop into it, and
xlac.compile plans both and keeps the smaller arena.

sequence_lens: at a step t >= len(b), batch element b keeps its state and its Y rows
are zeros (ONNX). The reverse direction then reads each sequence in reverse within its
own length (a gather before the loop) and its rows of Y are put back in order after
the loop (the same gather).

Activations (``activations``, ``activation_alpha``/``activation_beta``, per direction),
``clip`` (applied to the input of every activation), GRU's ``linear_before_reset``,
LSTM's peepholes and ``input_forget`` (the forget gate is 1 - the input gate) and
``layout`` 0/1 follow the ONNX operator definitions.
"""
from __future__ import annotations

import numpy as np

from ...hlo import (Builder, DotDimensionNumbers, GatherDimensionNumbers, Instruction, Opcode,
                    Shape, dtypes)
from ...hlo.while_loop import WhileLoop
from .context import ImportContext, node_label
from .quantization import dynamic_quantized, integer_matmul, scaled_product
from .registry import MS, register

S64 = dtypes.S64
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                        "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# name -> (takes alpha, takes beta, default alpha, default beta), as onnxruntime reads the
# activation_alpha / activation_beta lists: in order, one value per activation using it.
_ACTIVATIONS = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0), "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0), "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0), "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}


@register("RNN", since=1, ignore=("output_sequence",))
def rnn(ctx, node):
    return _Recurrent(ctx, node, "RNN").lower()


@register("GRU", since=1, ignore=("output_sequence",))
def gru(ctx, node):
    return _Recurrent(ctx, node, "GRU").lower()


@register("LSTM", since=1, ignore=("output_sequence",))
def lstm(ctx, node):
    return _Recurrent(ctx, node, "LSTM").lower()


@register("DynamicQuantizeLSTM", since=1, domain=MS)
def dynamic_quantize_lstm(ctx, node):
    # onnxruntime's LSTM over 8-bit W (dirs, K, 4H) and R (dirs, H, 4H): each product an
    # integer GEMM (_QuantizedWeights), the rest as LSTM's.
    return _Recurrent(ctx, node, "LSTM", quantized=True).lower()


def _full(b: Builder, value, dtype, dims) -> Instruction:
    return b.broadcast(b.constant(np.asarray(value, dtype.np), dtype), tuple(dims), ())


class _Recurrent:
    def __init__(self, ctx: ImportContext, node, kind: str, quantized: bool = False):
        self.ctx, self.node, self.kind = ctx, node, kind
        self.label = node_label(node)
        self.gates = _GATES[kind]
        x, w, r = (ctx.input(node, i) for i in range(3))
        if x is None or w is None or r is None:
            raise ctx.error(node, "needs X, W and R")
        self.bias = ctx.input(node, 3)
        self.lens = ctx.input(node, 4)
        self.h0 = ctx.input(node, 5)
        self.c0 = ctx.input(node, 6) if kind == "LSTM" else None
        self.peep = ctx.input(node, 7) if kind == "LSTM" else None
        self.x, self.w, self.r = x, w, r
        direction = ctx.attr(node, "direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error(node, f"unknown direction '{direction}'")
        self.dirs = 2 if direction == "bidirectional" else 1
        # Direction d reads its sequence backwards.
        self.backward = [direction == "reverse" or d == 1 for d in range(self.dirs)]
        self.layout = ctx.attr(node, "layout", 0)
        if self.layout not in (0, 1):
            raise ctx.error(node, f"unsupported layout {self.layout}")
        self.clip = ctx.attr(node, "clip", None)
        self.lbr = ctx.attr(node, "linear_before_reset", 0) if kind == "GRU" else 0
        self.input_forget = ctx.attr(node, "input_forget", 0) if kind == "LSTM" else 0
        if x.shape.rank != 3:
            raise ctx.error(node, f"X must have rank 3, got {x.shape}")
        self.steps, self.batch = (x.shape.dims[0], x.shape.dims[1]) if self.layout == 0 \
            else (x.shape.dims[1], x.shape.dims[0])
        hidden = ctx.attr(node, "hidden_size", r.shape.dims[1 if quantized else -1]
                          if r.shape.rank == 3 else 0)
        self.hidden = hidden
        g = self.gates * hidden
        inputs = x.shape.dims[2]
        self.quantized = quantized
        if quantized:
            self._expect("W", w, (self.dirs, inputs, g))
            self._expect("R", r, (self.dirs, hidden, g))
            self.w = _QuantizedWeights.read(ctx, node, w, ctx.input(node, 8), ctx.input(node, 9))
            self.r = _QuantizedWeights.read(ctx, node, r, ctx.input(node, 10),
                                            ctx.input(node, 11))
        else:
            self._expect("W", w, (self.dirs, g, inputs))
            self._expect("R", r, (self.dirs, g, hidden))
        if self.bias is not None:
            self._expect("B", self.bias, (self.dirs, 2 * g))
        if self.peep is not None:
            self._expect("P", self.peep, (self.dirs, 3 * hidden))
        state = (self.dirs, self.batch, hidden) if self.layout == 0 \
            else (self.batch, self.dirs, hidden)
        for name, v in (("initial_h", self.h0), ("initial_c", self.c0)):
            if v is not None:
                self._expect(name, v, state)
        if self.lens is not None:
            self._expect("sequence_lens", self.lens, (self.batch,))
        self.dtype = x.shape.dtype
        if not self.dtype.is_float:
            raise ctx.error(node, f"X must be a float tensor, got {x.shape}")
        self.activations = self._activations()

    def _expect(self, name: str, v: Instruction, dims) -> None:
        if v.shape.dims != tuple(dims):
            raise self.ctx.error(self.node, f"{name} is {v.shape}, expected dims {tuple(dims)}")

    def _activations(self) -> list[list[tuple[str, float, float]]]:
        """Per direction, per activation slot: (name, alpha, beta)."""
        ctx, node = self.ctx, self.node
        per = len(_DEFAULT_ACTIVATIONS[self.kind])
        names = list(ctx.attr(node, "activations", _DEFAULT_ACTIVATIONS[self.kind] * self.dirs))
        if len(names) == per and self.dirs == 2:
            names = names * 2
        if len(names) != per * self.dirs:
            raise ctx.error(node, f"activations lists {len(names)} functions, expected "
                                  f"{per * self.dirs}")
        alphas = iter(ctx.attr(node, "activation_alpha", ()))
        betas = iter(ctx.attr(node, "activation_beta", ()))
        out = []
        for name in names:
            key = name.lower()
            if key not in _ACTIVATIONS:
                raise ctx.error(node, f"unsupported activation '{name}'")
            takes_alpha, takes_beta, alpha, beta = _ACTIVATIONS[key]
            alpha = next(alphas, alpha) if takes_alpha else alpha
            beta = next(betas, beta) if takes_beta else beta
            out.append((key, float(alpha), float(beta)))
        return [out[d * per:(d + 1) * per] for d in range(self.dirs)]

    # -- before the loop ----------------------------------------------------------------

    def lower(self) -> list[Instruction]:
        ctx, b = self.ctx, self.ctx.b
        dt, dirs, hidden = self.dtype, self.dirs, self.hidden
        g = self.gates * hidden
        time_axis = 0 if self.layout == 0 else 1
        recurrent_bias, bias = None, None
        if self.bias is not None:
            wb = b.slice(self.bias, (0, 0), (dirs, g))
            rb = b.slice(self.bias, (0, g), (dirs, 2 * g))
            if self.kind == "GRU" and self.lbr:
                # Rb_h is added to H Rh^T before the reset gate multiplies it.
                recurrent_bias = b.slice(rb, (0, 2 * hidden), (dirs, g))
                rb = b.concatenate([b.slice(rb, (0, 0), (dirs, 2 * hidden)),
                                    _full(b, 0, dt, (dirs, hidden))], 1)
            bias = b.op(Opcode.ADD, wb, rb)                           # [dirs, g]
        # The projection of every step: [T, B, dirs*g] (layout 0) or [B, T, dirs*g].
        if self.quantized:
            rows = b.concatenate([self.w.direction_product(ctx, self.x, d) for d in range(dirs)], 2)
        else:
            w = b.reshape(self.w, (dirs * g, self.w.shape.dims[2]))
            rows = b.dot(self.x, w, DotDimensionNumbers((), (2,), (), (1,)))
        if bias is not None:
            rows = b.op(Opcode.ADD, rows, b.broadcast(b.reshape(bias, (dirs * g,)),
                                                      rows.shape.dims, (2,)))
        lens = None
        if self.lens is not None:
            known = ctx.value_of(self.lens)
            if known is None or any(int(v) != self.steps for v in known.reshape(-1)):
                lens = b.convert(self.lens, S64)
        # Each direction's source of projected rows: (array, column of its rows, whether
        # step t reads row T-1-t).
        sources = []
        for d in range(dirs):
            column = d * g
            if lens is not None and self.backward[d]:
                part = b.slice(rows, (0, 0, column), rows.shape.dims[:2] + (column + g,))
                sources.append((_reverse_sequence(b, part, lens, time_axis), 0, False))
            else:
                sources.append((rows, column, self.backward[d]))
        h0 = self._initial(self.h0)
        c0 = self._initial(self.c0) if self.kind == "LSTM" else None
        wants_y = len(self.node.output) > 0 and self.node.output[0] != ""
        y_dims = (self.steps, dirs, self.batch, hidden) if self.layout == 0 \
            else (self.batch, self.steps, dirs, hidden)
        inits = [ctx.scalar(0, S64), h0] + ([c0] if c0 is not None else []) \
            + ([ctx.full(0, dt, y_dims)] if wants_y else [])
        lp = WhileLoop(ctx, self.label, inits)
        elements = iter(lp.body_elements)
        t, h = next(elements), next(elements)
        c = next(elements) if c0 is not None else None
        y = next(elements) if wants_y else None
        self.b = lp.body
        captured: dict[Instruction, Instruction] = {}
        for a, _, _ in sources:
            if a not in captured:
                captured[a] = lp.capture(a)[1]
        body_sources = [(captured[a], col, back) for a, col, back in sources]
        r = self.r.in_loop(ctx, lp) if self.quantized else _Weights(b, lp, self.r)
        peep = lp.capture(self.peep)[1] if self.peep is not None else None
        rbias = lp.capture(recurrent_bias)[1] if recurrent_bias is not None else None
        body_lens = lp.capture(lens)[1] if lens is not None else None
        new = self._step(t, h, c, y, body_sources, r, peep, rbias, body_lens, time_axis)
        cond = lp.cond.compare(lp.cond_elements[0], lp.cond.constant(self.steps, S64), "LT")
        results = iter(lp.finish(cond, new))
        next(results)
        h_end = next(results)
        c_end = next(results) if c0 is not None else None
        y_end = next(results) if wants_y else None
        if y_end is not None and lens is not None and any(self.backward):
            y_end = self._reorder_backward_rows(y_end, lens)
        if self.layout == 1:
            h_end = b.transpose(h_end, (1, 0, 2))
            c_end = b.transpose(c_end, (1, 0, 2)) if c_end is not None else None
        return [y_end, h_end] + ([c_end] if self.kind == "LSTM" else [])

    def _initial(self, v: Instruction | None) -> Instruction:
        b = self.ctx.b
        if v is None:
            return self.ctx.full(0, self.dtype, (self.dirs, self.batch, self.hidden))
        return v if self.layout == 0 else b.transpose(v, (1, 0, 2))

    def _reorder_backward_rows(self, y: Instruction, lens: Instruction) -> Instruction:
        """The reverse directions wrote their rows in step order: reverse each sequence
        within its length, as the source rows were."""
        b = self.ctx.b
        dir_axis, time_axis = (1, 0) if self.layout == 0 else (2, 1)
        parts = []
        for d in range(self.dirs):
            lo = [0] * 4
            hi = list(y.shape.dims)
            lo[dir_axis], hi[dir_axis] = d, d + 1
            part = b.slice(y, lo, hi)
            if self.backward[d]:
                dims = part.shape.dims
                rows = b.reshape(part, dims[:dir_axis] + dims[dir_axis + 1:])
                part = b.reshape(_reverse_sequence(b, rows, lens, time_axis), dims)
            parts.append(part)
        return b.concatenate(parts, dir_axis)

    # -- the loop body --------------------------------------------------------------------

    def _step(self, t, h, c, y, sources, r, peep, rbias, lens, time_axis):
        b = self.b
        dt, dirs, hidden, batch = self.dtype, self.dirs, self.hidden, self.batch
        g = self.gates * hidden
        last = b.constant(self.steps - 1, S64)
        back_t = b.op(Opcode.SUBTRACT, last, t) if any(bk for _, _, bk in sources) else None
        zero = b.constant(0, S64)
        rows = []
        for src, col, back in sources:
            row = back_t if back else t
            starts = [zero, zero, b.constant(col, S64)]
            starts[time_axis] = row
            sizes = [batch, batch, g]
            sizes[time_axis] = 1
            part = b.op(Opcode.DYNAMIC_SLICE, src, *starts, dynamic_slice_sizes=tuple(sizes))
            rows.append(b.reshape(part, (1, batch, g)))
        x = b.concatenate(rows, 0)                               # [dirs, B, g]
        if self.kind == "GRU":
            new_h = self._gru(x, h, r, rbias)
            new_c = None
        elif self.kind == "LSTM":
            new_h, new_c = self._lstm(b.op(Opcode.ADD, x, r.product(b, h)), c, peep)
        else:
            new_h, new_c = self._act(0, b.op(Opcode.ADD, x, r.product(b, h))), None
        out_h = new_h
        if lens is not None:
            # Past its length a sequence keeps its state and gives zeros.
            live = b.compare(b.broadcast(t, (batch,), ()), lens, "LT")
            live = b.broadcast(live, (dirs, batch, hidden), (1,))
            out_h = b.op(Opcode.SELECT, live, new_h, _full(b, 0, dt, new_h.shape.dims))
            new_h = b.op(Opcode.SELECT, live, new_h, h)
            if new_c is not None:
                new_c = b.op(Opcode.SELECT, live, new_c, c)
        new = [b.op(Opcode.ADD, t, b.constant(1, S64)), new_h]
        if new_c is not None:
            new.append(new_c)
        if y is not None:
            for d, (_, _, back) in enumerate(sources):
                row = b.slice(out_h, (d, 0, 0), (d + 1, batch, hidden))
                at = [zero] * 4
                if self.layout == 0:
                    row = b.reshape(row, (1, 1, batch, hidden))
                    at[0], at[1] = back_t if back else t, b.constant(d, S64)
                else:
                    row = b.reshape(row, (batch, 1, 1, hidden))
                    at[1], at[2] = back_t if back else t, b.constant(d, S64)
                y = b.op(Opcode.DYNAMIC_UPDATE_SLICE, y, row, *at)
            new.append(y)
        return new

    def _gate(self, x: Instruction, k: int, width: int | None = None) -> Instruction:
        """Gate k ([dirs, B, H]) of stacked gates ``x``."""
        hidden = width or self.hidden
        return self.b.slice(x, (0, 0, k * hidden), (self.dirs, self.batch, (k + 1) * hidden))

    def _peephole(self, peep: Instruction, k: int) -> Instruction:
        b = self.b
        p = b.slice(peep, (0, k * self.hidden), (self.dirs, (k + 1) * self.hidden))
        return b.broadcast(p, (self.dirs, self.batch, self.hidden), (0, 2))

    def _lstm(self, gates, c, peep):
        b = self.b
        mul = lambda p, q: b.op(Opcode.MULTIPLY, p, q)   # noqa: E731
        add = lambda p, q: b.op(Opcode.ADD, p, q)        # noqa: E731
        # Gate order in W, R, B: i, o, f, c; in P: i, o, f.
        gi, go, gf, gc = (self._gate(gates, k) for k in range(4))
        if peep is not None:
            gi = add(gi, mul(self._peephole(peep, 0), c))
            gf = add(gf, mul(self._peephole(peep, 2), c))
        i = self._act(0, gi)
        f = self._act(0, gf) if not self.input_forget else \
            b.op(Opcode.SUBTRACT, _full(b, 1, self.dtype, i.shape.dims), i)
        new_c = add(mul(f, c), mul(i, self._act(1, gc)))
        if peep is not None:
            go = add(go, mul(self._peephole(peep, 1), new_c))
        o = self._act(0, go)
        return mul(o, self._act(2, new_c)), new_c

    def _gru(self, x, h, r, rbias):
        b = self.b
        hidden, dirs = self.hidden, self.dirs
        mul = lambda p, q: b.op(Opcode.MULTIPLY, p, q)   # noqa: E731
        add = lambda p, q: b.op(Opcode.ADD, p, q)        # noqa: E731
        # Gate order in W, R, B: z, r, h.
        if self.lbr:
            hr = r.product(b, h)                               # all three gates at once
            zr = self._gate(hr, 0, 2 * hidden)
            hh = self._gate(hr, 2)
            if rbias is not None:
                hh = add(hh, b.broadcast(rbias, hh.shape.dims, (0, 2)))
        else:
            zr = r.product(b, h, 0, 2 * hidden)
        z = self._act(0, add(self._gate(x, 0), self._gate(zr, 0)))
        reset = self._act(0, add(self._gate(x, 1), self._gate(zr, 1)))
        if self.lbr:
            candidate = add(self._gate(x, 2), mul(reset, hh))
        else:
            candidate = add(self._gate(x, 2), r.product(b, mul(reset, h), 2 * hidden,
                                                        3 * hidden))
        candidate = self._act(1, candidate)
        one = _full(b, 1, self.dtype, z.shape.dims)
        # H' = (1 - z) h~ + z H
        return add(mul(b.op(Opcode.SUBTRACT, one, z), candidate), mul(z, h))

    def _act(self, slot: int, x: Instruction) -> Instruction:
        """Activation ``slot`` of each direction on ``x`` ([dirs, ...]), its input clipped."""
        b = self.b
        if self.clip is not None:
            c = float(self.clip)
            x = b.op(Opcode.CLAMP, b.constant(np.asarray(-c, self.dtype.np), self.dtype), x,
                     b.constant(np.asarray(c, self.dtype.np), self.dtype))
        specs = [a[slot] for a in self.activations]
        if all(s == specs[0] for s in specs):
            return _activation(b, specs[0], x)
        parts = []
        for d, spec in enumerate(specs):
            lo = (d,) + (0,) * (x.shape.rank - 1)
            parts.append(_activation(b, spec, b.slice(x, lo, (d + 1,) + x.shape.dims[1:])))
        return b.concatenate(parts, 0)


class _Weights:
    """Weights [dirs, gates, K] as the right side of the loop's products, read in the
    loop body. A constant is transposed to [dirs, K, gates] (folded at compile time), so
    that a row of it is a row of gates: the dot kernel then reads it in place instead of
    packing it into scratch. Other weights stay as they are (a transposed copy would
    take a buffer as large as they are)."""

    def __init__(self, b: Builder, loop: WhileLoop, w: Instruction):
        self.transposed = w.opcode is Opcode.CONSTANT
        self.w = loop.capture(b.transpose(w, (0, 2, 1)) if self.transposed else w)[1]

    def product(self, b: Builder, x: Instruction, lo: int = 0,
                hi: int | None = None) -> Instruction:
        """x [dirs, B, K] times gates lo..hi, batched over dirs: [dirs, B, hi - lo]."""
        w, axis = self.w, 2 if self.transposed else 1
        hi = w.shape.dims[axis] if hi is None else hi
        if (lo, hi) != (0, w.shape.dims[axis]):
            start, limit = [0, 0, 0], list(w.shape.dims)
            start[axis], limit[axis] = lo, hi
            w = b.slice(w, start, limit)
        contracting = 1 if self.transposed else 2
        return b.dot(x, w, DotDimensionNumbers((0,), (2,), (0,), (contracting,)))


class _QuantizedWeights:
    """8-bit weights (dirs, K, gates) as onnxruntime's quantized GEMM reads them: a scale
    per direction or per gate column, one zero point per direction. Each product
    quantizes its float operand, per direction, to u8 as DynamicQuantizeLinear does (all
    of X at once, H once a step), takes the integer product (an 8-bit kernel) and scales
    it back, f32(acc) * (x_scale * w_scale)."""

    def __init__(self, node, w, scale, zero_point, loop_ctx=None):
        self.node, self.w, self.scale, self.zero_point = node, w, scale, zero_point
        self.loop_ctx = loop_ctx

    @staticmethod
    def read(ctx, node, w, scale, zero_point) -> "_QuantizedWeights":
        """The node's weights, scale and zero point, checked; zero points (dirs, 1)."""
        if w.shape.dtype not in (dtypes.S8, dtypes.U8) or scale is None:
            raise ctx.error(node, f"needs 8-bit weights with scales, got {w.shape}")
        dirs, gates = w.shape.dims[0], w.shape.dims[2]
        for v, what in ((scale, "scale"), (zero_point, "zero point")):
            if v is not None and v.shape.dims not in ((dirs,), (dirs, gates)):
                raise ctx.error(node, f"a weight {what} {v.shape} is neither one per "
                                      f"direction nor one per direction and gate")
        if zero_point is not None and zero_point.shape.rank == 2:
            # onnxruntime's GEMM reads one zero point per direction: refuse others.
            value = ctx.value_of(zero_point)
            if value is None or (value != value[:, :1]).any():
                raise ctx.error(node, "weight zero points that differ along the gates are "
                                      "not supported")
        if zero_point is not None:
            zero_point = ctx.b.reshape(ctx.b.slice(zero_point, (0,) * zero_point.shape.rank,
                                                   (dirs,) + (1,) * (zero_point.shape.rank - 1)),
                                       (dirs, 1))
        return _QuantizedWeights(node, w, scale, zero_point)

    def in_loop(self, ctx, loop: WhileLoop) -> "_QuantizedWeights":
        """These weights read in ``loop``'s body (whose products ``product`` then builds)."""
        w, scale, zp = (None if v is None else loop.capture(v)[1]
                        for v in (self.w, self.scale, self.zero_point))
        return _QuantizedWeights(self.node, w, scale, zp, ctx.child(loop.body, None))

    def _direction(self, b: Builder, v: Instruction, d: int, dims) -> Instruction:
        return b.reshape(b.slice(v, (d,) + (0,) * (v.shape.rank - 1),
                                 (d + 1,) + v.shape.dims[1:]), dims)

    def direction_product(self, ctx, x: Instruction, d: int) -> Instruction:
        """x (..., K) times direction d's weights: (..., gates) in x's type."""
        b, (_, k, gates) = ctx.b, self.w.shape.dims
        qx, x_scale, x_zp = dynamic_quantized(ctx, x)
        w = self._direction(b, self.w, d, (k, gates))
        zp = None if self.zero_point is None else self._direction(b, self.zero_point, d, ())
        acc = integer_matmul(ctx, self.node, qx, w, x_zp, zp)
        scale = self._direction(b, self.scale, d, self.scale.shape.dims[1:])
        return scaled_product(ctx, self.node, acc, x_scale, scale, None, x.shape.dtype)

    def product(self, b: Builder, h: Instruction) -> Instruction:
        """h [dirs, B, K] times every direction's weights, in the loop: [dirs, B, gates]."""
        ctx = self.loop_ctx
        dirs, batch, k = h.shape.dims
        parts = [self.direction_product(ctx, self._direction(b, h, d, (batch, k)), d)
                 for d in range(dirs)]
        return b.concatenate([b.reshape(p, (1,) + p.shape.dims) for p in parts], 0)


def _activation(b: Builder, spec: tuple[str, float, float], x: Instruction) -> Instruction:
    name, alpha, beta = spec
    dt, dims = x.shape.dtype, x.shape.dims

    def full(v):
        return _full(b, v, dt, dims)

    def op(code, *xs):
        return b.op(code, *xs)

    if name == "tanh":
        return op(Opcode.TANH, x)
    if name == "sigmoid":
        return op(Opcode.LOGISTIC, x)
    if name == "relu":
        return op(Opcode.MAXIMUM, x, full(0))
    if name == "affine":
        return op(Opcode.ADD, op(Opcode.MULTIPLY, full(alpha), x), full(beta))
    if name == "leakyrelu":
        return op(Opcode.SELECT, b.compare(x, full(0), "GE"), x,
                  op(Opcode.MULTIPLY, full(alpha), x))
    if name == "thresholdedrelu":
        return op(Opcode.SELECT, b.compare(x, full(alpha), "GT"), x, full(0))
    if name == "scaledtanh":
        return op(Opcode.MULTIPLY, full(alpha), op(Opcode.TANH, op(Opcode.MULTIPLY, full(beta), x)))
    if name == "hardsigmoid":
        return op(Opcode.CLAMP, b.constant(np.asarray(0, dt.np), dt),
                  op(Opcode.ADD, op(Opcode.MULTIPLY, full(alpha), x), full(beta)),
                  b.constant(np.asarray(1, dt.np), dt))
    if name == "elu":
        return op(Opcode.SELECT, b.compare(x, full(0), "GE"), x,
                  op(Opcode.MULTIPLY, full(alpha), op(Opcode.EXPM1, x)))
    if name == "softsign":
        return op(Opcode.DIVIDE, x, op(Opcode.ADD, full(1), op(Opcode.ABS, x)))
    assert name == "softplus", name
    return op(Opcode.LOG1P, op(Opcode.EXP, x))


def _reverse_sequence(b: Builder, x: Instruction, lens: Instruction,
                      time_axis: int) -> Instruction:
    """``x`` with each batch element's first len(b) steps reversed along ``time_axis``
    (the other of the two leading axes is the batch); later steps stay. A gather."""
    batch_axis = 1 - time_axis
    steps, batch = x.shape.dims[time_axis], x.shape.dims[batch_axis]
    grid = [0, 0]
    grid[time_axis], grid[batch_axis] = steps, batch
    t = b.iota(Shape.array(S64, grid), time_axis)
    n = b.broadcast(lens, tuple(grid), (batch_axis,))
    one = _full(b, 1, S64, grid)
    reversed_t = b.op(Opcode.SUBTRACT, b.op(Opcode.SUBTRACT, n, one), t)
    source_t = b.op(Opcode.SELECT, b.compare(t, n, "LT"), reversed_t, t)
    batch_index = b.iota(Shape.array(S64, grid), batch_axis)
    index = [None, None]
    index[time_axis], index[batch_axis] = source_t, batch_index
    indices = b.concatenate([b.reshape(v, tuple(grid) + (1,)) for v in index], 2)
    rest = x.shape.dims[2:]
    dn = GatherDimensionNumbers(offset_dims=tuple(range(2, x.shape.rank)),
                                collapsed_slice_dims=(0, 1), start_index_map=(0, 1),
                                index_vector_dim=2)
    return b.gather(x, indices, dn, (1, 1) + rest)

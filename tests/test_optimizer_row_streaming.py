"""Row streaming (optimizer/row_streaming.py) on HLO: chains of windows computed band by
band keep their values, hold only bands of their maps, and leave alone what must stay
whole."""
import numpy as np
import pytest

from hlo_util import ScratchPolicy, args_for, assert_same_values, module_with, parse, run_pass
from xlac.hlo import Builder, ConvDimensionNumbers, Opcode, Shape, Window
from xlac.hlo.builder import scalar_computation
from xlac.hlo.evaluator import evaluate
from xlac.hlo.dtypes import F32
from xlac.hlo.verifier import verify
from xlac.optimizer import DeadCodeElimination, RowStreaming, plan_memory

# Two 3x3 convolutions with a bias and ReLU between them, on 16 rows of 8 columns.
CHAIN = """
ENTRY %main (x: f32[1,2,16,8], k1: f32[4,2,3,3], k2: f32[3,4,3,3], b: f32[4]) -> f32[1,3,16,8] {
  %x = f32[1,2,16,8] parameter(0)
  %k1 = f32[4,2,3,3] parameter(1)
  %k2 = f32[3,4,3,3] parameter(2)
  %b = f32[4] parameter(3)
  %c1 = f32[1,4,16,8] convolution(%x, %k1), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %bb = f32[1,4,16,8] broadcast(%b), dimensions={1}
  %a1 = f32[1,4,16,8] add(%c1, %bb)
  %zero = f32[] constant(0)
  %z = f32[1,4,16,8] broadcast(%zero), dimensions={}
  %r1 = f32[1,4,16,8] maximum(%a1, %z)
  ROOT %c2 = f32[1,3,16,8] convolution(%r1, %k2), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}
"""


def _ops(m, opcode):
    return [i for i in m.entry.instructions if i.opcode is opcode]


def _streamed(text, rows=1):
    before = parse(text)
    changed, m = run_pass([RowStreaming(rows), DeadCodeElimination()], text)
    assert_same_values(before, m)
    return changed, m


def test_chain_streams_a_band_at_a_time():
    changed, m = _streamed(CHAIN, rows=4)
    assert changed
    # The last convolution runs once per band of 4 rows; the output is built in place:
    # the first band padded to the whole map, the others written into it.
    last = [c for c in _ops(m, Opcode.CONVOLUTION) if c.shape.dims[1] == 3]
    assert [c.shape.dims[2] for c in last] == [4, 4, 4, 4]
    assert len(_ops(m, Opcode.DYNAMIC_UPDATE_SLICE)) == 3 and len(_ops(m, Opcode.PAD)) == 1
    # The first and last band's windows reach the padding; the middle ones read
    # real rows only.
    pads = [c.attrs["window"].pad_low[0] + c.attrs["window"].pad_high[0] for c in last]
    assert pads == [1, 0, 0, 1]
    # No map between the two convolutions exists whole any more.
    inner = [i for i in m.entry.instructions if i.shape.dims[1:2] == (4,)
             and i.opcode is not Opcode.PARAMETER]
    assert inner and max(i.shape.dims[2] for i in inner) < 16


def test_kept_rows_are_not_recomputed():
    """Every row of the inner map is computed once: the rows a window reads again come
    from the band kept from before (a concatenation), not from a second convolution."""
    _, m = _streamed(CHAIN, rows=1)
    first = [c for c in _ops(m, Opcode.CONVOLUTION) if c.shape.dims[1] == 4]
    assert sum(c.shape.dims[2] for c in first) == 16
    assert _ops(m, Opcode.CONCATENATE)


def test_streaming_lowers_the_arena():
    policy = ScratchPolicy(alignment=16)
    whole = plan_memory(parse(CHAIN), policy).arena_size
    _, m = _streamed(CHAIN, rows=1)
    streamed = plan_memory(m, policy).arena_size
    # Whole: the 16-row inner map (2 KiB) beside the output (1.5 KiB); streamed: the
    # output and a few rows.
    assert whole >= 2048 + 1536
    assert streamed < 1536 + 1024


GLOBAL_POOL = """
%add (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}

ENTRY %main (x: f32[1,2,9,5], k: f32[3,2,3,3]) -> f32[1,3,1,1] {
  %x = f32[1,2,9,5] parameter(0)
  %k = f32[3,2,3,3] parameter(1)
  %c = f32[1,3,9,5] convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %zero = f32[] constant(0)
  %z = f32[1,3,9,5] broadcast(%zero), dimensions={}
  %r = f32[1,3,9,5] maximum(%c, %z)
  ROOT %pool = f32[1,3,1,1] reduce-window(%r, %zero), window={size=1x1x9x5 stride=1x1x9x5}, to_apply=%add
}
"""


def test_global_pooling_accumulates_band_by_band():
    """The map before a global pool never exists whole: each band is pooled and the
    partial sums added."""
    changed, m = _streamed(GLOBAL_POOL, rows=2)
    assert changed
    pools = _ops(m, Opcode.REDUCE_WINDOW)
    assert [p.operands[0].shape.dims[2] for p in pools] == [2, 2, 2, 2, 1]
    assert not _ops(m, Opcode.DYNAMIC_UPDATE_SLICE)
    assert max(i.shape.dims[2] for i in m.entry.instructions
               if i.shape.rank == 4 and i.opcode is not Opcode.PARAMETER) < 9


def test_does_not_stream_without_a_window():
    text = """
ENTRY %main (x: f32[1,2,8,4]) -> f32[1,2,8,4] {
  %x = f32[1,2,8,4] parameter(0)
  %e = f32[1,2,8,4] exponential(%x)
  ROOT %n = f32[1,2,8,4] negate(%e)
}
"""
    changed, _ = run_pass(RowStreaming(1), text)
    assert not changed


def test_does_not_stream_a_map_the_model_returns():
    """A map the model returns must exist whole: the chain ends there (and is built
    band by band into it), and the window after it reads it whole."""
    text = CHAIN.replace(") -> f32[1,3,16,8] {", ") -> (f32[1,3,16,8], f32[1,4,16,8]) {").replace(
        "ROOT %c2 = f32[1,3,16,8]", "%c2 = f32[1,3,16,8]").rstrip()[:-1] + (
        "  ROOT %t = (f32[1,3,16,8], f32[1,4,16,8]) tuple(%c2, %r1)\n}\n")
    changed, m = _streamed(text)
    assert changed
    r1 = m.entry.root.operands[1]
    assert r1.opcode is Opcode.DYNAMIC_UPDATE_SLICE and r1.shape.dims == (1, 4, 16, 8)
    c2 = [c for c in _ops(m, Opcode.CONVOLUTION) if c.shape.dims[1] == 3]
    assert len(c2) == 1 and c2[0].operands[0] is r1


def test_does_not_stream_into_a_whole_map_consumer():
    """A dot (attention, a classifier) reads the whole map: the chain ends before it, and
    the dot reads the map built band by band."""
    text = """
ENTRY %main (x: f32[1,2,8,4], k: f32[2,2,3,3], w: f32[64,5]) -> f32[1,5] {
  %x = f32[1,2,8,4] parameter(0)
  %k = f32[2,2,3,3] parameter(1)
  %w = f32[64,5] parameter(2)
  %c = f32[1,2,8,4] convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %e = f32[1,2,8,4] exponential(%c)
  %flat = f32[1,64] reshape(%e)
  ROOT %d = f32[1,5] dot(%flat, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    changed, m = _streamed(text, rows=2)
    assert changed
    flat = next(i for i in m.entry.instructions if i.opcode is Opcode.RESHAPE)
    assert flat.operands[0].opcode is Opcode.DYNAMIC_UPDATE_SLICE
    assert flat.operands[0].shape.dims == (1, 2, 8, 4)


def test_does_not_accumulate_a_reduction_whose_init_is_not_its_identity():
    """A sum starting at 1 would add its init once per band: the chain ends before the
    reduction, which reads the whole map."""
    text = GLOBAL_POOL.replace("%zero = f32[] constant(0)",
                               "%zero = f32[] constant(0)\n  %one = f32[] constant(1)").replace(
        "reduce-window(%r, %zero)", "reduce-window(%r, %one)")
    changed, m = _streamed(text, rows=2)
    pools = _ops(m, Opcode.REDUCE_WINDOW)
    assert len(pools) == 1 and pools[0].operands[0].shape.dims[2] == 9


def test_does_not_stream_past_the_band_limit():
    """CHAIN at one row per band is 48 band computations (c1, a1, r1, 16 rows each).
    Under that limit the chain ends at r1 (c1 and a1: 32), which c2 then reads whole;
    under 16 (c1 alone, before a1), nothing streams."""
    changed, _ = run_pass(RowStreaming(1, max_bands=15), CHAIN)
    assert not changed
    _, m = run_pass(RowStreaming(1, max_bands=47), CHAIN)
    c2 = [c for c in _ops(m, Opcode.CONVOLUTION) if c.shape.dims[1] == 3]
    assert len(c2) == 1 and c2[0].operands[0].shape.dims == (1, 4, 16, 8)
    _, m = run_pass(RowStreaming(1, max_bands=48), CHAIN)
    assert len([c for c in _ops(m, Opcode.CONVOLUTION) if c.shape.dims[1] == 3]) == 16


def test_does_not_stream_a_base_dilated_convolution():
    text = """
ENTRY %main (x: f32[1,2,5,4], k: f32[3,2,3,3]) -> f32[1,3,10,8] {
  %x = f32[1,2,5,4] parameter(0)
  %k = f32[3,2,3,3] parameter(1)
  %e = f32[1,2,5,4] exponential(%x)
  ROOT %c = f32[1,3,10,8] convolution(%e, %k), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=bf01_oi01->bf01
}
"""
    changed, _ = run_pass(RowStreaming(1), text)
    assert not changed


# -- random chains: strides, dilations, padding, pools, edge pads, residuals ----------------

def _random_chain(seed: int):
    rng = np.random.default_rng(seed)
    b = Builder("main")
    c, h, w = int(rng.integers(1, 4)), int(rng.integers(6, 15)), int(rng.integers(3, 7))
    x = b.parameter(0, Shape.array(F32, (1, c, h, w)), "x")
    params = 1
    zero = b.constant(np.float32(0))
    add = scalar_computation("add", Opcode.ADD, F32)
    mx = scalar_computation("max", Opcode.MAXIMUM, F32)
    y, history = x, [x]
    for _ in range(int(rng.integers(2, 6))):
        kind = rng.choice(["conv", "conv", "depthwise", "pool", "pad", "residual"])
        rows = y.shape.dims[2]
        if kind in ("conv", "depthwise"):
            k, s, d = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
            lo, hi = int(rng.integers(0, k)), int(rng.integers(0, k))
            if rows + lo + hi < d * (k - 1) + 1:
                continue
            cin = y.shape.dims[1]
            cout = cin if kind == "depthwise" else int(rng.integers(1, 4))
            groups = cin if kind == "depthwise" else 1
            kern = b.parameter(params, Shape.array(F32, (cout, cin // groups, k, 3)))
            params += 1
            window = Window.make((k, 3), (s, 1), (lo, 1), (hi, 1), rhs_dilation=(d, 1))
            y = b.convolution(y, kern, window, ConvDimensionNumbers.nchw(2),
                              feature_group_count=groups)
            y = b.op(Opcode.MAXIMUM, y, b.broadcast(zero, y.shape.dims, ()))
        elif kind == "pool":
            k, s = int(rng.integers(2, 4)), int(rng.integers(1, 3))
            if rows < k:
                continue
            window = Window.make((1, 1, k, 2), (1, 1, s, 1), (0, 0, 0, 0), (0, 0, 0, 1))
            y = b.reduce_window(y, b.constant(np.float32(-np.inf)), window, mx)
        elif kind == "pad":
            y = b.pad(y, b.constant(np.float32(3)), (0, 0, int(rng.integers(0, 3)), 1),
                      (0, 0, int(rng.integers(0, 3)), 0))
        else:
            same = [v for v in history[:-1] if v.shape.dims == y.shape.dims]
            if not same:
                continue
            y = b.op(Opcode.ADD, y, same[-1])
        history.append(y)
    if rng.integers(0, 2):
        y = b.reduce(y, zero, (2, 3), add)
    return module_with(b, y, add, mx)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("seed", range(24))
def test_random_chains_keep_their_values(seed, rows):
    before = _random_chain(seed)
    after = _random_chain(seed)
    assert RowStreaming(rows).run(after)
    DeadCodeElimination().run(after)
    verify(after)
    args = args_for(before, seed)
    for want, got in zip(evaluate(before, args), evaluate(after, args), strict=True):
        np.testing.assert_array_equal(got, want)

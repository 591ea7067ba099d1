"""Each aliasing rule and each scheduler on small HLO texts: offsets, counts and the peak.

Every plan is also run on memory laid out as assigned (memory_util) and compared
with the reference evaluator.
"""
import numpy as np
import pytest

from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module
from xlac.optimizer import (BufferLocation, DefinitionOrderScheduler, ListScheduler, MemoryModel,
                            PostOrderScheduler, assign_buffers, plan_memory, schedule_model,
                            simulate_peak)
from memory_util import args_for, check_assignment, run_on_assigned_memory
from hlo_util import ScratchPolicy

KIB = 1024


def plan(text, order=None, alignment=64, concat_in_place=True):
    m = parse_module("HloModule m\n\n" + text)
    model = MemoryModel(m, alignment, concat_in_place=concat_in_place)
    if order is None:
        order = schedule_model(model).order
    else:
        by_name = {i.name: i for i in m.entry.instructions}
        order = [by_name[n] for n in order]
    ba = assign_buffers(m, order, alignment, model=model)
    check_assignment(m, ba)
    args = args_for(m)
    for got, want in zip(run_on_assigned_memory(m, ba, args), evaluate(m, args), strict=True):
        np.testing.assert_array_equal(got, want)
    return m, ba


def named(m, name):
    return next(i for i in m.entry.instructions if i.name == name)


# --- in-place element-wise ---------------------------------------------------------

CHAIN = """ENTRY %main (x: f32[256]) -> f32[16] {
  %x = f32[256]{0} parameter(0)
  %t = f32[256]{0} reverse(f32[256]{0} %x), dimensions={0}
  %e = f32[256]{0} exponential(f32[256]{0} %t)
  %n = f32[256]{0} negate(f32[256]{0} %e)
  %a = f32[256]{0} add(f32[256]{0} %n, f32[256]{0} %x)
  ROOT %s = f32[16]{0} slice(f32[256]{0} %a), slice={[0:16]}
}
"""


def test_elementwise_ops_overwrite_their_operand_at_its_last_use():
    m, ba = plan(CHAIN)
    t, e, n, a = (named(m, k) for k in "tena")
    assert ba.location(t) == ba.location(e) == ba.location(n) == ba.location(a)
    assert ba.in_place == {e: t, n: e, a: n}
    # The slice output is a view of a, copied out at the end: one 1 KiB buffer in all.
    assert ba.arena_size == ba.lower_bound == KIB


def test_no_overwrite_of_an_operand_read_later():
    m, ba = plan("""ENTRY %main (x: f32[256]) -> f32[256] {
  %x = f32[256]{0} parameter(0)
  %t = f32[256]{0} reverse(f32[256]{0} %x), dimensions={0}
  %e = f32[256]{0} exponential(f32[256]{0} %t)
  %a = f32[256]{0} add(f32[256]{0} %e, f32[256]{0} %t)
  ROOT %r = f32[256]{0} reverse(f32[256]{0} %a), dimensions={0}
}
""")
    t, e = named(m, "t"), named(m, "e")
    assert e not in ba.in_place and ba.location(e) != ba.location(t)
    assert ba.arena_size == 2 * KIB


def test_no_overwrite_across_different_element_sizes():
    m, ba = plan("""ENTRY %main (x: f32[256]) -> f32[256] {
  %x = f32[256]{0} parameter(0)
  %t = f32[256]{0} reverse(f32[256]{0} %x), dimensions={0}
  %c = f64[256]{0} convert(f32[256]{0} %t)
  ROOT %r = f32[256]{0} convert(f64[256]{0} %c)
}
""")
    assert named(m, "c") not in ba.in_place
    assert ba.arena_size == KIB + 2 * KIB


FUSION = """%fused (p0: f32[16,16], p1: f32[16]) -> f32[16,16] {
  %p0 = f32[16,16]{1,0} parameter(0)
  %p1 = f32[16]{0} parameter(1)
  %b = f32[16,16]{1,0} broadcast(f32[16]{0} %p1), dimensions={1}
  ROOT %m = f32[16,16]{1,0} multiply(f32[16,16]{1,0} %p0, f32[16,16]{1,0} %b)
}

%fused_t (p0: f32[16,16]) -> f32[16,16] {
  %p0 = f32[16,16]{1,0} parameter(0)
  %t = f32[16,16]{1,0} transpose(f32[16,16]{1,0} %p0), dimensions={1,0}
  ROOT %n = f32[16,16]{1,0} negate(f32[16,16]{1,0} %t)
}

ENTRY %main (x: f32[16,16], y: f32[16]) -> f32[16,16] {
  %x = f32[16,16]{1,0} parameter(0)
  %y = f32[16]{0} parameter(1)
  %r = f32[16,16]{1,0} reverse(f32[16,16]{1,0} %x), dimensions={0}
  %f = f32[16,16]{1,0} fusion(f32[16,16]{1,0} %r, f32[16]{0} %y), kind=kLoop, calls=%fused
  %g = f32[16,16]{1,0} fusion(f32[16,16]{1,0} %f), kind=kLoop, calls=%fused_t
  ROOT %o = f32[16,16]{1,0} reverse(f32[16,16]{1,0} %g), dimensions={0}
}
"""


def test_loop_fusion_overwrites_an_operand_it_reads_element_wise_only():
    m, ba = plan(FUSION)
    r, f, g = named(m, "r"), named(m, "f"), named(m, "g")
    assert ba.in_place.get(f) is r and ba.location(f) == ba.location(r)
    # %fused_t reads its operand transposed: it never overwrites it.
    assert g not in ba.in_place and ba.location(g) != ba.location(f)
    assert ba.arena_size == ba.lower_bound == 2 * KIB


RESHAPED_FUSION = """%fused (p0: f32[16,16], p1: f32[16]) -> f32[16,16] {
  %p0 = f32[16,16]{1,0} parameter(0)
  %p1 = f32[16]{0} parameter(1)
  %r = f32[1,16,16]{2,1,0} reshape(f32[16,16]{1,0} %p0)
  %b = f32[1,16,16]{2,1,0} broadcast(f32[16]{0} %p1), dimensions={2}
  %a = f32[1,16,16]{2,1,0} add(f32[1,16,16]{2,1,0} %r, f32[1,16,16]{2,1,0} %b)
  ROOT %o = f32[16,16]{1,0} reshape(f32[1,16,16]{2,1,0} %a)
}

%fused_t (q0: f32[16,16]) -> f32[16,16] {
  %q0 = f32[16,16]{1,0} parameter(0)
  %r = f32[1,16,16]{2,1,0} reshape(f32[16,16]{1,0} %q0)
  %t = f32[1,16,16]{2,1,0} transpose(f32[1,16,16]{2,1,0} %r), dimensions={0,2,1}
  %e = f32[1,16,16]{2,1,0} exponential(f32[1,16,16]{2,1,0} %t)
  ROOT %o = f32[16,16]{1,0} reshape(f32[1,16,16]{2,1,0} %e)
}

ENTRY %main (x: f32[16,16], y: f32[16]) -> f32[16,16] {
  %x = f32[16,16]{1,0} parameter(0)
  %y = f32[16]{0} parameter(1)
  %r = f32[16,16]{1,0} reverse(f32[16,16]{1,0} %x), dimensions={0}
  %f = f32[16,16]{1,0} fusion(f32[16,16]{1,0} %r, f32[16]{0} %y), kind=kLoop, calls=%fused
  %g = f32[16,16]{1,0} fusion(f32[16,16]{1,0} %f), kind=kLoop, calls=%fused_t
  ROOT %o = f32[16,16]{1,0} reverse(f32[16,16]{1,0} %g), dimensions={0}
}
"""


def test_loop_fusion_overwrites_an_operand_it_reads_through_reshapes():
    # A dot's (M, N) result reshaped to (1, M, N) for its bias, and back: element j of
    # the result still reads element j of the operand alone.
    m, ba = plan(RESHAPED_FUSION)
    r, f, g = named(m, "r"), named(m, "f"), named(m, "g")
    assert ba.in_place.get(f) is r and ba.location(f) == ba.location(r)
    # a transpose between the reshapes reads other elements: no overwrite
    assert g not in ba.in_place and ba.location(g) != ba.location(f)
    assert ba.arena_size == ba.lower_bound == 2 * KIB


def test_no_overwrite_of_a_buffer_another_operand_reads_elsewhere():
    # %f reads the concatenation element-wise and %b (its second half) reversed: written
    # over %c, element 4 would be clobbered before %f reads it again for element 7.
    m, ba = plan("""%fused (p0: f32[1,8], p1: f32[1,4]) -> f32[1,8] {
  %p0 = f32[1,8]{1,0} parameter(0)
  %p1 = f32[1,4]{1,0} parameter(1)
  %r = f32[1,4]{1,0} reverse(f32[1,4]{1,0} %p1), dimensions={1}
  %rr = f32[1,8]{1,0} concatenate(f32[1,4]{1,0} %r, f32[1,4]{1,0} %r), dimensions={1}
  ROOT %s = f32[1,8]{1,0} add(f32[1,8]{1,0} %p0, f32[1,8]{1,0} %rr)
}

ENTRY %main (x: f32[1,4]) -> f32[1,8] {
  %x = f32[1,4]{1,0} parameter(0)
  %a = f32[1,4]{1,0} reverse(f32[1,4]{1,0} %x), dimensions={1}
  %b = f32[1,4]{1,0} negate(f32[1,4]{1,0} %a)
  %c = f32[1,8]{1,0} concatenate(f32[1,4]{1,0} %a, f32[1,4]{1,0} %b), dimensions={1}
  %f = f32[1,8]{1,0} fusion(f32[1,8]{1,0} %c, f32[1,4]{1,0} %b), kind=kLoop, calls=%fused
  ROOT %o = f32[1,8]{1,0} reverse(f32[1,8]{1,0} %f), dimensions={1}
}
""")
    assert named(m, "c") in ba.concats_in_place
    assert named(m, "f") not in ba.in_place
    assert ba.location(named(m, "f")) != ba.location(named(m, "c"))


SCATTER = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[]{} parameter(0)
  %b = f32[]{} parameter(1)
  ROOT %s = f32[]{} add(f32[]{} %a, f32[]{} %b)
}

ENTRY %main (x: f32[64,4], u: f32[8,4]) -> f32[64,4] {
  %x = f32[64,4]{1,0} parameter(0)
  %u = f32[8,4]{1,0} parameter(1)
  %i = s32[8,1]{1,0} constant({ {3}, {9}, {3}, {63}, {0}, {64}, {-1}, {17} })
  %t = f32[64,4]{1,0} reverse(f32[64,4]{1,0} %x), dimensions={0}
  %v = f32[8,4]{1,0} UPDATES
  %s = f32[64,4]{1,0} scatter(f32[64,4]{1,0} %t, s32[8,1]{1,0} %i, f32[8,4]{1,0} %v), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  ROOT %o = f32[64,4]{1,0} reverse(f32[64,4]{1,0} %s), dimensions={0}
}
"""


def test_scatter_overwrites_its_operand_at_its_last_use():
    m, ba = plan(SCATTER.replace("UPDATES", "negate(f32[8,4]{1,0} %u)"))
    s, t = named(m, "s"), named(m, "t")
    assert ba.in_place == {s: t} and ba.location(s) == ba.location(t)
    assert ba.arena_size == ba.lower_bound == KIB + 128


def test_scatter_does_not_overwrite_an_operand_its_updates_read():
    # %v is a view of the first rows of %t: written over %t, row 3 would change before
    # the update read from it is applied.
    m, ba = plan(SCATTER.replace("UPDATES", "slice(f32[64,4]{1,0} %t), slice={[0:8], [0:4]}"))
    s, t = named(m, "s"), named(m, "t")
    assert s not in ba.in_place and ba.location(s) != ba.location(t)


# --- views -----------------------------------------------------------------------------

def test_reshape_bitcast_and_contiguous_slices_are_views():
    m, ba = plan("""ENTRY %main (x: f32[4,8,8]) -> (f32[2,64], f32[16], f32[4,8,4]) {
  %x = f32[4,8,8]{2,1,0} parameter(0)
  %e = f32[4,8,8]{2,1,0} reverse(f32[4,8,8]{2,1,0} %x), dimensions={0}
  %s = f32[2,8,8]{2,1,0} slice(f32[4,8,8]{2,1,0} %e), slice={[1:3], [0:8], [0:8]}
  %s1 = f32[1,2,8]{2,1,0} slice(f32[4,8,8]{2,1,0} %e), slice={[3:4], [2:4], [0:8]}
  %gap = f32[4,8,4]{2,1,0} slice(f32[4,8,8]{2,1,0} %e), slice={[0:4], [0:8], [0:4]}
  %r = f32[2,64]{1,0} reshape(f32[2,8,8]{2,1,0} %s)
  %b = f32[2,64]{1,0} bitcast(f32[2,64]{1,0} %r)
  %c = f32[16]{0} reshape(f32[1,2,8]{2,1,0} %s1)
  %o1 = f32[2,64]{1,0} negate(f32[2,64]{1,0} %b)
  %o2 = f32[16]{0} negate(f32[16]{0} %c)
  ROOT %t = (f32[2,64]{1,0}, f32[16]{0}, f32[4,8,4]{2,1,0}) tuple(f32[2,64]{1,0} %o1, f32[16]{0} %o2, f32[4,8,4]{2,1,0} %gap)
}
""")
    loc = lambda name: ba.location(named(m, name))     # noqa: E731
    e = loc("e")
    assert loc("s") == BufferLocation("arena", 0, e.offset + 64 * 4)
    assert loc("r") == loc("b") == loc("s")
    assert loc("s1") == BufferLocation("arena", 0, e.offset + (3 * 64 + 2 * 8) * 4)
    assert loc("c") == loc("s1")
    # Every other column: not one block, so it is computed, here into output 2.
    assert loc("gap") == BufferLocation("output", 2, 0)
    assert ba.stats["views"] == 5
    assert ba.arena_size == ba.lower_bound == 256 * 4


# --- concatenation in place ----------------------------------------------------------

CONCAT = """ENTRY %main (x: f32[1,4,8]) -> f32[1,12,8] {
  %x = f32[1,4,8]{2,1,0} parameter(0)
  %a = f32[1,4,8]{2,1,0} reverse(f32[1,4,8]{2,1,0} %x), dimensions={2}
  %r = f32[1,4,8]{2,1,0} negate(f32[1,4,8]{2,1,0} %a)
  %b = f32[1,8,8]{2,1,0} pad(f32[1,4,8]{2,1,0} %x, f32[] %z), padding=0_0x2_2x0_0
  %c = f32[1,12,8]{2,1,0} concatenate(f32[1,4,8]{2,1,0} %r, f32[1,8,8]{2,1,0} %b), dimensions={1}
  %z = f32[] constant(0)
  ROOT %o = f32[1,12,8]{2,1,0} exponential(f32[1,12,8]{2,1,0} %c)
}
""".replace("  %z = f32[] constant(0)\n", "").replace(
    "  %a = f32", "  %z = f32[] constant(0)\n  %a = f32")


def test_concat_producers_write_into_their_slices():
    m, ba = plan(CONCAT.replace("ROOT %o", "%o").replace("exponential(f32[1,12,8]{2,1,0} %c)",
                                                          "exponential(f32[1,12,8]{2,1,0} %c)\n"
                                                          "  ROOT %n = f32[1,12,8]{2,1,0} "
                                                          "reverse(f32[1,12,8]{2,1,0} %o), "
                                                          "dimensions={2}"))
    loc = lambda name: ba.location(named(m, name))     # noqa: E731
    c = loc("c")
    assert loc("r") == c and loc("b") == BufferLocation("arena", 0, c.offset + 4 * 8 * 4)
    # The negate overwrites its operand inside the slot: the reverse computes into it too.
    assert loc("a") == c and ba.in_place[named(m, "r")] is named(m, "a")
    assert named(m, "c") in ba.concats_in_place and ba.stats["concat_slots"] == 3
    # One 384-byte block, then the exponential overwrites it in place.
    assert ba.arena_size == ba.lower_bound == 384


def test_output_chain_computes_in_the_callers_buffer():
    # The negate overwrites the add, which overwrites the reverse: all three compute in
    # the output buffer, and the arena holds nothing.
    m, ba = plan("""ENTRY %main (x: f32[256], y: f32[256]) -> f32[256] {
  %x = f32[256]{0} parameter(0)
  %y = f32[256]{0} parameter(1)
  %t = f32[256]{0} reverse(f32[256]{0} %x), dimensions={0}
  %a = f32[256]{0} add(f32[256]{0} %t, f32[256]{0} %y)
  ROOT %n = f32[256]{0} negate(f32[256]{0} %a)
}
""")
    for name in "tan":
        assert ba.location(named(m, name)) == BufferLocation("output", 0, 0)
    assert ba.in_place == {named(m, "n"): named(m, "a"), named(m, "a"): named(m, "t")}
    assert ba.arena_size == 0


def test_concat_into_the_callers_output():
    m, ba = plan(CONCAT.replace("ROOT %o", "%o").replace(
        "  %c = f32", "  ROOT %c = f32").replace(
        "  %o = f32[1,12,8]{2,1,0} exponential(f32[1,12,8]{2,1,0} %c)\n", ""))
    assert ba.location(named(m, "r")) == BufferLocation("output", 0, 0)
    assert ba.location(named(m, "b")) == BufferLocation("output", 0, 128)
    assert ba.arena_size == 0


# %b is read by %n as well as by the concatenation, which computes in output 0 where its
# user overwrites it in every order; the second case nests it in a concatenation that
# does. Found by test_random_dags_assignment_is_sound, whose post-order ran %n last.
SHARED_OPERAND = [
    """ENTRY %main (p: f32[4]) -> (f32[4,4], f32[3,4]) {
  %p = f32[4]{0} parameter(0)
  %b = f32[3,4]{1,0} broadcast(f32[4]{0} %p), dimensions={1}
  %r = f32[1,4]{1,0} reshape(f32[4]{0} %p)
  %c = f32[4,4]{1,0} concatenate(f32[3,4]{1,0} %b, f32[1,4]{1,0} %r), dimensions={0}
  %m = f32[4,4]{1,0} negate(f32[4,4]{1,0} %c)
  %n = f32[3,4]{1,0} negate(f32[3,4]{1,0} %b)
  ROOT %t = (f32[4,4]{1,0}, f32[3,4]{1,0}) tuple(f32[4,4]{1,0} %m, f32[3,4]{1,0} %n)
}
""",
    """ENTRY %main (p: f32[4]) -> (f32[7,4], f32[3,4]) {
  %p = f32[4]{0} parameter(0)
  %b = f32[3,4]{1,0} broadcast(f32[4]{0} %p), dimensions={1}
  %r = f32[1,4]{1,0} reshape(f32[4]{0} %p)
  %i = f32[4,4]{1,0} concatenate(f32[1,4]{1,0} %r, f32[3,4]{1,0} %b), dimensions={0}
  %c = f32[7,4]{1,0} concatenate(f32[4,4]{1,0} %i, f32[3,4]{1,0} %b), dimensions={0}
  %m = f32[7,4]{1,0} negate(f32[7,4]{1,0} %c)
  %n = f32[3,4]{1,0} negate(f32[3,4]{1,0} %b)
  ROOT %t = (f32[7,4]{1,0}, f32[3,4]{1,0}) tuple(f32[7,4]{1,0} %m, f32[3,4]{1,0} %n)
}
"""]


@pytest.mark.parametrize("text", SHARED_OPERAND)
def test_does_not_give_a_shared_operand_a_slot_in_an_overwritten_concat(text):
    order = [i.name for i in parse_module("HloModule m\n\n" + text).entry.instructions
             if i.name != "n"]
    m, ba = plan(text, order=order[:-1] + ["n", "t"])
    assert ba.location(named(m, "c")) == ba.location(named(m, "m")) == \
        BufferLocation("output", 0, 0)
    assert ba.location(named(m, "b")).space == "arena"


def test_concat_of_strided_blocks_is_copied():
    m, ba = plan("""ENTRY %main (x: f32[2,4]) -> f32[2,8] {
  %x = f32[2,4]{1,0} parameter(0)
  %a = f32[2,4]{1,0} reverse(f32[2,4]{1,0} %x), dimensions={1}
  %c = f32[2,8]{1,0} concatenate(f32[2,4]{1,0} %a, f32[2,4]{1,0} %x), dimensions={1}
  ROOT %o = f32[2,8]{1,0} negate(f32[2,8]{1,0} %c)
}
""")
    assert not ba.concats_in_place and ba.location(named(m, "a")) != ba.location(named(m, "c"))


def test_growing_concatenations_share_one_block():
    # DenseNet: each layer's concatenation is the previous one plus a new slice.
    m, ba = plan("""ENTRY %main (x: f32[1,4,8]) -> f32[1,12,8] {
  %x = f32[1,4,8]{2,1,0} parameter(0)
  %a = f32[1,4,8]{2,1,0} reverse(f32[1,4,8]{2,1,0} %x), dimensions={2}
  %b = f32[1,4,8]{2,1,0} reverse(f32[1,4,8]{2,1,0} %a), dimensions={1}
  %c1 = f32[1,8,8]{2,1,0} concatenate(f32[1,4,8]{2,1,0} %a, f32[1,4,8]{2,1,0} %b), dimensions={1}
  %d = f32[1,4,8]{2,1,0} slice(f32[1,8,8]{2,1,0} %c1), slice={[0:1], [2:6], [0:8]}
  %e = f32[1,4,8]{2,1,0} reverse(f32[1,4,8]{2,1,0} %d), dimensions={2}
  %c2 = f32[1,12,8]{2,1,0} concatenate(f32[1,8,8]{2,1,0} %c1, f32[1,4,8]{2,1,0} %e), dimensions={1}
  ROOT %o = f32[1,12,8]{2,1,0} reverse(f32[1,12,8]{2,1,0} %c2), dimensions={2}
}
""")
    loc = lambda name: ba.location(named(m, name))     # noqa: E731
    base = loc("c2").offset
    assert loc("c1").offset == loc("a").offset == base
    assert loc("b").offset == base + 128 and loc("e").offset == base + 256
    assert ba.arena_size == ba.lower_bound == 384
    copied = plan("""ENTRY %main (x: f32[1,4,8]) -> f32[1,12,8] {
  %x = f32[1,4,8]{2,1,0} parameter(0)
  %a = f32[1,4,8]{2,1,0} reverse(f32[1,4,8]{2,1,0} %x), dimensions={2}
  %c2 = f32[1,12,8]{2,1,0} concatenate(f32[1,4,8]{2,1,0} %a, f32[1,4,8]{2,1,0} %a, f32[1,4,8]{2,1,0} %x), dimensions={1}
  ROOT %o = f32[1,12,8]{2,1,0} negate(f32[1,12,8]{2,1,0} %c2)
}
""")[1]
    assert not copied.stats["concat_slots"]        # an operand used twice keeps its buffer


# --- schedulers ----------------------------------------------------------------------

# A small branch (s, 1 KiB) and a big one (t1 -> t2 -> u, 4 KiB each, read through a
# slice view) joined by an add that lists the small one first: running the small
# branch first keeps its 1 KiB live through the big one's 8 KiB peak.
BRANCHES = """ENTRY %main (x: f32[1024], y: f32[256]) -> f32[256] {
  %x = f32[1024]{0} parameter(0)
  %y = f32[256]{0} parameter(1)
  %s = f32[256]{0} reverse(f32[256]{0} %y), dimensions={0}
  %t1 = f32[1024]{0} reverse(f32[1024]{0} %x), dimensions={0}
  %t2 = f32[1024]{0} reverse(f32[1024]{0} %t1), dimensions={0}
  %u = f32[1024]{0} reverse(f32[1024]{0} %t2), dimensions={0}
  %v = f32[256]{0} slice(f32[1024]{0} %u), slice={[0:256]}
  %o = f32[256]{0} add(f32[256]{0} %s, f32[256]{0} %v)
  ROOT %r = f32[256]{0} reverse(f32[256]{0} %o), dimensions={0}
}
"""


@pytest.mark.parametrize("scheduler, peak", [
    (DefinitionOrderScheduler(), 1024 + 4096 * 2),
    (PostOrderScheduler(largest_first=True), 4096 * 2),         # the big operand's subtree first
    (PostOrderScheduler(largest_first=False), 1024 + 4096 * 2),  # operands in order: s first
    (ListScheduler(), 1024 + 4096 * 2),                         # s allocates least: s first
])
def test_scheduler_peaks(scheduler, peak):
    m = parse_module("HloModule m\n\n" + BRANCHES)
    model = MemoryModel(m, 1)
    order = scheduler(model)
    assert simulate_peak(model, order) == peak
    ba = assign_buffers(m, order, 1, model=model)
    check_assignment(m, ba)
    assert ba.arena_size == peak


def test_plan_keeps_the_lowest_peak():
    m = parse_module("HloModule m\n\n" + BRANCHES)
    ba = plan_memory(m, ScratchPolicy(1))
    assert ba.arena_size == ba.lower_bound == 4096 * 2
    assert ba.stats["scheduler_peaks"]["definition-order"] == 1024 + 4096 * 2


# --- lean kernels ----------------------------------------------------------------------

CONVS = """ENTRY %main (x: f32[1,4,8,8], k: f32[4,4,3,3]) -> f32[1,4,2,2] {
  %x = f32[1,4,8,8]{3,2,1,0} parameter(0)
  %k = f32[4,4,3,3]{3,2,1,0} parameter(1)
  %a = f32[1,4,8,8]{3,2,1,0} reverse(f32[1,4,8,8]{3,2,1,0} %x), dimensions={3}
  %c = f32[1,4,8,8]{3,2,1,0} convolution(f32[1,4,8,8]{3,2,1,0} %a, f32[4,4,3,3]{3,2,1,0} %k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %s = f32[1,4,2,2]{3,2,1,0} slice(f32[1,4,8,8]{3,2,1,0} %c), slice={[0:1], [0:4], [0:2], [0:2]}
  ROOT %o = f32[1,4,2,2]{3,2,1,0} convolution(f32[1,4,2,2]{3,2,1,0} %s, f32[4,4,3,3]{3,2,1,0} %k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}
"""


def test_kernels_at_the_peak_switch_to_their_lean_variant():
    m = parse_module("HloModule m\n\n" + CONVS)
    c, o = named(m, "c"), named(m, "o")
    gemm = {c: 4096, o: 512}            # scratch of the fast variants
    ba = plan_memory(m, ScratchPolicy(64, lambda i: gemm.get(i, 0), lambda i: 0))
    # %a and %c (1 KiB each) are live while %c runs: its scratch would make 6 KiB.
    assert ba.lean_kernels == {c}
    assert ba.arena_size == ba.lower_bound == 2 * 1024 and c not in ba.scratch
    # %o's scratch is live beside %c's 1 KiB (read through the slice): 1.5 KiB, below
    # the peak, so %o keeps its fast variant.
    assert ba.scratch[o].space == "arena"


def test_kernels_keep_their_scratch_without_a_leaner_variant():
    m = parse_module("HloModule m\n\n" + CONVS)
    ba = plan_memory(m, ScratchPolicy(64, lambda i: 4096 if i.opcode.text == "convolution"
                                      else 0))
    assert not ba.lean_kernels and ba.arena_size == 2 * 1024 + 4096


# %a and %b are built in place in %cat, so %a's slot (all of %cat) is live while %c runs:
# in place, %c's scratch makes the peak (2 + 1 + 2 KiB), the copy's peak is %a, %b and
# %cat at once (4 KiB). With %c lean, in place wins (3 KiB): each variant gets its own
# lean kernels, not only the one that is smaller before any kernel is made lean.
CONCAT_CONV = """ENTRY %main (x: f32[1,4,8,8], k: f32[4,4,3,3]) -> f32[1,8,2,2] {
  %x = f32[1,4,8,8]{3,2,1,0} parameter(0)
  %k = f32[4,4,3,3]{3,2,1,0} parameter(1)
  %a = f32[1,4,8,8]{3,2,1,0} reverse(f32[1,4,8,8]{3,2,1,0} %x), dimensions={3}
  %c = f32[1,4,8,8]{3,2,1,0} convolution(f32[1,4,8,8]{3,2,1,0} %a, f32[4,4,3,3]{3,2,1,0} %k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %b = f32[1,4,8,8]{3,2,1,0} reverse(f32[1,4,8,8]{3,2,1,0} %c), dimensions={3}
  %cat = f32[1,8,8,8]{3,2,1,0} concatenate(f32[1,4,8,8]{3,2,1,0} %a, f32[1,4,8,8]{3,2,1,0} %b), dimensions={1}
  ROOT %o = f32[1,8,2,2]{3,2,1,0} slice(f32[1,8,8,8]{3,2,1,0} %cat), slice={[0:1], [0:8], [0:2], [0:2]}
}
"""


def test_each_concat_variant_gets_its_own_lean_kernels():
    m = parse_module("HloModule m\n\n" + CONCAT_CONV)
    c = named(m, "c")
    ba = plan_memory(m, ScratchPolicy(64, lambda i: 2048 if i is c else 0, lambda i: 0))
    assert ba.lean_kernels == {c} and named(m, "cat") in ba.concats_in_place
    assert ba.arena_size == 3 * 1024


def test_does_not_make_kernels_lean_without_a_leaner_variant_in_any():
    m = parse_module("HloModule m\n\n" + CONCAT_CONV)
    c = named(m, "c")
    ba = plan_memory(m, ScratchPolicy(64, lambda i: 2048 if i is c else 0))
    assert not ba.lean_kernels and not ba.concats_in_place and ba.arena_size == 4 * 1024

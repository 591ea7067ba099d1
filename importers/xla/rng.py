"""rng-bit-generator, bit for bit as XLA's RngBitGeneratorExpander."""
from __future__ import annotations

from math import prod

from ...hlo import Builder, Instruction, Opcode, Shape, XlacError, dtypes
from .common import choose, full, scalar


# --- rng-bit-generator ---------------------------------------------------------------------

U64, U32 = dtypes.U64, dtypes.U32
# XLA's CPU backend runs DEFAULT as Philox.
RNG_ALGORITHMS = ("DEFAULT", "THREE_FRY", "PHILOX")


def rng_bit_generator(b: Builder, algorithm: str, state: Instruction,
                      out: Shape) -> tuple[Instruction, Instruction]:
    """(the new state, random bits of ``out``'s unsigned type), bit for bit as XLA's
    RngBitGeneratorExpander: the state is u64[2+] = (key, counter...). ThreeFry-2x32
    (20 rounds) hashes (counter + element index) as two u32 halves; Philox-4x32 (10
    rounds) hashes a 128-bit counter, four u32 per call."""
    if state.shape.dtype != U64 or state.shape.rank != 1 or state.shape.dims[0] < 2:
        raise XlacError(f"rng-bit-generator takes a u64[2] or u64[3] state, got {state.shape}")
    if out.dtype.kind != "u" or out.dtype.bits not in (8, 16, 32, 64):
        raise XlacError(f"rng-bit-generator of {out.dtype.name}: xlac makes unsigned bits")
    key = b.reshape(b.slice(state, (0,), (1,)), ())
    if algorithm == "THREE_FRY":
        counter = b.slice(state, (1,), (2,))
        bits, new_counter = _threefry_bits(b, key, counter, out)
    elif algorithm in ("PHILOX", "DEFAULT"):
        n = state.shape.dims[0]
        counter = b.slice(state, (1,), (3,)) if n >= 3 else b.reverse(state, (0,))
        bits, new_counter = _philox_bits(b, key, counter, out)
        if n < 3:
            new_counter = b.slice(new_counter, (0,), (1,))
    else:
        raise XlacError(f"rng-bit-generator algorithm {algorithm}: xlac knows "
                        f"{', '.join(RNG_ALGORITHMS)}")
    return b.concatenate([b.reshape(key, (1,)), new_counter], 0), bits


def _u(b: Builder, value: int, dtype, dims=()) -> Instruction:
    return full(b, value, dtype, dims) if dims else scalar(b, value, dtype)


def _halves(b: Builder, x: Instruction) -> tuple[Instruction, Instruction]:
    """A u64's low and high u32."""
    high = b.op(Opcode.SHIFT_RIGHT_LOGICAL, x, _u(b, 32, U64, x.shape.dims))
    return b.convert(x, U32), b.convert(high, U32)


def _join(b: Builder, low: Instruction, high: Instruction) -> Instruction:
    wide = b.op(Opcode.SHIFT_LEFT, b.convert(high, U64), _u(b, 32, U64, high.shape.dims))
    return b.op(Opcode.OR, b.convert(low, U64), wide)


def _bits_of(b: Builder, bits32: Instruction, out: Shape) -> Instruction:
    return b.convert(bits32, out.dtype) if out.dtype.bits < 32 else bits32


def _threefry_bits(b, key, counter, out: Shape):
    keys = _halves(b, key)
    if out.dtype.bits == 64:
        inputs, new_counter = _threefry_inputs(b, counter, out.dims)
        x0, x1 = _threefry2x32(b, inputs, keys)
        return _join(b, x0, x1), new_counter
    half, concat_dims, split, joined = _split_halves(out.dims)
    inputs, new_counter = _threefry_inputs(b, counter, half)
    x0, x1 = _threefry2x32(b, inputs, keys)
    if not out.dims:
        return _bits_of(b, b.reshape(x0, ()), out), new_counter
    both = b.concatenate([x0, x1], joined)                       # concat_dims
    rounded = list(out.dims)
    rounded[split] = concat_dims[split] * 2
    both = b.reshape(both, tuple(rounded))
    if rounded[split] != out.dims[split]:
        both = b.slice(both, (0,) * len(rounded), out.dims)
    return _bits_of(b, both, out), new_counter


def _split_halves(dims):
    """XLA's SplitShapeIntoHalves: (half dims, concat dims, the split dim, the dim the
    halves are joined along). The split dim is the first even one, else the largest."""
    if not dims:
        return (1,), (2,), 0, 0
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    half, concat = [], []
    for i, d in enumerate(dims):
        if i == split:
            half += [-(-d // 2), 1]
            concat += [-(-d // 2), 2]
        else:
            half.append(d)
            concat.append(d)
    return tuple(half), tuple(concat), split, split + 1


def _threefry_inputs(b, counter, dims):
    """(the (low, high) u32 halves of counter + each element's row-major index over
    the dims of size 2 and more, the counter advanced by the element count)."""
    x = b.broadcast(b.reshape(counter, ()), tuple(dims), ())
    stride = 1
    for i in range(len(dims) - 1, -1, -1):
        if dims[i] < 2:
            continue
        step = b.op(Opcode.MULTIPLY, b.iota(Shape.array(U64, tuple(dims)), i),
                    _u(b, stride, U64, dims))
        x = b.op(Opcode.ADD, x, step)
        stride *= dims[i]
    advanced = b.op(Opcode.ADD, counter, _u(b, prod(dims), U64, (1,)))
    return _halves(b, x), advanced


_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _threefry2x32(b, inputs, keys):
    """Threefry-2x32, 20 rounds (Salmon et al., SC 2011)."""
    dims = inputs[0].shape.dims

    def k(v):
        return _u(b, v, U32, dims)

    def add(x, y):
        return b.op(Opcode.ADD, x, y)

    def spread(s):
        return b.broadcast(s, dims, ())
    ks = [spread(keys[0]), spread(keys[1])]
    ks.append(b.op(Opcode.XOR, b.op(Opcode.XOR, k(0x1BD11BDA), ks[0]), ks[1]))
    x = [add(inputs[0], ks[0]), add(inputs[1], ks[1])]
    for group in range(5):
        for r in _ROTATIONS[4 * (group % 2):4 * (group % 2) + 4]:
            x[0] = add(x[0], x[1])
            rotated = b.op(Opcode.OR, b.op(Opcode.SHIFT_LEFT, x[1], k(r)),
                           b.op(Opcode.SHIFT_RIGHT_LOGICAL, x[1], k(32 - r)))
            x[1] = b.op(Opcode.XOR, x[0], rotated)
        x[0] = add(x[0], ks[(group + 1) % 3])
        x[1] = add(add(x[1], ks[(group + 2) % 3]), k(group + 1))
    return x[0], x[1]


def _philox_bits(b, key, counter, out: Shape):
    n = prod(out.dims)
    wide = out.dtype.bits == 64
    words = _philox_words(b, key, counter, 2 * n if wide else n)
    new_counter = words.pop()
    if wide:
        words = [_join(b, words[0], words[1]), _join(b, words[2], words[3])]
    per = len(words)
    rows = words[0].shape.dims[0]
    mixed = b.reshape(b.concatenate([b.reshape(w, (rows, 1)) for w in words], 1), (rows * per,))
    if rows * per != n:
        mixed = b.slice(mixed, (0,), (n,))
    return _bits_of(b, b.reshape(mixed, out.dims), out), new_counter


_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)


def _philox_words(b, key, counter, n):
    """Philox-4x32 (10 rounds) of the 128-bit counter + i, i < ceil(n / 4): its four u32
    words, then the counter advanced past them."""
    calls = -(-n // 4)
    low, high = (b.reshape(b.slice(counter, (k,), (k + 1,)), ()) for k in (0, 1))
    i = b.iota(Shape.array(U64, (calls,)), 0)
    low_i = b.op(Opcode.ADD, b.broadcast(low, (calls,), ()), i)
    carry = b.compare(low_i, b.broadcast(low, (calls,), ()), "LT")
    high_i = choose(b, carry, b.broadcast(b.op(Opcode.ADD, high, _u(b, 1, U64)), (calls,), ()),
                     b.broadcast(high, (calls,), ()))
    x = [*_halves(b, low_i), *_halves(b, high_i)]
    keys = [b.broadcast(h, (calls,), ()) for h in _halves(b, key)]
    for _ in range(10):
        hi0, lo0 = _mul_hi_lo(b, x[0], _PHILOX_M[0])
        hi1, lo1 = _mul_hi_lo(b, x[2], _PHILOX_M[1])
        x = [b.op(Opcode.XOR, b.op(Opcode.XOR, hi1, x[1]), keys[0]), lo1,
             b.op(Opcode.XOR, b.op(Opcode.XOR, hi0, x[3]), keys[1]), lo0]
        keys = [b.op(Opcode.ADD, kk, _u(b, w, U32, (calls,))) for kk, w in zip(keys, _PHILOX_W)]
    new_low = b.op(Opcode.ADD, low, _u(b, calls, U64))
    new_high = choose(b, b.compare(new_low, low, "LT"), b.op(Opcode.ADD, high, _u(b, 1, U64)),
                       high)
    return x + [b.concatenate([b.reshape(new_low, (1,)), b.reshape(new_high, (1,))], 0)]


def _mul_hi_lo(b, x, m):
    product = b.op(Opcode.MULTIPLY, b.convert(x, U64), _u(b, m, U64, x.shape.dims))
    low, high = _halves(b, product)
    return high, low

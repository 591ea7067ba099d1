"""Linear algebra: Einsum (to diagonals, sums, dots and a transpose) and Det (an
LU factorization with partial pivoting, unrolled over the columns)."""
from __future__ import annotations

from collections import Counter

from ...hlo import DotDimensionNumbers, Opcode, Shape, dtypes
from .registry import register


# -- Einsum ---------------------------------------------------------------------------

def _einsum_labels(ctx, node, equation: str, ranks: list[int]):
    """The label of every dim of every operand and of the output. The dims an
    ellipsis stands for get labels of their own, aligned from the right across
    operands (numpy broadcasting); without '->' the output is the ellipsis dims, then
    the labels used once, in alphabetical order."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(node, f"equation '{equation}' has {len(terms)} operands, the node "
                              f"{len(ranks)}")
    for t in terms + ([out] if arrow else []):
        letters = t.replace("...", "")
        if t.count("...") > 1 or not all(c.isalpha() for c in letters):
            raise ctx.error(node, f"bad term '{t}' in equation '{equation}'")
    ellipsis = []
    for t, r in zip(terms, ranks):
        n = len(t.replace("...", ""))
        if ("..." in t and n > r) or ("..." not in t and n != r):
            raise ctx.error(node, f"term '{t}' does not fit an operand of rank {r}")
        ellipsis.append(r - n if "..." in t else 0)
    wide = max(ellipsis, default=0)
    broadcast = [f"...{i}" for i in range(wide)]

    def expand(t: str, n: int) -> list[str]:
        before, dots, after = t.partition("...")
        return list(before) + (broadcast[wide - n:] if dots else []) + list(after)

    labels = [expand(t, n) for t, n in zip(terms, ellipsis)]
    if arrow:
        outputs = expand(out, wide)
    else:
        counts = Counter(l for ls in labels for l in ls if len(l) == 1)
        outputs = broadcast + sorted(l for l, c in counts.items() if c == 1)
    if len(set(outputs)) != len(outputs) or not set(outputs) <= {l for ls in labels for l in ls}:
        raise ctx.error(node, f"bad output term in equation '{equation}'")
    return labels, outputs


def _diagonal(ctx, x, labels):
    """A label repeated within one operand takes the diagonal: mask off the elements
    whose two indices differ, then sum one of the dims away."""
    b = ctx.b
    while len(set(labels)) != len(labels):
        first = next(i for i, l in enumerate(labels) if labels.index(l) != i)
        i = labels.index(labels[first])
        dims = x.shape.dims
        if dims[i] != dims[first]:
            raise ValueError(f"label '{labels[i]}' has sizes {dims[i]} and {dims[first]}")
        iota = Shape.array(dtypes.S64, dims)
        same = b.compare(b.iota(iota, i), b.iota(iota, first), "EQ")
        x = b.op(Opcode.SELECT, same, x, ctx.full(0, x.shape.dtype, dims))
        x = ctx.reduce(x, (first,), Opcode.ADD, 0)
        labels = labels[:first] + labels[first + 1:]
    return x, labels


def _sum_out(ctx, x, labels, keep):
    """Sum the dims whose labels are not in ``keep``."""
    gone = [i for i, l in enumerate(labels) if l not in keep]
    if not gone:
        return x, labels
    return (ctx.reduce(x, gone, Opcode.ADD, 0),
            [l for i, l in enumerate(labels) if i not in gone])


def _contract(ctx, x, xl, y, yl, keep):
    """x * y over their common labels: those in ``keep`` stay (batch), the others are
    summed (contracted). Result labels: batch, x's own, y's own."""
    b = ctx.b
    batch = [l for l in xl if l in yl and l in keep]
    summed = [l for l in xl if l in yl and l not in keep]
    x_own = [l for l in xl if l not in yl]
    y_own = [l for l in yl if l not in xl]
    result = batch + x_own + y_own
    if summed:
        dn = DotDimensionNumbers(tuple(xl.index(l) for l in batch),
                                 tuple(xl.index(l) for l in summed),
                                 tuple(yl.index(l) for l in batch),
                                 tuple(yl.index(l) for l in summed))
        return b.dot(x, y, dn), result
    # no contraction: an outer product, broadcast and multiplied (fused)
    sizes = dict(zip(xl, x.shape.dims)) | dict(zip(yl, y.shape.dims))
    dims = tuple(sizes[l] for l in result)

    def spread(v, ls):
        order = sorted(range(len(ls)), key=lambda i: result.index(ls[i]))
        return b.broadcast(b.transpose(v, order), dims, sorted(result.index(l) for l in ls))
    return b.op(Opcode.MULTIPLY, spread(x, xl), spread(y, yl)), result


@register("Einsum", since=12)
def einsum(ctx, node):
    xs = ctx.inputs(node)
    labels, outputs = _einsum_labels(ctx, node, ctx.attr(node, "equation"),
                                     [x.shape.rank for x in xs])
    sizes: dict[str, int] = {}
    for x, ls in zip(xs, labels):
        for l, n in zip(ls, x.shape.dims):
            if sizes.get(l, 1) not in (1, n) and n != 1:
                raise ctx.error(node, f"label '{l}' has sizes {sizes[l]} and {n}")
            sizes[l] = max(sizes.get(l, 1), n)
    ops = []
    for x, ls in zip(xs, labels):
        try:
            x, ls = _diagonal(ctx, x, list(ls))
        except ValueError as e:
            raise ctx.error(node, str(e)) from None
        # a size-1 dim against a larger one broadcasts: drop it, the label comes back
        # from the other operand (or the final broadcast)
        kept = [i for i, l in enumerate(ls) if x.shape.dims[i] == sizes[l]]
        x = ctx.b.reshape(x, [x.shape.dims[i] for i in kept])
        ops.append((x, [ls[i] for i in kept]))

    def needed(after: int) -> set:
        return set(outputs).union(*(ls for _, ls in ops[after + 1:]))

    x, xl = _sum_out(ctx, *ops[0], needed(0))
    for k in range(1, len(ops)):
        y, yl = ops[k]
        keep = needed(k)
        x, xl = _sum_out(ctx, x, xl, keep | set(yl))
        y, yl = _sum_out(ctx, y, yl, keep | set(xl))
        x, xl = _contract(ctx, x, xl, y, yl, keep)
    x, xl = _sum_out(ctx, x, xl, set(outputs))
    present = [l for l in outputs if l in xl]
    x = ctx.b.transpose(x, [xl.index(l) for l in present])
    dims = tuple(sizes[l] for l in outputs)
    return [ctx.b.broadcast(x, dims, [outputs.index(l) for l in present])]


# -- Det ----------------------------------------------------------------------------

@register("Det", since=11)
def det(ctx, node):
    """LU factorization with partial pivoting (LAPACK's getrf, what numpy's det runs),
    unrolled over the columns at compile time: each step picks the row with the largest
    |value| in the first column (an argmax reduce), swaps it first (one-hot selects),
    and eliminates below it on the shrinking trailing block. The determinant is the
    product of the pivots, negated once per swap."""
    from .reduce import arg_inits, arg_reducer
    x = ctx.input(node, 0)
    if x.shape.rank < 2 or x.shape.dims[-1] != x.shape.dims[-2] or not x.shape.dtype.is_float:
        raise ctx.error(node, f"input must be float square matrices (..., M, M), got {x.shape}")
    b, dt = ctx.b, x.shape.dtype
    batch, n = x.shape.dims[:-2], x.shape.dims[-1]
    nb = len(batch)
    det_value = ctx.full(1, dt, batch)
    m = x
    for size in range(n, 0, -1):
        dims = batch + (size, size)
        col = b.reshape(b.slice(m, (0,) * (nb + 2), dims[:-1] + (1,)), batch + (size,))
        rows = Shape.array(dtypes.S64, batch + (size,))
        best = b.op(Opcode.REDUCE, b.op(Opcode.ABS, col), b.iota(rows, nb),
                    *arg_inits(ctx, dt, True, False),
                    called=[arg_reducer(ctx, dt, True, False)], dimensions=(nb,))
        p = b.get_tuple_element(best, 1)                        # (batch), the pivot row
        is_p = b.compare(b.iota(Shape.array(dtypes.S64, dims), nb),
                         b.broadcast(p, dims, tuple(range(nb))), "EQ")
        zeros = ctx.full(0, dt, dims)
        pivot_row = ctx.reduce(b.op(Opcode.SELECT, is_p, m, zeros), (nb,), Opcode.ADD, 0)
        pivot = b.reshape(b.slice(pivot_row, (0,) * (nb + 1), batch + (1,)), batch)
        swapped = b.compare(p, ctx.full(0, dtypes.S64, batch), "NE")
        sign = b.op(Opcode.SELECT, swapped, ctx.full(-1, dt, batch), ctx.full(1, dt, batch))
        det_value = b.op(Opcode.MULTIPLY, det_value, b.op(Opcode.MULTIPLY, pivot, sign))
        if size == 1:
            break
        # rows 1.. after swapping rows 0 and p: row p's slot takes row 0
        row0 = b.slice(m, (0,) * (nb + 2), batch + (1, size))
        row0 = b.broadcast(b.reshape(row0, batch + (size,)), dims, tuple(range(nb)) + (nb + 1,))
        rest = b.op(Opcode.SELECT, is_p, row0, m)
        rest = b.slice(rest, (0,) * nb + (1, 0), dims)          # (batch, size-1, size)
        sub = batch + (size - 1, size - 1)
        lead = b.reshape(b.slice(rest, (0,) * (nb + 2), batch + (size - 1, 1)),
                         batch + (size - 1,))
        # a zero pivot means a zero column: the determinant is 0; eliminate nothing
        singular = b.compare(pivot, ctx.full(0, dt, batch), "EQ")
        safe = b.op(Opcode.SELECT, singular, ctx.full(1, dt, batch), pivot)
        factor = b.op(Opcode.DIVIDE, lead, b.broadcast(safe, lead.shape.dims, tuple(range(nb))))
        tail = b.slice(pivot_row, (0,) * nb + (1,), batch + (size,))
        outer = b.op(Opcode.MULTIPLY,
                     b.broadcast(factor, sub, tuple(range(nb + 1))),
                     b.broadcast(tail, sub, tuple(range(nb)) + (nb + 1,)))
        m = b.op(Opcode.SUBTRACT, b.slice(rest, (0,) * nb + (0, 1), batch + (size - 1, size)),
                 outer)
    return [det_value]

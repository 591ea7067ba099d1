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

"""The ai.onnx.ml ops on numeric tensors: Binarizer, LabelEncoder, TreeEnsemble.

LabelEncoder maps keys to values with a default; string keys or values are out of
scope (xlac holds no strings) and refused by the importer's type check.

TreeEnsemble: the forest lives in the attributes, so its structure is known at
compile time and the lowering needs no control flow: every interior node's decision
is computed for every sample at once (the split feature gathered, compared with the
node's mode: LEQ, LT, GTE, GT, EQ, NEQ or set membership, NaN following
missing_tracks_true); a leaf is reached when every decision on its path went its
way (the path's decisions gathered and AND-reduced, paths padded with an
always-true column); the leaf values then meet the targets in one dot (SUM,
AVERAGE) or a masked reduce (MIN, MAX). The work is samples x leaves x depth, not
x all nodes.
"""
from __future__ import annotations

import numpy as np

from ...hlo import DotDimensionNumbers, GatherDimensionNumbers, Opcode, dtypes
from .registry import register

ML = "ai.onnx.ml"


@register("Binarizer", since=1, domain=ML)
def binarizer(ctx, node):
    # x > threshold ? 1 : 0, in x's type
    x = ctx.input(node, 0)
    dt = x.shape.dtype
    above = ctx.b.compare(x, ctx.full(ctx.attr(node, "threshold", 0.0), dt, x.shape.dims),
                          "GT")
    return [ctx.b.convert(above, dt)]


def _table(ctx, node, prefix):
    """The keys or values of a LabelEncoder: (numpy array, name of the attribute)."""
    found = [(n, ctx.attr(node, f"{prefix}_{n}", None))
             for n in ("floats", "int64s", "strings", "tensor")]
    found = [(n, v) for n, v in found if v is not None]
    if len(found) != 1:
        raise ctx.error(node, f"needs exactly one of {prefix}_floats, {prefix}_int64s, "
                              f"{prefix}_strings, {prefix}_tensor")
    name, value = found[0]
    value = np.asarray(value, dtype={"floats": np.float32, "int64s": np.int64}.get(name))
    if name == "strings" or value.dtype.kind in "OSU":
        raise ctx.error(node, f"{prefix} are strings, which xlac does not support")
    return value.reshape(-1)


@register("LabelEncoder", since=2, domain=ML)
def label_encoder(ctx, node):
    # y = values[i] where x == keys[i], else the default: one select per key, the last
    # outermost, so that the last of duplicate keys wins (ONNX's reference builds a dict).
    x = ctx.input(node, 0)
    keys, values = _table(ctx, node, "keys"), _table(ctx, node, "values")
    if len(keys) != len(values):
        raise ctx.error(node, f"{len(keys)} keys but {len(values)} values")
    default = ctx.attr(node, "default_tensor", None)
    if default is None:
        default = {np.dtype(np.float32): ctx.attr(node, "default_float", -0.0),
                   np.dtype(np.int64): ctx.attr(node, "default_int64", -1)}.get(values.dtype)
        ctx.attr(node, "default_string", None)
    else:
        for name in ("default_float", "default_int64", "default_string"):
            ctx.attr(node, name, None)
    if default is None:
        raise ctx.error(node, "values_tensor needs default_tensor")
    out_dt = dtypes.from_numpy(values.dtype)
    key_dt = x.shape.dtype
    b, dims = ctx.b, x.shape.dims
    y = ctx.full(np.asarray(default).reshape(-1)[0], out_dt, dims)
    for k, v in zip(keys, values):
        hit = b.compare(x, ctx.full(k, key_dt, dims), "EQ")
        if key_dt.is_float and np.isnan(k):             # a NaN key matches NaN
            hit = b.compare(x, x, "NE")
        y = b.op(Opcode.SELECT, hit, ctx.full(v, out_dt, dims), y)
    return [y]


# -- TreeEnsemble ----------------------------------------------------------------------

_MODES = ("LE", "LT", "GE", "GT", "EQ", "NE")     # ONNX modes 0-5 as HLO directions
_MEMBER = 6
_AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


def _columns(ctx, x, index):
    """x[:, index] for the integer array ``index`` (any shape): a gather."""
    b = ctx.b
    idx = b.constant(np.asarray(index, np.int64))
    return b.gather(x, idx, GatherDimensionNumbers((0,), (1,), (1,), idx.shape.rank),
                    (x.shape.dims[0], 1))


def _paths(ctx, node, roots, true_ids, false_ids, true_leaf, false_leaf, num_nodes):
    """Per leaf of each tree: (leaf index, [(interior node, branch taken)...])."""
    out = []

    def walk(i, is_leaf, path, depth):
        if depth > num_nodes:
            raise ctx.error(node, "the trees have a cycle")
        if is_leaf:
            out.append((i, path))
            return
        if not 0 <= i < num_nodes:
            raise ctx.error(node, f"node id {i} is out of range")
        walk(true_ids[i], true_leaf[i], path + [(i, True)], depth + 1)
        walk(false_ids[i], false_leaf[i], path + [(i, False)], depth + 1)

    for r in roots:
        # a root whose branches are the same leaf is a tree of one leaf
        if true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]:
            walk(true_ids[r], True, [], 0)
        else:
            walk(r, False, [], 0)
    return out


@register("TreeEnsemble", since=5, domain=ML, ignore=("nodes_hitrates",))
def tree_ensemble(ctx, node):
    b = ctx.b
    x = ctx.input(node, 0)
    if x.shape.rank != 2 or not x.shape.dtype.is_float:
        raise ctx.error(node, f"X must be float [N, F], got {x.shape}")
    dt, (n, features) = x.shape.dtype, x.shape.dims
    splits = np.asarray(ctx.attr(node, "nodes_splits"), np.float64).reshape(-1)
    feature_ids = list(ctx.attr(node, "nodes_featureids"))
    modes = [int(m) for m in np.asarray(ctx.attr(node, "nodes_modes")).reshape(-1)]
    true_ids, false_ids = ctx.attr(node, "nodes_truenodeids"), ctx.attr(node, "nodes_falsenodeids")
    true_leaf, false_leaf = ctx.attr(node, "nodes_trueleafs"), ctx.attr(node, "nodes_falseleafs")
    targets = list(ctx.attr(node, "leaf_targetids"))
    weights = np.asarray(ctx.attr(node, "leaf_weights"), np.float64).reshape(-1)
    roots = list(ctx.attr(node, "tree_roots"))
    aggregate = _AGGREGATES.get(ctx.attr(node, "aggregate_function", 1))
    post = ctx.attr(node, "post_transform", 0)
    tracks = list(ctx.attr(node, "nodes_missing_value_tracks_true", ()))
    members = ctx.attr(node, "membership_values", None)
    n_targets = ctx.attr(node, "n_targets", None)
    m = len(splits)
    if not (len(feature_ids) == len(modes) == len(true_ids) == len(false_ids)
            == len(true_leaf) == len(false_leaf) == m) or len(targets) != len(weights):
        raise ctx.error(node, "the nodes_* (or leaf_*) attributes differ in length")
    if aggregate is None:
        raise ctx.error(node, f"unknown aggregate_function {ctx.attr(node, 'aggregate_function')}")
    if post not in (0, 1, 2, 3):
        raise ctx.error(node, f"post_transform {post} is not supported (PROBIT needs erfinv)")
    if any(not 0 <= f < features for f in feature_ids) or any(mo not in range(7) for mo in modes):
        raise ctx.error(node, "a node has a feature id or mode out of range")
    n_targets = n_targets if n_targets is not None else max(targets, default=-1) + 1
    if any(not 0 <= t < n_targets for t in targets):
        raise ctx.error(node, f"a leaf target is outside [0, {n_targets})")
    tracks = tracks or [0] * m

    # decisions (n, m + 1): column m is always true (path padding)
    dims = (n, m)
    values = _columns(ctx, x, feature_ids) if m else None
    decision = ctx.full(0, dtypes.PRED, dims)
    split = b.broadcast(b.constant(splits.astype(dt.np)), dims, (1,))
    for k, direction in enumerate(_MODES):
        if k in modes:
            mask = b.broadcast(b.constant(np.array([mo == k for mo in modes])), dims, (1,))
            hit = b.op(Opcode.AND, mask, b.compare(values, split, direction))
            decision = b.op(Opcode.OR, decision, hit)
    if _MEMBER in modes:
        decision = b.op(Opcode.OR, decision, _membership(ctx, node, x, modes, feature_ids,
                                                         members))
    if any(tracks):
        missing = b.op(Opcode.AND, b.broadcast(b.constant(np.array(tracks, bool)), dims, (1,)),
                       b.compare(values, values, "NE"))
        decision = b.op(Opcode.OR, decision, missing)
    decision = b.concatenate([decision, ctx.full(1, dtypes.PRED, (n, 1))], 1)

    paths = _paths(ctx, node, roots, true_ids, false_ids, true_leaf, false_leaf, m)
    if any(not 0 <= leaf < len(weights) for leaf, _ in paths):
        raise ctx.error(node, "a leaf id is out of range")
    depth = max((len(p) for _, p in paths), default=0) or 1
    path_nodes = np.full((len(paths), depth), m, np.int64)
    path_branch = np.ones((len(paths), depth), bool)
    for row, (_, path) in enumerate(paths):
        for col, (i, taken) in enumerate(path):
            path_nodes[row, col], path_branch[row, col] = i, taken
    along = b.compare(_columns(ctx, decision, path_nodes),
                      b.broadcast(b.constant(path_branch), (n,) + path_branch.shape, (1, 2)), "EQ")
    reached = ctx.reduce(along, (2,), Opcode.AND, True)            # (n, leaves)

    leaf_ids = [leaf for leaf, _ in paths]
    table = np.zeros((len(paths), n_targets))                     # leaf -> its target
    for row, leaf in enumerate(leaf_ids):
        table[row, targets[leaf]] = 1
    leaf_values = weights[leaf_ids]
    if aggregate in ("SUM", "AVERAGE"):
        scale = 1 / len(roots) if aggregate == "AVERAGE" and roots else 1
        contribution = b.constant((table * leaf_values[:, None] * scale).astype(dt.np))
        y = b.dot(b.convert(reached, dt), contribution, DotDimensionNumbers((), (1,), (), (0,)))
    else:
        big = np.finfo(dt.np).max if aggregate == "MIN" else np.finfo(dt.np).min
        cube = (n, len(paths), n_targets)
        hit = b.op(Opcode.AND, b.broadcast(reached, cube, (0, 1)),
                   b.broadcast(b.constant(table.astype(bool)), cube, (1, 2)))
        v = b.broadcast(b.constant(leaf_values.astype(dt.np)), cube, (1,))
        y = ctx.reduce(b.op(Opcode.SELECT, hit, v, ctx.full(big, dt, cube)), (1,),
                       Opcode.MINIMUM if aggregate == "MIN" else Opcode.MAXIMUM, big)
        # a target no reached leaf scores is 0 (onnxruntime; the onnx reference leaves
        # the float extreme its loop starts from)
        scored = ctx.reduce(hit, (1,), Opcode.OR, False)
        y = b.op(Opcode.SELECT, scored, y, ctx.full(0, dt, y.shape.dims))
    return [_post_transform(ctx, y, post)]


def _membership(ctx, node, x, modes, feature_ids, members):
    """Decisions of the set-membership nodes: x[feature] equals one of the node's
    values (membership_values lists each such node's set in node order, NaN-ended)."""
    b = ctx.b
    if members is None:
        raise ctx.error(node, "set membership nodes need membership_values")
    values = np.asarray(members, np.float64).reshape(-1)
    pairs, at = [], 0
    for i, mo in enumerate(modes):
        if mo != _MEMBER:
            continue
        while at < len(values) and not np.isnan(values[at]):
            pairs.append((i, values[at]))
            at += 1
        at += 1
    n, m = x.shape.dims[0], len(modes)
    if not pairs:
        return ctx.full(0, dtypes.PRED, (n, m))
    owner = np.array([i for i, _ in pairs])
    dt = x.shape.dtype
    equal = b.compare(_columns(ctx, x, [feature_ids[i] for i in owner]),
                      b.broadcast(b.constant(np.array([v for _, v in pairs], dt.np)),
                                  (n, len(pairs)), (1,)), "EQ")            # (n, pairs)
    cube = (n, len(pairs), m)
    mine = b.broadcast(b.constant(owner[:, None] == np.arange(m)[None, :]), cube, (1, 2))
    return ctx.reduce(b.op(Opcode.AND, b.broadcast(equal, cube, (0, 1)), mine), (1,),
                      Opcode.OR, False)


def _post_transform(ctx, y, post: int):
    """NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO (a softmax that leaves exact zeros 0)."""
    from .nn import softmax
    b = ctx.b
    if post == 1:
        return softmax(ctx, y, (1,), log=False)
    if post == 2:
        return b.op(Opcode.LOGISTIC, y)
    if post == 3:
        dims = y.shape.dims
        zero = b.compare(y, ctx.full(0, y.shape.dtype, dims), "EQ")
        m = ctx.reduce(y, (1,), Opcode.MAXIMUM, -np.inf)
        e = b.op(Opcode.EXP, b.op(Opcode.SUBTRACT, y, b.broadcast(m, dims, (0,))))
        e = b.op(Opcode.SELECT, zero, ctx.full(0, y.shape.dtype, dims), e)
        total = ctx.reduce(e, (1,), Opcode.ADD, 0)
        return b.op(Opcode.DIVIDE, e, b.broadcast(total, dims, (0,)))
    return y

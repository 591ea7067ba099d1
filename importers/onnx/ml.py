"""The ai.onnx.ml ops on numeric tensors: Binarizer, LabelEncoder, TreeEnsemble and the
deprecated TreeEnsembleRegressor and TreeEnsembleClassifier.

LabelEncoder maps keys to values with a default; string keys or values are out of
scope (xlac holds no strings) and refused by the importer's type check.

TreeEnsemble: the forest lives in the attributes, so its structure is known at
compile time. It becomes node arrays (feature, split, mode, children; a leaf is a node
that goes to itself) and a walk: every tree of every sample steps one level down per
step, as many steps as the deepest tree has levels, each step a few gathers from the
arrays, a compare and a select, so the work is samples x trees x depth, as in
onnxruntime, and the state is one node index per tree and sample. The reached leaves'
weights are then gathered and summed over the trees (SUM, AVERAGE) or their extreme
taken (MIN, MAX). A node's mode is one compare when the forest has one mode (LEQ in
every converter's output), else bits of less, equal and greater; set membership and
missing_tracks_true (NaN goes true) are OR-ed in. The deprecated ops (what skl2onnx
still writes) name nodes by (tree id, node id) and let a leaf weigh several targets or
classes; they reuse the walk.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hlo import GatherDimensionNumbers, Opcode, dtypes
from .ml_models import (class_labels, features, first_argmax, lookup, post_transform,
                        scores)
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
_LEAF = -1
_AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
# the comparisons a mode is true on, as bits: less 1, equal 2, greater 4
_MODE_BITS = {0: 3, 1: 1, 2: 6, 3: 4, 4: 2, 5: 5, _MEMBER: 0}


@dataclass
class Nodes:
    """A forest as node arrays, every tree's nodes and leaves numbered together: an
    interior node tests x[feature] against split by mode (0-6) and goes to true_id or
    false_id; a leaf (mode _LEAF) goes to itself and names its row of the leaf table
    (leaf_row). roots: each tree's first node."""
    feature: list
    split: list
    mode: list
    track: list
    true_id: list
    false_id: list
    leaf_row: list
    roots: list

    def depth(self, ctx, node) -> int:
        """The most interior nodes on a root-to-leaf path; a cycle is an error. A walk
        with a stack, not recursion, so that a tree may be deeper than Python's stack."""
        count, deepest, most = len(self.mode), 0, {}
        stack = [(r, 0) for r in self.roots]
        while stack:
            i, d = stack.pop()
            if not 0 <= i < count:
                raise ctx.error(node, f"node id {i} is out of range")
            if d > count:               # a path longer than the nodes repeats one
                raise ctx.error(node, "the trees have a cycle")
            if self.mode[i] == _LEAF:
                deepest = max(deepest, d)
            elif most.get(i, -1) < d:   # a node reached again no deeper adds nothing
                most[i] = d
                stack += [(self.true_id[i], d + 1), (self.false_id[i], d + 1)]
        return deepest


def _gather(ctx, table, index):
    """table[index] for a 1-D constant ``table`` and an integer array ``index``."""
    b = ctx.b
    return b.gather(b.constant(np.asarray(table)), index,
                    GatherDimensionNumbers((), (0,), (0,), index.shape.rank), (1,))


def _columns(ctx, x, index):
    """x[:, index] for the integer array ``index`` (any shape): a gather."""
    b = ctx.b
    idx = b.constant(np.asarray(index, np.int64))
    return b.gather(x, idx, GatherDimensionNumbers((0,), (1,), (1,), idx.shape.rank),
                    (x.shape.dims[0], 1))


def _at_sample(ctx, x, index):
    """x[s, index[t, s]]: per sample, the columns of x (or of any (n, k) array) that
    ``index`` (trees, n) names."""
    return ctx.b.gather(x, index, GatherDimensionNumbers((), (1,), (1,), 2, (0,), (1,)),
                        (1, 1))


def walk(ctx, node, x, nodes: Nodes, members=None):
    """The leaf each tree reaches for each sample, as a leaf row (s32 (trees, n)): all
    trees step down one level at a time, ``depth`` times (a leaf stays where it is), so
    the work is samples x trees x depth, as in onnxruntime's walk. Tree-major, so that
    a batch walks one tree's nodes while they are in the cache."""
    b = ctx.b
    n, dt = x.shape.dims[0], x.shape.dtype
    dims = (len(nodes.roots), n)
    s32 = np.int32
    interior = [i for i, mo in enumerate(nodes.mode) if mo != _LEAF]
    modes = {nodes.mode[i] for i in interior}
    feature = np.asarray(nodes.feature, s32)
    split = np.asarray(nodes.split, np.float64).astype(dt.np)
    true_id = np.asarray(nodes.true_id, s32)
    false_id = np.asarray(nodes.false_id, s32)
    track = np.asarray(nodes.track, bool) & (np.asarray(nodes.mode) != _LEAF)
    bits = np.asarray([_MODE_BITS.get(mo, 0) for mo in nodes.mode], s32)
    member = None
    if _MEMBER in modes:
        member = _membership(ctx, node, x, nodes.mode, nodes.feature, members)  # (n, nodes)
    at = b.broadcast(b.constant(np.asarray(nodes.roots, s32)), dims, (0,))
    for _ in range(nodes.depth(ctx, node)):
        value = _at_sample(ctx, x, _gather(ctx, feature, at))
        threshold = _gather(ctx, split, at)
        if len(modes) == 1 and _MEMBER not in modes:
            go = b.compare(value, threshold, _MODES[next(iter(modes))])
        else:
            mode = _gather(ctx, bits, at)
            go = ctx.full(0, dtypes.PRED, dims)
            for bit, direction in ((1, "LT"), (2, "EQ"), (4, "GT")):
                wants = b.compare(b.op(Opcode.AND, mode, ctx.full(bit, dtypes.S32, dims)),
                                  ctx.full(0, dtypes.S32, dims), "NE")
                go = b.op(Opcode.OR, go, b.op(Opcode.AND, wants,
                                              b.compare(value, threshold, direction)))
            if member is not None:
                go = b.op(Opcode.OR, go, _at_sample(ctx, member, at))
        if track.any():
            missing = b.compare(value, value, "NE")
            go = b.op(Opcode.OR, go, b.op(Opcode.AND, _gather(ctx, track, at), missing))
        at = b.op(Opcode.SELECT, go, _gather(ctx, true_id, at), _gather(ctx, false_id, at))
    return _gather(ctx, np.asarray(nodes.leaf_row, s32), at)


def forest(ctx, leaves, table, has, aggregate, trees, dt):
    """The targets' scores (n, targets) and whether a reached leaf scored each (PRED),
    for the leaf rows ``leaves`` (trees, n) weighing table[row, target] where
    has[row, target]: the trees' weights summed (SUM, AVERAGE) or the scored ones'
    extreme (MIN, MAX; an unscored target holds the extreme)."""
    b = ctx.b
    count, n = leaves.shape.dims
    targets = table.shape[1]
    cube = (count, n, targets)

    def rows(array):
        return b.gather(b.constant(array), leaves,
                        GatherDimensionNumbers((2,), (0,), (0,), 2), (1, targets))
    hit = rows(has)
    scored = ctx.reduce(hit, (0,), Opcode.OR, False)
    if aggregate in ("SUM", "AVERAGE"):
        scale = 1 / trees if aggregate == "AVERAGE" and trees else 1
        return ctx.reduce(rows((table * scale).astype(dt.np)), (0,), Opcode.ADD, 0), scored
    big = np.finfo(dt.np).max if aggregate == "MIN" else np.finfo(dt.np).min
    y = ctx.reduce(b.op(Opcode.SELECT, hit, rows(table.astype(dt.np)), ctx.full(big, dt, cube)),
                   (0,), Opcode.MINIMUM if aggregate == "MIN" else Opcode.MAXIMUM, big)
    return y, scored


@register("TreeEnsemble", since=5, domain=ML, ignore=("nodes_hitrates",))
def tree_ensemble(ctx, node):
    b = ctx.b
    x = ctx.input(node, 0)
    if x.shape.rank != 2 or not x.shape.dtype.is_float:
        raise ctx.error(node, f"X must be float [N, F], got {x.shape}")
    dt, features = x.shape.dtype, x.shape.dims[1]
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
    if len(tracks) != m:
        raise ctx.error(node, "the nodes_* (or leaf_*) attributes differ in length")
    leaves = len(weights)
    for ids, leaf in ((true_ids, true_leaf), (false_ids, false_leaf)):
        for i, is_leaf in zip(ids, leaf):
            if not 0 <= i < (leaves if is_leaf else m):
                raise ctx.error(node, f"{'leaf' if is_leaf else 'node'} id {i} is out of range")
    if any(not 0 <= r < m for r in roots):
        raise ctx.error(node, "a tree root is out of range")
    # interior nodes first, then leaf k as node m + k
    to_self = list(range(m, m + leaves))
    nodes = Nodes(feature_ids + [0] * leaves, list(splits) + [0.0] * leaves,
                  modes + [_LEAF] * leaves, tracks + [0] * leaves,
                  [i + m * bool(t) for i, t in zip(true_ids, true_leaf)] + to_self,
                  [i + m * bool(t) for i, t in zip(false_ids, false_leaf)] + to_self,
                  [-1] * m + list(range(leaves)), roots)
    table = np.zeros((leaves, n_targets))                        # leaf -> its target
    has = np.zeros((leaves, n_targets), bool)
    table[np.arange(leaves), targets] = weights
    has[np.arange(leaves), targets] = True
    y, scored = forest(ctx, walk(ctx, node, x, nodes, members), table, has, aggregate,
                       len(roots), dt)
    if aggregate in ("MIN", "MAX"):
        # a target no reached leaf scores is 0 (onnxruntime; the onnx reference leaves
        # the float extreme its loop starts from)
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


# -- TreeEnsembleRegressor, TreeEnsembleClassifier (deprecated, still what skl2onnx writes) -

_OLD_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3,
              "BRANCH_EQ": 4, "BRANCH_NEQ": 5}


def _tensor_or_list(ctx, node, name):
    """An attribute given as floats (``name``) or as a tensor (``name_as_tensor``)."""
    value = ctx.attr(node, name, None)
    tensor = ctx.attr(node, name + "_as_tensor", None)
    if value is not None and tensor is not None:
        raise ctx.error(node, f"has both {name} and {name}_as_tensor")
    return np.asarray(value if value is not None else tensor if tensor is not None else (),
                      np.float64).reshape(-1)


def _old_forest(ctx, node, x, prefix, n_out):
    """Lower the nodes_* and <prefix>_* attributes of the deprecated ops: the nodes,
    named by (tree id, node id), become the TreeEnsemble lowering's node arrays; each
    leaf may weigh several targets.
    Returns (the leaf rows reached (trees, n), table (leaves, n_out), has (leaves,
    n_out), trees)."""
    tree_ids = list(ctx.attr(node, "nodes_treeids"))
    node_ids = list(ctx.attr(node, "nodes_nodeids"))
    feature_ids = list(ctx.attr(node, "nodes_featureids"))
    modes = list(ctx.attr(node, "nodes_modes"))
    values = _tensor_or_list(ctx, node, "nodes_values")
    true_ids = list(ctx.attr(node, "nodes_truenodeids"))
    false_ids = list(ctx.attr(node, "nodes_falsenodeids"))
    tracks = list(ctx.attr(node, "nodes_missing_value_tracks_true", ())) or [0] * len(modes)
    count = len(node_ids)
    if not (len(tree_ids) == len(feature_ids) == len(modes) == len(true_ids)
            == len(false_ids) == len(tracks) == count) or len(values) not in (0, count):
        raise ctx.error(node, "the nodes_* attributes differ in length")
    values = values if len(values) else np.zeros(count)
    at = {(t, i): row for row, (t, i) in enumerate(zip(tree_ids, node_ids))}
    if len(at) != count:
        raise ctx.error(node, "two nodes share a (tree id, node id)")
    unknown = set(modes) - set(_OLD_MODES) - {"LEAF"}
    if unknown:
        raise ctx.error(node, f"unknown nodes_modes {sorted(unknown)}")
    interior = {row for row in range(count) if modes[row] != "LEAF"}
    for row in interior:
        if not 0 <= feature_ids[row] < x.shape.dims[1]:
            raise ctx.error(node, f"node {node_ids[row]} reads feature {feature_ids[row]} of "
                                  f"{x.shape.dims[1]}")

    def child(row, ids):
        key = (tree_ids[row], ids[row])
        if key not in at:
            raise ctx.error(node, f"tree {key[0]} has no node {key[1]}")
        return at[key]

    referenced = {child(row, ids) for row in interior for ids in (true_ids, false_ids)}
    roots = [row for row in range(count) if row not in referenced]
    if len({tree_ids[r] for r in roots}) != len(roots) or \
            {tree_ids[r] for r in roots} != set(tree_ids):
        raise ctx.error(node, "each tree needs exactly one root")
    leaf_rows = [row for row in range(count) if modes[row] == "LEAF"]
    leaf_of = {row: k for k, row in enumerate(leaf_rows)}
    nodes = Nodes([f if r in interior else 0 for r, f in enumerate(feature_ids)], values,
                  [_OLD_MODES.get(mo, _LEAF) for mo in modes], tracks,
                  [child(r, true_ids) if r in interior else r for r in range(count)],
                  [child(r, false_ids) if r in interior else r for r in range(count)],
                  [leaf_of.get(r, -1) for r in range(count)], roots)
    w_tree = list(ctx.attr(node, f"{prefix}_treeids"))
    w_node = list(ctx.attr(node, f"{prefix}_nodeids"))
    w_ids = list(ctx.attr(node, f"{prefix}_ids"))
    w = _tensor_or_list(ctx, node, f"{prefix}_weights")
    if not len(w_tree) == len(w_node) == len(w_ids) == len(w):
        raise ctx.error(node, f"the {prefix}_* attributes differ in length")
    table = np.zeros((len(leaf_rows), n_out))
    has = np.zeros((len(leaf_rows), n_out), bool)
    for t, i, target, weight in zip(w_tree, w_node, w_ids, w):
        row = at.get((t, i))
        if row not in leaf_of or not 0 <= target < n_out:
            raise ctx.error(node, f"a weight of tree {t} node {i} target {target} has no "
                                  "leaf or target")
        table[leaf_of[row], target] += weight
        has[leaf_of[row], target] = True
    ctx.attr(node, "nodes_hitrates", None)              # hints for a runtime's cache
    ctx.attr(node, "nodes_hitrates_as_tensor", None)
    return walk(ctx, node, x, nodes), table, has, len(roots)


@register("TreeEnsembleRegressor", since=1, domain=ML)
def tree_ensemble_regressor(ctx, node):
    # onnxruntime: a target that no reached leaf scores is 0, without its base value
    b = ctx.b
    x = features(ctx, node, ctx.input(node, 0))
    n_targets = ctx.attr(node, "n_targets", 1)
    aggregate = ctx.attr(node, "aggregate_function", "SUM")
    if aggregate not in _AGGREGATES.values():
        raise ctx.error(node, f"unknown aggregate_function {aggregate!r}")
    post = post_transform(ctx, node)
    base = _tensor_or_list(ctx, node, "base_values")
    if len(base) not in (0, n_targets):
        raise ctx.error(node, f"{len(base)} base_values for {n_targets} targets")
    leaves, table, has, trees = _old_forest(ctx, node, x, "target", n_targets)
    y, scored = forest(ctx, leaves, table, has, aggregate, trees, dtypes.F32)
    dims = y.shape.dims
    if len(base):
        y = b.op(Opcode.ADD, y, b.broadcast(b.constant(base.astype(np.float32)), dims, (1,)))
    y = b.op(Opcode.SELECT, scored, y, ctx.full(0, dtypes.F32, dims))
    return [scores(ctx, y, post)]


@register("TreeEnsembleClassifier", since=1, domain=ML)
def tree_ensemble_classifier(ctx, node):
    # the class weights are summed; the label and the two-class scores follow
    # onnxruntime's TreeAggregatorClassifier, which the spec leaves open
    b = ctx.b
    labels = class_labels(ctx, node, "classlabels_int64s")
    post = post_transform(ctx, node)
    x = features(ctx, node, ctx.input(node, 0))
    n, k = x.shape.dims[0], len(labels)
    base = _tensor_or_list(ctx, node, "base_values")
    if k < 2 or len(base) not in ((0, k) if k > 2 else (0, 1, 2)):
        raise ctx.error(node, f"{len(base)} base_values for {k} class labels")
    leaves, table, has, trees = _old_forest(ctx, node, x, "class", k)
    y, scored = forest(ctx, leaves, table, has, "SUM", trees, dtypes.F32)
    if k > 2:
        # the label is the best class among the scored ones (with base_values, all)
        if len(base):
            y = b.op(Opcode.ADD, y, b.broadcast(b.constant(base.astype(np.float32)), (n, k), (1,)))
            best = y
        else:
            best = b.op(Opcode.SELECT, scored, y, ctx.full(-np.inf, dtypes.F32, (n, k)))
        return [lookup(ctx, labels, first_argmax(ctx, best)), scores(ctx, y, post)]
    return _binary_trees(ctx, node, labels, post, y, scored, base, has, table)


def _binary_trees(ctx, node, labels, post, y, scored, base, has, table):
    """onnxruntime's two-class rule. Class 1 scored (some reached leaf weighs it) keeps
    two scores; otherwise (without two base_values) one score s0 is left, expanded to
    [1 - s0, s0] (all weights >= 0) or [-s0, s0] (LOGISTIC: their logistics). The label
    is labels[1] when the positive score (s1, else s0) passes 0.5 (weights >= 0) or 0,
    where only one class has weights; else 1 or 0 as integers (onnxruntime's
    positive_label_/negative_label_)."""
    b = ctx.b
    f32, n = dtypes.F32, y.shape.dims[0]
    col = [b.reshape(b.slice(y, (0, c), (n, c + 1)), (n,)) for c in (0, 1)]
    has_col = [b.reshape(b.slice(scored, (0, c), (n, c + 1)), (n,)) for c in (0, 1)]
    s0, s1 = col
    has0, has1 = has_col
    single = len({c for c in range(2) if has[:, c].any()}) == 1
    positive = bool((table[has] >= 0).all())

    def full(v):
        return ctx.full(v, f32, (n,))
    kept = has1                                   # rows that keep both scores
    if len(base) == 2:
        with1 = b.op(Opcode.ADD, full(base[1]), s0)
        s0 = b.op(Opcode.SELECT, has1, b.op(Opcode.NEGATE, with1),
                  b.op(Opcode.ADD, s0, full(base[0])))
        s1 = b.op(Opcode.SELECT, has1, with1, s1)     # onnxruntime: no base when unscored
        kept = ctx.full(1, dtypes.PRED, (n,))
    elif len(base) == 1:
        s0 = b.op(Opcode.ADD, s0, full(base[0]))
    pos = b.op(Opcode.SELECT, has1, s1, b.op(Opcode.SELECT, has0, s0, full(0)))
    cut = 0.5 if single and positive else 0.0
    above = b.compare(pos, full(cut), "GT")
    pos_label, neg_label = (labels[1], labels[0]) if single else (1, 0)
    label = b.op(Opcode.SELECT, above, ctx.full(pos_label, dtypes.S64, (n,)),
                 ctx.full(neg_label, dtypes.S64, (n,)))
    both = scores(ctx, b.concatenate([b.reshape(s0, (n, 1)), b.reshape(s1, (n, 1))], 1), post)
    # every sample reaches a leaf of each tree: class 1 is always scored when every leaf
    # weighs it
    if len(base) != 2 and not has[:, 1].all():
        if post == "PROBIT" or (len(base) == 1 and not single):
            raise ctx.error(node, "this two-class forest leaves one score for some inputs, "
                                  "which onnxruntime writes into half of its two-column output "
                                  "(PROBIT, or one base value with both classes weighted)")
        second = 0 if single and positive else 2
        one = scores(ctx, b.reshape(s0, (n, 1)), post, second)
        both = b.op(Opcode.SELECT, b.broadcast(kept, (n, 2), (0,)), both, one)
    return [label, both]

"""The ai.onnx.ml ops that scikit-learn models converted by skl2onnx use: the
preprocessing ops (Normalizer, Scaler, Imputer, OneHotEncoder, FeatureVectorizer),
LinearClassifier, LinearRegressor, SVMClassifier and SVMRegressor.

The ONNX spec leaves much of these ops' behaviour open (the binary classifiers' second
score column, post_transform on one score, Normalizer on a zero row); xlac follows
onnxruntime's CPU kernels, which every converter is tested against, and says so where
it matters. Scores are float32 whatever the input type, as there. The models live in
the attributes, so every op is a few dots, compares and selects on constants.

SVMClassifier's Platt probabilities (prob_a, prob_b) go through onnxruntime's pairwise
coupling, an iteration that stops on convergence or after 100 sweeps: an HLO while with
its float32 arithmetic in its order.

Class labels that are strings are out of scope (xlac holds no strings). Refused as
unsupported: PROBIT where a two-class classifier has one score, which onnxruntime writes
into half of its two-column output (the other half is whatever the buffer held).
"""
from __future__ import annotations

import numpy as np

from ...hlo import DotDimensionNumbers, GatherDimensionNumbers, Opcode, Shape, dtypes
from ...hlo.while_loop import WhileLoop
from .registry import register
from .scope import STRING_LABELS

ML = "ai.onnx.ml"
F32 = dtypes.F32
_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


# -- shared --------------------------------------------------------------------------------

def features(ctx, node, x):
    """X as float32 [N, F] (a 1-D X is one row; trailing dims are flattened), as
    onnxruntime casts every input type to float."""
    if x.shape.rank == 0:
        raise ctx.error(node, "X must have at least one dimension")
    dims = x.shape.dims
    rows = (1, dims[0]) if x.shape.rank == 1 else (dims[0], int(np.prod(dims[1:])))
    x = ctx.b.reshape(x, rows) if rows != dims else x
    return x if x.shape.dtype == F32 else ctx.b.convert(x, F32)


def post_transform(ctx, node):
    post = ctx.attr(node, "post_transform", "NONE")
    if post not in _POST:
        raise ctx.error(node, f"unknown post_transform {post!r}")
    return post


def class_labels(ctx, node, name="classlabels_ints"):
    """The integer class labels (attribute ``name``) as numpy; string labels are out of
    scope."""
    if ctx.attr(node, "classlabels_strings", None) is not None:
        raise ctx.out_of_scope(node, "classlabels_strings: " + STRING_LABELS)
    labels = ctx.attr(node, name, None)
    if labels is None:
        raise ctx.error(node, f"needs {name}")
    return np.asarray(labels, np.int64)


def erfinv(ctx, v):
    """onnxruntime's ErfInv (ml_common.h), a closed-form approximation (Winitzki's,
    a = 0.147), so that PROBIT matches it rather than the exact inverse."""
    b, dims = ctx.b, v.shape.dims

    def c(value):
        return ctx.full(value, F32, dims)
    sign = b.op(Opcode.SELECT, b.compare(v, c(0), "LT"), c(-1), c(1))
    log = b.op(Opcode.LOG, b.op(Opcode.MULTIPLY, b.op(Opcode.SUBTRACT, c(1), v),
                                b.op(Opcode.ADD, c(1), v)))
    t = b.op(Opcode.ADD, c(2 / (np.pi * 0.147)), b.op(Opcode.MULTIPLY, c(0.5), log))
    root = b.op(Opcode.SQRT, b.op(Opcode.SUBTRACT, b.op(Opcode.MULTIPLY, t, t),
                                  b.op(Opcode.MULTIPLY, c(1 / 0.147), log)))
    return b.op(Opcode.MULTIPLY, sign, b.op(Opcode.SQRT, b.op(Opcode.SUBTRACT, root, t)))


def probit(ctx, y):
    b, dims = ctx.b, y.shape.dims
    twice = b.op(Opcode.SUBTRACT, b.op(Opcode.MULTIPLY, ctx.full(2, F32, dims), y),
                 ctx.full(1, F32, dims))
    return b.op(Opcode.MULTIPLY, ctx.full(np.sqrt(2), F32, dims), erfinv(ctx, twice))


def softmax_zero(ctx, y):
    """onnxruntime's SOFTMAX_ZERO: scores within 1e-7 of 0 stay (nearly) 0 and leave the
    sum; the max is taken over all of them."""
    b, dims = ctx.b, y.shape.dims
    mx = b.broadcast(ctx.reduce(y, (1,), Opcode.MAXIMUM, -np.inf), dims, (0,))
    small = b.compare(b.op(Opcode.ABS, y), ctx.full(1e-7, F32, dims), "LE")
    big = b.op(Opcode.EXP, b.op(Opcode.SUBTRACT, y, mx))
    tiny = b.op(Opcode.MULTIPLY, y, b.op(Opcode.EXP, b.op(Opcode.NEGATE, mx)))
    total = ctx.reduce(b.op(Opcode.SELECT, small, ctx.full(0, F32, dims), big), (1,),
                       Opcode.ADD, 0)
    return b.op(Opcode.DIVIDE, b.op(Opcode.SELECT, small, tiny, big),
                b.broadcast(total, dims, (0,)))


def scores(ctx, y, post: str, second: int = -1):
    """onnxruntime's post-transform of scores y [N, B] (batched_update_scores_inplace).
    With one score per row (B = 1) only PROBIT applies, and ``second`` >= 0 adds the
    other class's column: 0 or 1 give [1 - s, s], 2 or 3 give [-s, s] (with LOGISTIC,
    [logistic(-s), logistic(s)])."""
    from .nn import softmax
    b = ctx.b
    if y.shape.dims[1] > 1:
        if post == "SOFTMAX":
            return softmax(ctx, y, (1,), log=False)
        if post == "LOGISTIC":
            return b.op(Opcode.LOGISTIC, y)
        if post == "SOFTMAX_ZERO":
            return softmax_zero(ctx, y)
        return probit(ctx, y) if post == "PROBIT" else y
    if post == "PROBIT":
        return probit(ctx, y)
    if second < 0:
        return y
    if second in (0, 1):
        # onnxruntime applies LOGISTIC before the complement; PROBIT is refused by
        # the callers (onnxruntime writes its one column into the two-column output)
        y = b.op(Opcode.LOGISTIC, y) if post == "LOGISTIC" else y
        return b.concatenate([b.op(Opcode.SUBTRACT, ctx.full(1, F32, y.shape.dims), y), y], 1)
    if post == "LOGISTIC":
        return b.concatenate([b.op(Opcode.LOGISTIC, b.op(Opcode.NEGATE, y)),
                              b.op(Opcode.LOGISTIC, y)], 1)
    return b.concatenate([b.op(Opcode.NEGATE, y), y], 1)


def matmul_t(ctx, x, weights, bias=None):
    """x [N, F] @ weights[T, F]^T (+ bias [T]) with constant weights."""
    b = ctx.b
    y = b.dot(x, b.constant(np.asarray(weights, np.float32)),
              DotDimensionNumbers((), (1,), (), (1,)))
    if bias is not None:
        y = b.op(Opcode.ADD, y, b.broadcast(b.constant(np.asarray(bias, np.float32)),
                                            y.shape.dims, (1,)))
    return y


def first_argmax(ctx, y):
    """The index of each row's first maximum of y [N, K], as int64 [N]."""
    b = ctx.b
    n, k = y.shape.dims
    mx = b.broadcast(ctx.reduce(y, (1,), Opcode.MAXIMUM, -np.inf), (n, k), (0,))
    index = b.iota(Shape.array(dtypes.S64, (n, k)), 1)
    return ctx.reduce(b.op(Opcode.SELECT, b.compare(y, mx, "EQ"), index,
                           ctx.full(k, dtypes.S64, (n, k))), (1,), Opcode.MINIMUM, k)


def lookup(ctx, table, index):
    """table[index] for a constant int64 table and int64 indices [N]: a gather."""
    b = ctx.b
    t = b.constant(np.asarray(table, np.int64))
    idx = b.reshape(index, index.shape.dims + (1,))
    return b.gather(t, idx, GatherDimensionNumbers((), (0,), (0,), 1), (1,))


def where(ctx, cond, a, b_):
    """A select between two int64 constants by a bool [N]."""
    dims = cond.shape.dims
    return ctx.b.op(Opcode.SELECT, cond, ctx.full(a, dtypes.S64, dims),
                    ctx.full(b_, dtypes.S64, dims))


# -- preprocessing -------------------------------------------------------------------------

@register("Normalizer", since=1, domain=ML)
def normalizer(ctx, node):
    # each row divided by its MAX, L1 or L2 norm; a row whose norm is 0 is copied
    # (onnxruntime; the spec leaves it open)
    x = ctx.input(node, 0)
    if x.shape.rank > 2:
        raise ctx.error(node, f"X must be 1-D or 2-D, got {x.shape}")
    norm = ctx.attr(node, "norm", "MAX")
    b, dims = ctx.b, x.shape.dims
    y = features(ctx, node, x)
    rows = y.shape.dims
    if norm == "MAX":
        total = ctx.reduce(y, (1,), Opcode.MAXIMUM, -np.inf)
    elif norm == "L1":
        total = ctx.reduce(b.op(Opcode.ABS, y), (1,), Opcode.ADD, 0)
    elif norm == "L2":
        total = b.op(Opcode.SQRT, ctx.reduce(b.op(Opcode.MULTIPLY, y, y), (1,), Opcode.ADD, 0))
    else:
        raise ctx.error(node, f"unknown norm {norm!r}")
    total = b.broadcast(total, rows, (0,))
    zero = b.compare(total, ctx.full(0, F32, rows), "EQ")
    y = b.op(Opcode.SELECT, zero, y, b.op(Opcode.DIVIDE, y, total))
    return [b.reshape(y, dims) if rows != dims else y]


def _per_column(ctx, node, name, values, dims, dtype):
    """A per-column attribute (one value, or one per column of the last dim) broadcast to
    dims."""
    values = np.asarray(values, dtype.np).reshape(-1)
    if len(values) == 1:
        return ctx.full(values[0], dtype, dims)
    if not dims or len(values) != dims[-1]:
        raise ctx.error(node, f"{name} has {len(values)} values for {dims[-1:]} columns")
    return ctx.b.broadcast(ctx.b.constant(values), dims, (len(dims) - 1,))


@register("Scaler", since=1, domain=ML)
def scaler(ctx, node):
    # (x - offset) * scale, in float32
    x = ctx.input(node, 0)
    b, dims = ctx.b, x.shape.dims
    x = x if x.shape.dtype == F32 else b.convert(x, F32)
    offset = _per_column(ctx, node, "offset", ctx.attr(node, "offset", (0.0,)), dims, F32)
    scale = _per_column(ctx, node, "scale", ctx.attr(node, "scale", (1.0,)), dims, F32)
    return [b.op(Opcode.MULTIPLY, b.op(Opcode.SUBTRACT, x, offset), scale)]


@register("Imputer", since=1, domain=ML)
def imputer(ctx, node):
    # x where it is not the replaced value (NaN matches NaN), else the imputed value
    x = ctx.input(node, 0)
    b, dt, dims = ctx.b, x.shape.dtype, x.shape.dims
    if dt.is_float:
        values = ctx.attr(node, "imputed_value_floats", None)
        replaced = ctx.attr(node, "replaced_value_float", 0.0)
        ctx.attr(node, "imputed_value_int64s", None)
        ctx.attr(node, "replaced_value_int64", None)
    else:
        values = ctx.attr(node, "imputed_value_int64s", None)
        replaced = ctx.attr(node, "replaced_value_int64", 0)
        ctx.attr(node, "imputed_value_floats", None)
        ctx.attr(node, "replaced_value_float", None)
    if not values:
        raise ctx.error(node, f"needs imputed values of X's type ({dt})")
    imputed = _per_column(ctx, node, "the imputed values", values, dims, dt)
    if dt.is_float and np.isnan(replaced):
        hit = b.compare(x, x, "NE")
    else:
        hit = b.compare(x, ctx.full(replaced, dt, dims), "EQ")
    return [b.op(Opcode.SELECT, hit, imputed, x)]


@register("OneHotEncoder", since=1, domain=ML)
def one_hot_encoder(ctx, node):
    # y[..., k] = (x == cats[k]) as float32. A value in no category gives a row of zeros;
    # with zeros=0 onnxruntime fails the run instead, which compiled code cannot: such
    # inputs are the caller's error and give zeros here too.
    x = ctx.input(node, 0)
    if ctx.attr(node, "cats_strings", None) is not None:
        raise ctx.out_of_scope(node, "cats_strings: " + STRING_LABELS)
    cats = ctx.attr(node, "cats_int64s", None)
    if not cats:
        raise ctx.error(node, "needs cats_int64s")
    ctx.attr(node, "zeros", 1)
    b, dims = ctx.b, x.shape.dims
    if x.shape.dtype != dtypes.S64:
        x = b.convert(x, dtypes.S64)     # onnxruntime casts (truncates) floats to int64
    out = dims + (len(cats),)
    hit = b.compare(b.broadcast(x, out, tuple(range(len(dims)))),
                    b.broadcast(b.constant(np.asarray(cats, np.int64)), out, (len(dims),)), "EQ")
    return [b.convert(hit, F32)]


@register("FeatureVectorizer", since=1, domain=ML)
def feature_vectorizer(ctx, node):
    # the inputs' rows (flattened past dim 0) side by side, each cut or zero-padded to its
    # inputdimensions entry
    widths = list(ctx.attr(node, "inputdimensions", ()))
    if len(widths) != len(node.input):
        raise ctx.error(node, f"{len(node.input)} inputs but {len(widths)} inputdimensions")
    b, parts, n = ctx.b, [], None
    for i, width in enumerate(widths):
        x = features(ctx, node, ctx.input(node, i))
        rows, have = x.shape.dims
        if n is not None and rows != n:
            raise ctx.error(node, f"input {i} has {rows} rows, input 0 has {n}")
        n = rows
        if have > width:
            x = b.slice(x, (0, 0), (rows, width))
        elif have < width:
            x = b.pad(x, ctx.scalar(0, F32), (0, 0), (0, width - have))
        parts.append(x)
    return [b.concatenate(parts, 1) if len(parts) > 1 else parts[0]]


# -- linear models -------------------------------------------------------------------------

def _linear(ctx, node, x, targets=None):
    """X @ coefficients^T + intercepts as float32 [N, T]."""
    x = features(ctx, node, x)
    coef = np.asarray(ctx.attr(node, "coefficients"), np.float32).reshape(-1)
    intercepts = ctx.attr(node, "intercepts", None)
    f = x.shape.dims[1]
    t = targets or (len(intercepts) if intercepts else len(coef) // max(f, 1))
    if t < 1 or len(coef) != t * f:
        raise ctx.error(node, f"{len(coef)} coefficients for {t} targets of {f} features")
    if intercepts is not None and len(intercepts) != t:
        raise ctx.error(node, f"{len(intercepts)} intercepts for {t} targets")
    return matmul_t(ctx, x, coef.reshape(t, f), intercepts)


@register("LinearRegressor", since=1, domain=ML)
def linear_regressor(ctx, node):
    y = _linear(ctx, node, ctx.input(node, 0), ctx.attr(node, "targets", 1))
    return [scores(ctx, y, post_transform(ctx, node))]


@register("LinearClassifier", since=1, domain=ML)
def linear_classifier(ctx, node):
    # onnxruntime: one score column gives label[1] (or 1) where it is > 0, else label[0]
    # (or 0), and with two labels a second column [1 - s, s] before any transform
    # (linearclassifier.cc); several columns give the label of the first maximum
    labels = class_labels(ctx, node)
    ctx.attr(node, "multi_class", 0)          # onnxruntime reads and ignores it
    post = post_transform(ctx, node)
    y = _linear(ctx, node, ctx.input(node, 0))
    n, t = y.shape.dims
    b = ctx.b
    if t == 1:
        if len(labels) == 2 and post == "PROBIT":
            raise ctx.error(node, "PROBIT on one score of two classes is not supported: "
                                  "onnxruntime fills only half of its two-column output")
        pos, neg = (labels[1], labels[0]) if len(labels) == 2 else (1, 0)
        label = where(ctx, b.compare(b.reshape(y, (n,)), ctx.full(0, F32, (n,)), "GT"), pos, neg)
        return [label, scores(ctx, y, post, 1 if len(labels) == 2 else -1)]
    if len(labels) != t:
        raise ctx.error(node, f"{len(labels)} class labels for {t} score columns")
    return [lookup(ctx, labels, first_argmax(ctx, y)), scores(ctx, y, post)]


# -- support vector machines ---------------------------------------------------------------

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _kernel(ctx, node, x, vectors, bias=0.0, kind=None):
    """The kernel of each row of x [N, F] with each constant vector [V, F]: [N, V].
    LINEAR is x.v + bias; POLY (gamma x.v + coef0)^degree; SIGMOID tanh(gamma x.v +
    coef0); RBF exp(-gamma |x - v|^2) (kernel_params = gamma, coef0, degree)."""
    b = ctx.b
    kind = kind or ctx.attr(node, "kernel_type", "LINEAR")
    if kind not in _KERNELS:
        raise ctx.error(node, f"unknown kernel_type {kind!r}")
    params = list(ctx.attr(node, "kernel_params", ())) or [0.0, 0.0, 0.0]
    if len(params) != 3:
        raise ctx.error(node, f"kernel_params needs gamma, coef0, degree, got {params}")
    gamma, coef0, degree = params
    n, v = x.shape.dims[0], len(vectors)

    def c(value):
        return ctx.full(value, F32, (n, v))
    if kind == "RBF":
        cube = (n, v, x.shape.dims[1])
        diff = b.op(Opcode.SUBTRACT, b.broadcast(x, cube, (0, 2)),
                    b.broadcast(b.constant(np.asarray(vectors, np.float32)), cube, (1, 2)))
        dist = ctx.reduce(b.op(Opcode.MULTIPLY, diff, diff), (2,), Opcode.ADD, 0)
        return b.op(Opcode.EXP, b.op(Opcode.MULTIPLY, c(-gamma), dist))
    dot = matmul_t(ctx, x, vectors)
    if kind == "LINEAR":
        return b.op(Opcode.ADD, dot, c(bias)) if bias else dot
    y = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, c(gamma), dot), c(coef0))
    if kind == "SIGMOID":
        return b.op(Opcode.TANH, y)
    # onnxruntime squares and cubes by multiplying (Eigen's square, cube): a power via
    # exp and log is some ulps off
    if degree in (2, 3):
        square = b.op(Opcode.MULTIPLY, y, y)
        return square if degree == 2 else b.op(Opcode.MULTIPLY, square, y)
    return b.op(Opcode.POWER, y, c(degree))


def _support(ctx, node, f, count):
    """support_vectors as [count, f]."""
    vectors = np.asarray(ctx.attr(node, "support_vectors", ()), np.float32).reshape(-1)
    if len(vectors) != count * f:
        raise ctx.error(node, f"{len(vectors)} support vector values for {count} vectors of "
                              f"{f} features")
    return vectors.reshape(count, f)


@register("SVMRegressor", since=1, domain=ML)
def svm_regressor(ctx, node):
    # onnxruntime reads post_transform but applies none (svmregressor.cc): nor does xlac
    ctx.attr(node, "post_transform", "NONE")
    x = features(ctx, node, ctx.input(node, 0))
    f = x.shape.dims[1]
    coef = np.asarray(ctx.attr(node, "coefficients"), np.float32).reshape(-1)
    rho = float(ctx.attr(node, "rho", (0.0,))[0])
    count = ctx.attr(node, "n_supports", 0)
    b = ctx.b
    if count > 0:
        if len(coef) != count:
            raise ctx.error(node, f"{len(coef)} coefficients for {count} support vectors")
        kernels = _kernel(ctx, node, x, _support(ctx, node, f, count))
        y = matmul_t(ctx, kernels, coef[None, :], [rho])
    else:
        # linear mode: the coefficients are the one weight vector, the kernel LINEAR
        ctx.attr(node, "kernel_type", None)
        ctx.attr(node, "kernel_params", None)
        ctx.attr(node, "support_vectors", None)
        if len(coef) != f:
            raise ctx.error(node, f"{len(coef)} coefficients for {f} features")
        y = matmul_t(ctx, x, coef[None, :], [rho])
    if ctx.attr(node, "one_class", 0):
        dims = y.shape.dims
        y = b.op(Opcode.SELECT, b.compare(y, ctx.full(0, F32, dims), "GT"),
                 ctx.full(1, F32, dims), ctx.full(-1, F32, dims))
    return [y]


@register("SVMClassifier", since=1, domain=ML)
def svm_classifier(ctx, node):
    labels = class_labels(ctx, node)
    post = post_transform(ctx, node)
    prob_a = np.asarray(ctx.attr(node, "prob_a", ()), np.float32)
    prob_b = np.asarray(ctx.attr(node, "prob_b", ()), np.float32)
    if len(prob_a) != len(prob_b):
        raise ctx.error(node, f"{len(prob_a)} prob_a values but {len(prob_b)} prob_b values")
    x = features(ctx, node, ctx.input(node, 0))
    n, f = x.shape.dims
    k = len(labels)
    if k < 2:
        raise ctx.error(node, f"needs at least 2 class labels, got {k}")
    coef = np.asarray(ctx.attr(node, "coefficients"), np.float32).reshape(-1)
    rho = np.asarray(ctx.attr(node, "rho"), np.float32).reshape(-1)
    per_class = list(ctx.attr(node, "vectors_per_class", ()))
    b = ctx.b
    if not sum(per_class):
        # linear mode (liblinear): one weight vector per class, rho[0] on every score;
        # the label is the best score's, but with two classes and no prob_a onnxruntime
        # picks label 1 above 0.5 (all weights >= 0) or above 0 (mixed weights)
        # (ChooseClass); prob_a/prob_b change nothing else here
        ctx.attr(node, "kernel_type", None)
        ctx.attr(node, "kernel_params", None)
        ctx.attr(node, "support_vectors", None)
        if len(coef) != k * f:
            raise ctx.error(node, f"{len(coef)} coefficients for {k} classes of {f} features")
        y = _kernel(ctx, node, x, coef.reshape(k, f), bias=float(rho[0]), kind="LINEAR")
        label = lookup(ctx, labels, first_argmax(ctx, y))
        if k == 2 and not len(prob_a):
            top = ctx.reduce(y, (1,), Opcode.MAXIMUM, -np.inf)
            cut = 0.5 if (coef >= 0).all() else 0.0
            above = b.compare(top, ctx.full(cut, F32, (n,)), "GE" if cut else "GT")
            label = b.op(Opcode.SELECT, above, ctx.full(labels[1], dtypes.S64, (n,)), label)
        return [label, scores(ctx, y, post)]

    # SVC: one-vs-one classifiers for each pair i < j, their decision
    #   sum_{v of i} coef[j-1, v] K(x, v) + sum_{v of j} coef[i, v] K(x, v) + rho[pair]
    # as one dot of the kernels with a constant [V, pairs], in float64 as onnxruntime
    # sums (in float32, scikit-learn's SVCs' probabilities came out up to 1e-5 off); a
    # positive decision votes for i, else j; the label is the most voted (the first of
    # ties), with probabilities too
    if len(per_class) != k:
        raise ctx.error(node, f"vectors_per_class has {len(per_class)} entries for {k} classes")
    total = sum(per_class)
    if len(coef) != (k - 1) * total:
        raise ctx.error(node, f"{len(coef)} coefficients for {k - 1} x {total} support vectors")
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    if len(rho) != len(pairs):
        raise ctx.error(node, f"{len(rho)} rho values for {len(pairs)} class pairs")
    if len(prob_a) and len(prob_a) != len(pairs):
        raise ctx.error(node, f"{len(prob_a)} prob_a values for {len(pairs)} class pairs")
    coef = coef.reshape(k - 1, total)
    start = np.concatenate([[0], np.cumsum(per_class)]).astype(int)
    weights = np.zeros((len(pairs), total), np.float32)
    vote_i = np.zeros((len(pairs), k), np.float32)
    vote_j = np.zeros((len(pairs), k), np.float32)
    for p, (i, j) in enumerate(pairs):
        weights[p, start[i]:start[i + 1]] = coef[j - 1, start[i]:start[i + 1]]
        weights[p, start[j]:start[j + 1]] = coef[i, start[j]:start[j + 1]]
        vote_i[p, i] = vote_j[p, j] = 1
    kernels = b.convert(_kernel(ctx, node, x, _support(ctx, node, f, total)), dtypes.F64)
    y64 = b.op(Opcode.ADD, b.dot(kernels, b.constant(weights.T.astype(np.float64)),
                                 DotDimensionNumbers((), (1,), (), (0,))),
               b.broadcast(b.constant(rho.astype(np.float64)), (n, len(pairs)), (1,)))
    wins = b.convert(b.compare(y64, ctx.full(0, dtypes.F64, y64.shape.dims), "GT"), F32)
    losses = b.op(Opcode.SUBTRACT, ctx.full(1, F32, wins.shape.dims), wins)
    votes = b.op(Opcode.ADD, matmul_t(ctx, wins, vote_i.T), matmul_t(ctx, losses, vote_j.T))
    label = lookup(ctx, labels, first_argmax(ctx, votes))
    y = b.convert(y64, F32)                                           # [N, pairs]
    if len(prob_a):
        return [label, scores(ctx, coupled_probabilities(ctx, platt(ctx, y, prob_a, prob_b),
                                                          pairs, k), post)]
    if k > 2:
        return [label, scores(ctx, y, post)]
    # two classes: onnxruntime writes [-s, s] (NONE) or [1 - s, s] (after LOGISTIC, or
    # raw for SOFTMAX and SOFTMAX_ZERO)
    if post == "PROBIT":
        raise ctx.error(node, "PROBIT on a two-class SVC is not supported: onnxruntime fills "
                              "only half of its two-column output")
    return [label, scores(ctx, y, post, 2 if post == "NONE" else 0)]


# -- SVC probabilities: Platt scaling and pairwise coupling ------------------------------

COUPLING_SWEEPS = 100          # onnxruntime's cap on multiclass_probability's iterations


def platt(ctx, y, prob_a, prob_b):
    """onnxruntime's sigmoid_probability of each pair's decision y [N, pairs] in float32,
    P(i | i or j) = 1 - logistic(y A + B) with its ComputeLogistic (1 / (1 + exp(-|v|)),
    mirrored below 0), clamped to [1e-7, 1 - 1e-7]."""
    b, dims = ctx.b, y.shape.dims

    def per_pair(values):
        return b.broadcast(b.constant(values), dims, (1,))
    one = ctx.full(1, F32, dims)
    v = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, y, per_pair(prob_a)), per_pair(prob_b))
    e = b.op(Opcode.DIVIDE, one, b.op(Opcode.ADD, one, b.op(
        Opcode.EXP, b.op(Opcode.NEGATE, b.op(Opcode.ABS, v)))))
    logistic = b.op(Opcode.SELECT, b.compare(v, ctx.full(0, F32, dims), "LT"),
                    b.op(Opcode.SUBTRACT, one, e), e)
    r = b.op(Opcode.MAXIMUM, b.op(Opcode.SUBTRACT, one, logistic), ctx.full(1e-7, F32, dims))
    return b.op(Opcode.MINIMUM, r, ctx.full(np.float32(1) - np.float32(1e-7), F32, dims))


def coupling_matrix(ctx, r, pairs, k):
    """onnxruntime's Q [N, k, k] of multiclass_probability from r [N, pairs], where
    r[i, j] = P(i | i or j) for the pair i < j and r[j, i] = 1 - r[i, j]: Q[i, i] is the
    sum of r[j, i]^2 over j != i (in order of j), Q[i, j] = -r[j, i] r[i, j]."""
    b = ctx.b
    n = r.shape.dims[0]
    one = ctx.full(1, F32, (n,))
    prob = {}
    for p, (i, j) in enumerate(pairs):
        prob[i, j] = b.reshape(b.slice(r, (0, p), (n, p + 1)), (n,))
        prob[j, i] = b.op(Opcode.SUBTRACT, one, prob[i, j])
    entries = []
    for i in range(k):
        for j in range(k):
            if i != j:
                entries.append(b.op(Opcode.MULTIPLY, b.op(Opcode.NEGATE, prob[j, i]),
                                    prob[i, j]))
                continue
            squares = [b.op(Opcode.MULTIPLY, prob[m, i], prob[m, i])
                       for m in range(k) if m != i]
            entries.append(sequential_sum(b, squares))
    q = b.concatenate([b.reshape(e, (n, 1)) for e in entries], 1)
    return b.reshape(q, (n, k, k))


def sequential_sum(b, terms):
    """terms[0] + terms[1] + ... left to right, as a C loop from 0 adds them."""
    total = terms[0]
    for t in terms[1:]:
        total = b.op(Opcode.ADD, total, t)
    return total


def coupled_probabilities(ctx, r, pairs, k):
    """The class probabilities [N, k] of onnxruntime's multiclass_probability (Wu, Lin and
    Weng's second method) from the pairwise ones r [N, pairs], in float32 and in its order
    of operations: from p = 1/k, each sweep computes Qp and pQp, stops where max |Qp -
    pQp| < 0.005 / k, else updates p one class at a time; at most COUPLING_SWEEPS sweeps.
    One HLO while runs the sweeps of all rows; a row that has converged keeps its p."""
    n = r.shape.dims[0]
    q0 = coupling_matrix(ctx, r, pairs, k)
    lp = WhileLoop(ctx, "svm_coupling", [ctx.scalar(0, dtypes.S64),
                                         ctx.scalar(True, dtypes.PRED),
                                         ctx.full(np.float32(1) / np.float32(k), F32, (n, k))])
    t, _, p = lp.body_elements
    q = lp.capture(q0)[1]
    b = lp.body

    def column(a, i):
        return b.reshape(b.slice(a, (0, i), (n, i + 1)), (n,))

    def per_row(v):
        return b.broadcast(v, (n, k), (0,))

    def full(value, dims):
        return b.broadcast(b.constant(value, F32), dims, ())
    # Q is symmetric: its row j is its column j
    rows = [b.reshape(b.slice(q, (0, i, 0), (n, i + 1, k)), (n, k)) for i in range(k)]
    qp = sequential_sum(b, [b.op(Opcode.MULTIPLY, rows[j], per_row(column(p, j)))
                            for j in range(k)])
    pqp = sequential_sum(b, [b.op(Opcode.MULTIPLY, column(p, i), column(qp, i))
                             for i in range(k)])
    error = b.reduce(b.op(Opcode.ABS, b.op(Opcode.SUBTRACT, qp, per_row(pqp))),
                     b.constant(0, F32), (1,), ctx.reducer(Opcode.MAXIMUM, F32))
    done = b.compare(error, full(np.float32(0.005) / np.float32(k), (n,)), "LT")
    swept = p
    index = b.iota(Shape.array(dtypes.S64, (n, k)), 1)
    for i in range(k):
        # diff = (pQp - Qp[i]) / Q[i, i]; p[i] += diff;
        # pQp = (pQp + diff (diff Q[i, i] + 2 Qp[i])) / (1 + diff) / (1 + diff);
        # Qp = (Qp + diff Q[i]) / (1 + diff); p /= (1 + diff)
        q_ii, qp_i = column(rows[i], i), column(qp, i)
        diff = b.op(Opcode.DIVIDE, b.op(Opcode.SUBTRACT, pqp, qp_i), q_ii)
        grow = b.op(Opcode.ADD, full(1, (n,)), diff)
        here = b.compare(index, b.broadcast(b.constant(i, dtypes.S64), (n, k), ()), "EQ")
        swept = b.op(Opcode.SELECT, here, b.op(Opcode.ADD, swept, per_row(diff)), swept)
        inner = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, diff, q_ii),
                     b.op(Opcode.MULTIPLY, full(2, (n,)), qp_i))
        pqp = b.op(Opcode.DIVIDE, b.op(Opcode.DIVIDE, b.op(
            Opcode.ADD, pqp, b.op(Opcode.MULTIPLY, diff, inner)), grow), grow)
        qp = b.op(Opcode.DIVIDE, b.op(Opcode.ADD, qp, b.op(Opcode.MULTIPLY, per_row(diff),
                                                         rows[i])), per_row(grow))
        swept = b.op(Opcode.DIVIDE, swept, per_row(grow))
    p = b.op(Opcode.SELECT, b.broadcast(done, (n, k), (0,)), p, swept)
    going = b.reduce(b.op(Opcode.NOT, done), b.constant(False, dtypes.PRED), (0,),
                     ctx.reducer(Opcode.OR, dtypes.PRED))
    cond = lp.cond.op(Opcode.AND, lp.cond_elements[1], lp.cond.compare(
        lp.cond_elements[0], lp.cond.constant(COUPLING_SWEEPS, dtypes.S64), "LT"))
    return lp.finish(cond, [b.op(Opcode.ADD, t, b.constant(1, dtypes.S64)), going, p])[2]

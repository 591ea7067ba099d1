"""JAX programs compiled by xlac beside jaxlib's own CPU execution of the same jit.

    python benchmarks/jax_programs.py [-k REGEX] [--form hlo|stablehlo] [--runs N]

Each program (an MLP, a CNN, a transformer block, a scan RNN, a jitted numpy function
with sorting and gathers, the classes issue 27 names) is lowered by JAX, printed as
StableHLO (or HLO text), compiled by xlac for this machine and timed beside
``jax.jit(f)`` compiled ahead of time, one thread each (XLA_FLAGS are set before jax
is imported), the two alternating sample by sample as benchmarks/models.py times
onnxruntime: medians per call. xlac's call is Model.bind's (buffers checked once);
JAX's is the compiled executable on arrays already on the device, through
``block_until_ready``, so its figure includes JAX's dispatch from Python; the column
"jax floor" is that of a jitted function of the same arguments that computes
nothing, so that jax ms - jax floor bounds XLA's own time from below. Printed:
compile time, arena bytes, the medians and their ratio, the floor, the largest
difference from JAX.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false"
                           " intra_op_parallelism_threads=1").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import xlac  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import side_by_side  # noqa: E402

_rng = np.random.default_rng(0)


def _w(*shape, scale=None):
    scale = scale if scale is not None else 1 / np.sqrt(shape[0])
    return (_rng.standard_normal(shape) * scale).astype(np.float32)


def mlp():
    w1, b1, w2, b2, w3, b3 = _w(784, 256), _w(256, scale=0.1), _w(256, 128), \
        _w(128, scale=0.1), _w(128, 10), _w(10, scale=0.1)

    def f(x):
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        return jax.nn.log_softmax(h @ w3 + b3)
    return f, (_w(32, 784, scale=1.0),)


def cnn():
    dn = ("NHWC", "HWIO", "NHWC")
    k1, k2, k3 = _w(3, 3, 3, 32, scale=0.2), _w(3, 3, 32, 64, scale=0.06), \
        _w(3, 3, 64, 64, scale=0.04)
    wd = _w(64, 10)

    def f(x):
        h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dn))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(lax.conv_general_dilated(h, k3, (1, 1), "SAME", dimension_numbers=dn))
        return jax.nn.softmax(h.mean((1, 2)) @ wd)
    return f, (_w(4, 32, 32, 3, scale=1.0),)


def transformer_block(d=128, heads=4, t=64):
    wq, wk, wv, wo = (_w(d, d) for _ in range(4))
    w1, w2 = _w(d, 4 * d), _w(4 * d, d)
    g = np.linspace(0.5, 1.5, d, dtype=np.float32)

    def norm(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) * lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * g

    def f(x):
        b, n, _ = x.shape
        h = norm(x)
        q, k, v = ((h @ w).reshape(b, n, heads, d // heads) for w in (wq, wk, wv))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
        a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(b, n, d)
        x = x + a @ wo
        return x + jax.nn.gelu(norm(x) @ w1) @ w2
    return f, (_w(2, t, d, scale=1.0),)


def scan_rnn(d=32, hidden=64, steps=100):
    wx, wh, wy = _w(d, hidden), _w(hidden, hidden), _w(hidden, 8)

    def f(xs, h0):
        def step(h, x):
            h = jnp.tanh(x @ wx + h @ wh)
            return h, h @ wy
        return lax.scan(step, h0, xs)
    return f, (_w(steps, 4, d, scale=1.0), _w(4, hidden, scale=1.0))


def numpy_sort_gather():
    def f(x, i):
        order = jnp.argsort(x, axis=1)
        top = jnp.take_along_axis(x, order[:, -8:], 1)
        return jnp.sort(x, 0)[i], top.sum(1), jnp.searchsorted(jnp.sort(x[0]), x[1])
    return f, (_w(64, 256, scale=1.0), _rng.integers(0, 64, 32).astype(np.int32))


PROGRAMS = {"mlp": mlp, "cnn": cnn, "transformer_block": transformer_block,
            "scan_rnn": scan_rnn, "numpy_sort_gather": numpy_sort_gather}


def measure(name: str, form: str, folder: Path, samples: int, sample_s: float) -> dict:
    fn, args = PROGRAMS[name]()
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text() if form == "stablehlo" else lowered.as_text(dialect="hlo")
    path = folder / f"{name}.txt"
    path.write_text(text)
    t = time.perf_counter()
    res = xlac.compile(path, folder / f"{name}.o", name=name)
    compile_s = time.perf_counter() - t
    m = xlac.load(res.output)
    outs = [np.empty(s.shape, s.dtype) for s in m.outputs]
    xlac_call = m.bind(list(args), outs, m.new_arena())
    compiled = lowered.compile()
    device_args = [jax.device_put(a) for a in args]

    def jax_call():
        jax.block_until_ready(compiled(*device_args))
    nothing = jax.jit(lambda *a: jnp.zeros((), jnp.float32)).lower(*args).compile()

    def jax_floor():
        jax.block_until_ready(nothing(*device_args))
    xlac_call()
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(compiled(*device_args))]
    diff = max(float(np.abs(o.astype(np.float64) - w).max()) for o, w in zip(outs, want))
    tx, tj, tf = side_by_side([xlac_call, jax_call, jax_floor], samples, sample_s)
    return {"name": name, "compile_s": compile_s, "arena": m.arena_size,
            "xlac_ms": tx * 1e3, "jax_ms": tj * 1e3, "ratio": tx / tj, "floor_ms": tf * 1e3,
            "max_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", help="only programs whose name matches this regex")
    ap.add_argument("--form", choices=("stablehlo", "hlo"), default="stablehlo")
    ap.add_argument("--runs", type=int, default=21, help="samples per side")
    ap.add_argument("--sample-ms", type=float, default=20, help="length of a sample")
    args = ap.parse_args()
    rx = re.compile(args.pattern) if args.pattern else None
    head = (f"{'program':<20} {'compile s':>9} {'arena B':>10} {'xlac ms':>9} {'jax ms':>9} "
            f"{'ratio':>6} {'jax floor':>9} {'max |diff|':>10}")
    print(f"jax {jax.__version__}; {args.form}; load average at start: "
          f"{os.getloadavg()[0]:.2f}; {args.runs} samples of ~{args.sample_ms:.0f} ms per side, "
          "one thread each")
    print(head)
    print("-" * len(head))
    ratios = []
    with tempfile.TemporaryDirectory(prefix="xlac-jax-bench-") as tmp:
        for name in PROGRAMS:
            if rx and not rx.search(name):
                continue
            r = measure(name, args.form, Path(tmp), args.runs, args.sample_ms / 1e3)
            ratios.append(r["ratio"])
            print(f"{r['name']:<20} {r['compile_s']:>9.2f} {r['arena']:>10,} "
                  f"{r['xlac_ms']:>9.4f} {r['jax_ms']:>9.4f} {r['ratio']:>6.2f} "
                  f"{r['floor_ms']:>9.4f} {r['max_diff']:>10.2e}", flush=True)
    if ratios:
        print(f"geometric mean of xlac/jax: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()

"""The tiled f32 dot kernel of the CUDA backend (emitter/cuda/dot.py).

ptxas: one-op models of every tile and edge (square, tall-skinny, M = 1, batched, B
stored N x K, sizes off the tile, K = 1, operands in other layouts) compile into PTX
holding the kernel (.entry, bar.sync, its .shared tiles), which NVIDIA's assembler
accepts for sm_80 and sm_90 with warnings as errors and without spilling.

Emulation (the stand-in driver of fake_driver.py, the same kernels compiled for this
machine): the same dots match numpy in both thread orders of a block (a missing barrier
shows in one of them), and the launch log shows the dot as one launch of 256-thread
blocks, one per output tile.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.backends import make_backend
from xlac.emitter import EmitOptions
from xlac.emitter.cuda import dot
from xlac.emitter.cuda.ptxas import assemble, find_ptxas
from xlac.hlo import Opcode
from xlac.hlo.text import parse_module
from xlac.importers.hlo import import_hlo
from xlac.optimizer import plan_memory

HERE = Path(__file__).resolve().parent
ARCHS = ("sm_80", "sm_90")
PTXAS = find_ptxas()
ORDERS = (None, "reverse")          # the stand-in's default order, then the reverse


# -- the cases ---------------------------------------------------------------------------

def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rand(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@dataclass(frozen=True)
class Case:
    """A one-dot model: ONNX (a ModelProto) or HLO text (compiled without the optimizer,
    which would give every array the default layout), its inputs, the float64
    reference, and the dot's batch, M, N, K and expected tile."""
    model: Callable
    inputs: tuple
    reference: Callable
    batch: int
    m: int
    n: int
    k: int
    tile: dot.Tile

    @property
    def blocks(self) -> int:
        return self.batch * -(-self.m // self.tile.bm) * -(-self.n // self.tile.bn)

    def feeds(self) -> list[np.ndarray]:
        return [_rand(s, seed) for seed, s in enumerate(self.inputs)]


def matmul(a, b, tile, batch=1, m=None) -> Case:
    """numpy.matmul; ``m`` where the importer flattens A's leading dims into its rows."""
    out = np.matmul(np.zeros(a), np.zeros(b)).shape
    return Case(lambda: _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                               [_value("a", a), _value("b", b)], [_value("y", out)]),
                (a, b), lambda x, y: np.matmul(x, y), batch,
                m or (a[-2] if len(a) > 1 else 1), b[-1], a[-1], tile)


def gemm(a, b, trans_a, trans_b, tile) -> Case:
    """Gemm with B and the bias C as weights (the kernel reads B from the device copy
    of the weights)."""
    m, k = (a[1], a[0]) if trans_a else a
    n = b[0] if trans_b else b[1]
    w, c = _rand(b, 10), _rand((n,), 11)

    def model():
        return _model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], transA=trans_a,
                                        transB=trans_b, alpha=1.0, beta=1.0)],
                      [_value("a", a)], [_value("y", (m, n))],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])

    def reference(x):
        x = x.astype(np.float64)
        return (x.T if trans_a else x) @ (w.T if trans_b else w) + c
    return Case(model, (a,), reference, 1, m, n, k, tile)


def einsum(equation, a, b, batch, m, n, k, tile) -> Case:
    return Case(lambda: _model([helper.make_node("Einsum", ["a", "b"], ["y"],
                                                 equation=equation)],
                               [_value("a", a), _value("b", b)],
                               [_value("y", np.einsum(equation, np.zeros(a),
                                                      np.zeros(b)).shape)]),
                (a, b), lambda x, y: np.einsum(equation, x, y), batch, m, n, k, tile)


def hlo(body, params, equation, batch, m, n, k, tile) -> Case:
    """``body`` after the parameters ``params`` (shapes, default layouts), the root
    last; the reference np.einsum(equation) of the parameters."""
    decls = "\n".join(f"  p{i} = f32[{','.join(map(str, s))}] parameter({i})"
                      for i, s in enumerate(params))
    text = f"HloModule model\n\nENTRY e {{\n{decls}\n{body.strip()}\n}}\n"
    return Case(lambda: text, tuple(params), lambda *xs: np.einsum(equation, *xs),
                batch, m, n, k, tile)


LARGE, SMALL, SHORT, NARROW = dot.LARGE, dot.SMALL, dot.SHORT, dot.NARROW
# A batched dot of (batch, rows, K) operands.
BATCH_DOT = ("lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
             "rhs_contracting_dims={2}")

CASES = {
    "square": matmul((96, 96), (96, 96), SMALL),
    "square_tile_multiple": matmul((128, 64), (64, 128), SMALL),
    "large_batched": matmul((8, 256, 24), (8, 24, 256), LARGE, batch=8),
    "large_ragged": matmul((1030, 40), (40, 515), LARGE),
    "tall_skinny": matmul((1000, 64), (64, 8), NARROW),
    "gemv_m1": matmul((1, 300), (300, 200), SHORT),
    "vector_matrix": matmul((300,), (300, 70), SHORT),
    "batched": matmul((3, 50, 40), (3, 40, 70), SMALL, batch=3),
    "batched_broadcast": matmul((2, 1, 17, 24), (3, 24, 30), SMALL, batch=6),
    "rows_flattened": matmul((2, 5, 33), (33, 20), SHORT, m=10),
    "ragged": matmul((67, 33), (33, 45), SMALL),
    "k1": matmul((40, 1), (1, 50), SMALL),
    "k1_short": matmul((3, 1), (1, 100), SHORT),
    "gemm_transposed_rhs": gemm((65, 48), (80, 48), 0, 1, SMALL),
    "gemm_transposed_both": gemm((48, 65), (80, 48), 1, 1, SMALL),
    "gemm_transposed_lhs": gemm((37, 20), (37, 90), 1, 0, SMALL),
    "attention_k_transposed": einsum("bhqd,bhkd->bhqk", (2, 3, 20, 16), (2, 3, 24, 16),
                                     6, 20, 24, 16, SMALL),
    # Layouts the optimizer would make default: copies into them feed the dot.
    "layout_lhs_m_minor": hlo(f"""
  a = f32[2,40,30]{{1,0,2}} copy(p0)
  ROOT d = f32[2,40,50] dot(a, p1), {BATCH_DOT}
""", [(2, 40, 30), (2, 50, 30)], "bmk,bnk->bmn", 2, 40, 50, 30, SMALL),
    "layout_both_and_result": hlo(f"""
  a = f32[2,40,30]{{1,0,2}} copy(p0)
  b = f32[2,50,30]{{0,2,1}} copy(p1)
  d = f32[2,40,50]{{1,2,0}} dot(a, b), {BATCH_DOT}
  ROOT r = f32[2,40,50] copy(d)
""", [(2, 40, 30), (2, 50, 30)], "bmk,bnk->bmn", 2, 40, 50, 30, SMALL),
    "several_free_dims": hlo("""
  a = f32[3,4,30]{0,2,1} copy(p0)
  ROOT d = f32[3,4,5,6] dot(a, p1), lhs_contracting_dims={2}, rhs_contracting_dims={0}
""", [(3, 4, 30), (30, 5, 6)], "abk,kcd->abcd", 1, 12, 30, 30, SHORT),
    "batch_not_leading": hlo("""
  ROOT d = f32[3,20,17] dot(p0, p1), lhs_batch_dims={1}, rhs_batch_dims={0},
                                     lhs_contracting_dims={0}, rhs_contracting_dims={2}
""", [(9, 3, 20), (3, 17, 9)], "kbm,bnk->bmn", 3, 20, 17, 9, SMALL),
    "outer_product": hlo("""
  ROOT d = f32[20,30] dot(p0, p1), lhs_contracting_dims={}, rhs_contracting_dims={}
""", [(20,), (30,)], "m,n->mn", 1, 20, 30, 1, SMALL),
}


def compile_case(case: Case, folder: Path, target: str, arch: str = "sm_80") -> Path:
    """Compile ``case`` for ``target`` into ``folder``: the PTX (``cuda``, model.s) or the
    object and its header (``cuda-emulated``, model.o)."""
    model = case.model()
    if isinstance(model, onnx.ModelProto):
        if target == "cuda":
            out = folder / "model.s"
            xlac.compile(model, out, target="cuda", cpu=arch, emit="asm")
        else:
            out = folder / "model.o"
            xlac.compile(model, out, target="cuda-emulated")
        return out
    module = import_hlo(model.encode(), name="model")
    backend = make_backend(target, arch)
    kinds = ("asm",) if target == "cuda" else ("obj",)
    art = backend.emit(module, plan_memory(module, backend), EmitOptions("model"), kinds)
    if target == "cuda":
        out = folder / "model.s"
        out.write_text(art.assembly)
    else:
        out = folder / "model.o"
        out.write_bytes(art.object_code)
        (folder / "model.h").write_text(art.header)
    return out


def tiled_kernel(ptx: str, tile: str = "dot_a_tile") -> tuple[str, str]:
    """The name and the text of the one kernel of ``ptx`` with the shared ``tile``."""
    entries = re.split(r"(?=^\.visible \.entry )", ptx, flags=re.M)
    found = [(re.search(r"\.entry (\w+)\(", e).group(1), e) for e in entries
             if ".entry" in e and tile in e]
    assert len(found) == 1, f"{len(found)} kernels with {tile} in the PTX"
    return found[0]


# -- the plan ----------------------------------------------------------------------------

def _dot_of(text: str):
    module = parse_module(text)
    return next(i for i in module.entry.instructions if i.opcode is Opcode.DOT)


@pytest.mark.parametrize("dtype", ["f64", "s32", "f16"])
def test_other_element_types_are_left_to_the_loop(dtype):
    instr = _dot_of(f"""HloModule m
ENTRY e {{
  a = {dtype}[4,5] parameter(0)
  b = {dtype}[5,6] parameter(1)
  ROOT d = {dtype}[4,6] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}""")
    assert dot.plan_dot(instr) is None


def test_two_contracting_dims_are_left_to_the_loop():
    instr = _dot_of("""HloModule m
ENTRY e {
  a = f32[4,5,3] parameter(0)
  b = f32[5,3,6] parameter(1)
  ROOT d = f32[4,6] dot(a, b), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
}""")
    assert dot.plan_dot(instr) is None


def test_plan_reads_strides_from_layouts_and_dimension_numbers():
    instr = _dot_of(f"""HloModule m
ENTRY e {{
  a = f32[2,40,30]{{1,0,2}} parameter(0)
  b = f32[2,50,30] parameter(1)
  ROOT d = f32[2,40,50]{{1,2,0}} dot(a, b), {BATCH_DOT}
}}""")
    plan = dot.plan_dot(instr)
    assert (plan.batch_dims, plan.m, plan.n, plan.k) == ((2,), 40, 50, 30)
    # a: m minor (stride 1), then batch (40), then k (80).
    assert (plan.a.batch_strides, plan.a.row_strides, plan.a.k_stride) == ((40,), (1,), 80)
    assert not plan.a.k_fastest(30)
    # b: the K^T of attention, k contiguous.
    assert (plan.b.batch_strides, plan.b.row_strides, plan.b.k_stride) == ((1500,), (30,), 1)
    assert plan.b.k_fastest(30)
    # the result: m minor, then n, then batch.
    assert (plan.c.batch_strides, plan.c.row_strides, plan.c_cols[1]) == ((2000,), (1,), (40,))


@pytest.mark.parametrize("batch, m, n, tile", [
    (1, 1024, 1024, LARGE), (1, 512, 512, SMALL), (32, 128, 128, LARGE),
    (1, 1, 4096, SHORT), (1, 16, 17, SHORT), (1, 4096, 10, NARROW), (1, 10, 10, SMALL),
    (1, 63, 2000, SMALL),
])
def test_tile_choice(batch, m, n, tile):
    assert dot.choose_tile(batch, m, n) == tile


# -- ptxas -------------------------------------------------------------------------------

def test_ptxas_is_installed():
    assert PTXAS is not None and PTXAS.is_file()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_assembles_without_spills(name, arch, tmp_path):
    case = CASES[name]
    ptx = compile_case(case, tmp_path, "cuda", arch).read_text()
    kernel, text = tiled_kernel(ptx)
    assert re.search(r"^\.maxntid 256\b", text, re.M)
    assert len(re.findall(r"\bbar\.sync\b", text)) >= 2
    tile = case.tile
    for which, rows in (("a", tile.bm), ("b", tile.bn)):
        size = dot.BK * (rows + dot.PAD) * 4
        assert re.search(rf"\.shared \.align 16 \.b8 dot_{which}_tile\w*\[{size}\]", text)
    _, printed = assemble(ptx, arch, PTXAS, ("-v", "--warning-as-error", "--warn-on-spills"))
    props = re.search(rf"Compiling entry function '{kernel}' for '{arch}'\s*\n"
                      rf".*?Function properties for {kernel}\s*\n(.*?)\n(.*?)\n",
                      printed, re.S)
    assert props, printed
    frame, usage = props.groups()
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in frame, printed
    registers = int(re.search(r"Used (\d+) registers", usage).group(1))
    assert registers <= 128, usage          # 256 threads: 2 blocks per SM at least


# -- the emulation -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_kernel_matches_numpy_in_both_thread_orders(name, driver, tmp_path,
                                                             monkeypatch):
    case = CASES[name]
    kernel, _ = tiled_kernel(compile_case(case, tmp_path, "cuda").read_text())
    m = xlac.load(compile_case(case, tmp_path, "cuda-emulated"))
    feeds = case.feeds()
    want = case.reference(*(x.astype(np.float64) for x in feeds))
    log = tmp_path / "launches.txt"
    monkeypatch.setenv("XLAC_FAKE_CUDA_LOG", str(log))
    for order in ORDERS:
        if order is None:
            monkeypatch.delenv("XLAC_FAKE_CUDA_ORDER", raising=False)
        else:
            monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        (got,) = m(*feeds)
        assert got.shape == want.shape
        # f32 sums of K products: the error grows with K (and the inputs are ~N(0, 1)).
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * case.k,
                                   err_msg=f"thread order {order or 'forward'}")
    # The dot ran as the tiled kernel: one launch per call, a block per output tile.
    launches = [line for line in log.read_text().splitlines()
                if line.startswith(f"launch {kernel} ")]
    assert launches == [f"launch {kernel} grid={case.blocks},1,1 block=256,1,1 shared=0"] \
        * len(ORDERS)


# -- epilogues ---------------------------------------------------------------------------
#
# An f32 dot and the element-wise ops after it are one output fusion (the backend's
# EpilogueStyle.REGISTERS), which the tiled kernel computes: its store applies the ops to
# each accumulator (emitter/cuda/epilogue.py). Each model below compiles into that one
# kernel, which ptxas takes without spills and which matches onnxruntime in emulation.

def _chain(inputs: dict, nodes, inits: dict, output: str, shape) -> Callable:
    """A model factory: ``nodes`` (op, inputs, output, attributes) over the float inputs
    ``inputs`` (name -> shape) and the initializers ``inits`` (name -> array)."""
    def model():
        graph = helper.make_graph(
            [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes], "g",
            [_value(n, s) for n, s in inputs.items()], [_value(output, shape)],
            [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model


def _gelu(x: str, out: str) -> list:
    """erf GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    return [("Div", [x, "sqrt2"], f"{out}_d", {}), ("Erf", [f"{out}_d"], f"{out}_e", {}),
            ("Add", [f"{out}_e", "one"], f"{out}_p", {}), ("Mul", [x, "half"], f"{out}_h", {}),
            ("Mul", [f"{out}_h", f"{out}_p"], out, {})]


GELU_CONSTANTS = {"sqrt2": np.sqrt(2), "one": 1.0, "half": 0.5}


@dataclass(frozen=True)
class Fused:
    """A model whose one kernel is a tiled dot (or convolution: ``tiles``; "": the
    direct convolution) with an epilogue; its inputs (name -> shape) and the largest K
    it sums over."""
    model: Callable
    inputs: dict
    k: int
    tiles: str = "dot"

    def feeds(self) -> dict:
        return {n: _rand(s, seed) for seed, (n, s) in enumerate(self.inputs.items())}


def _linear(k, n, seed=20):
    """A K x N weight and a bias of N."""
    return _rand((k, n), seed), _rand((n,), seed + 1)


FUSED = {
    "bias_relu": Fused(_chain({"x": (70, 48)},
                              [("MatMul", ["x", "w"], "t", {}), ("Add", ["t", "b"], "u", {}),
                               ("Relu", ["u"], "y", {})],
                              dict(zip("wb", _linear(48, 96))), "y", (70, 96)),
                       {"x": (70, 48)}, 48),
    "bias_gelu": Fused(_chain({"x": (40, 64)},
                              [("MatMul", ["x", "w"], "t", {}), ("Add", ["t", "b"], "u", {}),
                               *_gelu("u", "y")],
                              {**dict(zip("wb", _linear(64, 130))), **GELU_CONSTANTS},
                              "y", (40, 130)),
                       {"x": (40, 64)}, 64),
    # 64 x 64 tiles: sixteen GELUs per thread.
    "large_tile_bias_gelu": Fused(_chain({"x": (512, 64)},
                                         [("MatMul", ["x", "w"], "t", {}),
                                          ("Add", ["t", "b"], "u", {}), *_gelu("u", "y")],
                                         {**dict(zip("wb", _linear(64, 1024))),
                                          **GELU_CONSTANTS}, "y", (512, 1024)),
                                  {"x": (512, 64)}, 64),
    # The input is read twice: as the dot's lhs and as the residual.
    "bias_residual": Fused(_chain({"x": (64, 32)},
                                  [("MatMul", ["x", "w"], "t", {}),
                                   ("Add", ["t", "b"], "u", {}), ("Add", ["u", "x"], "y", {})],
                                  dict(zip("wb", _linear(32, 32))), "y", (64, 32)),
                           {"x": (64, 32)}, 32),
    "clip": Fused(_chain({"x": (33, 20)},
                         [("MatMul", ["x", "w"], "t", {}), ("Clip", ["t", "lo", "hi"], "y", {})],
                         {"w": _rand((20, 50), 22), "lo": -0.5, "hi": 0.7}, "y", (33, 50)),
                  {"x": (33, 20)}, 20),
    # A scale and shift per column (a folded normalization), then tanh; N below a tile.
    "scale_shift_tanh": Fused(_chain({"x": (45, 30)},
                                     [("MatMul", ["x", "w"], "t", {}),
                                      ("Mul", ["t", "s"], "u", {}), ("Add", ["u", "c"], "v", {}),
                                      ("Tanh", ["v"], "y", {})],
                                     {"w": _rand((30, 17), 23), "s": _rand((17,), 24),
                                      "c": _rand((17,), 25)}, "y", (45, 17)),
                              {"x": (45, 30)}, 30),
    # A 3-D MatMul: the importer flattens its rows and reshapes the result back, the
    # epilogue (bias, residual of the 3-D shape) after the reshape.
    "rows_flattened_residual": Fused(_chain({"x": (2, 5, 33), "r": (2, 5, 20)},
                                            [("MatMul", ["x", "w"], "t", {}),
                                             ("Add", ["t", "b"], "u", {}),
                                             ("Add", ["u", "r"], "y", {})],
                                            dict(zip("wb", _linear(33, 20))), "y",
                                            (2, 5, 20)),
                                     {"x": (2, 5, 33), "r": (2, 5, 20)}, 33),
    # Attention's scores, scaled: a batched dot and a scalar.
    "batched_scaled": Fused(_chain({"q": (2, 20, 16), "k": (2, 16, 24)},
                                   [("MatMul", ["q", "k"], "t", {}),
                                    ("Mul", ["t", "scale"], "y", {})],
                                   {"scale": 0.25}, "y", (2, 20, 24)),
                            {"q": (2, 20, 16), "k": (2, 16, 24)}, 16),
}


def check_fused_kernel(ptx: str, tiles: str, arch: str) -> None:
    """``ptx`` is one kernel, with ``tiles``'s shared tiles (none for ""), which ptxas
    assembles for ``arch`` without spilling."""
    entries = re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.M)
    assert len(entries) == 1, entries
    assert f"{tiles}_a_tile" in ptx if tiles else ".shared" not in ptx
    _, printed = assemble(ptx, arch, PTXAS, ("-v", "--warning-as-error", "--warn-on-spills"))
    props = re.search(rf"Function properties for {entries[0]}\s*\n(.*?)\n(.*?)\n", printed)
    assert props, printed
    frame, usage = props.groups()
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in frame, printed
    assert int(re.search(r"Used (\d+) registers", usage).group(1)) <= 128, usage


def check_fused_emulation(case: Fused, folder: Path, monkeypatch) -> None:
    """The emulated model matches onnxruntime in both thread orders, in one launch."""
    import onnxruntime as ort
    model = case.model()
    feeds = case.feeds()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    out = folder / "model.o"
    xlac.compile(model, out, target="cuda-emulated")
    m = xlac.load(out)
    log = folder / "launches.txt"
    monkeypatch.setenv("XLAC_FAKE_CUDA_LOG", str(log))
    for order in ORDERS:
        if order is None:
            monkeypatch.delenv("XLAC_FAKE_CUDA_ORDER", raising=False)
        else:
            monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", order)
        (got,) = m(*feeds.values())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6 * case.k,
                                   err_msg=f"thread order {order or 'forward'}")
    launches = [line for line in log.read_text().splitlines() if line.startswith("launch ")]
    assert len(launches) == len(ORDERS), launches


def test_backend_fuses_epilogues_of_the_kernels_it_has():
    from xlac.optimizer.policy import EpilogueStyle
    backend = make_backend("cuda", "sm_80")
    assert backend.fusion.max_epilogue > 0 and Opcode.ERF in backend.fusion.epilogue_ops
    dot32 = _dot_of("""HloModule m
ENTRY e {
  a = f32[4,5] parameter(0)
  b = f32[5,6] parameter(1)
  ROOT d = f32[4,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    assert backend.epilogue_style(dot32) is EpilogueStyle.REGISTERS
    dot64 = _dot_of("""HloModule m
ENTRY e {
  a = f64[4,5] parameter(0)
  b = f64[5,6] parameter(1)
  ROOT d = f64[4,6] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    assert backend.epilogue_style(dot64) is None      # the loop's: no kernel to take it


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_epilogue_is_one_kernel_without_spills(name, arch, tmp_path):
    case = FUSED[name]
    out = tmp_path / "model.s"
    xlac.compile(case.model(), out, target="cuda", cpu=arch, emit="asm")
    check_fused_kernel(out.read_text(), case.tiles, arch)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_epilogue_matches_onnxruntime(name, driver, tmp_path, monkeypatch):
    check_fused_emulation(FUSED[name], tmp_path, monkeypatch)


def _entries(model, epilogues: bool, monkeypatch) -> int:
    """The number of kernels of ``model``'s PTX, with or without fused epilogues."""
    from xlac.backends.cuda import CudaBackend
    with monkeypatch.context() as mp:
        if not epilogues:
            mp.setattr(CudaBackend, "epilogue_style", lambda self, core: None)
        art = _optimized_artifact(model)
    return len(re.findall(r"^\.visible \.entry ", art.assembly, re.M))


def _optimized_artifact(model):
    from xlac.importers.onnx import import_onnx
    from xlac.optimizer import optimize
    module = import_onnx(model)
    backend = make_backend("cuda", "sm_80")
    optimize(module, backend)
    return backend.emit(module, plan_memory(module, backend), EmitOptions("model"), ("asm",))


def test_bert_encoder_has_fewer_kernels_with_epilogues(monkeypatch):
    sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
    from models import bert_encoder
    model = bert_encoder(layers=1)
    fused, unfused = _entries(model, True, monkeypatch), _entries(model, False, monkeypatch)
    # Per layer: the attention's output projection (bias, residual) and both FFN
    # matmuls (bias and GELU; bias and residual) lose their own loop, and so does the
    # scores' scaling.
    assert fused <= unfused - 4, (fused, unfused)

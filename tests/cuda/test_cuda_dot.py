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


def dot_kernel(ptx: str) -> tuple[str, str]:
    """The name and the text of the one kernel of ``ptx`` with the dot's shared tiles."""
    entries = re.split(r"(?=^\.visible \.entry )", ptx, flags=re.M)
    found = [(re.search(r"\.entry (\w+)\(", e).group(1), e) for e in entries
             if ".entry" in e and "dot_a_tile" in e]
    assert len(found) == 1, f"{len(found)} dot kernels in the PTX"
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
    kernel, text = dot_kernel(ptx)
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

@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    sys.path.insert(0, str(HERE))
    from fake_driver import build_fake_driver
    path = build_fake_driver(tmp_path_factory.mktemp("fake-cuda"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLAC_CUDA_DRIVER", str(path))
        for var in ("XLAC_FAKE_CUDA_ORDER", "XLAC_FAKE_CUDA_FAIL", "XLAC_FAKE_CUDA_LOG"):
            mp.delenv(var, raising=False)
        yield path


@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_kernel_matches_numpy_in_both_thread_orders(name, driver, tmp_path,
                                                             monkeypatch):
    case = CASES[name]
    kernel, _ = dot_kernel(compile_case(case, tmp_path, "cuda").read_text())
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

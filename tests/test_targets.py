"""Targets: CPU and feature checks, the features the header lists, ARM float ABIs,
objects that keep to their target's instruction set (by disassembly), sizes against the
address space, and flash / RAM / stack in the report and the header.

Running the objects on emulated boards is tests/test_cortex_m.py and
tests/test_qemu_user.py.
"""
from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from cross import ROOT
from tools import require_tools
from xlac.emitter.elf import ElfObject, set_arm_vfp_args
from xlac.emitter.stack import stack_depth
from xlac.emitter.target import make_target
from xlac.hlo import XlacError
from xlac.main import main

LENET = ROOT / "examples" / "lenet.onnx"


def conv_model(n: int = 1, size: int = 16, channels: int = 8) -> onnx.ModelProto:
    """conv 3x3 -> relu -> global average pool -> exp: float math of every kind."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Exp", ["p"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, channels, 1, 1])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# --- CPUs and features --------------------------------------------------------------

def test_unknown_cpu_is_one_line_listing_the_valid_ones():
    with pytest.raises(XlacError) as e:
        make_target("aarch64-unknown-linux-gnu", "cortex-a7")
    msg = str(e.value)
    assert msg.startswith("unknown CPU 'cortex-a7' for aarch64-unknown-linux-gnu (did you "
                          "mean cortex-a78"), msg
    assert "valid: " in msg and "cortex-a76," in msg and "neoverse-n1," in msg
    assert "\n" not in msg


def test_unknown_cpu_on_the_command_line(tmp_path, capfd):
    out = tmp_path / "m.o"
    rc = main([str(LENET), "-o", str(out), "--target", "aarch64-unknown-linux-gnu",
               "--cpu", "bogus"])
    err = capfd.readouterr().err
    assert rc == 1 and not out.exists() and not out.with_suffix(".h").exists()
    assert err.startswith("xlac: error: unknown CPU 'bogus' for aarch64-unknown-linux-gnu")
    assert err.count("\n") == 1 and "not a recognized" not in err


def test_unknown_feature_is_an_error_with_suggestions():
    with pytest.raises(XlacError, match=r"unknown feature 'nen' for aarch64-unknown-linux-gnu "
                                        r"\(did you mean neon.*\); valid: .*\bsve\b"):
        make_target("aarch64-unknown-linux-gnu", features="+nen")


def test_feature_needs_a_sign():
    with pytest.raises(XlacError, match=r"bad feature 'neon' in --features: write \+NAME"):
        make_target("aarch64-unknown-linux-gnu", features="neon")


def test_features_add_to_and_remove_from_the_cpu():
    info, _ = make_target("aarch64-unknown-linux-gnu", features="+i8mm,+dotprod")
    assert {"+neon", "+i8mm", "+dotprod"} <= set(info.required)
    info, _ = make_target("aarch64-unknown-linux-gnu", "cortex-a76", "-dotprod")
    assert "+fullfp16" in info.required and "+dotprod" not in info.required


@pytest.mark.parametrize("triple,cpu,expected,absent", [
    ("thumbv7em-none-eabihf", None, {"+fpregs", "+vfp4d16sp", "+dsp", "+hwdiv"}, {"+fp64"}),
    ("thumbv8m.main-none-eabihf", "cortex-m33", {"+fp-armv8d16sp", "+dsp"}, {"+mve"}),
    ("thumbv8.1m.main-none-eabihf", "cortex-m55", {"+mve.fp", "+fp64"}, set()),
    ("thumbv7m-none-eabi", None, {"+hwdiv"}, {"+fpregs", "+dsp"}),
    ("x86_64-unknown-linux-gnu", "x86-64-v2", {"+sse4.2", "+popcnt", "+ssse3"}, {"+avx"}),
    ("x86_64-unknown-linux-gnu", "x86-64-v3", {"+avx2", "+fma", "+bmi2"}, {"+avx512f"}),
    ("aarch64-unknown-linux-gnu", None, {"+neon", "+fp-armv8"}, {"+sve"}),
    ("aarch64-unknown-linux-gnu", "neoverse-v1", {"+sve", "+i8mm", "+bf16"}, {"+sme"}),
    ("riscv64-unknown-linux-gnu", None, {"+m", "+a", "+f", "+d", "+c"}, {"+v"}),
    ("riscv64-unknown-linux-gnu", "sifive-x280", {"+v", "+zvl512b", "+zfh"}, set()),
])
def test_required_features_include_what_the_cpu_implies(triple, cpu, expected, absent):
    info, _ = make_target(triple, cpu)
    assert expected <= set(info.required), info.required
    assert not absent & set(info.required), info.required


def test_header_lists_the_implied_features(tmp_path):
    xlac.compile(LENET, tmp_path / "m.o", target="x86_64-unknown-linux-gnu", cpu="x86-64-v2")
    header = (tmp_path / "m.h").read_text()
    block = re.search(r" \* Features it requires[^\n]*\n((?: \*   .*\n)+)", header).group(1)
    assert "+sse4.2" in block and "+popcnt" in block and "+avx" not in block


# A CPU of 16-byte vectors that every machine of the host's architecture runs.
OLDER_CPU = {"x86_64": "x86-64-v2", "aarch64": "cortex-a53", "arm64": "cortex-a53"}


def test_host_cpu_variable_names_the_host_targets_default_cpu(tmp_path, monkeypatch):
    """XLAC_HOST_CPU: the host target's default CPU, with the features its name implies as
    for an explicit CPU (the kernel tests' JIT too); an explicit CPU still wins; unset,
    the host's own CPU."""
    from xlac.emitter.kernels.jit import host_target
    cpu = OLDER_CPU[llvm.get_process_triple().split("-")[0]]
    explicit, _ = make_target(None, cpu)
    monkeypatch.setenv("XLAC_HOST_CPU", cpu)
    assert make_target()[0] == explicit and explicit.is_host
    assert explicit.vector_bytes == host_target().vector_bytes == 16
    assert make_target(None, "generic")[0].cpu == "generic"
    xlac.compile(LENET, tmp_path / "m.o")
    assert re.search(rf"^ \* CPU: +{cpu}$", (tmp_path / "m.h").read_text(), re.M)
    monkeypatch.setenv("XLAC_HOST_CPU", "no-such-cpu")
    with pytest.raises(XlacError, match="^XLAC_HOST_CPU=no-such-cpu: unknown CPU 'no-such"):
        make_target()
    monkeypatch.delenv("XLAC_HOST_CPU")
    assert make_target()[0].cpu == llvm.get_host_cpu_name()


def test_cpu_with_the_v_extension_gets_vector_kernels():
    assert make_target("riscv64-unknown-linux-gnu", "sifive-x280")[0].vector_bytes == 16
    assert make_target("riscv64-unknown-linux-gnu", features="+v")[0].vector_bytes == 16
    assert make_target("riscv64-unknown-linux-gnu")[0].vector_bytes == 4


# --- ARM float ABI --------------------------------------------------------------------

def test_hard_float_triple_needs_an_fpu():
    with pytest.raises(XlacError, match=r"thumbv7m-none-eabihf passes floats in FPU registers "
                                        r"\(hard float\), but CPU cortex-m3 has no FPU; use the "
                                        r"soft-float triple \(thumbv7m-none-eabi\)"):
        make_target("thumbv7m-none-eabihf")


def _readelf_attributes(path: Path) -> str:
    require_tools("readelf")
    return subprocess.run(["readelf", "-A", str(path)], capture_output=True, text=True,
                          check=True).stdout


def test_hard_float_object_says_it_passes_floats_in_vfp_registers(tmp_path):
    xlac.compile(conv_model(), tmp_path / "hf.o", target="thumbv7em-none-eabihf")
    xlac.compile(conv_model(), tmp_path / "sf.o", target="thumbv7em-none-eabi")
    assert "Tag_ABI_VFP_args: VFP registers" in _readelf_attributes(tmp_path / "hf.o")
    soft = _readelf_attributes(tmp_path / "sf.o")
    assert "Tag_ABI_VFP_args" not in soft and "Tag_FP_arch" not in soft
    header = (tmp_path / "hf.h").read_text()
    assert "Float ABI:     hard" in header and "-mfloat-abi=hard" in header


def test_vfp_args_tag_goes_into_the_file_attributes():
    """set_arm_vfp_args appends the tag to the aeabi file attributes (both lengths grow
    by two bytes); the rest of the object stays as it was."""
    info, tm = make_target("thumbv7em-none-eabihf")
    module = llvm.parse_assembly("define void @f() { ret void }")
    module.triple = info.triple
    data = tm.emit_object(module)
    before, after = ElfObject(data), ElfObject(set_arm_vfp_args(data))
    old = before.contents(before.section(".ARM.attributes"))
    new = after.contents(after.section(".ARM.attributes"))
    # 'A', subsection length, "aeabi\0", Tag_File, its length, then the attributes.
    assert new[:1] == old[:1] == b"A" and new[5:12] == old[5:12] == b"aeabi\0\x01"
    for at in (1, 12):
        assert struct.unpack_from("<I", new, at)[0] == struct.unpack_from("<I", old, at)[0] + 2
    assert new[16:] == old[16:] + b"\x1c\x01"
    assert [(s.name, s.size) for s in after.sections if s.name != ".ARM.attributes"] == \
        [(s.name, s.size) for s in before.sections if s.name != ".ARM.attributes"]


# --- instructions the target's features allow (disassembly) ----------------------------

def _mnemonics(objdump: str, path: Path) -> list[str]:
    require_tools(objdump)
    text = subprocess.run([objdump, "-d", str(path)], capture_output=True, text=True,
                          check=True).stdout
    return [parts[2].split()[0] for line in text.splitlines()
            if len(parts := line.split("\t")) >= 3 and parts[2].strip()]


@pytest.mark.parametrize("triple,cpu", [("thumbv7em-none-eabi", "cortex-m4"),
                                        ("thumbv7m-none-eabi", None),
                                        ("thumbv6m-none-eabi", None)])
def test_soft_float_objects_have_no_fpu_instructions(tmp_path, triple, cpu):
    """Every VFP, NEON and MVE mnemonic starts with 'v'; no other Thumb one does."""
    out = tmp_path / "m.o"
    xlac.compile(conv_model(), out, target=triple, cpu=cpu)
    ops = _mnemonics("arm-none-eabi-objdump", out)
    assert ops and not [op for op in ops if op.startswith("v")]
    assert "no FPU instructions: -mfloat-abi=soft" in out.with_suffix(".h").read_text()


def test_soft_float_triple_uses_an_fpu_the_features_ask_for(tmp_path):
    out = tmp_path / "m.o"
    xlac.compile(conv_model(), out, target="thumbv7em-none-eabi", features="+vfp4d16sp")
    ops = _mnemonics("arm-none-eabi-objdump", out)
    assert any(op.startswith(("vmul.f32", "vadd.f32", "vfma.f32", "vmla.f32")) for op in ops)
    assert "the code uses the FPU: -mfloat-abi=softfp" in out.with_suffix(".h").read_text()


def test_baseline_x86_64_object_has_no_avx(tmp_path):
    """VEX / EVEX encoded (AVX and later) instructions all start with 'v'."""
    out = tmp_path / "m.o"
    xlac.compile(conv_model(), out, target="x86_64-unknown-linux-gnu", cpu="x86-64")
    ops = _mnemonics("objdump", out)
    assert ops and not [op for op in ops if op.startswith("v")]
    assert any(op in ("mulps", "addps") for op in ops), "SSE, which x86-64 always has"


# --- sizes the target can address -----------------------------------------------------

def _elementwise(dims: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_tensor_beyond_a_32_bit_address_space_is_an_error(tmp_path):
    with pytest.raises(XlacError, match=r"^input 'x' \(f32\[3x1000x1000x1000\]\) takes "
                                        r"12,000,000,000 bytes, more than one object can have "
                                        r"on the 32-bit target thumbv7em-none-eabihf "
                                        r"\(2,147,483,647 bytes\)$"):
        xlac.compile(_elementwise([3, 1000, 1000, 1000]), tmp_path / "m.o",
                     target="thumbv7em-none-eabihf")
    assert not list(tmp_path.iterdir())


def test_intermediate_beyond_the_address_space_is_named(tmp_path):
    """A small input expanded to 2.4 GB and summed: the expanded tensor is too big."""
    shape = numpy_helper.from_array(np.array([600_000_000], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["e"]),
         helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0)], "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(XlacError, match=r"^tensor %\S+ of Expand 'e' \(f32\[600000000\]\{0\}\) "
                                        r"takes 2,400,000,000 bytes, more than one object"):
        xlac.compile(model, tmp_path / "m.o", target="thumbv7em-none-eabihf", emit="hlo")


def test_convolution_pixels_beyond_the_kernels_index_type(tmp_path):
    model = conv_model(size=46341, channels=1)
    with pytest.raises(XlacError, match=r"convolution %\S+ .* has 2,147,488,281 output pixels "
                                        r"per image; the convolution kernels count pixels in "
                                        r"32 bits \(at most 2,147,483,647\)"):
        xlac.compile(model, tmp_path / "m.o", emit="hlo")


# --- what it costs --------------------------------------------------------------------

def test_report_and_header_give_flash_ram_and_stack(tmp_path):
    out = tmp_path / "m.o"
    result = xlac.compile(conv_model(), out, target="thumbv7em-none-eabihf", report=True)
    r = result.report
    elf = ElfObject(out.read_bytes())
    weights = elf.section(".rodata.m.weights")
    assert r["flash_bytes"]["weights"] == weights.size > 0
    code = sum(s.size for s in elf.sections if s.flags & 0x4)
    assert r["flash_bytes"]["code"] == code > 0
    assert r["flash_bytes"]["total"] == code + weights.size + r["flash_bytes"]["rodata"]
    assert r["ram_bytes"] == {"arena": result.arena_size, "data": 0, "total": result.arena_size}
    assert r["stack_bytes"] > 0
    header = out.with_suffix(".h").read_text()
    assert f"#define m_STACK_SIZE {r['stack_bytes']}u" in header
    assert f"uses at most {r['stack_bytes']} bytes" in header
    text = xlac.report.format_report(r)
    assert re.search(r"flash +[\d,]+ bytes .*: code [\d,]+, weights [\d,]+, other read-only "
                     r"data [\d,]+", text)
    assert re.search(r"RAM +[\d,]+ bytes.*: arena [\d,]+, static data 0", text)
    assert f"stack               {r['stack_bytes']:,} bytes at most per call" in text


def test_header_lists_the_symbols_the_object_needs(tmp_path):
    """Soft float: the compiler's float routines; hard float: nothing at all here."""
    xlac.compile(conv_model(), tmp_path / "sf.o", target="thumbv7m-none-eabi")
    xlac.compile(conv_model(), tmp_path / "hf.o", target="thumbv7em-none-eabihf")
    soft = ElfObject((tmp_path / "sf.o").read_bytes()).undefined_symbols()
    assert "__mulsf3" in soft or "__aeabi_fmul" in soft
    assert ", ".join(soft) in (tmp_path / "sf.h").read_text().replace("\n *   ", " ")
    assert ElfObject((tmp_path / "hf.o").read_bytes()).undefined_symbols() == []


def test_stack_is_not_known_without_machine_code(tmp_path):
    result = xlac.compile(conv_model(), tmp_path / "m.ll", emit="llvm", report=True)
    assert result.report["stack_bytes"] is None and result.report["flash_bytes"] is None
    header = (tmp_path / "m.h").read_text()
    assert "_STACK_SIZE" not in header and "Stack: not known" in header


def test_stack_depth_is_the_deepest_chain_of_frames():
    graph = {"run": {"run_v"}, "run_v": {"compute"}, "compute": {"a", "b", "memcpy"},
             "a": set(), "b": {"a"}}
    frames = {"run": 16, "run_v": 32, "compute": 100, "a": 40, "b": 8}
    assert stack_depth(graph, frames, ["run", "run_v"]) == 16 + 32 + 100 + 8 + 40
    # x86: each call pushes a return address (4 calls deep).
    assert stack_depth(graph, frames, ["run_v"], return_address_bytes=8) == 180 + 4 * 8
    with pytest.raises(ValueError, match="recursive"):
        stack_depth({"f": {"g"}, "g": {"f"}}, {}, ["f"])


def test_fmod_on_hard_float_arm_passes_floats_in_fpu_registers(tmp_path):
    """LLVM's own fmodf libcall would follow llvmlite's soft-float default."""
    from xlac.hlo.text import parse_module
    from emit_util import emit_module
    module = parse_module(
        "HloModule m\n\nENTRY %main (x: f32[8], y: f32[8]) -> f32[8] {\n"
        "  %x = f32[8]{0} parameter(0)\n  %y = f32[8]{0} parameter(1)\n"
        "  ROOT %r = f32[8]{0} remainder(f32[8]{0} %x, f32[8]{0} %y)\n}\n")
    art, _ = emit_module(module, "m", ("obj", "llvm"), "thumbv7em-none-eabihf")
    assert re.search(r"call arm_aapcs_vfpcc float @fmodf\(", art.llvm_ir)
    assert "frem" not in art.llvm_ir and art.symbols == ("fmodf",)

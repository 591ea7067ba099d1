"""The parts of benchmarks/cortex_m.py that run without a board: the Cortex-M4 cycle
weights of benchmarks/cycles.py on a hand-written QEMU trace, and how benchmarks/tflm.py
reads the versions TFLite Micro pins for its third-party code."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import cycles  # noqa: E402
import tflm  # noqa: E402


@pytest.mark.parametrize("mnemonic,want", [
    ("ldr.w", "ldr"), ("ldrbeq", "ldrb"), ("bne", "b"), ("bls", "b"), ("popne", "pop"),
    ("bics", "bics"), ("teq", "teq"), ("vmla.f32", "vmla.f32"), ("smlad", "smlad"),
    ("adcs", "adcs")])
def test_base_strips_width_and_condition_of_the_named_instructions(mnemonic, want):
    assert cycles.base(mnemonic) == want


def test_loads_pipeline_behind_loads():
    """N neighbouring single loads and stores take N + 1 cycles (TRM 3.3.2)."""
    c1, load = cycles.cost("ldr", "r0, [r1]", False)
    c2, _ = cycles.cost("ldr.w", "r2, [r1, #4]", load)
    c3, _ = cycles.cost("str", "r2, [r3]", True)
    assert (c1, c2, c3) == (2, 1, 1)
    assert cycles.cost("add", "r0, r0, r1", True) == (1, False)


@pytest.mark.parametrize("mnemonic,operands,want", [
    ("push", "{r4, r5, r6, r7, lr}", 6), ("pop", "{r4-r7}", 5), ("vpush", "{s16, s17}", 3),
    ("ldrd", "r0, r1, [r2]", 3), ("vdiv.f32", "s0, s1, s2", 14),
    ("vmla.f32", "s0, s1, s2", 3), ("vadd.f32", "s0, s1, s2", 1), ("smlad", "r0, r1, r2, r0", 1),
    ("udiv", "r0, r1, r2", 7)])
def test_instruction_costs(mnemonic, operands, want):
    assert cycles.cost(mnemonic, operands, False)[0] == want


def test_does_not_charge_a_refill_to_a_branch_not_taken(tmp_path):
    """A block at 0x100 that loops twice (bne taken back to 0x100, then not taken), then
    returns to 0x200: the window starts at the entry and stops at the return address."""
    log = tmp_path / "trace.log"
    log.write_text(
        "----------------\nIN: f\n"
        "0x00000100:  6808       ldr      r0, [r1]\n"
        "0x00000102:  684a       ldr      r2, [r1, #4]\n"
        "0x00000104:  3b01       subs     r3, #1\n"
        "0x00000106:  d1fb       bne      #0x100\n\n"
        "Trace 0: 0x7f0000000100 [00000000/00000100/00000110/ff020200] f\n"
        "Trace 0: 0x7f0000000100 [00000000/00000100/00000110/ff020200] f\n"
        "----------------\nIN: f\n"
        "0x00000108:  bd10       pop      {r4, pc}\n\n"
        "Trace 0: 0x7f0000000200 [00000000/00000108/00000110/ff020200] f\n"
        "Trace 0: 0x7f0000000300 [00000000/00000200/00000110/ff020200] main\n")
    r = cycles._weigh(log, 0x100, {0x200})
    # each pass: ldr 2 + ldr 1 + subs 1 + bne 1; the taken bne 2 more; pop {r4, pc} 3
    assert r["instructions"] == 9
    assert r["cycles"] == 5 + 2 + 5 + 3
    assert r["by_mnemonic"]["b"] == 2 + 2


def test_pins_follow_tflite_micros_download_scripts(tmp_path):
    """The ref of each library comes from its archive URL, through the shell variable
    that names it where the script uses one."""
    make = tmp_path / tflm.MAKE_DIR
    (make / "ext_libs").mkdir(parents=True)
    (make / "ext_libs" / "cmsis_nn_download.sh").write_text(
        'ZIP_PREFIX_NN="4ab83cc"\n'
        'CMSIS_NN_URL="http://github.com/ARM-software/CMSIS-NN/archive/${ZIP_PREFIX_NN}.zip"\n')
    (make / "ext_libs" / "cmsis_download.sh").write_text(
        'ZIP_PREFIX="5782d6f"\n'
        'CMSIS_URL="http://github.com/ARM-software/CMSIS_6/archive/${ZIP_PREFIX}.zip"\n'
        'ZIP_PREFIX="c2c70a9"\n'
        'URL="http://github.com/ARM-software/Cortex_DFP/archive/${ZIP_PREFIX}.zip"\n')
    (make / "third_party_downloads.inc").write_text(
        'GEMMLOWP_URL := "https://github.com/google/gemmlowp/archive/719139c.zip"\n'
        'RUY_URL="https://github.com/google/ruy/archive/d371283.zip"\n'
        'FLATBUFFERS_URL := "https://github.com/google/flatbuffers/archive/refs/tags/'
        'v25.9.23.zip"\n'
        'FLATBUFFERS_PATCH_PATH := "tensorflow/lite/micro/tools/make/flatbuffers.patch"\n'
        'KISSFFT_URL := "https://github.com/mborgerding/kissfft/archive/refs/tags/v130.zip"\n'
        'KISSFFT_PATCH_PATH := "third_party/kissfft/kissfft.patch"\n')
    assert tflm.pins(tmp_path) == {
        "CMSIS-NN": "4ab83cc", "CMSIS_6": "5782d6f", "Cortex_DFP": "c2c70a9",
        "gemmlowp": "719139c", "ruy": "d371283", "flatbuffers": "v25.9.23",
        "kissfft": "v130"}
    assert tflm.patches(tmp_path) == {
        "flatbuffers": "tensorflow/lite/micro/tools/make/flatbuffers.patch",
        "kissfft": "third_party/kissfft/kissfft.patch"}


def test_pins_name_a_library_the_scripts_leave_out(tmp_path):
    make = tmp_path / tflm.MAKE_DIR
    (make / "ext_libs").mkdir(parents=True)
    for name in tflm.PIN_FILES:
        (make / name).write_text("")
    with pytest.raises(RuntimeError, match="no pinned version"):
        tflm.pins(tmp_path)

"""A cycle estimate for one call on an emulated Cortex-M4: the instructions QEMU executes,
each weighted by its timing in the Cortex-M4 Technical Reference Manual (ARM DDI 0439,
section 3.3, "Instruction set summary" and "Load/store timings"; the FPU's in section
7.2.3), from a QEMU trace.

benchmarks/cortex_m.py ``--cycles`` uses it for xlac's call and for TFLite Micro's
Invoke(): instructions count equally, cycles do not (a taken branch, a load not pipelined
behind another, a VDIV, a VMLA cost more than an add), so the estimate tells whether a
ratio of instructions carries over to time.

The trace: ``qemu-system-arm -d in_asm,exec,nochain``, the disassembly of each
translated block and a line per block executed. The call's window runs from the first
block at the function's entry to the first block at a return address of its calls
(it is called once). What the estimate leaves out: wait states of the memory (none on the MPS2's
SSRAM), stalls of a load feeding the next address, and the folding of IT into the
instruction before it.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

CONDITIONS = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge",
              "lt", "gt", "le", "al")
BRANCHES = {"b", "bl", "blx", "bx", "cbz", "cbnz", "tbb", "tbh"}
REFILL = 2   # P, the pipeline refill of a taken branch: 1 to 3 cycles, TRM 3.3.1
# Cycles other than 1, by mnemonic (without .w/.n and condition).
SINGLE_LOADS = {"ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "str", "strb", "strh", "ldrex",
                "strex", "ldrt", "strt"}
FIXED = {"ldrd": 3, "strd": 3, "sdiv": 7, "udiv": 7,   # divides take 2 to 12
         "vdiv.f32": 14, "vsqrt.f32": 14, "vmla.f32": 3, "vmls.f32": 3, "vnmla.f32": 3,
         "vnmls.f32": 3, "vfma.f32": 3, "vfms.f32": 3, "vfnma.f32": 3, "vfnms.f32": 3,
         "vldr": 2, "vstr": 2}
MULTIPLE = {"ldm", "ldmia", "ldmdb", "stm", "stmia", "stmdb", "push", "pop", "vldm",
            "vldmia", "vldmdb", "vstm", "vstmia", "vstmdb", "vpush", "vpop"}


def base(mnemonic: str) -> str:
    """``ldr.w`` -> ``ldr``, ``ldrbeq`` -> ``ldrb``, ``bne`` -> ``b``: the names the tables
    above use (other mnemonics cost 1 cycle whatever their suffix)."""
    m = mnemonic.removesuffix(".w").removesuffix(".n")
    known = BRANCHES | SINGLE_LOADS | MULTIPLE | FIXED.keys() | {"mov", "add"}
    if m not in known and m[-2:] in CONDITIONS and m[:-2] in known:
        return m[:-2]
    return m


def cost(mnemonic: str, operands: str, after_load: bool) -> tuple[int, bool]:
    """Cycles of one instruction, not counting a branch's refill; and whether it is a
    single load or store (the next one pipelines behind it: N + 1 for N of them)."""
    m = base(mnemonic)
    if m in SINGLE_LOADS:
        return (1 if after_load else 2), True
    if m in MULTIPLE:
        registers = re.search(r"\{([^}]*)\}", operands)
        n = 0
        for part in (registers.group(1).split(",") if registers else ()):
            lo, _, hi = part.strip().partition("-")
            n += (int(hi[1:]) - int(lo[1:]) + 1) if hi else 1
        return 1 + n, False
    return FIXED.get(m, 1), False


def writes_pc(mnemonic: str, operands: str) -> bool:
    m = base(mnemonic)
    if m in BRANCHES:
        return True
    if m in ("pop", "ldm", "ldmia") and "pc" in operands:
        return True
    return m in ("ldr", "mov", "add") and operands.split(",")[0].strip() == "pc"


def estimate(board: str, elf: Path, function: str, cwd: Path | None = None) -> dict:
    """Instructions and estimated cycles of the one call of ``function`` in ``elf``,
    run on ``board``, with the cycles by mnemonic."""
    symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], check=True, capture_output=True,
                             text=True).stdout
    entry = int(re.search(rf"^([0-9a-f]+) [Tt] {re.escape(function)}$", symbols,
                          re.M).group(1), 16) & ~1
    listing = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], check=True,
                             capture_output=True, text=True).stdout
    calls = re.findall(rf"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{{4}} ?)+\s+bl\s+[0-9a-f]+ "
                       rf"<{re.escape(function)}>", listing, re.M)
    if not calls:
        raise RuntimeError(f"{elf}: no call of {function}")
    back = {int(c, 16) + 4 for c in calls}   # the return addresses
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "trace.log"
        subprocess.run(["qemu-system-arm", "-M", board, "-nographic", "-monitor", "none",
                        "-serial", "none", "-semihosting-config", "enable=on,target=native",
                        "-icount", "shift=0", "-d", "in_asm,exec,nochain", "-D", str(log),
                        "-kernel", str(elf)], cwd=cwd, check=True, capture_output=True,
                       timeout=3600)
        return _weigh(log, entry, back)


def _weigh(log: Path, entry: int, back: set[int]) -> dict:
    blocks: dict[str, list] = {}     # host code address -> its block
    pending: list | None = None      # the block just translated: it runs next
    current: list | None = None
    inside = False
    instructions = cycles = 0
    by_mnemonic: Counter = Counter()
    last = None                      # the block before: (its end pc, its last instruction)
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("IN:"):
                current = pending = []
            elif line.startswith("0x") and current is not None:
                m = re.match(r"0x([0-9a-f]+):\s+((?:[0-9a-f]{4} ?)+)\s+(\S+)\s*(.*)", line)
                if m:
                    size = len(m.group(2).replace(" ", "")) // 2
                    current.append((int(m.group(1), 16), size, m.group(3), m.group(4)))
            elif line.startswith("Trace"):
                current = None
                m = re.match(r"Trace \d+: (0x[0-9a-f]+) \[[0-9a-f]+/([0-9a-f]+)/", line)
                host, pc = m.group(1), int(m.group(2), 16)
                if pending is not None:
                    blocks[host], pending = pending, None
                if not inside:
                    inside = pc == entry
                    if not inside:
                        continue
                elif pc in back:
                    break
                if last is not None:   # the branch that ended the block before: taken?
                    end, (_, _, mnemonic, operands) = last
                    if writes_pc(mnemonic, operands) and pc != end:
                        cycles += REFILL
                        by_mnemonic[base(mnemonic)] += REFILL
                block = blocks[host]
                after_load = False
                for _, _, mnemonic, operands in block:
                    c, after_load = cost(mnemonic, operands, after_load)
                    cycles += c
                    by_mnemonic[base(mnemonic)] += c
                instructions += len(block)
                address, size = block[-1][0], block[-1][1]
                last = (address + size, block[-1])
    if not inside:
        raise RuntimeError(f"the trace never reaches {entry:#x}")
    return {"instructions": instructions, "cycles": cycles, "by_mnemonic": by_mnemonic}

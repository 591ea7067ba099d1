"""``--report``: what the compiler did to a model, as a dict (``--report-json``) and as text.

The numbers come from the compiled module and its buffer assignment, never from
estimates: ``arena_bytes`` is the header's NAME_ARENA_SIZE; ``naive_activation_bytes``
is what the arena would take with no buffer reuse; ``lower_bound_bytes`` is the
most bytes live at once in the chosen order, kernel scratch included, which no packing
of that order can beat; ``lower_bound_buffers_bytes`` is the same without kernel
scratch, on the terms of ``onnx_order_lower_bound_bytes``, the bound for the ONNX file's
own node order (intermediate tensors only, as ONNX has no kernels; None where ONNX's
shape inference cannot size them); ``weight_bytes`` counts identical constants once, as
the object stores them; ``aliased_buffers`` counts values that take no storage of their
own (views, producers written into a concatenation's slice) and
``in_place_buffers`` results written over an operand. ``memory`` is where the arena
goes (memory_report.py: ``--report-memory``). ``notes`` are what the importer did with
the file that a user should know (declared shapes that shape inference overrules).
``signature`` is NAME_run's flattened argument list per model input and output: a
sequence one argument per element, an optional compiled empty none.

What the model costs on the target, the three figures an embedded engineer budgets:
``flash_bytes`` from the object's sections (``code``, ``weights``: the model's constant
section, ``rodata``: every other read-only section, such as NAME_info, vector constants
and unwind tables; None without an ELF object), ``ram_bytes`` (the ``arena`` plus the
object's writable ``data``, which is 0: xlac keeps no mutable globals) and
``stack_bytes``, the most stack a call of NAME_run / NAME_run_v takes (its deepest chain
of frames as the code generator laid them out; C library calls not counted).
"""
from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np

from .emitter.interface import model_interface
from .hlo import Module, Opcode
from .memory_report import memory_section
from .optimizer import BufferAssignment


def op_counts(module: Module) -> dict[str, int]:
    """Instructions of the entry computation per opcode (parameters excluded), most first."""
    counts = Counter(i.opcode.text for i in module.entry.instructions
                     if i.opcode is not Opcode.PARAMETER)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def fusion_summary(module: Module) -> list[dict]:
    """One record per fusion instruction of the entry: its kind, root op and the ops it fused."""
    out = []
    for i in module.entry.instructions:
        if i.opcode is Opcode.FUSION:
            fused = i.called[0]
            ops = Counter(f.opcode.text for f in fused.instructions
                          if f.opcode is not Opcode.PARAMETER)
            out.append({"name": i.name, "kind": i.attrs["kind"], "root": fused.root.opcode.text,
                        "ops": dict(sorted(ops.items()))})
    return out


def weight_bytes(module: Module) -> int:
    """Bytes of the distinct constants left after optimization: the read-only data of the
    object, where identical constants share one global."""
    distinct: dict[bytes, int] = {}
    for comp in module.computations:
        for i in comp.instructions:
            if i.opcode is Opcode.CONSTANT:
                data = np.ascontiguousarray(i.literal, i.shape.dtype.np).tobytes()
                distinct[hashlib.sha256(data).digest() + bytes(str(i.shape), "utf-8")] = len(data)
    return sum(distinct.values())


def signature_section(module: Module, name: str, bound: tuple[str, int] | None = None) -> dict:
    """The model's inputs and outputs with the arguments of NAME_run that hold them (at
    the bound, for a bounded batch)."""
    interface = model_interface(module, name, bound)

    def values(which: str) -> list[dict]:
        return [{"name": v.name, "kind": v.kind, "optional": v.optional,
                 "arguments": [{"name": p.name, "c_name": p.c_name, "dtype": p.dtype.name,
                                "dims": list(p.dims)} for p in interface.ports_of(v, which)]}
                for v in (interface.input_values if which == "inputs"
                          else interface.output_values)]
    return {"inputs": values("inputs"), "outputs": values("outputs")}


def build_report(*, name: str, target, imported_ops: dict[str, int], module: Module,
                 assignment: BufferAssignment, onnx_order_bound: int | None,
                 times: dict[str, float], files: list[str],
                 const_inputs: list[str] = (), footprint: dict | None = None,
                 stack_bytes: int | None = None, streaming: dict | None = None,
                 bound: tuple[str, int] | None = None) -> dict:
    st = assignment.stats
    memory = memory_section(assignment)
    memory["streaming"] = streaming
    flash = None
    if footprint is not None:
        flash = {k: footprint[k] for k in ("code", "weights", "rodata")}
        flash["total"] = sum(flash.values())
    data = footprint["data"] if footprint is not None else None
    return {
        "name": name,
        "target": {"triple": target.triple, "cpu": target.cpu, "features": target.features,
                   "requires": list(target.required)},
        "files": files,
        "imported_ops": imported_ops,
        "const_inputs": list(const_inputs),
        "signature": signature_section(module, name, bound),
        "bound": None if bound is None else {"symbol": bound[0], "limit": bound[1]},
        "ops": op_counts(module),
        "fusions": fusion_summary(module),
        "weight_bytes": weight_bytes(module),
        "arena_bytes": assignment.arena_size,
        "arena_alignment": assignment.alignment,
        "naive_activation_bytes": assignment.naive_bytes,
        "lower_bound_bytes": assignment.lower_bound,
        "lower_bound_buffers_bytes": memory["buffers_peak_bytes"],
        "onnx_order_lower_bound_bytes": onnx_order_bound,
        "aliased_buffers": st["views"] + st["concat_slots"],
        "in_place_buffers": len(assignment.in_place),
        "concats_in_place": len(assignment.concats_in_place),
        "lean_kernels": len(assignment.lean_kernels),
        "scheduler": st["scheduler"],
        "schedule_optimal": st["schedule_optimal"],
        "packing": st["packing"],
        "flash_bytes": flash,
        "ram_bytes": {"arena": assignment.arena_size, "data": data,
                      "total": assignment.arena_size + (data or 0)},
        "stack_bytes": stack_bytes,
        "times_s": {stage: round(seconds, 4) for stage, seconds in times.items()},
        "memory": memory,
        "notes": list(module.notes),
    }


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "none"


def _bytes_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


def _flash_line(flash: dict | None) -> str:
    if flash is None:
        return "  flash               unknown (no ELF object file)"
    return (f"  flash               {_bytes_text(flash['total'])}: code {flash['code']:,}, "
            f"weights {flash['weights']:,}, other read-only data {flash['rodata']:,}")


def _ram_line(ram: dict) -> str:
    data = "unknown" if ram["data"] is None else f"{ram['data']:,}"
    return (f"  RAM                 {_bytes_text(ram['total'])}: arena {ram['arena']:,}, "
            f"static data {data}")


def _signature_text(values: list[dict]) -> str:
    """``x f32[1x64]; seq: a sequence of 2, seq_0 f32[2x3], seq_1 f32[4x3]; ...``"""
    def argument(a: dict) -> str:
        return f"{a['c_name']} {a['dtype']}[{'x'.join(map(str, a['dims']))}]"
    parts = []
    for v in values:
        args = ", ".join(argument(a) for a in v["arguments"])
        optional = "an optional, " if v["optional"] else ""
        if v["kind"] == "absent":
            parts.append(f"{v['name']}: an optional compiled empty, no argument")
        elif v["kind"] == "sequence":
            parts.append(f"{v['name']}: {optional}a sequence of {len(v['arguments'])}"
                         + (f", {args}" if args else ""))
        else:
            parts.append(f"{v['name']}: {optional}{args}" if optional or
                         v["name"] != v["arguments"][0]["c_name"] else args)
    return "; ".join(parts) or "none"


def format_report(report: dict) -> str:
    t = report["target"]
    fusions = report["fusions"]
    fused_ops = sum(sum(f["ops"].values()) for f in fusions)
    naive, arena = report["naive_activation_bytes"], report["arena_bytes"]
    saving = f" ({100 * (1 - arena / naive):.0f}% less)" if naive else ""
    onnx_bound = report["onnx_order_lower_bound_bytes"]
    onnx_bound = "unknown" if onnx_bound is None else _bytes_text(onnx_bound)
    lines = [
        f"xlac report for {report['name']} ({t['triple']}, cpu {t['cpu']})",
        f"  output files        {', '.join(report['files'])}",
        f"  imported ops        {sum(report['imported_ops'].values())}: "
        f"{_counts_text(report['imported_ops'])}",
        *([f"  constant inputs     {', '.join(report['const_inputs'])} (weights now, not "
           "in the signature)"] if report["const_inputs"] else []),
        f"  inputs              {_signature_text(report['signature']['inputs'])}",
        f"  outputs             {_signature_text(report['signature']['outputs'])}",
        *([f"  bounded batch       {report['bound']['symbol']} from 1 to "
           f"{report['bound']['limit']}: the code computes one sample at a time, so the "
           "arena is one sample's"] if report.get("bound") else []),
        f"  optimized ops       {sum(report['ops'].values())}: {_counts_text(report['ops'])}",
        f"  fusions             {len(fusions)}, holding {fused_ops} ops",
        f"  weight bytes        {_bytes_text(report['weight_bytes'])}",
        f"  arena bytes         {_bytes_text(arena)}{saving}",
        f"  naive activations   {_bytes_text(naive)}",
        f"  lower bound         {_bytes_text(report['lower_bound_bytes'])} for the chosen "
        f"order ({report['scheduler']}{', proven optimal' if report['schedule_optimal'] else ''}"
        "), kernel scratch included",
        f"  without scratch     {_bytes_text(report['lower_bound_buffers_bytes'])} for the "
        f"chosen order, {onnx_bound} for the ONNX node order (buffers alone: ONNX has no "
        "kernels)",
        f"  aliasing            {report['aliased_buffers']} buffers aliased (views, "
        f"concatenation slices), {report['in_place_buffers']} written in place; "
        f"{report['lean_kernels']} kernels without scratch at the peak",
        _flash_line(report["flash_bytes"]),
        _ram_line(report["ram_bytes"]),
        "  stack               " + ("unknown (no machine code)" if report["stack_bytes"] is None
                                    else f"{report['stack_bytes']:,} bytes at most per call "
                                    "(C library calls not counted)"),
        "  compile time        " + ", ".join(f"{stage} {s:.2f} s"
                                             for stage, s in report["times_s"].items())
        + f"; total {sum(report['times_s'].values()):.2f} s",
        *(f"  note                {note}" for note in report["notes"]),
    ]
    return "\n".join(lines) + "\n"

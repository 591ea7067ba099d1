"""``--report-memory``: where the arena goes, read from the buffer assignment.

The assignment's ``blocks`` say which bytes every arena buffer and kernel scratch
holds over which steps of the schedule. From them this module finds the bytes live
at each step (the count the schedulers minimize: the peak is the report's lower
bound), the step at the peak and what is live there with its ONNX nodes, each
kernel's scratch, and why the arena is what it is. ``memory_section`` is the
"memory" section of ``--report-json``; ``format_memory`` prints it with an ASCII
chart of live bytes over the schedule; ``arena_svg`` draws the arena map (offset
against step, one rectangle per buffer) for ``--report-memory=FILE.svg``.
"""
from __future__ import annotations

from dataclasses import replace
from xml.sax.saxutils import escape

from .hlo import Instruction, Opcode
from .optimizer import ArenaBlock, BufferAssignment
from .optimizer.aliasing import buffers_of

# Text: at most this many rows in the chart, and of the lists that can be long.
CHART_ROWS = 32
CHART_WIDTH = 48
LIST_ROWS = 12


def onnx_nodes(instr: Instruction) -> list[dict]:
    """The ONNX nodes an entry instruction computes (a fusion: every node fused in)."""
    found = [instr.metadata] if instr.metadata is not None else []
    if instr.opcode is Opcode.FUSION:       # in the fused computation's order
        found = [i.metadata for i in instr.called[0].instructions
                 if i.metadata is not None] + found
    seen = []
    for m in found:
        if m not in seen:
            seen.append(m)
    return [{"op_type": m.op_type, "name": m.op_name} for m in seen]


def _block_record(b: ArenaBlock, at_peak: bool) -> dict:
    nodes = []
    for o in b.owners:
        nodes += [n for n in onnx_nodes(o) if n not in nodes]
    return {"name": b.owners[0].name, "kind": "scratch" if b.scratch else "buffer",
            "producers": [o.name for o in b.owners[1:]],
            "onnx_nodes": nodes, "offset": b.offset, "size": b.size,
            "start": b.start, "end": b.end,
            "overwrites": b.overwrites.name if b.overwrites is not None else None,
            "live_at_peak": at_peak}


def live_bytes(blocks: list[ArenaBlock], steps: int, scratch: bool = True) -> list[int]:
    """Bytes live at each step: every block live then, an in-place result and the
    buffer it overwrites counted once (they share their bytes at the handover step)."""
    delta = [0] * (steps + 1)
    last_of = {o: b for b in blocks if not b.scratch for o in b.owners}
    for b in blocks:
        if b.scratch and not scratch:
            continue
        delta[b.start] += b.size
        delta[b.end + 1] -= b.size
        old = last_of.get(b.overwrites)
        if old is not None and old.end == b.start and (old.offset, old.size) == (b.offset, b.size):
            delta[b.start] -= b.size
            delta[b.start + 1] += b.size
    out, live = [], 0
    for t in range(steps):
        live += delta[t]
        out.append(live)
    return out


def memory_section(assignment: BufferAssignment) -> dict:
    """The "memory" section of the report. Its steps are the schedule's instructions that
    compute something: parameters and constants, which take no arena, are left out."""
    order, blocks = _computing_steps(assignment.order, assignment.blocks)
    steps = max([len(order)] + [b.end + 1 for b in blocks])
    live = live_bytes(blocks, steps)
    buffers_only = live_bytes(blocks, steps, scratch=False)
    peak_step = max(range(steps), key=lambda t: (live[t], -t)) if blocks else None
    records = [_block_record(b, peak_step is not None and b.start <= peak_step <= b.end)
               for b in blocks]
    section = {
        "arena_bytes": assignment.arena_size,
        "alignment": assignment.alignment,
        "steps": [{"name": i.name, "opcode": i.opcode.text, "onnx_nodes": onnx_nodes(i)}
                  for i in order],
        "live_bytes": live,
        "peak_bytes": max(live, default=0),
        "peak_step": peak_step,
        "buffers_peak_bytes": max(buffers_only, default=0),
        "schedule_optimal": bool(assignment.stats.get("schedule_optimal")),
        "blocks": records,
        "kernel_scratch": sorted(
            ({"name": r["name"], "onnx_nodes": r["onnx_nodes"], "size": r["size"],
              "step": r["start"], "lean": b.owners[0] in assignment.lean_kernels}
             for r, b in zip(records, blocks) if b.scratch),
            key=lambda r: (-r["size"], r["step"])),
    }
    section["why"] = _why(section, order, assignment, blocks)
    return section


def _computing_steps(order: list[Instruction], blocks: list[ArenaBlock]):
    """``order`` without parameters and constants, and ``blocks`` renumbered to it (an
    end past the order, a value copied out at the end, stays past it)."""
    kept = [t for t, i in enumerate(order)
            if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT)]
    step = {t: k for k, t in enumerate(kept)}
    step[len(order)] = len(kept)
    return ([order[t] for t in kept],
            [replace(b, start=step[b.start], end=step[b.end]) for b in blocks])


def _why(section: dict, order: list[Instruction], assignment: BufferAssignment,
         blocks: list[ArenaBlock]) -> list[str]:
    """Sentences that say why the arena is this size."""
    t = section["peak_step"]
    if t is None:
        return ["nothing is kept in the arena: every value is an input, an output, a "
                "constant or a view of one"]
    peak, arena = section["peak_bytes"], section["arena_bytes"]
    out = []
    if t < len(order):
        instr = order[t]
        read = {owner for o in instr.operands for owner in buffers_of(o)}
        at_peak = [b for b in blocks if b.start <= t <= b.end]
        written = [b for b in at_peak if instr in b.owners and b.start == t and not b.scratch]
        scratch = [b for b in at_peak if b.scratch]
        inputs = [b for b in at_peak if b not in written and not b.scratch
                  and read & set(b.owners)]
        others = [b for b in at_peak if b not in written + scratch + inputs]
        step = f"step {t}, %{instr.name}{_nodes_text(onnx_nodes(instr))}"
        read_bytes, scratch_bytes = _distinct(inputs), sum(b.size for b in scratch)
        parts = [f"reads {_n(read_bytes)} bytes of the arena" if read_bytes else
                 "reads nothing from the arena (inputs and weights only)",
                 f"writes {_n(_distinct(written))} bytes"]
        if scratch:
            parts.append(f"uses {_n(scratch_bytes)} bytes of kernel scratch "
                         f"({100 * scratch_bytes / peak:.0f}% of the peak)")
        out.append(f"the peak, {_n(peak)} bytes, is at {step}: it {', '.join(parts[:-1])} and "
                   f"{parts[-1]}")
        if not others:
            out.append("nothing else is live then, so no order of the ops can lower this "
                       "peak: it is one layer's input plus output"
                       + (" plus its kernel's scratch" if scratch else ""))
        else:
            biggest = max(others, key=lambda b: b.size)
            out.append(f"also live then: {len(others)} buffer(s) made earlier and read later, "
                       f"{_n(_distinct(others))} bytes (the largest %{biggest.owners[0].name}"
                       f"{_nodes_text(_owners_nodes(biggest))}, {_n(biggest.size)} bytes)")
            out.append("the order is proven optimal: no order lowers the peak"
                       if section["schedule_optimal"] else
                       "another order might lower the peak (the exact search of -O2 and up "
                       "did not prove this one optimal)")
    slack = arena - peak
    if slack < assignment.alignment:
        out.append(f"the arena is the peak rounded up to the {assignment.alignment}-byte "
                   "alignment: the packing wastes nothing")
    else:
        out.append(f"the arena is {_n(slack)} bytes above the peak: buffers of these "
                   "lifetimes and sizes could not be packed tighter (fragmentation)")
    return out


def _distinct(blocks: list[ArenaBlock]) -> int:
    return sum(size for _, size in {(b.offset, b.size) for b in blocks})


def _owners_nodes(b: ArenaBlock) -> list[dict]:
    nodes = []
    for o in b.owners:
        nodes += [n for n in onnx_nodes(o) if n not in nodes]
    return nodes


def _nodes_text(nodes: list[dict], limit: int = 3) -> str:
    if not nodes:
        return ""
    shown = ", ".join(f"{n['op_type']} '{n['name']}'" for n in nodes[:limit])
    more = f" +{len(nodes) - limit} more" if len(nodes) > limit else ""
    return f" (ONNX {shown}{more})"


def _n(n: int) -> str:
    return f"{n:,}"


# -- text -------------------------------------------------------------------------------------

def format_memory(section: dict) -> str:
    lines = [f"memory: arena {_n(section['arena_bytes'])} bytes, aligned to "
             f"{section['alignment']}; {len(section['steps'])} steps"]
    lines += [f"  {s}" for s in section["why"]]
    lines += _streaming(section.get("streaming"))
    t = section["peak_step"]
    if t is not None:
        live = [r for r in section["blocks"] if r["live_at_peak"]]
        lines.append(f"  live at the peak (step {t}):")
        lines += _table(["offset", "size", "steps", "buffer", "ONNX nodes"],
                        [[_n(r["offset"]), _n(r["size"]), f"{r['start']}-{r['end']}",
                          _block_name(r), _nodes_list(r["onnx_nodes"])]
                         for r in sorted(live, key=lambda r: r["offset"])],
                        right=2)
    scratch = section["kernel_scratch"]
    if scratch:
        lines.append(f"  kernel scratch ({len(scratch)} kernels; each live during its own "
                     "step only):")
        rows = [[_n(r["size"]), str(r["step"]), r["name"] + (" (lean)" if r["lean"] else ""),
                 _nodes_list(r["onnx_nodes"])] for r in scratch[:LIST_ROWS]]
        lines += _table(["size", "step", "kernel", "ONNX nodes"], rows, right=2)
        if len(scratch) > LIST_ROWS:
            lines.append(f"    ... {len(scratch) - LIST_ROWS} more in --report-json")
    lines += _chart(section)
    return "\n".join(lines) + "\n"


def _streaming(streaming: dict | None) -> list[str]:
    """What --memory-budget tried: the arena of each plan, and the chains streamed."""
    if streaming is None:
        return []
    tried = ", ".join(f"{_n(t['arena_bytes'])} bytes "
                      + (f"with {t['band_rows']} row(s) per band" if t["band_rows"]
                         else "unstreamed") for t in streaming["tried"])
    lines = [f"  memory budget {_n(streaming['budget'])} bytes; plans tried, fastest first: "
             f"{tried}"]
    if streaming["chains"]:
        lines.append(f"  streamed {streaming['band_rows']} row(s) per band (no arithmetic "
                     "recomputed: the rows a window reads again are kept):")
        lines += _table(["members", "biggest map", "last instruction", "ONNX node"],
                        [[str(c["members"]), _n(c["biggest_map_bytes"]), "%" + c["sink"],
                          c["onnx_node"]] for c in streaming["chains"]], right=2)
    return lines


def _block_name(r: dict) -> str:
    name = f"%{r['name']}"
    if r["kind"] == "scratch":
        return name + " scratch"
    if r["producers"]:
        name += f" (+{len(r['producers'])} written into its slices)"
    if r["overwrites"]:
        name += f" in place of %{r['overwrites']}"
    return name


def _nodes_list(nodes: list[dict], limit: int = 3) -> str:
    shown = ", ".join(f"{n['op_type']} {n['name']}" for n in nodes[:limit])
    return shown + (f" +{len(nodes) - limit}" if len(nodes) > limit else "")


def _table(header: list[str], rows: list[list[str]], right: int) -> list[str]:
    """Columns padded to width; the first ``right`` columns right-aligned."""
    widths = [max(len(r[k]) for r in [header] + rows) for k in range(len(header))]

    def line(r):
        cells = [v.rjust(w) if k < right else v.ljust(w)
                 for k, (v, w) in enumerate(zip(r, widths))]
        return ("    " + "  ".join(cells)).rstrip()
    return [line(header)] + [line(r) for r in rows]


def _chart(section: dict) -> list[str]:
    """Live bytes over the schedule as bars, steps grouped to at most CHART_ROWS rows
    (a row shows its largest value)."""
    live = section["live_bytes"]
    if not live or max(live) == 0:
        return []
    per_row = -(-len(live) // CHART_ROWS)
    top = max(live)
    peak = section["peak_step"]
    out = [f"  live bytes over the schedule ({'#' * 1} = {_n(-(-top // CHART_WIDTH))} bytes; "
           f"* the peak):"]
    for first in range(0, len(live), per_row):
        group = live[first:first + per_row]
        steps = f"{first}" if len(group) == 1 else f"{first}-{first + len(group) - 1}"
        mark = "*" if first <= peak < first + len(group) else " "
        bar = "#" * max(1, round(CHART_WIDTH * max(group) / top)) if max(group) else ""
        out.append(f"    {steps:>9} {mark} {_n(max(group)):>13}  {bar}")
    return out


# -- SVG --------------------------------------------------------------------------------------

_PALETTE = ["#4e79a7", "#59a14f", "#9c755f", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
            "#bab0ac", "#86bcb6", "#8cd17d"]


def arena_svg(section: dict, name: str) -> str:
    """The arena map: arena offset (up) against schedule step (right), one rectangle per
    buffer while it is live, kernel scratch in orange, the peak step marked; hovering a
    rectangle shows its name, ONNX nodes, bytes and steps."""
    steps = max(1, len(section["live_bytes"]))
    arena = max(1, section["arena_bytes"])
    left, right, top, bottom = 90, 20, 50, 50
    width, height = 960, 520
    pw, ph = width - left - right, height - top - bottom

    def x(step: float) -> float:
        return left + pw * step / steps

    def y(offset: float) -> float:
        return top + ph * (1 - offset / arena)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15">{escape(name)}: arena '
           f'{_n(section["arena_bytes"])} bytes, peak {_n(section["peak_bytes"])} bytes live '
           f'at step {section["peak_step"]}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#f4f4f4" '
           'stroke="#999"/>']
    for k, r in enumerate(section["blocks"]):
        if r["size"] == 0:
            continue
        color = "#f28e2b" if r["kind"] == "scratch" else _PALETTE[k % len(_PALETTE)]
        x0, x1 = x(r["start"]), x(r["end"] + 1)
        y0, y1 = y(r["offset"] + r["size"]), y(r["offset"])
        stroke = ' stroke="#222" stroke-width="1.2"' if r["live_at_peak"] else \
            ' stroke="white" stroke-width="0.5"'
        tip = (f"{_block_name(r)}\n{_nodes_list(r['onnx_nodes'], limit=8) or 'no ONNX node'}\n"
               f"offset {_n(r['offset'])}, {_n(r['size'])} bytes, steps {r['start']}-{r['end']}")
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{max(x1 - x0, 0.5):.1f}" '
                   f'height="{max(y1 - y0, 0.5):.1f}" fill="{color}"{stroke}>'
                   f'<title>{escape(tip)}</title></rect>')
        if x1 - x0 > 7 * len(r["name"]) + 6 and y1 - y0 > 14:     # the name fits
            out.append(f'<text x="{x0 + 3:.1f}" y="{y1 - 4:.1f}" fill="white" '
                       f'font-size="11">{escape(r["name"])}</text>')
    if section["peak_step"] is not None:
        px = x(section["peak_step"] + 0.5)
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{top + ph}" '
                   'stroke="#d62728" stroke-dasharray="5,3"/>')
        out.append(f'<text x="{px + 4:.1f}" y="{top - 6}" fill="#d62728">peak</text>')
    for k in range(5):                      # offset ticks
        off = arena * k / 4
        out.append(f'<text x="{left - 6}" y="{y(off) + 4:.1f}" text-anchor="end">'
                   f'{_n(int(off))}</text>')
    for k in range(6):                      # step ticks
        step = round((steps - 1) * k / 5)
        out.append(f'<text x="{x(step + 0.5):.1f}" y="{top + ph + 16}" '
                   f'text-anchor="middle">{step}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 12}" text-anchor="middle">schedule '
               'step (outlined: live at the peak; orange: kernel scratch)</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">arena offset (bytes)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"

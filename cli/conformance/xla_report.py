"""``python -m xlac.conformance.xla_report --report docs/xla-support.md``: the JAX
programs of jax_cases.py run through xlac from both of JAX's printed forms against
jaxlib, and the table of StableHLO's ops with how xlac compiles each and which cases
use it. Needs jax (a test extra); a few minutes on two cores.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

# The ops of the StableHLO specification, by the spec's sections.
SPEC_OPS = """
abs add after_all all_gather all_reduce all_to_all and atan2 batch_norm_grad
batch_norm_inference batch_norm_training bitcast_convert broadcast_in_dim case cbrt ceil
cholesky clamp collective_broadcast collective_permute compare complex composite
concatenate constant convert convolution cosine count_leading_zeros custom_call divide
dot_general dynamic_broadcast_in_dim dynamic_conv dynamic_gather dynamic_iota dynamic_pad
dynamic_reshape dynamic_slice dynamic_update_slice exponential exponential_minus_one fft
floor gather get_dimension_size get_tuple_element if imag infeed iota is_finite log
log_plus_one logistic map maximum minimum multiply negate not optimization_barrier or
outfeed pad partition_id popcnt power real real_dynamic_slice recv reduce reduce_precision
reduce_scatter reduce_window remainder replica_id reshape reverse rng rng_bit_generator
round_nearest_afz round_nearest_even rsqrt scatter select select_and_scatter send
shift_left shift_right_arithmetic shift_right_logical sign sine slice sort sqrt subtract
tan tanh transpose triangular_solve tuple uniform_dequantize uniform_quantize while xor
""".split()
# CHLO's ops that JAX leaves in StableHLO.
CHLO_OPS = """acos acosh asin asinh atan atanh cosh sinh tan erf erfc erf_inv lgamma digamma
is_inf is_neg_inf is_pos_inf top_k square conj next_after mulhi polygamma zeta bessel_i1e
ragged_dot""".split()
_WHY_NOT = {
    "dynamic": "dynamic shapes: xlac's shapes are static",
    "collective": "a collective: xlac compiles single-device programs",
    "io": "host I/O and tokens: an object has no host to talk to",
    "quant": "quantized element types (!quant.uniform)",
    "rng": "stateful random numbers (lax.rng_uniform)",
    "tuple": "tuple types (JAX writes none)",
    "ragged": "not expanded yet (grouped matrix products of mixtures of experts)",
}
_REFUSED_KIND = {
    **{op: "dynamic" for op in ("dynamic_broadcast_in_dim", "dynamic_conv", "dynamic_gather",
                                "dynamic_iota", "dynamic_pad", "dynamic_reshape",
                                "get_dimension_size", "real_dynamic_slice")},
    **{op: "collective" for op in ("all_gather", "all_reduce", "all_to_all",
                                   "collective_broadcast", "collective_permute", "partition_id",
                                   "reduce_scatter", "replica_id")},
    **{op: "io" for op in ("after_all", "infeed", "outfeed", "recv", "send")},
    **{op: "quant" for op in ("uniform_dequantize", "uniform_quantize")},
    "rng": "rng", "tuple": "tuple", "get_tuple_element": "tuple",
    "ragged_dot": "ragged",
}
# Ops no program of jax_cases.py writes, and the test that checks each.
HAND_WRITTEN = {
    **{op: "tests/test_stablehlo_import.py" for op in (
        "batch_norm_grad", "batch_norm_inference", "batch_norm_training", "map", "if",
        "composite", "is_inf", "is_pos_inf", "is_neg_inf", "tan", "logistic",
        "round_nearest_afz", "square", "conj", "next_after", "mulhi")},
    "custom_call": "tests/test_custom_calls.py",
}
_EXPANDED = {"cholesky", "triangular_solve", "select_and_scatter", "reduce_precision", "map",
             "rng_bit_generator", "batch_norm_grad", "batch_norm_inference",
             "batch_norm_training", "popcnt", "count_leading_zeros"}
_LOWERED = {"case": "conditional", "if": "conditional", "while": "while", "composite":
            "its decomposition, inlined", "optimization_barrier": "its operands",
            "custom_call": "a call of the linking program's C function; JAX's LAPACK calls "
            "potrf, trsm, getrf expanded", "dot_general": "dot", "broadcast_in_dim": "broadcast",
            "bitcast_convert": "bitcast-convert (between widths: shifts and ors)",
            **{op: "pairs of real values (importers/xla/complex.py)"
               for op in ("complex", "real", "imag")},
            "fft": "mixed-radix Cooley-Tukey over the pairs of real values "
                   "(importers/xla/complex.py)"}


def _ops_in(text: str) -> set[str]:
    return {m.group(0) for m in re.finditer(r"\b(?:stablehlo|chlo)\.[a-z_0-9]+", text)}


def run_cases(verbose: bool = False) -> dict:
    import jax

    import xlac

    from .jax_cases import CASES, FORMS, PROGRAMS, assert_matches, jax_outputs, lower
    results, uses = {}, {}
    with tempfile.TemporaryDirectory(prefix="xlac-xla-report-") as tmp:
        for kind, table in (("case", CASES), ("program", PROGRAMS)):
            for name, case in table.items():
                lowered = lower(case)
                uses[name] = _ops_in(lowered.as_text())
                want = jax_outputs(case.fn, case.args)
                for form, printed in FORMS.items():
                    if form not in case.forms:
                        continue
                    path = Path(tmp) / f"{name}.{form}.txt"
                    path.write_text(printed(lowered))
                    try:
                        m = xlac.load(xlac.compile(path, Path(tmp) / f"{name}.o").output)
                        assert_matches(m(*case.args), want, case)
                        status = "pass"
                    except AssertionError:
                        status = "mismatch"
                    except xlac.XlacError as e:
                        status = f"error: {e}"
                    results[kind, name, form] = status
                    if verbose:
                        print(f"{status[:60]:60} {kind} {name} {form}", file=sys.stderr)
    return {"results": results, "uses": uses, "jax": jax.__version__}


def how(prefix: str, op: str) -> str:
    from ..importers.stablehlo.importer import ALL_RULES
    if op in _REFUSED_KIND:
        return f"refused: {_WHY_NOT[_REFUSED_KIND[op]]}"
    if f"{prefix}.{op}" not in ALL_RULES:
        return "refused"
    if op in _EXPANDED:
        return "expanded (importers/xla/)" if op not in (
            "popcnt", "count_leading_zeros") else "expanded into integer bit arithmetic"
    if op in _LOWERED:
        return _LOWERED[op]
    if prefix == "chlo":
        return ("expanded (importers/stablehlo/chlo.py)"
                if op in ("erfc", "erf_inv", "lgamma", "digamma", "is_inf", "is_neg_inf",
                          "is_pos_inf", "square", "conj", "next_after", "mulhi",
                          "bessel_i1e", "zeta", "polygamma")
                else "opcode " + op.replace("_", "-"))
    return "opcode " + op.replace("_", "-")


def write_report(path: Path, data: dict) -> None:
    results, uses = data["results"], data["uses"]
    count = Counter()
    for (kind, _, form), status in results.items():
        count[kind, form, "all"] += 1
        count[kind, form, status.split(":")[0]] += 1
    lines = ["# XLA support: HLO text and StableHLO from JAX", "",
             f"Generated by `python -m xlac.conformance.xla_report --report {path}` with jax "
             f"{data['jax']}. Each program of `cli/conformance/jax_cases.py` is lowered by "
             "`jax.jit(f).lower(*args)`, printed as HLO text (`as_text(dialect='hlo')`) and "
             "as StableHLO (`as_text()`), compiled by xlac, run through `xlac.load`, and "
             "compared with jaxlib's own result on this machine: integer and boolean outputs "
             "bit for bit, floats within the case's stated tolerance.", "",
             "## Pass counts", "",
             "| programs | form | cases | pass | mismatch | error |", "|---|---|--:|--:|--:|--:|"]
    for kind in ("case", "program"):
        for form in ("hlo", "stablehlo"):
            n = count[kind, form, "all"]
            lines.append(f"| {'one per feature' if kind == 'case' else 'real programs'} | "
                         f"{form} | {n} | {count[kind, form, 'pass']} | "
                         f"{count[kind, form, 'mismatch']} | {count[kind, form, 'error']} |")
    failing = [(k, s) for k, s in results.items() if s != "pass"]
    if failing:
        lines += ["", "Not passing:", ""]
        lines += [f"- {kind} `{name}` from {form}: {status}" for (kind, name, form), status
                  in failing]
    lines += ["", "## Ops", "",
              "Every op of the StableHLO specification and the CHLO ops JAX writes: how xlac "
              "compiles it (the HLO text form reads the same op by its HLO name), and the "
              "programs above that use it, passing from both forms / all.", "",
              "| op | xlac | programs |", "|---|---|---|"]
    for prefix, op in [("stablehlo", o) for o in SPEC_OPS] + [("chlo", o) for o in CHLO_OPS]:
        names = sorted(n for n, ops in uses.items() if f"{prefix}.{op}" in ops)
        passing = [n for n in names if all(results.get((k, n, f)) == "pass"
                                           for k in ("case", "program") for f in ("hlo",
                                                                                  "stablehlo")
                                           if (k, n, f) in results)]
        shown = ", ".join(f"`{n}`" for n in names[:6]) + (" ..." if len(names) > 6 else "")
        tested = HAND_WRITTEN.get(op) if not names else None
        lines.append(f"| `{prefix}.{op}` | {how(prefix, op)} | "
                     + (f"{len(passing)}/{len(names)}{': ' + shown if names else ''} |"
                        if tested is None else f"hand-written: `{tested}` |"))
    lines += ["", "Ops no program above uses are checked by hand-written StableHLO and HLO "
              "text in `tests/test_stablehlo_import.py`, `tests/test_hlo_import_rules.py` and "
              "`tests/test_custom_calls.py` (map, batch norms, custom calls, tuples).", ""]
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xlac.conformance.xla_report",
                                description=__doc__.splitlines()[0])
    p.add_argument("--report", metavar="FILE", help="write the report (Markdown)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    data = run_cases(args.verbose)
    results = data["results"]
    passed = sum(s == "pass" for s in results.values())
    print(f"{passed} of {len(results)} program x form runs pass")
    if args.report:
        write_report(Path(args.report), data)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The table of ONNX op handlers, keyed by (domain, op type) and opset version.

A handler lowers one ONNX node to HLO. It is registered for the opset version
where its semantics begin:

    @register("Softmax", since=1)      # coerce to 2-D at `axis`
    def softmax_v1(ctx, node): ...

    @register("Softmax", since=13)     # one axis
    def softmax_v13(ctx, node): ...

For a model importing opset V of the op's domain, the handler chosen is the
one with the greatest ``since`` <= V (ONNX's own versioning rule). A handler
takes ``(ctx, node)`` (see context.py) and returns one HLO instruction per
ONNX output it supports, in output order.

``ignore`` names attributes that do not change inference results (training
hyper-parameters such as Dropout's ``seed``). Every other attribute must be
read by the handler, or the importer rejects the node: an attribute we do not
understand must never be dropped silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

DEFAULT_DOMAIN = ""
MS = "com.microsoft"     # onnxruntime's contrib ops


@dataclass(frozen=True)
class OpRule:
    domain: str
    op_type: str
    since: int
    handler: Callable
    ignore: frozenset[str]


_TABLE: dict[tuple[str, str], list[OpRule]] = {}


def canonical_domain(domain: str) -> str:
    """``ai.onnx`` and ``""`` are one domain, DEFAULT_DOMAIN."""
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


def register(op_type: str, since: int, domain: str = DEFAULT_DOMAIN, ignore=()):
    """Decorator: ``fn`` lowers ``op_type`` from opset ``since`` on (stackable)."""
    def deco(fn):
        rules = _TABLE.setdefault((canonical_domain(domain), op_type), [])
        if any(r.since == since for r in rules):
            raise ValueError(f"{op_type} is registered twice for opset {since}")
        rules.append(OpRule(canonical_domain(domain), op_type, since, fn, frozenset(ignore)))
        rules.sort(key=lambda r: r.since)
        return fn
    return deco


def lookup(domain: str, op_type: str, opset: int) -> OpRule | None:
    """The rule for ``op_type`` at ``opset`` of its domain, or None if unsupported."""
    best = None
    for rule in _TABLE.get((canonical_domain(domain), op_type), ()):
        if rule.since <= opset:
            best = rule
    return best


def supported_ops() -> dict[tuple[str, str], list[int]]:
    """(domain, op type) -> the opset versions that have a handler."""
    return {k: [r.since for r in v] for k, v in sorted(_TABLE.items())}

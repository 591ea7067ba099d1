"""Imports point one way (docs/internals.md): cli -> importers, backends; backends ->
optimizer, emitter; importers, optimizer, emitter -> hlo. The emitter reads the buffer
assignment (with the schedule in it) and nothing else of the optimizer: policy comes
from the backend.

Read from the source (ast), not by importing: a module imported lazily inside a
function counts as much as one imported at the top.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The layers, by installed package; anything else under xlac is cli (the driver's layer).
LAYERS = ("hlo", "importers", "optimizer", "emitter", "backends", "runtime_c", "conformance")
# What each layer may import besides itself; cli may import any layer.
ALLOWED = {
    "hlo": set(),
    "importers": {"hlo"},
    "optimizer": {"hlo"},
    "emitter": {"hlo", "optimizer", "runtime_c"},
    "backends": {"hlo", "optimizer", "emitter"},
    "runtime_c": set(),
    "cli": {"hlo", "importers", "optimizer", "emitter", "backends", "runtime_c"},
    "conformance": {"cli", "hlo", "importers"},
}


def _module_name(path: Path) -> str:
    """The installed name of a source file: ``cli/`` is ``xlac``, ``hlo/`` ``xlac.hlo``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "cli":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["xlac", *parts])


def _layer(module: str) -> str:
    """``xlac.hlo.ir`` -> ``hlo``, ``xlac.conformance.cases`` -> ``conformance``,
    ``xlac.driver`` -> ``cli``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "cli"


def _imports(path: Path) -> set[str]:
    """The xlac modules ``path`` imports, ``from m import n`` as ``m.n`` (n may be a
    module or a name in m: either way its layer is m's)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else node.module
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m == "xlac" or m.startswith("xlac.")}


def _sources() -> list[Path]:
    folders = ["cli", *(layer for layer in LAYERS if layer != "conformance")]
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_imports_point_one_way():
    wrong = []
    for path in _sources():
        layer = _layer(_module_name(path))
        wrong += [f"{path.relative_to(ROOT)} ({layer}) imports {m}" for m in sorted(_imports(path))
                  if _layer(m) != layer and _layer(m) not in ALLOWED[layer]]
    assert not wrong, "\n".join(wrong)


def test_the_emitter_reads_only_the_buffer_assignment_of_the_optimizer():
    read = {m for path in (ROOT / "emitter").rglob("*.py") for m in _imports(path)
            if _layer(m) == "optimizer"}
    assert read and all(m.startswith("xlac.optimizer.buffer_assignment.") for m in read), read

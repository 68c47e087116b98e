"""The runtime layer: where a published `auto` is decided again when the layers are built.

Data in ``rules/layers.toml``. The tool does not build layers; for a setting whose published
value is `auto` and whose model is quantized by a listed method, the layer value is unknown,
with the deciding methods (file:line) and the explicit raises they contain as candidates.
Static: reads the release's IR, runs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import ParseFailure, SourceCache
from sglang_audit.result import Candidate, ModelSummary, UnknownValue
from sglang_audit.shipped import load_toml


def layer_values(root: Path, cache: SourceCache, values: dict[str, Any], model: ModelSummary) -> dict[str, UnknownValue]:
    """``values``: each setting's value as published (runtime, else config)."""
    out: dict[str, UnknownValue] = {}
    for spec in load_toml("layers.toml")["layer"]:
        name = spec["setting"]
        if name in out or values.get(name) not in spec["when_value"]:
            continue
        quant = model.draft_quantization if spec["model"] == "draft" else model.quantization
        if spec["model"] == "draft" and model.draft_architecture is None:
            continue
        if quant not in spec["quantization"]:
            continue
        found = _locate(root, cache, spec)
        if found is not None:
            out[name] = found
    return out


def _locate(root: Path, cache: SourceCache, spec: dict[str, Any]) -> UnknownValue | None:
    rel = spec["module"].replace(".", "/") + ".py"
    path = root / rel
    if not path.is_file():
        return None
    try:
        tree = cache.load(path)
    except ParseFailure:
        return None
    cls = next((n for n in tree.body if isinstance(n, ir.ClassDef) and n.name == spec["class"]), None)
    if cls is None:
        return None
    methods = [n for n in cls.body if isinstance(n, ir.FunctionDef) and n.name in spec["methods"]]
    if not methods:
        return None
    where = ", ".join(f"{spec['class']}.{m.name} ({rel}:{m.line})" for m in methods)
    reason = (f"`{spec['when_value'][0]}` is decided again when the MoE layers are built, by {where}; "
              "sglang-audit does not build layers (checkpoint tensors, excluded layers, FlashInfer defaults)")
    candidates = [Candidate(_one_line(r.text), (f"{rel}:{r.line} in {m.name}",))
                  for m in methods for r in _raises(m.body)]
    return UnknownValue(reason, tuple(candidates))


def _raises(stmts: list[ir.Node]) -> list[ir.Node]:
    """Explicit ``raise X(...)`` statements in a body (nested blocks included, nested
    functions not; a bare re-raise is not a verdict)."""
    found: list[ir.Node] = []
    for stmt in stmts:
        if isinstance(stmt, ir.Raise):
            if stmt.exc is not None:
                found.append(stmt)
        elif isinstance(stmt, (ir.FunctionDef, ir.ClassDef)):
            continue
        else:
            for block in _blocks(stmt):
                found.extend(_raises(block))
    return found


def _blocks(stmt: ir.Node) -> list[list[ir.Node]]:
    blocks = [getattr(stmt, s) for s in ("body", "orelse", "finalbody") if isinstance(getattr(stmt, s, None), list)]
    blocks.extend(h.body for h in getattr(stmt, "handlers", None) or [])
    return blocks


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 200 else flat[:197] + "..."

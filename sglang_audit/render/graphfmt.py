"""The decision graph as files: node-link JSON, GraphML and Graphviz DOT, each in a stable
order (nodes and edges sorted) so the same release gives the same bytes."""

from __future__ import annotations

import json
from typing import Any

import networkx as nx


def _sorted_copy(g: nx.MultiDiGraph) -> nx.MultiDiGraph:
    h: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    h.graph.update(g.graph)
    for n in sorted(g.nodes):
        h.add_node(n, **dict(sorted(g.nodes[n].items())))
    for u, v, k, d in sorted(g.edges(keys=True, data=True), key=lambda t: (t[0], t[1], str(t[2]))):
        h.add_edge(u, v, key=k, **dict(sorted(d.items())))
    return h


def to_json(g: nx.MultiDiGraph) -> dict[str, Any]:
    """node-link JSON with nodes and links in a stable order."""
    return nx.node_link_data(_sorted_copy(g), edges="links")


def _graphml_value(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)):
        return v
    return json.dumps(v)


def to_graphml(g: nx.MultiDiGraph) -> str:
    """GraphML; attributes are strings/numbers (a ``None`` value is left out, lists are JSON)."""
    h: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    src = _sorted_copy(g)
    h.graph.update({k: _graphml_value(v) for k, v in src.graph.items()})
    for n, d in src.nodes(data=True):
        h.add_node(n, **{k: _graphml_value(v) for k, v in d.items() if v is not None})
    for u, v, k, d in src.edges(keys=True, data=True):
        h.add_edge(u, v, key=k, **{a: _graphml_value(x) for a, x in d.items() if x is not None})
    return "\n".join(nx.generate_graphml(h)) + "\n"


_SHAPES = {"field": "box", "predicate": "hexagon", "decision": "diamond", "rejection": "octagon", "write": "note"}


_STYLES = {"reads": "dashed", "writes": "bold", "guarded_by": "dotted", "rejects": "solid", "feeds": "dashed", "nested_in": "dotted"}


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_label(d: dict[str, Any]) -> str:
    kind = d["kind"]
    if kind == "field":
        return d["name"]
    if kind == "predicate":
        return f"{d['name']}()"
    where = f"{d['file'].rsplit('/', 1)[-1]}:{d['line']}"
    if kind == "decision":
        return f"{where}\n{d['construct']} {_clip(d['guard'])}"
    if kind == "rejection":
        return f"{where}\n{d['exception']}: {_clip(d['message'])}"
    return f"{where}\n{_clip(d['code'] or d['value_text'])}"


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def to_dot(g: nx.MultiDiGraph) -> str:
    """Graphviz DOT text (our own small emitter: no pygraphviz needed)."""
    src = _sorted_copy(g)
    lines = ["digraph sglang_decisions {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for n, d in src.nodes(data=True):
        lines.append(f"  {_dot_quote(n)} [label={_dot_quote(_dot_label(d))}, shape={_SHAPES.get(d['kind'], 'ellipse')}];")
    for u, v, _k, d in src.edges(keys=True, data=True):
        label = d["kind"]
        if d["kind"] == "writes" and d.get("constant"):
            label += f" {d.get('value')!r}"
        elif d["kind"] in ("guarded_by", "rejects", "nested_in") and d.get("branch"):
            label += f" ({d['branch']})"
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)} [label={_dot_quote(label)}, style={_STYLES.get(d['kind'], 'solid')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"

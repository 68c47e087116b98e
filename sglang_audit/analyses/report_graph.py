"""The graph of the decisions that matter for one deployment, laid out for inline SVG.

Built from ``explain`` results only (no parsing, no evaluation): for each explained
setting, the branches that fired, that the hardware blocks, or that the hardware would
allow, with the guards that decide them and the hardware predicates those guards call.
Four layers, left to right: predicates → decision sites → writes (branches) → settings.

The layout is our own (no Graphviz, no JS): layers by node kind, order within a layer by
a few barycenter sweeps (fewer crossings), positions in pixels.  The template draws it;
every text is escaped there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from sglang_audit.analyses.explain import (
    BRANCH_BLOCKED,
    BRANCH_FIRED,
    BRANCH_NOT_TAKEN,
    BRANCH_REACHED,
    Branch,
    Condition,
    Explanation,
    final_value,
)
from sglang_audit.result import UnknownValue

LAYERS = ("predicate", "decision", "write", "field")
LAYER_TITLES = ("hardware predicates", "decision sites (guards)", "writes", "settings")
MAX_LABEL = 46  # characters shown on a node line; the full text is its <title>
MAX_CONDITIONS = 3  # guards drawn per branch (the ones that say most)
CHAR_W = 6.35  # px per character of the 10.5px monospace label font
LINE_H = 14
NODE_H = 24  # one line of text
V_GAP = 10
H_GAP = 60  # room for the edges between two layers
PAD_X = 10
TOP = 28  # room for the layer titles


@dataclass
class GNode:
    id: str
    kind: str  # predicate | decision | write | field
    lines: tuple[str, ...]  # the text shown, one entry per line
    title: str  # full text (tooltip), also the accessible name
    state: str  # true | false | open | fired | reached | blocked | not_taken | default | ...
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = NODE_H


@dataclass
class GEdge:
    source: str
    target: str
    state: str  # holds | blocks | open | fired | reads | ...
    label: str = ""
    path: str = ""


@dataclass
class Layout:
    nodes: list[GNode] = field(default_factory=list)
    edges: list[GEdge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    columns: list[tuple[str, float]] = field(default_factory=list)  # (title, x centre)
    omitted: int = 0  # branches left out (not taken, no hardware guard)

    @property
    def empty(self) -> bool:
        return not self.nodes


def _base(file: str) -> str:
    # the file name is enough on a node; the full path is in its title
    return file.rsplit("/", 1)[-1]


def _clip(text: str, n: int = MAX_LABEL) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _show(value: Any) -> str:
    if isinstance(value, UnknownValue):
        return "unknown"
    return repr(value) if isinstance(value, str) else str(value)


def _conditions_drawn(b: Branch) -> list[Condition]:
    """The guards that explain a branch best (as ``explain``'s text picks them)."""
    if b.status == BRANCH_BLOCKED:
        picked = list(b.blocked_by)
    else:
        picked = [c for c in b.conditions if c.predicates or (c.mentions_model and c.needed)]
        if not picked and b.conditions:
            picked = [b.conditions[-1]]  # the innermost guard says most
    return picked[-MAX_CONDITIONS:]


def _matters(b: Branch) -> bool:
    """Fired, reached, blocked by the hardware, or allowed by it (a predicate guard that
    holds) or naming this model: a not-taken branch behind only non-hardware guards is
    noise for this deployment."""
    if b.status in (BRANCH_FIRED, BRANCH_REACHED, BRANCH_BLOCKED) or b.applies_to_model:
        return True
    return b.status == BRANCH_NOT_TAKEN and any(c.predicates and c.holds for c in b.conditions)


def _edge_state(c: Condition, b: Branch) -> str:
    if c.holds is False:
        return "blocks"
    if c.holds is True or b.status in (BRANCH_FIRED, BRANCH_REACHED):
        return "holds"
    return "open"


def build(explanations: Iterable[Explanation]) -> nx.DiGraph:
    """A DiGraph with ``GNode`` data (``node``) and ``GEdge`` data (``edge``)."""
    g: nx.DiGraph = nx.DiGraph()
    g.graph["omitted"] = 0

    def node(n: GNode) -> None:
        if n.id not in g:
            g.add_node(n.id, node=n)

    def edge(e: GEdge) -> None:
        if not g.has_edge(e.source, e.target):
            g.add_edge(e.source, e.target, edge=e)

    for exp in explanations:
        s = exp.setting
        if not s.present:
            continue
        fid = f"field:{exp.field}"
        value = final_value(s)
        state = "unknown" if isinstance(value, UnknownValue) or s.status == "unknown" else s.status
        node(GNode(fid, "field", (_clip(exp.field), _clip(f"= {_show(value)}")), f"{exp.field} = {_show(value)} ({s.status})", state))
        fired = False
        for b in exp.branches:
            if not _matters(b):
                g.graph["omitted"] += 1
                continue
            fired |= b.status == BRANCH_FIRED
            value_text = repr(b.value) if b.constant else b.value_text
            wid = f"write:{b.file}:{b.line}:{value_text}:{exp.field}"
            text = f"{_base(b.file)}:{b.line} → {value_text}"
            title = f"{b.file}:{b.line} → {value_text} ({b.layer}, {b.status.replace('_', ' ')})\n{b.code}"
            node(GNode(wid, "write", (_clip(text),), title, b.status))
            edge(GEdge(wid, fid, b.status))
            for c in _conditions_drawn(b):
                did = f"decision:{c.file}:{c.line}"
                text = f"{_base(c.file)}:{c.line} {c.construct} {c.guard}"
                dstate = "open" if c.value is None else ("true" if c.value else "false")
                here = dstate if dstate != "open" else "depends on more than the hardware"
                node(GNode(did, "decision", (_clip(text),), f"{c.file}:{c.line} {c.construct} {c.guard}\n(on this device: {here})", dstate))
                need = "needs true" if c.needed else "needs false"
                edge(GEdge(did, wid, _edge_state(c, b), need))
                for name, pv in c.predicates:
                    pid = f"predicate:{name}"
                    pstate = "true" if pv is True else "false" if pv is False else "open"
                    node(GNode(pid, "predicate", (_clip(f"{name}() = {pv}"),), f"{name}() = {pv} on this device", pstate))
                    edge(GEdge(pid, did, "reads"))
        d = exp.deciding
        if not fired and d is not None:
            # no drawn branch fired: the step the chain says decided (the declared default,
            # the user's flag, or a write the graph does not tie to a branch) with its guard
            what = {"default": "declared default ", "flag": "your flag "}.get(d.kind, "")
            wid = f"write:{d.file}:{d.line}:{d.kind}:{exp.field}"
            text = f"{what}{_base(d.file)}:{d.line} → {_show(d.value)}"
            node(GNode(wid, "write", (_clip(text),), f"{what}{d.file}:{d.line} → {_show(d.value)}\n{d.code}", "fired"))
            edge(GEdge(wid, fid, "fired"))
            if d.guard and d.guard not in ("default", "set by the user"):
                did = f"decision:{d.file}:{d.line}:chain"
                text = f"{_base(d.file)}:{d.line} if {d.guard}"
                node(GNode(did, "decision", (_clip(text),), f"{d.file}:{d.line} if {d.guard}\n(held in this resolution)", "true"))
                edge(GEdge(did, wid, "holds"))
    return g


def _order(g: nx.DiGraph, layers: list[list[str]]) -> None:
    """Barycenter ordering, in place: settings keep their order; writes group by setting
    and follow their guards; guards and predicates follow what they feed (twice)."""
    def mean_pos(n: str, ref: list[str], neighbours: Any) -> float:
        p = {m: i for i, m in enumerate(ref)}
        ns = [p[m] for m in neighbours(n) if m in p]
        return sum(ns) / len(ns) if ns else float(len(ref))

    for _ in range(2):
        layers[2].sort(key=lambda n: (mean_pos(n, layers[3], g.successors),
                                      mean_pos(n, layers[1], g.predecessors), n))
        layers[1].sort(key=lambda n: (mean_pos(n, layers[2], g.successors), n))
        layers[0].sort(key=lambda n: (mean_pos(n, layers[1], g.successors), n))


def _place(g: nx.DiGraph, col: list[str], neighbours: Any, total_h: float) -> None:
    nodes = [g.nodes[n]["node"] for n in col]
    want = []
    for name, n in zip(col, nodes, strict=True):
        ys = [g.nodes[m]["node"].y + g.nodes[m]["node"].h / 2 for m in neighbours(name)]
        want.append((sum(ys) / len(ys) if ys else TOP + total_h / 2) - n.h / 2)
    y = float(TOP)
    for n, w in zip(nodes, want, strict=True):
        n.y = max(w, y)
        y = n.y + n.h + V_GAP
    # pushed past the bottom: shift back up, keeping the gaps
    bottom = TOP + total_h
    for n in reversed(nodes):
        if n.y + n.h > bottom:
            n.y = bottom - n.h
        bottom = n.y - V_GAP


def layout(g: nx.DiGraph) -> Layout:
    """Pixel positions for the nodes and Bézier paths for the edges."""
    out = Layout(omitted=int(g.graph.get("omitted", 0)))
    if g.number_of_nodes() == 0:
        return out
    assert nx.is_directed_acyclic_graph(g)  # edges only go one layer to the right
    layers: list[list[str]] = [sorted(n for n in g if g.nodes[n]["node"].kind == k) for k in LAYERS]
    layers[3] = [n for n in g if g.nodes[n]["node"].kind == "field"]  # insertion order
    _order(g, layers)
    for n in g:
        node = g.nodes[n]["node"]
        node.h = NODE_H + LINE_H * (len(node.lines) - 1)
    heights = [sum(g.nodes[n]["node"].h + V_GAP for n in col) - V_GAP for col in layers]
    total_h = max(heights)
    # x: one column per layer, as wide as its longest line
    x: float = PAD_X
    for i, col in enumerate(layers):
        if not col:
            continue
        nodes = [g.nodes[n]["node"] for n in col]
        w = max(len(line) for n in nodes for line in n.lines) * CHAR_W + 16
        for n in nodes:
            n.x, n.w = x, w
        out.columns.append((LAYER_TITLES[i], x + w / 2))
        x += w + H_GAP
    # y: the tallest layer is stacked; the others, outward from it, sit level with the
    # nodes they connect to (kept apart and inside the box)
    anchor = heights.index(total_h)
    y = float(TOP)
    for n in layers[anchor]:
        g.nodes[n]["node"].y = y
        y += g.nodes[n]["node"].h + V_GAP
    for i in range(anchor + 1, len(layers)):
        _place(g, layers[i], g.predecessors, total_h)
    for i in range(anchor - 1, -1, -1):
        _place(g, layers[i], g.successors, total_h)
    for col in layers:
        out.nodes.extend(g.nodes[n]["node"] for n in col)
    out.width = x - H_GAP + PAD_X
    out.height = TOP + total_h + 8
    for u, v, data in sorted(g.edges(data=True), key=lambda t: (t[0], t[1])):
        a, b, e = g.nodes[u]["node"], g.nodes[v]["node"], data["edge"]
        x1, y1 = a.x + a.w, a.y + a.h / 2
        x2, y2 = b.x - 2, b.y + b.h / 2
        mid = (x1 + x2) / 2
        e.path = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        out.edges.append(e)
    return out


def deployment_graph(explanations: Iterable[Explanation]) -> Layout:
    return layout(build(explanations))

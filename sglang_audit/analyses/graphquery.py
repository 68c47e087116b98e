"""Questions asked of a release's decision graph (``graph.py``): the part of it about one
field (``graph --field``), and the decision sites a hardware predicate controls
(``guards``)."""

from __future__ import annotations

import networkx as nx

from sglang_audit.analyses.graph import DecisionGraph


def field_subgraph(g: nx.MultiDiGraph, name: str) -> nx.MultiDiGraph:
    """The part of the graph about one field: the field, what reads or writes it, the
    decisions guarding those writes, what those decisions read and reject, and the locals
    and helper returns feeding them."""
    fid = f"field:{name}"
    if fid not in g:
        raise KeyError(name)
    keep = {fid}
    direct = {u for u, _v in g.in_edges(fid)} | {v for _u, v in g.out_edges(fid)}
    keep |= direct
    decisions = {n for n in direct if g.nodes[n]["kind"] == "decision"}
    for n in list(direct):
        for _u, v, d in g.out_edges(n, data=True):
            if d["kind"] in ("guarded_by", "nested_in"):
                keep.add(v)
                decisions.add(v)
    for n in list(keep):
        for u, _v, d in g.in_edges(n, data=True):
            if d["kind"] == "guarded_by" and g.nodes[u]["kind"] == "rejection" and n in decisions:
                keep.add(u)
                keep |= {x for x, _y, e in g.in_edges(u, data=True) if e["kind"] == "rejects"}
    for n in list(keep):
        if g.nodes[n]["kind"] == "decision" or g.nodes[n]["kind"] == "write":
            for _u, v, d in g.out_edges(n, data=True):
                if d["kind"] == "reads":
                    keep.add(v)
            for u, _v, d in g.in_edges(n, data=True):
                if d["kind"] == "feeds":
                    keep.add(u)
    return g.subgraph(keep).copy()


def predicate_controls(dg: DecisionGraph, predicate: str) -> tuple[str, ...]:
    """Decision sites a predicate controls: ``file:line writes a, b; rejects N``."""
    g = dg.graph
    pid = f"predicate:{predicate}"
    if pid not in g:
        return ()
    out: list[tuple[str, int, str]] = []
    for d, _p, e in g.in_edges(pid, data=True):
        if e["kind"] != "reads" or g.nodes[d]["kind"] != "decision":
            continue
        fields: set[str] = set()
        rejects = 0
        for u, _v, e2 in g.in_edges(d, data=True):
            if e2["kind"] != "guarded_by":
                continue
            node = g.nodes[u]
            if node["kind"] == "write" and node["field"]:
                fields.add(node["field"])
            elif node["kind"] == "rejection":
                rejects += 1
        for _u, v, e2 in g.out_edges(d, data=True):
            if e2["kind"] == "writes":
                fields.add(g.nodes[v]["name"])
            elif e2["kind"] == "rejects" and g.nodes[d]["construct"] == "assert":
                rejects += 1
        if not fields and not rejects:
            continue  # guards nothing that configures SGLang
        node = g.nodes[d]
        parts = []
        if fields:
            parts.append("writes " + ", ".join(sorted(fields)))
        if rejects:
            parts.append(f"rejects ({rejects} site{'s' if rejects > 1 else ''})")
        out.append((node["file"], node["line"], "; ".join(parts)))
    return tuple(f"{f}:{line} {what}" for f, line, what in sorted(set(out)))

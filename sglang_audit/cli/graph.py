"""``sglang-audit graph``: export the release's decision graph (see docs/graph.md)."""

from __future__ import annotations

import difflib
import json
from typing import Any

import click

from sglang_audit.cli.common import TargetOptions, progress, run_or_exit, target_options
from sglang_audit.errors import InputError


@click.command(epilog="Exit codes: 0 written, 2 usage or input error.")
@target_options(only=("source", "no_cache"))
@click.option("--field", "-f", "field_name", metavar="FIELD", help="Only the part of the graph about this setting field.")
@click.option("--format", "fmt", type=click.Choice(["json", "graphml", "dot"]), default="json", show_default=True)
def graph(field_name: str | None, fmt: str, **kw: Any) -> None:
    """Export the decision graph of a release: setting fields, hardware predicates,
    decision sites (file:line, guard as written), rejection sites, writes, and the
    reads / writes / guarded_by / rejects / feeds edges between them.

    Target-independent: read from the source, no GPU, model or flags involved."""
    from sglang_audit.analyses.graph import release_graph as build
    from sglang_audit.analyses.graphquery import field_subgraph
    from sglang_audit.render.graphfmt import to_dot, to_graphml, to_json

    def run() -> tuple[str, object]:
        target = TargetOptions.of(kw)
        _tree, dg = build(target.source, use_cache=not target.no_cache, progress=progress)
        g = dg.graph
        if field_name is not None:
            try:
                g = field_subgraph(g, field_name)
            except KeyError:
                fields = sorted(d["name"] for _n, d in dg.graph.nodes(data=True) if d["kind"] == "field")
                close = difflib.get_close_matches(field_name, fields, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise InputError(f"no field {field_name!r} in this release's decision graph{hint}") from None
            g.graph["field"] = field_name
        return fmt, g

    _fmt, g = run_or_exit(run)
    if fmt == "json":
        click.echo(json.dumps(to_json(g), indent=1))
    elif fmt == "graphml":
        click.echo(to_graphml(g), nl=False)
    else:
        click.echo(to_dot(g), nl=False)

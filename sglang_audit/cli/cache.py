"""``sglang-audit cache info|clear``: what the user cache dir holds, and emptying it."""

from __future__ import annotations

import json
import sys

import click

from sglang_audit.cachedir import CACHE_PARTS, cache_root, remove_part, tree_size

_WHAT = {
    "ir": "parsed files (IR), by content hash and tool version",
    "metadata": "torch's Requires-Dist read from the package index (sglang-audit env)",
    "results": "resolutions, by the content of the tool, source tree, model and target",
    "sources": "extracted wheels/sdists",
    "wheels": "downloaded SGLang wheels",
}


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


@click.group(epilog="Exit codes: 0 done, 1 the cache could not be cleared.")
def cache() -> None:
    """Inspect or clear the user cache dir (SGLANG_AUDIT_CACHE_DIR overrides its place)."""


@cache.command("info")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def info(fmt: str) -> None:
    """Show the cache dir and the size of ir/, metadata/, results/, sources/ and wheels/."""
    from sglang_audit.frontend.parse import IR_FORMAT

    root = cache_root()
    parts = {name: tree_size(root / name) for name in CACHE_PARTS}
    ir_dir = root / "ir"
    current = sum(1 for _ in ir_dir.glob(f"{IR_FORMAT}-*.pickle")) if ir_dir.is_dir() else 0
    if fmt == "json":
        click.echo(json.dumps({
            "dir": str(root), "ir_format": IR_FORMAT, "ir_entries_current": current,
            "parts": {k: {"bytes": b, "files": f} for k, (b, f) in parts.items()},
        }, indent=2))
        return
    click.echo(f"cache dir: {root}" + ("" if root.is_dir() else "  (not created yet)"))
    for name, (size, files) in parts.items():
        click.echo(f"  {name + '/':9} {_human(size):>9}  {files:6} files  {_WHAT[name]}")
    total = sum(b for b, _f in parts.values())
    click.echo(f"  {'total':9} {_human(total):>9}")
    click.echo(f"IR format {IR_FORMAT}: {current} entries usable by this version "
               f"(entries of other versions are never read; `cache clear` removes them)")


@cache.command("clear")
@click.option("--all", "everything", is_flag=True, help="Also remove the downloaded wheels (wheels/).")
def clear(everything: bool) -> None:
    """Remove ir/, metadata/, results/ and sources/ (and wheels/ with --all); they are rebuilt on demand."""
    parts = CACHE_PARTS if everything else tuple(p for p in CACHE_PARTS if p != "wheels")
    failed = False
    for name in parts:
        try:
            size, files = remove_part(name)
        except OSError as exc:
            click.echo(f"sglang-audit: error: cannot remove {cache_root() / name}: {exc.strerror or exc}", err=True)
            failed = True
            continue
        click.echo(f"removed {name}/  ({_human(size)}, {files} files)")
    if not everything:
        size, files = tree_size(cache_root() / "wheels")
        if files:
            click.echo(f"kept wheels/  ({_human(size)}, {files} files; --all removes them)")
    if failed:
        sys.exit(1)

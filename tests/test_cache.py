"""The parsed-IR cache: versioned entries, damaged entries, `cache info` / `cache clear`,
and the fast front end (line numbers, on-disk form) matching libcst's own answers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import libcst as cst
import pytest
from clirun import cli
from libcst.metadata import MetadataWrapper, PositionProvider

from sglang_audit import __version__
from sglang_audit.frontend import ir
from sglang_audit.frontend import parse as frontend
from sglang_audit.frontend.parse import (
    SourceCache,
    convert_source,
    dump_tree,
    line_spans,
    load_tree,
)

MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"
SERVER_ARGS = MINI_E2 / "python" / "sglang" / "srt" / "server_args.py"


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


# ---- versioned entries ------------------------------------------------------------------


def test_ir_format_carries_the_tool_version():
    assert frontend.IR_FORMAT.startswith(f"{__version__}-")


def test_entry_of_another_ir_format_is_not_read(isolated_cache, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(frontend, "IR_FORMAT", "0.0.0-old-format")
        old = SourceCache()
        old.load(SERVER_ARGS)
        assert old.parse_count == 1
    entries = sorted(p.name for p in (isolated_cache / "ir").glob("*.pickle"))
    assert len(entries) == 1 and entries[0].startswith("0.0.0-old-format-")
    # Make the stale entry distinguishable: if it were read, the tree would be empty.
    (isolated_cache / "ir" / entries[0]).write_bytes(dump_tree(ir.Module(1, [])))
    new = SourceCache()
    tree = new.load(SERVER_ARGS)
    assert new.parse_count == 1 and tree.body  # parsed again, the stale entry ignored
    assert any(p.name.startswith(frontend.IR_FORMAT + "-") for p in (isolated_cache / "ir").glob("*.pickle"))
    warm = SourceCache()
    warm.load(SERVER_ARGS)
    assert warm.parse_count == 0  # the current-format entry is used


def test_damaged_entry_is_a_miss(isolated_cache):
    SourceCache().load(SERVER_ARGS)
    (entry,) = (isolated_cache / "ir").glob(f"{frontend.IR_FORMAT}-*.pickle")
    entry.write_bytes(b"\x80\x05garbage")
    again = SourceCache()
    assert again.load(SERVER_ARGS).body and again.parse_count == 1


def test_no_disk_cache_writes_nothing(isolated_cache):
    c = SourceCache(use_disk=False)
    c.load(SERVER_ARGS)
    assert not (isolated_cache / "ir").exists()


def test_changed_file_is_reparsed_in_the_same_cache(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    c = SourceCache(use_disk=False)
    assert c.load(f).body[0].value.value == 1
    assert c.load(f) is c.load(f) and c.parse_count == 1
    f.write_text("x = 22\n")  # different size: the memo of the file's stamp must not hide it
    assert c.load(f).body[0].value.value == 22 and c.parse_count == 2


# ---- cache info / clear -----------------------------------------------------------------


def _fill(root: Path) -> None:
    assert cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b")[0] == 0
    (root / "sources" / "abc" / "sglang").mkdir(parents=True)
    (root / "sources" / "abc" / "sglang" / "x.py").write_text("x = 1\n")
    (root / "wheels").mkdir(exist_ok=True)
    (root / "wheels" / "sglang-0.0.1-py3-none-any.whl").write_bytes(b"0" * 1000)


def test_info_on_an_empty_cache(isolated_cache):
    code, out, _ = cli("cache", "info")
    assert code == 0 and str(isolated_cache) in out and "not created yet" in out
    code, out, _ = cli("cache", "info", "--format", "json")
    data = json.loads(out)
    assert data["dir"] == str(isolated_cache) and data["ir_format"] == frontend.IR_FORMAT
    assert data["parts"] == {k: {"bytes": 0, "files": 0} for k in ("ir", "metadata", "results", "sources", "wheels")}


def test_info_then_clear_keeps_wheels_unless_all(isolated_cache):
    _fill(isolated_cache)
    data = json.loads(cli("cache", "info", "--format", "json")[1])
    assert data["parts"]["ir"]["files"] >= 1 and data["ir_entries_current"] == data["parts"]["ir"]["files"]
    assert data["parts"]["sources"]["files"] == 1
    # the resolution of _fill's resolve, its typed flags (none to type: the entry check
    # passed) and the content-hash index of its files
    assert len(list((isolated_cache / "results").glob("*/*.entry"))) == 1
    assert len(list((isolated_cache / "results").glob("*/*.flags"))) == 1
    stamps = len(list((isolated_cache / "results" / "stamps").glob("*.json")))
    assert data["parts"]["results"]["files"] == 2 + stamps
    assert data["parts"]["wheels"] == {"bytes": 1000, "files": 1}
    code, out, _ = cli("cache", "info")
    assert code == 0 and "ir/" in out and "sources/" in out and "wheels/" in out
    code, out, _ = cli("cache", "clear")
    assert code == 0 and "removed ir/" in out and "removed results/" in out and "removed sources/" in out and "kept wheels/" in out
    assert not (isolated_cache / "ir").exists() and not (isolated_cache / "sources").exists()
    assert not (isolated_cache / "results").exists()
    assert (isolated_cache / "wheels" / "sglang-0.0.1-py3-none-any.whl").is_file()
    code, out, _ = cli("cache", "clear", "--all")
    assert code == 0 and "removed wheels/" in out and not (isolated_cache / "wheels").exists()
    # the cache is rebuilt on demand
    assert cli("resolve", "-s", str(MINI_E2), "-a", "sm100", "-m", "qwen3-30b-a3b")[0] == 0
    assert any((isolated_cache / "ir").glob("*.pickle"))


def test_clear_never_follows_a_link_out_of_the_cache(isolated_cache, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    isolated_cache.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, isolated_cache / "sources")
    code, _, _ = cli("cache", "clear")
    assert code == 0
    assert (outside / "keep.txt").read_text() == "keep"
    assert not (isolated_cache / "sources").exists()


# ---- the fast front end gives what libcst's own providers give ----------------------------

TRICKY = '''"""doc"""
import os


@decorator(
    1,
)
class C(Base, metaclass=M):
    x: int = 1

    @property
    def f(self, a,
          b=(1,
             2), *args, k=3, **kw):
        if a and (b or
                  not k):
            return [i for i in range(3)
                    if i]
        elif k:
            raise ValueError(
                f"bad {a!r:>{b}}"
                "tail"
            )
        try:
            pass
        except (KeyError, ValueError) as exc:
            del exc
        finally:
            y = lambda q: q + 1  # noqa
        with open(a) as fh, open(b):
            return fh.read()[1:2, ::3]


async def g():
    await h()
    assert x, "m"
    return {**d, 'k': v} if x else {1, 2}
'''


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_line_spans_match_position_provider(newline):
    module = cst.parse_module(TRICKY.replace("\n", newline))
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    spans = line_spans(module)
    for node, rng in expected.items():
        if isinstance(node, cst.Module):
            continue  # its end is never used
        assert spans[node] == (rng.start.line, rng.end.line), type(node).__name__


def _same(a: object, b: object) -> bool:
    if isinstance(a, ir.Node):
        return type(a) is type(b) and all(
            _same(getattr(a, s), getattr(b, s)) for s in ("line", *type(a).__slots__)
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_disk_form_round_trips():
    for text in (TRICKY, SERVER_ARGS.read_text(encoding="utf-8")):
        tree = convert_source(text)
        assert _same(tree, load_tree(dump_tree(tree)))


def test_concurrent_writers_all_see_a_writable_cache(isolated_cache):
    """Regression (found by the fidelity run, two workers): a shared probe file name let one
    process delete another's probe, which then reported the cache as not writable."""
    from concurrent.futures import ThreadPoolExecutor

    from sglang_audit.cachedir import writable_subdir

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _i: writable_subdir("ir"), range(3000)))
    assert all(r == isolated_cache / "ir" for r in results)
    assert not list((isolated_cache / "ir").glob(".write-probe*"))

"""The tool's own extracted copy of a release: checked against its manifest, by a
fingerprint of its stamps once it has settled (``source/extracted.py``), and checked again
before a result keyed by it is served to a caller that located it earlier."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_source import metadata, wheel_members, write_zip

import sglang_audit.cachedir as cachedir
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve import pipeline
from sglang_audit.resolve.pipeline import Request, located, prepare, resolve_target
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.source import extracted
from sglang_audit.source.locate import locate_source

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2" / "python" / "sglang"
PROFILE = ROOT / "fixtures" / "models" / "deepseek-r1-nvfp4"
OLD = 'self.moe_runner_backend = "flashinfer_trtllm"'


@pytest.fixture
def settled(monkeypatch):
    """Every stamp counts as older than the clock's tick, as for a copy extracted minutes
    ago: the full check keeps its fingerprint (and the stamp index its stamps)."""
    monkeypatch.setattr(cachedir, "RACY_NS", -10**12)


def _fingerprints(cache: Path) -> list[Path]:
    return sorted((cache / "results" / "stamps").glob("extracted-*.json"))


def _whl(tmp_path: Path) -> Path:
    return write_zip(tmp_path / "in" / "sglang-0.5.10-py3-none-any.whl", wheel_members())


def test_a_settled_copy_is_verified_by_its_fingerprint(tmp_path, isolated_cache, settled, monkeypatch):
    whl = _whl(tmp_path)
    first = locate_source(str(whl))
    assert len(_fingerprints(isolated_cache)) == 1

    def full_check(*_args: object) -> str:
        raise AssertionError("the fingerprint should have answered")

    monkeypatch.setattr(extracted, "_checked", full_check)
    messages: list[str] = []
    again = locate_source(str(whl), progress=messages.append)
    assert messages == []
    assert again.content_digest == first.content_digest is not None


def test_a_fresh_copy_leaves_no_fingerprint_until_it_settles(tmp_path, isolated_cache, monkeypatch):
    # just extracted: a same-size rewrite now could keep every stamp, so none is remembered
    whl = _whl(tmp_path)
    first = locate_source(str(whl))
    assert _fingerprints(isolated_cache) == []
    monkeypatch.setattr(cachedir, "RACY_NS", -10**12)
    assert locate_source(str(whl)).content_digest == first.content_digest
    assert len(_fingerprints(isolated_cache)) == 1


@pytest.mark.parametrize("attack", ["same_size_edit", "marker", "fingerprint"])
def test_a_settled_copy_edited_is_checked_in_full(tmp_path, isolated_cache, settled, attack):
    whl = _whl(tmp_path)
    tree = locate_source(str(whl))
    root = tree.package_dir.parent
    if attack == "same_size_edit":
        path = tree.package_dir / "srt" / "server_args.py"
        st = path.stat()
        path.write_bytes(path.read_bytes().replace(b"pass", b"PASS"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif attack == "marker":
        # the manifest edited too (its stamp changes): the files no longer match it
        path = tree.package_dir / "__init__.py"
        path.write_bytes(b"EVIL = 1\n")
        marker = json.loads((root / extracted.MARKER).read_text())
        marker["files"][os.path.join("sglang", "__init__.py")] = "0" * 64
        (root / extracted.MARKER).write_text(json.dumps(marker))
    else:
        # a damaged fingerprint file is no answer: the full check passes on the intact copy
        (fingerprint,) = _fingerprints(isolated_cache)
        fingerprint.write_bytes(b"garbage")
    messages: list[str] = []
    again = locate_source(str(whl), progress=messages.append)
    assert any("differs from the archive" in m for m in messages) == (attack != "fingerprint")
    assert again.content_digest == tree.content_digest is not None
    assert (again.package_dir / "srt" / "server_args.py").read_bytes() == wheel_members()["sglang/srt/server_args.py"]
    assert (again.package_dir / "__init__.py").read_bytes() == wheel_members()["sglang/__init__.py"]


# ---- the result cache: a copy located earlier is checked again ---------------------------


def _mini_wheel(tmp_path: Path) -> Path:
    members = {f"sglang/{p.relative_to(MINI_E2).as_posix()}": p.read_bytes()
               for p in sorted(MINI_E2.rglob("*")) if p.is_file()}
    members["sglang-0.5.10.dist-info/METADATA"] = metadata("0.5.10")
    return write_zip(tmp_path / "in" / "sglang-0.5.10-py3-none-any.whl", members)


def _same_size_edit(path: Path, new_value: str) -> None:
    st = path.stat()
    path.write_text(path.read_text().replace(OLD, f'self.moe_runner_backend = "{new_value}"', 1))
    assert path.stat().st_size == st.st_size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return Path(shutil.copytree(PROFILE, tmp_path / "model"))


@pytest.mark.parametrize("stable", [False, True])
def test_an_edit_after_the_copy_was_located_misses(tmp_path, isolated_cache, settled, model, stable):
    # a shared SourceCache locates (and verifies) the release once; an edit of the copy made
    # after that must not be answered by the result keyed by the copy as it was
    whl = _mini_wheel(tmp_path)
    cache = SourceCache()
    request = Request(source=str(whl), arch="sm100", model=str(model))
    first = resolve_target(prepare(request, cache).target, cache, ResultCache())
    assert first.settings["moe_runner_backend"].config == "flashinfer_trtllm"
    tree = located(str(whl), cache)
    _same_size_edit(tree.package_dir / "srt" / "server_args.py", "flashinfer_cutlas")
    results = ResultCache(stable_tree=stable)
    again = resolve_target(prepare(request, cache).target, cache, results)
    assert again.settings["moe_runner_backend"].config == "flashinfer_cutlas"
    assert results.hits == 0
    assert located(str(whl), cache) is tree  # the same located tree: the result cache checked it


def test_an_edit_of_the_copy_while_evaluated_is_not_stored(tmp_path, isolated_cache, settled, model):
    # keyed by the copy's manifest: an answer read from an edited file is not stored under it
    from sglang_audit.evaluate.bounds import Bounds
    from sglang_audit.resolve.resolver import Resolver
    from sglang_audit.resolve.targets import DEFAULT_MAX_PATHS

    whl = _mini_wheel(tmp_path)
    cache = SourceCache()
    target = prepare(Request(source=str(whl), arch="sm100", model=str(model)), cache).target
    results = ResultCache(stable_tree=True)
    key = results.key(target, DEFAULT_MAX_PATHS, Bounds())
    server_args = target.source.package_dir / "srt" / "server_args.py"
    _same_size_edit(server_args, "flashinfer_cutlas")
    res = Resolver(target, cache).resolve()
    assert res.settings["moe_runner_backend"].config == "flashinfer_cutlas"
    assert results.put(key, res) is False and results.get(key) is None
    # unedited, the same evaluation is stored
    server_args.write_text(server_args.read_text().replace('"flashinfer_cutlas"', '"flashinfer_trtllm"', 1))
    fresh = ResultCache(stable_tree=True)
    cache = SourceCache()
    target = prepare(Request(source=str(whl), arch="sm100", model=str(model)), cache).target
    key = fresh.key(target, DEFAULT_MAX_PATHS, Bounds())
    assert fresh.put(key, Resolver(target, cache).resolve()) is True


def test_one_request_checks_the_copy_once(tmp_path, isolated_cache, settled, model, monkeypatch):
    # the request's own locate verified it: the result key takes that digest, no second walk
    monkeypatch.setenv("SGLANG_AUDIT_FLASHINFER_SOURCE", "none")
    whl = _mini_wheel(tmp_path)
    request = Request(source=str(whl), arch="sm100", model=str(model))
    first = pipeline.resolve(request)
    calls: list[Path] = []
    real = extracted.verified

    def counted(root: Path, archive_sha: str) -> str | None:
        calls.append(root)
        return real(root, archive_sha)

    monkeypatch.setattr(extracted, "verified", counted)
    monkeypatch.setattr("sglang_audit.source.locate.verified", counted)
    again = pipeline.resolve(request)
    assert len(calls) == 1
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(first.to_json(), sort_keys=True)


# ---- what a hit costs: the modules it imports -------------------------------------------

# a resolve answered from the result cache needs neither the parser, the evaluator, the
# report's libraries, the fact-file shapes it does not read (factschema: ~25 ms to build) nor
# what only a download or an extraction uses
_NOT_ON_A_HIT = ("libcst", "networkx", "jinja2", "yaml", "sglang_audit.evaluate.interpreter",
                 "sglang_audit.frontend.convert", "sglang_audit.resolve.kernelread",
                 "sglang_audit.resolve.attnkernels", "sglang_audit.factschema",
                 "subprocess", "tarfile", "zipfile", "difflib", "shlex", "logging")


@pytest.mark.parametrize("sets", [("--set", "tp_size=4"), ()])
def test_a_cached_resolve_imports_only_what_it_needs(tmp_path, isolated_cache, model, sets):
    import subprocess
    import sys

    whl = _mini_wheel(tmp_path)
    # the fixture FlashInfer: the miss reads it for the FP4 GEMM's verdict, the hit remembers it
    env = {**os.environ, "SGLANG_AUDIT_CACHE_DIR": str(isolated_cache),
           "SGLANG_AUDIT_FLASHINFER_SOURCE": str(ROOT / "fixtures" / "kernels" / "fi_mini")}
    code = ("import sys; sys.argv[0] = 'sglang-audit'; from sglang_audit.cli.main import main\n"
            "try:\n    main(standalone_mode=False)\nfinally:\n"
            f"    print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted({n.split('.')[0] for n in _NOT_ON_A_HIT})!r}"
            f" and any(m == n or m.startswith(n + '.') for n in {_NOT_ON_A_HIT!r})), file=sys.stderr)\n")
    args = ["resolve", "--source", str(whl), "--arch", "sm100", "--model", str(model), "--format", "json", *sets]
    runs = [subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, cwd=tmp_path)
            for _ in range(2)]
    first, hit = runs
    assert first.returncode == hit.returncode == 0, first.stderr[-500:] + hit.stderr[-500:]
    assert hit.stdout == first.stdout and json.loads(hit.stdout)["settings"]["moe_runner_backend"]["config"] == "flashinfer_trtllm"
    # the miss parsed and read FlashInfer: the check sees those imports
    assert "'libcst'" in first.stderr.splitlines()[-1] and "kernelread" in first.stderr.splitlines()[-1]
    # the kernel verdicts, the attention level's included, are remembered (kernelmemo): the hit
    # imports nothing it must not need
    assert hit.stderr.splitlines()[-1] == "[]"

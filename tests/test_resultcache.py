"""The result cache: a hit only when nothing a resolution depends on has changed."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve.pipeline import Request, prepare, resolve_target
from sglang_audit.resolve.resultcache import ResultCache

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
PROFILE = ROOT / "fixtures" / "models" / "deepseek-r1-nvfp4"


@pytest.fixture
def setup(tmp_path, isolated_cache):
    checkout = tmp_path / "checkout"
    shutil.copytree(MINI_E2, checkout)
    model = tmp_path / "model"
    shutil.copytree(PROFILE, model)
    return checkout, model


def _resolve(checkout: Path, model: Path, results: ResultCache, arch: str = "sm100", sets: tuple[str, ...] = ()):
    cache = SourceCache()
    target = prepare(Request(source=str(checkout), arch=arch, model=str(model), sets=list(sets)), cache).target
    return resolve_target(target, cache, results)


def _moe(res) -> str:
    return res.settings["moe_runner_backend"].config


def test_second_resolution_is_a_hit_with_the_same_answer(setup):
    checkout, model = setup
    results = ResultCache()
    first = _resolve(checkout, model, results)
    again = _resolve(checkout, model, results)
    assert (results.misses, results.hits) == (1, 1)  # the first lookup found nothing
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(first.to_json(), sort_keys=True)
    assert _moe(again) == "flashinfer_trtllm"


def test_a_hit_shows_the_flags_in_this_request_s_order(setup):
    # the key holds the flags as a set: the same deployment asked with its flags in another
    # order is a hit, and its answer lists them as asked, not as the stored request did
    checkout, model = setup
    results = ResultCache()
    first = _resolve(checkout, model, results, sets=("tp_size=8", "moe_runner_backend=triton"))
    again = _resolve(checkout, model, results, sets=("moe_runner_backend=triton", "tp_size=8"))
    assert results.hits == 1
    assert list(first.flags) == ["tp_size", "moe_runner_backend"]
    assert list(again.flags) == ["moe_runner_backend", "tp_size"]
    assert again.to_json()["flags"] == {"moe_runner_backend": "triton", "tp_size": 8}


@pytest.mark.parametrize("change", ["arch", "flag"])
def test_another_target_misses(setup, change):
    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    if change == "arch":
        res = _resolve(checkout, model, results, arch="sm120")
    else:
        res = _resolve(checkout, model, results, sets=("moe_runner_backend=triton",))
        assert _moe(res) == "triton"
    assert results.hits == 0


def test_an_edited_source_file_misses_and_gives_the_new_answer(setup):
    checkout, model = setup
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    text = server_args.read_text()
    server_args.write_text(text.replace('self.moe_runner_backend = "flashinfer_trtllm"', 'self.moe_runner_backend = "triton"', 1))
    assert _moe(_resolve(checkout, model, results)) == "triton"
    assert results.hits == 0


def test_a_touched_source_file_is_still_a_hit(setup):
    # keyed by content: a new mtime over the same bytes is the same tree
    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    utils = checkout / "python" / "sglang" / "srt" / "utils" / "common.py"
    st = utils.stat()
    os.utime(utils, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    assert results.hits == 1


def test_an_edited_model_config_misses(setup):
    checkout, model = setup
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    cfg = json.loads((model / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (model / "config.json").write_text(json.dumps(cfg))
    res = _resolve(checkout, model, results)
    assert results.hits == 0
    assert res.model.architecture == "LlamaForCausalLM"


def test_a_damaged_entry_is_a_miss_not_an_error(setup, isolated_cache):
    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    (entry,) = (isolated_cache / "results").glob("*/*.entry")
    entry.write_bytes(b"\x80\x05not a pickle")
    res = _resolve(checkout, model, results)
    assert results.hits == 0 and _moe(res) == "flashinfer_trtllm"


def test_no_cache_writes_nothing(setup, isolated_cache):
    checkout, model = setup
    results = ResultCache(enabled=False)
    _resolve(checkout, model, results)
    _resolve(checkout, model, results)
    assert results.hits == 0
    assert not (isolated_cache / "results").exists()


# ---- stale answers (issue #23): every way a tree can change under the same stamp -------

SERVER_ARGS = ("python", "sglang", "srt", "server_args.py")
OLD = 'self.moe_runner_backend = "flashinfer_trtllm"'


def _same_size_edit(path: Path, new_value: str) -> None:
    """Rewrite ``OLD`` to a same-length value and restore the mtime (``touch -r``)."""
    st = path.stat()
    text = path.read_text()
    assert len(new_value) == len("flashinfer_trtllm")
    path.write_text(text.replace(OLD, f'self.moe_runner_backend = "{new_value}"', 1))
    assert path.stat().st_size == st.st_size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_same_size_edit_with_the_mtime_restored_misses(setup):
    checkout, model = setup
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    _same_size_edit(checkout.joinpath(*SERVER_ARGS), "flashinfer_cutlas")
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_cutlas"
    assert results.hits == 0


def test_same_size_edit_of_an_old_file_misses(setup, monkeypatch):
    # the stamp index trusts stamps older than two seconds: pretend the clock moved on,
    # so the first digest stores every stamp, and the edit must still be seen (ctime)
    import sglang_audit.cachedir as rc

    checkout, model = setup
    results = ResultCache()
    monkeypatch.setattr(rc, "RACY_NS", -10**12)
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    assert any(results._hashes.known.values())  # stamps were stored, so they are what is tested
    _same_size_edit(checkout.joinpath(*SERVER_ARGS), "flashinfer_cutlas")
    assert _moe(_resolve(checkout, model, ResultCache())) == "flashinfer_cutlas"


def test_a_copy_reusing_the_inode_misses(setup):
    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    path = checkout.joinpath(*SERVER_ARGS)
    st = path.stat()
    text = path.read_text().replace(OLD, 'self.moe_runner_backend = "flashinfer_cutlas"', 1)
    path.unlink()
    path.write_text(text)  # a freed inode is often handed out again at once
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_cutlas"
    assert results.hits == 0


def _value_from_module(checkout: Path) -> Path:
    """Make server_args take the MoE value from ``srt/utils/choice.py`` (returned), so a
    link can stand for that module (server_args itself must resolve inside the package)."""
    path = checkout.joinpath(*SERVER_ARGS)
    text = path.read_text().replace(OLD, "self.moe_runner_backend = MOE_CHOICE", 1)
    path.write_text("from sglang.srt.utils.choice import MOE_CHOICE\n" + text)
    choice = checkout / "python" / "sglang" / "srt" / "utils" / "choice.py"
    choice.write_text('MOE_CHOICE = "flashinfer_trtllm"\n')
    return choice


def _same_size_value_edit(path: Path) -> None:
    st = path.stat()
    path.write_text('MOE_CHOICE = "flashinfer_cutlas"\n')
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_editing_the_target_of_a_symlinked_file_misses(setup):
    checkout, model = setup
    choice = _value_from_module(checkout)
    real = checkout / "python" / "vendor_choice.py"  # inside the tree, outside the package
    shutil.move(choice, real)
    choice.symlink_to(real)
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    _same_size_value_edit(real)
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_cutlas"
    assert results.hits == 0


def test_editing_inside_a_symlinked_directory_misses(setup):
    checkout, model = setup
    choice = _value_from_module(checkout)
    utils = choice.parent
    real = checkout / "python" / "vendor_utils"
    shutil.move(utils, real)
    utils.symlink_to(real, target_is_directory=True)
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    _same_size_value_edit(real / "choice.py")
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_cutlas"
    assert results.hits == 0


def test_retargeting_a_symlink_misses(setup):
    checkout, model = setup
    choice = _value_from_module(checkout)
    one = checkout / "python" / "one.py"
    two = checkout / "python" / "two.py"
    shutil.move(choice, one)
    two.write_text('MOE_CHOICE = "triton"\n')
    choice.symlink_to(one)
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    choice.unlink()
    choice.symlink_to(two)
    assert _moe(_resolve(checkout, model, results)) == "triton"
    assert results.hits == 0


def test_the_model_path_itself_is_in_the_key(setup, tmp_path, monkeypatch):
    # SGLang reads the path (mini_e2: `self.model_path.endswith("hybrid")`), and the
    # result reports it: two directories with the same name and content are two answers
    checkout, model = setup
    a = tmp_path / "a" / "llama-2" / "m"
    b = tmp_path / "b" / "other" / "m"
    shutil.copytree(model, a)
    shutil.copytree(model, b)
    results = ResultCache()
    monkeypatch.chdir(a.parent)  # `--model m` from two directories: the same name
    first = _resolve(checkout, Path("m"), results)
    monkeypatch.chdir(b.parent)
    second = _resolve(checkout, Path("m"), results)
    assert first.model.name == second.model.name == "m"
    assert results.hits == 0
    assert first.model.path == str(a.resolve()) and second.model.path == str(b.resolve())


def test_a_large_config_json_is_hashed_not_matched_by_size_and_mtime(setup):
    checkout, model = setup
    cfg = json.loads((model / "config.json").read_text())
    cfg["padding"] = "x" * (5 * 1024 * 1024)  # over the old 4 MB "size and mtime only" limit
    (model / "config.json").write_text(json.dumps(cfg))
    results = ResultCache()
    first = _resolve(checkout, model, results)
    path = model / "config.json"
    st = path.stat()
    text = path.read_text()
    arch = cfg["architectures"][0]
    other = "X" * len(arch)
    path.write_text(text.replace(f'"{arch}"', f'"{other}"', 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    res = _resolve(checkout, model, results)
    assert results.hits == 0
    assert first.model.architecture == arch and res.model.architecture == other


def test_the_source_origin_is_in_the_key(setup, tmp_path):
    checkout, model = setup
    results = ResultCache()
    cache = SourceCache()
    first = prepare(Request(source=str(checkout), arch="sm100", model=str(model)), cache).target
    resolve_target(first, cache, results)
    other = dataclasses.replace(first, source=dataclasses.replace(first.source, origin="sglang==9.9.9"))
    resolve_target(other, cache, results)
    assert results.hits == 0


# ---- entries that are damaged or crafted ------------------------------------------------


def test_a_one_byte_corruption_is_a_miss(setup, isolated_cache):
    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    (entry,) = (isolated_cache / "results").glob("*/*.entry")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x01
    entry.write_bytes(bytes(data))
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    assert results.hits == 0


def test_a_crafted_entry_with_a_valid_checksum_runs_nothing(setup, isolated_cache, tmp_path):
    import hashlib
    import pickle

    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    (entry,) = (isolated_cache / "results").glob("*/*.entry")
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps(Evil())
    magic = entry.read_bytes().split(b" ", 1)[0] + b" "
    entry.write_bytes(magic + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    assert not marker.exists()
    assert results.hits == 0


def test_a_crafted_ir_entry_runs_nothing(tmp_path, isolated_cache):
    import pickle

    from sglang_audit.cachedir import write_entry
    from sglang_audit.frontend.parse import IR_FORMAT, IR_MAGIC

    src = tmp_path / "m.py"
    src.write_text("x = 1\n")
    import hashlib

    key = f"{IR_FORMAT}-{hashlib.sha256(src.read_bytes()).hexdigest()}"
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    write_entry(isolated_cache / "ir" / f"{key}.pickle", IR_MAGIC, pickle.dumps(Evil()))
    tree = SourceCache().load(src)
    assert not marker.exists()
    assert tree.body[0].kind == "Assign"  # parsed afresh


def test_non_utf8_file_names_in_the_tree_and_model_dir(setup):
    checkout, model = setup
    pkg = os.fsencode(checkout / "python" / "sglang")
    with open(os.path.join(pkg, b"caf\xe9.txt"), "wb") as fh:
        fh.write(b"x")
    with open(os.path.join(os.fsencode(model), b"n\xff.bin"), "wb") as fh:
        fh.write(b"y")
    results = ResultCache()
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    assert _moe(_resolve(checkout, model, results)) == "flashinfer_trtllm"
    assert results.hits == 1


# ---- the property: no edit to a tree is ever answered with the pre-edit result -----------

EDITS = ("content", "same_size", "same_size_old_stamps", "inode_reuse", "symlink_target", "model_path", "model_config")
VALUES = ("flashinfer_cutlas", "flashinfer_xxxxxx", "flashinfer_trtllm", "triton___________")


def _apply(edit: str, value: str, checkout: Path, model: Path, state: dict[str, Path]) -> None:
    choice = state["choice"]
    if edit == "content":
        choice.write_text(f'MOE_CHOICE = "{value.rstrip("_")}"  # {len(value)}\n')
    elif edit in ("same_size", "same_size_old_stamps"):
        text = choice.read_text()
        old = text.split('"')[1]
        new = (value * 3)[: len(old)]
        st = choice.stat()
        choice.write_text(text.replace(f'"{old}"', f'"{new}"', 1))
        os.utime(choice, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif edit == "inode_reuse":
        text = choice.read_text()
        st = choice.stat()
        old = text.split('"')[1]
        choice.unlink()
        choice.write_text(text.replace(f'"{old}"', f'"{(value * 3)[: len(old)]}"', 1))
        os.utime(choice, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif edit == "symlink_target":
        link = state["link"]
        other = checkout / "python" / f"target_{value}.py"
        other.write_text(f'MOE_CHOICE = "{value}"\n')
        link.unlink()
        link.symlink_to(other)
        state["choice"] = other
    elif edit == "model_path":
        new = model.parent / f"moved_{value}" / ("hybrid" if state["model"].name != "hybrid" else "m")
        new.parent.mkdir(exist_ok=True)
        shutil.move(state["model"], new)
        state["model"] = new
    elif edit == "model_config":
        cfg = state["model"] / "config.json"
        st = cfg.stat()
        data = json.loads(cfg.read_text())
        arch = data["architectures"][0]
        cfg.write_text(cfg.read_text().replace(f'"{arch}"', f'"{arch[:-1]}{value[0]}"', 1))
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))


def _answer(res) -> str:
    return json.dumps(res.to_json(), sort_keys=True)


@pytest.mark.parametrize("seed", [0])
def test_no_edit_is_answered_from_the_cache(seed, tmp_path_factory, monkeypatch):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import sglang_audit.cachedir as rc

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.sampled_from(EDITS), st.sampled_from(VALUES)), min_size=1, max_size=3))
    def run(edits):
        base = tmp_path_factory.mktemp("stale")
        monkeypatch.setenv("SGLANG_AUDIT_CACHE_DIR", str(base / "cache"))
        checkout = base / "checkout"
        shutil.copytree(MINI_E2, checkout)
        model = base / "models" / "m"
        shutil.copytree(PROFILE, model)
        choice = _value_from_module(checkout)
        real = checkout / "python" / "vendor_choice.py"
        shutil.move(choice, real)
        choice.symlink_to(real)
        state = {"choice": real, "link": choice, "model": model}
        results = ResultCache()
        before = _answer(_resolve(checkout, state["model"], results))
        for edit, value in edits:
            # "old stamps": the index trusts every stamp it stores, as it does for a tree
            # that has not changed for seconds; the edit must still be seen (ctime)
            monkeypatch.setattr(rc, "RACY_NS", -10**12 if edit == "same_size_old_stamps" else 2_000_000_000)
            _apply(edit, value, checkout, model, state)
        cached = _answer(_resolve(checkout, state["model"], results))
        fresh = _answer(_resolve(checkout, state["model"], ResultCache(enabled=False)))
        assert cached == fresh
        if fresh != before:
            assert results.hits == 0

    run()


def test_the_tool_digest_follows_the_tool_s_code_and_rules(tmp_path, monkeypatch):
    # every .py/.html/.css/.toml of the package, at any depth, and the rules' TOML files
    import sglang_audit.resolve.resultcache as rc

    package, rules = tmp_path / "pkg", tmp_path / "rules"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    rules.mkdir()
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    (package / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    (rules / "r.toml").write_text("k = 1\n")
    monkeypatch.setattr(rc, "package_dir", lambda: package)
    monkeypatch.setattr(rc, "rules_dir", lambda: rules)
    digest = rc.tool_digest.__wrapped__
    first = digest()
    (package / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\1")
    (package / "notes.txt").write_text("not code\n")
    assert digest() == first
    for path, text in ((package / "sub" / "b.py", "y = 3\n"), (rules / "r.toml", "k = 2\n"), (package / "c.css", "")):
        path.write_text(text)
        assert digest() != first
        first = digest()


@pytest.mark.parametrize("edit", [None, "source", "model"])
def test_a_tree_edited_while_evaluated_is_not_stored_under_its_earlier_key(setup, edit):
    # the key hashes the tree and model before the evaluation reads them: an edit in
    # between must not leave the new answer under the key of the old content
    from sglang_audit.evaluate.bounds import Bounds
    from sglang_audit.resolve.resolver import Resolver
    from sglang_audit.resolve.targets import DEFAULT_MAX_PATHS

    checkout, model = setup
    cache = SourceCache()
    target = prepare(Request(source=str(checkout), arch="sm100", model=str(model)), cache).target
    results = ResultCache()
    key = results.key(target, DEFAULT_MAX_PATHS, Bounds())
    if edit == "source":
        server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
        server_args.write_text(server_args.read_text().replace(
            'self.moe_runner_backend = "flashinfer_trtllm"', 'self.moe_runner_backend = "triton"', 1))
    elif edit == "model":
        config = model / "config.json"
        data = json.loads(config.read_text())
        data["num_hidden_layers"] = data.get("num_hidden_layers", 1) + 1
        config.write_text(json.dumps(data))
    res = Resolver(target, cache).resolve()
    assert _moe(res) == ("triton" if edit == "source" else "flashinfer_trtllm")
    assert results.put(key, res) is (edit is None)
    assert (results.get(key) is not None) is (edit is None)
    if edit == "source":
        # the tree as it is now has its own key, and its answer is kept under it
        fresh = ResultCache()
        assert _moe(_resolve(checkout, model, fresh)) == "triton"
        assert _moe(_resolve(checkout, model, fresh)) == "triton" and fresh.hits == 1


def test_a_resolution_without_some_layer_stages_says_so_and_is_never_served_for_all(setup):
    # explain's forced choices leave out layers they do not read (Target.layer_stages): such a
    # resolution names what it did not build, and a request for every layer misses it
    checkout, model = setup
    results = ResultCache()
    cache = SourceCache()
    target = prepare(Request(source=str(checkout), arch="sm100", model=str(model)), cache).target
    partial = resolve_target(dataclasses.replace(target, layer_stages=("moe",)), cache, results, forks=False)
    attention = partial.settings["attention_backend"].layer
    assert attention.status == "unknown" and attention.stage == "attention"
    assert attention.reason == "the attention layers were not built in this resolution (asked for the moe stage only)"
    none = resolve_target(dataclasses.replace(target, layer_stages=()), cache, results, forks=False)
    assert none.settings["moe_runner_backend"].layer.reason == (
        "the moe layers were not built in this resolution (asked for no layer stage)")
    full = resolve_target(target, cache, results, forks=False)
    assert results.hits == 0
    layer = full.settings["attention_backend"].layer
    assert layer is None or "not built" not in str(layer.reason)
    assert resolve_target(dataclasses.replace(target, layer_stages=("moe",)), cache, results, forks=False) == partial
    assert results.hits == 1

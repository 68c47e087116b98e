"""State prepared once per release (issue 22): the flag table shared by the targets of a
``SourceCache``, and the typed ``--set`` flags kept beside the result cache, reused only
when nothing they depend on changed, and giving exactly what evaluating them gives."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve import pipeline
from sglang_audit.resolve.pipeline import Request, prepare
from sglang_audit.resolve.resultcache import ResultCache, _typed_repr

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
PROFILE = ROOT / "fixtures" / "models" / "deepseek-r1-nvfp4"
OTHER_PROFILE = ROOT / "fixtures" / "models" / "qwen3-30b-a3b"
SETS = ["tp_size=4", "disable_radix_cache=true", "moe_runner_backend=triton"]


@pytest.fixture
def checkout(tmp_path, isolated_cache):
    root = tmp_path / "checkout"
    shutil.copytree(MINI_E2, root)
    return root


@pytest.fixture
def table_runs(monkeypatch):
    """How many times the release's flag parser was evaluated."""
    runs: list[str] = []
    real = pipeline._flag_table

    def counted(tree, resolver):
        runs.append(str(resolver.target.device))
        return real(tree, resolver)

    monkeypatch.setattr(pipeline, "_flag_table", counted)
    return runs


def _request(checkout: Path, arch: str = "sm100", sets: list[str] = SETS) -> Request:
    return Request(source=str(checkout), arch=arch, model=str(PROFILE), sets=list(sets))


def test_the_flag_table_is_evaluated_once_per_release_and_device(checkout, table_runs):
    cache = SourceCache()
    first = prepare(_request(checkout), cache, want_table=True)
    again = prepare(_request(checkout), cache, want_table=True)
    assert len(table_runs) == 1
    assert again.table is first.table
    assert again.target.flags == first.target.flags == {"tp_size": 4, "disable_radix_cache": True,
                                                        "moe_runner_backend": "triton"}
    # this release's parser reads nothing of the device or the model: another device and
    # another model get the same table, equal to the one evaluated for them alone
    other = prepare(Request(source=str(checkout), arch="sm120", model=str(OTHER_PROFILE), sets=list(SETS)),
                    cache, want_table=True)
    assert len(table_runs) == 1
    assert other.table is first.table
    alone = prepare(_request(checkout, arch="sm120"), SourceCache(), want_table=True)
    assert len(table_runs) == 2
    assert alone.table == first.table


# a field default that reads the device, as 0.5.10's `pre_warm_nccl: bool = is_hip()` does
def _with_device_default(checkout: Path) -> None:
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    text = server_args.read_text()
    field = "    disable_radix_cache: bool = False\n"
    flag = '        parser.add_argument("--disable-radix-cache", action="store_true")\n'
    assert field in text and flag in text
    text = text.replace(field, field + "    pre_warm: bool = is_sm100_supported()\n", 1)
    server_args.write_text(text.replace(flag, flag + '        parser.add_argument("--pre-warm", action="store_true")\n', 1))


def test_a_table_that_probed_files_is_shared_only_for_the_same_model(checkout, table_runs):
    # a file probe may look into the model directory: the table then belongs to that model
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    text = server_args.read_text()
    field = "    disable_radix_cache: bool = False\n"
    text = text.replace("import argparse\n", "import argparse\nimport os\n", 1)
    server_args.write_text(text.replace(field, field + '    pre_warm: bool = os.path.exists("/no/such/file")\n', 1))
    cache = SourceCache()
    first = prepare(_request(checkout), cache, want_table=True)
    assert first.table is not None and "pre_warm" in first.table.fields  # unknown: outside the model dir
    assert prepare(_request(checkout, arch="sm120"), cache, want_table=True).table is first.table
    assert len(table_runs) == 1
    other = Request(source=str(checkout), arch="sm100", model=str(OTHER_PROFILE), sets=list(SETS))
    assert prepare(other, cache, want_table=True).table is not first.table
    assert len(table_runs) == 2


def test_a_table_that_asked_for_a_package_is_shared_only_where_it_is_installed_alike(checkout, table_runs):
    # a ROCm image carries no flashinfer (resolver.build_environment): the package's state
    # follows the platform even where the parser reads nothing of the device itself
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    text = server_args.read_text().replace("import argparse\n", "import argparse\nimport importlib.util\n", 1)
    field = "    disable_radix_cache: bool = False\n"
    server_args.write_text(text.replace(
        field, field + '    pre_warm: bool = importlib.util.find_spec("flashinfer") is not None\n', 1))
    cache = SourceCache()
    first = prepare(_request(checkout), cache, want_table=True)
    assert first.table is not None and first.table.fields["pre_warm"] is True
    assert prepare(_request(checkout, arch="sm120"), cache, want_table=True).table is first.table
    rocm = prepare(_request(checkout, arch="gfx942"), cache, want_table=True)
    assert rocm.table is not first.table and rocm.table is not None and rocm.table.fields["pre_warm"] is not True
    assert len(table_runs) == 2


def test_a_device_fact_that_raised_keeps_the_table_to_its_device(checkout, table_runs):
    # torch.cuda.get_device_capability() raises on a CPU target: that raise is what the table
    # was made from, so a ROCm target (the same packages as a CPU image) evaluates it again
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    text = server_args.read_text().replace("import argparse\n", "import argparse\nimport torch\n", 1)
    helper = ("def _major():\n    try:\n        return torch.cuda.get_device_capability()[0]\n"
              "    except RuntimeError:\n        return -1\n\n\n@dataclasses.dataclass\nclass ServerArgs:\n")
    field = "    disable_radix_cache: bool = False\n"
    text = text.replace("@dataclasses.dataclass\nclass ServerArgs:\n", helper, 1)
    server_args.write_text(text.replace(field, field + "    pre_warm: int = _major()\n", 1))
    cache = SourceCache()
    cpu = prepare(_request(checkout, arch="cpu"), cache, want_table=True)
    assert cpu.table is not None and cpu.table.fields["pre_warm"] == -1
    rocm = prepare(_request(checkout, arch="gfx942"), cache, want_table=True)
    assert rocm.table is not cpu.table and rocm.table is not None and rocm.table.fields["pre_warm"] == 9
    assert len(table_runs) == 2


@pytest.mark.parametrize(("arch", "cuda", "again", "default"), [
    ("sm100", "12.9", False, True),   # the same answers: the table is shared
    ("sm120", "12.9", True, False),   # another compute capability
    ("sm100", "12.4", True, False),   # another CUDA version (is_sm100_supported needs 12.8)
    ("gfx942", "12.9", True, False),  # another platform
])
def test_a_table_that_read_the_device_is_shared_only_where_the_device_answers_alike(
        checkout, table_runs, arch, cuda, again, default):
    _with_device_default(checkout)
    cache = SourceCache()
    first = prepare(_request(checkout), cache, want_table=True)
    assert first.table is not None and first.table.fields["pre_warm"] is True
    req = Request(source=str(checkout), arch=arch, cuda=cuda, model=str(PROFILE), sets=list(SETS))
    # the sm100 case is asked on an equal device (not the same object): still shared
    got = prepare(req, cache, want_table=True)
    assert (got.table is not first.table) == again
    assert len(table_runs) == (2 if again else 1)
    alone = prepare(req, SourceCache(), want_table=True)
    assert alone.table == got.table
    assert got.table is not None and got.table.fields["pre_warm"] is default


def test_an_edited_file_of_the_flag_parser_is_evaluated_again(checkout, table_runs):
    cache = SourceCache()
    prepare(_request(checkout), cache, want_table=True)
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    server_args.write_text(server_args.read_text().replace('"--tp-size", "--tp"', '"--tp-size", "--tensor-parallel"', 1))
    prep = prepare(_request(checkout), cache, want_table=True)
    assert len(table_runs) == 2
    assert prep.table is not None and "--tensor-parallel" in prep.table.by_flag and "--tp" not in prep.table.by_flag


def test_typed_flags_from_the_cache_skip_the_flag_parser_and_match(checkout, table_runs):
    first = pipeline.resolve(_request(checkout))
    assert len(table_runs) == 1
    again = pipeline.resolve(_request(checkout))  # a new process would see the same: a new SourceCache
    assert len(table_runs) == 1
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(first.to_json(), sort_keys=True)
    # the typed values themselves, types included (True is not 1)
    results = ResultCache(stable_tree=True)
    prep = prepare(_request(checkout), SourceCache(), results=results)
    assert len(table_runs) == 1
    assert [(k, type(v), v) for k, v in prep.target.flags.items()] == [
        ("tp_size", int, 4), ("disable_radix_cache", bool, True), ("moe_runner_backend", str, "triton")]


@pytest.mark.parametrize("change", ["sets", "arch", "source"])
def test_typed_flags_miss_when_an_input_changes(checkout, table_runs, change):
    pipeline.resolve(_request(checkout))
    if change == "sets":
        res = pipeline.resolve(_request(checkout, sets=["tp_size=2"]))
        assert res.settings["moe_runner_backend"].config != "triton"
    elif change == "arch":
        pipeline.resolve(_request(checkout, arch="sm120"))
    else:
        # a flag's type changes in the release: --set must be typed again
        server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
        server_args.write_text(server_args.read_text().replace(
            'parser.add_argument("--tp-size", "--tp", type=int,', 'parser.add_argument("--tp-size", "--tp", type=str,', 1))
        pipeline.resolve(_request(checkout))
    assert len(table_runs) == 2


def test_a_bad_set_is_refused_again_not_cached(checkout, table_runs):
    for _ in range(2):
        with pytest.raises(Exception, match="unknown setting"):
            pipeline.resolve(_request(checkout, sets=["no_such_flag=1"]))
    assert len(table_runs) == 2


def test_a_request_without_flags_builds_no_evaluator_on_a_hit(checkout, monkeypatch):
    # nothing to type, but the entry check ran and passed: the key holds all it depends on
    import sglang_audit.resolve.resolver as resolver_module
    from sglang_audit.errors import SourceError

    first = pipeline.resolve(_request(checkout, sets=[]))
    built: list[object] = []
    real = resolver_module.Resolver

    def counted(*args: object, **kwargs: object) -> object:
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(resolver_module, "Resolver", counted)
    again = pipeline.resolve(_request(checkout, sets=[]))
    assert built == []
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(first.to_json(), sort_keys=True)
    # the entry module no longer defines the class: refused again, not served
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    server_args.write_text(server_args.read_text().replace("class ServerArgs:", "class ServerArgz:", 1))
    with pytest.raises(SourceError, match="no ServerArgs class in sglang/srt/server_args.py"):
        pipeline.resolve(_request(checkout, sets=[]))


def test_only_flags_that_come_back_exactly_are_kept(checkout):
    target = dataclasses.replace(prepare(_request(checkout, sets=[]), SourceCache()).target, flags={})
    results = ResultCache()
    key = results.flags_key(target, [], {})
    results.put_flags(key, {"x": (1, 2)}, ())  # a tuple would come back a list
    assert results.get_flags(key) is None
    key = results.flags_key(target, [], {})
    results.put_flags(key, {"x": [1, True], "y": None, "z": 1.5}, ())
    assert results.get_flags(key) == {"x": [1, True], "y": None, "z": 1.5}
    assert _typed_repr(True) != _typed_repr(1)
    assert _typed_repr([1]) != _typed_repr((1,))


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_a_resolution_after_others_on_a_shared_cache_equals_a_fresh_one(release, version):
    # what a shared SourceCache keeps between resolutions (the flag table per device, the
    # IR indexes of resolve/layers.py and resolve/attention.py) must not leak from one target
    # into the next: the last target, resolved after targets of other archs, models, flags and
    # env (a ROCm arch, whose flag table differs on 0.5.10), equals the same target alone
    src = str(release(version).package_dir)

    def req(arch: str, model: str, sets: list[str], env: list[str] | None = None) -> Request:
        return Request(source=src, arch=arch, model=model, sets=sets, env=env or [], use_cache=False,
                       flashinfer_source="none")

    last = req("sm100", "qwen3.5-397b-a17b-nvfp4", ["tp_size=4", "moe_runner_backend=flashinfer_cutlass"])
    shared = SourceCache(use_disk=True)
    for other in (req("gfx942", "qwen3-30b-a3b", []), req("sm120", "gpt-oss-120b", [], ["SGLANG_ENABLE_JIT_DEEPGEMM=0"]),
                  req("sm90", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8", "speculative_algorithm=NEXTN"])):
        pipeline.resolve(other, cache=shared)
    after_others = pipeline.resolve(last, cache=shared).to_json()
    alone = pipeline.resolve(last, cache=SourceCache(use_disk=True)).to_json()
    assert after_others["settings"]["moe_runner_backend"]["layer"] is not None  # the layer stage ran
    assert json.dumps(after_others, sort_keys=True, default=str) == json.dumps(alone, sort_keys=True, default=str)


def test_flags_typed_from_a_file_edited_after_the_key_are_not_kept(checkout, table_runs, monkeypatch):
    # the key hashes the tree before the flag parser reads it: flags typed from an edit made
    # in between must not be served for the content the key describes
    server_args = checkout / "python" / "sglang" / "srt" / "server_args.py"
    original = server_args.read_text()
    real = pipeline.check_entry

    def edited_first(tree, resolver):
        server_args.write_text(original.replace('    tp_size: int = 1', '    tp_size: str = "1"', 1).replace(
            'parser.add_argument("--tp-size", "--tp", type=int,', 'parser.add_argument("--tp-size", "--tp", type=str,', 1))
        return real(tree, resolver)

    monkeypatch.setattr(pipeline, "check_entry", edited_first)
    raced = pipeline.resolve(_request(checkout))
    assert raced.flags["tp_size"] == "4"  # typed by the edited parser
    monkeypatch.setattr(pipeline, "check_entry", real)
    server_args.write_text(original)  # the content the first key hashed
    again = pipeline.resolve(_request(checkout))
    assert len(table_runs) == 2  # typed again, not served from the first run
    assert again.flags["tp_size"] == 4


# ---- the entry module loaded once for the forced choices (resolver.EntrySnapshot) ---------
def _snapshot_runs(targets, cache):
    """Each target resolved in a process forked for it from a state holding the snapshot;
    with whether that resolution took it."""
    from sglang_audit.resolve.resolver import Resolver
    from sglang_audit.resolve.workers import run_all

    def run(target):
        resolver = Resolver(target, cache)
        res = resolver.resolve()
        return res.to_json(), bool(resolver._preloaded)

    return run_all(run, targets, 1, fresh=True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("version", [None, pytest.param("0.5.23", marks=pytest.mark.real_release)])
def test_a_forced_choice_from_the_entry_snapshot_equals_it_resolved_alone(version, request):
    from sglang_audit.resolve.resolver import Resolver, install_snapshot

    field, choices = "moe_runner_backend", ["triton", "flashinfer_cutlass"]
    if version is None:
        request.getfixturevalue("isolated_cache")
        src, model = str(MINI_E2), "deepseek-r1-nvfp4"
    else:
        src, model = str(request.getfixturevalue("release")(version).package_dir), "qwen3.5-397b-a17b-nvfp4"
    cache = SourceCache(use_disk=True)
    prep = prepare(Request(source=src, arch="sm120", model=model, sets=["tp_size=8"], use_cache=False,
                           flashinfer_source="none"), cache)
    targets = [dataclasses.replace(prep.target, flags={**prep.target.flags, field: c}, layer_stages=("moe",))
               for c in choices]
    # a target the snapshot was not made for (another draft directory: the world differs)
    other = dataclasses.replace(targets[0], flags={**targets[0].flags, "speculative_draft_model_path": str(PROFILE)})
    assert install_snapshot(targets[0], cache)
    try:
        snap = _snapshot_runs([*targets, other], cache)
    finally:
        install_snapshot(None)
    alone = [Resolver(t, SourceCache(use_disk=True)).resolve().to_json() for t in [*targets, other]]
    assert [took for _res, took in snap] == [True, True, False]
    for (res, _took), fresh in zip(snap, alone, strict=True):
        assert json.dumps(res, sort_keys=True, default=str) == json.dumps(fresh, sort_keys=True, default=str)
    # the files the snapshot's module bodies read are the resolution's too
    assert any(f["path"].endswith("server_args.py") for f in snap[0][0]["files_read"])


def test_the_snapshot_is_taken_only_in_a_process_forked_for_one_task(isolated_cache):
    from sglang_audit.resolve.resolver import Resolver, install_snapshot

    cache = SourceCache(use_disk=True)
    prep = prepare(Request(source=str(MINI_E2), arch="sm120", model="deepseek-r1-nvfp4", use_cache=False,
                           flashinfer_source="none"), cache)
    assert install_snapshot(prep.target, cache)
    try:
        here = Resolver(prep.target, cache)
        here.resolve()
        assert here._preloaded == ()  # this process goes on: its snapshot must stay unused
    finally:
        install_snapshot(None)

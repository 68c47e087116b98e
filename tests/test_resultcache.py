"""The result cache: a hit only when nothing a resolution depends on has changed."""

from __future__ import annotations

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


def test_a_touched_source_file_misses(setup):
    checkout, model = setup
    results = ResultCache()
    _resolve(checkout, model, results)
    utils = checkout / "python" / "sglang" / "srt" / "utils" / "common.py"
    st = utils.stat()
    os.utime(utils, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    _resolve(checkout, model, results)
    assert results.hits == 0


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
    (entry,) = (isolated_cache / "results").glob("*/*.pickle")
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

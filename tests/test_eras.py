"""The tricky semantics of each resolution structure, on small hand-written checkouts.

Each fixture under ``fixtures/checkouts/`` imitates the *shape* of one structure (its own
code, not SGLang's); sglang-audit interprets it like any release, so these tests show the
mechanisms work in general:

* ``mini_e0``: E0/E1, one monolithic ``__post_init__`` (deprecated booleans, an early
  ``return``, the CUDA version compared as a string).
* ``mini_e4``: E4 hybrid, post-process passes declaring into a stash that is assigned by the
  model-override dispatch and replayed at the end of ``__post_init__``.
* ``mini_e5``: E5/E6 pipeline, ``resolve_once`` → ``run_resolution_pipeline``,
  ``declare_resolution``/``resolution_result``, ``run_hook``, decorator registries filled in
  import order, ``get_platform()`` facts through ``_PLATFORM_PROBES``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sglang_audit.cli.main import main

CHECKOUTS = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts"
MINI_E0 = CHECKOUTS / "mini_e0"
MINI_E4 = CHECKOUTS / "mini_e4"
MINI_E5 = CHECKOUTS / "mini_e5"

SERVER_ARGS = "sglang/srt/server_args.py"
E4_OVERRIDES = "sglang/srt/arg_groups/overrides.py"
E5_OVERRIDES = "sglang/srt/arg_groups/overrides.py"

# The evaluator binds a module-level `from pkg import submodule` lazily, so a package
# __init__ that registers providers by importing its submodules (model_overrides/) never
# runs them: the registry stays empty.


@pytest.fixture(scope="module", autouse=True)
def _shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One private IR cache for this module (the fixtures are small and content-hashed)."""
    cache = tmp_path_factory.mktemp("eras-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLANG_AUDIT_CACHE_DIR", str(cache))
        yield cache


@cache
def _run(source: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["resolve", "-s", source, *args, "--format", "json"])
    return result.exit_code, result.stdout, result.stderr


def resolve(source: Path, *args: str, expect_code: int = 0) -> dict[str, Any]:
    code, out, err = _run(str(source), *args)
    assert code == expect_code, (code, out, err)
    return json.loads(out)


def setting(data: dict[str, Any], name: str) -> dict[str, Any]:
    return data["settings"][name]


def line_of(checkout: Path, rel: str, needle: str) -> int:
    """The 1-based line of the one line in the fixture file that contains ``needle``."""
    lines = (checkout / "python" / rel).read_text(encoding="utf-8").splitlines()
    hits = [i for i, text in enumerate(lines, 1) if needle in text]
    assert len(hits) == 1, (rel, needle, hits)
    return hits[0]


def step_at(chain: list[dict[str, Any]], file: str, line: int) -> dict[str, Any]:
    found = [s for s in chain if s["file"] == file and s["line"] == line]
    assert found, f"no chain step at {file}:{line} in {chain}"
    return found[-1]


# ---- structure detection ----------------------------------------------------------------


@pytest.mark.parametrize(
    "checkout, prefix",
    [(MINI_E0, "E0/E1 "), (MINI_E4, "E4 "), (MINI_E5, "E5 ")],
    ids=["e0", "e4", "e5"],
)
def test_structure_is_detected(checkout: Path, prefix: str) -> None:
    data = resolve(checkout, "-a", "sm90", "-m", "qwen3-30b-a3b")
    assert data["structure"].startswith(prefix), data["structure"]


# ---- E0/E1: monolithic __post_init__ ----------------------------------------------------


def test_e0_deprecated_boolean_maps_to_moe_runner_backend() -> None:
    data = resolve(MINI_E0, "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--set", "enable_flashinfer_cutlass_moe=true", "--set", "quantization=modelopt_fp4")
    moe = setting(data, "moe_runner_backend")
    assert moe["config"] == "flashinfer_cutlass" and moe["status"] == "resolved"
    line = line_of(MINI_E0, SERVER_ARGS, 'self.moe_runner_backend = "flashinfer_cutlass"')
    deciding = moe["chain"][-1]
    assert (deciding["file"], deciding["line"]) == (SERVER_ARGS, line)
    assert deciding["guard"] == "self.enable_flashinfer_cutlass_moe"
    # the user's deprecated flag the decision's guard read is in the chain, as an input
    assert [s["role"] for s in moe["chain"] if s["kind"] == "flag" and s["value"] is True] == ["input"]
    assert moe["deciding"]["line"] == line


def test_e0_deprecated_boolean_reaches_the_release_assert() -> None:
    data = resolve(MINI_E0, "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--set", "enable_flashinfer_cutlass_moe=true", expect_code=1)
    rejected = data["rejected"]
    assert rejected["exception"] == "AssertionError"
    assert rejected["file"] == SERVER_ARGS
    assert rejected["line"] == line_of(MINI_E0, SERVER_ARGS, 'assert self.quantization == "modelopt_fp4"')
    assert setting(data, "moe_runner_backend")["status"] == "rejected"


@pytest.mark.parametrize(
    "cuda, moe, attention",
    [
        ("12.9", "flashinfer_trtllm", "trtllm_mla"),
        # "12.10" >= "12.8" is False as strings: the release's predicate says no
        ("12.10", "auto", "triton"),
    ],
)
def test_e0_string_cuda_compare(cuda: str, moe: str, attention: str) -> None:
    data = resolve(MINI_E0, "-a", "sm100", "--cuda", cuda, "-m", "deepseek-r1-nvfp4")
    assert data["device"]["cuda"] == cuda
    assert setting(data, "moe_runner_backend")["config"] == moe
    assert setting(data, "attention_backend")["config"] == attention
    assert setting(data, "moe_runner_backend")["status"] == "resolved"
    chain = setting(data, "attention_backend")["chain"]
    written = line_of(MINI_E0, SERVER_ARGS, f'self.attention_backend = "{attention}"')
    step = step_at(chain, SERVER_ARGS, written)
    assert step["value"] == attention
    # the predicate's own string comparison is in the evidence, with its outcome
    utils = "sglang/srt/layers/utils.py"
    compare = step_at(chain, utils, line_of(MINI_E0, utils, 'torch.version.cuda >= "12.8"'))
    assert compare["value"] is (cuda == "12.9")
    if cuda == "12.9":
        assert "is_sm100_supported()" in step["guard"]
        deciding = setting(data, "moe_runner_backend")["chain"][-1]
        assert deciding["line"] == line_of(MINI_E0, SERVER_ARGS, '                self.moe_runner_backend = "flashinfer_trtllm"')
        assert "is_sm100_supported()" in deciding["guard"]
    else:
        assert "not (is_sm100_supported())" in step["guard"] and "not (is_sm90_supported())" in step["guard"]


def test_e0_early_return_skips_the_rest_of_post_init() -> None:
    data = resolve(MINI_E0, "-a", "sm100", "-m", "deepseek-r1-nvfp4", "--set", "load_format=dummy", "--set", "speculative_algorithm=NEXTN")
    # written after the return: never reached
    assert setting(data, "moe_runner_backend")["config"] == "auto"
    assert setting(data, "attention_backend")["config"] is None
    # written before the return: kept
    assert setting(data, "sampling_backend")["config"] == "flashinfer"
    spec = setting(data, "speculative_algorithm")
    assert spec["config"] == "EAGLE" and spec["status"] == "resolved"
    step = step_at(spec["chain"], SERVER_ARGS, line_of(MINI_E0, SERVER_ARGS, 'self.speculative_algorithm = "EAGLE"'))
    assert step["guard"] == 'self.speculative_algorithm == "NEXTN"'


# ---- E4: declaration stash --------------------------------------------------------------

def e4_replay_line() -> int:
    """materialize_declarations' write of each declared field onto ServerArgs."""
    return line_of(MINI_E4, E4_OVERRIDES, "setattr(server_args, field, value)")


def test_e4_declaration_beats_a_later_direct_write() -> None:
    env = ("--env", "SGLANG_FIXTURE_FORCE_TRITON=1")
    data = resolve(MINI_E4, "-a", "sm100", "-m", "deepseek-r1-nvfp4", *env)
    moe = setting(data, "moe_runner_backend")
    # the provider declared flashinfer_trtllm; the direct `= "triton"` afterwards is
    # overwritten when the stash is replayed at the end of __post_init__
    assert moe["config"] == "flashinfer_trtllm" and moe["status"] == "resolved"
    last = moe["chain"][-1]
    assert (last["file"], last["line"], last["value"]) == (E4_OVERRIDES, e4_replay_line(), "flashinfer_trtllm")
    # with nothing declared for the field, the direct write stands
    plain = setting(resolve(MINI_E4, "-a", "sm100", "-m", "qwen3-30b-a3b", *env), "moe_runner_backend")
    assert plain["config"] == "triton"
    deciding = plain["chain"][-1]
    assert deciding["file"] == SERVER_ARGS
    assert deciding["line"] == line_of(MINI_E4, SERVER_ARGS, 'self.moe_runner_backend = "triton"')
    assert 'get_bool_env_var("SGLANG_FIXTURE_FORCE_TRITON")' in deciding["guard"]


@pytest.mark.parametrize(
    "flag, expected",
    [
        # declared at a pass slot ahead of the dispatch, which assigns a new stash: lost
        ("enable_flashinfer_cutlass_moe", "auto"),
        # declared at a slot after the dispatch: kept
        ("enable_flashinfer_trtllm_moe", "flashinfer_trtllm"),
    ],
)
def test_e4_assigning_the_stash_discards_earlier_declarations(flag: str, expected: str) -> None:
    data = resolve(MINI_E4, "-a", "sm90", "-m", "qwen3-30b-a3b", "--set", f"{flag}=true")
    moe = setting(data, "moe_runner_backend")
    assert moe["config"] == expected and moe["status"] == "resolved"
    # the speculative default copies the resolved value (a pass after both slots)
    spec = setting(data, "speculative_moe_runner_backend")
    assert spec["config"] == expected
    assert spec["chain"][-1]["file"] == E4_OVERRIDES and spec["chain"][-1]["line"] == e4_replay_line()
    if expected == "auto":
        assert all(step["value"] != "flashinfer_cutlass" for step in moe["chain"])
    else:
        assert (moe["chain"][-1]["file"], moe["chain"][-1]["line"]) == (E4_OVERRIDES, e4_replay_line())


def test_e4_a_view_is_a_snapshot_taken_before_the_pass() -> None:
    data = resolve(MINI_E4, "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    # the pass declared flashinfer_cutlass on SM120 ...
    assert setting(data, "moe_runner_backend")["config"] == "flashinfer_cutlass"
    assert setting(data, "quantization")["config"] == "modelopt_fp4"
    # ... which the view built before it does not show: its branch is not taken
    attention = setting(data, "attention_backend")
    assert attention["config"] is None and attention["status"] == "resolved"
    default = attention["chain"][-1]
    assert default["kind"] == "default" and default["file"] == SERVER_ARGS
    assert default["line"] == line_of(MINI_E4, SERVER_ARGS, "attention_backend: Optional[str] = None")
    # while a pass run later gets a fresh view that does
    spec = setting(data, "speculative_moe_runner_backend")
    assert spec["config"] == "flashinfer_cutlass"
    assert (spec["chain"][-1]["file"], spec["chain"][-1]["line"]) == (E4_OVERRIDES, e4_replay_line())


@pytest.mark.parametrize(
    "algorithm, draft_moe",
    [
        # the MoE rule tests == "EAGLE" before the speculative hook renames NEXTN
        ("NEXTN", "flashinfer_cutlass"),
        ("EAGLE", "triton"),
    ],
)
def test_e4_nextn_becomes_eagle_only_after_the_moe_rules(algorithm: str, draft_moe: str) -> None:
    data = resolve(MINI_E4, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", f"speculative_algorithm={algorithm}")
    spec_algo = setting(data, "speculative_algorithm")
    assert spec_algo["config"] == "EAGLE" and spec_algo["status"] == "resolved"
    hook = "sglang/srt/arg_groups/speculative_hook.py"
    renamed = spec_algo["chain"][-1]
    assert renamed["file"] == hook
    assert renamed["line"] == line_of(MINI_E4, hook, "server_args.speculative_algorithm = _canonical_algorithm(")
    spec_moe = setting(data, "speculative_moe_runner_backend")
    assert spec_moe["config"] == draft_moe and spec_moe["status"] == "resolved"
    assert (spec_moe["chain"][-1]["file"], spec_moe["chain"][-1]["line"]) == (E4_OVERRIDES, e4_replay_line())
    assert data["model"]["draft_architecture"] == "DeepseekV3ForCausalLM"


# ---- E5/E6: pipeline --------------------------------------------------------------------


def e5_declared_line() -> int:
    """resolution_result's return of the last declaration."""
    return line_of(MINI_E5, E5_OVERRIDES, "            return declared[field]")


def assert_read_from_declaration(entry: dict[str, Any], value: Any) -> None:
    last = entry["chain"][-1]
    assert (last["file"], last["line"], last["value"]) == (E5_OVERRIDES, e5_declared_line(), value)
    assert last["guard"] == "field in declared"


def test_e5_registration_order_of_model_overrides_decides(tmp_path: Path) -> None:
    # model_overrides/__init__.py imports moe_defaults, then qwen3_moe: both declare
    # moe_runner_backend for Qwen3MoeForCausalLM, the later registration wins
    data = resolve(MINI_E5, "-a", "sm90", "-m", "qwen3-30b-a3b")
    moe = setting(data, "moe_runner_backend")
    assert moe["config"] == "triton_kernel" and moe["status"] == "resolved"
    assert_read_from_declaration(moe, "triton_kernel")
    # the same checkout with the two imports swapped
    swapped = tmp_path / "mini_e5_swapped"
    shutil.copytree(MINI_E5, swapped)
    init = swapped / "python" / "sglang" / "srt" / "arg_groups" / "model_overrides" / "__init__.py"
    lines = init.read_text(encoding="utf-8").splitlines(keepends=True)
    moe_i = next(i for i, t in enumerate(lines) if "import moe_defaults" in t)
    qwen_i = next(i for i, t in enumerate(lines) if "import qwen3_moe" in t)
    lines[moe_i], lines[qwen_i] = lines[qwen_i], lines[moe_i]
    init.write_text("".join(lines), encoding="utf-8")
    moe = setting(resolve(swapped, "-a", "sm90", "-m", "qwen3-30b-a3b"), "moe_runner_backend")
    assert moe["config"] == "triton"


@pytest.mark.parametrize(
    "arch, moe",
    [
        ("sm120", "flashinfer_cutlass"),
        ("sm121", "flashinfer_cutlass"),
        ("12.1", "flashinfer_cutlass"),
        ("sm100", "flashinfer_trtllm"),
        ("sm90", "auto"),
    ],
)
def test_e5_platform_fact_is_sm120_through_probe_table(arch: str, moe: str) -> None:
    data = resolve(MINI_E5, "-a", arch, "-m", "deepseek-r1-nvfp4")
    entry = setting(data, "moe_runner_backend")
    assert entry["config"] == moe and entry["status"] == "resolved"
    assert setting(data, "quantization")["config"] == "modelopt_fp4"
    if moe == "auto":
        # nothing declared: the raw input, read back through resolution_result
        last = entry["chain"][-1]
        assert last["file"] == E5_OVERRIDES and last["value"] == "auto"
        assert last["line"] == line_of(MINI_E5, E5_OVERRIDES, "return raw[field]")
    else:
        assert_read_from_declaration(entry, moe)


@pytest.mark.parametrize(
    "arch, attention",
    [
        # the provider registered in overrides.py after the package import runs last:
        # its fa3 replaces the package provider's triton on Hopper
        ("sm90", "fa3"),
        # where it declares nothing, the package provider's value stands
        pytest.param("sm100", "trtllm_mla"),
        pytest.param("sm120", "triton"),
    ],
)
def test_e5_provider_registered_after_the_package_import_runs_last(arch: str, attention: str) -> None:
    data = resolve(MINI_E5, "-a", arch, "-m", "deepseek-r1-nvfp4")
    entry = setting(data, "attention_backend")
    assert entry["config"] == attention and entry["status"] == "resolved"
    assert_read_from_declaration(entry, attention)


def test_e5_live_view_sees_declarations_made_after_it_was_built() -> None:
    data = resolve(MINI_E5, "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    fp4 = setting(data, "fp4_gemm_runner_backend")
    assert fp4["config"] == "flashinfer_cutlass" and fp4["status"] == "resolved"
    assert_read_from_declaration(fp4, "flashinfer_cutlass")
    # on SM100 the pass declares another runner, so the live view's branch is not taken
    sm100 = setting(resolve(MINI_E5, "-a", "sm100", "-m", "deepseek-r1-nvfp4"), "fp4_gemm_runner_backend")
    assert sm100["config"] == "auto"
    assert sm100["chain"][-1]["line"] == line_of(MINI_E5, E5_OVERRIDES, "return raw[field]")


@pytest.mark.parametrize("algorithm, draft_moe", [("NEXTN", "flashinfer_cutlass"), ("EAGLE", "triton")])
def test_e5_nextn_declared_as_eagle_after_the_moe_step(algorithm: str, draft_moe: str) -> None:
    data = resolve(MINI_E5, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", f"speculative_algorithm={algorithm}")
    spec_algo = setting(data, "speculative_algorithm")
    assert spec_algo["config"] == "EAGLE"
    assert_read_from_declaration(spec_algo, "EAGLE")
    spec_moe = setting(data, "speculative_moe_runner_backend")
    assert spec_moe["config"] == draft_moe and spec_moe["status"] == "resolved"
    assert_read_from_declaration(spec_moe, draft_moe)

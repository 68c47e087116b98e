"""The field-case corpus (tests/field/cases/): public reports of a user's SGLang version, GPU,
launch command and what happened, each with the verdict `check` must give.

* in-scope failures: every rule the case names is reported (error or warning);
* known-good deployments (the configuration that worked in the same thread): no error finding;
* recall = warned in-scope failures / in-scope failures (>= 80 %), false alarms = known-good
  deployments with an error finding (0), over the whole corpus.

The cases run against the real release the user reported (`real_release`: the wheel is
downloaded once into the user cache dir).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import shared

sys.path.insert(0, str(Path(__file__).resolve().parent / "field"))

from corpus import (  # noqa: E402
    MODELS_DIR,
    PROFILES_DIR,
    Case,
    CaseError,
    load_case,
    load_cases,
    normalise_launch,
    run_case,
)

from sglang_audit.rules.knownbad import load_rules  # noqa: E402

CASES = load_cases()
RULE_IDS = {r.id for r in load_rules()}


# ---- the corpus itself ---------------------------------------------------------------------


def test_corpus_size_and_threads():
    threads = {c.thread for c in CASES}
    assert len(CASES) >= 40, len(CASES)
    assert len(threads) >= 30, len(threads)
    assert any(c.kind == "known_good" for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_is_well_formed(case: Case):
    assert set(case.expect_rules) <= RULE_IDS | {"SGA001"}, case.expect_rules
    assert (MODELS_DIR / case.model / "config.json").is_file() or (PROFILES_DIR / case.model / "config.json").is_file()
    command, _ = normalise_launch(case.launch)
    assert command.startswith("--") or " --" in f" {command}"


def test_bad_case_files_are_refused(tmp_path):
    good = (sorted(CASES, key=lambda c: c.id)[0]).path.read_text()
    for old, new, field in [
        ("kind: ", "kind: maybe\nx_kind: ", "kind"),
        ("thread: ", "thread: nope\nx_thread: ", "thread"),
    ]:
        p = tmp_path / "c.yaml"
        p.write_text(good.replace(old, new, 1))
        with pytest.raises(CaseError, match=field):
            load_case(p)


def test_a_documentation_page_is_a_known_good_recipe_at_its_url(tmp_path):
    doc = next(c for c in CASES if c.thread.startswith("docs:")).path.read_text()
    p = tmp_path / "c.yaml"
    for old, new, message in [
        ("url: https://", "url: https://example.com/elsewhere\nx_url: https://", "does not point at"),
        ("kind: known_good", "kind: failure", "documentation page is a known-good recipe"),
    ]:
        p.write_text(doc.replace(old, new, 1).replace("x_url: ", "# x_url: "))
        with pytest.raises(CaseError, match=message):
            load_case(p)


# ---- launch normalisation (minimal; the parser itself learns wrappers in issue #20) ---------


def test_normalise_joins_continuations_and_drops_docker_wrapper():
    text = (
        "docker run --gpus all --shm-size 32g -e NCCL_DEBUG=INFO \\\n"
        "  --env SGLANG_ENABLE_JIT_DEEPGEMM=0 lmsysorg/sglang:v0.5.10 \\\n"
        "  python3 -m sglang.launch_server --model-path nvidia/X --tp 8 \\\n"
        "    --moe-runner-backend flashinfer_cutlass\n"
    )
    command, env = normalise_launch(text)
    assert command == "--model-path nvidia/X --tp 8 --moe-runner-backend flashinfer_cutlass"
    assert env == {"NCCL_DEBUG": "INFO", "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}


def test_normalise_carries_env_prefixes_and_sglang_serve():
    command, env = normalise_launch("CUDA_VISIBLE_DEVICES=0,1 SGLANG_X=1 python -m sglang.launch_server --tp 2")
    assert (command, env) == ("--tp 2", {"CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_X": "1"})
    command, env = normalise_launch("sglang serve --model-path m --attention-backend triton")
    assert (command, env) == ("--model-path m --attention-backend triton", {})
    with pytest.raises(CaseError):
        normalise_launch("vllm serve m")


# ---- the verdicts on the real releases -----------------------------------------------------


@functools.cache
def _outcome(case_id: str):
    from sglang_audit.source.locate import locate_source

    case = next(c for c in CASES if c.id == case_id)
    tree = locate_source(f"sglang=={case.check_version}")
    return run_case(case, str(tree.package_dir), cache=shared.cache_for(str(tree.package_dir)))


@pytest.mark.real_release
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_field_case_verdict(case: Case):
    if case.miss:
        pytest.skip(f"known miss (counted against recall): {case.miss}")
    out = _outcome(case.id)
    if case.kind == "known_good" and case.in_scope:
        assert out.errors == (), f"false alarm on a known-good deployment: {out.findings}"
    elif case.in_scope:
        assert out.warned, f"expected {case.expect_rules}, got {out.findings} (undecided {out.undecided})"
    else:
        # out of scope: nothing to assert about warnings, but the tool must not be wrong about
        # what it does claim: no rule the case names as inapplicable
        assert set(case.expect_rules) <= {r for r, _ in out.findings}


@pytest.mark.real_release
def test_field_recall_and_false_alarms():
    outs = [_outcome(c.id) for c in CASES]
    failures = [o for o in outs if o.case.kind == "failure" and o.case.in_scope]
    good = [o for o in outs if o.case.kind == "known_good" and o.case.in_scope]
    recall = sum(o.warned for o in failures) / len(failures)
    false_alarms = [o.case.id for o in good if o.errors]
    assert recall >= 0.8, recall
    assert false_alarms == []

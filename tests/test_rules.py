"""Known-bad rules as data: every shipped rule's inline examples (the Fixit pattern), the
rule-file validator's one-line errors, three-valued matching over resolved facts, and code
fingerprints read from release source text."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import shared
import yaml

from sglang_audit.result import (
    Candidate,
    ChainStep,
    ModelSummary,
    Rejection,
    Resolution,
    Setting,
    UnknownValue,
)
from sglang_audit.rules.knownbad import (
    Fingerprint,
    RuleError,
    check_example,
    check_resolution,
    load_rule_file,
    load_rules,
    parse_rule,
    probe_fingerprint,
)
from sglang_audit.shipped import known_bad_dir

RULES = load_rules()
ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2" / "python"
FAMILIES = {"1": "fp4-gemm", "2": "moe", "3": "flashinfer-version", "4": "attention", "5": "model-specific"}


def _examples():
    for rule in RULES:
        for kind, items in (("flag", rule.examples_flag), ("pass", rule.examples_pass)):
            for i, example in enumerate(items):
                yield pytest.param(rule, kind, example, id=f"{rule.id}-{kind}{i}")


@pytest.mark.parametrize("rule, kind, example", list(_examples()))
def test_rule_example(rule, kind, example):
    # a flag example must be decided True, a pass example decided False (not merely undecided)
    assert check_example(rule, example) is (kind == "flag"), f"{rule.path}: {kind} example {example}"


def test_at_least_15_shipped_rules_in_every_family():
    assert len(RULES) >= 15
    assert {r.id[3] for r in RULES} == set(FAMILIES)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_shipped_rule_conventions(rule):
    assert re.fullmatch(r"SGA[1-5]\d\d", rule.id)
    assert Path(rule.path).name == f"{rule.id}-{rule.slug}.yaml"
    assert rule.family == FAMILIES[rule.id[3]]
    assert rule.examples_flag and rule.examples_pass
    # each rule records what was checked in which release's code
    assert re.search(r"\b0\.\d+\.\d+\b", rule.checked), rule.checked
    assert rule.fix and rule.sources


def test_shipped_rules_parse_as_plain_yaml_mappings():
    for path in sorted(known_bad_dir().glob("*.yaml")):
        assert isinstance(yaml.safe_load(path.read_text()), dict)


# ---- validator ---------------------------------------------------------------------------

GOOD = """\
id: XYZ901
slug: my-rule
severity: warning
confidence: low
title: a title
message: "{setting} is {value} on {arch}"
fix: do something else
sources: [acme/repo#1]
subject: moe_runner_backend
when:
  all:
    - arch_family: sm12x
    - fact: subject
      eq: triton
checked: read nothing in 0.0.0
examples:
  flag: [{arch: sm120, settings.moe_runner_backend: triton}]
  pass: [{arch: sm100, settings.moe_runner_backend: triton}]
"""


def _write(tmp_path: Path, text: str, name: str = "XYZ901-my-rule.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_user_rule_loads(tmp_path):
    rule = load_rule_file(_write(tmp_path, GOOD))
    assert rule.id == "XYZ901" and rule.subjects == ("moe_runner_backend",)
    assert check_example(rule, rule.examples_flag[0]) is True


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda t: t.replace("severity: warning", "severity: fatal"), "severity"),
        (lambda t: t.replace("id: XYZ901", "id: nope"), "id"),
        (lambda t: t.replace("slug: my-rule", "slug: My Rule"), "slug"),
        (lambda t: t.replace("fix: do something else\n", ""), "fix"),
        (lambda t: t.replace("acme/repo#1", "issue 1"), "sources[0]"),
        (lambda t: t.replace("subject: moe_runner_backend", "subject: moe_backend"), "subject"),
        (lambda t: t.replace("fact: subject", "fact: settings.nonexistent"), "when.all[1].fact"),
        (lambda t: t.replace("fact: subject", "fact: model.colour"), "when.all[1].fact"),
        (lambda t: t.replace("eq: triton", "equals: triton"), "when.all[1]"),
        (lambda t: t.replace("- arch_family: sm12x", "- release: 'not a spec'"), "when.all[0].release"),
        (lambda t: t.replace("- arch_family: sm12x", "- code: missing_fp"), "when.all[0].code"),
        (lambda t: t.replace("eq: triton", "regex: '('"), "when.all[1].regex"),
        (lambda t: t.replace("  pass: [{arch: sm100, settings.moe_runner_backend: triton}]\n", ""), "examples.pass"),
        (lambda t: t.replace("  flag: [{arch: sm120,", "  flag: [{arch: sm120, settings.bogus: 1,"), "examples.flag[0].settings.bogus"),
        (lambda t: t + "colour: red\n", "colour"),
    ],
)
def test_bad_rule_file_is_one_line_error_naming_file_and_field(tmp_path, change, field):
    path = _write(tmp_path, change(GOOD))
    with pytest.raises(RuleError) as exc:
        load_rule_file(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: {field}:"), msg


def test_bad_yaml_syntax_names_file_and_line(tmp_path):
    path = _write(tmp_path, "id: [unclosed\n")
    with pytest.raises(RuleError, match=re.escape(str(path)) + r": line \d+ not valid YAML"):
        load_rule_file(path)


def test_bad_fingerprint_regex(tmp_path):
    text = GOOD + textwrap.dedent("""\
        fingerprints:
          fix_present:
            file: sglang/srt/x.py
            regex: '(unclosed'
        """)
    with pytest.raises(RuleError, match=r": fingerprints\.fix_present\.regex: bad regex"):
        load_rule_file(_write(tmp_path, text))


def test_duplicate_id_across_dirs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _write(tmp_path / "a", GOOD)
    _write(tmp_path / "b", GOOD)
    with pytest.raises(RuleError, match=r"id: XYZ901 is already defined in"):
        load_rules([tmp_path / "a", tmp_path / "b"], shipped=False)


def test_user_dir_adds_to_shipped(tmp_path):
    _write(tmp_path, GOOD)
    ids = [r.id for r in load_rules([tmp_path])]
    assert "XYZ901" in ids and "SGA101" in ids


# ---- matching over a Resolution -----------------------------------------------------------


def _resolution(settings: dict[str, Setting], *, arch: str = "sm120", major: int = 12, quant: object = "modelopt_fp4",
                flags: dict | None = None, rejected: Rejection | None = None, package_dir: str | None = None) -> Resolution:
    return Resolution(
        source={"version": "0.5.13", "flashinfer": "0.6.12", "origin": "test", "package_dir": package_dir},
        structure="test", device={"platform": "cuda", "arch": arch, "major": major, "minor": 0, "cuda": "12.9"},
        model=ModelSummary("m", "/m", "Qwen3_5MoeForConditionalGeneration", quant, "modelopt"),
        flags=flags or {}, env={}, rejected=rejected, settings=settings,
    )


def _fp4(runtime: object, config: object = "auto") -> Setting:
    chain = (
        ChainStep("sglang/srt/server_args.py", 590, "default", "auto", "fp4_gemm_runner_backend default", "config", "default"),
        ChainStep("sglang/srt/layers/quantization/fp4_utils.py", 160, 'backend == "auto"', runtime, 'backend = "x"', "runtime", "write", "decision"),
    )
    return Setting("fp4_gemm_runner_backend", config, runtime, "resolved", chain)


def _rule(rid: str):
    return next(r for r in RULES if r.id == rid)


def test_finding_carries_setting_value_chain_and_deciding_line(tmp_path):
    res = _resolution({"fp4_gemm_runner_backend": _fp4("flashinfer_cutlass")}, package_dir=str(tmp_path / "sglang"))
    result = check_resolution(res, [_rule("SGA101")])
    (f,) = result.findings
    assert (f.rule_id, f.severity, f.setting, f.value) == ("SGA101", "error", "fp4_gemm_runner_backend", "flashinfer_cutlass")
    assert (f.deciding.file, f.deciding.line) == ("sglang/srt/layers/quantization/fp4_utils.py", 160)
    assert f.chain and f.sources == ("sgl-project/sglang#20043", "sgl-project/sglang#20047")
    assert "flashinfer_cutlass" in f.message and "sm120" in f.message
    assert [(c.fingerprint, c.found) for c in f.code] == [("pr20047_sm120_cudnn", False)]
    assert result.exit_code("error") == 1 and result.exit_code("never") == 0


def test_fix_fingerprint_in_the_release_suppresses_the_rule(tmp_path):
    fp4 = tmp_path / "sglang" / "srt" / "layers" / "quantization"
    fp4.mkdir(parents=True)
    (fp4 / "fp4_utils.py").write_text(
        (MINI_E2 / "sglang" / "srt" / "layers" / "quantization" / "fp4_utils.py").read_text())
    res = _resolution({"fp4_gemm_runner_backend": _fp4("flashinfer_cutlass")}, package_dir=str(tmp_path / "sglang"))
    assert check_resolution(res, [_rule("SGA101")]).findings == ()


def test_unknown_value_decided_when_all_running_candidates_agree():
    # candidates where SGLang rejects the configuration are ignored: nothing runs there
    unknown = UnknownValue("differs", (Candidate("flashinfer_cutlass", ("a",)), Candidate("rejected: boom", ("b",))))
    res = _resolution({"fp4_gemm_runner_backend": Setting("fp4_gemm_runner_backend", "auto", unknown, "unknown")})
    result = check_resolution(res, [_rule("SGA103"), _rule("SGA102")])
    assert result.findings == () and _by_rules(result) == []
    # the setting itself stays unknown: never a clean check (issue 23)
    assert [(u.rule_id, u.setting) for u in result.undecided] == [("SGA002", "fp4_gemm_runner_backend")]
    res = _resolution({"fp4_gemm_runner_backend": Setting("fp4_gemm_runner_backend", "auto", UnknownValue(
        "differs", (Candidate("flashinfer_trtllm"),)), "unknown")})
    assert [f.rule_id for f in check_resolution(res, [_rule("SGA103")]).findings] == ["SGA103"]


def test_unknown_value_with_disagreeing_candidates_is_undecided():
    unknown = UnknownValue("torch.ops unknown", (Candidate("flashinfer_trtllm"), Candidate("flashinfer_cudnn")))
    res = _resolution({"fp4_gemm_runner_backend": Setting("fp4_gemm_runner_backend", "auto", unknown, "unknown")})
    result = check_resolution(res, [_rule("SGA103")])
    assert result.findings == ()
    (u,) = _by_rules(result)
    assert u.rule_id == "SGA103" and u.facts == (("settings.fp4_gemm_runner_backend", "torch.ops unknown"),)
    assert result.exit_code("error") == 3 and result.exit_code("never") == 0


def test_a_decided_false_conjunct_decides_despite_unknowns():
    # arch is sm100: SGA103 cannot fire whatever the unknown FP4 backend is
    unknown = UnknownValue("?", (Candidate("flashinfer_trtllm"), Candidate("flashinfer_cudnn")))
    res = _resolution({"fp4_gemm_runner_backend": Setting("fp4_gemm_runner_backend", "auto", unknown, "unknown")},
                      arch="sm100", major=10)
    result = check_resolution(res, [_rule("SGA103")])
    assert result.findings == () and _by_rules(result) == []


def _by_rules(result):
    """Undecided rules, without the SGA002 entry every unknown setting gets."""
    return [u for u in result.undecided if u.rule_id != "SGA002"]


def test_fact_the_resolution_does_not_provide_makes_rule_undecided():
    attn = Setting("attention_backend", "trtllm_mha", None, "resolved")
    none = Setting("prefill_attention_backend", None, None, "resolved")
    res = _resolution({"attention_backend": attn, "prefill_attention_backend": none})
    result = check_resolution(res, [_rule("SGA402")])
    assert [u.facts[0][0] for u in result.undecided] == ["model.kv_cache_quant_algo"]
    # an explicit KV dtype decides it
    res = _resolution({"attention_backend": attn, "prefill_attention_backend": none}, flags={"kv_cache_dtype": "bf16"})
    result = check_resolution(res, [_rule("SGA402")])
    assert result.findings == () and result.undecided == ()
    res = _resolution({"attention_backend": attn, "prefill_attention_backend": none}, flags={"kv_cache_dtype": "fp8_e4m3"})
    assert [(f.rule_id, f.setting) for f in check_resolution(res, [_rule("SGA402")]).findings] == [("SGA402", "attention_backend")]


def test_rejection_is_reported_as_sga001():
    rej = Rejection("no no", "sglang/srt/server_args.py", 42, "ValueError")
    res = _resolution({}, rejected=rej)
    result = check_resolution(res, RULES)
    (f,) = result.findings
    assert f.rule_id == "SGA001" and f.severity == "error" and "no no" in f.message
    assert (f.deciding.file, f.deciding.line) == ("sglang/srt/server_args.py", 42)
    assert result.exit_code("error") == 1


def test_target_and_draft_subjects_give_one_finding_each():
    moe = Setting("moe_runner_backend", "flashinfer_trtllm", "flashinfer_trtllm", "resolved")
    spec = Setting("speculative_moe_runner_backend", "flashinfer_trtllm", "flashinfer_trtllm", "resolved")
    res = _resolution({"moe_runner_backend": moe, "speculative_moe_runner_backend": spec})
    result = check_resolution(res, [_rule("SGA201")])
    assert [(f.rule_id, f.setting) for f in result.findings] == [
        ("SGA201", "moe_runner_backend"), ("SGA201", "speculative_moe_runner_backend")]
    assert "--speculative-moe-runner-backend" in result.findings[1].fix


# ---- code fingerprints --------------------------------------------------------------------


def test_probe_fingerprint_reads_text_and_reports_line(tmp_path):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "a.py").write_text("x = 1\n\nif is_sm120_supported():\n    backend = 'flashinfer_cudnn'\n")
    fp = next(f for f in _rule("SGA101").fingerprints)
    fp = Fingerprint(fp.id, "sglang/a.py", fp.regex, None, fp.description)
    ev = probe_fingerprint(tmp_path, fp)
    assert ev.found and ev.line == 3
    assert not probe_fingerprint(tmp_path, Fingerprint("x", "sglang/missing.py", None, "y")).found
    # never outside the release tree
    assert not probe_fingerprint(tmp_path / "sglang", Fingerprint("x", "sglang/../../etc/passwd", None, "root")).found


def test_same_fingerprint_id_in_two_rules_keeps_each_shape(tmp_path, monkeypatch):
    """Fingerprint ids are per rule: two rules may give one id to different shapes. Each
    file is read once per deployment, however many fingerprints look at it."""
    from sglang_audit.rules import facts as rules_mod  # where the fact derivation lives

    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "a.py").write_text("one = 1\n")
    reads: list[Path] = []
    real = rules_mod._read_release_file
    monkeypatch.setattr(rules_mod, "_read_release_file", lambda root, path: reads.append(path) or real(root, path))
    texts: dict = {}
    facts = rules_mod.Facts({}, lambda fp: probe_fingerprint(tmp_path, fp, texts))
    present = Fingerprint("shape", "sglang/a.py", None, "one = 1")
    absent = Fingerprint("shape", "sglang/a.py", None, "two = 2")
    assert facts.code(present) is True
    assert facts.code(absent) is False
    assert len(reads) == 1


def test_sga101_fingerprint_matches_the_mini_e2_shape():
    fp = _rule("SGA101").fingerprints[0]
    assert probe_fingerprint(MINI_E2, fp).found


@pytest.mark.real_release
@pytest.mark.parametrize("version, present", [("0.5.10", True), ("0.5.13", False)])
def test_sga101_fingerprint_on_real_releases(release, version, present):
    tree = release(version)
    ev = probe_fingerprint(Path(tree.package_dir).parent, _rule("SGA101").fingerprints[0])
    assert ev.found is present
    if present:
        text = (Path(tree.package_dir) / "srt/layers/quantization/fp4_utils.py").read_text().splitlines()
        assert "is_sm120_supported()" in text[ev.line - 1]


@pytest.mark.real_release
@pytest.mark.parametrize(
    "version, arch, model, flags, expected",
    [
        # pins flashinfer 0.6.17 (tile-192 NaN); DeepSeek NVFP4 on SM100 resolves to flashinfer_trtllm
        ("0.5.18", "sm100", "deepseek-r1-nvfp4", ["tp_size=8"], {("SGA301", "moe_runner_backend")}),
        # pins flashinfer 0.6.14 (SM103 hang); the hybrid-GDN SM100 allow-list lacks flashinfer
        ("0.5.16", "sm103", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8", "attention_backend=flashinfer"],
         {("SGA302", None), ("SGA403", "attention_backend")}),
    ],
)
def test_flashinfer_and_attention_rules_on_real_releases(release, version, arch, model, flags, expected):
    from sglang_audit.resolve.pipeline import Request

    tree = release(version)
    res = shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=list(flags)))
    result = check_resolution(res, RULES)
    # the derived SGA003 (the layers raising) is not what these rules decide
    assert {(f.rule_id, f.setting) for f in result.findings if f.rule_id != "SGA003"} == expected
    assert _by_rules(result) == []  # SGA002: the NVFP4 MoE layers' outcome is not decidable here


# ---- cuDNN and checkpoint facts -------------------------------------------------------------


def _cudnn_resolution(cudnn: int | None) -> Resolution:
    res = _resolution({"fp4_gemm_runner_backend": _fp4("flashinfer_cudnn")})
    device = dict(res.device, cudnn=cudnn)
    return Resolution(res.source, res.structure, device, res.model, res.flags, res.env, res.rejected, res.settings)


@pytest.mark.parametrize("cudnn, expected", [(None, {"SGA104"}), (91002, set()), (90701, {"SGA105"}), (91500, set())])
def test_cudnn_version_is_honoured(cudnn, expected):
    # unknown cuDNN: SGA104 reminds (warning); given: SGA105 judges it against 9.10.2
    result = check_resolution(_cudnn_resolution(cudnn), [_rule("SGA104"), _rule("SGA105")])
    assert {f.rule_id for f in result.findings} == expected and result.undecided == ()
    if expected == {"SGA105"}:
        assert "9.7.1" in result.findings[0].message


@pytest.mark.parametrize("source, severity", [
    ("given with --cudnn", "error"),
    ("the pip profile: torch 2.9.1 Requires-Dist nvidia-cudnn-cu12==9.7.1.26", "warning"),
    (None, "warning"),
])
def test_a_rule_deciding_on_an_assumed_cudnn_says_if(source, severity):
    """Issue 44: a cuDNN the user did not give is the pip profile's pin, an assumption: SGA105
    is an error only when --cudnn stated the version, else a warning that names it with "if"."""
    res = _cudnn_resolution(90701)
    res = Resolution(res.source, res.structure, dict(res.device, cudnn_source=source), res.model, res.flags,
                     res.env, res.rejected, res.settings)
    (f,) = check_resolution(res, [_rule("SGA104"), _rule("SGA105")]).findings
    assert (f.rule_id, f.severity) == ("SGA105", severity)
    if severity == "warning":
        assert f.confidence == "medium"
        assert f.message.endswith(f" — if cudnn is 9.7.1 ({source or 'assumed'}; --cudnn states it)")
    else:
        assert " — if " not in f.message


def test_cudnn_version_decoding():
    from sglang_audit.rules.knownbad import cudnn_version

    assert [cudnn_version(v) for v in (91002, 90701, 8907, None, 0)] == ["9.10.2", "9.7.1", "8.9.7", None, None]


def test_checkpoint_quant_facts(tmp_path):
    from sglang_audit.rules.knownbad import Unknown, checkpoint_quant

    def facts(config: dict, hfq: dict | None = None) -> dict:
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        if hfq is not None:
            (d / "hf_quant_config.json").write_text(json.dumps(hfq))
        return checkpoint_quant(d)

    profiles = ROOT / "fixtures" / "models"
    assert checkpoint_quant(profiles / "llama-3.1-8b-nvfp4") == {
        "model.quant_algo": "NVFP4", "model.kv_cache_quant_algo": "FP8", "model.weight_block_size": None}
    # compressed-tensors form: 4-bit float groups of 16, an 8-bit float kv_cache_scheme
    assert checkpoint_quant(profiles / "qwen3.5-397b-a17b-nvfp4")["model.quant_algo"] == "NVFP4"
    assert checkpoint_quant(profiles / "qwen3.5-397b-a17b-nvfp4")["model.kv_cache_quant_algo"] == "FP8"
    assert checkpoint_quant(profiles / "deepseek-v3-fp8") == {
        "model.quant_algo": None, "model.kv_cache_quant_algo": None, "model.weight_block_size": [128, 128]}
    assert checkpoint_quant(profiles / "qwen3-30b-a3b") == dict.fromkeys(
        ("model.quant_algo", "model.kv_cache_quant_algo", "model.weight_block_size"))
    # hf_quant_config.json when config.json has no quantization_config
    got = facts({"architectures": ["X"]}, {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}})
    assert got["model.quant_algo"] == "FP8"
    # groups that disagree cannot be named; an unreadable directory is unknown, not "unquantized"
    mixed = facts({"quantization_config": {"quant_method": "modelopt", "config_groups": {
        "a": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}},
        "b": {"weights": {"num_bits": 8, "type": "float"}}}}})
    assert isinstance(mixed["model.quant_algo"], Unknown)
    assert all(isinstance(v, Unknown) for v in checkpoint_quant(tmp_path / "missing").values())


def test_undecided_parts_only_explain_an_undecided_node():
    # `any` decided True by its first part: the unknown second part is not reported
    unknown_fp4 = UnknownValue("?", (Candidate("flashinfer_cutlass"), Candidate("flashinfer_cudnn")))
    res = _resolution({"fp4_gemm_runner_backend": Setting("fp4_gemm_runner_backend", "auto", unknown_fp4, "unknown")})
    result = check_resolution(res, [_rule("SGA104")])
    (u,) = _by_rules(result)  # SGA002 (the setting itself unknown) aside
    # the checkpoint at "/m" is unreadable (model.quant_algo unknown), but that part did not matter
    assert [f for f, _ in u.facts] == ["settings.fp4_gemm_runner_backend"]


# ---- new rules at their release edges (first bad, first fixed) ------------------------------

FIELD_MODELS = ROOT / "tests" / "field" / "models"



DERIVED = ("SGA003", "SGK")  # findings derived from the layer/kernel evaluation, not rule files


def _rule_ids(result) -> set[str]:
    """The rule findings of a check, without the derived ones (SGA003 layer raises, SGK1xx
    kernel verdicts) the same deployment may also get."""
    return {f.rule_id for f in result.findings if not f.rule_id.startswith(DERIVED)}


def _resolve_launch(release, version, arch, model, launch, env=(), with_packages=()):
    """One release-edge case: the release resolved for a pasted launch command's flags."""
    from sglang_audit.resolve.pipeline import Request

    tree = release(version)
    return shared.resolve(Request(source=str(tree.package_dir), arch=arch, model=str(model),
                                  launch=f"python -m sglang.launch_server --model-path m {launch}", env=list(env),
                                  with_packages=list(with_packages)))


def _check_at_edge(release, rule_id, version, arch, model, launch, fires, env=()):
    """One rule at a release edge: SGLang accepts the flags (or, with fires == "rejected",
    refuses them itself: SGA001), and the rule fires exactly when expected, decided, its
    derived neighbours (SGA003, SGK1xx) aside. The check result, for further assertions."""
    res = _resolve_launch(release, version, arch, model, launch, env)
    if fires == "rejected":
        assert res.rejected is not None
        assert {f.rule_id for f in check_resolution(res, [_rule(rule_id)]).findings} == {"SGA001"}
        return None
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [_rule(rule_id)])
    assert _rule_ids(result) == ({rule_id} if fires else set()), result.findings
    assert [u for u in result.undecided if u.rule_id == rule_id] == []
    return result


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, fires",
    [
        # GPT-OSS flashinfer_mxfp4 on SM12x: auto picks it through 0.5.9; explicit until 0.5.16; 0.5.17 has cutlass_sm120
        ("SGA211", "0.5.5", "sm120", "gpt-oss-120b", "", True),
        ("SGA211", "0.5.9", "sm120", "gpt-oss-120b", "", True),
        ("SGA211", "0.5.10", "sm120", "gpt-oss-120b", "", False),
        ("SGA211", "0.5.16", "sm120", "gpt-oss-120b", "--moe-runner-backend flashinfer_mxfp4", True),
        ("SGA211", "0.5.17", "sm120", "gpt-oss-120b", "--moe-runner-backend flashinfer_mxfp4", False),
        # FP8 MoE + flashinfer_cutlass: 0.5.5 rejects it itself (--quantization must be modelopt_fp4); no runner 0.5.6-0.5.19
        ("SGA212", "0.5.6", "sm90", FIELD_MODELS / "qwen3-30b-a3b-fp8", "--moe-runner-backend flashinfer_cutlass", True),
        ("SGA212", "0.5.19", "sm90", FIELD_MODELS / "qwen3-30b-a3b-fp8", "--moe-runner-backend flashinfer_cutlass", True),
        ("SGA212", "0.5.20", "sm90", FIELD_MODELS / "qwen3-30b-a3b-fp8", "--moe-runner-backend flashinfer_cutlass", False),
        # flashinfer_deepgemm + DeepEP: choice from 0.5.10, M bound from 0.5.17
        ("SGA106", "0.5.10", "sm90", "deepseek-v3-fp8", "--tp 4 --moe-a2a-backend deepep --fp8-gemm-backend flashinfer_deepgemm", True),
        ("SGA106", "0.5.16", "sm90", "deepseek-v3-fp8", "--tp 4 --moe-a2a-backend deepep --fp8-gemm-backend flashinfer_deepgemm", True),
        ("SGA106", "0.5.17", "sm90", "deepseek-v3-fp8", "--tp 4 --moe-a2a-backend deepep --fp8-gemm-backend flashinfer_deepgemm", False),
        # block-FP8 auto → DeepGEMM on SM12x: 0.5.8, 0.5.9; 0.5.10 picks triton
        ("SGA107", "0.5.8", "sm120", "minimax-m2", "--tp 8", True),
        ("SGA107", "0.5.9", "sm121", "minimax-m2", "--tp 8", True),
        ("SGA107", "0.5.10", "sm120", "minimax-m2", "--tp 8", False),
        # cutedsl + DeepEP auto: handler from 0.5.13, coercion to low_latency from 0.5.17
        ("SGA213", "0.5.13", "sm100", "deepseek-r1-nvfp4", "--tp 8 --ep 8 --moe-runner-backend flashinfer_cutedsl --moe-a2a-backend deepep", True),
        ("SGA213", "0.5.16", "sm100", "deepseek-r1-nvfp4", "--tp 8 --ep 8 --moe-runner-backend flashinfer_cutedsl --moe-a2a-backend deepep", True),
        ("SGA213", "0.5.17", "sm100", "deepseek-r1-nvfp4", "--tp 8 --ep 8 --moe-runner-backend flashinfer_cutedsl --moe-a2a-backend deepep", False),
        ("SGA213", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --ep 8 --moe-runner-backend flashinfer_cutedsl --moe-a2a-backend deepep", False),
        ("SGA101", "0.5.10", "sm120", "qwen3.5-397b-a17b-nvfp4", "--tp 8", False),
        # code-derived (model-runner asserts present 0.5.5-0.5.23): first and last release
        ("SGA405", "0.5.5", "sm100", "qwen3-30b-a3b", "--attention-backend fa3", True),
        ("SGA405", "0.5.23", "sm120", "qwen3-30b-a3b", "--attention-backend fa3", True),
        ("SGA405", "0.5.23", "sm90", "qwen3-30b-a3b", "--attention-backend fa3", False),
        ("SGA406", "0.5.5", "sm100", "qwen3-30b-a3b", "--attention-backend trtllm_mla", True),
        ("SGA406", "0.5.23", "sm100", "qwen3-30b-a3b", "--attention-backend trtllm_mla", True),
        ("SGA406", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mla", False),
        # explicit DeepGEMM FP8 GEMM on SM12x: 0.5.8-0.5.20; 0.5.21 probes for SM120 DeepGEMM APIs
        ("SGA108", "0.5.9", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend deep_gemm", True),
        ("SGA108", "0.5.20", "sm121", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend deep_gemm", True),
        ("SGA108", "0.5.21", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend deep_gemm", False),
        # flashinfer_cutlass MoE before Hopper: accepted by SGLang in every release checked
        ("SGA215", "0.5.8", "sm80", "qwen3-30b-a3b", "--moe-runner-backend flashinfer_cutlass", True),
        ("SGA215", "0.5.23", "sm86", "qwen3-30b-a3b", "--moe-runner-backend flashinfer_cutlass", True),
        ("SGA215", "0.5.23", "sm90", "qwen3-30b-a3b", "--moe-runner-backend flashinfer_cutlass", False),
        # SM100-family MoE runners on Hopper: SGLang accepts the explicit choice in every release
        ("SGA214", "0.5.8", "sm90", "qwen3-30b-a3b", "--moe-runner-backend flashinfer_trtllm", True),
        ("SGA214", "0.5.23", "sm90", "deepseek-r1-nvfp4", "--tp 8 --moe-runner-backend flashinfer_trtllm", True),
        ("SGA214", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --moe-runner-backend flashinfer_trtllm", False),
        # no release bound (no fix known): fires on the first and last release checked
        ("SGA501", "0.5.8", "sm90", "minimax-m2", "--tp 4 --attention-backend fa3 --kv-cache-dtype fp8_e4m3", True),
        ("SGA501", "0.5.23", "sm90", "minimax-m2", "--tp 4 --attention-backend fa3 --kv-cache-dtype fp8_e4m3", True),
    ],
)
def test_new_rules_at_release_edges(release, rule_id, version, arch, model, launch, fires):
    res = _resolve_launch(release, version, arch, model, launch)
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [_rule(rule_id)])
    assert bool(_rule_ids(result)) is fires, (result.findings, result.undecided)  # SGA003/SGK aside
    assert _by_rules(result) == []  # the rule decided; SGA002 (another setting unknown) aside


@pytest.mark.real_release
def test_sga101_on_059_through_the_quant_algo(release):
    """0.5.9 names ModelOpt NVFP4 plain `modelopt`: SGA101 still applies through model.quant_algo.
    A plain install of 0.5.9 (torch 2.9.1, its cuDNN pin 9.10.2) is rejected by SGLang's own
    check_torch_2_9_1_cudnn_compatibility for this multimodal model; the env variable its message
    names lets the rule be checked on the accepted configuration."""
    rejected = _resolve_launch(release, "0.5.9", "sm120", "qwen3.5-397b-a17b-nvfp4", "--tp 8")
    assert rejected.rejected is not None and "CuDNN" in rejected.rejected.message
    res = _resolve_launch(release, "0.5.9", "sm120", "qwen3.5-397b-a17b-nvfp4", "--tp 8", env=("SGLANG_DISABLE_CUDNN_CHECK=1",))
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [_rule("SGA101")])
    assert _rule_ids(result) and _by_rules(result) == []


# ---- rules2 (#18, second round): each rule at its release edges ------------------------------

GLM_EAGLE = "--tp 4 --speculative-algorithm EAGLE"
RULES2_SUBJECT = {"SGA216": "moe_runner_backend", "SGA502": "speculative_moe_runner_backend"}


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, fires",
    [
        # FP8 MoE experts on Triton FP8 before SM89: no FP8 MoE Marlin path in 0.5.5-0.5.23 (PR #30681 open)
        ("SGA216", "0.5.5", "sm80", FIELD_MODELS / "qwen3-30b-a3b-fp8", "", True),
        ("SGA216", "0.5.8", "sm80", "minimax-m2", "--tp 8 --ep 8", True),
        ("SGA216", "0.5.23", "sm86", "minimax-m2", "--tp 8 --moe-runner-backend triton", True),
        ("SGA216", "0.5.23", "sm89", "minimax-m2", "--tp 8", False),
        ("SGA216", "0.5.23", "sm80", "qwen3-30b-a3b", "", False),
        ("SGA216", "0.5.23", "sm80", FIELD_MODELS / "qwen3-4b-fp8", "", False),
        # GLM-5.x NVFP4 draft inherits flashinfer_trtllm from 0.5.12 (0.5.11 sent it to auto); no fix through 0.5.23
        ("SGA502", "0.5.11", "sm103", FIELD_MODELS / "glm-5-nvfp4", GLM_EAGLE, False),
        ("SGA502", "0.5.12", "sm103", FIELD_MODELS / "glm-5-nvfp4", GLM_EAGLE, True),
        ("SGA502", "0.5.23", "sm100", FIELD_MODELS / "glm-5-nvfp4", GLM_EAGLE, True),
        ("SGA502", "0.5.23", "sm100", FIELD_MODELS / "glm-5-nvfp4",
         GLM_EAGLE + " --speculative-moe-runner-backend triton --speculative-moe-a2a-backend none", False),
        ("SGA502", "0.5.23", "sm100", FIELD_MODELS / "glm-5-nvfp4", "--tp 4", False),
    ],
)
def test_rules2_rules_at_their_edges(release, rule_id, version, arch, model, launch, fires):
    res = _resolve_launch(release, version, arch, model, launch)
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [_rule(rule_id)])
    assert bool(_rule_ids(result)) is fires, (result.findings, result.undecided)  # SGA003/SGK aside
    # SGA002 may list moe_runner_backend itself (`auto` decided again by the layers); the rule is decided
    assert [u for u in result.undecided if u.rule_id == rule_id] == []
    if fires:
        assert [f.setting for f in result.findings if f.rule_id == rule_id] == [RULES2_SUBJECT[rule_id]]


def test_num_experts_fact_reads_the_checkpoint(tmp_path):
    from sglang_audit.rules.knownbad import Unknown, checkpoint_experts

    profiles = ROOT / "fixtures" / "models"
    assert checkpoint_experts(profiles / "deepseek-v3-fp8") == 256  # n_routed_experts
    assert checkpoint_experts(profiles / "minimax-m2") == 256  # num_local_experts
    assert checkpoint_experts(profiles / "qwen3-30b-a3b") == 128  # num_experts
    assert checkpoint_experts(profiles / "qwen3.5-397b-a17b-nvfp4") == 512  # text_config
    assert checkpoint_experts(profiles / "llama-3.1-8b-nvfp4") is None  # dense
    (tmp_path / "config.json").write_text(json.dumps({"num_experts": 0, "n_routed_experts": None}))
    assert checkpoint_experts(tmp_path) is None
    assert isinstance(checkpoint_experts(tmp_path / "missing"), Unknown)


def test_torch_dtype_fact_reads_the_checkpoint(tmp_path):
    from sglang_audit.rules.facts import checkpoint_dtype
    from sglang_audit.rules.knownbad import Unknown

    assert checkpoint_dtype(FIELD_MODELS / "minimax-m2.5-fp16") == "float16"
    assert checkpoint_dtype(FIELD_MODELS / "gemma-2-2b-it") == "float32"
    assert checkpoint_dtype(ROOT / "fixtures" / "models" / "qwen3.5-397b-a17b-nvfp4") == "bfloat16"  # text_config.dtype
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    assert checkpoint_dtype(tmp_path) is None  # declares none: SGLang's auto reads float32 → float16
    assert isinstance(checkpoint_dtype(tmp_path / "missing"), Unknown)


def test_layer_fact_is_the_layer_outcome():
    from sglang_audit.result import LayerValue
    from sglang_audit.rules.facts import Unknown, layer_fact

    built = "HybridLinearAttnBackend(TritonAttnBackend, Mamba2AttnBackend)"
    assert layer_fact(None) is None
    assert layer_fact(LayerValue("resolved", built, stage="attention")) == built
    assert layer_fact(LayerValue("unsupported", "ValueError: no", stage="attention")) == "ValueError: no"
    unknown = layer_fact(LayerValue("unknown", None, reason="runtime state",
                                    candidates=(Candidate("TritonAttnBackend", ()),), stage="attention"))
    assert isinstance(unknown, Unknown) and unknown.reason == "runtime state"
    assert unknown.candidates == ("TritonAttnBackend",) and unknown.open


# ---- rules3 (#18): attention rules at their release edges -------------------------------------
# Code-derived rules without a release bound fire on the first and last release checked; the
# pass rows show the neighbouring configuration that works. Undecided entries of other rules
# (e.g. the NVFP4 MoE runner decided again when layers are built) do not matter here.


_EAGLE = "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, fires",
    [
        # trtllm_mla on SM12x: SGLang's own check accepts it in every release checked
        ("SGA401", "0.5.5", "sm120", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mla", True),
        ("SGA401", "0.5.23", "sm120", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mla", True),
        ("SGA401", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mla", False),
        # trtllm_mha prefill + FP8 KV on SM12x: 0.5.18 refuses trtllm_mha prefill on SM120 itself
        # (SGA001); 0.5.19 allows it and only rejects an explicit fp8_e4m3, not the checkpoint's FP8 KV
        ("SGA402", "0.5.18", "sm120", "llama-3.1-8b-nvfp4", "--attention-backend trtllm_mha", "rejected"),
        ("SGA402", "0.5.19", "sm120", "llama-3.1-8b-nvfp4", "--attention-backend trtllm_mha", True),
        ("SGA402", "0.5.23", "sm120", "llama-3.1-8b-nvfp4", "--attention-backend trtllm_mha", True),
        ("SGA402", "0.5.20", "sm120", "llama-3.1-8b-nvfp4", "--attention-backend trtllm_mha --kv-cache-dtype bf16", False),
        # hybrid GDN + flashinfer on SM100 family: allow-list without flashinfer 0.5.16-0.5.20
        ("SGA403", "0.5.15", "sm100", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend flashinfer", False),
        ("SGA403", "0.5.16", "sm100", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend flashinfer", True),
        ("SGA403", "0.5.20", "sm103", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend flashinfer", True),
        ("SGA403", "0.5.21", "sm103", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend flashinfer", False),
        # hybrid GDN + fa4 on SM12x: the SM120 allow-list appears in 0.5.16
        ("SGA404", "0.5.15", "sm120", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend fa4", False),
        ("SGA404", "0.5.16", "sm120", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend fa4", True),
        ("SGA404", "0.5.23", "sm121", "qwen3.5-397b-a17b-nvfp4", "--tp 8 --attention-backend fa4", True),
        # trtllm_mha on an MLA model: the factory's check in every release 0.5.5-0.5.23
        ("SGA407", "0.5.5", "sm100", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mha", True),
        ("SGA407", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mha", True),
        ("SGA407", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --attention-backend trtllm_mla", False),
        ("SGA407", "0.5.23", "sm100", "qwen3-30b-a3b", "--attention-backend trtllm_mha", False),
        # GLM-5 (GlmMoeDsa): MLA in the release's ModelConfig from 0.5.9; 0.5.8 builds it as MHA,
        # so the factory's non-MLA check passes there (an architecture list said MLA: a false alarm)
        ("SGA407", "0.5.8", "sm100", FIELD_MODELS / "glm-5-nvfp4", "--tp 8 --attention-backend trtllm_mha", False),
        ("SGA407", "0.5.9", "sm100", FIELD_MODELS / "glm-5-nvfp4", "--tp 8 --attention-backend trtllm_mha", True),
        # fa3 with an MLA model on SM 8.x: the fa3 factory's assert in every release 0.5.5-0.5.23
        ("SGA408", "0.5.5", "sm80", "deepseek-v3-fp8", "--tp 8 --attention-backend fa3", True),
        ("SGA408", "0.5.23", "sm86", "kimi-k2-instruct", "--tp 8 --attention-backend fa3", True),
        ("SGA408", "0.5.23", "sm80", "qwen3-30b-a3b", "--attention-backend fa3", False),
        ("SGA408", "0.5.23", "sm90", "deepseek-v3-fp8", "--tp 8 --attention-backend fa3", False),
        # trtllm_mla decode + DCP + speculative decoding: 0.5.16 refuses DCP with any speculative
        # algorithm itself; 0.5.17 accepts the flags, auto-picks trtllm_mla and the model runner raises
        ("SGA409", "0.5.16", "sm100", "deepseek-r1-nvfp4", f"--tp 8 --dcp-size 8 {_EAGLE}", "rejected"),
        ("SGA409", "0.5.17", "sm100", "deepseek-r1-nvfp4", f"--tp 8 --dcp-size 8 {_EAGLE}", True),
        ("SGA409", "0.5.23", "sm100", "deepseek-r1-nvfp4", f"--tp 8 --dcp-size 8 {_EAGLE}", True),
        ("SGA409", "0.5.23", "sm100", "deepseek-r1-nvfp4",
         f"--tp 8 --dcp-size 8 {_EAGLE} --decode-attention-backend cutedsl_mla", False),
        ("SGA409", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --dcp-size 8", False),
    ],
)
def test_rules3_rules_at_their_edges(release, rule_id, version, arch, model, launch, fires):
    _check_at_edge(release, rule_id, version, arch, model, launch, fires)


# ---- rules4 (#18): MoE / all-to-all rules at their release edges -------------------------------

_DEEPEP = "--tp 4 --moe-a2a-backend deepep"
_QWEN3_FP8 = FIELD_MODELS / "qwen3-30b-a3b-fp8"
_LLAMA4_NVFP4 = FIELD_MODELS / "llama-4-scout-nvfp4"
_TRTLLM = "--tp 8 --moe-runner-backend flashinfer_trtllm"
_DEEPEP8 = "--tp 8 --moe-a2a-backend deepep"
_MARLIN_DEEPEP = "--tp 8 --moe-runner-backend marlin --moe-a2a-backend deepep"
_FI_CUTLASS_DEEPEP = "--tp 8 --moe-runner-backend flashinfer_cutlass --moe-a2a-backend deepep"


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, fires",
    [
        # DeepEP auto/low_latency asserts DeepGEMM (off below SM90): every model through 0.5.11,
        # quantized MoE layers only from 0.5.12 (`and quant_config is not None`)
        ("SGA217", "0.5.5", "sm86", "qwen3-30b-a3b", _DEEPEP, True),
        ("SGA217", "0.5.11", "sm89", "qwen3-30b-a3b", _DEEPEP, True),
        ("SGA217", "0.5.12", "sm86", "qwen3-30b-a3b", _DEEPEP, False),
        ("SGA217", "0.5.12", "sm89", _QWEN3_FP8, _DEEPEP, True),
        ("SGA217", "0.5.23", "sm86", _QWEN3_FP8, _DEEPEP, True),
        ("SGA217", "0.5.23", "sm86", _QWEN3_FP8, _DEEPEP + " --deepep-mode normal", False),
        ("SGA217", "0.5.23", "sm90", _QWEN3_FP8, _DEEPEP, False),
        ("SGA217", "0.5.5", "sm86", "qwen3-30b-a3b", "--tp 4", False),
        # flashinfer_cutlass MoE + DeepEP: fused-only runner from 0.5.15 (PR #28211), no deepep fused func
        ("SGA218", "0.5.14", "sm100", "deepseek-r1-nvfp4", _FI_CUTLASS_DEEPEP, False),
        ("SGA218", "0.5.15", "sm100", "deepseek-r1-nvfp4", _FI_CUTLASS_DEEPEP, True),
        ("SGA218", "0.5.23", "sm100", "deepseek-r1-nvfp4", _FI_CUTLASS_DEEPEP, True),
        ("SGA218", "0.5.23", "sm100", "deepseek-r1-nvfp4",
         "--tp 8 --moe-runner-backend flashinfer_cutlass --moe-a2a-backend nixl", True),
        ("SGA218", "0.5.23", "sm100", "deepseek-r1-nvfp4",
         "--tp 8 --dp 8 --enable-dp-attention --moe-runner-backend flashinfer_cutlass --moe-a2a-backend flashinfer", False),
        # GPT-OSS auto → flashinfer_mxfp4 on SM100 + DeepEP: MoeRunner-only from 0.5.20
        ("SGA219", "0.5.19", "sm100", "gpt-oss-120b", "--tp 8 --moe-a2a-backend deepep", False),
        ("SGA219", "0.5.20", "sm100", "gpt-oss-120b", "--tp 8 --moe-a2a-backend deepep", True),
        ("SGA219", "0.5.23", "sm100", "gpt-oss-120b", "--tp 8 --moe-a2a-backend deepep", True),
        ("SGA219", "0.5.20", "sm100", "gpt-oss-120b", "--tp 8 --moe-a2a-backend mooncake", True),
        ("SGA219", "0.5.23", "sm100", "gpt-oss-120b", "--tp 8", False),
        # MXFP4 MoE on marlin + DeepEP: marlin is a choice and builds MoeRunner(MARLIN) from 0.5.12
        ("SGA220", "0.5.12", "sm90", "gpt-oss-120b", _MARLIN_DEEPEP, True),
        ("SGA220", "0.5.23", "sm90", "gpt-oss-120b", _MARLIN_DEEPEP, True),
        ("SGA220", "0.5.23", "sm90", "gpt-oss-120b", "--tp 8 --moe-runner-backend marlin", False),
        # NVFP4 MoE `auto` → Marlin below SM100 (0.5.13+) + DeepEP
        ("SGA221", "0.5.12", "sm90", "deepseek-r1-nvfp4", _DEEPEP8, False),
        ("SGA221", "0.5.13", "sm90", "deepseek-r1-nvfp4", _DEEPEP8, True),
        ("SGA221", "0.5.23", "sm90", "deepseek-r1-nvfp4", _DEEPEP8, True),
        ("SGA221", "0.5.16", "sm90", "deepseek-r1-nvfp4", "--tp 8 --moe-a2a-backend mooncake", True),
        ("SGA221", "0.5.23", "sm100", "deepseek-r1-nvfp4", _DEEPEP8, False),
        ("SGA221", "0.5.23", "sm90", "deepseek-r1-nvfp4", "--tp 8", False),
        # NVFP4 MoE `auto` → FLASHINFER_TRTLLM in the layer on SM100 (0.5.13+) + an EP all-to-all
        ("SGA222", "0.5.12", "sm100", "deepseek-r1-nvfp4", _DEEPEP8, False),
        ("SGA222", "0.5.13", "sm100", "deepseek-r1-nvfp4", _DEEPEP8, True),
        ("SGA222", "0.5.16", "sm120", "deepseek-r1-nvfp4", _DEEPEP8, True),
        ("SGA222", "0.5.16", "sm103", "deepseek-r1-nvfp4", "--tp 8 --moe-a2a-backend mooncake", True),
        ("SGA222", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --moe-a2a-backend nixl", True),
        ("SGA222", "0.5.23", "sm100", "deepseek-r1-nvfp4",
         _DEEPEP8 + " --moe-runner-backend flashinfer_cutedsl --deepep-mode low_latency", False),
        # TRT-LLM-gen NVFP4 MoE + mooncake/nixl: 0.5.9 rejects the pair itself; no fused func 0.5.10-0.5.23
        ("SGA223", "0.5.9", "sm100", "deepseek-r1-nvfp4", _TRTLLM + " --moe-a2a-backend mooncake", "rejected"),
        ("SGA223", "0.5.10", "sm100", "deepseek-r1-nvfp4", _TRTLLM + " --moe-a2a-backend mooncake", True),
        ("SGA223", "0.5.23", "sm100", "deepseek-r1-nvfp4", _TRTLLM + " --moe-a2a-backend nixl", True),
        ("SGA223", "0.5.23", "sm100", "deepseek-r1-nvfp4", _TRTLLM, False),
        # Llama 4 NVFP4 MoE on Marlin (router weight after the experts): NVFP4 Marlin MoE runner from 0.5.13
        ("SGA550", "0.5.12", "sm121", _LLAMA4_NVFP4, "--tp 2 --moe-runner-backend marlin", False),
        ("SGA550", "0.5.13", "sm90", _LLAMA4_NVFP4, "--tp 2", True),
        ("SGA550", "0.5.23", "sm121", _LLAMA4_NVFP4, "--tp 2 --moe-runner-backend marlin", True),
        ("SGA550", "0.5.23", "sm100", _LLAMA4_NVFP4, "--tp 2", False),
        # Llama 4 NVFP4 + explicit flashinfer_cutlass on SM100: the assertion is in every release 0.5.10-0.5.23
        ("SGA551", "0.5.10", "sm100", _LLAMA4_NVFP4, "--tp 2 --moe-runner-backend flashinfer_cutlass", True),
        ("SGA551", "0.5.23", "sm103", _LLAMA4_NVFP4, "--tp 2 --moe-runner-backend flashinfer_cutlass", True),
        ("SGA551", "0.5.23", "sm100", _LLAMA4_NVFP4, "--tp 2", False),
    ],
)
def test_rules4_rules_at_their_edges(release, rule_id, version, arch, model, launch, fires):
    _check_at_edge(release, rule_id, version, arch, model, launch, fires)


# ---- rules5 (#18): DSA/NSA sub-backends and explicit FP8 GEMM backends at their release edges ----
# The sub-backends are resolved settings (nsa_* up to 0.5.12, dsa_* from 0.5.13). GLM-5 NVFP4
# (GlmMoeDsaForCausalLM) gets trtllm on SM12x up to 0.5.16 and flashinfer_sparse_mla from 0.5.17;
# GLM-5.3-Flash (Glm5NextForConditionalGeneration, a stand-in profile) still gets trtllm.

GLM5 = FIELD_MODELS / "glm-5-nvfp4"
GLM53 = FIELD_MODELS / "glm-5.3-flash"
_TILELANG_BF16 = "--{p}-prefill-backend tilelang --{p}-decode-backend tilelang --kv-cache-dtype bfloat16"
RULES5_SUBJECTS = {
    "SGA410": ({"nsa_prefill_backend", "nsa_decode_backend"}, {"dsa_prefill_backend", "dsa_decode_backend"}),
    "SGA411": ({"dsa_prefill_backend", "dsa_decode_backend"},),
    "SGA412": ({"nsa_prefill_backend", "nsa_decode_backend"}, {"dsa_prefill_backend", "dsa_decode_backend"}),
    **{rid: ({"fp8_gemm_runner_backend"},) for rid in ("SGA109", "SGA110", "SGA111", "SGA112")},
    "SGA413": ({"attention_backend", "decode_attention_backend"},),
    "SGA414": ({"attention_backend", "prefill_attention_backend", "decode_attention_backend"},),
}


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, fires",
    [
        # trtllm DSA sub-backends on SM12x: the FP8-KV default for major >= 10
        ("SGA410", "0.5.9", "sm120", GLM5, "--tp 8", False),  # FP8 KV default was flashmla_auto/flashmla_kv
        ("SGA410", "0.5.10", "sm120", GLM5, "--tp 8", True),  # first release defaulting to trtllm on major >= 10
        ("SGA410", "0.5.12", "sm120", GLM5, "--tp 8", True),  # nsa_* names
        ("SGA410", "0.5.16", "sm120", GLM5, "--tp 8", True),  # dsa_* names, last GLM trtllm default
        ("SGA410", "0.5.17", "sm120", GLM5, "--tp 8", False),  # GLM FP8 KV on SM12x → flashinfer_sparse_mla
        ("SGA410", "0.5.23", "sm120", GLM5, "--tp 8", False),
        ("SGA410", "0.5.20", "sm121", GLM53, "", True),  # other DSA archs keep trtllm (sglang#40286)
        ("SGA410", "0.5.23", "sm120", GLM53, "", True),
        ("SGA410", "0.5.23", "sm100", GLM53, "", False),
        # flashinfer_sparse_mla validation: appears in 0.5.17, allow-list GlmMoeDsa only through 0.5.23
        ("SGA411", "0.5.17", "sm120", GLM5, "--tp 8 --dsa-prefill-backend trtllm --dsa-decode-backend trtllm", True),
        ("SGA411", "0.5.17", "sm120", GLM5, "--tp 8", False),
        ("SGA411", "0.5.20", "sm121", GLM53,
         "--dsa-prefill-backend flashinfer_sparse_mla --dsa-decode-backend flashinfer_sparse_mla", True),
        ("SGA411", "0.5.23", "sm100", GLM5, "--tp 8 --dsa-prefill-backend flashinfer_sparse_mla", True),
        ("SGA411", "0.5.23", "sm120", GLM5, "--tp 8", False),
        ("SGA411", "0.5.16", "sm120", GLM5, "--tp 8 --dsa-prefill-backend trtllm --dsa-decode-backend trtllm", False),
        # tilelang on SM12x: the 64/2/256 tile in every release checked (no fix released)
        ("SGA412", "0.5.12", "sm120", GLM5, "--tp 8 " + _TILELANG_BF16.format(p="nsa"), True),
        ("SGA412", "0.5.20", "sm120", GLM53, _TILELANG_BF16.format(p="dsa"), True),
        ("SGA412", "0.5.23", "sm121", GLM5, "--tp 8 " + _TILELANG_BF16.format(p="dsa"), True),
        ("SGA412", "0.5.23", "sm90", GLM5, "--tp 8 " + _TILELANG_BF16.format(p="dsa"), False),
        # 0.5.5 does not treat GLM-5 as an NSA model: the flag is kept but no NSA backend is built
        ("SGA412", "0.5.5", "sm120", GLM5, "--tp 8 --nsa-prefill-backend tilelang --nsa-decode-backend tilelang", False),
        # explicit FP8 block-GEMM backends the dispatcher refuses per arch (raised when layers are built)
        ("SGA109", "0.5.7", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_trtllm", True),
        ("SGA109", "0.5.7", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_trtllm", False),
        ("SGA109", "0.5.10", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_trtllm", True),
        ("SGA109", "0.5.23", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_trtllm", True),
        ("SGA109", "0.5.23", "sm100", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_trtllm", False),
        ("SGA109", "0.5.23", "sm90", "llama-3.1-8b-nvfp4", "--fp8-gemm-backend flashinfer_trtllm", False),
        ("SGA110", "0.5.10", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_cutlass", True),
        ("SGA110", "0.5.23", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_cutlass", True),
        ("SGA110", "0.5.23", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_cutlass", False),
        ("SGA111", "0.5.9", "sm100", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_deepgemm", True),
        ("SGA111", "0.5.23", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_deepgemm", True),
        ("SGA111", "0.5.23", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend flashinfer_deepgemm", False),
        ("SGA112", "0.5.15", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend cutlass", False),
        ("SGA112", "0.5.16", "sm90", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend cutlass", True),
        ("SGA112", "0.5.23", "sm100", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend cutlass", True),
        ("SGA112", "0.5.23", "sm120", "deepseek-v3-fp8", "--tp 8 --fp8-gemm-backend cutlass", False),
        # cutedsl_mla (0.5.13+) on a GQA model: the factory's MLA check
        ("SGA413", "0.5.13", "sm100", "qwen3-30b-a3b", "--attention-backend cutedsl_mla", True),
        ("SGA413", "0.5.23", "sm100", "qwen3-30b-a3b", "--decode-attention-backend cutedsl_mla", True),
        ("SGA413", "0.5.23", "sm100", "deepseek-r1-nvfp4", "--tp 8 --decode-attention-backend cutedsl_mla", False),
        # hpc_ops (0.5.17+) with speculative decoding or an MLA model: the factory raises
        ("SGA414", "0.5.17", "sm90", "qwen3-30b-a3b",
         "--attention-backend hpc_ops --speculative-algorithm EAGLE3 --speculative-draft-model-path qwen3-30b-a3b", True),
        ("SGA414", "0.5.23", "sm90", "deepseek-v3-fp8", "--tp 8 --attention-backend hpc_ops", True),
        ("SGA414", "0.5.23", "sm90", "qwen3-30b-a3b", "--attention-backend hpc_ops", False),
    ],
)
def test_rules5_rules_at_their_edges(release, rule_id, version, arch, model, launch, fires):
    # derived findings (SGA003: e.g. the cutedsl_mla/hpc_ops factories raising) are not this rule's concern
    result = _check_at_edge(release, rule_id, version, arch, model, launch, fires)
    if fires:  # the findings name sub-backend settings of this release's one naming (nsa_* or dsa_*)
        settings = {f.setting for f in result.findings if f.rule_id == rule_id}
        assert any(settings <= names for names in RULES5_SUBJECTS[rule_id]), settings


@pytest.mark.real_release
@pytest.mark.parametrize(
    "version, present, absent, values",
    [
        # 0.5.12 names them nsa_*; the dsa_* fields are not in this release (not an error)
        ("0.5.12", ("nsa_prefill_backend", "nsa_decode_backend"), ("dsa_prefill_backend", "dsa_decode_backend"),
         {"nsa_prefill_backend": "trtllm", "nsa_decode_backend": "trtllm", "kv_cache_dtype": "fp8_e4m3"}),
        ("0.5.13", ("dsa_prefill_backend", "dsa_decode_backend"), ("nsa_prefill_backend", "nsa_decode_backend"),
         {"dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm", "kv_cache_dtype": "fp8_e4m3"}),
    ],
)
def test_rules5_dsa_settings_by_release_naming(release, version, present, absent, values):
    res = _resolve_launch(release, version, "sm120", GLM5, "--tp 8")
    for name in present:
        assert res.settings[name].present, name
    for name in absent:
        s = res.settings[name]
        assert not s.present and s.status == "resolved" and "no such setting" in s.note, (name, s)
    for name, value in values.items():
        s = res.settings[name]
        assert s.config == value, (name, s.config)
        assert s.deciding is not None and s.deciding.file.endswith("server_args.py"), (name, s.deciding)


# ---- rules6 (#18): mined rules at their release edges -------------------------------------------
# First bad and first fixed (or newest) release of each rule, plus the neighbouring deployment that
# works. SGA113 and SGA415 are keyed on code shapes that appear in 0.5.14; SGA416's fix is in 0.5.18.

_MINIMAX_FP16 = FIELD_MODELS / "minimax-m2.5-fp16"
_NO_DEEPGEMM = ("SGLANG_ENABLE_JIT_DEEPGEMM=0",)
_QWEN36 = FIELD_MODELS / "qwen3.6-27b"
_GRANITE_H = FIELD_MODELS / "granite-4.0-h-tiny"
_GEMMA2 = FIELD_MODELS / "gemma-2-2b-it"
_SPEC = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
_NEXTN_SPLIT = (f"--tp 4 --speculative-algorithm NEXTN {_SPEC} --disable-radix-cache "
                "--prefill-attention-backend fa3 --decode-attention-backend flashinfer")
_HICACHE_MTP = f"--tp 2 --enable-hierarchical-cache --mamba-scheduler-strategy extra_buffer --speculative-algorithm EAGLE {_SPEC}"
_SPEC_V2 = ("SGLANG_ENABLE_SPEC_V2=1",)
_GEMMA_EAGLE3 = (f"--speculative-algorithm EAGLE3 --speculative-draft-model-path "
                 f"{FIELD_MODELS / 'gemma-2-eagle3-draft'} {_SPEC}")
RULES6_SUBJECT = {"SGA113": "fp8_gemm_runner_backend", "SGA415": "decode_attention_backend",
                  "SGA416": "attention_backend", "SGA417": "attention_backend", "SGA418": "attention_backend"}


@pytest.mark.real_release
@pytest.mark.parametrize(
    "rule_id, version, arch, model, launch, env, fires",
    [
        # fp16 block-FP8 model, DeepGEMM off, SM100: the auto FlashInfer branch appears in 0.5.7,
        # the bfloat16-only guard (PR #22300) in 0.5.14
        ("SGA113", "0.5.6", "sm100", _MINIMAX_FP16, "--tp 4", _NO_DEEPGEMM, False),
        ("SGA113", "0.5.7", "sm100", _MINIMAX_FP16, "--tp 4", _NO_DEEPGEMM, True),
        ("SGA113", "0.5.13", "sm103", _MINIMAX_FP16, "--tp 4", _NO_DEEPGEMM, True),
        ("SGA113", "0.5.14", "sm100", _MINIMAX_FP16, "--tp 4", _NO_DEEPGEMM, False),
        ("SGA113", "0.5.13", "sm100", _MINIMAX_FP16, "--tp 4", (), False),
        ("SGA113", "0.5.13", "sm100", _MINIMAX_FP16, "--tp 4 --dtype bfloat16", _NO_DEEPGEMM, False),
        ("SGA113", "0.5.13", "sm100", "minimax-m2", "--tp 4 --dtype float16", _NO_DEEPGEMM, True),
        ("SGA113", "0.5.13", "sm90", _MINIMAX_FP16, "--tp 4", _NO_DEEPGEMM, False),
        # hybrid GDN + spec + prefill != decode: HybridAttnBackend forwards the mamba verify from 0.5.14
        ("SGA415", "0.5.5", "sm90", "qwen3-next-80b-a3b", _NEXTN_SPLIT, (), True),
        ("SGA415", "0.5.13", "sm90", "qwen3-next-80b-a3b", _NEXTN_SPLIT, (), True),
        ("SGA415", "0.5.14", "sm90", "qwen3-next-80b-a3b", _NEXTN_SPLIT, (), False),
        ("SGA415", "0.5.12", "sm90", _QWEN36, _HICACHE_MTP, _SPEC_V2, True),  # ServerArgs splits them itself
        ("SGA415", "0.5.12", "sm90", _QWEN36, _HICACHE_MTP + " --decode-attention-backend fa3", _SPEC_V2, False),
        ("SGA415", "0.5.12", "sm90", _QWEN36, "--tp 2 --enable-hierarchical-cache", (), False),
        # Granite 4.0-H + triton: layer 0 read in every release with the model (0.5.9) up to 0.5.17
        ("SGA416", "0.5.9", "sm90", _GRANITE_H, "--attention-backend triton", (), True),
        ("SGA416", "0.5.12", "sm100", _GRANITE_H, "", (), True),  # 0.5.12 picks triton on SM100 itself
        ("SGA416", "0.5.13", "sm100", _GRANITE_H, "", (), False),  # 0.5.13 picks flashinfer
        ("SGA416", "0.5.17", "sm90", _GRANITE_H, "--attention-backend triton", (), True),
        ("SGA416", "0.5.18", "sm90", _GRANITE_H, "--attention-backend triton", (), False),
        # EAGLE on a sliding-window model with flashinfer: crash through 0.5.13, verify window after
        ("SGA417", "0.5.5", "sm80", _GEMMA2, _GEMMA_EAGLE3, (), True),
        ("SGA417", "0.5.13", "sm120", _GEMMA2, _GEMMA_EAGLE3, (), True),
        ("SGA417", "0.5.14", "sm80", _GEMMA2, _GEMMA_EAGLE3, (), False),
        ("SGA417", "0.5.13", "sm90", _GEMMA2, _GEMMA_EAGLE3, (), False),  # fa3 on Hopper
        ("SGA418", "0.5.13", "sm80", _GEMMA2, _GEMMA_EAGLE3, (), False),
        ("SGA418", "0.5.14", "sm80", _GEMMA2, _GEMMA_EAGLE3, (), True),
        ("SGA418", "0.5.23", "sm120", _GEMMA2, _GEMMA_EAGLE3, (), True),
        ("SGA418", "0.5.23", "sm80", _GEMMA2, "", (), False),
    ],
)
def test_rules6_rules_at_their_edges(release, rule_id, version, arch, model, launch, env, fires):
    result = _check_at_edge(release, rule_id, version, arch, model, launch, fires, env)
    if fires:
        (f,) = [f for f in result.findings if f.rule_id == rule_id]
        assert f.setting == RULES6_SUBJECT[rule_id]


@pytest.mark.real_release
@pytest.mark.parametrize(
    "version, backend, fires",
    [
        ("0.5.9", "wave", True),  # first release with GraniteMoeHybrid
        ("0.5.23", "wave", True),  # still unguarded (PR #23080 open)
        ("0.5.23", "aiter", False),
        ("0.5.23", "triton", False),  # SGA416's fix covers triton, not wave
    ],
)
def test_sga419_granite_wave_on_rocm(release, version, backend, fires):
    # a ROCm deployment has aiter installed; without it these releases fail to import quark's MoE
    res = _resolve_launch(release, version, "gfx942", _GRANITE_H, f"--attention-backend {backend}",
                          with_packages=("aiter",))
    assert res.rejected is None, res.rejected
    result = check_resolution(res, [_rule("SGA419"), _rule("SGA416")])
    assert _rule_ids(result) == ({"SGA419"} if fires else set()), result.findings
    assert result.undecided == () or all(u.rule_id == "SGA002" for u in result.undecided)


def test_sga415_names_the_serverargs_line_that_split_the_backends(release):
    """0.5.12 moves an implicit FA3 decode backend to flashinfer for HiCache: the finding's
    deciding step is that ServerArgs line, not a user flag."""
    res = _resolve_launch(release, "0.5.12", "sm90", _QWEN36, _HICACHE_MTP, _SPEC_V2)
    (f,) = check_resolution(res, [_rule("SGA415")]).findings
    assert f.value == "flashinfer"
    assert f.deciding is not None and f.deciding.file.endswith("server_args.py") and f.deciding.line == 3542
    assert "HybridAttnBackend" in f.message


def test_ne_fact_compares_two_facts_three_valued():
    base = {
        "id": "ZZZ001", "slug": "x", "severity": "error", "confidence": "high", "title": "t",
        "description": "d", "message": "m", "fix": "f", "sources": ["a/b#1"],
        "subject": "decode_attention_backend",
        "when": {"fact": "settings.decode_attention_backend", "ne_fact": "settings.attention_backend"},
        "checked": "c",
        "examples": {"flag": [{"settings.decode_attention_backend": "flashinfer", "settings.attention_backend": "fa3"}],
                     "pass": [{"settings.decode_attention_backend": "fa3", "settings.attention_backend": "fa3"}]},
    }
    rule = parse_rule(base, "x.yaml", ("decode_attention_backend", "attention_backend"))
    assert check_example(rule, rule.examples_flag[0]) is True
    assert check_example(rule, rule.examples_pass[0]) is False
    bad = dict(base, when={"fact": "settings.decode_attention_backend", "ne_fact": "model.colour"})
    with pytest.raises(RuleError, match="ne_fact: unknown fact 'model.colour'"):
        parse_rule(bad, "x.yaml", ("decode_attention_backend", "attention_backend"))

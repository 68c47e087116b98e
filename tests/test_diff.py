"""diff --from S1 --to S2: per-setting changes with both chains, rejections that appear or
go away, what changed underneath, deployment files and exit codes.  Fast tests compare the
fixture checkout with modified copies; real-release tests use the cached SGLang wheels."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from clirun import cli

from sglang_audit.analyses.diff import (
    CHANGE_CHANGED,
    CHANGE_STILL_FAILING,
    CHANGE_UNCHANGED,
    CHANGE_UNKNOWN,
    REJ_BECOMES,
    REJ_NO_LONGER,
    REJ_UNCHANGED,
    STATUS_CHANGED,
    STATUS_STILL_FAILING,
    STATUS_UNCHANGED,
    STATUS_UNKNOWN,
    Deployment,
    DeploymentDiff,
    ReleaseDiff,
    ReleaseInfo,
    SettingDiff,
    SettingFindings,
    SideOutcome,
    compare_setting,
    diff_releases,
    load_deployments,
)
from sglang_audit.errors import InputError
from sglang_audit.render.diff import render_json, render_text
from sglang_audit.result import KernelVerdict, LayerValue, ModelSummary, Resolution, Setting
from sglang_audit.rules.model import Finding

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
FP4 = "sglang/srt/layers/quantization/fp4_utils.py"
SA = "sglang/srt/server_args.py"

# edits applied to a copy of mini_e2 (file under python/ → [(old, new), ...])
FP4_SM120_TRTLLM = {"sglang/srt/layers/quantization/fp4_utils.py": [
    ('            backend = "flashinfer_cudnn"', '            backend = "flashinfer_trtllm"')]}
ACCEPT_FP8 = {"sglang/srt/server_args.py": [('["modelopt_fp4", None]', '["modelopt_fp4", "fp8", None]')]}
CHOICES_AND_DEFAULT = {"sglang/srt/server_args.py": [
    ('"flashinfer_trtllm", "flashinfer_cutlass"]\nFP4', '"flashinfer_cutlass", "cutlass"]\nFP4'),
    ("speculative_moe_runner_backend: Optional[str] = None", 'speculative_moe_runner_backend: Optional[str] = "auto"'),
    # the fp4 flag stops declaring choices
    ("choices=FP4_GEMM_RUNNER_BACKEND_CHOICES, ", ""),
]}
SM120_MAJORS = {"sglang/srt/utils/common.py": [("device_capability_majors=[12]", "device_capability_majors=[11, 12]")]}
EXTERNAL_PROBE = {"sglang/srt/layers/quantization/fp4_utils.py": [
    ("from enum import Enum\n", "from enum import Enum\n\nimport some_vendor_probe\n"),
    ("        if is_sm120_supported():", "        if some_vendor_probe.prefers_cudnn():"),
]}
NEW_RELEASE = {"pyproject.toml": [('version = "0.0.1"', 'version = "0.0.2"'),
                                  ("flashinfer_python==0.6.1", "flashinfer_python==0.6.2")]}


def variant(tmp_path: Path, name: str, *edits: dict[str, list[tuple[str, str]]]) -> Path:
    dst = tmp_path / name
    shutil.copytree(MINI_E2, dst)
    for edit in edits:
        for rel, subs in edit.items():
            path = dst / "python" / rel
            text = path.read_text(encoding="utf-8")
            for old, new in subs:
                assert old in text, (rel, old)
                text = text.replace(old, new)
            path.write_text(text, encoding="utf-8")
    return dst


def dep(arch: str = "sm120", model: str = "deepseek-r1-nvfp4", sets: tuple[str, ...] = (), name: str = "") -> Deployment:
    return Deployment(name, arch, model, sets=sets)


def settings(d):
    return {s.name: s for s in d.settings}


# ---- fixture checkouts ------------------------------------------------------------------
def test_fixture_fp4_rule_change_with_both_deciding_lines(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", FP4_SM120_TRTLLM, NEW_RELEASE)
    diff = diff_releases(str(MINI_E2), str(new), [dep()])
    (d,) = diff.deployments
    s = settings(d)
    fp4 = s["fp4_gemm_runner_backend"]
    # the value that runs changed, and with it the known-bad findings on it
    assert (fp4.change, fp4.layers) == (CHANGE_CHANGED, ("runtime", "findings"))
    assert (fp4.old.runtime, fp4.new.runtime) == ("flashinfer_cudnn", "flashinfer_trtllm")
    assert (fp4.old_deciding.file, fp4.old_deciding.line, fp4.old_deciding.value) == (FP4, 22, "flashinfer_cudnn")
    assert (fp4.new_deciding.file, fp4.new_deciding.line, fp4.new_deciding.value) == (FP4, 22, "flashinfer_trtllm")
    # the guard text did not change, only the value written under it
    assert fp4.guards_added == fp4.guards_removed == ()
    assert all(v.change == CHANGE_UNCHANGED for k, v in s.items() if k != "fp4_gemm_runner_backend" and v.new and v.new.present)
    assert d.status == STATUS_CHANGED and d.rejection == REJ_UNCHANGED
    assert (diff.old.flashinfer, diff.new.flashinfer, diff.flashinfer_changed) == ("0.6.1", "0.6.2", True)
    assert (diff.exit_code("changed"), diff.exit_code("rejected"), diff.exit_code("never")) == (1, 0, 0)
    text = render_text(diff)
    assert "fp4_gemm_runner_backend         CHANGED (runtime, findings)" in text
    assert f"* runtime {FP4}:22 if backend == \"auto\" and is_sm120_supported() → 'flashinfer_cudnn'" in text
    assert f"* runtime {FP4}:22 if backend == \"auto\" and is_sm120_supported() → 'flashinfer_trtllm'" in text
    assert "pinned flashinfer_python: 0.6.1 → 0.6.2" in text
    # only the sm120 branch changed: an sm100 deployment is unaffected
    d100 = diff_releases(str(MINI_E2), str(new), [dep("sm100")]).deployments[0]
    assert d100.status == STATUS_UNCHANGED
    assert settings(d100)["fp4_gemm_runner_backend"].new.runtime == "flashinfer_cutlass"


def test_fixture_self_diff_reports_nothing(isolated_cache, tmp_path):
    diff = diff_releases(str(MINI_E2), str(MINI_E2), [dep(sets=("tp_size=4",))])
    (d,) = diff.deployments
    assert d.status == STATUS_UNCHANGED and d.predicates == () and d.rejection == REJ_UNCHANGED
    assert not any(f.changed for f in diff.flags) and not diff.flashinfer_changed
    assert diff.exit_code("changed") == 0
    code, out, _err = cli("diff", "--from", str(MINI_E2), "--to", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4")
    assert code == 0, out
    assert "result: nothing changed for this deployment" in out
    assert not re.search(r"\bCHANGED\b", out)
    # an identical copy analysed separately (not the shortcut for one source) agrees
    twin = variant(tmp_path, "twin")
    again = diff_releases(str(MINI_E2), str(twin), [dep(sets=("tp_size=4",))])
    assert again.deployments[0].status == STATUS_UNCHANGED and again.deployments[0].predicates == ()
    assert again.exit_code("changed") == 0


def test_fixture_rejected_becomes_accepted_and_back(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", ACCEPT_FP8, NEW_RELEASE)
    flags = ("moe_runner_backend=flashinfer_cutlass", "quantization=fp8")
    diff = diff_releases(str(MINI_E2), str(new), [dep(sets=flags)])
    (d,) = diff.deployments
    assert d.rejection == REJ_NO_LONGER and d.status == STATUS_CHANGED
    assert d.old.resolution.rejected.message == "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE"
    assert d.new.resolution.rejected is None
    assert (diff.exit_code("changed"), diff.exit_code("rejected")) == (1, 0)
    text = render_text(diff)
    assert "configuration: no longer rejected" in text
    assert f"at {SA}:56" in text and "AssertionError: modelopt_fp4 quantization is required" in text
    # what the accepting release picks is still shown
    assert "settings (0.0.2 only; 0.0.1 rejects the configuration):" in text
    assert "moe_runner_backend              flashinfer_cutlass" in text
    back = diff_releases(str(new), str(MINI_E2), [dep(sets=flags)])
    assert back.deployments[0].rejection == REJ_BECOMES
    assert (back.exit_code("rejected"), back.exit_code("never")) == (1, 0)
    assert "configuration: BECOMES REJECTED" in render_text(back)


def test_fixture_choices_and_defaults_changes(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", CHOICES_AND_DEFAULT)
    diff = diff_releases(str(MINI_E2), str(new), [dep()])
    flags = {f.name: f for f in diff.flags}
    moe = flags["moe_runner_backend"]
    assert (moe.added, moe.removed, moe.default_changed) == (("cutlass",), ("flashinfer_trtllm",), False)
    spec = flags["speculative_moe_runner_backend"]
    # no flag declares choices for it in either release; its default changed
    assert (spec.old_choices, spec.new_choices) == (None, None)
    assert (spec.old_default, spec.new_default, spec.default_changed) == (None, "auto", True)
    fp4 = flags["fp4_gemm_runner_backend"]
    assert fp4.old_choices == ("auto", "flashinfer_cudnn", "flashinfer_cutlass", "flashinfer_trtllm")
    assert fp4.new_choices is None and fp4.choices_changed
    # the resolved values did not change: underneath only
    (d,) = diff.deployments
    assert d.status == STATUS_UNCHANGED and diff.exit_code("changed") == 0
    assert settings(d)["speculative_moe_runner_backend"].guards_removed == ("self.speculative_moe_runner_backend is None",)
    text = render_text(diff)
    assert "moe_runner_backend choices: +cutlass -flashinfer_trtllm" in text
    assert "speculative_moe_runner_backend default: None → 'auto'" in text
    assert "fp4_gemm_runner_backend choices: from 0.0.1: auto, flashinfer_cudnn, flashinfer_cutlass, flashinfer_trtllm; to 0.0.1: not declared" in text
    assert "guards removed: self.speculative_moe_runner_backend is None" in text


def test_fixture_predicate_meaning_change(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", SM120_MAJORS)
    # sm120: the definition changed, the value did not, nothing resolved differently
    d120 = diff_releases(str(MINI_E2), str(new), [dep()]).deployments[0]
    (p,) = d120.predicates
    assert (p.name, p.change, p.old_value, p.new_value) == ("is_sm120_supported", "definition", True, True)
    assert "device_capability_majors=[12]" in p.old_definition and "device_capability_majors=[11, 12]" in p.new_definition
    assert "fp4_gemm_runner_backend" in p.used_by
    assert d120.status == STATUS_UNCHANGED
    # sm110: the predicate now holds, and the FP4 GEMM backend follows it
    diff = diff_releases(str(MINI_E2), str(new), [dep("sm110")])
    (p,) = diff.deployments[0].predicates
    assert (p.change, p.old_value, p.new_value) == ("value+definition", False, True)
    fp4 = settings(diff.deployments[0])["fp4_gemm_runner_backend"]
    assert (fp4.change, fp4.old.runtime, fp4.new.runtime) == (CHANGE_CHANGED, "flashinfer_cutlass", "flashinfer_cudnn")
    assert (fp4.old_deciding.line, fp4.new_deciding.line) == (24, 22)
    text = render_text(diff)
    assert "is_sm120_supported: value+definition changed  — used here by fp4_gemm_runner_backend" in text
    assert "on this device: False → True" in text


def test_fixture_flag_refused_by_one_release(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", CHOICES_AND_DEFAULT, NEW_RELEASE)
    # `cutlass` is a choice of the new release only: the old one would not start
    d = diff_releases(str(MINI_E2), str(new), [dep(sets=("moe_runner_backend=cutlass",))]).deployments[0]
    assert d.rejection == REJ_NO_LONGER and d.old.resolution is None
    assert "bad value 'cutlass' for moe_runner_backend" in d.old.error
    # and the reverse: `flashinfer_trtllm` is gone from the new release's choices
    d = diff_releases(str(MINI_E2), str(new), [dep(sets=("moe_runner_backend=flashinfer_trtllm",))]).deployments[0]
    assert d.rejection == REJ_BECOMES and d.new.resolution is None
    # refused by both: a usage error, not a change
    with pytest.raises(InputError, match="bad value 'bogus'"):
        diff_releases(str(MINI_E2), str(new), [dep(sets=("moe_runner_backend=bogus",))])
    code, _out, err = cli("diff", "--from", str(MINI_E2), "--to", str(new), "-a", "sm120", "-m", "deepseek-r1-nvfp4",
                          "--set", "moe_runner_backend=bogus")
    # progress lines, then one error line
    errors = [line for line in err.splitlines() if line.startswith("sglang-audit: error: ")]
    assert code == 2 and len(errors) == 1 and err.strip().splitlines()[-1] == errors[0]


def test_fixture_unknown_is_not_reported_as_changed(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", EXTERNAL_PROBE)
    diff = diff_releases(str(MINI_E2), str(new), [dep()])
    (d,) = diff.deployments
    fp4 = settings(d)["fp4_gemm_runner_backend"]
    assert fp4.change == CHANGE_UNKNOWN and fp4.layers == ()
    assert d.status == STATUS_UNKNOWN and not diff.changed
    assert (diff.exit_code("changed"), diff.exit_code("rejected"), diff.exit_code("never")) == (3, 0, 0)
    text = render_text(diff)
    assert "fp4_gemm_runner_backend         UNKNOWN" in text and not re.search(r"\bCHANGED\b", text)
    assert "result: unknown for 1 of 1" in text
    # the same unknown on both sides (same candidates, same conditions) is no change;
    # a second copy, so each side is analysed on its own
    twin = variant(tmp_path, "twin", EXTERNAL_PROBE)
    same = diff_releases(str(new), str(twin), [dep()])
    assert settings(same.deployments[0])["fp4_gemm_runner_backend"].change == CHANGE_UNCHANGED
    assert same.exit_code("changed") == 0


def test_fixture_json_output(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", FP4_SM120_TRTLLM, NEW_RELEASE)
    code, out, _err = cli("diff", "--from", str(MINI_E2), "--to", str(new), "-a", "sm120", "-m", "deepseek-r1-nvfp4",
                          "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert data["kind"] == "diff" and data["schema_version"] == 1
    assert (data["from"]["version"], data["to"]["version"]) == ("0.0.1", "0.0.2")
    assert data["flashinfer"] == {"from": "0.6.1", "to": "0.6.2", "changed": True}
    (d,) = data["deployments"]
    fp4 = d["settings"]["fp4_gemm_runner_backend"]
    assert fp4["change"] == "changed" and fp4["layers"] == ["runtime", "findings"]
    assert fp4["failing"] == {"from": [], "to": []}
    assert fp4["from"]["runtime"] == "flashinfer_cudnn" and fp4["to"]["runtime"] == "flashinfer_trtllm"
    assert fp4["from"]["deciding"]["line"] == 22 and fp4["from"]["chain"]
    assert data["summary"]["exit_code"] == 1 and data["summary"]["changed"] is True
    assert json.loads(render_json(diff_releases(str(MINI_E2), str(new), [dep()]))) == data


def test_fail_on_options_and_help(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", FP4_SM120_TRTLLM)
    base = ["diff", "--from", str(MINI_E2), "--to", str(new), "-a", "sm120", "-m", "deepseek-r1-nvfp4"]
    assert cli(*base)[0] == 1
    assert cli(*base, "--fail-on", "rejected")[0] == 0
    assert cli(*base, "--fail-on", "never")[0] == 0
    code, out, _ = cli("diff", "--help")
    assert code == 0
    for text in ("Exit codes:", "0  nothing changed", "1  something changed", "2  usage or input error",
                 "--fail-on", "--deployment", "deployments:"):
        assert text in out
    # --arch is needed without a deployment file
    code, _out, err = cli("diff", "--from", str(MINI_E2), "--to", str(new), "-m", "deepseek-r1-nvfp4")
    assert code == 2 and "--arch" in err


# ---- what changed: every level of a setting's outcome (issue 39 item 2) ----------------------
def _layer(status: str, value: str | None = None, method: str = "M", runner: str = "", reason: str = "") -> LayerValue:
    return LayerValue(status, value, method=method, runner=runner, site="m.py:1", reason=reason)


def _kernel(status: str) -> KernelVerdict:
    return KernelVerdict(status, "flashinfer", "1.0", "flashinfer.mm_fp4", "trtllm", f"says {status}")


def _setting(layer: Any = None, kernel: KernelVerdict | None = None, value: str = "auto", status: str = "resolved") -> Setting:
    return Setting("moe_runner_backend", value, None, status, layer=layer, kernel=kernel)


def _side(s: Setting) -> SideOutcome:
    model = ModelSummary("m", "m", "A", None, None)
    return SideOutcome(Resolution({}, "E1", {"arch": "sm120", "name": "GPU"}, model, {}, {}, None, {s.name: s}))


def _finding(rule: str) -> Finding:
    return Finding(rule, rule.lower(), "error", "high", rule, rule, "fix", (), "moe_runner_backend", "auto", (), None)


def _compare(old: Setting, new: Setting, old_rules: tuple[str, ...] = (), new_rules: tuple[str, ...] = (),
             undecided_new: tuple[str, ...] = ()) -> SettingDiff:
    f = (SettingFindings({r: _finding(r) for r in old_rules}),
         SettingFindings({r: _finding(r) for r in new_rules}, frozenset(undecided_new)))
    return compare_setting("moe_runner_backend", _side(old), _side(new), findings=f)


def test_every_level_of_the_outcome_is_compared():
    ok = _layer("resolved", "sgl-kernel cutlass_moe_fp4", runner="cutlass")
    raises = _layer("unsupported", "AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'", runner="flashinfer_trtllm")
    # the layers go from working to failing: a change at the layer level, and a regression
    sd = _compare(_setting(ok), _setting(raises, status="unsupported"))
    assert (sd.change, sd.layers) == (CHANGE_CHANGED, ("layer",))
    assert sd.note == "layer resolved → unsupported" and sd.newly_failing and not sd.still_failing
    assert (sd.old_failing, sd.new_failing) == ((), ("layer",))
    # the same status, another kernel entry or runner: a change too
    other = _layer("resolved", "FlashInfer cutlass_fused_moe", runner="flashinfer_cutlass")
    sd = _compare(_setting(ok), _setting(other))
    assert (sd.change, sd.layers) == (CHANGE_CHANGED, ("layer",))
    assert sd.note == ("layer kernel entry sgl-kernel cutlass_moe_fp4 → FlashInfer cutlass_fused_moe; "
                       "runner cutlass → flashinfer_cutlass")
    # the kernel library stops supporting the kernel (whether or not status folds it in)
    sd = _compare(_setting(kernel=_kernel("supported")), _setting(kernel=_kernel("unsupported")))
    assert (sd.change, sd.layers, sd.new_failing) == (CHANGE_CHANGED, ("kernel",), ("kernel",))
    assert "kernel supported → unsupported" in sd.note
    # a known-bad finding on it appears; one the other side could not decide is no change
    sd = _compare(_setting(), _setting(), old_rules=("SGA104",), new_rules=("SGA210",))
    assert (sd.change, sd.layers, sd.note) == (CHANGE_CHANGED, ("findings",), "findings +SGA210 -SGA104")
    assert _compare(_setting(), _setting(), old_rules=("SGA104",), undecided_new=("SGA104",)).change == CHANGE_UNCHANGED
    # failing the same way on both sides: never "unchanged"
    sd = _compare(_setting(raises, status="unsupported"), _setting(raises, status="unsupported"))
    assert (sd.change, sd.layers, sd.still_failing, sd.newly_failing) == (CHANGE_STILL_FAILING, (), True, False)
    assert sd.note == "still failing on both (layer)"
    # a layer outcome known on one side only: unknown, not a change and not "unchanged"
    unknown = _layer("unknown", reason="depends on runtime state")
    sd = _compare(_setting(ok), _setting(unknown, status="unknown"))
    assert (sd.change, sd.unknown_levels) == (CHANGE_UNKNOWN, ("layer",))
    # ... and failing where the old one could not be told: maybe a regression, not a known one
    sd = _compare(_setting(unknown, status="unknown"), _setting(raises, status="unsupported"))
    assert sd.change == CHANGE_UNKNOWN and sd.maybe_newly_failing and not sd.newly_failing
    # the same unknown said the same way on both sides is no change
    assert _compare(_setting(unknown), _setting(unknown)).change == CHANGE_UNCHANGED
    # nothing differs at any level
    assert _compare(_setting(ok, _kernel("supported")), _setting(ok, _kernel("supported"))).change == CHANGE_UNCHANGED
    # the JSON names the levels and what fails on each side
    data = _compare(_setting(ok), _setting(raises, status="unsupported"), new_rules=("SGA003",)).to_json()
    assert (data["change"], data["layers"]) == ("changed", ["layer", "findings"])
    assert data["failing"] == {"from": [], "to": ["layer"]}
    assert (data["from"]["layer"]["status"], data["to"]["layer"]["status"]) == ("resolved", "unsupported")


def _release_diff(old: Setting, new: Setting) -> ReleaseDiff:
    sd = _compare(old, new)
    dd = DeploymentDiff(dep(), _side(old), _side(new), REJ_UNCHANGED, (sd,), ())
    return ReleaseDiff(ReleaseInfo("a", "1.0", None), ReleaseInfo("b", "2.0", None), (), (dd,))


def test_failing_on_both_and_newly_failing_in_the_verdict_and_exit_codes():
    ok = _layer("resolved", "sgl-kernel cutlass_moe_fp4")
    raises = _layer("unsupported", "AttributeError: no g1_scale_c", runner="flashinfer_trtllm")
    # failing on both: not "UNCHANGED", not a clean 0 (it would read as all-clear)
    both = _release_diff(_setting(raises, status="unsupported"), _setting(raises, status="unsupported"))
    (d,) = both.deployments
    assert d.status == STATUS_STILL_FAILING and not both.changed and both.still_failing
    assert (both.exit_code("changed"), both.exit_code("rejected"), both.exit_code("never")) == (1, 0, 0)
    text = render_text(both)
    assert ": STILL FAILING ==" in text and "UNCHANGED" not in text
    assert "configuration: accepted by SGLang's argument checks, but 1 setting fails when the model is built on both releases" in text
    assert "  still failing on both: moe_runner_backend (layer)" in text
    assert "moe_runner_backend  STILL FAILING on both  auto  (unsupported)" in text
    assert "fails on both: the MoE layers built with it raise AttributeError: no g1_scale_c at m.py:1" in text
    assert "result: nothing changed for this deployment, but STILL FAILING on both releases for 1 of 1 — moe_runner_backend (layer)" in text
    data = json.loads(render_json(both))
    assert data["deployments"][0]["status"] == "still_failing"
    assert data["deployments"][0]["settings"]["moe_runner_backend"]["change"] == "still_failing"
    assert data["summary"]["still_failing"] is True and data["summary"]["exit_code"] == 1
    # newly failing: a change, and a regression --fail-on rejected counts
    newly = _release_diff(_setting(ok), _setting(raises, status="unsupported"))
    assert newly.deployments[0].status == STATUS_CHANGED and newly.newly_failing
    assert (newly.exit_code("changed"), newly.exit_code("rejected")) == (1, 1)
    text = render_text(newly)
    assert "moe_runner_backend  CHANGED (layer), NEWLY FAILING in 2.0  [layer resolved → unsupported]" in text
    assert "layer unsupported: AttributeError: no g1_scale_c at m.py:1 (M, runner flashinfer_trtllm)" in text
    assert "result: CHANGED for 1 of 1 deployment — moe_runner_backend newly fails in 2.0 (layer)" in text
    # failing on the new side where the old one could not be told: maybe (3), not a clean 0
    maybe = _release_diff(_setting(_layer("unknown", reason="r"), status="unknown"), _setting(raises, status="unsupported"))
    assert (maybe.exit_code("changed"), maybe.exit_code("rejected")) == (3, 3)
    # fixed on the new side: a change, not a regression
    fixed = _release_diff(_setting(raises, status="unsupported"), _setting(ok))
    assert (fixed.exit_code("changed"), fixed.exit_code("rejected")) == (1, 0)
    assert "moe_runner_backend no longer fails (layer)" in render_text(fixed)


def test_help_documents_the_failing_exit_codes():
    code, out, _ = cli("diff", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "or a deployment still fails on both releases" in flat
    assert "only when a deployment becomes rejected, or a setting newly fails" in flat


# ---- deployment files -------------------------------------------------------------------
FLEET_YAML = """\
deployments:
  - name: rtx-pro
    arch: sm120
    model: deepseek-r1-nvfp4
    flags: {tp_size: 8, disable_radix_cache: true}
  - name: b200
    arch: sm100
    model: deepseek-r1-nvfp4
    cuda: "12.8"
  - name: h100
    arch: sm90
    launch: "python -m sglang.launch_server --model-path qwen3-30b-a3b --tp 2"
    env: {SGLANG_FIXTURE_FORCE_TRITON: "1"}
"""

FLEET_TOML = """\
[[deployments]]
name = "b200"
arch = "sm100"
model = "deepseek-r1-nvfp4"

[[deployments]]
name = "h100"
arch = "sm90"
model = "qwen3-30b-a3b"
flags = { tp_size = 2 }

[[deployments]]
name = "h100-launch"
arch = "9.0"
launch = "python -m sglang.launch_server --model-path qwen3-30b-a3b --tp-size 4"
"""


def test_deployment_file_three_deployments_one_summary(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", FP4_SM120_TRTLLM, NEW_RELEASE)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET_YAML, encoding="utf-8")
    deps = load_deployments(fleet)
    assert [d.name for d in deps] == ["rtx-pro", "b200", "h100"]
    assert deps[0].sets == ("tp_size=8", "disable_radix_cache=true") and deps[1].cuda == "12.8"
    assert deps[2].model is None and deps[2].env == ("SGLANG_FIXTURE_FORCE_TRITON=1",)
    code, out, _err = cli("diff", "--from", str(MINI_E2), "--to", str(new), "--deployment", str(fleet))
    assert code == 1, out
    assert out.count("summary (0.0.1 → 0.0.2):") == 1
    table = out.split("summary (0.0.1 → 0.0.2):\n", 1)[1].splitlines()
    assert table[0].split() == ["deployment", "result", "configuration", "known-bad", "fp4_gemm_runner_backend"]
    rows = {line.split()[0]: line.split()[1:] for line in table[2:5]}
    # the new FP4 pick (flashinfer_trtllm on SM120) is a known-bad one (SGA103); the finding
    # about the old pick (FlashInfer mm_fp4 on SM12x) is gone (no cuDNN reminder SGA104 either
    # side: the pip profile's cuDNN, torch 2.9.1's pin, is known)
    assert rows == {"rtx-pro": ["CHANGED", "accepted", "+SGA103", "-SGA303", "CHANGED"],
                    "b200": ["unchanged", "accepted", "="], "h100": ["unchanged", "accepted", "="]}
    assert "result: CHANGED for 1 of 3 deployments — rtx-pro: fp4_gemm_runner_backend, known-bad +SGA103" in out
    # the env of the h100 entry reached SGLang: its MoE runner is forced to triton
    assert "h100 (sm90, model from launch)" in out and "moe_runner_backend              unchanged  triton" in out
    # the same fleet against the old release itself: nothing changed, exit 0
    code, out, _err = cli("diff", "--from", str(MINI_E2), "--to", str(MINI_E2), "--deployment", str(fleet))
    assert code == 0 and "result: nothing changed for these deployments" in out


def test_deployment_file_toml_all_unchanged_exit_0(isolated_cache, tmp_path):
    new = variant(tmp_path, "new", FP4_SM120_TRTLLM, NEW_RELEASE)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET_TOML, encoding="utf-8")
    code, out, _err = cli("diff", "--from", str(MINI_E2), "--to", str(new), "--deployment", str(fleet), "--format", "json")
    assert code == 0, out
    data = json.loads(out)
    assert list(data["summary"]["deployments"]) == ["b200", "h100", "h100-launch"]
    assert {v["status"] for v in data["summary"]["deployments"].values()} == {"unchanged"}
    assert data["deployments"][2]["from"]["flags"] == {"tp_size": 4}


@pytest.mark.parametrize(("name", "content", "problem"), [
    ("bad.yaml", "deployments: [\n", "not valid YAML"),
    ("bad.toml", "deployments = [", "not valid TOML"),
    ("bad.json", "{}", "unknown file type '.json'"),
    ("empty.yaml", "deployments: []\n", "expected a non-empty list 'deployments'"),
    ("top.yaml", "deployment: []\n", "unknown top-level key 'deployment'"),
    ("noarch.yaml", "deployments:\n  - {name: a, model: m}\n", "deployment 1 ('a'): 'arch' is required"),
    ("badarch.yaml", "deployments:\n  - {name: a, arch: sm999, model: m}\n", "deployment 1 ('a'): unknown --arch 'sm999'"),
    ("key.yaml", "deployments:\n  - {name: a, arch: sm90, model: m, flag: {}}\n", "unknown key 'flag' (did you mean 'flags'?)"),
    ("nomodel.yaml", "deployments:\n  - {name: a, arch: sm90}\n", "give 'model' (or a 'launch' command"),
    ("dup.yaml", "deployments:\n  - {name: a, arch: sm90, model: m}\n  - {name: a, arch: sm90, model: m}\n", "deployment 2: duplicate name 'a'"),
    ("flags.yaml", "deployments:\n  - {name: a, arch: sm90, model: m, flags: [tp_size]}\n", "'flags' must be a mapping"),
    ("noname.yaml", "deployments:\n  - {arch: sm90, model: m}\n", "deployment 1: 'name' is required"),
    ("cudnn.yaml", "deployments:\n  - {name: a, arch: sm90, model: m, cudnn: nine}\n", "deployment 1 ('a'): bad --cudnn"),
    ("profile.yaml", "deployments:\n  - {name: a, arch: gfx942, model: m, env_profile: docker}\n",
     "'env_profile' must be one of image, pip, not 'docker'"),
])
def test_deployment_file_errors_are_one_line_exit_2(isolated_cache, tmp_path, name, content, problem):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match="deployment file"):
        load_deployments(path)
    code, out, err = cli("diff", "--from", str(MINI_E2), "--to", str(MINI_E2), "--deployment", str(path))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and problem in lines[0], err


def test_deployment_file_missing_and_mixed_options(isolated_cache, tmp_path):
    code, _out, err = cli("diff", "--from", str(MINI_E2), "--to", str(MINI_E2), "--deployment", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read deployment file" in err and "nope.yaml" in err
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET_YAML, encoding="utf-8")
    code, _out, err = cli("diff", "--from", str(MINI_E2), "--to", str(MINI_E2), "--deployment", str(fleet), "-a", "sm90")
    assert code == 2 and "--arch cannot be combined with --deployment" in err


def test_a_deployment_carries_every_target_field_of_a_request():
    # Deployment, TargetOptions.request() and Request each listed the deployment's fields; diff
    # rebuilt a file's deployments without `driver` and dropped --cudnn/--env-profile. Every
    # Request field but the command's own must survive the round trip.
    import dataclasses

    from sglang_audit.resolve.pipeline import Request

    command_only = {"source", "use_cache", "flashinfer_source", "config", "fields", "all_fields", "launch"}
    given: dict[str, Any] = {}
    for f in dataclasses.fields(Request):
        if f.name in command_only:
            continue
        given[f.name] = ([f"{f.name}=1"] if f.name in ("sets", "env") else [f.name] if "packages" in f.name
                         else {"cuda_graph_bs": [1, 2]} if f.name == "flags" else f"{f.name}-value")
    request = Request(source="s", launch="python -m sglang.launch_server", **given)
    back = Deployment.of_request(request, request.launch).request("s", True)
    assert back == request


def test_the_command_line_adds_to_each_deployment_and_never_drops_a_field(tmp_path):
    from sglang_audit.resolve.pipeline import Request

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("deployments:\n  - {name: a, arch: sm120, model: m, driver: '575.57.08', cudnn: '9.8.0', with: [x]}\n"
                     "  - {name: b, arch: gfx942, model: m, env_profile: pip}\n", encoding="utf-8")
    a, b = load_deployments(fleet)
    cli_side = Request(source=None, arch="", model=None, with_packages=["flash_mla"], env_profile="image")
    a2 = a.with_command_line(cli_side).request(None, True)
    assert (a2.driver, a2.cudnn, a2.env_profile, a2.with_packages) == ("575.57.08", "9.8.0", "image", ["flash_mla", "x"])
    with pytest.raises(InputError, match="deployment 'b' sets env_profile 'pip' and the command line --env-profile image"):
        b.with_command_line(cli_side)
    assert b.with_command_line(Request(source=None, arch="", model=None, cudnn="9.10.2")).request(None, True).cudnn == "9.10.2"


def test_deployment_with_an_unknown_model_names_the_deployment(isolated_cache, tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("deployments:\n  - {name: ghost, arch: sm90, model: no-such-model}\n", encoding="utf-8")
    code, _out, err = cli("diff", "--from", str(MINI_E2), "--to", str(MINI_E2), "--deployment", str(fleet))
    assert code == 2 and "deployment 'ghost': model not found" in err


def test_missing_release_is_a_usage_error(isolated_cache, tmp_path):
    code, _out, err = cli("diff", "--from", str(MINI_E2), "--to", str(tmp_path / "no-checkout"), "-a", "sm90", "-m", "qwen3-30b-a3b")
    assert code == 2 and err.strip().splitlines()[-1].startswith("sglang-audit: error: ")


# ---- real releases ----------------------------------------------------------------------
@pytest.mark.real_release
def test_real_0512_to_0513_fp4_gemm_change_on_sm120(release):
    release("0.5.12")
    release("0.5.13")
    code, out, _err = cli("diff", "--from", "sglang==0.5.12", "--to", "sglang==0.5.13", "--arch", "sm120",
                          "--model", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8")
    assert code == 1, out
    # (no -SGA104: 0.5.12's cuDNN is torch 2.11.0's pin for a plain install, so the reminder is not needed)
    assert "fp4_gemm_runner_backend         CHANGED (runtime, findings)  [findings +SGA101]" in out
    assert "0.5.12  auto → runtime flashinfer_cudnn  (resolved)" in out
    assert "0.5.13  auto → runtime flashinfer_cutlass  (resolved)" in out
    assert f"* runtime {FP4}:151 if backend == \"auto\" and is_sm120_supported() → 'flashinfer_cudnn'" in out
    assert f"* runtime {FP4}:160 if backend == \"auto\" and not (is_sm100_supported())" in out
    assert "guards removed: backend == \"auto\" and is_sm120_supported()" in out
    assert "pinned flashinfer_python: 0.6.11.post1 → 0.6.12" in out
    assert "fp4_gemm_runner_backend choices: +marlin" in out
    assert "is_sm80_supported: new in 0.5.13" in out
    assert "result: CHANGED for 1 of 1 deployment — fp4_gemm_runner_backend" in out
    code, out, _err = cli("diff", "--from", "sglang==0.5.12", "--to", "sglang==0.5.13", "--arch", "sm120",
                          "--model", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8", "--format", "json")
    fp4 = json.loads(out)["deployments"][0]["settings"]["fp4_gemm_runner_backend"]
    assert (fp4["from"]["deciding"]["file"], fp4["from"]["deciding"]["line"]) == (FP4, 151)
    assert (fp4["to"]["deciding"]["file"], fp4["to"]["deciding"]["line"]) == (FP4, 160)


@pytest.mark.real_release
def test_real_release_against_itself_reports_nothing(release):
    tree = release("0.5.13")
    # the same spelling twice, and the wheel against its extracted sources (two analyses)
    for to in ("sglang==0.5.13", str(tree.package_dir.parent)):
        code, out, _err = cli("diff", "--from", "sglang==0.5.13", "--to", to, "--arch", "sm120",
                              "--model", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8")
        assert code == 0, out
        assert "result: nothing changed for this deployment" in out
        assert not re.search(r"\bCHANGED\b", out) and "hardware predicates" not in out
        assert "declared choices and defaults (from 0.5.13 → to 0.5.13):\n  no change for these settings" in out


@pytest.mark.real_release
def test_real_fleet_of_three_0512_to_0513(release, tmp_path):
    release("0.5.12")
    release("0.5.13")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("""\
deployments:
  - {name: qwen-sm120, arch: sm120, model: qwen3.5-397b-a17b-nvfp4, flags: {tp_size: 8}}
  - {name: dsr1-b200, arch: sm100, model: deepseek-r1-nvfp4, flags: {tp_size: 8}}
  - {name: qwen3-h100, arch: sm90, launch: "python -m sglang.launch_server --model-path qwen3-30b-a3b --tp 2"}
""", encoding="utf-8")
    code, out, _err = cli("diff", "--from", "sglang==0.5.12", "--to", "sglang==0.5.13", "--deployment", str(fleet))
    assert code == 1, out
    assert out.count("summary (0.5.12 → 0.5.13):") == 1
    table = out.split("summary (0.5.12 → 0.5.13):\n", 1)[1].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table[2:5]}
    # the 0.5.13 regression: auto now picks flashinfer_cutlass on SM120 (NaN, SGA101) and
    # no longer flashinfer_cudnn (no cuDNN reminder SGA104 for it: a plain install's cuDNN, torch
    # 2.11.0's pin, is known and new enough)
    # 0.5.13 also renames the DSA sub-backend fields nsa_* -> dsa_*: rules/settings.toml `renamed`
    # pairs them, so they are compared (unchanged here) instead of removed + added
    assert table[0].split()[-1] == "fp4_gemm_runner_backend"
    assert "nsa_prefill_backend" not in table[0] and "dsa_prefill_backend" not in table[0]
    assert rows["qwen-sm120"] == ["CHANGED", "accepted", "+SGA101", "CHANGED"]
    assert "known-bad new in 0.5.13: ERROR SGA101" in out
    # the values did not change, and both releases' MoE layers reach trtllm_fp4_block_scale_moe
    # with flashinfer_trtllm: unchanged, decided (before abstract tensors, issue 41, 0.5.13's weight
    # preparation stopped and the row was "unknown", never "unchanged": issue 39 item 2); no
    # deployment's MoE runner changes, so the column is not shown
    assert rows["dsr1-b200"] == ["unchanged", "accepted", "="]
    assert "moe_runner_backend" not in table[0]
    # sm90: the FP4 GEMM auto pick moved to marlin (0.5.13 adds the sm80-sm9x branch)
    assert rows["qwen3-h100"] == ["CHANGED", "accepted", "CHANGED"]
    assert "0.5.13  auto → runtime marlin" in out
    assert cli("diff", "--from", "sglang==0.5.12", "--to", "sglang==0.5.13", "--deployment", str(fleet),
               "--fail-on", "rejected")[0] == 0


@pytest.mark.real_release
def test_real_predicate_definition_change_0508_to_0509_on_sm110(release):
    release("0.5.8")
    release("0.5.9")
    code, out, _err = cli("diff", "--from", "sglang==0.5.8", "--to", "sglang==0.5.9", "--arch", "sm110",
                          "--model", "qwen3-30b-a3b", "--format", "json")
    assert code in (0, 1, 3), out
    preds = {p["name"]: p for p in json.loads(out)["deployments"][0]["predicates"]}
    bw = preds["is_blackwell_supported"]
    assert "device_capability_majors=[10, 12]" in bw["from"]["definition"]
    assert "device_capability_majors=[10, 11, 12]" in bw["to"]["definition"]
    assert (bw["from"]["value"], bw["to"]["value"], bw["change"]) == (False, True, "value+definition")


# ---- a renamed setting (rules/settings.toml `renamed`) ------------------------------------


@pytest.mark.real_release
def test_nsa_to_dsa_rename_is_compared_not_removed_and_added(release):
    """0.5.13 renamed nsa_{prefill,decode}_backend to dsa_*: diff pairs them, so an unchanged
    trtllm choice on SM120 is `unchanged` under the new name, the old names leave no
    `removed` row, and SGA410 on them is neither new nor gone."""
    glm5 = ROOT / "tests" / "field" / "models" / "glm-5-nvfp4"
    old, new = release("0.5.12"), release("0.5.13")
    d = diff_releases(str(old.package_dir), str(new.package_dir),
                      [Deployment("", "sm120", str(glm5), sets=("tp_size=8",))]).deployments[0]
    s = settings(d)
    for name in ("prefill", "decode"):
        row = s[f"dsa_{name}_backend"]
        assert row.change == CHANGE_UNCHANGED and row.note == f"renamed from nsa_{name}_backend"
        assert row.old.name == f"nsa_{name}_backend" and row.old.config == "trtllm" and row.new.config == "trtllm"
        assert s[f"nsa_{name}_backend"].change == "absent"
    moved = {(f.rule_id, f.setting) for f in d.findings_added + d.findings_removed}
    assert not any(rule == "SGA410" for rule, _ in moved), moved
    data = json.loads(render_json(diff_releases(str(old.package_dir), str(new.package_dir),
                                                [Deployment("", "sm120", str(glm5), sets=("tp_size=8",))])))
    rows = data["deployments"][0]["settings"]
    assert "nsa_prefill_backend" not in rows and rows["dsa_prefill_backend"]["change"] == "unchanged"


# ---- issue 39 item 2: a setting whose layers go from working to failing -------------------
QWEN_NEXTN = ("--arch", "sm120", "--model", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8",
              "--set", "speculative_algorithm=NEXTN", "--set", "disable_radix_cache=true")


@pytest.mark.real_release
def test_real_0510_to_0523_layers_that_start_failing_are_a_change(release):
    """0.5.10 builds the NVFP4 MoE layers with cutlass_moe_fp4; 0.5.23 runs the TRT-LLM branch
    and raises: the same `auto`, a different outcome. It was reported `unchanged`."""
    release("0.5.10")
    release("0.5.23")
    args = ("diff", "--from", "sglang==0.5.10", "--to", "sglang==0.5.23", *QWEN_NEXTN)
    code, out, _err = cli(*args, "--format", "json")
    assert code == 1, out
    data = json.loads(out)
    moe = data["deployments"][0]["settings"]["moe_runner_backend"]
    assert (moe["from"]["layer"]["status"], moe["to"]["layer"]["status"]) == ("resolved", "unsupported")
    assert moe["change"] == "changed" and "layer" in moe["layers"]
    assert moe["failing"] == {"from": [], "to": ["layer"]}
    (summary,) = data["summary"]["deployments"].values()
    assert summary["settings"]["moe_runner_backend"] == "changed"
    assert data["summary"]["newly_failing"] is True
    code, out, _err = cli(*args)
    assert code == 1, out
    assert re.search(r"moe_runner_backend +CHANGED \(layer[^)]*\), NEWLY FAILING in 0\.5\.23", out), out
    assert "layer resolved: sgl-kernel cutlass_moe_fp4" in out
    assert "layer unsupported: AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'" in out
    assert not re.search(r"^  moe_runner_backend +unchanged", out, re.M)
    assert "configuration: accepted by SGLang's argument checks, but" in out and "newly failing in 0.5.23: moe_runner_backend (layer)" in out
    assert "moe_runner_backend newly fails in 0.5.23 (layer)" in out.splitlines()[-1]
    # a setting that newly fails is a regression: --fail-on rejected counts it
    assert cli(*args, "--fail-on", "rejected")[0] == 1


@pytest.mark.real_release
def test_real_0522_to_0523_still_failing_on_both_is_not_all_clear(release):
    """The MoE layers raise on both releases: nothing changed, and it is not "UNCHANGED",
    "configuration: accepted", exit 0."""
    release("0.5.22")
    release("0.5.23")
    args = ("diff", "--from", "sglang==0.5.22", "--to", "sglang==0.5.23", *QWEN_NEXTN)
    code, out, _err = cli(*args)
    assert code == 1, out
    assert ": STILL FAILING ==" in out and ": UNCHANGED ==" not in out
    assert "configuration: accepted by SGLang's argument checks, but 1 setting fails when the model is built on both releases" in out
    assert "  still failing on both: moe_runner_backend (layer)" in out
    assert re.search(r"moe_runner_backend +STILL FAILING on both +auto +\(unsupported\)", out), out
    assert "fails on both: the MoE layers built with it raise AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'" in out
    assert "result: nothing changed for this deployment, but STILL FAILING on both releases for 1 of 1 — moe_runner_backend (layer)" in out
    data = json.loads(cli(*args, "--format", "json")[1])
    (d,) = data["deployments"]
    assert d["status"] == STATUS_STILL_FAILING and d["settings"]["moe_runner_backend"]["change"] == CHANGE_STILL_FAILING
    assert d["settings"]["moe_runner_backend"]["failing"] == {"from": ["layer"], "to": ["layer"]}
    assert data["summary"]["still_failing"] is True and data["summary"]["exit_code"] == 1
    # not a new failure: --fail-on rejected passes
    assert cli(*args, "--fail-on", "rejected")[0] == 0

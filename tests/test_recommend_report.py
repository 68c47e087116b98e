"""The Recommendation section of ``report`` (issue 19): what ``recommend`` says, as inert HTML."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import cli

# the report tests' fixture checkout (mini_e2) and its hostile variant, and their helpers
from test_report import (  # noqa: F401
    IMG,
    PAYLOADS,
    REJECT_MSG,
    SCRIPT,
    STYLE,
    browser_bin,
    checkout,
    esc,
    hostile,
    no_external_loads,
    open_page,
)

from sglang_audit.cli.report import build_report
from sglang_audit.render.html import _https, render_html
from sglang_audit.resolve.pipeline import Request

MOE, FP4 = "moe_runner_backend", "fp4_gemm_runner_backend"


def _page(source: Path, **kw) -> str:
    req = Request(source=str(source), arch="sm120", model="deepseek-r1-nvfp4", sets=[])
    return render_html(build_report(req, force_choices=False, recommend=True, **kw))


def section(page: str) -> str:
    start = page.index('<section id="recommend">')
    return page[start:page.index("</section>", start)]


def test_the_section_shows_the_recommendation_ranked_list_rejections_and_plan(checkout):  # noqa: F811 (the imported fixture)
    page = _page(checkout)
    assert '<a href="#recommend">Recommendation</a>' in page
    rec = section(page)
    # the ready launch command and what it changes
    assert "--moe-runner-backend flashinfer_cutlass --fp4-gemm-backend flashinfer_cudnn</pre>" in rec
    assert f'<td class="mono">{MOE}</td><td class="val">auto</td><td class="val">flashinfer_cutlass</td>' in rec
    # the ranked viable list with its evidence (SGLang's own pick, linked to its line) and why 1 is above 2
    viable = rec[rec.index("Viable (2)"):rec.index("Rejected (")]
    assert viable.index(f"{FP4}</span> = <span class=\"value\">flashinfer_cudnn") < viable.index(f"{MOE}</span> = <span class=\"value\">triton")
    assert "SGLang&#39;s auto picks flashinfer_cudnn on this device" in viable
    assert "<code>sglang/srt/layers/quantization/fp4_utils.py:22</code>" in viable
    assert '<span class="badge ok">checked</span>' in viable
    # each rejected candidate with the one reason, where, the rule and its sources linked
    rejected = rec[rec.index("Rejected (3)"):]
    assert f'<td class="mono">{MOE}=flashinfer_trtllm</td>' in rejected and "SGA201" in rejected
    assert 'href="https://github.com/sgl-project/sglang/issues/39807"' in rejected
    assert "<code>sglang/srt/server_args.py:22</code>" in rejected
    # the benchmark plan: the commands, tagged with each candidate's id
    assert f"--tag {MOE}=flashinfer_cutlass,{FP4}=flashinfer_cudnn --output-file recommend-bench.jsonl" in rec
    assert "11 full resolutions (bound 32)" in rec
    no_external_loads(page)


def test_without_recommend_there_is_no_section(checkout):  # noqa: F811 (the imported fixture)
    req = Request(source=str(checkout), arch="sm120", model="deepseek-r1-nvfp4", sets=[])
    page = render_html(build_report(req, force_choices=False))
    assert 'id="recommend"' not in page and "#recommend" not in page


def test_payloads_in_the_recommendation_are_escaped(hostile, tmp_path: Path):  # noqa: F811 (the imported fixture)
    # a hostile choice (a candidate id), a hostile rejection message, and a --bench line
    # tagged with a payload: all text, nothing the browser runs
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"tag": SCRIPT, "output_throughput": 1.0}) + "\n")
    rec = section(page := _page(hostile, bench=str(bench)))
    for payload in PAYLOADS:
        assert payload not in page, payload
    assert esc(REJECT_MSG) in rec  # flashinfer_cutlass, rejected with the hostile message
    assert esc(f"{MOE}={STYLE}") in rec  # the hostile choice, as a candidate
    no_external_loads(page)
    assert page.count("<style>") == 1 and page.count("</style>") == 1


def test_only_plain_https_sources_become_links():
    assert _https("https://github.com/flashinfer-ai/flashinfer/pull/3051") == "https://github.com/flashinfer-ai/flashinfer/pull/3051"
    for bad in ("javascript:alert(1)", "http://example.com/x", "https://x/\"onmouseover=1", "data:text/html,<b>",
                "sglang/srt/server_args.py:22", ""):
        assert _https(bad) is None, bad


def test_cli_report_recommend_and_bench_options(checkout, tmp_path: Path):  # noqa: F811 (the imported fixture)
    out = tmp_path / "r.html"
    code, _o, err = cli("report", "-s", checkout, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--no-choices",
                        "--recommend", "--max-resolutions", "4", "-o", out)
    assert code == 0, err
    rec = section(out.read_text(encoding="utf-8"))
    # the bound holds in all (the single-choice stage counts too); what it left out is listed
    assert "4 full resolutions (bound 4)" in rec and "Not evaluated (" in rec and f"{FP4}=flashinfer_cudnn" in rec
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"tag": f"{MOE}=triton,{FP4}=flashinfer_cudnn", "output_throughput": 2000.0}) + "\n")
    code, _o, err = cli("report", "-s", checkout, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--no-choices",
                        "--bench", bench, "-o", out)  # --bench alone implies --recommend
    assert code == 0, err
    rec = section(out.read_text(encoding="utf-8"))
    assert "--moe-runner-backend triton --fp4-gemm-backend flashinfer_cudnn</pre>" in rec
    assert "1 --bench line" in rec and '<span class="badge ok">bench</span> --bench line 1: output_throughput 2000' in rec
    code, _o, err = cli("report", "-s", checkout, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--no-choices",
                        "--explore", "attention", "-o", out)  # implies --recommend too
    assert code == 0, err
    assert "id=\"recommend\"" in out.read_text(encoding="utf-8")
    code, _o, err = cli("report", "-s", checkout, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--recommend",
                        "--bench", tmp_path / "missing.jsonl", "-o", out)
    assert code == 2 and "missing.jsonl" in err and "Traceback" not in err


def test_browser_the_recommendation_renders_payloads_as_text(hostile, tmp_path: Path, open_page):  # noqa: F811 (the imported fixtures)
    from selenium.webdriver.common.by import By

    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"tag": SCRIPT, "output_throughput": 1.0}) + "\n")
    report = tmp_path / "hostile-recommend.html"
    report.write_text(_page(hostile, bench=str(bench)), encoding="utf-8")
    page = open_page(report)
    d = page.driver
    assert d.execute_script("return typeof window.__pwned") == "undefined"
    assert d.find_elements(By.TAG_NAME, "script") == [] and d.find_elements(By.TAG_NAME, "img") == []
    assert d.find_elements(By.TAG_NAME, "b") == []
    section = d.find_element(By.ID, "recommend")
    text = section.text
    assert "Recommended configuration" in text and "Benchmark plan" in text
    assert f"{MOE}={STYLE}" in text and IMG in text  # the hostile choice and rejection message, as text
    assert section.find_element(By.CSS_SELECTOR, "table.recommend-viable").is_displayed()
    assert page.console_errors() == []
    assert page.requests() == []

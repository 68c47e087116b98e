"""`sglang-audit report`: the self-contained HTML report.

Fast tests render the fixture checkout (sections, escaping, determinism, --from,
--deployment, the graph layout).  Browser tests open the file in headless Chromium
(selenium + the Debian chromium/chromium-driver packages): a real release renders with no
console error, no network request and the summary table visible (a screenshot is saved
in tests/artifacts/); HTML/JS payloads planted in a fixture's source render as text and
never run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from clirun import cli
from markupsafe import escape

from sglang_audit.analyses.report_graph import deployment_graph
from sglang_audit.cli.report import build_report
from sglang_audit.render.html import render_html
from sglang_audit.resolve.pipeline import Request

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SA = "python/sglang/srt/server_args.py"
FP4 = "python/sglang/srt/layers/quantization/fp4_utils.py"

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'
STYLE = "</style><b>styled</b>"
PAYLOADS = (SCRIPT, IMG, STYLE)
REJECT_MSG = f"Flashinfer Cutlass MOE needs modelopt_fp4 {SCRIPT} {IMG}"


def esc(text: str) -> str:
    """As the template escapes (markupsafe: &#39; and &#34; for quotes)."""
    return str(escape(text))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture changed: {old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.fixture()
def checkout(tmp_path, isolated_cache) -> Path:
    dst = tmp_path / "mini_e2"
    shutil.copytree(MINI_E2, dst)
    return dst


@pytest.fixture()
def hostile(checkout) -> Path:
    """mini_e2 with HTML/JS payloads in comments, guard strings, a choice and an assert
    message, each where the report shows it (source snippets, guards, the graph's
    guard node, the forced-choice table, a rejection message)."""
    sa = checkout / SA
    # a comment next to a decision: in the source snippet around it
    edit(sa, '        if get_bool_env_var("SGLANG_FIXTURE_FORCE_TRITON"):',
         f'        # {SCRIPT} {IMG} {STYLE}\n        if get_bool_env_var("SGLANG_FIXTURE_FORCE_TRITON"):')
    # a string in a hardware guard: in the branch tables and the graph's decision node
    edit(sa, "            if is_sm100_supported():",
         f"            if is_sm100_supported() and {SCRIPT!r} != {IMG!r}:")
    # a choice and an assert message: forcing flashinfer_cutlass is rejected with it
    edit(sa, 'MOE_RUNNER_BACKEND_CHOICES = ["auto", "triton", "flashinfer_trtllm", "flashinfer_cutlass"]',
         f'MOE_RUNNER_BACKEND_CHOICES = ["auto", "triton", "flashinfer_trtllm", "flashinfer_cutlass", {STYLE!r}]')
    edit(sa, 'assert self.quantization in ["modelopt_fp4", None], "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE"',
         f'assert self.quantization in ["modelopt_fp4"], {REJECT_MSG!r}')
    # a comment in the runtime initialiser, next to the decision that fires on sm120
    edit(checkout / FP4, "        if is_sm120_supported():", f"        # {STYLE} {SCRIPT}\n        if is_sm120_supported():")
    return checkout


def render(source: Path | str, arch: str = "sm120", model: str = "deepseek-r1-nvfp4", sets: tuple[str, ...] = (),
           from_source: str | None = None, timestamp: str | None = None) -> str:
    req = Request(source=str(source), arch=arch, model=model, sets=list(sets))
    return render_html(build_report(req, from_source, timestamp=timestamp))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def no_external_loads(page: str) -> None:
    """Nothing the browser would run or fetch: no script/img/link/iframe element, no src,
    links only on <a>, no url() but the SVG's own #marker."""
    parser = _Tags()
    parser.feed(page)
    tags = parser.tags
    names = {t for t, _ in tags}
    assert not names & {"script", "img", "link", "iframe", "object", "embed", "base", "image", "use", "audio", "video", "source"}
    for tag, attrs in tags:
        assert not {"src", "srcset", "background", "xlink:href", "action", "formaction"} & set(attrs), (tag, attrs)
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)
        if "href" in attrs:
            assert tag == "a" and re.match(r"(https://|#)", attrs["href"] or ""), (tag, attrs)
    for m in re.finditer(r"url\(([^)]*)\)", page):
        assert m.group(1) == "#arr", m.group(0)
    assert "@import" not in page


# ---- fast: the renderer on the fixture ---------------------------------------------------
def test_fixture_report_has_every_section(checkout):
    page = render(checkout)
    for anchor in ("summary", "summary-table", "findings", "graph", "settings", "notes",
                   "setting-moe_runner_backend", "setting-speculative_moe_runner_backend", "setting-fp4_gemm_runner_backend"):
        assert f'id="{anchor}"' in page, anchor
    assert 'id="diff"' not in page  # no --from
    # summary: release, FlashInfer pin, device, model, flags table with runtime values
    assert "0.6.1" in page and "sm120" in page and "CUDA" in page and "12.9" in page
    assert "DeepseekV3ForCausalLM" in page and "modelopt_fp4" in page
    assert "flashinfer_cudnn" in page
    # per setting: the decision with file:line and the guard as written, its source lines
    assert "sglang/srt/layers/quantization/fp4_utils.py:22" in page
    assert esc('if backend == "auto" and is_sm120_supported()') in page
    assert 'class="ln hit"><span class="n">22</span>' in page  # the deciding line, highlighted
    assert esc('            backend = "flashinfer_cudnn"') in page
    # candidates: every forced choice, and branches with why they do (not) fire
    assert "If you force it" in page and "flashinfer_trtllm" in page
    assert "must be false, but is true on sm120" in page  # the blocked cutlass branch
    # findings with their sources linked
    assert "SGA303" in page and 'href="https://github.com/flashinfer-ai/flashinfer/issues/2577"' in page
    # the device's cuDNN with its source (the fixture pins torch 2.9.1: the pip profile's pin)
    assert "<dt>cuDNN</dt><dd>9.10.2 (the pip profile: torch 2.9.1 Requires-Dist nvidia-cudnn-cu12==9.10.2.21" in page
    # the graph: inline SVG with the predicate and the fired decision
    assert "<svg" in page and "is_sm120_supported() = True" in page and "fp4_utils.py:22 → &#39;flashinfer_cudnn&#39;" in page
    no_external_loads(page)


def test_fixture_report_is_deterministic_and_timestamp_is_opt_in(checkout):
    a, b = render(checkout), render(checkout)
    assert a == b
    assert "UTC" not in a
    assert "2030-01-01 00:00 UTC" in render(checkout, timestamp="2030-01-01 00:00 UTC")


def test_payloads_in_the_source_are_escaped(hostile):
    page = render(hostile)
    for payload in PAYLOADS:
        assert payload not in page, payload
    no_external_loads(page)
    # each one is there, as text, where the report shows it
    assert esc(f"# {SCRIPT} {IMG} {STYLE}") in page  # source snippet
    assert esc(REJECT_MSG) in page  # forced choice rejected
    assert esc(f"if is_sm100_supported() and {SCRIPT!r} != {IMG!r}") in page  # guard text
    assert f'<td class="value">{esc(STYLE)}</td>' in page  # a choice
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert esc(SCRIPT) in svg  # the graph's decision node (its title)
    # exactly one style element, ours
    assert page.count("<style>") == 1 and page.count("</style>") == 1


def test_from_adds_the_diff_section(checkout, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(checkout, old)
    edit(old / FP4, 'backend = "flashinfer_cudnn"', 'backend = "flashinfer_cutlass"')
    page = render(checkout, from_source=str(old))
    assert 'id="diff"' in page
    diff = page[page.index('id="diff"'):page.index('id="graph"')]
    row = diff[diff.index("fp4_gemm_runner_backend"):]
    row = row[:row.index("</tr>")]
    assert "changed" in row and "flashinfer_cutlass" in row and "flashinfer_cudnn" in row
    # the summary table marks it changed, with the old value
    summary = page[page.index('id="summary-table"'):page.index("</table>", page.index('id="summary-table"'))]
    fp4 = summary[summary.index("fp4_gemm_runner_backend"):]
    assert "changed" in fp4[:fp4.index("</tr>")] and "was auto → runtime flashinfer_cutlass" in fp4[:fp4.index("</tr>")]


def test_rejected_configuration_shows_the_rejection(checkout):
    page = render(checkout, arch="sm100", model="gpt-oss-120b", sets=("quantization=mxfp4", "moe_runner_backend=flashinfer_cutlass"))
    assert "SGLang rejects this configuration" in page
    assert "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE" in page
    assert "sglang/srt/server_args.py:56" in page
    assert "SGA001" in page  # the rules report it as a finding too


def test_unknown_setting_is_marked_with_its_reason(checkout):
    from dataclasses import replace

    from sglang_audit.result import Candidate, UnknownValue

    data = build_report(Request(source=str(checkout), arch="sm120", model="deepseek-r1-nvfp4"), explain_fields=())
    res = data.resolution
    unknown = UnknownValue("depends on SGLANG_<X> & the driver", (Candidate("triton", ("env set",)), Candidate("auto")))
    moe = replace(res.settings["moe_runner_backend"], config=unknown, status="unknown")
    data.resolution = replace(res, settings={**res.settings, "moe_runner_backend": moe})
    page = render_html(data)
    summary = page[page.index('id="summary-table"'):page.index("</table>", page.index('id="summary-table"'))]
    row = summary[summary.index("moe_runner_backend"):]
    row = row[:row.index("</tr>")]
    assert 'class="badge unknown">unknown<' in row
    assert esc("depends on SGLANG_<X> & the driver — candidates: triton when env set, auto") in row
    assert '<tr class="r-unknown">' in summary
    assert "1 unknown" in page


def test_graph_layout_keeps_nodes_apart_and_inside(checkout):
    from sglang_audit.analyses.explain import explain

    req = Request(source=str(checkout), arch="sm120", model="deepseek-r1-nvfp4")
    lay = deployment_graph(explain(req, f) for f in ("moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend"))
    assert {n.kind for n in lay.nodes} == {"predicate", "decision", "write", "field"}
    for n in lay.nodes:
        assert 0 <= n.x and n.x + n.w <= lay.width and 0 <= n.y and n.y + n.h <= lay.height
    by_x: dict[float, list] = {}
    for n in lay.nodes:
        by_x.setdefault(n.x, []).append(n)
    for col in by_x.values():
        col.sort(key=lambda n: n.y)
        for a, b in zip(col, col[1:], strict=False):
            assert a.y + a.h <= b.y, (a.lines, b.lines)
    # left to right: predicates, decisions, writes, settings
    xs = {k: min(n.x for n in lay.nodes if n.kind == k) for k in ("predicate", "decision", "write", "field")}
    assert xs["predicate"] < xs["decision"] < xs["write"] < xs["field"]
    assert all(e.path.startswith("M") for e in lay.edges)


# ---- fast: the command ----------------------------------------------------------------------
def test_cli_writes_the_report(checkout, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = cli("report", "-s", checkout, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8", "-o", out)
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "tp_size" in page
    assert f"report written to {out}" in err


def test_cli_no_choices_skips_forcing(checkout, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = cli("report", "-s", checkout, "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--no-choices", "-o", out)
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    assert "If you force it" not in page and "resolving with each" not in err
    assert "were not forced one by one" in page
    assert "Branches in the code that pick fp4_gemm_runner_backend" in page


def test_cli_usage_errors(checkout, tmp_path):
    code, _, err = cli("report", "-s", checkout, "-m", "deepseek-r1-nvfp4", "-o", tmp_path / "r.html")
    assert code == 2 and "--arch" in err
    code, _, err = cli("report", "-s", checkout, "-a", "sm999", "-m", "deepseek-r1-nvfp4", "-o", tmp_path / "r.html")
    assert code == 2 and "sm999" in err
    assert not (tmp_path / "r.html").exists()


def test_cli_deployment_file(checkout, tmp_path):
    pytest.importorskip("sglang_audit.analyses.diff")
    dep = tmp_path / "fleet.yaml"
    dep.write_text(
        "deployments:\n"
        "  - name: dsr1-sm120\n    arch: sm120\n    model: deepseek-r1-nvfp4\n    flags: {tp_size: 8}\n"
        "  - name: dsr1-sm100\n    arch: sm100\n    model: deepseek-r1-nvfp4\n",
        encoding="utf-8")
    out = tmp_path / "r.html"
    code, _, err = cli("report", "-s", checkout, "--deployment", dep, "-o", out)
    assert code == 2 and "--name" in err and "dsr1-sm100" in err
    code, _, err = cli("report", "-s", checkout, "--deployment", dep, "--name", "dsr1-sm100", "-o", out)
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    # on sm100 the DeepSeek branch fires: flashinfer_trtllm MoE
    assert "sm100" in page and "flashinfer_trtllm" in page
    code, _, err = cli("report", "-s", checkout, "--deployment", dep, "--name", "dsr1-sm100", "-a", "sm120", "-o", out)
    assert code == 2 and "cannot be combined with --deployment" in err


# ---- browser --------------------------------------------------------------------------------
def _have_chromium() -> bool:
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


@pytest.fixture(scope="session")
def browser_bin() -> tuple[str, str]:
    """The system Chromium and its driver (Debian packages chromium, chromium-driver),
    installed here when missing and possible (root with apt-get, as .ci/run does)."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
    if not _have_chromium() and shutil.which("apt-get") and os.geteuid() == 0:
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"]):
            subprocess.run(cmd, check=False, capture_output=True, timeout=900)
    if not _have_chromium():
        pytest.skip("chromium and chromium-driver are not installed and could not be installed")
    return shutil.which("chromium") or "", shutil.which("chromedriver") or ""


class Page:
    """One headless Chromium with the report loaded from file://, its console and its
    network log (CDP events through selenium's performance log)."""

    def __init__(self, bins: tuple[str, str], profile: Path, report: Path) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = bins[0]
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
                    "--hide-scrollbars", "--window-size=1400,1000", f"--user-data-dir={profile}"):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(bins[1]), options=opts)
        self.driver.get_log("performance")  # drop what the browser did before the report
        self.url = report.resolve().as_uri()
        self.driver.get(self.url)

    def console_errors(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def requests(self) -> list[str]:
        """URLs the report asked for (anything but itself), and any http(s)/ws request."""
        out = []
        for entry in self.driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") != "Network.requestWillBeSent":
                continue
            params = msg["params"]
            url = params["request"]["url"]
            mine = params.get("documentURL") == self.url
            if url != self.url and (mine or re.match(r"(https?|wss?|ftp):", url)):
                out.append(url)
        return out

    def quit(self) -> None:
        self.driver.quit()


@pytest.fixture()
def open_page(browser_bin, tmp_path):
    pages: list[Page] = []

    def open_(report: Path) -> Page:
        page = Page(browser_bin, tmp_path / f"profile{len(pages)}", report)
        pages.append(page)
        return page

    yield open_
    for p in pages:
        p.quit()


def test_browser_payloads_render_as_text(hostile, tmp_path, open_page):
    from selenium.webdriver.common.by import By

    report = tmp_path / "hostile.html"
    report.write_text(render(hostile), encoding="utf-8")
    page = open_page(report)
    d = page.driver
    # open every collapsed part so each payload is rendered text on screen
    d.execute_script("document.querySelectorAll('details').forEach(e => e.open = true)")
    assert d.execute_script("return typeof window.__pwned") == "undefined"
    assert d.find_elements(By.TAG_NAME, "script") == [] and d.find_elements(By.TAG_NAME, "img") == []
    assert d.find_elements(By.TAG_NAME, "b") == []  # the </style><b> payload made no element
    assert len(d.find_elements(By.TAG_NAME, "style")) == 1
    text = d.find_element(By.TAG_NAME, "body").text
    for payload in (SCRIPT, IMG, "</style>"):
        assert payload in text, payload
    # the page's own style still applies (a </style> in the text did not end it)
    assert d.find_element(By.ID, "summary-table").value_of_css_property("border-collapse") == "collapse"
    assert page.console_errors() == []
    assert page.requests() == []


@pytest.mark.real_release
def test_browser_real_release_report(tmp_path, open_page):
    from selenium.webdriver.common.by import By

    report = tmp_path / "report-0.5.10-sm120.html"
    code, _, err = cli("report", "-s", "sglang==0.5.10", "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4",
                       "--set", "tp_size=8", "-o", report)
    assert code == 0, err
    source = report.read_text(encoding="utf-8")
    no_external_loads(source)
    page = open_page(report)
    d = page.driver
    table = d.find_element(By.ID, "summary-table")
    assert table.is_displayed() and table.size["height"] > 100 and table.size["width"] > 600
    assert table.location["y"] < 1000  # on the first screen
    rows = {r.find_element(By.TAG_NAME, "td").text.split()[0]: r.text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")}
    assert "flashinfer_cudnn" in rows["fp4_gemm_runner_backend"]
    # no SGA104 cuDNN reminder: a plain install of 0.5.10 has torch 2.9.1's cuDNN pin (9.10.2), shown
    assert rows["fp4_gemm_runner_backend"].endswith(" ok")
    assert "cuDNN" in table.find_element(By.XPATH, "/html/body").text
    assert d.find_element(By.CSS_SELECTOR, "#graph svg").is_displayed()
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-0.5.10-sm120.png"
    assert d.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    shutil.copy(report, ARTIFACTS / report.name)
    assert page.console_errors() == []
    assert page.requests() == []


def test_from_reuses_the_reports_release_for_the_diff(checkout, tmp_path, monkeypatch):
    # the diff's side of this release is the report's own: its flag table is evaluated once
    # and its files loaded from the report's SourceCache, not a second one
    from sglang_audit.resolve import pipeline

    old = tmp_path / "old"
    shutil.copytree(checkout, old)
    tables: list[str] = []
    real = pipeline._flag_table

    def counted(tree, resolver):
        tables.append(str(tree.package_dir))
        return real(tree, resolver)

    monkeypatch.setattr(pipeline, "_flag_table", counted)
    render(checkout, from_source=str(old))
    assert sorted(tables) == sorted([str(checkout / "python" / "sglang"), str(old / "python" / "sglang")])


# ---- issue 39 item 8: the labels say what fails ----------------------------------------------
def _failing_moe(data, layer=None, kernel=None):
    from dataclasses import replace

    res = data.resolution
    moe = replace(res.settings["moe_runner_backend"], status="unsupported", layer=layer, kernel=kernel)
    data.resolution = replace(res, settings={**res.settings, "moe_runner_backend": moe})
    return data


def test_a_setting_whose_layers_fail_is_not_unknown_and_not_accepted(checkout):
    from sglang_audit.render.html import _View
    from sglang_audit.result import KernelVerdict, LayerValue

    req = Request(source=str(checkout), arch="sm120", model="deepseek-r1-nvfp4")
    raises = LayerValue("unsupported", "AttributeError: 'FusedMoE' object has no attribute 'g1_scale_c'", site="m.py:3260")
    data = _failing_moe(build_report(req, explain_fields=()), layer=raises)
    page = render_html(data)
    summary = page[page.index('id="summary-table"'):page.index("</table>", page.index('id="summary-table"'))]
    row = summary[summary.index("moe_runner_backend"):]
    row = row[:row.index("</tr>")]
    # a failure, in the row's colour and its badge; not counted as unknown
    assert 'class="badge finding-error">layers fail<' in row and 'class="badge unknown"' not in row
    assert '<tr class="r-finding-error"><td><a class="primary-name" href="#setting-moe_runner_backend">' in summary
    assert '<span class="pill ok">0 unknown</span>' in page
    # the headline counts the layer failure, not only SGLang's checks of the flags
    view = _View(data).page()
    assert view["verdict"] == {"cls": "finding-error", "text": "SGLang accepts the flags; 1 setting fails when the layers are built"}
    assert (view["counts"]["failing"], view["counts"]["unknown"]) == (1, 0)
    # a kernel the library declares unsupported on the device
    kernel = KernelVerdict("unsupported", "flashinfer", "9.9.9", "flashinfer.mm_fp4", "trtllm", "SM120 not declared")
    data = _failing_moe(build_report(req, explain_fields=()), kernel=kernel)
    assert _View(data).page()["verdict"]["text"] == "SGLang accepts the flags; 1 setting calls a kernel unsupported on this device"
    assert 'class="badge finding-error">kernel unsupported<' in render_html(data)
    # an error finding alone: not "accepts this configuration" either
    bad = build_report(Request(source=str(checkout), arch="sm120", model="deepseek-r1-nvfp4",
                               sets=["fp4_gemm_runner_backend=flashinfer_trtllm"]), explain_fields=())
    assert _View(bad).page()["verdict"] == {"cls": "finding-error", "text": "SGLang accepts the flags; 1 known-bad error"}
    # nothing failing: the plain verdict
    assert _View(build_report(req, explain_fields=())).page()["verdict"] == {"cls": "ok", "text": "SGLang accepts this configuration"}


@pytest.mark.real_release
def test_real_0523_forced_choices_say_the_layers_fail(release):
    """`explain` says "the MoE layers built with it fail"; the report's "If you force it"
    table said "unknown" for the same choices, and "1 unknown" counted the unsupported row."""
    from sglang_audit.render.html import _View

    tree = release("0.5.23")
    data = build_report(Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4", sets=["tp_size=8"]),
                        explain_fields=("moe_runner_backend",))
    by = {c.choice: c for c in data.explanations["moe_runner_backend"].choices}
    assert by["triton"].outcome == "layers_fail" and by["flashinfer_trtllm"].outcome == "known_bad"
    page = render_html(data)
    section = page[page.index('id="setting-moe_runner_backend"'):]
    table = section[section.index('<table class="choices">'):]
    table = table[:table.index("</table>")]
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr><td class="value">([^<]*)</td>.*?</tr>', table, re.S)}
    assert '<span class="st-rejected"><strong>MoE layers fail</strong></span>' in rows["triton"]
    assert "accepted by SGLang, but the MoE layers built with it fail: NotImplementedError: Unsupported moe_runner_backend for NVFP4 MoE" in rows["triton"]
    assert "<strong>MoE layers fail</strong>" in rows["auto"] and "g1_scale_c" in rows["auto"]
    assert "<strong>known-bad</strong>" in rows["flashinfer_trtllm"] and "SGA201" in rows["flashinfer_trtllm"]
    # no layer failure or known-bad choice is labelled unknown
    for choice, c in by.items():
        if c.outcome in ("layers_fail", "known_bad"):
            assert "<strong>unknown</strong>" not in rows[choice], choice
    assert '<span class="pill ok">0 unknown</span>' in page
    assert 'class="badge finding-error">layers fail<' in page
    assert _View(data).page()["verdict"] == {"cls": "finding-error",
                                             "text": "SGLang accepts the flags; 1 setting fails when the layers are built"}


def _diff_row(page: str, name: str) -> str:
    diff = page[page.index('id="diff"'):page.index('id="graph"')]
    row = diff[diff.index(f"<td>{name} "):]
    return row[:row.index("</tr>")]


def _summary_row(page: str, name: str) -> str:
    summary = page[page.index('id="summary-table"'):page.index("</table>", page.index('id="summary-table"'))]
    row = summary[summary.index(f'href="#setting-{name}"'):]
    return row[:row.index("</tr>")]


@pytest.mark.real_release
def test_real_changed_since_counts_layers_that_start_failing(release):
    """0.5.10 → 0.5.23: moe_runner_backend stays `auto` and its layers start raising: the
    "changed since" pill, the summary row and the diff table say it changed."""
    release("0.5.10")
    tree = release("0.5.23")
    req = Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4",
                  sets=["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"])
    page = render_html(build_report(req, "sglang==0.5.10", force_choices=False))
    row = _diff_row(page, "moe_runner_backend")
    # a newly failing row is coloured as a failure, not as a mere change
    assert re.search(r'<span class="badge finding-error">changed, newly failing \(layer[^)]*\)</span>', row), row
    assert "layer resolved → unsupported" in row
    summary = _summary_row(page, "moe_runner_backend")
    assert 'class="badge changed">changed<' in summary and "was auto (resolved): layer resolved → unsupported" in summary
    m = re.search(r'<span class="pill changed">(\d+) changed since 0\.5\.10</span>', page)
    assert m and int(m.group(1)) >= 3  # fp4 and fp8 GEMM runtime values, and the MoE layers


@pytest.mark.real_release
def test_real_still_failing_since_is_not_unchanged(release):
    release("0.5.22")
    tree = release("0.5.23")
    req = Request(source=str(tree.package_dir), arch="sm120", model="qwen3.5-397b-a17b-nvfp4",
                  sets=["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"])
    page = render_html(build_report(req, "sglang==0.5.22", force_choices=False))
    row = _diff_row(page, "moe_runner_backend")
    assert ">still failing on both</span>" in row and ">unchanged<" not in row
    assert "fails in 0.5.22 too" in _summary_row(page, "moe_runner_backend")

"""The decision graph: built statically from the IR, exported as node-link JSON, GraphML
and DOT; on the fixture checkout (fast) and on a real release."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from clirun import cli

from sglang_audit.analyses.graph import build_graph
from sglang_audit.analyses.graphquery import field_subgraph, predicate_controls
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.render.graphfmt import to_graphml, to_json
from sglang_audit.resolve.pipeline import Request, resolve

MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"
PKG = MINI_E2 / "python" / "sglang"
SA = "sglang/srt/server_args.py"
FP4 = "sglang/srt/layers/quantization/fp4_utils.py"


@pytest.fixture()
def fixture_graph(isolated_cache):
    return build_graph(PKG, SourceCache())


def edges(g: nx.MultiDiGraph, kind: str, u: str | None = None, v: str | None = None) -> list[tuple[str, str, dict]]:
    return [(a, b, d) for a, b, d in g.edges(data=True) if d["kind"] == kind and (u is None or a == u) and (v is None or b == v)]


def test_fixture_nodes(fixture_graph):
    g = fixture_graph.graph
    assert fixture_graph.files == (SA, FP4)
    moe = g.nodes["field:moe_runner_backend"]
    assert (moe["file"], moe["line"], moe["default"], moe["setting"]) == (SA, 22, "auto", True)
    pred = g.nodes["predicate:is_sm100_supported"]
    assert (pred["file"], pred["line"]) == ("sglang/srt/utils/common.py", 25)
    assert "device_capability_majors=[10]" in pred["definition"]
    assert "in [10]" in pred["meaning"] and ">= (12, 8)" in pred["meaning"]
    d = g.nodes[f"decision:{SA}:45"]
    assert (d["guard"], d["construct"], d["function"]) == ("is_sm100_supported()", "if", "ServerArgs._handle_model_specific_adjustments")
    rej = g.nodes[f"rejection:{SA}:56"]
    assert rej["exception"] == "AssertionError"
    assert rej["message"] == "modelopt_fp4 quantization is required for Flashinfer Cutlass MOE"
    raise_ = g.nodes[f"rejection:{SA}:67"]
    assert raise_["exception"] == "ValueError" and "radix cache" in raise_["message"]


def test_fixture_edges(fixture_graph):
    g = fixture_graph.graph
    # the sm100 branch: decision 50 writes flashinfer_trtllm, guarded by 45 (is_sm100_supported)
    w = edges(g, "writes", f"decision:{SA}:50", "field:moe_runner_backend")
    assert [(e["value"], e["branch"], e["line"]) for _a, _b, e in w] == [("flashinfer_trtllm", "true", 51)]
    assert {b for _a, b, _d in edges(g, "reads", f"decision:{SA}:45")} == {"predicate:is_sm100_supported"}
    assert {b for _a, b, _d in edges(g, "reads", f"decision:{SA}:50")} == {"field:moe_runner_backend", "field:quantization"}
    write = w[0][2]["write"]
    guards = {(b, d["branch"]) for _a, b, d in edges(g, "guarded_by", write)}
    assert (f"decision:{SA}:45", "true") in guards and (f"decision:{SA}:44", "true") in guards
    assert [e["depth"] for _a, _b, e in sorted(edges(g, "guarded_by", write), key=lambda t: t[2]["depth"])] == [0, 1, 2]
    # assert: its own decision rejects; raise: the innermost enclosing decision rejects
    assert edges(g, "rejects", f"decision:{SA}:56", f"rejection:{SA}:56")[0][2]["branch"] == "false"
    assert edges(g, "rejects", f"decision:{SA}:66", f"rejection:{SA}:67")[0][2]["branch"] == "true"
    # a conditional expression as the written value: one writes edge per arm
    arms = edges(g, "writes", None, "field:speculative_moe_runner_backend")
    ifexp = [(e["branch"], e["value"], e["value_text"]) for a, _b, e in arms if g.nodes[a]["kind"] == "decision" and g.nodes[a]["construct"] == "ifexp"]
    assert sorted(ifexp, key=str) == [("false", None, "self.moe_runner_backend"), ("true", "auto", "'auto'")]


def test_fixture_runtime_locals_and_globals(fixture_graph):
    g = fixture_graph.graph
    local = g.nodes[f"write:{FP4}:22:backend"]
    assert (local["write_kind"], local["field"], local["value"], local["layer"]) == ("local", "fp4_gemm_runner_backend", "flashinfer_cudnn", "runtime")
    glob = g.nodes[f"write:{FP4}:25:FP4_GEMM_RUNNER_BACKEND"]
    assert (glob["write_kind"], glob["field"]) == ("global", "fp4_gemm_runner_backend")
    # the guard `backend == "auto"` reads the field that `backend` copies
    assert edges(g, "reads", f"decision:{FP4}:20", "field:fp4_gemm_runner_backend")
    assert edges(g, "feeds", f"write:{FP4}:19:backend", f"decision:{FP4}:20")
    assert not edges(g, "feeds", f"write:{FP4}:22:backend", f"decision:{FP4}:20")  # written after it is read
    assert edges(g, "feeds", f"write:{FP4}:22:backend", f"write:{FP4}:25:FP4_GEMM_RUNNER_BACKEND")


def test_predicate_controls(fixture_graph):
    assert predicate_controls(fixture_graph, "is_sm120_supported") == (f"{FP4}:21 writes fp4_gemm_runner_backend",)
    assert predicate_controls(fixture_graph, "is_sm100_supported") == (f"{SA}:45 writes moe_runner_backend, quantization",)
    assert predicate_controls(fixture_graph, "is_cuda") == ()


def test_field_subgraph(fixture_graph):
    sub = field_subgraph(fixture_graph.graph, "fp4_gemm_runner_backend")
    assert "predicate:is_sm120_supported" in sub and f"decision:{FP4}:21" in sub
    assert "field:moe_runner_backend" not in sub
    with pytest.raises(KeyError):
        field_subgraph(fixture_graph.graph, "no_such_field")


def test_every_cited_site_is_a_node(fixture_graph, isolated_cache):
    locs = {(d["file"], d["line"]) for _n, d in fixture_graph.graph.nodes(data=True)}
    for arch, model, sets in [("sm100", "deepseek-r1-nvfp4", []), ("sm120", "deepseek-r1-nvfp4", ["speculative_algorithm=NEXTN"])]:
        res = resolve(Request(source=str(MINI_E2), arch=arch, model=model, sets=sets))
        cited = {(s.file, s.line) for st in res.settings.values() for s in st.chain if s.file in fixture_graph.files}
        assert cited and cited <= locs, cited - locs


def test_cli_json_round_trip_and_stable(isolated_cache):
    code, out, _ = cli("graph", "-s", str(MINI_E2))
    assert code == 0
    data = json.loads(out)
    assert data["graph"]["schema"] == "sglang-audit-graph/1" and data["graph"]["files"] == [SA, FP4]
    g = nx.node_link_graph(data, edges="links")
    assert isinstance(g, nx.MultiDiGraph) and g.is_multigraph()
    assert [n["id"] for n in data["nodes"]] == sorted(n["id"] for n in data["nodes"])
    assert cli("graph", "-s", str(MINI_E2))[1] == out
    ref = build_graph(PKG, SourceCache(use_disk=False)).graph
    assert set(g.nodes) == set(ref.nodes) and g.number_of_edges() == ref.number_of_edges()


def test_cli_field_graphml_dot(isolated_cache):
    code, out, _ = cli("graph", "-s", str(MINI_E2), "--field", "moe_runner_backend", "--format", "graphml")
    assert code == 0
    g = nx.parse_graphml(out)
    assert "field:moe_runner_backend" in g and g.nodes[f"decision:{SA}:45"]["guard"] == "is_sm100_supported()"
    assert g.nodes["field:moe_runner_backend"]["line"] == 22
    code, out, _ = cli("graph", "-s", str(MINI_E2), "--field", "moe_runner_backend", "--format", "dot")
    assert code == 0 and out.startswith("digraph sglang_decisions {") and out.rstrip().endswith("}")
    assert f'"decision:{SA}:50" -> "field:moe_runner_backend" [label="writes \'flashinfer_trtllm\'"' in out
    code, _out, err = cli("graph", "-s", str(MINI_E2), "--field", "moe_runner")
    assert code == 2 and "did you mean moe_runner_backend" in err


def test_graphml_attributes_are_plain(fixture_graph):
    g = nx.parse_graphml(to_graphml(fixture_graph.graph))
    for _n, d in g.nodes(data=True):
        assert all(isinstance(v, (str, int, float, bool)) for v in d.values())
    assert json.loads(json.dumps(to_json(fixture_graph.graph)))


def test_guards_json_has_controls(isolated_cache):
    code, out, _ = cli("guards", "-s", str(MINI_E2), "-a", "sm120", "--format", "json")
    assert code == 0
    facts = {f["name"]: f for f in json.loads(out)["guards"]}
    assert facts["is_sm120_supported"]["controls"] == [f"{FP4}:21 writes fp4_gemm_runner_backend"]
    code, out, _ = cli("guards", "-s", str(MINI_E2), "-a", "sm120")
    assert f"controls {FP4}:21 writes fp4_gemm_runner_backend" in out


# ---- real releases ------------------------------------------------------------------------
REAL_CASES = [
    ("sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"]),
    ("sm100", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"]),
    ("sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"]),
    ("sm100", "deepseek-r1-nvfp4", ["tp_size=8"]),
    ("sm90", "gpt-oss-120b", []),
    ("sm100", "qwen3-30b-a3b", ["quantization=mxfp8", "moe_runner_backend=triton"]),
]


@pytest.mark.real_release
def test_0510_graph_exports_and_holds_every_site_resolve_cites(release):
    tree = release("0.5.10")
    cache = SourceCache()
    dg = build_graph(tree.package_dir, cache)
    assert "sglang/srt/server_args.py" in dg.files and FP4 in dg.files
    # the export loads back into networkx unchanged
    g = nx.node_link_graph(json.loads(json.dumps(to_json(dg.graph))), edges="links")
    assert set(g.nodes) == set(dg.graph.nodes) and g.number_of_edges() == dg.graph.number_of_edges()
    locs = {(d["file"], d["line"]) for _n, d in g.nodes(data=True)}
    for arch, model, sets in REAL_CASES:
        res = resolve(Request(source=str(tree.package_dir), arch=arch, model=model, sets=sets), cache=cache)
        cited = {(s.file, s.line) for st in res.settings.values() for s in st.chain if s.file in dg.files}
        assert cited, (arch, model, sets)
        assert cited <= locs, (arch, model, sets, sorted(cited - locs))
        # a cited guarded write is tied to its decisions
        for st in res.settings.values():
            for s in st.chain:
                if s.file in dg.files and s.kind == "write" and s.guard:
                    writes = [n for n in dg.nodes_at(s.file, s.line) if g.nodes[n]["kind"] == "write"]
                    assert writes and dg.enclosing(writes[0]), s
    assert "sglang/srt/layers/quantization/fp4_utils.py:66 writes fp4_gemm_runner_backend" in predicate_controls(dg, "is_sm120_supported")
    assert any(c.startswith("sglang/srt/server_args.py:") and "moe_runner_backend" in c for c in predicate_controls(dg, "is_sm100_supported"))


# ---- E5/E6: get_platform().<fact> is the predicate its release's table names ------------

MINI_E5 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e5"


def test_platform_fact_reads_are_predicate_reads(isolated_cache):
    dg = build_graph(MINI_E5 / "python" / "sglang", SourceCache())
    g = dg.graph
    readers = {(g.nodes[d]["file"], g.nodes[d]["line"]) for d, _p, e in g.in_edges("predicate:is_sm120_supported", data=True)
               if e["kind"] == "reads"}
    # `if get_platform().is_sm120:` in the fixture's overrides, via _PLATFORM_PROBES["is_sm120"]
    assert ("sglang/srt/arg_groups/overrides.py", 86) in readers
    sm100 = {g.nodes[d]["line"] for d, _p, e in g.in_edges("predicate:is_sm100_supported", data=True) if e["kind"] == "reads"}
    assert 88 in sm100
    assert any("overrides.py:86" in c for c in predicate_controls(dg, "is_sm120_supported"))


def test_guards_list_platform_facts_with_their_predicate(isolated_cache):
    code, out, _ = cli("guards", "-s", str(MINI_E5), "--arch", "sm121", "--format", "json")
    assert code == 0
    facts = {f["name"]: f for f in json.loads(out)["guards"]}
    fact = facts["get_platform().is_sm120"]
    assert fact["value"] is True  # SM121 takes every SM120 branch
    assert fact["definition"] == "_PLATFORM_PROBES['is_sm120'] → is_sm120_supported()"
    assert fact["file"] == "sglang/srt/runtime_context.py"
    assert facts["get_platform().is_sm100"]["value"] is False


def test_a_guards_truth_on_a_device_is_the_interpreters_over_every_undecided_part():
    """The graph's formulas are run by the interpreter (analyses/formula.py), each part the
    device does not decide an input explored both ways: decided only when every assignment
    agrees. Checked against what SGLang's guards mean on sm120, where is_sm100_supported() is
    False."""
    from sglang_audit.analyses.formula import formula_truth

    preds = {"is_sm100_supported": False, "is_sm90_supported": False, "is_hip": "unknown: not read"}
    sm100 = ("call", "is_sm100_supported")
    # a hardware part that decides the guard whatever the flags: known
    assert formula_truth(("and", [("opaque", "view.tp_size > 1"), sm100]), preds) is False
    assert formula_truth(("or", [("opaque", "view.x"), ("not", sm100)]), preds) is True
    # `(topk or 1) != 1` (0.5.23 hisparse_hook.py:118): the `or` is topk when topk is truthy, so
    # the device does not decide it (a three-valued reading took the 1 and said False)
    topk = ("cmp", ("or", [("opaque", "cfg.speculative_eagle_topk"), ("const", 1)]), ["!="], [("const", 1)])
    assert formula_truth(topk, preds) is None
    # the same part read twice is one input: `x == "a" and x == "b"` never holds (0.5.23
    # kv_cache_hook.py:268's `not (... backends == "flashinfer" and backends == "trtllm_mha")`)
    same = ("opaque", "attention_backends_of(view)")
    both = ("and", [("cmp", same, ["=="], [("const", "flashinfer")]), ("cmp", same, ["=="], [("const", "trtllm_mha")])])
    assert formula_truth(("not", both), preds) is True
    # a predicate whose value is unknown on this device decides nothing
    assert formula_truth(("call", "is_hip"), preds) is None
    assert formula_truth(("sub", ("const", (1,)), ("const", 3)), preds) is None  # IndexError: undecided

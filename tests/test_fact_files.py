"""SGLang/device facts that moved from code to rules/*.toml: each file is complete and
consistent, and the code reads it (devices, the matrix's default sweep, the graph layout)."""

from __future__ import annotations

import pickle

import pytest

from sglang_audit import factfiles
from sglang_audit.analyses import graph, matrix
from sglang_audit.factfiles import FactFileError, SettingsFacts, convert
from sglang_audit.inputs.device import ARCH_CHOICES, SM_COUNT, parse_device
from sglang_audit.resolve.pipeline import bundled_profiles
from sglang_audit.shipped import load_toml


def test_every_device_has_every_field_and_parses() -> None:
    devices = load_toml("devices.toml")
    for platform in ("cuda", "hip"):
        for arch, d in devices[platform].items():
            assert set(d) == {"major", "minor", "name", "memory_mib", "sm_count"}, arch
            dev = parse_device(arch)
            assert (dev.platform, dev.major, dev.minor, dev.name, dev.memory_mib) == \
                (platform, d["major"], d["minor"], d["name"], d["memory_mib"])
            assert SM_COUNT[arch] == d["sm_count"] > 0
    # --help lists them in the file's order, then the non-GPU platforms
    assert ARCH_CHOICES == (*devices["cuda"], *devices["hip"], "npu", "xpu", "cpu")


def test_the_matrix_defaults_name_bundled_models_and_typed_flags() -> None:
    profiles = set(bundled_profiles())
    assert set(matrix.DEFAULT_MODELS) <= profiles
    assert set(matrix.MODEL_DEFAULT_SETS) <= set(matrix.DEFAULT_MODELS)
    assert set(matrix.DEFAULT_ARCHS) <= set(ARCH_CHOICES)
    assert [fs.name for fs in matrix.DEFAULT_FLAG_SETS][:3] == ["none", "nextn", "moe_cutlass"]
    for fs in matrix.DEFAULT_FLAG_SETS:
        assert all("=" in item for item in fs.items), fs
        assert matrix.parse_flag_set(f"{fs.name}={','.join(fs.items)}") == fs


def test_the_graph_layout_comes_from_the_data() -> None:
    layout = load_toml("graph.toml")
    assert graph.ARG_BASES == frozenset(layout["names"]["arg_bases"])
    assert graph.VIEW_CALLS == frozenset(layout["names"]["view_calls"])
    assert all(d.startswith("sglang/") for d in layout["layout"]["config_dirs"])


# ---- typed fact files (sglang_audit/factfiles.py): validated once, one-line errors ---------


def test_settings_toml_loads_typed_and_frozen() -> None:
    facts = factfiles.settings()
    raw = load_toml("settings.toml")
    assert facts.settings == tuple(raw["settings"])
    assert (facts.entry.module, facts.entry.class_) == (raw["entry"]["module"], raw["entry"]["class"])
    assert facts.entry.model_config.factory == raw["entry"]["model_config"]["factory"]
    assert [r.initializer for r in facts.runtime] == [r["initializer"] for r in raw["runtime"]]
    assert dict(facts.runtime[0].getters) == raw["runtime"][0]["getters"]
    assert facts.publish is not None and facts.publish.constructed["ranks"] == ("SpawnRanks", 0, "__none__", 0)
    with pytest.raises(AttributeError):
        facts.settings = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        facts.renamed["x"] = "y"  # type: ignore[index]
    assert factfiles.settings() is facts  # loaded once
    # a table pickles (a value holding it can cross to a worker process) and stays read-only
    back = pickle.loads(pickle.dumps(facts))
    assert back == facts and back.renamed == facts.renamed
    with pytest.raises(TypeError):
        back.renamed.update(x="y")


def _bad(mutate) -> str:  # type: ignore[no-untyped-def]
    raw = load_toml("settings.toml")
    mutate(raw)
    with pytest.raises(FactFileError) as err:
        convert(SettingsFacts, raw, "rules/settings.toml", "")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("rules/settings.toml: ")
    return msg


def test_each_kind_of_bad_fact_file_names_the_file_and_field() -> None:
    assert _bad(lambda r: r["entry"].__setitem__("class", 3)) == \
        "rules/settings.toml: entry.class: expected a string, got 3"
    assert _bad(lambda r: r["entry"].pop("module")) == "rules/settings.toml: entry.module: missing"
    assert _bad(lambda r: r.__setitem__("setings", [])).startswith(
        "rules/settings.toml: setings: not a known key (known: ")
    assert _bad(lambda r: r.__setitem__("settings", "moe_runner_backend")) == \
        "rules/settings.toml: settings: expected a list, got 'moe_runner_backend'"
    assert _bad(lambda r: r["settings"].append(7)).endswith(
        f"settings[{len(load_toml('settings.toml')['settings'])}]: expected a string, got 7")
    assert _bad(lambda r: r["runtime"][1].__setitem__("getters", ["x"])) == \
        "rules/settings.toml: runtime[1].getters: expected a table, got ['x']"
    assert _bad(lambda r: r["runtime"][0]["getters"].__setitem__("moe_runner_backend", True)) == \
        "rules/settings.toml: runtime[0].getters.moe_runner_backend: expected a string, got True"
    assert _bad(lambda r: r.__setitem__("entry", "x")) == "rules/settings.toml: entry: expected a table, got 'x'"
    # a cross-reference: every setting named elsewhere in the file is in `settings`
    assert _bad(lambda r: r["moe_layer_settings"].append("moe_typo_backend")) == \
        "rules/settings.toml: moe_typo_backend: named outside `settings`, which does not list it"


def test_a_fact_file_that_is_not_toml_is_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "settings.toml").write_text("settings = [\n", encoding="utf-8")
    monkeypatch.setattr(factfiles, "rules_dir", lambda: tmp_path)
    with pytest.raises(FactFileError, match=r"^rules/settings.toml: not valid TOML \(") as err:
        factfiles.load(SettingsFacts, "settings.toml")
    assert "\n" not in str(err.value)
    with pytest.raises(FactFileError, match=r"^rules/absent.toml: cannot be read"):
        factfiles.load(SettingsFacts, "absent.toml")


def test_packages_eras_and_predicates_load_typed() -> None:
    raw = load_toml("packages.toml")
    pk = factfiles.packages()
    assert dict(pk.import_names) == raw["import_names"] and pk.optional.absent == tuple(raw["optional"]["absent"])
    assert {n: ns.submodules for n, ns in pk.namespace.items()} == \
        {n: tuple(ns["submodules"]) for n, ns in raw["namespace"].items()}
    eras = factfiles.eras()
    assert [e.name for e in eras.era] == [e["name"] for e in load_toml("eras.toml")["era"]]
    # an era given by `any` groups is probed by them, one given by `conditions` by its list
    assert all(len(e.alternatives) == (len(e.any) or 1) for e in eras.era)
    pr = factfiles.predicates()
    assert pr.names == tuple(load_toml("predicates.toml")["names"]) and pr.platform is not None


def _bad_file(schema: type, name: str, mutate) -> str:  # type: ignore[no-untyped-def]
    raw = load_toml(name)
    mutate(raw)
    with pytest.raises(FactFileError) as err:
        convert(schema, raw, f"rules/{name}", "")
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_bad_era_fingerprint_or_package_list_names_what_is_wrong() -> None:
    from sglang_audit.factfiles import ErasFacts, PackagesFacts

    msg = _bad_file(ErasFacts, "eras.toml", lambda r: r["era"][0]["conditions"].append({"file": "x.py"}))
    assert msg.startswith("rules/eras.toml: a condition is one of {exists}, {missing}, {file, contains} or {file, regex}")
    msg = _bad_file(ErasFacts, "eras.toml", lambda r: r["era"][1].pop("conditions"))
    assert msg == f"rules/eras.toml: era {load_toml('eras.toml')['era'][1]['name']!r}: neither conditions nor any"
    msg = _bad_file(ErasFacts, "eras.toml", lambda r: r["era"][0]["conditions"][0].__setitem__("exist", "x"))
    assert msg.startswith("rules/eras.toml: era[0].conditions[0].exist: not a known key")
    msg = _bad_file(PackagesFacts, "packages.toml", lambda r: r["optional"].__setitem__("absent", "aiter"))
    assert msg == "rules/packages.toml: optional.absent: expected a list, got 'aiter'"
    msg = _bad_file(PackagesFacts, "packages.toml", lambda r: r["namespace"]["flash_attn"].pop("by"))
    assert msg == "rules/packages.toml: namespace.flash_attn.by: missing"


def test_a_bad_device_or_matrix_hint_names_the_table_and_field() -> None:
    from sglang_audit.factfiles import DevicesFacts, MatrixFacts

    msg = _bad_file(DevicesFacts, "devices.toml", lambda r: r["cuda"]["sm120"].__setitem__("major", "12"))
    assert msg == "rules/devices.toml: cuda.sm120.major: expected an integer, got '12'"
    msg = _bad_file(DevicesFacts, "devices.toml", lambda r: r["hip"]["gfx942"].pop("sm_count"))
    assert msg == "rules/devices.toml: hip.gfx942.sm_count: missing"
    msg = _bad_file(MatrixFacts, "matrix.toml", lambda r: r["rejection_hints"][0].pop("message_contains"))
    assert msg == "rules/matrix.toml: rejection_hints[0].message_contains: missing"
    msg = _bad_file(MatrixFacts, "matrix.toml", lambda r: r["flag_sets"].__setitem__("x", "moe_runner_backend=triton"))
    assert msg == "rules/matrix.toml: flag_sets.x: expected a list, got 'moe_runner_backend=triton'"
    assert factfiles.devices().cuda["sm120"].major == 12


def test_attention_toml_loads_typed_and_a_bad_stamp_names_its_field() -> None:
    from sglang_audit.factfiles import AttentionFacts

    att = factfiles.attention()
    raw = load_toml("attention.toml")
    assert (att.runner.class_, att.runner.method) == (raw["runner"]["class"], raw["runner"]["method"])
    assert att.runner.stamp[0].attrs == raw["runner"]["stamp"][0]["attrs"]
    assert att.backend.verdict_files == tuple(raw["backend"]["verdict_files"])
    msg = _bad_file(AttentionFacts, "attention.toml", lambda r: r["runner"]["stamp"][0].pop("runner_kwarg"))
    assert msg == "rules/attention.toml: runner.stamp[0].runner_kwarg: missing"
    msg = _bad_file(AttentionFacts, "attention.toml", lambda r: r["runner"]["params"].__setitem__("tp_rank", "0"))
    assert msg == "rules/attention.toml: runner.params.tp_rank: expected an integer, got '0'"
    # the KV pool the runner builds (resolve/kvpool.py)
    assert att.runner.memory is not None and att.runner.memory.pool_attr == raw["runner"]["memory"]["pool_attr"]
    msg = _bad_file(AttentionFacts, "attention.toml", lambda r: r["runner"]["memory"].pop("builder"))
    assert msg == "rules/attention.toml: runner.memory.builder: missing"


def test_env_profiles_and_torch_pins_load_typed_and_bad_values_name_their_field() -> None:
    from sglang_audit.factfiles import EnvProfilesFacts, TorchPinsFacts

    raw = load_toml("env_profiles.toml")
    hip = factfiles.env_profiles().image["hip"]
    assert hip.dockerfile == raw["image"]["hip"]["dockerfile"]
    assert [p.name for p in hip.package] == [p["name"] for p in raw["image"]["hip"]["package"]]
    assert factfiles.torch_pins().torch["2.9.1"].cudnn == load_toml("torch_pins.toml")["torch"]["2.9.1"]["cudnn"]
    msg = _bad_file(EnvProfilesFacts, "env_profiles.toml", lambda r: r["image"]["hip"]["package"][0].pop("installed"))
    assert msg == "rules/env_profiles.toml: image.hip.package[0].installed: missing"
    # a bound that is not a release version would compare wrongly (or raise) at resolve time
    msg = _bad_file(EnvProfilesFacts, "env_profiles.toml",
                    lambda r: r["image"]["hip"]["env"][0].__setitem__("since", "v0.5.x"))
    assert msg == f"rules/env_profiles.toml: env {raw['image']['hip']['env'][0]['name']}.since: not a release version: 'v0.5.x'"
    msg = _bad_file(EnvProfilesFacts, "env_profiles.toml", lambda r: r["profile"].pop("pip"))
    assert msg.startswith("rules/env_profiles.toml: profile.pip: missing")
    msg = _bad_file(TorchPinsFacts, "torch_pins.toml", lambda r: r["torch"]["2.9.1"].pop("cudnn"))
    assert msg == "rules/torch_pins.toml: torch.2.9.1.cudnn: missing"


def test_speculative_toml_loads_typed_and_a_bad_value_names_its_field() -> None:
    from sglang_audit.factfiles import SpeculativeFacts

    spec = factfiles.speculative()
    raw = load_toml("speculative.toml")
    assert (spec.scheduler.method, spec.scheduler.dispatch) == (raw["scheduler"]["method"], raw["scheduler"]["dispatch"])
    assert spec.scheduler.algorithm_attr == raw["scheduler"]["algorithm_attr"]
    assert spec.worker.verdict_files == tuple(raw["worker"]["verdict_files"])
    msg = _bad_file(SpeculativeFacts, "speculative.toml", lambda r: r["scheduler"].pop("dispatch"))
    assert msg == "rules/speculative.toml: scheduler.dispatch: missing"
    msg = _bad_file(SpeculativeFacts, "speculative.toml", lambda r: r["scheduler"]["params"].__setitem__("gpu_id", "0"))
    assert msg == "rules/speculative.toml: scheduler.params.gpu_id: expected an integer, got '0'"


def test_attention_kernel_facts_load_typed_and_a_bad_library_label_names_its_field() -> None:
    # issue 42: where the registry's creators are, and the kernel libraries read
    from sglang_audit.factfiles import AttentionFacts

    kernel = factfiles.attention().kernel
    assert kernel is not None and kernel.registry_decorator == "register_attention_backend"
    assert kernel.libraries["sgl_kernel"] == "sgl-kernel"
    msg = _bad_file(AttentionFacts, "attention.toml", lambda r: r["kernel"]["libraries"].__setitem__("sgl_kernel", 1))
    assert msg == "rules/attention.toml: kernel.libraries.sgl_kernel: expected a string, got 1"


def test_attention_request_facts_load_typed_and_a_bad_mode_list_names_its_field() -> None:
    # issue 42: what the attention stage calls on a built backend per batch, and in which modes
    from sglang_audit.factfiles import AttentionFacts

    req = factfiles.attention().request
    assert req is not None and req.methods == ("init_forward_metadata", "forward")
    assert "TARGET_VERIFY" in req.target_speculative_modes and "DECODE" not in req.target_speculative_modes
    msg = _bad_file(AttentionFacts, "attention.toml", lambda r: r["request"].__setitem__("target_modes", "DECODE"))
    assert msg.startswith("rules/attention.toml: request.target_modes: expected")
    msg = _bad_file(AttentionFacts, "attention.toml", lambda r: r["request"].pop("batch_class"))
    assert msg == "rules/attention.toml: request.batch_class: missing"


def test_kernels_toml_loads_typed_and_a_bad_row_names_its_field() -> None:
    # issue 40 step 4: the FlashInfer entry each setting's value reaches, typed
    from sglang_audit.factfiles import KernelsFacts

    spec = factfiles.kernels()
    raw = load_toml("kernels.toml")
    assert [r.entry for r in spec.kernel] == [r["entry"] for r in raw["kernel"]]
    assert spec.kernel[0].callers == tuple(raw["kernel"][0]["callers"]) and spec.kernel[0].helper == raw["kernel"][0].get("helper", "")
    assert [o.library for o in spec.other] == [o["library"] for o in raw["other"]]
    msg = _bad_file(KernelsFacts, "kernels.toml", lambda r: r["kernel"][0].pop("entry"))
    assert msg == "rules/kernels.toml: kernel[0].entry: missing"
    msg = _bad_file(KernelsFacts, "kernels.toml", lambda r: r["kernel"][1].__setitem__("model", "both"))
    assert msg.startswith("rules/kernels.toml: kernel ") and "model: expected 'target' or 'draft', got 'both'" in msg
    msg = _bad_file(KernelsFacts, "kernels.toml", lambda r: r["other"][0].__setitem__("values", "cutlass"))
    assert msg == "rules/kernels.toml: other[0].values: expected a list, got 'cutlass'"
    # a checkpoint key is read from the target's config.json only
    msg = _bad_file(KernelsFacts, "kernels.toml", lambda r: next(k for k in r["kernel"] if k["model"] == "draft")
                    .__setitem__("quant_config_key", "weight_block_size"))
    assert msg.startswith("rules/kernels.toml: kernel ") and "quant_config_key: read from the target checkpoint only" in msg


def test_layers_toml_loads_typed_and_bad_values_name_their_field() -> None:
    # issue 40 step 4: the last untyped fact file
    from sglang_audit.factfiles import LayersFacts

    spec = factfiles.layers()
    raw = load_toml("layers.toml")
    assert spec.moe.runner.class_ == raw["moe"]["runner"]["class"]
    assert [k.function or k.external for k in spec.kernel] == [k.get("function") or k["external"] for k in raw["kernel"]]
    # a process value is a server-args expression or a literal, kept as written
    assert spec.moe.process_values["get_moe_expert_parallel_rank"] == 0
    assert spec.model_registry.process_objects["get_parallel"]["pp_group"]["world_size"] == "pp_size"
    assert [s.global_ or s.flags for s in spec.moe.speculative_swap] == \
        [s.get("global") or s["flags"] for s in raw["moe"]["speculative_swap"]]
    msg = _bad_file(LayersFacts, "layers.toml", lambda r: r["moe"]["process_values"].__setitem__("x", 1.5))
    assert msg == "rules/layers.toml: moe.process_values.x: expected a string or an integer or true or false, got 1.5"
    msg = _bad_file(LayersFacts, "layers.toml", lambda r: r["kernel"][0].__setitem__("external", "flashinfer.x"))
    assert msg == ("rules/layers.toml: kernel 'sgl-kernel cutlass_moe_fp4': expected exactly one of function, "
                   "external")
    msg = _bad_file(LayersFacts, "layers.toml", lambda r: r["moe"]["speculative_swap"][1].pop("path"))
    assert msg.startswith("rules/layers.toml: moe.speculative_swap get_speculative_moe_runner_backend: expected either")
    msg = _bad_file(LayersFacts, "layers.toml", lambda r: r["model_registry"].pop("entry"))
    assert msg == "rules/layers.toml: model_registry.entry: missing"
    msg = _bad_file(LayersFacts, "layers.toml", lambda r: r["runner_kernel"][0].__setitem__("lable", "x"))
    assert msg.startswith("rules/layers.toml: runner_kernel[0].lable: not a known key")


def test_hf_config_field_factories_load_typed_and_a_bad_one_names_its_field() -> None:
    from sglang_audit.factschema import HFConfigFacts

    assert factfiles.hf_config().field_factories == ("huggingface_hub.dataclasses.as_validated_field",)
    assert _bad_file(HFConfigFacts, "hf_config.toml", lambda r: r.__setitem__("field_factories", [3])) == \
        "rules/hf_config.toml: field_factories[0]: expected a string, got 3"

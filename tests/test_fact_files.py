"""SGLang/device facts that moved from code to rules/*.toml: each file is complete and
consistent, and the code reads it (devices, the matrix's default sweep, the graph layout)."""

from __future__ import annotations

from sglang_audit.analyses import graph, matrix
from sglang_audit.resolve.pipeline import bundled_profiles
from sglang_audit.shipped import load_toml
from sglang_audit.target.device import ARCH_CHOICES, SM_COUNT, parse_device


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

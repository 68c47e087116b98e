"""Fuzzing the input parsers (issue 10, item 6): whatever a user pastes or points at,
the launch-command and config.json readers either succeed or raise one AuditError."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_audit.errors import AuditError
from sglang_audit.inputs.flags import FlagTable, OptionSpec, parse_launch, parse_set
from sglang_audit.resolve.pipeline import locate_model

EXAMPLES = int(os.environ.get("SGA_PARSER_EXAMPLES", "300"))

TABLE = FlagTable(
    by_flag={
        "--model-path": OptionSpec(("--model-path",), "model_path", "store", "str", None),
        "--tp-size": OptionSpec(("--tp-size", "--tp"), "tp_size", "store", "int", None),
        "--tp": OptionSpec(("--tp-size", "--tp"), "tp_size", "store", "int", None),
        "--moe-runner-backend": OptionSpec(("--moe-runner-backend",), "moe_runner_backend", "store", "str", ("auto", "triton")),
        "--disable-radix-cache": OptionSpec(("--disable-radix-cache",), "disable_radix_cache", "store_true", "str", None),
        "--mem-fraction-static": OptionSpec(("--mem-fraction-static",), "mem_fraction_static", "store", "float", None),
    },
    by_dest={},
    fields={"model_path": None, "tp_size": 1, "moe_runner_backend": "auto", "disable_radix_cache": False, "mem_fraction_static": None},
)
TABLE.by_dest = {o.dest: o for o in TABLE.by_flag.values()}

words = st.one_of(
    st.sampled_from(list(TABLE.by_flag) + ["python", "-m", "sglang.launch_server", "=", "'", '"', "8", "auto", "x", "--", "-"]),
    st.text(max_size=12),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(words, max_size=12).map(" ".join))
def test_launch_parser_never_crashes(command: str) -> None:
    try:
        flags, model = parse_launch(TABLE, command)
    except AuditError as exc:
        assert "\n" not in str(exc)
        return
    assert set(flags) <= set(TABLE.fields)
    assert model is None or isinstance(model, str)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.text(max_size=20), max_size=4))
def test_set_parser_never_crashes(items: list[str]) -> None:
    try:
        flags = parse_set(TABLE, items)
    except AuditError:
        return
    assert set(flags) <= set(TABLE.fields)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=12,
)
configs = st.one_of(
    json_values,
    st.fixed_dictionaries({"architectures": st.one_of(st.lists(st.text(max_size=8), max_size=2), json_values)}, optional={"quantization_config": json_values}),
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzzmodel")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(configs, st.booleans())
def test_config_json_reader_never_crashes(model_dir: Path, config: object, as_text: bool) -> None:
    text = json.dumps(config) if not as_text else json.dumps(config)[: max(1, len(json.dumps(config)) // 2)]
    (model_dir / "config.json").write_text(text)
    try:
        model = locate_model(str(model_dir))
    except AuditError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert model.path == model_dir.resolve()

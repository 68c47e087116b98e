"""The world's overlays one at a time: a builtin, stdlib functions and the device model, each
asked through the evaluator as analysed code would ask them, plus the shape of the tables."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_audit.evaluate.overlays import OVERLAYS as PYTHON_OVERLAYS
from sglang_audit.evaluate.values import NOT_HANDLED
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.resolve.adhoc import evaluate_function
from sglang_audit.world.native import NativeWorld
from sglang_audit.world.overlays import OVERLAYS as TARGET_OVERLAYS


def _run(source: str, arch: str = "sm120") -> Any:
    outcome = evaluate_function(source, "f", [], arch=arch)
    assert outcome.kind == "value", outcome
    return outcome.value


# ---- builtins ------------------------------------------------------------------------------
def test_builtin_sorted_with_key_and_reverse() -> None:
    assert _run("def f():\n    return sorted(['bb', 'a', 'ccc'], key=len, reverse=True)\n") == ["ccc", "bb", "a"]


def test_builtin_isinstance_treats_bool_as_int_and_str_enum_as_str() -> None:
    src = ("import enum\nclass B(str, enum.Enum):\n    X = 'x'\n"
           "def f():\n    return isinstance(True, int), isinstance(B.X, str), isinstance('a', (int, float))\n")
    assert _run(src) == (True, True, False)


def test_enum_int_mixin_member_given_as_a_tuple_is_the_mixin_of_its_items() -> None:
    # 0.5.23 layers/moe/utils.py: `class RoutingMethodType(IntEnum): Default = (0,)`; CPython's
    # EnumType builds int(*(0,)), so int(member) is 0 (fp8.py's TRT-LLM path calls int() on it);
    # a plain Enum keeps its tuple, and a class with its own __new__ gets the tuple itself
    src = ("import enum\nclass R(enum.IntEnum):\n    A = (0,)\n    B = (2,)\n    C = 9\n"
           "class P(enum.Enum):\n    A = (0,)\n"
           "class S(str, enum.Enum):\n    A = ('x',)\n"
           "def f():\n    return int(R.B), R.A.value, R(2) is R.B, R.C.value, P.A.value, S.A.value\n")
    assert _run(src) == (2, 0, True, 9, (0,), "x")


def test_builtin_len_of_an_unknown_is_unknown_not_a_guess() -> None:
    outcome = evaluate_function("import torch\ndef f():\n    return len(torch.foo())\n", "f", [])
    assert outcome.kind == "unknown"


def test_builtin_getattr_default_only_on_attribute_error() -> None:
    src = "class C:\n    a = 1\ndef f():\n    return getattr(C(), 'a', 0), getattr(C(), 'b', 7)\n"
    assert _run(src) == (1, 7)


# ---- stdlib ---------------------------------------------------------------------------------
def test_stdlib_functools_reduce_and_partial() -> None:
    src = ("import functools\ndef add(a, b):\n    return a + b\n"
           "def f():\n    inc = functools.partial(add, 1)\n    return functools.reduce(add, [1, 2, 3], 10), inc(4)\n")
    assert _run(src) == (16, 5)


def test_stdlib_deepcopy_does_not_alias() -> None:
    src = "import copy\ndef f():\n    a = {'k': [1]}\n    b = copy.deepcopy(a)\n    b['k'].append(2)\n    return a, b\n"
    assert _run(src) == ({"k": [1]}, {"k": [1, 2]})


def test_stdlib_regex_match_groups() -> None:
    src = "import re\ndef f():\n    m = re.match(r'sm(\\d+)', 'sm120a')\n    return m.group(1)\n"
    assert _run(src) == "120"


def test_stdlib_regex_that_may_backtrack_forever_is_refused() -> None:
    outcome = evaluate_function("import re\ndef f():\n    return re.match('(a+)+$', 'a' * 40 + 'b')\n", "f", [])
    assert outcome.kind == "unknown" and "backtrack" in outcome.message


def test_stdlib_packaging_versions_compare_as_versions() -> None:
    src = ("from packaging import version\n"
           "def f():\n    return version.parse('0.5.10') > version.parse('0.5.9')\n")
    assert _run(src) is True


def test_stdlib_dataclass_defaults_and_post_init() -> None:
    src = ("from dataclasses import dataclass, field\n@dataclass\nclass A:\n    x: int = 1\n"
           "    y: list = field(default_factory=list)\n    def __post_init__(self):\n        self.y.append(self.x)\n"
           "def f():\n    a = A(x=3)\n    return a.x, a.y\n")
    assert _run(src) == (3, [3])


# ---- the device model ------------------------------------------------------------------------
@pytest.mark.parametrize(("arch", "expected"), [("sm120", (12, 0)), ("sm90", (9, 0)), ("12.1", (12, 1))])
def test_device_capability_comes_from_the_named_arch(arch: str, expected: tuple[int, int]) -> None:
    src = "import torch\ndef f():\n    return torch.cuda.get_device_capability()\n"
    assert _run(src, arch) == expected


def test_device_capability_without_a_gpu_raises_as_torch_does() -> None:
    outcome = evaluate_function("import torch\ndef f():\n    return torch.cuda.get_device_capability()\n", "f", [], arch="cpu")
    assert outcome.kind == "raised" and outcome.exception == "RuntimeError"


def test_device_nvml_and_torch_version_agree_with_the_device() -> None:
    src = ("import pynvml\nimport torch\ndef f():\n"
           "    h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
           "    return pynvml.nvmlDeviceGetCudaComputeCapability(h), torch.version.cuda, torch.cuda.is_available()\n")
    assert _run(src, "sm100") == ((10, 0), "12.9", True)
    amd = "import torch\ndef f():\n    return torch.version.cuda, torch.version.hip, torch.cuda.is_available()\n"
    assert _run(amd, "gfx942") == (None, "6.4.43482", True)


def test_device_properties_name_and_sm_count() -> None:
    src = "import torch\ndef f():\n    p = torch.cuda.get_device_properties(0)\n    return p.name, p.multi_processor_count\n"
    assert _run(src, "sm120") == ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188)


def test_re_compile_without_flags_matches_as_the_module_functions() -> None:
    src = ("import re\nP = re.compile(r'experts\\.\\d+\\.w2')\n"
           "def f():\n    m = P.search('a.experts.12.w2.weight')\n"
           "    return m.group(0), P.match('a.experts.1.w2') is None, P.pattern\n")
    assert _run(src) == ("experts.12.w2", True, r"experts\.\d+\.w2")


def test_re_compile_with_flags_stays_an_outside_object() -> None:
    outcome = evaluate_function("import re\ndef f():\n    return re.compile('a', re.I).search('A')\n", "f", [])
    assert outcome.kind == "value" and type(outcome.value).__name__ == "External"


# ---- the tables -------------------------------------------------------------------------------
def _world() -> NativeWorld:
    return NativeWorld(parse_device("sm120"), Environment(), [])


@pytest.mark.parametrize("table", [PYTHON_OVERLAYS, TARGET_OVERLAYS], ids=["python", "target"])
def test_every_overlay_lists_only_its_own_module(table: dict[str, Any]) -> None:
    world = _world()
    for module, overlay in table.items():
        attrs = overlay(world)
        assert attrs, module
        prefix = module.split(":", 1)[0]  # "torch:tensors" lists torch's names
        stray = [p for p in attrs if not p.startswith(prefix + ".")]
        assert stray == [], f"{module} lists {stray}"


def test_no_attribute_is_listed_by_two_overlays() -> None:
    world = _world()
    seen: dict[str, str] = {}
    for table in (PYTHON_OVERLAYS, TARGET_OVERLAYS):
        for module, overlay in table.items():
            for path in overlay(world):
                assert path not in seen, f"{path}: {seen[path]} and {module}"
                seen[path] = module


def test_an_unlisted_function_is_external_and_its_call_unknown() -> None:
    world = _world()
    assert world.external_value(None, "math.tau") is NOT_HANDLED  # type: ignore[arg-type]
    assert world.external_value(None, "math.pi") == pytest.approx(3.14159, abs=1e-5)  # type: ignore[arg-type]
    outcome = evaluate_function("import math\ndef f():\n    return math.tau * 2\n", "f", [])
    assert outcome.kind == "unknown"


# ---- a package a plain install has only as a namespace (rules/packages.toml [namespace]) ------
NAMESPACE_PROBE = """
import flash_attn
seen = []
try:
    from flash_attn import flash_attn_func
    seen.append("v2 api")
except ImportError as e:
    seen.append(str(e))
if not hasattr(flash_attn, "flash_attn_func"):
    seen.append("namespace")
"""


def _environment(tmp_path, requires: list[str], with_packages: frozenset[str] = frozenset()) -> Environment:
    from types import SimpleNamespace

    from sglang_audit.resolve.release import build_environment

    (tmp_path / "sglang").mkdir(exist_ok=True)
    meta = tmp_path / "sglang-0.5.23.dist-info"
    meta.mkdir(exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.23\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    target = SimpleNamespace(source=SimpleNamespace(package_dir=tmp_path / "sglang"), device=parse_device("sm120"),
                             env={}, with_packages=with_packages, without_packages=frozenset())
    return build_environment(target)  # type: ignore[arg-type]


def test_flash_attn_from_flash_attn_4_alone_is_a_namespace_without_the_v2_api(tmp_path):
    # flash-attn-4 (0.5.23's Requires-Dist) ships flash_attn/cute/ and no flash_attn/__init__.py
    # (flash_attn_4-4.0.0b40 wheel); SGLang's hf_transformers_patches.py relies on that
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.frontend.parse import SourceCache

    env = _environment(tmp_path, ["flash-attn-4>=4.0.0b18", "torch==2.9.1"])
    assert dict(env.namespaces) == {"flash_attn": ("cute",)}
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "probe.py").write_text(NAMESPACE_PROBE)
    interp = Interpreter(tmp_path, SourceCache(use_disk=False), NativeWorld(parse_device("sm120"), env, []), {})
    mod = interp.load_module("sglang.probe")
    assert mod.globals["seen"] == ["cannot import name 'flash_attn_func' from 'flash_attn' (unknown location)", "namespace"]
    assert interp.new_decisions == []  # known, not a branch explored both ways


def test_flash_attn_is_a_full_package_when_the_release_or_the_user_installs_flash_attn_2(tmp_path):
    assert _environment(tmp_path, ["flash-attn-4>=4.0.0b18", "flash-attn==2.8.3"]).namespaces == ()
    assert _environment(tmp_path, ["flash-attn-4>=4.0.0b18"], frozenset({"flash_attn"})).namespaces == ()
    assert _environment(tmp_path, ["torch==2.9.1"]).namespaces == ()


@pytest.mark.parametrize("statement, message", [
    ("from flash_attn import flash_attn_func", "cannot import name 'flash_attn_func' from 'flash_attn' (unknown location)"),
    ("import triton_kernels", "No module named 'triton_kernels'"),  # rules/packages.toml [optional] absent
])
def test_a_failing_import_names_its_own_statement_as_a_verdict(tmp_path, statement, message):
    # the raise named the last call before it (len(...) here), not the import that failed
    from sglang_audit.evaluate.interpreter import Interpreter, PyRaise
    from sglang_audit.frontend.parse import SourceCache
    from sglang_audit.resolve.stage_common import raise_message

    env = _environment(tmp_path, ["flash-attn-4>=4.0.0b18"])
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "m.py").write_text(f"def f():\n    n = len('ab')\n    {statement}\n    return n\n")
    interp = Interpreter(tmp_path, SourceCache(use_disk=False), NativeWorld(parse_device("sm120"), env, []), {})
    mod = interp.load_module("sglang.m")
    with pytest.raises(PyRaise) as raised:
        interp.call(mod.globals["f"], [], {})
    assert (raised.value.file, raised.value.line, raised.value.explicit) == ("sglang/m.py", 3, True)
    assert raise_message(interp, raised.value)[1] == message


REGISTRY = """
import importlib
import pkgutil


def import_model_classes(package_name):
    # the shape of SGLang's models/registry.py import_model_classes
    found = {}
    package = importlib.import_module(package_name)
    listed = []
    for _, name, ispkg in pkgutil.iter_modules(package.__path__, package_name + "."):
        listed.append((name, ispkg))
        if not ispkg:
            module = importlib.import_module(name)
            if hasattr(module, "EntryClass"):
                entry = module.EntryClass
                for tmp in entry if isinstance(entry, list) else [entry]:
                    found[tmp.__name__] = name
    return listed, found
"""


def test_pkgutil_iter_modules_lists_an_analysed_packages_path_as_cpython_does(tmp_path):
    # the model registry walks `package.__path__` (0.5.19+ EAGLE constructor: models/registry.py)
    import pkgutil

    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.frontend.parse import SourceCache

    root = tmp_path / "sglang"
    models = root / "models"
    for d in (models / "sub", models / "no_init", models / "__pycache__"):
        d.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "registry.py").write_text(REGISTRY)
    (models / "__init__.py").write_text("")
    (models / "llama.py").write_text("class LlamaForCausalLM:\n    pass\n\n\nEntryClass = LlamaForCausalLM\n")
    (models / "deepseek.py").write_text("class A:\n    pass\n\n\nclass B:\n    pass\n\n\nEntryClass = [A, B]\n")
    (models / "utils.py").write_text("X = 1\n")
    (models / "sub" / "__init__.py").write_text("")
    (models / "no_init" / "x.py").write_text("")
    (models / "__pycache__" / "llama.cpython-311.pyc").write_bytes(b"")
    (models / "notes.txt").write_text("")
    expected = [(m.name, m.ispkg) for m in pkgutil.iter_modules([str(models)], "sglang.models.")]
    assert expected == [("sglang.models.deepseek", False), ("sglang.models.llama", False),
                        ("sglang.models.sub", True), ("sglang.models.utils", False)]
    interp = Interpreter(tmp_path, SourceCache(use_disk=False), _world(), {})
    mod = interp.load_module("sglang.registry")
    listed, found = interp.call(mod.globals["import_model_classes"], ["sglang.models"], {})
    assert listed == expected
    assert found == {"A": "sglang.models.deepseek", "B": "sglang.models.deepseek",
                     "LlamaForCausalLM": "sglang.models.llama"}


def test_pkgutil_iter_modules_outside_the_analysed_tree_is_unknown(tmp_path):
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.values import Unknown
    from sglang_audit.frontend.parse import SourceCache

    (tmp_path / "tree" / "sglang").mkdir(parents=True)
    (tmp_path / "tree" / "sglang" / "__init__.py").write_text("")
    (tmp_path / "tree" / "sglang" / "m.py").write_text(f"import pkgutil\n\nout = pkgutil.iter_modules([{str(tmp_path)!r}])\n")
    interp = Interpreter(tmp_path / "tree", SourceCache(use_disk=False), _world(), {})
    out = interp.load_module("sglang.m").globals["out"]
    assert isinstance(out, Unknown) and "outside the analysed source tree" in out.reason


# ---- torch's operator registry (world/overlays/oplibrary.py) --------------------------------

CUSTOM_OPS = """
import torch
from torch.library import Library

lib = Library("mini", "FRAGMENT")


def register(fn):
    # the shape of SGLang's direct_register_custom_op (0.5.23 utils/common.py): define, impl,
    # then callers run torch.ops.<ns>.<name>
    if not hasattr(torch.ops.mini, fn.__name__):
        lib.define(fn.__name__ + "(Tensor x) -> Tensor")
        lib.impl(fn.__name__, fn, "CUDA")
        lib._register_fake(fn.__name__, lambda x: x)
    return getattr(torch.ops.mini, fn.__name__)


@register
def double(x):
    return x * 2


@torch.library.custom_op("mini::triple", mutates_args=())
def triple(x):
    return x * 3


def f():
    return (double(21), torch.ops.mini.double(1), triple(2), torch.ops.mini.triple(3),
            hasattr(torch.ops.mini, "double"), hasattr(torch.ops.mini, "other"))
"""


def test_a_registered_operator_runs_the_function_registered_for_it():
    from sglang_audit.resolve.adhoc import evaluate_function

    outcome = evaluate_function(CUSTOM_OPS, "f", [])
    assert outcome.kind == "value", outcome
    assert outcome.value == (42, 2, 6, 9, True, False)


def test_a_dtype_is_an_instance_of_torch_dtype_only():
    from sglang_audit.resolve.adhoc import evaluate_function

    source = "import torch\n\ndef f():\n    return isinstance(torch.bfloat16, torch.dtype), isinstance(torch.int32, torch.Tensor)\n"
    outcome = evaluate_function(source, "f", [])
    assert (outcome.kind, outcome.value) == ("value", (True, False))


def test_a_log_record_names_the_logging_call_not_a_call_its_message_made(tmp_path) -> None:
    # rendering the message runs Name.__str__, whose own calls (line 8) come after the
    # logging call's (line 11): the record is written at the logging call
    from sglang_audit.evaluate.interpreter import Bounds, Interpreter
    from sglang_audit.frontend.parse import SourceCache

    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "m.py").write_text(
        "import logging\n\nlogger = logging.getLogger(__name__)\n\n\n"
        "class Name:\n    def __str__(self):\n        return str(len('ab'))\n\n\n"
        "logger.warning(Name())\n")
    interp = Interpreter(tmp_path, SourceCache(use_disk=False), _world(), {}, Bounds())
    interp.load_module("sglang.m")
    assert [(r.file, r.line, r.level, r.message) for r in interp.logs] == [("sglang/m.py", 11, "warning", "2")]

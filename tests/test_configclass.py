"""Keys config.json omits read as the config class's defaults, as SGLang sees them (issue #23):
SGLang's own classes evaluated, transformers' read from the version the release requires,
anything else unknown with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import shared

from sglang_audit.errors import SourceError
from sglang_audit.evaluate.interpreter import Bounds, Interpreter
from sglang_audit.evaluate.values import HFConfig, Unknown
from sglang_audit.frontend.parse import SourceCache, convert_source
from sglang_audit.hfconfig.configclass import (
    ConfigClass,
    ConfigClasses,
    NoConfigClass,
    _static_class,
)
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.resolve.pipeline import Request, resolve
from sglang_audit.resolve.resolver import _model_has
from sglang_audit.world.native import NativeWorld
from sglang_audit.world.overlays.boundaries import NO_DEFAULT, class_default

ROOT = Path(__file__).resolve().parent.parent
QWEN3_MOE = ROOT / "fixtures" / "models" / "qwen3-30b-a3b"

V5 = '''
from ...configuration_utils import PreTrainedConfig
from ..base.configuration_base import BaseMoeConfig

class ToyConfig(BaseMoeConfig):
    model_type = "toy"
    attribute_map = {"num_local_experts": "num_experts"}
    num_experts_per_tok: int = 8
    num_experts: int = 128
    mlp_only_layers: list[int] | None = None
    sliding_window: int | None = 4096

    def __post_init__(self, **kwargs):
        self.sliding_window = self.sliding_window if self.use_sliding_window else None
        super().__post_init__(**kwargs)
'''
BASE = '''
from ...configuration_utils import PreTrainedConfig

class BaseMoeConfig(PreTrainedConfig):
    hidden_size: int = 1024
    num_experts_per_tok: int = 2
'''
V4 = '''
class OldConfig(PretrainedConfig):
    model_type = "old"

    def __init__(self, vocab_size=32000, num_experts_per_tok=6, mlp_only_layers=None, head_dim=None,
                 hidden_size=4096, num_attention_heads=32, tie_word_embeddings=False, **kwargs):
        self.vocab_size = vocab_size
        self.num_experts_per_tok = num_experts_per_tok
        self.mlp_only_layers = [] if mlp_only_layers is None else mlp_only_layers
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
        if vocab_size > 10:
            self.big = True
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
'''


def _read(text: str, name: str, sources: dict[str, str] | None = None) -> ConfigClass:
    tree = convert_source(text)
    node = next(n for n in tree.body if n.kind == "ClassDef" and n.name == name)

    def base_source(module: str | None, _cls: str):  # type: ignore[no-untyped-def]
        if module is None:
            return tree, "toy.py"
        return convert_source((sources or {})[module]), module

    found = _static_class(node, "toy.py", tree, base_source)
    assert isinstance(found, ConfigClass), found
    return found


def test_v5_dataclass_fields_bases_and_post_init():
    found = _read(V5, "ToyConfig", {"..base.configuration_base": BASE})
    assert found.defaults["num_experts_per_tok"] == 8  # the class's own field wins over its base's 2
    assert found.defaults["hidden_size"] == 1024  # inherited from the base class
    assert found.defaults["mlp_only_layers"] is None
    window = found.defaults["sliding_window"]  # rewritten in __post_init__: unknown, with the line
    assert isinstance(window, Unknown) and "toy.py:14" in window.reason and "__post_init__" in window.reason
    assert found.attribute_map == {"num_local_experts": "num_experts"}


def test_v4_init_copies_conditional_defaults_and_computed_attributes():
    found = _read(V4, "OldConfig")
    d = found.defaults
    assert d["vocab_size"] == 32000 and d["num_experts_per_tok"] == 6
    assert d["mlp_only_layers"] == []  # `[] if mlp_only_layers is None else mlp_only_layers`
    assert d["tie_word_embeddings"] is False  # passed to PretrainedConfig.__init__
    head = d["head_dim"]  # computed from two parameters: not evaluated here, said so
    assert isinstance(head, Unknown) and "toy.py:10" in head.reason and "computed" in head.reason
    assert isinstance(d["big"], Unknown) and "under a condition" in d["big"].reason


def test_class_default_reads_and_aliases():
    found = _read(V5, "ToyConfig", {"..base.configuration_base": BASE})
    cfg = HFConfig({"model_type": "toy", "num_experts": 64}, "m")
    cfg.config_class = found
    assert class_default(cfg, "num_experts_per_tok", False) == 8
    assert class_default(cfg, "num_local_experts", False) == 64  # attribute_map alias of a key given
    assert class_default(cfg, "not_a_field", False) is NO_DEFAULT  # AttributeError, as on the class
    # computed in __post_init__ from an attribute nothing sets: unknown naming the line, never
    # read as absent (getattr(cfg, "sliding_window", None) would be a confident None)
    window = class_default(cfg, "sliding_window", False)
    assert isinstance(window, Unknown) and "toy.py:14" in window.reason
    assert "use_sliding_window is not set" in window.reason
    assert _model_has(cfg, ["num_experts_per_tok"]) is True


# ---- computed attributes: the class's body evaluated on config.json's values ------------------


def _cfg(found: ConfigClass, **data: object) -> HFConfig:
    cfg = HFConfig({"model_type": "x", **data}, "m")
    cfg.config_class = found
    return cfg


def test_a_computed_attribute_is_evaluated_from_config_json():
    found = _read(V4, "OldConfig")
    # head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
    assert class_default(_cfg(found, hidden_size=2048, num_attention_heads=16), "head_dim", False) == 128
    assert class_default(_cfg(found), "head_dim", False) == 4096 // 32  # the parameters' defaults
    # set under a condition: the branch config.json takes (vocab_size > 10), else not an attribute
    assert class_default(_cfg(found, vocab_size=32), "big", False) is True
    assert class_default(_cfg(found, vocab_size=5), "big", False) is NO_DEFAULT


def test_a_v5_post_init_reads_fields_and_config_json():
    found = _read(V5, "ToyConfig", {"..base.configuration_base": BASE})
    # self.sliding_window = self.sliding_window if self.use_sliding_window else None
    assert class_default(_cfg(found, use_sliding_window=True), "sliding_window", False) == 4096  # the field default
    assert class_default(_cfg(found, use_sliding_window=False), "sliding_window", False) is None


COMPUTED = '''
class MlaConfig(PretrainedConfig):
    model_type = "mla"
    qk_rope_head_dim: int = 64
    kv_lora_rank: int = 512

    def __post_init__(self, **kwargs):
        self.head_dim = self.qk_rope_head_dim
        self.rope_scaling = kwargs.pop("rope_parameters", None) or {}
        self.layer_types = [compute(i) for i in range(3)]
        super().__post_init__(**kwargs)
'''


def test_a_computation_the_evaluator_cannot_follow_is_unknown_with_its_line():
    found = _read(COMPUTED, "MlaConfig")
    # the shape of transformers 5's DeepseekV3Config.head_dim: a copy of another field
    assert class_default(_cfg(found), "head_dim", False) == 64
    assert class_default(_cfg(found, qk_rope_head_dim=32), "head_dim", False) == 32
    # a comprehension calling a function: unknown, naming where evaluation stopped
    got = class_default(_cfg(found), "layer_types", False)
    assert isinstance(got, Unknown) and "toy.py:10" in got.reason and "not evaluated past toy.py:10" in got.reason
    # getattr(cfg, "layer_types", None) in the analysed code sees the unknown, not None
    interp = Interpreter(ROOT, SourceCache(use_disk=False), NativeWorld(parse_device("sm100"), Environment(), []), {}, Bounds())
    cfg = _cfg(found)
    assert isinstance(interp.getattr(cfg, "layer_types"), Unknown)
    assert interp.getattr(cfg, "head_dim") == 64


def test_a_class_that_cannot_be_read_makes_omitted_keys_unknown():
    cfg = HFConfig({"model_type": "toy"}, "m")
    cfg.config_class = NoConfigClass("transformers==9.9 not read (no network)")
    got = class_default(cfg, "num_experts_per_tok", False)
    assert isinstance(got, Unknown) and "num_experts_per_tok" in got.reason and "no network" in got.reason
    assert class_default(cfg, "tie_word_embeddings", True) is NO_DEFAULT  # PretrainedConfig's own stay known
    has = _model_has(cfg, ["num_experts_per_tok"])
    assert isinstance(has, Unknown) and "no network" in has.reason


def test_download_failure_is_a_reason_not_an_error(tmp_path):
    def wheel():  # type: ignore[no-untyped-def]
        raise SourceError("transformers==5.19.0: download failed (no network?)")

    classes = ConfigClasses(tmp_path / "sglang", wheel)
    found = classes.lookup(None, {"model_type": "qwen3_moe"}, False, None)
    assert isinstance(found, NoConfigClass) and "no network" in found.reason
    assert isinstance(classes.lookup(None, {}, False, None), NoConfigClass)  # no model_type


def test_remote_code_with_trust_reads_the_model_directory(tmp_path):
    (tmp_path / "configuration_toy.py").write_text(V4.replace("OldConfig", "ToyRemote"))
    classes = ConfigClasses(None, lambda: None)
    interp = Interpreter(tmp_path, SourceCache(use_disk=False), NativeWorld(parse_device("sm100"), Environment(), []), {}, Bounds())
    data = {"model_type": "old", "auto_map": {"AutoConfig": "configuration_toy.ToyRemote"}}
    found = classes.lookup(interp, data, True, tmp_path)
    assert isinstance(found, ConfigClass) and found.defaults["num_experts_per_tok"] == 6
    missing = ConfigClasses(None, lambda: None).lookup(interp, {**data, "auto_map": {"AutoConfig": "nothere.X"}}, True, tmp_path)
    assert isinstance(missing, NoConfigClass) and "not in the model directory" in missing.reason
    # the hub gives config.json without the class's .py: read as PretrainedConfig, and said so
    assert missing.assumed and "taken as unset" in missing.reason and "nothere.py" in missing.reason
    cfg = HFConfig({"model_type": "old"}, "m")
    cfg.config_class = missing
    assert class_default(cfg, "text_config", False) is NO_DEFAULT


# ---- real releases ----------------------------------------------------------------------


def _qwen_nvfp4(tmp_path: Path, name: str, omit: bool) -> Path:
    model = tmp_path / name
    shutil.copytree(QWEN3_MOE, model)
    data = json.loads((model / "config.json").read_text())
    data["quantization_config"] = {"quant_algo": "NVFP4", "quant_method": "modelopt", "ignore": ["lm_head"], "group_size": 16}
    assert data["num_experts_per_tok"] == 8  # transformers' Qwen3MoeConfig default
    if omit:
        del data["num_experts_per_tok"]
    (model / "config.json").write_text(json.dumps(data))
    return model


@pytest.mark.real_release
def test_0523_omitted_key_reads_as_the_transformers_default(release, tmp_path):
    """The issue's case: Qwen3-MoE NVFP4 on sm100 without num_experts_per_tok in config.json.
    SGLang reads it through Qwen3MoeConfig (default 8), so the scheduler initialises the MoE
    flags and picks flashinfer_trtllm, exactly as with the key present."""
    src = str(release("0.5.23").package_dir)
    answers = []
    for omit in (False, True):
        model = _qwen_nvfp4(tmp_path, f"q{int(omit)}", omit)
        # evaluated (no result cache), on the release's IR from the disk cache (parsing its ~350
        # files from source would cost ~35 s of CPU per resolution)
        res = resolve(Request(source=src, arch="sm100", model=str(model), sets=["tp_size=4"], use_cache=False,
                              flashinfer_source="none"), cache=shared.cache_for(src))
        answers.append({k: (s.config, s.runtime) for k, s in res.settings.items()})
    assert answers[0] == answers[1]
    assert answers[1]["moe_runner_backend"] == ("flashinfer_trtllm", "flashinfer_trtllm")


@pytest.mark.real_release
def test_0523_sglang_own_config_class_is_evaluated(release):
    """SGLang's own Cohere2MoeConfig (sglang/srt/configs/cohere2_moe.py): its __init__
    defaults, evaluated by the partial evaluator."""
    package = release("0.5.23").package_dir
    world = NativeWorld(parse_device("sm100"), Environment(), [])
    world.source_root = package.parent
    interp = Interpreter(package.parent, SourceCache(), world, {}, Bounds())
    found = ConfigClasses(package, lambda: None).lookup(interp, {"model_type": "cohere2_moe"}, False, None)
    assert isinstance(found, ConfigClass)
    assert found.where.startswith("sglang/srt/configs/cohere2_moe.py:") and found.where.endswith("Cohere2MoeConfig")
    assert found.defaults["num_experts_per_tok"] == 2
    layer_types = found.defaults["layer_types"]  # computed under a branch: unknown, with its line
    assert isinstance(layer_types, Unknown) and "sglang/srt/configs/cohere2_moe.py:" in layer_types.reason


def _release_interp(package: Path) -> Interpreter:
    world = NativeWorld(parse_device("sm120"), Environment(), [])
    world.source_root = package.parent
    return Interpreter(package.parent, SourceCache(), world, {}, Bounds())


def _release_config(package: Path, model_dir: Path, **overrides) -> HFConfig:
    """config.json of ``model_dir`` (with ``overrides``) as an HFConfig whose config class is
    the one the release's pinned transformers wheel defines for its model_type."""
    from sglang_audit.source.transformers import (
        TransformersWheel,
        transformers_pin,
        transformers_wheel,
    )

    pin = transformers_pin(package)
    classes = ConfigClasses(package, lambda: TransformersWheel(transformers_wheel(pin), pin))
    data = json.loads((model_dir / "config.json").read_text())
    cfg = HFConfig({**data, **overrides}, "m")
    cfg.config_class = classes.lookup(_release_interp(package), data, False, None)
    return cfg


@pytest.mark.real_release
def test_0513_sglang_class_computes_rope_scaling_from_rope_parameters(release):
    """Qwen3.5's text config omits rope_scaling; SGLang's Qwen3_5TextConfig.__init__ sets it from
    rope_parameters (kwargs.pop, then super().__init__(**kwargs), then `if self.rope_scaling is
    None`). Before, the attribute read as absent (getattr(..., None) gave None)."""
    package = release("0.5.13").package_dir
    interp = _release_interp(package)
    text = json.loads((ROOT / "fixtures" / "models" / "qwen3.5-397b-a17b-nvfp4" / "config.json").read_text())["text_config"]
    assert "rope_scaling" not in text
    cfg = HFConfig(dict(text), "m")
    cfg.config_class = ConfigClasses(package, lambda: None).lookup(interp, text, False, None)
    assert isinstance(cfg.config_class, ConfigClass) and cfg.config_class.where.endswith("Qwen3_5MoeTextConfig")
    assert class_default(cfg, "rope_scaling", False) == text["rope_parameters"]
    bare = {k: v for k, v in text.items() if k != "rope_parameters"}
    cfg = HFConfig(bare, "m")
    cfg.config_class = ConfigClasses(package, lambda: None).lookup(interp, bare, False, None)
    assert class_default(cfg, "rope_scaling", False) == {}  # `rope_parameters or {}`


@pytest.mark.real_release
def test_0520_transformers_post_init_head_dim_of_deepseek_v3(release):
    """transformers 5's DeepseekV3Config sets head_dim = qk_rope_head_dim in __post_init__
    (0.5.20 pins transformers 5.12.1): 64 for DeepSeek-R1, not the hidden_size //
    num_attention_heads (56) a reader of config.json alone would fall back to."""
    package = release("0.5.20").package_dir
    model = ROOT / "fixtures" / "models" / "deepseek-r1-nvfp4"
    data = json.loads((model / "config.json").read_text())
    assert "head_dim" not in data and data["qk_rope_head_dim"] == 64
    cfg = _release_config(package, model)
    assert isinstance(cfg.config_class, ConfigClass) and "DeepseekV3Config" in cfg.config_class.where
    assert class_default(cfg, "head_dim", False) == 64
    assert class_default(_release_config(package, model, qk_rope_head_dim=32), "head_dim", False) == 32


ROPE = '''
class RopeConfig(PreTrainedConfig):
    model_type = "rope"
    rope_parameters: dict | None = None

    def __post_init__(self, **kwargs):
        if self.rope_parameters is None:
            self.rope_parameters = {"rope_type": "yarn", "factor": 32.0}
        super().__post_init__(**kwargs)
'''


def test_a_transformers_rope_default_with_rope_scaling_in_config_json_is_unknown():
    from dataclasses import replace

    found = _read(ROPE, "RopeConfig")
    assert class_default(_cfg(found), "rope_parameters", False) == {"rope_type": "yarn", "factor": 32.0}
    # read from transformers' wheel: its PreTrainedConfig turns config.json's rope_scaling into
    # rope_parameters, which this evaluator does not run, so the class default would be a guess
    tf = ConfigClass(found.where, found.defaults, found.attribute_map,
                     {k: replace(c, transformers=True) for k, c in found.computed.items()})
    got = class_default(_cfg(tf, rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_parameters", False)
    assert isinstance(got, Unknown) and "PreTrainedConfig" in got.reason and "rope_scaling" in got.reason
    assert class_default(_cfg(tf), "rope_parameters", False) == {"rope_type": "yarn", "factor": 32.0}


def _config_tree(tmp_path: Path) -> Path:
    pkg = tmp_path / "sglang" / "srt" / "configs"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "sglang", tmp_path / "sglang" / "srt", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "toy_a.py").write_text('class ToyAConfig:\n    model_type = "toy_a"\n')
    (pkg / "toy_b.py").write_text('class ToyBConfig:\n    model_type = "toy_b"\n\n\nclass Later:\n    model_type = "toy_a"\n')
    return tmp_path


def test_release_config_classes_follow_modules_loaded_later_rebound_names_and_a_new_interpreter(tmp_path):
    # the lookup keeps the config modules seen per interpreter (issue 22): a module imported
    # after a lookup, a name rebound in a module's globals, and another interpreter on the same
    # world (another resolution path or target) must each be seen as they are now
    root = _config_tree(tmp_path)
    world = NativeWorld(parse_device("sm100"), Environment(installed=frozenset({"torch"})), [])
    cache = SourceCache(use_disk=False)
    first = Interpreter(root, cache, world, {}, Bounds())
    a = first.load_module("sglang.srt.configs.toy_a")
    assert [c.name for c in world.config_classes(first, "toy_a")] == ["ToyAConfig"]
    assert world.config_classes(first, "toy_b") == []
    b = first.load_module("sglang.srt.configs.toy_b")
    assert [c.name for c in world.config_classes(first, "toy_b")] == ["ToyBConfig"]
    # a class bound under another name of the module that defines it counts too
    b.globals["AlsoA"] = b.globals.pop("Later")
    b.globals["Later"] = b.globals["AlsoA"]
    assert [c.name for c in world.config_classes(first, "toy_a")] == ["ToyAConfig", "Later", "Later"]
    del b.globals["AlsoA"], b.globals["Later"]
    assert [c.name for c in world.config_classes(first, "toy_a")] == ["ToyAConfig"]
    second = Interpreter(root, cache, world, {}, Bounds())
    assert world.config_classes(second, "toy_a") == []  # nothing of the first interpreter's modules
    second.load_module("sglang.srt.configs.toy_a")
    found = world.config_classes(second, "toy_a")
    assert [c.name for c in found] == ["ToyAConfig"] and found[0] is not a.globals["ToyAConfig"]
    # a class attribute written after a lookup (no globals write): read again at each lookup
    found[0].ns["model_type"] = "toy_c"
    assert world.config_classes(second, "toy_a") == []
    assert [c.name for c in world.config_classes(second, "toy_c")] == ["ToyAConfig"]


# ---- transformers 5: PreTrainedConfig's rope conversion, run from the wheel -----------------
# A toy wheel imitating the shapes of transformers 5.19's configuration_utils.py (the rope block
# in PreTrainedConfig.__post_init__, config.json's other keys set after it) and
# modeling_rope_utils.py (RotaryEmbeddingConfigMixin), and 5.3's __init__ form.

TOY_UTILS = '''
from .modeling_rope_utils import RotaryEmbeddingConfigMixin
from .utils import PushToHubMixin


class PreTrainedConfig(PushToHubMixin, RotaryEmbeddingConfigMixin):
    model_type: str = ""
    dtype: str | None = None

    def __post_init__(self, **kwargs):
        if (torch_dtype := kwargs.pop("torch_dtype", None)) is not None:
            self.dtype = torch_dtype
        if hasattr(self, "rope_parameters"):
            kwargs = self.convert_rope_params_to_dict(**kwargs)
        for parameter_name in ("temperature", "top_k"):
            kwargs.pop(parameter_name, None)
        for key, value in kwargs.items():
            setattr(self, key, value)
        LATER
'''
TOY_UTILS_53 = '''
from .modeling_rope_utils import RotaryEmbeddingConfigMixin
from .utils import PushToHubMixin


class PreTrainedConfig(PushToHubMixin, RotaryEmbeddingConfigMixin):
    def __init__(self, *, return_dict=True, dtype=None, **kwargs):
        if hasattr(self, "rope_parameters"):
            ignore_keys_at_rope_validation = kwargs.pop("ignore_keys_at_rope_validation", None)
            kwargs = self.convert_rope_params_to_dict(ignore_keys_at_rope_validation=ignore_keys_at_rope_validation, **kwargs)
        self.return_dict = return_dict
        for key, value in kwargs.items():
            setattr(self, key, value)
'''
TOY_ROPE = '''
class RotaryEmbeddingConfigMixin:
    default_theta = 10_000.0
    default_rope_type = "default"
    ignore_keys_at_rope_validation = set()

    def nested_rope_parameter_keys(self, rope_parameters: dict) -> list[str]:
        labels = getattr(self, "_rope_type_labels", None) or getattr(self, "layer_types", None) or ()
        return [key for key in rope_parameters if key in labels]

    def convert_rope_params_to_dict(self, ignore_keys_at_rope_validation=None, **kwargs):
        rope_scaling = kwargs.pop("rope_scaling", None)
        self.rope_parameters = rope_scaling or self.rope_parameters
        self.rope_parameters = self.rope_parameters if self.rope_parameters is not None else {}
        rope_theta = kwargs.pop("rope_theta", getattr(self, "rope_theta", self.default_theta))
        nested_keys = self.nested_rope_parameter_keys(self.rope_parameters)
        partial_rotary_factor = kwargs.get("partial_rotary_factor", getattr(self, "partial_rotary_factor", None))
        for rope_parameters in [self.rope_parameters[key] for key in nested_keys] or [self.rope_parameters]:
            rope_parameters.setdefault("rope_theta", rope_theta)
            if partial_rotary_factor is not None:
                rope_parameters.setdefault("partial_rotary_factor", partial_rotary_factor)
        self.standardize_rope_params()
        self.validate_rope(ignore_keys=ignore_keys_at_rope_validation)
        return kwargs

    def standardize_rope_params(self):
        rope_parameters = getattr(self, "rope_parameters", None) or {}
        if not rope_parameters:
            logger.warning("no RoPE parameters")
            return
        rope_parameters.setdefault("rope_type", rope_parameters.get("type", "default"))
        if rope_parameters["rope_type"] in ["llama3", "yarn", "longrope"]:
            if hasattr(self, "original_max_position_embeddings"):
                self.rope_parameters["original_max_position_embeddings"] = self.original_max_position_embeddings
            else:
                self.rope_parameters.setdefault("original_max_position_embeddings", self.max_position_embeddings)
        self.rope_parameters = rope_parameters

    def validate_rope(self, ignore_keys=None):
        raise ValueError("a check: never evaluated")
'''
TOY_MODEL = '''
from ...configuration_utils import PreTrainedConfig


class ToyConfig(PreTrainedConfig):
    model_type = "toy"
    default_theta = 1_000_000.0
    max_position_embeddings: int = 4096
    rope_parameters: dict | None = None

    def __post_init__(self, **kwargs):
        if self.rope_parameters is None:
            self.rope_parameters = {"rope_type": "yarn", "factor": 4.0}
        super().__post_init__(**kwargs)
'''
TOY_MODEL_53 = '''
from ...configuration_utils import PreTrainedConfig


class ToyConfig(PreTrainedConfig):
    model_type = "toy"

    def __init__(self, max_position_embeddings=4096, rope_parameters={"rope_type": "default"}, **kwargs):
        self.max_position_embeddings = max_position_embeddings
        self.rope_parameters = rope_parameters
        super().__init__(**kwargs)
'''


class _ToyWheel:
    version = "5.99.0"

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read(self, name: str) -> str | None:
        return self.files.get(name)

    def files_declaring(self, model_type: str) -> list[str]:
        return [n for n, t in self.files.items() if f'model_type = "{model_type}"' in t]


class _Cacheholder:
    cache = SourceCache()


def _toy_rope(data: dict, utils: str = TOY_UTILS, model: str = TOY_MODEL, later: str = "pass", hub: str = "") -> object:
    files = {
        "transformers/configuration_utils.py": utils.replace("LATER", later),
        "transformers/modeling_rope_utils.py": TOY_ROPE,
        "transformers/utils/__init__.py": "from .hub import PushToHubMixin\n",
        "transformers/utils/hub.py": f"class PushToHubMixin:\n    def push_to_hub(self):\n        pass\n{hub}",
        "transformers/models/toy/configuration_toy.py": model,
    }
    classes = ConfigClasses(None, lambda: _ToyWheel(files))
    cfg = HFConfig({"model_type": "toy", **data}, "m")
    cfg.config_class = classes.lookup(_Cacheholder(), cfg.attrs, False, None)
    assert isinstance(cfg.config_class, ConfigClass), cfg.config_class
    return class_default(cfg, "rope_parameters", False), cfg


def test_transformers_5_rope_conversion_runs_from_the_wheel():
    scaling = {"rope_type": "linear", "factor": 2.0}
    got, cfg = _toy_rope({"rope_scaling": scaling, "rope_theta": 500000.0})
    # config.json's rope_scaling replaces the class default, rope_theta moves into it (kwargs.pop)
    assert got == {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}
    assert cfg.attrs["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}  # config.json's dict is not changed
    # no rope keys: the class default, standardised; rope_theta is the subclass's default_theta,
    # original_max_position_embeddings the field's default (hasattr false: not an attribute)
    got, _ = _toy_rope({})
    assert got == {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1_000_000.0, "original_max_position_embeddings": 4096}
    # a config.json field reaches the conversion; a non-field key is not an attribute yet
    got, _ = _toy_rope({"max_position_embeddings": 8192, "original_max_position_embeddings": 2048})
    assert got["original_max_position_embeddings"] == 8192


def test_transformers_5_3_init_form_converts_a_copied_rope_parameter():
    """5.3's classes copy rope_parameters from an __init__ parameter, then PreTrainedConfig.__init__
    replaces it with config.json's rope_scaling: not the parameter's literal default."""
    got, _ = _toy_rope({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}, "rope_theta": 5e5},
                       utils=TOY_UTILS_53, model=TOY_MODEL_53)
    assert got == {"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5, "original_max_position_embeddings": 4096}


TOY_MODEL_NO_INIT = '''
from ...configuration_utils import PreTrainedConfig


class ToyConfig(PreTrainedConfig):
    model_type = "toy"
    head_dim: int = 128
    rope_parameters: dict | None = None

    def convert_rope_params_to_dict(self, **kwargs):
        rotary_dim = kwargs.get("rotary_dim", getattr(self, "rotary_dim", None))
        if rotary_dim is not None:
            kwargs.setdefault("partial_rotary_factor", rotary_dim / self.head_dim)
        return super().convert_rope_params_to_dict(**kwargs)
'''


def test_a_class_without_an_initialiser_runs_the_base_one_with_its_overrides():
    """5.19's MiniMaxM2Config shape: fields only, and a converter override that calls super().
    Before, rope_parameters read as the field's default, None (a confident wrong answer)."""
    got, _ = _toy_rope({"rope_theta": 5e6, "rotary_dim": 64}, model=TOY_MODEL_NO_INIT)
    assert got == {"rope_theta": 5e6, "partial_rotary_factor": 0.5, "rope_type": "default"}


def test_a_post_init_that_sets_a_kwargs_default_reaches_the_conversion():
    # 5.19's Glm4MoeConfig/Qwen3NextConfig: kwargs.setdefault("partial_rotary_factor", ...) first
    model = TOY_MODEL.replace("        if self.rope_parameters is None:",
                              "        kwargs.setdefault(\"partial_rotary_factor\", 0.25)\n        if self.rope_parameters is None:")
    got, _ = _toy_rope({"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_theta": 1e6}, model=model)
    assert got == {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6, "partial_rotary_factor": 0.25}


@pytest.mark.parametrize(("later", "hub", "why"), [
    ("self.rope_parameters = {}", "", "sets self.rope_parameters"),
    ("reset_rope(self)", "", "passes the config to reset_rope"),
    ("pass", "    def __getattr__(self, name):\n        return 1\n", "PushToHubMixin defines its own attribute lookup"),
])
def test_the_rope_conversion_is_unknown_when_the_base_may_change_it(later, hub, why):
    got, _ = _toy_rope({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, later=later, hub=hub)
    assert isinstance(got, Unknown) and why in got.reason, got


def test_config_json_rope_keys_left_after_the_conversion_are_unknown():
    # a converter that leaves rope_scaling in kwargs: PreTrainedConfig then sets it as an attribute
    model = TOY_MODEL + '''
    def convert_rope_params_to_dict(self, **kwargs):
        return kwargs
'''
    got, _ = _toy_rope({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, model=model)
    assert isinstance(got, Unknown) and "set again after" in got.reason, got


@pytest.mark.real_release
@pytest.mark.parametrize("version", ["0.5.23", "0.5.10"])
def test_gpt_oss_rope_parameters_as_transformers_builds_them(release, version):
    """gpt-oss's config.json gives rope_scaling (yarn) and rope_theta; SGLang's model_config reads
    rope_parameters. The expected dict is what transformers itself built: GptOssConfig.from_dict on
    this config.json with transformers 5.19.0 (0.5.23's pin) and 5.3.0 (0.5.10's), run in a scratch
    venv on 2026-12-03. Before, it was unknown (and the 5.3 value the parameter's default)."""
    cfg = _release_config(release(version).package_dir, ROOT / "fixtures" / "models" / "gpt-oss-120b")
    assert class_default(cfg, "rope_parameters", False) == {
        "beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
        "rope_type": "yarn", "truncate": False, "rope_theta": 150000}


# ---- transformers 5's GLM-5 (GlmMoeDsaConfig): builtins, a walrus, repeated lists -------------
TOY_DSA = '''
from ...configuration_utils import PreTrainedConfig


class ToyConfig(PreTrainedConfig):
    model_type = "toy"
    max_position_embeddings: int = 4096
    rope_parameters: dict | None = None
    num_hidden_layers: int = 6
    first_k_dense_replace: int = 3
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 192
    n_routed_experts: int = 256
    mlp_layer_types: list[str] | None = None
    layer_types: list[str] | None = None
    indexer_types: list[str] | None = None

    def __post_init__(self, **kwargs):
        if self.indexer_types is None:
            freq = max(kwargs.get("index_topk_freq", 1), 1)
            offset = kwargs.get("index_skip_topk_offset", 2)
            self.indexer_types = [
                "full" if (max(i - offset + 1, 0) % freq) == 0 else "shared" for i in range(self.num_hidden_layers)
            ]
        self.head_dim = self.qk_rope_head_dim
        if self.mlp_layer_types is None:
            n_dense = min(self.first_k_dense_replace, self.num_hidden_layers)
            self.mlp_layer_types = ["dense"] * n_dense + ["sparse"] * (self.num_hidden_layers - n_dense)
        if self.layer_types is None:
            self.layer_types = ["indexed_attention"] * self.num_hidden_layers
        if (num_experts := kwargs.get("num_experts")) is not None:
            self.n_routed_experts = num_experts
        super().__post_init__(**kwargs)
'''


def test_a_glm5_shaped_post_init_is_evaluated_with_min_max_and_a_walrus():
    """The shape of transformers 5.19's GlmMoeDsaConfig.__post_init__ (5.12.1's has no walrus):
    before, min() at the n_dense line stopped it, so head_dim, the layer lists and the rope
    conversion after them were unknown (and GLM-5 resolved all-unknown on 0.5.20 and 0.5.23)."""
    _, cfg = _toy_rope({"num_hidden_layers": 5, "index_topk_freq": 2, "num_experts": 128,
                        "rope_scaling": {"type": "yarn", "factor": 40}}, model=TOY_DSA)
    assert class_default(cfg, "head_dim", False) == 64
    assert class_default(cfg, "mlp_layer_types", False) == ["dense"] * 3 + ["sparse"] * 2
    assert class_default(cfg, "layer_types", False) == ["indexed_attention"] * 5
    # max(i - 2 + 1, 0) % 2 for i in 0..4: 0, 0, 1, 0, 1
    assert class_default(cfg, "indexer_types", False) == ["full", "full", "shared", "full", "shared"]
    assert class_default(cfg, "n_routed_experts", False) == 128  # the walrus bound it from kwargs
    rope = class_default(cfg, "rope_parameters", False)
    assert rope["rope_type"] == "yarn" and rope["factor"] == 40


def test_a_repeated_list_as_long_as_an_untrusted_config_says_is_refused():
    # config.json is untrusted: ["indexed_attention"] * 10**12 is not built
    _, cfg = _toy_rope({"num_hidden_layers": 10**12}, model=TOY_DSA)
    got = class_default(cfg, "layer_types", False)
    assert isinstance(got, Unknown) and "sequence too large" in got.reason  # the interpreter's bound (max_seq_len)


# transformers' own values: GlmMoeDsaConfig.from_dict on tests/field/models/glm-5-nvfp4's
# config.json, run in scratch venvs of transformers 5.12.1 (0.5.20's pin) and 5.19.0 (0.5.23's)
# on 2026-12-04, outside the project
_GLM5_ROPE = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
              "original_max_position_embeddings": 4096, "type": "yarn", "rope_theta": 10000, "rope_type": "yarn"}


@pytest.mark.real_release
@pytest.mark.parametrize("version, layer_type", [("0.5.20", "deepseek_sparse_attention"), ("0.5.23", "indexed_attention")])
def test_glm5_config_as_transformers_builds_it(release, version, layer_type):
    cfg = _release_config(release(version).package_dir, ROOT / "tests" / "field" / "models" / "glm-5-nvfp4")
    assert isinstance(cfg.config_class, ConfigClass) and "GlmMoeDsaConfig" in cfg.config_class.where
    assert class_default(cfg, "head_dim", False) == 64
    assert class_default(cfg, "qk_head_dim", False) == 192
    assert class_default(cfg, "mlp_layer_types", False) == ["dense"] * 3 + ["sparse"] * 58
    assert class_default(cfg, "layer_types", False) == [layer_type] * 61
    assert class_default(cfg, "indexer_types", False) == ["full"] * 61
    assert class_default(cfg, "rope_parameters", False) == _GLM5_ROPE


# ---- the initialiser runs on the interpreter (issue 40 step 3) -------------------------------
LOOPS = '''
class LoopConfig(PretrainedConfig):
    model_type = "loops"

    def __init__(self, num_hidden_layers=4, sliding_every=2, **kwargs):
        self.num_hidden_layers = num_hidden_layers
        self.layer_types = []
        for i in range(num_hidden_layers):
            self.layer_types.append("sliding" if (i + 1) % sliding_every else "full")
        self._feature_layer = kwargs.get("feature_layer", -1)

        @property
        def feature_layer(self):
            return self._feature_layer

        super().__init__(**kwargs)
'''


def test_the_initialiser_runs_on_the_interpreter_loops_and_local_defs():
    """A loop in the class's own body and a function defined inside it (transformers 4.57's
    Llama4VisionConfig.__init__ nests a @property def): the interpreter runs them. The evaluator
    it replaced stopped at either ("For/FunctionDef statement not evaluated"), so both were
    unknown."""
    found = _read(LOOPS, "LoopConfig")
    assert class_default(_cfg(found, num_hidden_layers=3), "layer_types", False) == ["sliding", "full", "sliding"]
    assert class_default(_cfg(found, feature_layer=-2), "_feature_layer", False) == -2
    assert class_default(_cfg(found), "_feature_layer", False) == -1
    # a name the class's module would bind is not bound here: unknown naming the line, and
    # only that attribute (the assignment's target), not the rest of the body
    found = _read(LOOPS.replace('kwargs.get("feature_layer", -1)', "DEFAULT_LAYER"), "LoopConfig")
    got = class_default(_cfg(found), "_feature_layer", False)
    assert isinstance(got, Unknown) and "not evaluated past toy.py:10" in got.reason and "DEFAULT_LAYER" in got.reason
    assert class_default(_cfg(found), "layer_types", False) == ["sliding", "full", "sliding", "full"]


def test_a_computed_value_follows_config_json_changed_after_it_was_read():
    # class_default keeps one run per config content: SGLang setting a key afterwards (or
    # changing a dict in place) is a new run, not the first answer again
    cfg = _cfg(_read(V4, "OldConfig"), hidden_size=2048, num_attention_heads=16)
    assert class_default(cfg, "head_dim", False) == 128
    cfg.attrs["hidden_size"] = 4096
    assert class_default(cfg, "head_dim", False) == 256
    got, cfg = _toy_rope({"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    assert got["factor"] == 2.0
    cfg.attrs["rope_scaling"]["factor"] = 4.0
    assert class_default(cfg, "rope_parameters", False)["factor"] == 4.0


# ---- what the class's module binds: functions that only check, SGLang's module globals -------

TOY_V4_UTILS = '''
ALLOWED_LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_type_validation(layer_types, num_hidden_layers=None):
    if not all(layer_type in ALLOWED_LAYER_TYPES for layer_type in layer_types):
        raise ValueError(f"The `layer_types` entries must be in {ALLOWED_LAYER_TYPES}")
    if num_hidden_layers is not None and num_hidden_layers != len(layer_types):
        raise ValueError("`num_hidden_layers` must be equal to the number of layer types")


def fill_defaults(config):
    config.filled = True


class PretrainedConfig:
    pass
'''
TOY_V4_MODEL = '''
from ...configuration_utils import PretrainedConfig, fill_defaults, layer_type_validation


class ToyConfig(PretrainedConfig):
    model_type = "toy"

    def __init__(self, num_hidden_layers=4, sliding_every=2, layer_types=None, **kwargs):
        self.num_hidden_layers = num_hidden_layers
        self.layer_types = layer_types
        if self.layer_types is None:
            self.layer_types = ["sliding_attention" if (i + 1) % sliding_every else KIND for i in range(num_hidden_layers)]
        layer_type_validation(self.layer_types, self.num_hidden_layers)
        self.after_check = len(self.layer_types)
        self.after_fill = fill_defaults(self)
        super().__init__(**kwargs)
'''


def _toy_v4(model: str = TOY_V4_MODEL, **data: object) -> HFConfig:
    files = {"transformers/configuration_utils.py": TOY_V4_UTILS, "transformers/models/toy/configuration_toy.py": model}
    classes = ConfigClasses(None, lambda: _ToyWheel(files))
    cfg = HFConfig({"model_type": "toy", **data}, "m")
    cfg.config_class = classes.lookup(_Cacheholder(), cfg.attrs, False, None)
    assert isinstance(cfg.config_class, ConfigClass), cfg.config_class
    return cfg


def test_a_function_that_only_checks_is_run_in_its_module_and_the_body_goes_past_it():
    """transformers 4.x's layer_type_validation (configuration_utils.py 4.57.1:1372), imported
    by the class's module: recognised as a check from its code (it returns nothing and sets
    nothing), so the initialiser goes on past it; it runs with its module's literal constants,
    and its own raise is the class refusing this config.json. A function that sets an attribute
    is not a check: the run stops there, naming the line."""
    model = TOY_V4_MODEL.replace("KIND", '"full_attention"')
    cfg = _toy_v4(model)
    assert class_default(cfg, "layer_types", False) == ["sliding_attention", "full_attention"] * 2
    assert class_default(cfg, "after_check", False) == 4
    # fill_defaults(self) sets config.filled: not a check, so not bound; only its target stops
    got = class_default(cfg, "after_fill", False)
    assert isinstance(got, Unknown) and "configuration_toy.py:15" in got.reason and "fill_defaults" in got.reason
    # a layer type the check refuses: its raise, with the check's own line
    bad = _toy_v4(TOY_V4_MODEL.replace("KIND", '"bogus"'))
    got = class_default(bad, "after_check", False)
    assert isinstance(got, Unknown) and "transformers/configuration_utils.py:7" in got.reason and "ValueError" in got.reason
    # a name the check cannot bind (here the constant is not a literal): it sets nothing, so
    # the body still goes past it
    cfg = _toy_v4(model)
    files = {"transformers/configuration_utils.py": TOY_V4_UTILS.replace('("full_attention", "sliding_attention")',
                                                                          'BASE + ("sliding_attention",)'),
             "transformers/models/toy/configuration_toy.py": model}
    cfg.config_class = ConfigClasses(None, lambda: _ToyWheel(files)).lookup(_Cacheholder(), cfg.attrs, False, None)
    assert class_default(cfg, "after_check", False) == 4


@pytest.mark.parametrize(("body", "checks"), [
    ("if not x:\n        raise ValueError(x)", True),
    ("logger.warning('deprecated')\n    y = [v for v in x]\n    return None", True),
    ("return len(x)", False),  # returns a value
    ("x.append(1)", False),  # changes its argument
    ("x[0] = 1", False),
    ("helper(x)", False),  # calls what it does not read
])
def test_check_only_reads_the_function_code(body, checks):
    from sglang_audit.hfconfig.members import check_only

    func = convert_source(f"def f(x):\n    {body}\n").body[0]
    assert check_only(func) is checks


def test_own_body_writes_go_through_attribute_map():
    """PretrainedConfig.__setattr__ maps an attribute_map alias in the class's own __init__ too
    (4.57.1 configuration_utils.py:199-202): ``self.n_routed = ...`` sets ``num_experts``,
    which the body then reads."""
    found = _read('''
class AliasConfig(PretrainedConfig):
    model_type = "alias"
    attribute_map = {"n_routed": "num_experts"}

    def __init__(self, n_routed=8, **kwargs):
        self.n_routed = n_routed
        self.total = self.num_experts * 2
        super().__init__(**kwargs)
''', "AliasConfig")
    assert class_default(_cfg(found), "total", False) == 16
    assert class_default(_cfg(found, n_routed=3), "total", False) == 6


TOY_SGLANG_CONFIG = '''
from transformers.configuration_utils import PretrainedConfig

from sglang.srt.heavy import HeavyThing

MAMBA = "mamba"
ATTENTION = "attention"


def _to_sglang_layer_types(layer_types):
    aliases = {"linear_attention": MAMBA, "full_attention": ATTENTION}
    return [aliases.get(t, t) for t in layer_types]


class ToyHybridConfig(PretrainedConfig):
    model_type = "toy_hybrid"

    def __init__(self, hidden_size=64, mamba_expand=2, num_hidden_layers=3, layer_types=None, **kwargs):
        if layer_types is None:
            self.layer_types = [MAMBA] * num_hidden_layers
        else:
            self.layer_types = _to_sglang_layer_types(layer_types)
        for layer_type in self.layer_types:
            if layer_type not in [MAMBA, ATTENTION]:
                raise ValueError(layer_type)
        self.mamba_intermediate_size = mamba_expand * hidden_size
        self.heavy = HeavyThing(hidden_size)
        super().__init__(**kwargs)
'''


def test_sglang_own_class_runs_with_its_module_globals(tmp_path):
    """SGLang's own config class (the shape of 0.5.23's GraniteMoeHybridConfig) runs with what
    its module, as the release's evaluation left it, binds: plain constants and its own
    functions. An import the run cannot use stays unbound: that attribute is unknown, naming
    the line."""
    root = _config_tree(tmp_path)
    (root / "sglang" / "srt" / "configs" / "toy_hybrid.py").write_text(TOY_SGLANG_CONFIG)
    world = NativeWorld(parse_device("sm100"), Environment(installed=frozenset({"torch"})), [])
    world.source_root = root
    interp = Interpreter(root, SourceCache(use_disk=False), world, {}, Bounds())
    data = {"model_type": "toy_hybrid", "hidden_size": 1536, "layer_types": ["linear_attention", "full_attention"]}
    found = ConfigClasses(root / "sglang", lambda: None).lookup(interp, data, False, None)
    assert isinstance(found, ConfigClass), found
    cfg = HFConfig(dict(data), "m")
    cfg.config_class = found
    assert class_default(cfg, "mamba_intermediate_size", False) == 3072
    got = class_default(cfg, "heavy", False)
    assert isinstance(got, Unknown) and "toy_hybrid.py:27" in got.reason and "HeavyThing" in got.reason
    cfg = HFConfig({"model_type": "toy_hybrid"}, "m")
    cfg.config_class = found
    assert class_default(cfg, "layer_types", False) == ["mamba"] * 3
    # the release's module is not changed by the run
    module = interp.load_module("sglang.srt.configs.toy_hybrid")
    assert module.globals["MAMBA"] == "mamba" and "logger" not in module.globals


TOY_VALIDATORS = '''
from huggingface_hub.dataclasses import as_validated_field
from .other import as_validated_field as lookalike


def interval(min=None, max=None):
    message = "Value must be"

    @as_validated_field
    def _inner(value):
        if not min <= value <= max:
            raise ValueError(message)

    return _inner


def plain(min=None):
    def _inner(default=None):
        return default * 2

    return _inner


def other(min=None):
    @lookalike
    def _inner(value):
        pass

    return _inner
'''
TOY_FIELDS = '''
from ...configuration_utils import PreTrainedConfig
from ...utils.type_validators import interval, other, plain


class ToyConfig(PreTrainedConfig):
    model_type = "toy"
    initializer_range: float = interval(min=0.0, max=1.0)(default=0.02)
    doubled: float = plain(min=0.0)(default=0.5)
    lookalike: float = other(min=0.0)(default=0.5)
'''


def test_a_field_default_made_by_a_validator_factory_is_its_default_argument():
    """transformers 5's ``initializer_range: float = interval(min=0.0, max=1.0)(default=0.02)``
    (5.19.0 models/llama/configuration_llama.py:72): ``interval``, read from the wheel, returns
    a function decorated with huggingface_hub's declared ``as_validated_field``, so the field's
    default is ``default=``. A factory that returns anything else is not read."""
    files = {"transformers/configuration_utils.py": "class PreTrainedConfig:\n    pass\n",
             "transformers/utils/type_validators.py": TOY_VALIDATORS,
             "transformers/models/toy/configuration_toy.py": TOY_FIELDS}
    cfg = HFConfig({"model_type": "toy"}, "m")
    cfg.config_class = ConfigClasses(None, lambda: _ToyWheel(files)).lookup(_Cacheholder(), cfg.attrs, False, None)
    assert class_default(cfg, "initializer_range", False) == 0.02
    for name, line in (("doubled", 9), ("lookalike", 10)):
        got = class_default(cfg, name, False)
        assert isinstance(got, Unknown) and f"configuration_toy.py:{line}" in got.reason and "not a literal" in got.reason


@pytest.mark.real_release
def test_0523_module_globals_and_validator_factory_defaults(release):
    """0.5.23: SGLang's own GraniteMoeHybridConfig runs with its module's MAMBA/ATTENTION and
    _to_sglang_layer_types (it stopped at granitemoehybrid.py:195/198 with a NameError), so
    mamba_intermediate_size = mamba_expand * hidden_size is 2 * 1536 (SGLang 0.5.23 itself, in
    the oracle venv: 3072); transformers 5.19's LlamaConfig.initializer_range is
    interval(min=0.0, max=1.0)(default=0.02) (transformers 5.19.0 LlamaConfig.from_dict: 0.02)."""
    package = release("0.5.23").package_dir
    granite = _release_config(package, ROOT / "tests" / "field" / "models" / "granite-4.0-h-tiny")
    assert isinstance(granite.config_class, ConfigClass)
    assert granite.config_class.where.startswith("sglang/srt/configs/granitemoehybrid.py:")
    assert class_default(granite, "mamba_intermediate_size", False) == 3072
    draft = _release_config(package, ROOT / "tests" / "field" / "models" / "gemma-2-eagle3-draft")
    assert isinstance(draft.config_class, ConfigClass) and "configuration_llama.py" in draft.config_class.where
    assert "initializer_range" not in draft.attrs and class_default(draft, "initializer_range", False) == 0.02


def test_a_transformers_class_reads_its_module_constants():
    """A name the class's own module binds once to a literal (a module constant) is bound in
    the run; one bound again (here by a call) is not, and stops only its target, naming the line."""
    model = TOY_V4_MODEL.replace("class ToyConfig", 'KIND = "full_attention"\n\n\nclass ToyConfig')
    cfg = _toy_v4(model)
    assert class_default(cfg, "layer_types", False) == ["sliding_attention", "full_attention"] * 2
    rebound = model.replace("class ToyConfig", 'KIND = compute()\n\n\nclass ToyConfig')
    got = class_default(_toy_v4(rebound), "layer_types", False)
    assert isinstance(got, Unknown) and "configuration_toy.py:" in got.reason and "KIND" in got.reason

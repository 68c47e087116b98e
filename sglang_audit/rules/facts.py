"""The facts a known-bad rule may ask of a resolution: the vocabulary (``BASE_FACTS``) and
how each fact is derived from a ``Resolution`` (device, model summary and checkpoint files,
flags, settings' config/runtime values, release, pinned FlashInfer, code fingerprints read as
text, never imported). Nothing here looks at evaluator internals or at rule files."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.inputs.modeldir import model_checkpoint
from sglang_audit.result import LayerValue, Resolution, Setting, UnknownValue
from sglang_audit.rules.model import CodeEvidence, Fingerprint, Rule

# Facts the rules may name besides settings.*, flags.*, env.*, code.*, subject.*.
# Those marked "not provided" are not (yet) in the Resolution: a rule that needs one is
# undecided unless the user set the matching flag.
BASE_FACTS: dict[str, str] = {
    "arch": "device arch (sm120, sm100, gfx942, ...)",
    "arch_family": "sm8x, sm9x, sm10x, sm11x, sm12x; gfx9 on ROCm; else the platform",
    "platform": "cuda, hip, npu, xpu, cpu",
    "cuda": "CUDA version torch reports",
    "cudnn": "cuDNN version torch reports (e.g. 9.10.2): --cudnn, else on CUDA with the pip profile the pinned torch's nvidia-cudnn pin; null when neither (test with is_set)",
    "cudnn_source": "where cudnn came from: 'given with --cudnn' or 'the pip profile: torch X Requires-Dist nvidia-cudnn-cuNN==V; ...'; null when cudnn is",
    "driver": "NVIDIA driver version: --driver, else 580.95.05 assumed (driver_source says which)",
    "driver_source": "'given with --driver' or 'assumed'",
    "gpu_count": "GPUs assumed",
    "release": "SGLang release version",
    "flashinfer": "pinned flashinfer_python version",
    "structure": "where the release keeps its resolution logic",
    "model.name": "model profile or directory name",
    "model.architecture": "architectures[0] as the release reads it",
    "model.quantization": "ModelConfig.quantization as the release computes it",
    "model.config_quant_method": "quant_method in config.json",
    "model.attention_arch": "ModelConfig.attention_arch as the release computes it: MLA, MHA (SSM from 0.5.2x); the model runner's use_mla_backend is attention_arch == MLA",
    "model.draft_architecture": "the draft (MTP/NEXTN) model architecture",
    "model.draft_quantization": "the draft model quantization",
    "model.quant_algo": "ModelOpt quant_algo of the checkpoint (NVFP4, FP8, MIXED_PRECISION); null when not ModelOpt",
    "model.kv_cache_quant_algo": "KV-cache quantization the checkpoint declares (FP8); null when it declares none",
    "model.weight_block_size": "weight_block_size of a block-quantized checkpoint ([128, 128]); null when not block-quantized",
    "model.num_experts": "routed experts the checkpoint declares (n_routed_experts, num_local_experts, num_experts); null for a dense model",
    "model.torch_dtype": "the dtype config.json declares (torch_dtype, or dtype; top level, else text_config): float16, bfloat16, ...; null when it declares none",
}
NOT_PROVIDED = {k for k, v in BASE_FACTS.items() if v.startswith("not provided")}
CHECKPOINT_FACTS = ("model.quant_algo", "model.kv_cache_quant_algo", "model.weight_block_size")
SETTING_LAYERS = ("config", "runtime")
# settings.<name>.layer: what the layers built with the value resolved to (Setting.layer: the
# MoE kernel entry point, or the attention backend composition such as
# "HybridAttnBackend(decode_backend=..., prefill_backend=...)"); not an example-only layer
SETTING_FACT_LAYERS = (*SETTING_LAYERS, "layer")

# ---- facts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Unknown:
    """A fact without a single value: why, and the values it may take (none = anything)."""

    reason: str
    candidates: tuple[Any, ...] = ()
    open: bool = True  # some outcome is itself unknown: no candidate list is complete

    def __repr__(self) -> str:  # shown in the undecided report
        return f"unknown ({self.reason})"


def _fact_value(value: Any) -> Any:
    """A Resolution value as a fact: plain values as is, UnknownValue as Unknown with the
    candidate values on which SGLang does not reject the configuration."""
    if not isinstance(value, UnknownValue):
        return value
    cands: list[Any] = []
    is_open = False
    for c in value.candidates:
        v = c.value
        if isinstance(v, str) and v.startswith("rejected: "):
            continue  # SGLang refuses to start on that path: nothing to flag there
        if isinstance(v, str) and v.startswith("unknown: "):
            is_open = True
            continue
        if v not in cands:
            cands.append(v)
    if not value.candidates:
        is_open = True
    return Unknown(value.reason, tuple(cands), is_open or not cands)


def effective(setting: Setting) -> Any:
    """The value that takes effect (``Setting.effective``, the one definition)."""
    return setting.effective


def checkpoint_quant(model_dir: Path) -> dict[str, Any]:
    """quant_algo / kv_cache_quant_algo as the checkpoint declares them (config.json's
    quantization_config, else hf_quant_config.json's quantization block), read as data.
    ModelOpt's compressed-tensors form (config_groups) is named only when every group agrees
    (4-bit float groups of 16 = NVFP4, 8-bit float = FP8). Unreadable → Unknown."""
    found = model_checkpoint(model_dir)
    if found.config is None:
        why = Unknown(f"the model's config.json at {model_dir} could not be read")
        return dict.fromkeys(CHECKPOINT_FACTS, why)
    qc = found.first_key(("quantization_config",), lambda q: isinstance(q, dict))
    if not isinstance(qc, dict):
        hfq = found.hf_quant
        qc = hfq.get("quantization") if hfq is not None else None
        qc = dict(qc, quant_method="modelopt") if isinstance(qc, dict) else None
    if not isinstance(qc, dict):
        return dict.fromkeys(CHECKPOINT_FACTS, None)  # an unquantized checkpoint
    block = qc.get("weight_block_size")
    algo: Any = qc.get("quant_algo")
    if algo is None and str(qc.get("quant_method", "")).startswith("modelopt"):
        kinds = {_group_algo(g.get("weights")) for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict)}
        algo = kinds.pop() if len(kinds) == 1 and None not in kinds else Unknown(
            "the checkpoint's config_groups do not name one quant_algo")
    kv: Any = qc.get("kv_cache_quant_algo")
    if kv is None and isinstance(qc.get("kv_cache_scheme"), dict):
        kv = _group_algo(qc["kv_cache_scheme"]) or Unknown("the checkpoint's kv_cache_scheme is not FP8")
    return {"model.quant_algo": algo if isinstance(algo, (str, Unknown)) else None,
            "model.kv_cache_quant_algo": kv if isinstance(kv, (str, Unknown)) else None,
            "model.weight_block_size": [int(x) for x in block] if isinstance(block, list)
            and all(isinstance(x, int) for x in block) else None}


# the config.json keys that name the routed-expert count, by model family (DeepSeek/GLM/Kimi,
# Mixtral/MiniMax/Llama-4/GPT-OSS, Qwen-MoE)
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def checkpoint_experts(model_dir: Path) -> Any:
    """The routed-expert count config.json declares (top level, else text_config): an int for
    a MoE model, None for a dense one, Unknown when config.json cannot be read."""
    return _config_key(model_dir, EXPERT_KEYS, lambda n: isinstance(n, int) and not isinstance(n, bool) and n > 0)


def checkpoint_dtype(model_dir: Path) -> Any:
    """The dtype config.json declares (``torch_dtype``, or transformers 5's ``dtype``; top
    level, else text_config) as a string, None when it declares none, Unknown when
    config.json cannot be read. SGLang's ``--dtype auto`` keeps a float16 checkpoint in
    float16 (the activation dtype the FP8 GEMM dispatch sees)."""
    return _config_key(model_dir, ("torch_dtype", "dtype"), lambda v: isinstance(v, str))


def _config_key(model_dir: Path, keys: tuple[str, ...], accept: Callable[[Any], bool]) -> Any:
    """The first accepted value of ``keys`` in config.json (top level, else text_config), None
    when there is none, Unknown when config.json cannot be read."""
    found = model_checkpoint(model_dir)
    if found.config is None:
        return Unknown(f"the model's config.json at {model_dir} could not be read")
    return found.first_key(keys, accept)


def layer_fact(layer: Any) -> Any:
    """Setting.layer as a fact: None when no layer re-decides the value, the resolved or
    raising outcome's value as a string, Unknown (with the branch values) when it is unknown."""
    if layer is None:
        return None
    if isinstance(layer, UnknownValue):
        return _fact_value(layer)
    if isinstance(layer, LayerValue):
        if layer.status == "unknown":
            cands = tuple(dict.fromkeys(c.value for c in layer.candidates if isinstance(c.value, str)))
            return Unknown(layer.reason or "the layer outcome is unknown", cands, True)
        return layer.value
    return Unknown("the layer outcome is not a recognised value")


def _group_algo(spec: Any) -> str | None:
    if not isinstance(spec, dict) or spec.get("type") != "float":
        return None
    if spec.get("num_bits") == 4 and spec.get("group_size") == 16:
        return "NVFP4"
    if spec.get("num_bits") == 8:
        return "FP8"
    return None


def cudnn_version(number: Any) -> str | None:
    """torch.backends.cudnn.version()'s integer (91002) as a version (9.10.2); None stays
    None: neither the user nor the pip profile's torch pin says, and a rule must not guess it."""
    if not isinstance(number, int) or number <= 0:
        return None
    if number < 10000:  # cuDNN 8 encodes major * 1000 + minor * 100 + patch (8907)
        return f"{number // 1000}.{number // 100 % 10}.{number % 100}"
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def arch_family(device: Mapping[str, Any]) -> str:
    platform = device.get("platform")
    major = device.get("major")
    if platform == "cuda" and isinstance(major, int):
        return f"sm{major}x"
    if platform == "hip" and isinstance(major, int):
        return f"gfx{major}"
    return str(platform)


class Facts:
    """The facts of one deployment (from a Resolution, or an example's fact dict)."""

    def __init__(self, values: dict[str, Any], code: Callable[[Fingerprint], CodeEvidence | Unknown] | None = None) -> None:
        self.values = values
        self._code = code
        # keyed by the fingerprint itself: two rules may give the same id to different shapes
        self._code_cache: dict[Fingerprint, CodeEvidence] = {}

    @classmethod
    def from_resolution(cls, res: Resolution) -> Facts:
        dev = res.device
        m = res.model
        values: dict[str, Any] = {
            "arch": dev.get("arch"), "arch_family": arch_family(dev), "platform": dev.get("platform"),
            "cuda": dev.get("cuda"), "cudnn": cudnn_version(dev.get("cudnn")),
            "cudnn_source": dev.get("cudnn_source") if dev.get("cudnn") else None,
            "driver": dev.get("driver"), "driver_source": dev.get("driver_source"), "gpu_count": dev.get("gpu_count"),
            "release": res.source.get("version"), "flashinfer": res.source.get("flashinfer"),
            "structure": res.structure, "model.name": m.name,
            "model.architecture": _fact_value(m.architecture), "model.quantization": _fact_value(m.quantization),
            "model.config_quant_method": m.config_quant_method,
            "model.attention_arch": _fact_value(m.attention_arch),
            "model.draft_architecture": _fact_value(m.draft_architecture),
            "model.draft_quantization": _fact_value(m.draft_quantization),
        }
        values.update(checkpoint_quant(Path(m.path)))
        values["model.num_experts"] = checkpoint_experts(Path(m.path))
        values["model.torch_dtype"] = checkpoint_dtype(Path(m.path))
        for name, s in res.settings.items():
            values[f"settings.{name}.config"] = _fact_value(s.config) if s.present else None
            values[f"settings.{name}.runtime"] = _fact_value(effective(s)) if s.present else None
            values[f"settings.{name}.layer"] = layer_fact(s.layer) if s.present else None
            values[f"settings.{name}"] = values[f"settings.{name}.runtime"]
        for k, v in res.flags.items():
            values[f"flags.{k}"] = v
        # the environment profile's variables (SGLang's ROCm image sets SGLANG_USE_AITER=1) as
        # SGLang saw them, each with where it came from: a profile nobody named is an assumption
        # (``env_source.<name>``; knownbad.py's assumed inputs)
        profile = res.environment or {}
        for entry in profile.get("env", ()):
            name = entry.get("name")
            if isinstance(name, str) and name not in res.env:
                values[f"env.{name}"] = entry.get("value")
                values[f"env_source.{name}"] = f"{profile.get('name')} profile, {profile.get('chosen')}"
        for k, v in res.env.items():
            values[f"env.{k}"] = v
        pkg = res.source.get("package_dir")
        root = Path(pkg).parent if pkg else None
        texts: dict[Path, str | None] = {}  # each file read once, whatever number of fingerprints
        return cls(values, (lambda fp: probe_fingerprint(root, fp, texts)) if root else None)

    @classmethod
    def from_example(cls, example: Mapping[str, Any], rule: Rule) -> Facts:
        """An inline example: the facts it names; ``settings.X`` sets both layers unless
        ``settings.X.config``/``.runtime`` are given; code.<id> are booleans."""
        values: dict[str, Any] = {}
        for k, v in example.items():
            values[k] = v
        for k, v in list(example.items()):
            parts = k.split(".")
            if parts[0] == "settings" and len(parts) == 2:
                values.setdefault(f"{k}.runtime", v)
                values.setdefault(f"{k}.config", v)
            if parts[0] == "settings" and len(parts) == 3 and parts[2] == "runtime":
                values.setdefault(f"settings.{parts[1]}", v)
        if "arch" in values and "arch_family" not in values:
            values["arch_family"] = _family_of_name(str(values["arch"]))
        values.setdefault("cudnn", None)  # as in a resolution: not given unless the example says
        def code(fp: Fingerprint) -> CodeEvidence | Unknown:
            key = f"code.{fp.id}"
            if key not in values:
                return Unknown(f"{key} not given")
            return CodeEvidence(fp.id, fp.file, bool(values[key]), None, fp.description)

        return cls(values, code)

    def code(self, fp: Fingerprint) -> Any:
        if fp not in self._code_cache:
            if self._code is None:
                return Unknown("the release source is not available to check the code fingerprint")
            ev = self._code(fp)
            if isinstance(ev, Unknown):
                return ev
            self._code_cache[fp] = ev
        return self._code_cache[fp].found

    def evidence(self, rule: Rule) -> tuple[CodeEvidence, ...]:
        """The code evidence this rule's conditions looked at, by fingerprint id."""
        return tuple(self._code_cache[f] for f in sorted(rule.fingerprints, key=lambda f: f.id) if f in self._code_cache)

    def get(self, name: str, rule: Rule, subject: str | None) -> Any:
        if name == "subject" or name.startswith("subject."):
            name = f"settings.{subject}" + name[len("subject"):]
        if name.startswith("code."):
            fp = next(f for f in rule.fingerprints if f.id == name[5:])
            return self.code(fp)
        if name in self.values:
            return self.values[name]
        if name in NOT_PROVIDED:
            return Unknown(f"{name} is not provided by the resolution")
        if name.startswith(("flags.", "env.")):
            return None  # not set by the user
        if name.startswith("settings."):
            return Unknown(f"{name} was not resolved")
        return Unknown(f"{name} is not known")


def _family_of_name(arch: str) -> str:
    m = re.fullmatch(r"sm(\d+?)(\d)", arch)
    if m:
        return f"sm{m.group(1)}x"
    m = re.fullmatch(r"gfx(\d)\d+", arch)
    return f"gfx{m.group(1)}" if m else arch


def probe_fingerprint(root: Path | None, fp: Fingerprint, texts: dict[Path, str | None] | None = None) -> CodeEvidence:
    """Read one file of the release as text and look for the fingerprint's shape
    (``texts``: files already read for this deployment, None for a missing one)."""
    if root is None:
        return CodeEvidence(fp.id, fp.file, False, None, "source not available")
    path = (root / fp.file).resolve()
    if texts is not None and path in texts:
        text = texts[path]
    else:
        text = _read_release_file(root, path)
        if texts is not None:
            texts[path] = text
    if text is None:
        return CodeEvidence(fp.id, fp.file, False, None, fp.description)
    if fp.regex is not None:
        m = re.search(fp.regex, text, re.MULTILINE)
        pos = m.start() if m else -1
    else:
        pos = text.find(fp.contains or "")
    if pos < 0:
        return CodeEvidence(fp.id, fp.file, False, None, fp.description)
    # the line of the first non-blank character of the match
    while pos < len(text) and text[pos] in " \t\n":
        pos += 1
    return CodeEvidence(fp.id, fp.file, True, text.count("\n", 0, pos) + 1, fp.description)


def _read_release_file(root: Path, path: Path) -> str | None:
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None



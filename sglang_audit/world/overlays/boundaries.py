"""SGLang's boundaries: I/O functions of the release answered from config.json and the
device instead of evaluated (``rules/boundaries.toml``), and the Hugging Face config they
return (an ``HFConfig`` built from the model directory's config.json, with the defaults
``PretrainedConfig`` would supply, ``rules/hf_config.toml``)."""

from __future__ import annotations

import copy
import fnmatch
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sglang_audit import factfiles
from sglang_audit.evaluate.overlays.common import plain_deep
from sglang_audit.evaluate.values import (
    Class,
    External,
    HFConfig,
    ModuleObj,
    Native,
    Property,
    Unknown,
)
from sglang_audit.inputs.modeldir import model_checkpoint

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.inputs.device import Device
    from sglang_audit.world.overlays.host import TargetHost


def _none_marker(value: Any) -> Any:
    return None if value == "__none__" else value


NO_DEFAULT = object()


_COMPUTING: set[tuple[int, str]] = set()  # (config, attribute) being computed: no cycles
# config -> (attribute, fallback kind, attributes being computed) -> (its class, its attrs then, value)
_COMPUTED: weakref.WeakKeyDictionary[HFConfig, dict[tuple[str, bool, frozenset[str]], tuple[Any, dict[str, Any], Any]]] = \
    weakref.WeakKeyDictionary()


def class_default(cfg: HFConfig, name: str, generic: bool, fallback: Callable[[str], Any] | None = None) -> Any:
    """What the config class sets for ``name`` when config.json omits it (issue #23):
    its default (a copy), an attribute_map alias, the value its __init__/__post_init__
    computes from config.json's values (``world/configrun.computed_value``), an unknown naming
    where the class computes it when that cannot be evaluated, or an unknown for any name
    when the class could not be read. ``fallback``: an attribute the class does not set
    (PretrainedConfig's own defaults), for the ``self.Y`` a computation reads."""
    from sglang_audit.hfconfig.configclass import ConfigClass, NoConfigClass
    from sglang_audit.world.configrun import NOT_SET, computed_value

    found = cfg.config_class
    if isinstance(found, NoConfigClass) and not generic and not found.assumed:  # PretrainedConfig's own attributes stay known
        return Unknown(f"config.json omits {name!r} and {found.reason}", f"hfdefault:{cfg.origin}:{name}")
    if isinstance(found, ConfigClass):
        alias = found.attribute_map.get(name)
        if alias is not None and alias in cfg.attrs:
            return cfg.attrs[alias]
        for key, target in found.attribute_map.items():  # config.json's alias key set the attribute
            if target == name and key in cfg.attrs:
                return cfg.attrs[key]
        value = found.defaults.get(name, NO_DEFAULT)
        if value is not NO_DEFAULT and not isinstance(value, Unknown):
            return copy.deepcopy(value)
        if isinstance(value, Unknown):
            # computed by the class: evaluated on this config.json, else unknown naming the
            # line (never read as absent: getattr(cfg, x, None) would be a confident None)
            computing = (id(cfg), name)
            if computing in _COMPUTING:
                return value
            # one run per config content: the class's initialiser on the interpreter costs
            # ~4 ms, and SGLang reads the same attribute thousands of times per resolution
            active = frozenset(n for i, n in _COMPUTING if i == id(cfg))
            memo = _COMPUTED.setdefault(cfg, {})
            memo_key = (name, fallback is None, active)
            hit = memo.get(memo_key)
            if hit is not None and hit[0] is found and hit[1] == cfg.attrs:
                got = hit[2]
            else:
                _COMPUTING.add(computing)
                try:
                    got = computed_value(found, name, cfg.attrs, lambda other: _attr_of(cfg, other, fallback))
                finally:
                    _COMPUTING.discard(computing)
                if plain_deep(cfg.attrs):
                    # compared by value on the next read: a key SGLang sets or changes in place
                    # afterwards is a new run
                    memo[memo_key] = (found, copy.deepcopy(cfg.attrs), got)
            got = copy.deepcopy(got) if isinstance(got, list | dict | set | tuple) else got
            return NO_DEFAULT if got is NOT_SET else got
    return NO_DEFAULT


def _attr_of(cfg: HFConfig, name: str, fallback: Callable[[str], Any] | None) -> Any:
    """``self.name`` as a computing class body reads it (config.json, else the class default)."""
    if name in cfg.attrs:
        return cfg.attrs[name]
    value = class_default(cfg, name, False, fallback)
    if value is NO_DEFAULT:
        value = fallback(name) if fallback is not None else NO_DEFAULT
    return Unknown(f"{name} is not set before it is read") if value is NO_DEFAULT else value


def hf_to_dict(cfg: HFConfig) -> dict[str, Any]:
    return {k: hf_to_dict(v) if isinstance(v, HFConfig) else copy.deepcopy(v) if plain_deep(v) else v for k, v in cfg.attrs.items()}


class Boundaries:
    """The boundary functions and the HF configs of one target."""

    def __init__(self, device: Device, inside: Callable[[str], Path | None], package: Callable[[], Path | None]) -> None:
        self.device = device
        self.inside_model_dir = inside
        self.analysed_package = package  # the analysed package's directory, once the resolver sets it
        self.config_classes: Any = None  # hfconfig/configclass.ConfigClasses, built on first get_config
        self.assumptions: list[str] = []  # what reading the model's config assumed (shown with the model)
        hf = factfiles.hf_config()
        self.subconfig_keys = hf.subconfig_keys
        self.text_config_keys = hf.text_config_keys
        self.config_modules = hf.release_config_modules
        self._config_module_names: dict[str, bool] = {}
        # (the interpreter, how many of its modules were looked at, the config modules among them)
        self._config_scan: tuple[Any, list[int], list[ModuleObj]] | None = None
        # id(module) -> (the module, its globals' version, the classes it defines)
        self._own_classes_memo: dict[int, tuple[ModuleObj, int | None, list[Class]]] = {}
        self._config_classes_memo: tuple[list[ModuleObj], tuple[int, int] | None, list[Class]] | None = None
        self.hf_defaults: dict[str, Any] = {k: _none_marker(copy.deepcopy(v)) for k, v in hf.defaults.items()}  # its own copies: config values may be changed in place
        self.boundary_rules = factfiles.boundaries().boundary

    def boundary_for(self, interp: Interpreter, module: str, name: str) -> Native | None:
        for rule in self.boundary_rules:
            if rule.function == name and fnmatch.fnmatchcase(module, rule.module):
                return Native(f"{module}.{name}", self._boundary_fn(rule.kind))
        return None

    def _boundary_fn(self, kind: str) -> Any:
        device = self.device
        if kind == "hf_config":
            return self.load_hf_config
        if kind == "none":
            return lambda i, a, k: None
        if kind == "device_memory":
            return lambda i, a, k: float(device.memory_mib) if device.platform in ("cuda", "hip") else Unknown("device memory of this platform")
        if kind == "driver_tuple":
            return lambda i, a, k: tuple(int(x) for x in device.driver.split(".")) if device.platform == "cuda" else Unknown("driver version")
        if kind == "driver_str":
            return lambda i, a, k: device.driver
        if kind == "device_name":
            return lambda i, a, k: device.name
        raise ValueError(f"unknown boundary kind {kind}")

    def load_hf_config(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        path = args[0] if args else kwargs.get("model")
        if not isinstance(path, str):
            return Unknown("get_config() of an unknown model path")
        inside = self.inside_model_dir(path)
        if inside is None:
            return Unknown(f"config of model {path!r} (not a given model directory)", f"hf:{path}")
        key = str(inside)
        if key in interp.hf_configs:
            cfg = interp.hf_configs[key]
        else:
            found = model_checkpoint(inside)
            data = found.config_copy()
            if data is None:
                why = found.config_file.error or "config.json is not a JSON object"
                return Unknown(f"config of model {path!r} not read ({why})")
            cfg = self.make_hf_config(data, str(inside))
            interp.hf_configs[key] = cfg
            self.attach_config_class(interp, cfg, kwargs.get("trust_remote_code", args[1] if len(args) > 1 else False), inside)
        overrides = kwargs.get("model_override_args")
        if isinstance(overrides, dict) and overrides:
            for k, v in overrides.items():
                cfg.attrs[k] = v
        return cfg

    def make_hf_config(self, data: dict[str, Any], origin: str) -> HFConfig:
        attrs: dict[str, Any] = {}
        for k, v in data.items():
            if k in self.subconfig_keys and isinstance(v, dict):
                attrs[k] = self.make_hf_config(v, origin)
            else:
                attrs[k] = v
        cfg = HFConfig(attrs, origin)
        if "torch_dtype" in attrs and "dtype" not in attrs:
            attrs["dtype"] = attrs["torch_dtype"]
        elif "dtype" in attrs and "torch_dtype" not in attrs:
            attrs["torch_dtype"] = attrs["dtype"]
        attrs.setdefault("_name_or_path", origin)
        attrs.setdefault("name_or_path", origin)
        return cfg

    def hf_attr(self, interp: Interpreter, cfg: HFConfig, name: str) -> Any:
        if name in cfg.attrs:
            interp.note_read(cfg.events.get(name))
            return cfg.attrs[name]
        if name == "get_text_config":
            return Native("get_text_config", lambda i, a, k: self._text_config(cfg, k))
        if name == "to_dict":
            return Native("to_dict", lambda i, a, k: hf_to_dict(cfg))
        if name == "to_diff_dict":
            return Native("to_diff_dict", lambda i, a, k: hf_to_dict(cfg))
        if name == "update":
            return Native("update", lambda i, a, k: cfg.attrs.update(a[0] if a else k))
        if name == "__dict__":
            return cfg.attrs
        if name == "__class__":
            return External("transformers.PretrainedConfig")
        omitted = class_default(cfg, name, name in self.hf_defaults,
                                lambda other: copy.deepcopy(self.hf_defaults[other]) if other in self.hf_defaults else NO_DEFAULT)
        if omitted is not NO_DEFAULT:
            return omitted
        if name in self.hf_defaults:
            return copy.deepcopy(self.hf_defaults[name])
        for cls in self.release_config_classes(interp, cfg.attrs.get("model_type")):
            # a property of the release's own config class (Qwen3NextConfig.full_attention_layer_ids)
            found, prop = cls.lookup(name)
            if found and isinstance(prop, Property) and prop.fget is not None:
                return interp.call(prop.fget, [cfg], {})
        raise interp.make_raise("AttributeError", f"'{cfg.attrs.get('model_type')}Config' object has no attribute '{name}'")

    def release_config_classes(self, interp: Interpreter, model_type: Any) -> list[Class]:
        """The release's config classes (in the modules evaluated so far) declaring this model_type."""
        if not isinstance(model_type, str):
            return []
        mods = self._config_modules_loaded(interp)
        # ~800 lookups per 0.5.23 resolution: the classes of all config modules are listed
        # again only when a module was added or its globals written (versions only grow, so
        # their sum changes with any write); model_type is read from each class every time
        versions = [getattr(m.globals, "version", None) for m in mods]
        state = (len(mods), sum(cast(list[int], versions))) if None not in versions else None
        kept = self._config_classes_memo
        if state is None or kept is None or kept[0] is not mods or kept[1] != state:
            kept = self._config_classes_memo = (mods, state, [v for mod in mods for v in self._own_classes(mod)])
        return [v for v in kept[2] if v.ns.get("model_type") == model_type]

    def _own_classes(self, mod: ModuleObj) -> list[Class]:
        """The classes among a module's globals that the module defines, in globals order;
        rescanned only when its globals were written since (a module body may still be
        running, a name rebound: ``Namespace.version`` counts every write)."""
        g = mod.globals
        version = getattr(g, "version", None)
        kept = self._own_classes_memo.get(id(mod))
        if kept is not None and kept[0] is mod and version is not None and kept[1] == version:
            return kept[2]
        found = [v for v in g.values() if v.__class__ is Class and v.module is mod]
        self._own_classes_memo[id(mod)] = (mod, version, found)
        return found

    def _config_modules_loaded(self, interp: Interpreter) -> list[ModuleObj]:
        """The config modules among ``interp.modules``, in its order. That dict only grows
        (each name is bound once, on its first import), so the list is extended with the
        entries added since the last call of the same interpreter. This lookup runs ~1,000
        times per 0.5.23 resolution over ~500 modules; whether a name is a config module is
        a pure function of the name, kept too."""
        seen = self._config_scan
        if seen is None or seen[0]() is not interp:
            seen = self._config_scan = (weakref.ref(interp), [0], [])
        count, mods = seen[1], seen[2]
        modules = interp.modules
        if len(modules) != count[0]:
            matches = self._config_module_names
            for mod in list(modules.values())[count[0]:]:
                if not isinstance(mod, ModuleObj):
                    continue
                hit = matches.get(mod.name)
                if hit is None:
                    hit = matches[mod.name] = any(fnmatch.fnmatchcase(mod.name, pat) for pat in self.config_modules)
                if hit:
                    mods.append(mod)
            count[0] = len(modules)
        return mods

    def attach_config_class(self, interp: Interpreter, cfg: HFConfig, trust_remote_code: Any, model_dir: Path) -> None:
        """Find the config class SGLang would read this config.json through (and its nested
        configs'), for the keys it omits (issue #23; hfconfig/configclass.py)."""
        if self.config_classes is None:
            from sglang_audit.hfconfig.configclass import ConfigClasses
            from sglang_audit.source.transformers import (
                TransformersWheel,
                transformers_pin,
                transformers_wheel,
            )

            package = self.analysed_package()

            def wheel() -> Any:
                pin = transformers_pin(package) if package is not None else None
                return TransformersWheel(transformers_wheel(pin), pin) if pin else None

            self.config_classes = ConfigClasses(package, wheel)
        todo = [cfg]
        while todo:
            one = todo.pop()
            one.config_class = self.config_classes.lookup(interp, one.attrs, trust_remote_code, model_dir)
            if getattr(one.config_class, "assumed", False) and one.config_class.reason not in self.assumptions:
                self.assumptions.append(one.config_class.reason)
            todo.extend(v for v in one.attrs.values() if isinstance(v, HFConfig))

    def _text_config(self, cfg: HFConfig, kwargs: dict[str, Any]) -> Any:
        for key in self.text_config_keys:
            sub = cfg.attrs.get(key)
            if isinstance(sub, HFConfig):
                return sub
        return cfg


def transformers_attrs(host: TargetHost) -> dict[str, Any]:
    return {"transformers.AutoConfig.from_pretrained": Native("AutoConfig.from_pretrained", host.load_hf_config)}

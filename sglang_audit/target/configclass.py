"""The defaults of the config class SGLang reads a model's config.json through (issue #23).

SGLang's ``get_config`` builds the config object with the class registered for the model
type: its own (``sglang/srt/configs/``, in ``_CONFIG_REGISTRY``) first, else transformers'
``AutoConfig`` (the class whose ``model_type`` matches; remote code when config.json's
``auto_map`` names it and ``--trust-remote-code`` is on). A key config.json omits then reads
as that class's default. This module finds the class and reads its defaults:

- SGLang's own classes are evaluated by the partial evaluator (the ``__init__`` defaults as
  the module defines them, base classes through the evaluated MRO);
- transformers' classes are read from the source of the version the release requires
  (the wheel in the user cache, never imported): literal field defaults (v5 dataclass
  fields) or ``__init__`` parameter defaults (v4) copied to ``self.X`` unchanged.

An attribute the class computes instead of copying (``self.x = a // b``, any ``self.x = ...``
in ``__post_init__`` or under a branch) reads as ``unknown`` naming that line; a class that
cannot be read makes every omitted attribute ``unknown`` with the reason.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sglang_audit.errors import SourceError
from sglang_audit.evaluate.values import Class, Function, ModuleObj, Unknown

_BASE_NAMES = ("PretrainedConfig", "PreTrainedConfig")
_NOT_LITERAL = object()
_REQUIRED = object()  # a parameter without a default: the class sets no default from it


@dataclass(frozen=True)
class ConfigClass:
    """What a config class sets for an attribute config.json leaves out."""

    where: str  # the class, e.g. "transformers==5.19.0 .../configuration_qwen3_moe.py:38 Qwen3MoeConfig"
    defaults: Mapping[str, Any] = field(default_factory=dict)  # attr -> value, or Unknown naming file:line
    attribute_map: Mapping[str, str] = field(default_factory=dict)  # alias -> attribute
    # attr -> how the class computes it (its __init__/__post_init__ body), evaluated per
    # config.json by ``computed_value``; its entry in ``defaults`` is the unknown to fall back on
    computed: Mapping[str, Computed] = field(default_factory=dict)


@dataclass(frozen=True)
class Computed:
    """The body that computes an attribute: run on config.json's values, statement by
    statement, by a small evaluator of plain data (``computed_value``)."""

    file: str
    func: Any  # ir.FunctionDef: __init__ or __post_init__
    params: Mapping[str, Any]  # parameter -> its default (_NOT_LITERAL when not a literal)
    kwargs: str | None  # the ``**kwargs`` parameter's name
    # __post_init__ of a v5 dataclass: the fields' literal defaults as they are before it runs
    fields: Mapping[str, Any] = field(default_factory=dict)
    # a transformers class read from the wheel (its PreTrainedConfig machinery is not evaluated)
    transformers: bool = False
    # what the base classes set (their defaults, unknown where they compute): the value of
    # ``self.y`` after ``super().__init__(...)`` for a ``y`` the call does not pass
    inherited: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoConfigClass:
    """The class could not be read: every omitted attribute is unknown with this reason, or,
    with ``assumed``, taken as unset (as PretrainedConfig leaves it) and the assumption shown."""

    reason: str
    assumed: bool = False


Found = ConfigClass | NoConfigClass | None  # None: the tree pins no transformers (config.json as is)


class ConfigClasses:
    """Config classes of one release, found once per model type."""

    def __init__(self, package_dir: Path | None, wheel_for: Callable[[], Any]) -> None:
        self.package_dir = package_dir
        self._wheel_for = wheel_for  # () -> TransformersWheel | str (why not) | None (no pin)
        self._wheel: Any = False
        self._memo: dict[tuple[str, str], Found] = {}

    def wheel(self) -> Any:
        if self._wheel is False:
            try:
                self._wheel = self._wheel_for()
            except SourceError as exc:
                self._wheel = exc.message if hasattr(exc, "message") else str(exc)
        return self._wheel

    def lookup(self, interp: Any, data: Mapping[str, Any], trust_remote_code: Any, model_dir: Path | None) -> Found:
        model_type = data.get("model_type")
        if not isinstance(model_type, str):
            return NoConfigClass("config.json names no model_type, so its config class is not known")
        auto_map = data.get("auto_map")
        auto = auto_map.get("AutoConfig") if isinstance(auto_map, dict) else None
        remote = isinstance(auto, str) and trust_remote_code is not False
        memo_key = (model_type, f"{auto}:{model_dir}" if remote else "")
        if memo_key not in self._memo:
            found = self._sglang_class(interp, model_type)
            if found is None and remote:
                found = self._remote_class(interp, str(auto), trust_remote_code, model_dir)
            if found is None:
                found = self._transformers_class(interp, model_type)
            self._memo[memo_key] = found
        return self._memo[memo_key]

    # ---- SGLang's own classes: evaluated ------------------------------------------------
    def _sglang_class(self, interp: Any, model_type: str) -> Found:
        if self.package_dir is None:
            return None
        configs = self.package_dir / "srt" / "configs"
        if not configs.is_dir():
            return None
        needle = (f'"{model_type}"', f"'{model_type}'")
        for path in sorted(configs.rglob("*.py")):
            try:
                if path.is_symlink() or path.stat().st_size > 1 << 20:
                    continue
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "model_type" not in text or not any(n in text for n in needle):
                continue
            try:
                tree = interp.cache.load(path)
            except Exception:  # noqa: BLE001 - a file libcst refuses is not this class
                continue
            for node in tree.body:
                if node.kind == "ClassDef" and _declares(node, model_type):
                    rel = path.relative_to(self.package_dir.parent).with_suffix("")
                    return self._evaluated(interp, ".".join(rel.parts), node, path)
        return None

    def _evaluated(self, interp: Any, module: str, node: Any, path: Path) -> Found:
        mod = interp.load_module(module)
        label = f"{path.relative_to(self.package_dir.parent).as_posix()}:{node.line} {node.name}"  # type: ignore[union-attr]
        cls = interp.module_attr(mod, node.name) if isinstance(mod, ModuleObj) else None
        if not isinstance(cls, Class):
            return NoConfigClass(f"SGLang's config class {label} not evaluated ({getattr(mod, 'failed', None) or 'not a class'})")
        defaults: dict[str, Any] = {}
        amap: dict[str, str] = {}
        computed: dict[str, Computed] = {}
        for klass in reversed(cls.mro()):
            if klass.module is None or not klass.module.file.endswith(".py"):
                continue
            kpath = interp.root / klass.module.file
            try:
                ktree = interp.cache.load(kpath)
            except Exception:  # noqa: BLE001
                return NoConfigClass(f"{klass.module.file}: base class {klass.name} not read")
            knode = next((n for n in ktree.body if n.kind == "ClassDef" and n.name == klass.name and n.line == klass.line), None)
            if knode is None:
                knode = next((n for n in ktree.body if n.kind == "ClassDef" and n.name == klass.name), None)
            if knode is None:
                continue
            init = klass.ns.get("__init__")
            evaluated = dict(init.defaults) if isinstance(init, Function) else {}
            _class_fields(knode, klass.module.file, lambda p, _n, ev=evaluated: ev.get(p.name, _NOT_LITERAL), defaults, amap,
                          computed)
        return ConfigClass(label, defaults, amap, computed)

    # ---- remote code in the model directory -----------------------------------------------
    def _remote_class(self, interp: Any, auto: str, trust: Any, model_dir: Path | None) -> Found:
        if trust is not True:
            return NoConfigClass(f"config.json's auto_map names remote code ({auto}) and trust_remote_code is not known")
        module, _, name = auto.rpartition(".")
        path = (model_dir / f"{module}.py") if model_dir is not None and module and "/" not in module and "--" not in module else None
        if path is None or not path.is_file() or path.is_symlink():
            # Hugging Face hub fetches only config.json for the tool; the class's .py is rarely
            # copied beside it. Every omitted key unknown would leave nothing decided (sub-config
            # probes such as text_config), so it is read as PretrainedConfig, and said.
            return NoConfigClass(f"the remote config class {auto} (auto_map, --trust-remote-code) is not in the model directory: "
                                 f"attributes config.json omits are taken as unset, as PretrainedConfig leaves them "
                                 f"(put {module}.py beside config.json to read its defaults)", assumed=True)
        try:
            tree = interp.cache.load(path)
        except Exception as exc:  # noqa: BLE001
            return NoConfigClass(f"{path.name}: remote config class not read ({getattr(exc, 'message', exc)})")
        node = next((n for n in tree.body if n.kind == "ClassDef" and n.name == name), None)
        if node is None:
            return NoConfigClass(f"{path.name} defines no class {name}")
        return _static_class(node, path.name, tree, lambda _mod, _name: None)

    # ---- transformers' classes: read from the pinned wheel ---------------------------------
    def _transformers_class(self, interp: Any, model_type: str) -> Found:
        wheel = self.wheel()
        if wheel is None:
            return None
        if isinstance(wheel, str):
            return NoConfigClass(f"transformers' config class for {model_type!r} not read ({wheel})")
        label = f"transformers=={wheel.version}"
        hits: list[tuple[str, Any, Any]] = []
        for name in wheel.files_declaring(model_type):
            text = wheel.read(name)
            try:
                tree = interp.cache.load_text(text) if text is not None else None
            except Exception:  # noqa: BLE001 - a member libcst refuses is not read
                tree = None
            for node in getattr(tree, "body", []):
                if node.kind == "ClassDef" and _declares(node, model_type):
                    hits.append((name, node, tree))
        if not hits:
            # transformers itself would refuse the model type (0.5.5 and Qwen3.5): what SGLang
            # does then is not this module's question; config.json is read as it is, as before
            return None
        if len({(h[0], h[1].name) for h in hits}) > 1:
            return NoConfigClass(f"{label} has several config classes for model_type {model_type!r}")
        name, node, tree = hits[0]

        def base_source(module: str | None, cls_name: str) -> tuple[Any, str] | None:
            # `from ..llama.configuration_llama import LlamaConfig` inside models/<m>/
            if module is None:
                return tree, name
            parts = name.split("/")[:-1]
            dots = len(module) - len(module.lstrip("."))
            if dots < 1 or dots > len(parts):
                return None
            target = "/".join(parts[: len(parts) - dots + 1] + module.lstrip(".").split(".")) + ".py"
            btext = wheel.read(target)
            if btext is None:
                return None
            try:
                return interp.cache.load_text(btext), target
            except Exception:  # noqa: BLE001
                return None

        found = _static_class(node, f"{label} {name}", tree, base_source)
        if isinstance(found, ConfigClass):
            found = ConfigClass(found.where, found.defaults, found.attribute_map,
                                {k: replace(c, transformers=True) for k, c in found.computed.items()})
        return found


def _declares(node: Any, model_type: str) -> bool:
    for stmt in node.body:
        if stmt.kind in ("Assign", "AnnAssign"):
            targets = stmt.targets if stmt.kind == "Assign" else [stmt.target]
            if any(t.kind == "Name" and t.id == "model_type" for t in targets):
                value = stmt.value
                if value is not None and value.kind == "Const" and value.value == model_type:
                    return True
    return False


def _static_class(node: Any, file: str, tree: Any, base_source: Callable[[str | None, str], Any], depth: int = 0) -> Found:
    """A class read without evaluation: its bases' fields (same file or imported), then its own."""
    defaults: dict[str, Any] = {}
    amap: dict[str, str] = {}
    computed: dict[str, Computed] = {}
    for base in node.bases:
        bname = base.id if base.kind == "Name" else base.attr if base.kind == "Attribute" else None
        if bname in _BASE_NAMES:
            continue
        if bname is None or depth > 8:
            return NoConfigClass(f"{file}:{node.line} {node.name}: base class not read")
        found = _base_class(bname, tree, base_source, depth)
        if not isinstance(found, ConfigClass):
            return found if isinstance(found, NoConfigClass) else NoConfigClass(f"{file}:{node.line} {node.name}: base class {bname} not read")
        defaults.update(found.defaults)
        amap.update(found.attribute_map)
        computed.update(found.computed)
    _class_fields(node, file, lambda p, n: _literal(p.default) if p.default is not None else _NOT_LITERAL, defaults, amap,
                  computed)
    return ConfigClass(f"{file}:{node.line} {node.name}", defaults, amap, computed)


def _base_class(bname: str, tree: Any, base_source: Callable[[str | None, str], Any], depth: int) -> Found:
    for stmt in tree.body:
        if stmt.kind == "ClassDef" and stmt.name == bname:
            src = base_source(None, bname)
            return _static_class(stmt, src[1], tree, base_source, depth + 1) if src else None
        if stmt.kind == "ImportFrom" and isinstance(stmt.names, list) and any((a or n) == bname for n, a in stmt.names):
            real = next(n for n, a in stmt.names if (a or n) == bname)
            module = "." * stmt.level + (stmt.module or "")
            src = base_source(module, real)
            if src is None:
                return None
            btree, bfile = src
            bnode = next((n for n in btree.body if n.kind == "ClassDef" and n.name == real), None)
            return _static_class(bnode, bfile, btree, base_source, depth + 1) if bnode is not None else None
    return None


def _class_fields(node: Any, file: str, param_default: Callable[[Any, Any], Any], defaults: dict[str, Any], amap: dict[str, str],
                  computed: dict[str, Computed] | None = None) -> None:
    """Fill ``defaults``/``amap`` with what class ``node`` sets (overriding its bases'), and
    ``computed`` with the body of each attribute the class computes."""
    recipes: dict[str, Computed] = {} if computed is None else computed
    inherited = dict(defaults)  # the bases' (this class's own fields are not set by super())
    for stmt in node.body:
        if stmt.kind == "AnnAssign" and stmt.target.kind == "Name" and stmt.value is not None:
            value = _literal(stmt.value)  # a v5 dataclass field
            defaults[stmt.target.id] = value if value is not _NOT_LITERAL else _unknown(file, stmt, stmt.target.id, "default not a literal")
            recipes.pop(stmt.target.id, None)
        elif stmt.kind == "Assign" and len(stmt.targets) == 1 and stmt.targets[0].kind == "Name" and stmt.targets[0].id == "attribute_map":
            value = _literal(stmt.value)
            if isinstance(value, dict):
                amap.update({k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)})
    for stmt in node.body:
        if stmt.kind == "FunctionDef" and stmt.name in ("__init__", "__post_init__"):
            params = {p.name: param_default(p, stmt) if p.default is not None else _NOT_LITERAL
                      for p in stmt.params[1:] if p.star in ("", "kwonly")}
            star = next((p.name for p in stmt.params if p.star == "**"), None)
            recipe = Computed(file, stmt, params, star, inherited=inherited)
        if stmt.kind == "FunctionDef" and stmt.name == "__init__":
            before = dict(defaults)
            _init_fields(stmt, file, param_default, defaults)
            for attr, value in defaults.items():
                if isinstance(value, Unknown) and value is not before.get(attr):
                    recipes[attr] = recipe
                elif value is not before.get(attr):
                    recipes.pop(attr, None)
        elif stmt.kind == "FunctionDef" and stmt.name == "__post_init__":
            selfname = stmt.params[0].name if stmt.params else "self"
            recipe = Computed(file, stmt, {}, recipe.kwargs,
                              {k: v for k, v in defaults.items() if not isinstance(v, Unknown)}, inherited)
            for inner in _walk(stmt.body):
                for attr in _self_targets(inner, selfname):
                    defaults[attr] = _unknown(file, inner, attr, "set in __post_init__")
                    recipes[attr] = recipe


def _init_fields(init: Any, file: str, param_default: Callable[[Any, Any], Any], defaults: dict[str, Any]) -> None:
    params = {p.name: p for p in init.params[1:] if p.star in ("", "kwonly")}
    selfname = init.params[0].name if init.params else "self"

    def from_param(value: Any, stmt: Any, attr: str) -> Any:
        if value is not None and value.kind == "Name" and value.id in params:
            p = params[value.id]
            if p.default is None:
                return _REQUIRED  # a required argument: not a default
            got = param_default(p, init)
            return got if got is not _NOT_LITERAL else _unknown(file, p, attr, "default not a literal")
        got = _simple(value, params, lambda p: param_default(p, init)) if value is not None else _NOT_LITERAL
        return got if got is not _NOT_LITERAL else _unknown(file, stmt, attr, "computed")

    for stmt in init.body:
        # super().__init__(tie_word_embeddings=tie_word_embeddings, ...): PretrainedConfig sets them
        call = stmt.value if stmt.kind == "ExprStmt" else None
        if call is not None and call.kind == "Call" and call.func.kind == "Attribute" and call.func.attr == "__init__":
            for kind, arg in call.args:
                if kind not in ("", "*", "**"):
                    got = from_param(arg, stmt, kind)
                    if got is not _REQUIRED:
                        defaults[kind] = got
    for stmt in _walk(init.body):
        for attr in _self_targets(stmt, selfname):
            top = stmt in init.body and stmt.kind == "Assign" and len(stmt.targets) == 1
            got = from_param(stmt.value, stmt, attr) if top else _unknown(file, stmt, attr, "set under a condition")
            if got is _REQUIRED:
                defaults.pop(attr, None)
            else:
                defaults[attr] = got


def _walk(body: list[Any]) -> list[Any]:
    out: list[Any] = []
    for stmt in body:
        out.append(stmt)
        for name in ("body", "orelse", "finalbody"):
            sub = getattr(stmt, name, None) if stmt.kind in ("If", "For", "While", "Try", "With") else None
            if isinstance(sub, list):
                out.extend(_walk(sub))
        if stmt.kind == "Try":
            for handler in stmt.handlers:
                out.extend(_walk(handler.body))
    return out


def _self_targets(stmt: Any, selfname: str) -> list[str]:
    if stmt.kind == "Assign":
        targets = stmt.targets
    elif stmt.kind in ("AnnAssign", "AugAssign"):
        targets = [stmt.target]
    else:
        return []
    return [t.attr for t in targets if t.kind == "Attribute" and t.value.kind == "Name" and t.value.id == selfname]


def _unknown(file: str, node: Any, attr: str, why: str) -> Unknown:
    text = (getattr(node, "text", None) or "").strip().splitlines()
    shown = f" ({text[0][:80]})" if text else ""
    return Unknown(f"config.json omits {attr!r}; its config class {why} at {file}:{node.line}{shown}", f"hfdefault:{file}:{attr}")


def _simple(node: Any, params: Mapping[str, Any], default_of: Callable[[Any], Any]) -> Any:
    """A literal, a parameter's default, or ``A if p is None else B`` over those (the
    common ``self.x = [] if x is None else x``); anything else is not evaluated here."""
    if node.kind == "Name" and node.id in params:
        p = params[node.id]
        return default_of(p) if p.default is not None else _NOT_LITERAL
    if node.kind == "IfExp":
        test = node.test
        if (test.kind == "Compare" and len(test.ops) == 1 and test.ops[0] in ("is", "is not")
                and _literal(test.comparators[0]) is None and test.comparators[0].kind in ("Const", "Name")):
            left = _simple(test.left, params, default_of)
            if left is _NOT_LITERAL:
                return _NOT_LITERAL
            truth = (left is None) == (test.ops[0] == "is")
            return _simple(node.body if truth else node.orelse, params, default_of)
        return _NOT_LITERAL
    return _literal(node)


def _literal(node: Any) -> Any:
    """A literal default (numbers, strings, None/True/False, lists/tuples/dicts of them)."""
    if node is None:
        return _NOT_LITERAL
    kind = node.kind
    if kind == "Const":
        return node.value
    if kind == "Name" and node.id in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.id]
    if kind == "UnaryOp" and node.op in ("-", "USub") and node.operand.kind == "Const" and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    if kind in ("ListExpr", "TupleExpr"):
        items = [_literal(e) for e in node.elts]
        if any(i is _NOT_LITERAL for i in items):
            return _NOT_LITERAL
        return items if kind == "ListExpr" else tuple(items)
    if kind == "DictExpr":
        out = {}
        for k, v in node.items:
            kv, vv = _literal(k), _literal(v)
            if k is None or kv is _NOT_LITERAL or vv is _NOT_LITERAL:
                return _NOT_LITERAL
            out[kv] = vv
        return out
    return _NOT_LITERAL


# ---- computed attributes: the class's body run on config.json's values ---------------------

_MAX_STATEMENTS = 400  # a config __init__ is straight-line code; more is not evaluated
_BIN_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "/": lambda a, b: a / b, "%": lambda a, b: a % b,
}
_CMP_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "is": lambda a, b: a is b, "is not": lambda a, b: a is not b, "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}
# calls whose only effect is a check or a log line (they set no attribute): skipped
_SKIPPED_CALLS = ("logger.", "warnings.warn", "rope_config_validation", "self._rope_scaling_validation",
                  "super().__init__", "super().__post_init__")
_PLAIN = (int, float, str, bool, type(None), list, tuple, dict)
_ROPE_NAMES = ("rope_scaling", "rope_parameters")


class _Stop(Exception):
    def __init__(self, node: Any, why: str) -> None:
        super().__init__(why)
        self.node, self.why = node, why


def computed_value(found: ConfigClass, name: str, given: Mapping[str, Any], attr_of: Callable[[str], Any]) -> Any:
    """``name`` as the config class computes it for this config.json (``given``): its
    __init__/__post_init__ run statement by statement on plain data, ``self.Y`` read
    through ``attr_of``; the unknown in ``found.defaults`` (naming the class's line) with
    where evaluation stopped when a step is not plain data (a call, a loop, an unknown)."""
    recipe = found.computed.get(name)
    fallback = found.defaults.get(name)
    if recipe is None:
        return fallback
    if recipe.transformers and name in _ROPE_NAMES and any(k in given for k in _ROPE_NAMES):
        # transformers 5's PreTrainedConfig renames config.json's rope_scaling to
        # rope_parameters itself (configuration_utils.py convert_rope_params_to_dict, the
        # rope_scaling property): that base machinery is not evaluated here
        return Unknown(f"{fallback.reason if isinstance(fallback, Unknown) else name}; config.json gives "
                       f"{'/'.join(k for k in _ROPE_NAMES if k in given)}, which transformers' PreTrainedConfig "
                       "converts (not evaluated)", fallback.key if isinstance(fallback, Unknown) else None)
    func = recipe.func
    selfname = func.params[0].name if func.params else "self"
    env: dict[str, Any] = {}
    for pname, default in recipe.params.items():
        env[pname] = given[pname] if pname in given and func.name == "__init__" else default
    if recipe.kwargs:
        named = set(recipe.params)
        env[recipe.kwargs] = {k: v for k, v in given.items() if k not in named}
    state: dict[str, Any] = {}
    count = [0]

    def ev(node: Any) -> Any:
        kind = node.kind
        if kind == "Const":
            return node.value
        if kind == "Name":
            if node.id in ("None", "True", "False"):
                return {"None": None, "True": True, "False": False}[node.id]
            value = env.get(node.id, _NOT_LITERAL)
            if value is _NOT_LITERAL:
                raise _Stop(node, f"{node.id} is not a literal")
            if isinstance(value, Unknown):
                raise _Stop(node, f"{node.id}: {value.reason}")
            return value
        if kind == "Attribute" and node.value.kind == "Name" and node.value.id == selfname:
            if node.attr in state:
                value = state[node.attr]
            elif node.attr not in given and node.attr in recipe.fields:
                value = copy.deepcopy(recipe.fields[node.attr])
            elif node.attr not in given and node.attr in recipe.inherited:
                value = recipe.inherited[node.attr]  # set by the base class (unknown if it computes it)
            else:
                value = attr_of(node.attr)
            if isinstance(value, Unknown):
                raise _Stop(node, f"self.{node.attr}: {value.reason}")
            return value
        if kind in ("ListExpr", "TupleExpr"):
            items = [ev(e) for e in node.elts]
            return items if kind == "ListExpr" else tuple(items)
        if kind == "DictExpr" and all(k is not None for k, _ in node.items):
            out = {}
            for k, v in node.items:
                key = _plain(ev(k), node)
                if isinstance(key, (list, dict)):
                    raise _Stop(node, "unhashable key")
                out[key] = ev(v)
            return out
        if kind == "BinOp" and node.op in _BIN_OPS:
            left, right = _plain(ev(node.left), node), _plain(ev(node.right), node)
            if isinstance(left, int) and isinstance(right, int) and max(abs(left), abs(right)) > 1 << 64:
                raise _Stop(node, "integer too large")
            try:
                return _BIN_OPS[node.op](left, right)
            except (ArithmeticError, TypeError, ValueError) as exc:
                raise _Stop(node, f"{type(exc).__name__}: {exc}") from None
        if kind == "UnaryOp" and node.op in ("not", "-", "USub", "Not"):
            value = _plain(ev(node.operand), node)
            return (not value) if node.op in ("not", "Not") else -value
        if kind == "BoolOp":
            value: Any = None
            for part in node.values:
                value = _plain(ev(part), node)
                if bool(value) == (node.op == "or"):
                    return value
            return value
        if kind == "Compare":
            left = _plain(ev(node.left), node)
            for op, comp in zip(node.ops, node.comparators, strict=True):
                right = _plain(ev(comp), node)
                if op not in _CMP_OPS:
                    raise _Stop(node, f"operator {op}")
                try:
                    if not _CMP_OPS[op](left, right):
                        return False
                except TypeError as exc:
                    raise _Stop(node, f"TypeError: {exc}") from None
                left = right
            return True
        if kind == "IfExp":
            return ev(node.body) if _plain(ev(node.test), node) else ev(node.orelse)
        if kind == "Call" and node.func.kind == "Attribute" and node.func.value.kind == "Name" \
                and node.func.value.id == recipe.kwargs and node.func.attr in ("pop", "get"):
            args = [ev(a) for k, a in node.args if k == ""]
            if not args or len(args) > 2 or any(k != "" for k, _ in node.args):
                raise _Stop(node, "kwargs call not evaluated")
            bag = env[recipe.kwargs]
            default = args[1] if len(args) > 1 else None
            return bag.pop(args[0], default) if node.func.attr == "pop" else bag.get(args[0], default)
        raise _Stop(node, f"{kind} not evaluated")

    def run(body: list[Any]) -> None:
        for stmt in body:
            count[0] += 1
            if count[0] > _MAX_STATEMENTS:
                raise _Stop(stmt, "too many statements")
            kind = stmt.kind
            if kind == "Assign" and len(stmt.targets) == 1:
                target = stmt.targets[0]
                try:
                    value = ev(stmt.value)
                except _Stop as stop:
                    # a value not evaluated taints its target only (a read of it stops)
                    if not (target.kind == "Name" or (target.kind == "Attribute" and target.value.kind == "Name"
                                                      and target.value.id == selfname)):
                        raise
                    value = Unknown(f"not evaluated past {recipe.file}:{getattr(stop.node, 'line', stmt.line)} ({stop.why})")
                if target.kind == "Attribute" and target.value.kind == "Name" and target.value.id == selfname:
                    state[target.attr] = value
                elif target.kind == "Name":
                    env[target.id] = value
                elif (target.kind == "Subscript" and target.value.kind == "Name" and target.value.id == recipe.kwargs
                      and target.index.kind == "Const"):
                    env[recipe.kwargs][target.index.value] = value
                else:
                    raise _Stop(stmt, "assignment target not evaluated")
            elif kind == "If":
                run(stmt.body if _plain(ev(stmt.test), stmt) else stmt.orelse)
            elif kind == "ExprStmt" and stmt.value.kind == "Const":
                continue  # a docstring
            elif kind == "ExprStmt" and stmt.value.kind == "Call" and _dotted(stmt.value.func) in ("super().__init__", "super().__post_init__"):
                # the base classes copy what they are passed (a base that computes an attribute
                # has an unknown in ``inherited``, which stays unknown here)
                for key, arg in stmt.value.args:
                    if key == "**":
                        bag = ev(arg)
                        if not isinstance(bag, dict):
                            raise _Stop(stmt, "super() call with an unknown **mapping")
                        passed = dict(bag)
                    elif key in ("", "*"):
                        raise _Stop(stmt, "super() call with positional arguments")
                    else:
                        passed = {key: ev(arg)}
                    for attr, value in passed.items():
                        base = recipe.inherited.get(attr)
                        state[attr] = base if isinstance(base, Unknown) else value
            elif kind == "ExprStmt" and stmt.value.kind == "Call" and _dotted(stmt.value.func).startswith(_SKIPPED_CALLS):
                continue
            elif kind == "ExprStmt" and stmt.value.kind == "Call" and stmt.value.func.kind == "Attribute" \
                    and stmt.value.func.attr == "pop" and stmt.value.func.value.kind == "Name" \
                    and stmt.value.func.value.id == recipe.kwargs:
                ev(stmt.value)
            elif kind == "Pass":
                continue
            else:
                raise _Stop(stmt, f"{kind} statement not evaluated")

    try:
        run(func.body)
    except _Stop as stop:
        where = f"{recipe.file}:{getattr(stop.node, 'line', func.line)}"
        reason = fallback.reason if isinstance(fallback, Unknown) else f"config.json omits {name!r}"
        return Unknown(f"{reason}; not evaluated past {where} ({stop.why})", fallback.key if isinstance(fallback, Unknown) else None)
    except RecursionError:
        return fallback
    if name not in state:
        # the body did not set it on this config.json (a branch not taken): not an attribute
        # of this class here; the caller goes on as for any missing attribute
        return _NOT_SET
    value = state[name]
    if isinstance(value, Unknown):
        reason = fallback.reason if isinstance(fallback, Unknown) else f"config.json omits {name!r}"
        return Unknown(f"{reason}; {value.reason}", fallback.key if isinstance(fallback, Unknown) else None)
    return copy.deepcopy(value) if isinstance(value, _PLAIN) else value


_NOT_SET = object()


def _dotted(node: Any) -> str:
    """``logger.warning``, ``super().__init__``: a callee as written (enough to match a prefix)."""
    if node.kind == "Name":
        return node.id
    if node.kind == "Attribute":
        return f"{_dotted(node.value)}.{node.attr}"
    if node.kind == "Call":
        return f"{_dotted(node.func)}()"
    return "?"


def _plain(value: Any, node: Any) -> Any:
    if not isinstance(value, _PLAIN):
        raise _Stop(node, f"{type(value).__name__} is not plain data")
    return value


__all__ = ["Computed", "ConfigClass", "ConfigClasses", "NoConfigClass", "computed_value"]

"""SGLang's ``--config FILE``: YAML server arguments merged into argv as the release does.

The release's own ``ConfigArgumentMerger`` (``server_args_config_parser.py``) is run by
the evaluator: its ``__init__`` on a stand-in argparse parser whose ``_actions`` are the
release's recorded flags (instances of classes named like argparse's, so the release's
``isinstance(action, argparse._StoreTrueAction)`` tests hold), then its
``merge_config_with_args(argv)``.  Only reading the file is done here (the release's
``yaml.safe_load``, its suffix/existence checks and its empty-file rule), since the
evaluator opens no files.  The merged argv (config arguments first, so command-line
flags win) is then parsed like any launch command.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sglang_audit.errors import InputError
from sglang_audit.evaluate.interpreter import Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.values import AnalysisBound, Class, Function, Instance, ModuleObj, Native
from sglang_audit.frontend import ir
from sglang_audit.inputs.flags import FlagTable, OptionSpec
from sglang_audit.userfiles import UserFileError, read_user_file, safe_yaml_load

MERGER_MODULES = ("sglang.srt.utils.server_args_config_parser", "sglang.srt.server_args_config_parser")

_ACTION_CLASS = {"store_true": "_StoreTrueAction", "store_false": "_StoreFalseAction", "store": "_StoreAction",
                 "append": "_AppendAction", "store_const": "_StoreConstAction", "count": "_CountAction"}


def merge_config(interp: Interpreter, table: FlagTable, argv: list[str], release: str) -> list[str]:
    """``argv`` with its ``--config FILE`` replaced by the file's arguments, or unchanged."""
    if "--config" not in argv:
        return argv
    if "--config" not in table.by_flag:
        raise InputError(f"{release} has no --config option (YAML server arguments arrived in SGLang 0.5.3)")
    mod = next((interp.load_module(m) for m in MERGER_MODULES if interp.find_module_file(m) is not None), None)
    if not isinstance(mod, ModuleObj) or mod.failed or not isinstance(mod.globals.get("ConfigArgumentMerger"), Class):
        raise InputError(f"{release}: --config is accepted but its ConfigArgumentMerger was not found; the merge is not modelled")
    cls = mod.globals["ConfigArgumentMerger"]
    server_args = interp.load_module("sglang.srt.server_args")
    text = _read(interp, server_args)
    try:
        if "ConfigArgumentMerger(parser)" in text:
            merger = interp.call(cls, [_stand_in_parser(table)], {})
        elif "ConfigArgumentMerger(boolean_actions=boolean_actions)" in text and 'hasattr(action, "action")' in text:
            # the release builds boolean_actions from `action.action`, an attribute argparse
            # actions do not have: the list is always empty there, so it is here
            merger = interp.call(cls, [], {"boolean_actions": []})
        else:
            raise InputError(f"{release}: how prepare_server_args builds its ConfigArgumentMerger is not modelled")
        if not isinstance(merger, Instance):
            raise InputError(f"{release}: ConfigArgumentMerger(...) could not be evaluated")
        merger.attrs["_parse_yaml_config"] = Native("_parse_yaml_config", lambda i, a, k: _load(i, merger, cls, a[0], release))
        merged = interp.call(interp.getattr(merger, "merge_config_with_args"), [list(argv)], {})
        if interp.new_decisions:
            # the merge branched on something the tool does not know: no guess
            d = interp.new_decisions[0]
            raise InputError(f"{release}: --config merge depends on {d.reason} ({d.file}:{d.line}); not analysable")
    except PyRaise as raised:
        raise InputError(f"{release} refuses --config: {_message(interp, raised)} ({raised.file}:{raised.line})") from None
    except (Unmodelled, AnalysisBound) as exc:
        raise InputError(f"{release}: --config merge not analysable: {exc}") from None
    if not isinstance(merged, list) or not all(isinstance(w, str) for w in merged):
        raise InputError(f"{release}: --config merge gave no argument list ({merged!r:.80})")
    return merged


def _load(interp: Interpreter, merger: Instance, cls: Class, path: Any, release: str) -> Any:
    """The release's ``_parse_yaml_config`` minus the file I/O the evaluator does not do."""
    if not isinstance(path, str):
        raise InputError(f"{release}: --config path is not known ({path!r})")
    p = Path(path).expanduser()
    # _validate_yaml_file, as written in every release that has it
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise InputError(f"{release} refuses --config: Config file must be YAML format, got: {p.suffix} (ConfigArgumentMerger._validate_yaml_file)")
    if not p.exists():
        raise InputError(f"{release} refuses --config: Config file not found: {path} (ConfigArgumentMerger._validate_yaml_file)")
    try:
        # a user file: regular, size-capped, aliases bounded (a FIFO blocked here and a 1 kB
        # "billion laughs" document expanded without limit before)
        data = safe_yaml_load(read_user_file(p, "--config file").decode("utf-8"))
    except UserFileError as exc:
        raise InputError(f"{release}: {exc.message}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{release}: cannot read --config {path}: {' '.join(str(exc).split())}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{release} refuses --config: Config file must contain a dictionary at root level (ConfigArgumentMerger._parse_yaml_config)")
    data = _plain(data, path)
    found, original = cls.lookup("_parse_yaml_config")
    if found and isinstance(original, Function) and _mentions(original.body, "_convert_config_to_args"):
        # older releases convert inside _parse_yaml_config (the caller then merges args)
        return interp.call(interp.getattr(merger, "_convert_config_to_args"), [data], {})
    return data


def _plain(value: Any, path: str) -> Any:
    """YAML data as plain values the evaluator handles (dates etc. refused)."""
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _plain(v, path) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, path) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    raise InputError(f"--config {path}: unsupported YAML value {value!r:.60} ({type(value).__name__})")


def _stand_in_parser(table: FlagTable) -> Instance:
    """An object shaped like argparse.ArgumentParser for the merger's ``_actions`` walk."""
    classes: dict[str, Class] = {}

    def action_class(name: str) -> Class:
        if name not in classes:
            classes[name] = Class(name, (), {}, None, external_bases=(f"argparse.{name}", "argparse.Action"))
        return classes[name]

    actions: list[Instance] = []
    help_action = Instance(action_class("_HelpAction"))
    help_action.attrs.update(option_strings=["-h", "--help"], dest="help", nargs=0)
    actions.append(help_action)
    seen: set[int] = set()
    for spec in table.by_flag.values():
        if id(spec) in seen:
            continue
        seen.add(id(spec))
        actions.append(_action(spec, action_class))
    parser = Instance(Class("ArgumentParser", (), {}, None, external_bases=("argparse.ArgumentParser",)))
    parser.attrs["_actions"] = actions
    return parser


def _action(spec: OptionSpec, action_class: Any) -> Instance:
    if spec.action == "other" and isinstance(spec.action_class, Class):
        inst = Instance(spec.action_class)  # the release's own Action subclass
    elif spec.action == "boolean_optional":
        inst = Instance(action_class("BooleanOptionalAction"))
    else:
        inst = Instance(action_class(_ACTION_CLASS.get(spec.action, "Action")))
    nargs = spec.nargs  # custom actions: their __init__'s default (cliargs.custom_action_nargs)
    if spec.action in ("store_true", "store_false", "store_const", "count", "boolean_optional"):
        nargs = 0
    inst.attrs.update(option_strings=list(spec.flags), dest=spec.dest, nargs=nargs)
    return inst


def _mentions(body: Any, name: str, depth: int = 0) -> bool:
    if depth > 60:
        return False
    if isinstance(body, str):
        return body == name
    if isinstance(body, (list, tuple)):
        return any(_mentions(b, name, depth + 1) for b in body)
    if isinstance(body, ir.Node):
        return any(_mentions(getattr(body, s, None), name, depth + 1) for s in body._all_slots())
    return False


def _read(interp: Interpreter, mod: Any) -> str:
    if not isinstance(mod, ModuleObj):
        return ""
    try:
        return (interp.root / mod.file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _message(interp: Interpreter, raised: PyRaise) -> str:
    exc = raised.exc
    args = exc.attrs.get("args", ()) if isinstance(exc, Instance) else ()
    text = ", ".join(interp.to_str(a) for a in args) if isinstance(args, tuple) else str(args)
    return re.sub(r"\s+", " ", text) or (exc.cls.name if isinstance(exc, Instance) else "error")

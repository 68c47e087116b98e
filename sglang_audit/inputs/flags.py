"""The release's own command-line flags: `--moe-runner-backend` → field, type, choices.

Found by evaluating ``ServerArgs.add_cli_args(parser)`` with a recording parser, so a
pasted launch command and ``--set`` mean what they mean to that release.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from sglang_audit.errors import InputError
from sglang_audit.evaluate.interpreter import Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.overlays.classes import dataclass_default, dataclass_fields
from sglang_audit.evaluate.overlays.typeforms import annotations_of
from sglang_audit.evaluate.values import (
    AnalysisBound,
    Class,
    External,
    Instance,
    Native,
    TypeForm,
    Unknown,
)


@dataclass(frozen=True)
class OptionSpec:
    flags: tuple[str, ...]
    dest: str
    action: str  # "store" | "store_true" | "store_false" | "append" | "other"
    type_name: str  # "str" | "int" | "float" | "json" | "other"
    choices: tuple[str, ...] | None
    nargs: Any = None
    # a custom argparse Action: the release's class (values.Class) or argparse's (External)
    action_class: Any = None
    # add_argument's other keywords (for a custom action: what its __init__ receives)
    action_kwargs: tuple[tuple[str, Any], ...] = ()


class RecordingParser:
    """Stands in for argparse.ArgumentParser inside the evaluator."""

    def __init__(self) -> None:
        self.options: list[OptionSpec] = []

    def native_attr(self, interp: Interpreter, name: str) -> Any:
        if name == "add_argument":
            return Native("add_argument", self._add_argument)
        if name in ("add_argument_group", "add_mutually_exclusive_group", "add_subparsers", "add_parser"):
            return Native(name, lambda i, a, k: self)
        return Native(name, lambda i, a, k: None)

    def _add_argument(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        flags = tuple(a for a in args if isinstance(a, str))
        if not flags:
            return None
        long = next((f for f in flags if f.startswith("--")), flags[0])
        dest = kwargs.get("dest")
        if not isinstance(dest, str):
            dest = long.lstrip("-").replace("-", "_")
        action = kwargs.get("action", "store")
        action_class = None
        if isinstance(action, External) and action.path.rsplit(".", 1)[-1] == "BooleanOptionalAction":
            # argparse adds the --no- spelling; both take no value
            action, action_class = "boolean_optional", action
            flags = flags + tuple("--no-" + f[2:] for f in flags if f.startswith("--"))
        elif not isinstance(action, str):
            action, action_class = "other", action
        typ = kwargs.get("type")
        type_name = "none"  # argparse's default (str), but a generated CLI may convert later
        if isinstance(typ, Native) and typ.name in ("int", "float", "str"):
            type_name = typ.name
        elif isinstance(typ, Native) and typ.name == "json.loads":
            type_name = "json"
        elif typ is not None:
            type_name = "other"
        choices = kwargs.get("choices")
        if isinstance(choices, (list, tuple, set, frozenset)) and all(isinstance(c, str) for c in choices):
            choice_t: tuple[str, ...] | None = tuple(choices)
        else:
            choice_t = None
        nargs = kwargs.get("nargs")
        if action == "other" and "nargs" not in kwargs:
            nargs = custom_action_nargs(action_class)
        extra = tuple((k, v) for k, v in kwargs.items() if k not in ("action", "help", "type", "choices", "dest")) \
            if action == "other" else ()
        self.options.append(OptionSpec(flags, dest, action, type_name, choice_t, nargs, action_class, extra))
        return None


def custom_action_nargs(action_class: Any) -> Any:
    """The nargs a custom Action class gives itself when add_argument passes none: its
    ``__init__``'s ``nargs=`` default (e.g. SGLang's Deprecated*Action: 0), else argparse's
    None; Unknown when the class is not the release's own."""
    if isinstance(action_class, Class):
        found, init = action_class.lookup("__init__")
        params = getattr(init, "params", None) if found else None
        if params is None:
            return None  # argparse.Action.__init__: nargs=None
        for p in params:
            if getattr(p, "name", None) == "nargs":
                defaults = getattr(init, "defaults", {})
                value = defaults.get("nargs", None)
                return value if isinstance(value, (int, str, type(None))) else Unknown("nargs of a custom action")
        return None
    return Unknown(f"nargs of the argparse action {action_class!r}")


@dataclass
class FlagTable:
    by_flag: dict[str, OptionSpec]
    by_dest: dict[str, OptionSpec]
    fields: dict[str, Any]  # dataclass field -> default value
    field_types: dict[str, str] = field(default_factory=dict)  # field -> int|float|bool|str (annotation)


def extract_flags(interp: Interpreter, server_args_cls: Class) -> FlagTable:
    parser = RecordingParser()
    found, add = server_args_cls.lookup("add_cli_args")
    if found:
        try:
            interp.call(interp.getattr(server_args_cls, "add_cli_args"), [parser], {})
        except (PyRaise, Unmodelled, AnalysisBound):
            pass  # whatever was recorded before the stop is still usable
    fields: dict[str, Any] = {}
    for name, _line, _owner in dataclass_fields(server_args_cls):
        try:
            ok, default = dataclass_default(interp, server_args_cls, name)
        except (PyRaise, Unmodelled):
            ok, default = False, None
        fields[name] = default if ok else None
    options = []
    for o in parser.options:
        if o.dest not in fields:
            # e.g. --tensor-parallel-size/--tp-size: from_cli_args maps the argparse dest
            # onto the field another spelling names
            alias = next((f.lstrip("-").replace("-", "_") for f in o.flags if f.lstrip("-").replace("-", "_") in fields), None)
            if alias is not None:
                o = OptionSpec(o.flags, alias, o.action, o.type_name, o.choices, o.nargs, o.action_class, o.action_kwargs)
        options.append(o)
    parser.options = options
    by_flag = {f: o for o in parser.options for f in o.flags}
    by_dest = {o.dest: o for o in parser.options}
    return FlagTable(by_flag, by_dest, fields, _field_types(interp, server_args_cls))


def _field_types(interp: Interpreter, cls: Class) -> dict[str, str]:
    """The scalar type each field is annotated with (``Optional[int]`` → int), so a flag
    whose argparse ``type=`` is a helper still gets typed like the release's own CLI."""
    out: dict[str, str] = {}
    for klass in reversed(cls.mro()):
        try:
            annotations = annotations_of(interp, klass)
        except (PyRaise, Unmodelled, AnalysisBound):
            continue
        for name, ann in annotations.items():
            scalar = _scalar(ann)
            if scalar:
                out[name] = scalar
    return out


def _scalar(ann: Any, depth: int = 0) -> str | None:
    if depth > 4:
        return None
    if isinstance(ann, Native) and ann.name in ("int", "float", "bool", "str"):
        return ann.name
    if isinstance(ann, TypeForm):
        leaf = getattr(ann.origin, "path", getattr(ann.origin, "name", "")).rsplit(".", 1)[-1]
        if leaf in ("Annotated", "Optional", "Union"):
            for arg in ann.args if leaf != "Annotated" else ann.args[:1]:
                found = _scalar(arg, depth + 1)
                if found:
                    return found
    return None


def _convert(spec: OptionSpec | None, default: Any, key: str, text: str, annotated: str | None = None) -> Any:
    if spec is not None and spec.choices is not None and text not in spec.choices:
        close = difflib.get_close_matches(text, list(spec.choices), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"bad value {text!r} for {key}{hint}: choose one of {', '.join(spec.choices)}")
    type_name = spec.type_name if spec is not None else None
    if type_name in (None, "other", "none", "str") and annotated in ("int", "float", "bool"):
        # the field is typed (0.5.14+ records convert the parsed text to the annotation)
        type_name = annotated
    elif type_name == "none":
        type_name = "str" if isinstance(default, str) or default is None else None
    if type_name is None or type_name == "other" or type_name == "str" and not isinstance(default, str) and default is not None:
        if isinstance(default, bool):
            type_name = "bool"
        elif isinstance(default, int):
            type_name = "int"
        elif isinstance(default, float):
            type_name = "float"
        else:
            type_name = "str"
    if spec is not None and spec.action in ("store_true", "store_false"):
        type_name = "bool"
    try:
        if type_name == "bool":
            low = text.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError(text)
        if type_name == "int":
            return int(text)
        if type_name == "float":
            return float(text)
    except ValueError:
        raise InputError(f"bad value {text!r} for {key}: expected {type_name}") from None
    if text in ("None", "none", "null") and default is None and (spec is None or spec.choices is None):
        return None
    return text


def parse_set(table: FlagTable, items: list[str]) -> dict[str, Any]:
    """``--set key=value`` (key as field name or as flag name)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"bad --set {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        key = key.strip()
        dest = key.lstrip("-").replace("-", "_")
        spec = table.by_flag.get("--" + key.lstrip("-")) or table.by_dest.get(dest)
        if spec is not None:
            dest = spec.dest
        if dest not in table.fields:
            close = difflib.get_close_matches(dest, list(table.fields), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise InputError(f"unknown setting {key!r} for this release{hint}")
        out[dest] = _convert(spec, table.fields.get(dest), key, value, table.field_types.get(dest))
    return out


def parse_launch(table: FlagTable, command: str, release: str = "this release") -> tuple[dict[str, Any], str | None]:
    """A pasted launch command → (flags, model path); its environment is ignored here
    (``pipeline.prepare`` reads it through ``launch.split_launch``)."""
    from sglang_audit.inputs.launch import split_launch

    cmd = split_launch(command)
    return parse_argv(table, list(cmd.argv), release, router=cmd.router)


_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _takes_value(word: str) -> bool:
    """argparse: a word starting with '-' is an option, not a value (negative numbers aside)."""
    return not word.startswith("-") or bool(_NEGATIVE.match(word))


def run_custom_action(interp: Interpreter | None, spec: OptionSpec, option: str, values: Any) -> dict[str, Any] | None:
    """What the release's own Action subclass writes on the namespace for ``option``
    (evaluated: its ``__init__`` with add_argument's keywords, then ``__call__``), or
    None when that cannot be known."""
    if interp is None or not isinstance(spec.action_class, Class):
        return None
    try:
        action = interp.call(spec.action_class, [list(spec.flags), spec.dest], dict(spec.action_kwargs))
        if not isinstance(action, Instance):
            return None
        # what argparse.Action.__init__ (outside the release) stores
        action.attrs.setdefault("option_strings", list(spec.flags))
        action.attrs.setdefault("dest", spec.dest)
        for key in ("nargs", "const", "default"):
            action.attrs.setdefault(key, dict(spec.action_kwargs).get(key))
        namespace = Instance(Class("Namespace", (), {}, None))
        before = len(interp.new_decisions)
        interp.call(interp.getattr(action, "__call__"), [None, namespace, values, option], {})
        if len(interp.new_decisions) != before:
            return None  # it branched on something unknown: no guess
    except (PyRaise, Unmodelled, AnalysisBound, RecursionError):
        return None
    out = dict(namespace.attrs)
    if any(isinstance(v, Unknown) or not isinstance(k, str) for k, v in out.items()):
        return None
    return out


def parse_argv(table: FlagTable, words: list[str], release: str = "this release",
               router: bool = False, interp: Interpreter | None = None) -> tuple[dict[str, Any], str | None]:
    """The server's argv as the release's argparse parser reads it → (flags, model path).

    Later flags win, as in argparse; a value never starts with ``-`` (argparse's rule);
    ``--router-*`` flags of sglang_router's launcher are the router's and skipped."""
    out: dict[str, Any] = {}
    model: str | None = None
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-") or w == "-":
            raise InputError(f"{release}: unrecognized argument {w!r} (the server takes no positional arguments)")
        flag, eq, inline = w.partition("=")
        spec = table.by_flag.get(flag)
        if spec is None and flag.startswith("--"):
            # argparse accepts an unambiguous prefix of a long option (allow_abbrev)
            matches = {o.dest: o for f, o in table.by_flag.items() if f.startswith(flag) and f.startswith("--")}
            if len(matches) == 1:
                spec = next(iter(matches.values()))
            elif len(matches) > 1:
                names = sorted(f for f in table.by_flag if f.startswith(flag))[:4]
                raise InputError(f"{release}: ambiguous option {flag} could match {', '.join(names)}")
        if spec is None and router and flag.startswith("--router-"):
            i += 1
            if not eq:
                while i < len(words) and _takes_value(words[i]):
                    i += 1
            continue
        if spec is None:
            close = difflib.get_close_matches(flag, list(table.by_flag), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise InputError(f"{release}: unknown flag {flag!r}{hint}")
        if isinstance(spec.nargs, Unknown):
            raise InputError(f"{release}: {flag} uses a custom argparse action whose arguments are not known")
        if spec.action == "other" and spec.nargs in (0, None) and not (spec.nargs == 0 and eq):
            # the release's own Action subclass (e.g. a deprecated spelling): run its __call__
            full = next((f for f in spec.flags if f.startswith(flag)), flag) if flag not in spec.flags else flag
            if spec.nargs == 0:
                action_values: Any = []
                i += 1
            elif eq or i + 1 < len(words) and _takes_value(words[i + 1]):
                text = inline if eq else words[i + 1]
                i += 1 if eq else 2
                # argparse converts with the add_argument type= (not the field's) before the action sees it
                if spec.choices is not None and text not in spec.choices:
                    raise InputError(f"{release}: bad value {text!r} for {flag}: choose one of {', '.join(spec.choices)}")
                action_values = _convert(spec, "", flag, text) if spec.type_name in ("int", "float") else text
            else:
                raise InputError(f"{release}: {flag} needs a value (argparse: expected one argument)")
            written = run_custom_action(interp, spec, full, action_values)
            if written is None:
                raise InputError(f"{release}: {flag} uses a custom argparse action ({getattr(spec.action_class, 'name', spec.action_class)}) whose effect could not be evaluated")
            for dest, value in written.items():
                if dest == "model_path":
                    model = value
                elif dest in table.fields:
                    out[dest] = value
            continue
        if spec.action in ("store_true", "store_false", "boolean_optional") or spec.nargs == 0:
            if eq:
                raise InputError(f"{release}: {flag} takes no value (ignored explicit argument {inline!r})")
            if spec.action == "boolean_optional":
                # --x / --no-x (an abbreviation resolves to the spec, so look at the full flag)
                full = next((f for f in spec.flags if f.startswith(flag)), flag) if flag not in spec.flags else flag
                value = not full.startswith("--no-")
            elif spec.action in ("store_true", "store_false"):
                value = spec.action == "store_true"
            else:
                raise InputError(f"{release}: {flag} uses a custom argparse action; its effect is not modelled")
            i += 1
        elif spec.nargs in ("+", "*") or isinstance(spec.nargs, int):
            vals = [inline] if eq else []
            i += 1
            while i < len(words) and _takes_value(words[i]) and not (isinstance(spec.nargs, int) and len(vals) >= spec.nargs):
                vals.append(words[i])
                i += 1
            if not vals and spec.nargs != "*" or isinstance(spec.nargs, int) and len(vals) != spec.nargs:
                raise InputError(f"{release}: {flag} expects {'at least one argument' if spec.nargs == '+' else f'{spec.nargs} arguments'}")
            value = [_convert(spec, None, flag, v) for v in vals]
        else:
            if eq:
                text = inline
                i += 1
            elif spec.nargs == "?":
                if i + 1 < len(words) and _takes_value(words[i + 1]):
                    text, i = words[i + 1], i + 2
                else:
                    raise InputError(f"{release}: {flag} without a value uses the parser's const, which is not modelled")
            else:
                if i + 1 >= len(words) or not _takes_value(words[i + 1]):
                    raise InputError(f"{release}: {flag} needs a value (argparse: expected one argument)")
                text = words[i + 1]
                i += 2
            try:
                value = _convert(spec, table.fields.get(spec.dest), flag, text, table.field_types.get(spec.dest))
            except InputError as exc:
                raise InputError(f"{release}: {exc}") from None
            if spec.action == "append":
                prev = out.get(spec.dest)
                value = [*(prev if isinstance(prev, list) else []), value]
        if spec.dest == "model_path":
            model = value
            continue
        if spec.dest not in table.fields:
            # argparse keeps it on the namespace, but from_cli_args builds ServerArgs from
            # the fields only (e.g. `--config=FILE`, which the merger does not see)
            if spec.dest == "config":
                print(f"sglang-audit: warning: {release} does not merge `{w}`: its --config merge looks for the "
                      "separate word --config (write --config FILE)", file=sys.stderr)
            continue
        out[spec.dest] = value
    return out, model


__all__ = ["FlagTable", "OptionSpec", "extract_flags", "parse_argv", "parse_launch", "parse_set", "External", "Instance", "Unknown"]


"""Provenance: which step produced a setting's value, and which steps only moved it.

SGLang moves a value through many mechanisms before anything reads it (a hook's returned
override dict, a declaration stash, a snapshot view, msgspec records, ``setattr`` loops,
context bags). The evaluator records an ``Event`` per write with the events its value
expression read (``sources``) and how the statement made the value (``form``). Here a
value is followed back through every step that only copied it — a step whose source
carries the same value, or whose expression is a bare read — to the step that *produced*
it: a constant written there, an expression computed there, the user's flag or the
field's declared default. That step is the decision; the copies are "applied at".

One definition for every command: the resolver stores the chain with roles
(``ChainStep.role``) and ``Setting.deciding`` reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.evaluate.values import Event, Instance, Unknown
from sglang_audit.result import (
    ROLE_APPLIED,
    ROLE_DECISION,
    ROLE_INPUT,
    ROLE_ORIGIN,
    ROLE_WRITE,
    ChainStep,
)

_TRACE_LIMIT = 64  # copies followed from one read back to the producer


@dataclass(frozen=True)
class Declaration:
    """Where a field is declared (``name: T = default`` in ServerArgs or an arg group)."""

    file: str
    line: int
    text: str
    default: Any
    has_default: bool


def public(value: Any) -> Any:
    """A value as the setting shows it: an enum member by its value."""
    if isinstance(value, Instance) and "enum" in value.cls.flags:
        return value.attrs.get("_value_")
    return value


def same(a: Any, b: Any) -> bool:
    a, b = public(a), public(b)
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return isinstance(a, Unknown) and isinstance(b, Unknown) and a.reason == b.reason
    if isinstance(a, (str, int, float, bool, type(None))) and isinstance(b, (str, int, float, bool, type(None))):
        return type(a) is type(b) and a == b
    return False


# calls that only hand back a value stored elsewhere (a call's own result, when analysed,
# arrives as the callee's return event; these are answered by the tool's natives)
_GENERIC_CALLS = frozenset({"getattr", "get", "setdefault", "pop", "copy", "deepcopy", "resolution_result",
                            "with_fallback", "__getattribute__", "__getattr__", "object.__getattribute__"})
_CALLEE = re.compile(r"\s*\(?\s*([\w.]+)\s*\(")


def produces(ev: Event) -> bool:
    """Did this step make its value (rather than pass on one made elsewhere)?"""
    if ev.kind in ("flag", "default") or ev.form in ("literal", "expr"):
        return True
    if ev.form == "call":
        # a call the tool answers itself (a boundary such as get_quantization_config reading
        # config.json): computed there, unless it is a generic accessor
        _t, eq, rhs = ev.text.partition("=")
        m = _CALLEE.match(rhs) if eq else None
        return m is not None and m.group(1).rsplit(".", 1)[-1] not in _GENERIC_CALLS
    return False


def trace(ev: Event, value: Any, before: int | None = None) -> tuple[Event | None, list[Event]]:
    """Follow ``ev`` back through the steps that copied ``value`` to the step that produced
    it. Returns (producer or None when the trail is lost, the copies, latest first)."""
    copies: list[Event] = []
    cur = ev
    for _ in range(_TRACE_LIMIT):
        if not same(cur.value, value) or (before is not None and cur.seq > before):
            return None, copies
        feeding = [s for s in cur.sources if same(s.value, value)]
        if feeding:
            copies.append(cur)
            cur = max(feeding, key=lambda s: s.seq)
            continue
        if produces(cur):
            return cur, copies
        copies.append(cur)
        return None, copies
    return None, copies


def _guard_text(ev: Event) -> str:
    return " and ".join(g.describe() for g in ev.guards if g.file == ev.file)


def _shown(value: Any) -> Any:
    value = public(value)
    if isinstance(value, Unknown):
        return f"unknown: {value.reason}"
    if isinstance(value, (list, tuple)):
        return [_shown(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return repr(value)


def _step(ev: Event, layer: str, role: str) -> ChainStep:
    return ChainStep(ev.file, ev.line, _guard_text(ev), _shown(ev.value), ev.text, layer, ev.kind, role)


def field_declarations(root: Path, load: Any) -> dict[str, Declaration]:
    """Field declarations of ServerArgs and of the arg-group classes (0.5.19+ generates
    ServerArgs' fields from them, so the dataclass itself has no line for them)."""
    srt = root / "sglang" / "srt"
    files = [srt / "server_args.py"]
    fields_dir = srt / "arg_groups"
    if fields_dir.is_dir():
        files.extend(sorted(p for p in fields_dir.rglob("*.py") if p.is_file()))
    out: dict[str, Declaration] = {}
    for path in files:
        if not path.is_file():
            continue
        try:
            tree = load(path)
        except Exception:  # noqa: BLE001 - a file the frontend refuses declares nothing here
            continue
        rel = path.relative_to(root).as_posix()
        in_server_args = path.name == "server_args.py"
        for stmt in tree.body:
            if stmt.kind != "ClassDef" or (in_server_args and stmt.name != "ServerArgs"):
                continue
            for item in stmt.body:
                if item.kind != "AnnAssign" or item.target.kind != "Name" or item.target.id.startswith("_"):
                    continue
                name = item.target.id
                if name in out and out[name].file.endswith("server_args.py"):
                    continue
                const = item.value is not None and item.value.kind == "Const"
                out.setdefault(name, Declaration(rel, item.line, item.text or name,
                                                 item.value.value if const else None, const))
    return out


@dataclass
class Inputs:
    """What the resolver knows about one setting on one path."""

    name: str
    config_value: Any
    config_event: Event | None
    keyed: list[Event]
    runtime_value: Any
    has_runtime: bool
    runtime_events: list[Event]
    flag: tuple[str, Any] | None  # (command-line flag, value) when the user set it
    declaration: Declaration | None
    default_event: Event | None  # the dataclass default/flag event of the field, if any
    others: frozenset[str] = frozenset()  # the other settings (a copy of one is a decision)


def build_chain(inp: Inputs) -> tuple[ChainStep, ...]:
    """The setting's chain: its origin (flag or default), the steps that produced the values
    it held, the decision, and where the decided value was applied. Nothing else."""
    cv = inp.config_value
    limit = inp.config_event.seq if inp.config_event is not None else None
    producers: dict[int, Event] = {}
    applied: list[Event] = []
    final: Event | None = None
    if inp.config_event is not None:
        final, copies = _producer(inp, inp.config_event, cv, None)
        applied.extend(copies)
    for k in inp.keyed:
        if limit is not None and k.seq > limit:
            continue
        p, copies = _producer(inp, k, k.value, limit)
        if p is not None and not _own_origin(p, inp.name):
            producers[p.seq] = p
            if same(p.value, cv) and (final is None or _own_origin(final, inp.name) or p.seq > final.seq):
                final = p
        if same(k.value, cv):
            applied.extend(copies)
    origin = _origin(inp)
    steps: list[tuple[int, ChainStep]] = []
    decided_by_origin = False
    if final is not None and _own_origin(final, inp.name):
        decided_by_origin = True
        final = None
    if final is None and origin is not None and same(origin.value, cv):
        decided_by_origin = True
    if final is None and not decided_by_origin:
        # the value was taken from another setting (``default = view.moe_runner_backend``):
        # that explicit read is this setting's decision, the copies before it are the
        # other setting's
        ordered = sorted(applied, key=lambda e: e.seq)
        final = next((e for e in ordered if _reads_other(e.text, inp.name, inp.others)), None)
        if final is None:
            # the value came from where no event follows it (the model's config.json, a
            # parameter): the latest guarded assignment that names this setting decided it
            # (``if self.quantization is None and quant_method is not None:
            # self.quantization = quant_method``); a generic store never does
            final = next((e for e in reversed(ordered) if _names_own(e, inp.name)), None)
    rv = inp.runtime_value
    runtime_differs = inp.has_runtime and not same(rv, cv)
    if runtime_differs:
        decided_by_origin = False
    if origin is not None:
        steps.append((-1, ChainStep(origin.file, origin.line, origin.guard, origin.value, origin.code,
                                    "config", origin.kind, ROLE_DECISION if decided_by_origin else ROLE_ORIGIN)))
    if final is not None:
        producers[final.seq] = final
    runtime_decision: Event | None = None
    if runtime_differs:
        best: Event | None = None
        for ev in inp.runtime_events:
            p, copies = trace(ev, rv)
            if p is None or (limit is not None and p.seq <= limit) or p.kind in ("flag", "default"):
                # the runtime value is another setting's config value: the runtime step
                # that computed it from that (``x if spec else moe.a2a_backend``) decides
                p = next((c for c in copies if c.form == "expr" and (limit is None or c.seq > limit)), None)
            if p is not None and (best is None or p.seq > best.seq):
                best = p
        runtime_decision = best
    for seq in sorted(producers):
        ev = producers[seq]
        role = ROLE_DECISION if ev is final and not runtime_differs else ROLE_WRITE
        steps.append((seq, _step(ev, "config", role)))
    seen = {(s.file, s.line) for _q, s in steps}
    for ev in sorted(applied, key=lambda e: e.seq):
        if (ev.file, ev.line) in seen or not same(ev.value, cv) or (final is not None and ev.seq < final.seq):
            continue
        seen.add((ev.file, ev.line))
        steps.append((ev.seq, _step(ev, "config", ROLE_APPLIED)))
    if inp.has_runtime:
        if runtime_decision is not None:
            steps.append((runtime_decision.seq, _step(runtime_decision, "runtime", ROLE_DECISION)))
        reader = next((e for e in reversed(inp.runtime_events) if same(e.value, rv)), None)
        if reader is not None and reader is not runtime_decision:
            # the getter the layers call: where the decided value is applied at runtime
            p, copies = trace(reader, rv)
            shown = next((c for c in copies if c.kind != "return" or c.guards), copies[0] if copies else reader)
            if (shown.file, shown.line) not in seen and shown is not runtime_decision:
                steps.append((shown.seq, _step(shown, "runtime", ROLE_APPLIED)))
    decision = runtime_decision if runtime_differs else final
    if decision is not None:
        seen = {(s.file, s.line) for _q, s in steps}
        for ev in _guard_inputs(decision):
            if (ev.file, ev.line) in seen:
                continue
            seen.add((ev.file, ev.line))
            layer = "runtime" if runtime_differs else "config"
            if ev.kind == "flag":
                if not ev.line:
                    continue  # a flag of a generated field: its guard text names it already
                from sglang_audit.inputs.flagnames import cli_flag

                shown = _shown(ev.value)
                steps.append((ev.seq, ChainStep(ev.file, ev.line, f"set by you: {cli_flag(ev.target)} {shown}", shown,
                                                f"{cli_flag(ev.target)} {shown}", layer, "flag", ROLE_INPUT)))
            else:
                steps.append((ev.seq, _step(ev, layer, ROLE_INPUT)))
    steps.sort(key=lambda t: t[0])
    return tuple(s for _q, s in steps)


_INPUT_DEPTH = 3
_INPUT_LIMIT = 12


def _guard_inputs(decision: Event) -> list[Event]:
    """What the decision's guards read that a reader needs: the user's flags and the
    results of predicates computed there (``torch.version.cuda >= "12.8"``) — not every
    read on the way (views, records, the platform object)."""
    out: list[Event] = []
    seen: set[int] = set()
    frontier = [src for g in decision.guards for src in g.sources]
    for _ in range(_INPUT_DEPTH):
        nxt: list[Event] = []
        for ev in frontier:
            if id(ev) in seen:
                continue
            seen.add(id(ev))
            scalar = isinstance(public(ev.value), (str, bool, int, float)) and not isinstance(ev.value, Unknown)
            if ev.kind == "flag" and scalar:
                out.append(ev)
            elif ev.kind in ("write", "return") and ev.form in ("literal", "expr") and isinstance(ev.value, bool) and ev.line > 0:
                out.append(ev)
            nxt.extend(ev.sources)
            for g in ev.guards:
                if g not in decision.guards:
                    nxt.extend(g.sources)
        frontier = nxt
    out.sort(key=lambda e: e.seq)
    return out[-_INPUT_LIMIT:]


def _own_origin(ev: Event, name: str) -> bool:
    return ev.kind in ("flag", "default") and ev.target == name


def _producer(inp: Inputs, ev: Event, value: Any, before: int | None) -> tuple[Event | None, list[Event]]:
    """``trace``, where a copy that explicitly reads another setting is this setting's
    decision (``spec = server_args.moe_runner_backend`` decides the draft's runner), and
    so is the copy that took another field's flag or default."""
    p, copies = trace(ev, value, before)
    for i, c in enumerate(copies):  # latest first
        if _reads_other(c.text, inp.name, inp.others):
            return c, copies[:i]
    if p is not None and p.kind in ("flag", "default") and p.target != inp.name:
        return (copies[-1], copies[:-1]) if copies else (None, [])
    return p, copies


def _names_own(ev: Event, name: str) -> bool:
    """A guarded store that names this setting: ``self.quantization = quant_method``,
    ``overrides["quantization"] = quant_method``, ``quantization=quant_method``."""
    if ev.target != name or not _guard_text(ev):
        return False
    n = re.escape(name)
    if ev.kind == "write":
        return re.match(rf"\s*(?:[\w.]+\.)?{n}\s*(?::[^=]*)?=[^=]", ev.text) is not None
    if ev.kind == "declare":
        return (re.match(rf"{n}=", ev.text) is not None
                or re.search(rf"\[[\"']{n}[\"']\]\s*=[^=]", ev.text) is not None)
    return False


def _reads_other(text: str, name: str, others: frozenset[str]) -> bool:
    _target, eq, rhs = text.partition("=")
    if not eq:
        return False
    return any(re.search(rf"\.{o}\b|\[[\"']{o}[\"']\]", rhs) for o in others if o != name)


@dataclass(frozen=True)
class _Origin:
    file: str
    line: int
    guard: str
    value: Any
    code: str
    kind: str


def _origin(inp: Inputs) -> _Origin | None:
    """The user's flag or the field's declared default, cited at the field's declaration."""
    decl = inp.declaration
    ev = inp.default_event
    file, line = (decl.file, decl.line) if decl is not None else ("", 0)
    if (not line) and ev is not None and ev.line:
        file, line = ev.file, ev.line
    if not line:
        return None  # no line to cite: better no step than a line-0 one
    if inp.flag is not None:
        flag, value = inp.flag
        shown = _shown(value)
        return _Origin(file, line, f"set by you: {flag} {shown}", shown, f"{flag} {shown}", "flag")
    if ev is not None and ev.kind == "default":
        value = _shown(ev.value)
    elif decl is not None and decl.has_default:
        value = _shown(decl.default)
    else:
        return None
    return _Origin(file, line, "default", value, decl.text if decl is not None else ev.text if ev else "", "default")


def reachable_field_event(start: list[Event], name: str) -> Event | None:
    """The dataclass ``default``/``flag`` event of field ``name`` among the events that fed
    ``start`` (bounded walk)."""
    stack = list(start)
    seen: set[int] = set()
    while stack and len(seen) < 20000:
        ev = stack.pop()
        if id(ev) in seen:
            continue
        seen.add(id(ev))
        if ev.kind in ("default", "flag") and ev.target == name:
            return ev
        stack.extend(ev.sources)
        for g in ev.guards:
            stack.extend(g.sources)
    return None


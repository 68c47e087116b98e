"""The evaluator as a closed component: it runs against any world that implements its
`World` protocol, and strict mode turns its internal errors into failures."""

from __future__ import annotations

import ast
import collections
import inspect
from pathlib import Path
from typing import Any

import pytest

from sglang_audit.evaluate import interpreter
from sglang_audit.evaluate.core import InterpreterCore
from sglang_audit.evaluate.interpreter import Bounds, Interpreter, World, WorldState
from sglang_audit.evaluate.overlays.builtins import make_exception_classes, make_object_class
from sglang_audit.evaluate.values import NOT_HANDLED, Class, Instance, ModuleObj, Unknown
from sglang_audit.frontend import ir
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve.pipeline import Request, resolve
from sglang_audit.world import native as world_mod

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {n: inspect.signature(f) for n, f in vars(World).items()
            if callable(f) and not n.startswith("_")}


def test_the_world_implements_every_hook_with_the_protocols_parameters() -> None:
    methods = _protocol_methods()
    assert {"builtins", "call_external", "boundary_for", "native_module"} <= set(methods)
    for name, sig in methods.items():
        impl = getattr(world_mod.NativeWorld, name, None)
        assert impl is not None, f"NativeWorld lacks {name}"
        assert list(inspect.signature(impl).parameters) == list(sig.parameters), name


class TinyWorld:
    """A world that knows nothing: no builtins but the exceptions, every hook NOT_HANDLED.
    The interpreter must still evaluate plain Python with it."""

    package_name = "pkg"

    def __init__(self) -> None:
        self.object_class: Class = make_object_class()
        self.exception_classes: dict[str, Class] = make_exception_classes()

    def initial_state(self) -> WorldState:
        return WorldState()  # no environment, no config objects

    def builtins(self, interp: Interpreter) -> dict[str, Any]:
        return dict(self.exception_classes)

    def native_module(self, interp: Interpreter, name: str) -> Any:
        return None  # no module is the world's: pkg is evaluated, anything else is External

    def boundary_for(self, interp: Interpreter, module: str, name: str) -> Any:
        return None

    def to_str(self, value: Any) -> str | None:
        return None

    def is_environ(self, obj: Any) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # the remaining hooks: not handled
        # iterate_native's protocol answer for "not mine" is None
        return lambda *a, **k: NOT_HANDLED if name not in ("class_created", "make_enum", "iterate_native") else None


def _interp(tmp_path: Path, source: str) -> tuple[Interpreter, ModuleObj]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(source)
    interp = Interpreter(tmp_path, SourceCache(use_disk=False), TinyWorld(), {}, Bounds())  # type: ignore[arg-type]
    mod = interp.load_module("pkg.m")
    assert isinstance(mod, ModuleObj) and not mod.failed
    return interp, mod


SOURCE = """
class Cfg:
    def __init__(self, mode):
        self.mode = mode
        if mode == "fast":
            self.backend = "cutlass"
        else:
            self.backend = "triton"

def pick(flag):
    if flag:
        return "a"
    return "b"
"""


def test_interpreter_runs_with_a_world_that_knows_nothing(tmp_path: Path) -> None:
    interp, mod = _interp(tmp_path, SOURCE)
    cfg = interp.call(interp.getattr(mod, "Cfg"), ["fast"], {})
    assert isinstance(cfg, Instance) and cfg.attrs["backend"] == "cutlass"
    assert interp.call(interp.getattr(mod, "pick"), [0], {}) == "b"


def test_a_branch_on_an_unknown_is_a_decision_not_a_guess(tmp_path: Path) -> None:
    interp, mod = _interp(tmp_path, SOURCE)
    assert interp.call(interp.getattr(mod, "pick"), [Unknown("flag")], {}) == "a"  # first outcome: True
    (decision,) = interp.new_decisions
    assert decision.file == "pkg/m.py" and decision.text == "flag"
    again = Interpreter(tmp_path, SourceCache(use_disk=False), TinyWorld(), {decision.key: False}, Bounds())  # type: ignore[arg-type]
    mod2 = again.load_module("pkg.m")
    assert again.call(again.getattr(mod2, "pick"), [Unknown("flag")], {}) == "b"


def _break_binop(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Interpreter, node: Any, frame: Any) -> Any:
        raise TypeError("evaluator defect")
    monkeypatch.setattr(Interpreter, "e_Compare", broken)
    monkeypatch.setitem(interpreter.EXPR_HANDLERS, ir.Compare, broken)  # the dispatch table holds the handlers


def test_strict_mode_raises_an_internal_evaluator_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _break_binop(monkeypatch)
    monkeypatch.setenv("SGLANG_AUDIT_STRICT", "1")
    with pytest.raises(TypeError, match="evaluator defect"):
        resolve(Request(source=str(MINI_E2), arch="sm120", model="deepseek-r1-nvfp4", use_cache=False))


def test_without_strict_mode_an_internal_error_is_unknown_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _break_binop(monkeypatch)
    monkeypatch.setenv("SGLANG_AUDIT_STRICT", "0")
    res = resolve(Request(source=str(MINI_E2), arch="sm120", model="deepseek-r1-nvfp4", use_cache=False))
    unknown = [s for s in res.settings.values() if s.status == "unknown"]
    assert unknown, "a defect in the evaluator must not leave settings resolved"
    assert any("internal evaluator error (TypeError: evaluator defect)" in str(s.to_json()) for s in unknown)


def test_an_unknown_a_call_returns_names_the_call_site(tmp_path):
    """Issue #23: `iteration over an unknown value (call of an unknown (Path.glob))` had no
    location; an unknown returned by a call now names the file:line of the call."""
    interp, mod = _interp(tmp_path, "import pathlib\n\nfiles = pathlib.Path('x').glob('*.safetensors')\n")
    value = mod.globals["files"]
    assert isinstance(value, Unknown) and "pkg/m.py:3" in value.reason
    assert value.reason.count("pkg/m.py:3") == 1  # said once, not at every enclosing call


def test_stop_reason_names_where_evaluation_stopped():
    from sglang_audit.evaluate.interpreter import Unmodelled, stop_reason

    exc = Unmodelled("iteration over an unknown value (call of an unknown (Path.glob))")
    exc.where = "sglang/srt/model_loader/weight_utils.py:120"  # type: ignore[attr-defined]
    assert stop_reason(exc).endswith("(evaluation stopped at sglang/srt/model_loader/weight_utils.py:120)")
    assert stop_reason(Unmodelled("loop at a.py:3")) == "loop at a.py:3"


def test_iteration_over_a_value_no_overlay_iterates_has_no_line_zero(tmp_path):
    """A native caller (zip, map, dict(...)) iterates with no line: the reason said `at line 0`
    (0.5.15 gpt-oss on sm100); the stop reason names where evaluation stopped instead."""
    from sglang_audit.evaluate.interpreter import Unmodelled

    interp, mod = _interp(tmp_path, "import ext\n\nshape = ext.weight.shape\n")
    shape = mod.globals["shape"]
    with pytest.raises(Unmodelled) as native:
        interp.iterate(shape, None, 0)
    assert str(native.value).startswith("iteration over ")
    assert "line 0" not in str(native.value)
    with pytest.raises(Unmodelled) as stmt:
        interp.iterate(shape, None, 3)
    assert str(stmt.value).endswith(") at line 3")


# ---- decisions on unknowns are sound: every outcome a real value allows is explored -------

BRANCHES = """
import ext
backend = ext.driver.backend
flag = ext.flag
seen = []
if backend == "hip":
    seen.append("hip")
if backend != "hip":
    seen.append("not-hip")
if backend == "cuda":
    seen.append("cuda")
if flag:
    seen.append("flag")
if not flag:
    seen.append("no-flag")
if "a" in ext.params:
    seen.append("has-a")
if "b" not in ext.params:
    seen.append("lacks-b")
opts, _ = ext.pair  # an element of an outside value: an unknown of its own
if opts:
    seen.append("opts")
if "c" in opts:
    seen.append("has-c")
"""


def _all_paths(tmp_path: Path, source: str, when: list[Any] | None = None) -> set[tuple[str, ...]]:
    """Every path the resolver's exploration (resolver._resolve) would run, by outcome."""
    from sglang_audit.inputs.device import Environment, parse_device

    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "m.py").write_text(source)
    outcomes: set[tuple[str, ...]] = set()
    pending: list[dict[str, bool]] = [{}]
    while pending:
        decisions = pending.pop()
        world = world_mod.NativeWorld(parse_device("sm100"), Environment(), [])
        interp = Interpreter(tmp_path, SourceCache(use_disk=False), world, decisions, Bounds())
        mod = interp.load_module("sglang.m")
        assert isinstance(mod, ModuleObj) and not mod.failed, mod
        outcomes.add(tuple(mod.globals["seen"]))
        if when is not None:
            when.append((tuple(mod.globals["seen"]), [(d.text, d.negated, t) for d, t in interp.taken]))
        prefix = dict(decisions)
        for d in interp.new_decisions:
            pending.append({**prefix, d.key: not d.first})
            prefix[d.key] = d.first
        assert len(outcomes) < 200
    return outcomes


def test_a_negated_or_unequal_unknown_is_decided_against_its_positive(tmp_path):
    """`x != "hip"` and `not flag` were decided like `x == "hip"` and `flag` (one key, one
    truth): a path saw both branches or neither and the real ones were never run, so a
    rejection under `if not flag: raise` was missed on every path (issue 22, ninth session)."""
    outcomes = _all_paths(tmp_path, BRANCHES)
    for seen in outcomes:
        assert ("hip" in seen) != ("not-hip" in seen), seen
        assert ("flag" in seen) != ("no-flag" in seen), seen
        assert not ("hip" in seen and "cuda" in seen), seen  # one value equals one string
    backends = {tuple(s for s in seen if s in ("hip", "not-hip", "cuda")) for seen in outcomes}
    assert backends == {("hip",), ("not-hip", "cuda"), ("not-hip",)}
    # membership in an outside object: one decision per item, each way
    members = {tuple(s for s in seen if s in ("has-a", "lacks-b")) for seen in outcomes}
    assert members == {("has-a", "lacks-b"), ("has-a",), ("lacks-b",), ()}
    assert {"flag" in s for s in outcomes} == {True, False}
    # membership in an unknown value is not its truthiness: a non-empty value may lack the item
    assert (True, False) in {("opts" in s, "has-c" in s) for s in outcomes}


def test_a_path_shows_a_negated_condition_with_its_own_truth(tmp_path):
    """`taken` (the `when` of every candidate) holds the condition as written with the truth
    it had: `not (access is not None)` on the path that raised, never the input's truth."""
    when: list[Any] = []
    _all_paths(tmp_path, "import ext\nv = ext.flag\nseen = []\nif not v:\n    seen.append('off')\n"
               "if v:\n    seen.append('on')\n", when)
    assert sorted(when) == [(("off",), [("not v", True, True)]), (("on",), [("not v", True, False)])]


def test_a_value_computed_from_an_unknown_is_decided_once_per_path(tmp_path):
    """``if n2 or ext.flag:`` tests ``n2`` (a keyless unknown: ``ext.n * 2``) as the ``or``'s
    operand, then the ``or``'s value, which is ``n2`` itself, as the condition. Decided at each
    site on its own, a path took the operand as true and the condition as false: the else branch
    ran with ``n2`` truthy, a path SGLang never takes (0.5.16-0.5.23 FlashInfer's
    ``if (self.prefill_uses_dequant_workspace or ...)``)."""
    outcomes = _all_paths(tmp_path, "import ext\nseen = []\nn2 = ext.n * 2\nif n2 or ext.flag:\n"
                          "    seen.append('any')\nelse:\n    seen.append('none')\nif n2:\n    seen.append('n2')\n")
    assert outcomes == {("any", "n2"), ("any",), ("none",)}


def test_calls_of_one_outside_function_are_one_input_per_argument_list(tmp_path):
    """`torch.allclose(a, b)` and `torch.allclose(c, d)` were one input (the call's path
    without its arguments): deciding one decided the other, so a path where only one held
    was never run. Equal arguments still give one input (one value per path)."""
    outcomes = _all_paths(tmp_path, "import ext\nseen = []\nif ext.check(1):\n    seen.append('one')\n"
                          "if ext.check(2):\n    seen.append('two')\nif ext.check(1):\n    seen.append('one again')\n"
                          "if not ext.check(x=ext.dtype):\n    seen.append('not kw')\n")
    assert all(("one" in s) == ("one again" in s) for s in outcomes)
    assert {("one" in s, "two" in s) for s in outcomes} == {(True, True), (True, False), (False, True), (False, False)}
    assert {"not kw" in s for s in outcomes} == {True, False}


def test_a_key_built_from_a_negated_unknown_is_not_read_as_a_negation(tmp_path):
    """`(not v) is None` composes its key from `not v`'s; with negation as a key prefix that
    key read as "not (v is None)", tying two unrelated conditions together (a path where both
    hold was never run). Negation is a suffix: the composed key is an input of its own."""
    outcomes = _all_paths(tmp_path, "import ext\nv, _ = ext.pair\nseen = []\nif v is None:\n    seen.append('none')\n"
                          "n = not v\nif n is None:\n    seen.append('n none')\n")
    assert ("none", "n none") in outcomes


def test_a_context_manager_yielding_in_a_loop_is_unmodelled_not_guessed():
    # @contextmanager generators are run to their yield through if/try/with blocks
    # (tests/test_differential.py); a yield in a loop would need the loop's state kept
    from sglang_audit.resolve.adhoc import evaluate_function

    source = ("import contextlib\n\n\n@contextlib.contextmanager\ndef each(n):\n    for i in range(n):\n"
              "        yield i\n\n\ndef f():\n    with each(2) as v:\n        return v\n")
    got = evaluate_function(source, "f", [])
    assert got.kind == "unknown" and "yield is in a for" in got.message, got


# ---- the interpreter's parts (issue 40 step 1: each part reads in one sitting) -------------

PARTS = {"statements", "generators", "expressions", "operators", "calls", "attributes", "modules"}


def _parts() -> list[type]:
    return [c for c in Interpreter.__mro__ if c not in (Interpreter, InterpreterCore, object)]


def _declared_for_the_parts() -> dict[str, ast.FunctionDef]:
    """What InterpreterCore declares under TYPE_CHECKING: the methods one part calls on another."""
    core = next(n for n in ast.parse(Path(inspect.getfile(InterpreterCore)).read_text()).body
                if isinstance(n, ast.ClassDef) and n.name == "InterpreterCore")
    block = next(n for n in core.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {f.name: f for f in block.body if isinstance(f, ast.FunctionDef)}


def test_each_method_is_defined_by_one_part_and_each_declaration_matches_its_part() -> None:
    parts = _parts()
    assert {c.__module__.rsplit(".", 1)[1] for c in parts} == PARTS
    # a name in two parts (or a part and the core): the MRO would silently pick one
    defined = collections.Counter(n for c in [*parts, InterpreterCore] for n in vars(c) if not n.startswith("__"))
    assert sorted(n for n, k in defined.items() if k > 1) == []
    declared = _declared_for_the_parts()
    assert {"evaluate", "call", "getattr", "exec_block", "load_module"} <= set(declared)
    for name, stub in declared.items():
        (owner,) = [c for c in parts if name in vars(c)]  # a declaration no part defines fails here
        stub_params = [a.arg for a in [*stub.args.args, *stub.args.kwonlyargs]] + (["values"] if stub.args.vararg else [])
        real = list(inspect.signature(vars(owner)[name]).parameters)
        assert sorted(real) == sorted(stub_params), name
        assert name not in vars(InterpreterCore), name  # declared only for the type checker


def test_the_dispatch_tables_hold_the_statement_and_expression_parts_handlers() -> None:
    """Byterun's property: every statement handler is in statements.py, every expression
    handler in expressions.py, and the tables interpreter.py fills hold exactly those."""
    stmt = {h.__qualname__.split(".")[0] for h in interpreter.STMT_HANDLERS.values() if h.__name__.startswith("s_")}
    expr = {h.__qualname__.split(".")[0] for h in interpreter.EXPR_HANDLERS.values() if h.__name__.startswith("e_")}
    assert (stmt, expr) == ({"Statements"}, {"Expressions"})
    assert interpreter.STMT_HANDLERS[ir.If] is Interpreter.s_If and interpreter.EXPR_HANDLERS[ir.Call] is Interpreter.e_Call
    assert not [n for c in _parts() if c.__name__ not in ("Statements", "Expressions")
                for n in vars(c) if n.startswith(("s_", "e_"))]


def test_dict_keys_take_set_operators_as_in_python(tmp_path: Path) -> None:
    # 0.5.23 layer_boundary/factories.py: `options.keys() - _STAGE_OPTIONS[kind]`; with keys()
    # a plain list the subtraction raised TypeError, stopping every DeepSeek decoder layer
    interp, mod = _interp(tmp_path, (
        "opts = {'fusions': 1, 'other': 2}\n"
        "extra = opts.keys() - {'fusions'}\n"
        "both = {'fusions', 'x'} & opts.keys()\n"
        "order = [k for k in opts.keys()]\n"))
    assert mod.globals["extra"] == {"other"}
    assert mod.globals["both"] == {"fusions"}
    assert mod.globals["order"] == ["fusions", "other"]


def test_a_statement_of_a_top_level_if_branch_the_evaluator_cannot_follow_unbinds_only_its_names():
    # 0.5.23 fp8_utils.py:582: `if is_blackwell(): ...; x = maybe_cache(...)` (a loop over
    # inspect.signature().parameters) `...; def gemm(...)`: the later definitions still load
    from sglang_audit.resolve.adhoc import evaluate_function

    source = """
import inspect

if True:
    for p in inspect.signature(print).parameters.values():
        pass
    def after():
        return "defined"


def f():
    return after()
"""
    outcome = evaluate_function(source, "f", [])
    assert (outcome.kind, outcome.value) == ("value", "defined")


def test_a_subclass_of_a_subscripted_builtin_holds_its_items():
    # 0.5.10 jit_kernel/utils.py `class CPPArgList(list[str])`, built from a generator and joined
    from sglang_audit.resolve.adhoc import evaluate_function

    source = """
class L(list[str]):
    def __str__(self):
        return ", ".join(self)


def f():
    return str(L(x for x in ["a", "b"]))
"""
    outcome = evaluate_function(source, "f", [])
    assert (outcome.kind, outcome.value) == ("value", "a, b")


@pytest.mark.parametrize("source, extra, where", [
    # `from m import y` inside m, y never defined: CPython raises at the import
    ("from pkg.m import y\n\ndef use():\n    return y\n", None, "m.py"),
    # a cycle of such imports through another module: at n's import, which finds pkg.m
    # partially initialized (CPython's traceback ends at n.py:1)
    ("from pkg.n import y\n\ndef use():\n    return y\n", "from pkg.m import y\n", "n.py"),
])
def test_an_import_no_module_of_its_cycle_defines_is_cpythons_import_error(tmp_path, source, extra, where):
    from sglang_audit.evaluate.interpreter import PyRaise

    if extra is not None:
        (tmp_path / "pkg").mkdir()
        (tmp_path / "pkg" / "n.py").write_text(extra)
        (tmp_path / "pkg" / "__init__.py").write_text("")
        interp = Interpreter(tmp_path, SourceCache(use_disk=False), TinyWorld(), {}, Bounds())  # type: ignore[arg-type]
        (tmp_path / "pkg" / "m.py").write_text(source)
        mod = interp.load_module("pkg.m")
        assert isinstance(mod, ModuleObj)
    else:
        interp, mod = _interp(tmp_path, source)
    # before: resolve_lazy and module_attr called each other until RecursionError
    with pytest.raises(PyRaise) as raised:
        interp.call(mod.globals["use"], [], {})
    exc = raised.value.exc
    assert isinstance(exc, Instance) and exc.cls.name == "ImportError"
    assert "cannot import name 'y' from partially initialized module 'pkg.m'" in repr(exc.attrs.get("args"))
    # CPython's line: the import, though the evaluator resolves the lazy binding at its use
    assert (Path(raised.value.file).name, raised.value.line) == (where, 1)


def test_a_raise_no_line_of_the_analysed_code_made_has_no_site(tmp_path):
    # the tool's own call with a missing argument (a stage calling a method whose signature
    # another release changed) fails in no frame of the analysed code: its file/line would be
    # whichever call ran last (sglang/srt/utils.py:1042 in a 0.4.10 golden), so it names none
    from sglang_audit.evaluate.interpreter import PyRaise
    from sglang_audit.resolve.stage_common import stopped

    interp, mod = _interp(tmp_path, "def helper():\n    return 1\n\n\ndef apply(layer, topk_output):\n    return helper()\n\n\n"
                                    "def caller():\n    helper()\n    return apply(1)\n")
    interp.call(mod.globals["helper"], [], {})
    with pytest.raises(PyRaise) as by_tool:
        interp.call(mod.globals["apply"], [1], {})
    assert by_tool.value.where == ""
    assert stopped("TypeError", "no topk_output", by_tool.value, "x").endswith("at no line of SGLang's)")
    # the same failure inside the analysed code names the call's line, as CPython's traceback does
    with pytest.raises(PyRaise) as inside:
        interp.call(mod.globals["caller"], [], {})
    assert inside.value.where.endswith("m.py:11")

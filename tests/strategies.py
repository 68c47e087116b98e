"""Hypothesis strategies for the differential tests: small config-style Python modules.

A generated module looks like SGLang's backend-selection code::

    NAMES = ['auto', 'triton']
    FROZ = frozenset({'cutlass', 'flashinfer_cutlass'})
    TABLE = {'auto': 1, 'triton': 2}
    ALIASES = {'auto': 'triton', 'fp8:e4m3': 'cutlass'}

    def helper(s, n):
        ...
        return <expression>

    def f(a, b, c):
        x = ...; n = ...; flag = ...; out = []; cfg = {}
        if ... elif ... else ...
        assert ..., f"..."
        raise ValueError(...)
        return {...}

Every parameter has a *sort* fixed per program ("str": a backend name or None, "int",
"bool", "any": any value of the domain) so that most expressions are well typed, while
the None in the string domain, table lookups (``TABLE[x]``), integer division, ``x[0]``,
``a, b = x.split(":")`` and try/except still exercise the error paths and their messages.
Programs have no ``while`` and no recursion (``helper`` never calls anything generated),
and every ``for`` runs over a literal, a module-level constant or a parameter (never a
set: CPython's iteration order of a set of strings depends on the hash seed), so each
one terminates and is deterministic.

Every local of ``f`` is assigned before the body can read it, unless
``programs(maybe_unbound=True)`` is asked for (then a read may raise UnboundLocalError,
as in CPython; test_differential.py runs 300 such programs).

``cases()`` draws one program together with several argument tuples for it, so the cost
of generating (and of the evaluator parsing) a program is shared by several checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

# ---- the value domain -----------------------------------------------------------------
BACKENDS = (
    "auto",
    "triton",
    "flashinfer_cutlass",
    "flashinfer_trtllm",
    "cutlass",
    "deep_gemm",
    "fp8:e4m3",
    "Triton",
    "",
)
STR_LITERALS = BACKENDS + ("flashinfer", "fp8", "tri", "none", "e4m3", "_")
PREFIXES = ("flashinfer", "fp8", "tri", "auto", "cut", "deep", "Tri", "")
INT_VALUES = (-1, 0, 1, 2, 3, 7, 8, 9, 10, 12)
INT_LITERALS = (-1, 0, 1, 2, 3, 4, 7, 8, 9, 10, 80, 90, 100)
SORTS = ("str", "int", "bool", "any")
KEYS = ("backend", "n", "flag", "mode", "ok")

STR_VALUE = st.sampled_from((*BACKENDS, None))
INT_VALUE = st.sampled_from(INT_VALUES)
BOOL_VALUE = st.booleans()
ANY_VALUE = st.one_of(STR_VALUE, INT_VALUE, BOOL_VALUE)
VALUE_OF_SORT = {"str": STR_VALUE, "int": INT_VALUE, "bool": BOOL_VALUE, "any": ANY_VALUE}

PARAMS = ("a", "b", "c")
LOCAL_SORT = {"x": "str", "n": "int", "flag": "bool"}

MAX_EXPR_DEPTH = 3
MAX_STMT_DEPTH = 3


@dataclass
class Program:
    source: str
    param_sorts: tuple[str, ...]
    func: str = "f"


@dataclass
class _Ctx:
    """What a block of generated code may refer to."""

    names: dict[str, list[str]]  # sort -> readable names of that sort
    helper_sort: str | None  # sort `helper(s, n)` returns; None inside the helper itself
    has_out: bool  # the local list `out` exists
    has_cfg: bool  # the local dict `cfg` exists
    assignable: dict[str, str] = field(default_factory=dict)  # local name -> sort
    loop_depth: int = 0


def _lit(value: object) -> str:
    return repr(value)


# ---- expressions ----------------------------------------------------------------------
def _leaf(draw, ctx: _Ctx, sort: str) -> str:
    names = list(ctx.names.get(sort, []))
    if sort == "int" and ctx.has_out:
        names.append("len(out)")
    if names and draw(st.integers(0, 3)) != 0:
        return draw(st.sampled_from(names))
    if sort == "int":
        return _lit(draw(st.sampled_from(INT_LITERALS)))
    if sort == "str":
        return _lit(draw(st.sampled_from(STR_LITERALS)))
    if sort == "bool":
        return draw(st.sampled_from(("True", "False")))
    # any: a name of another sort, None, or a literal
    other = draw(st.sampled_from(("str", "int", "bool")))
    if draw(st.integers(0, 4)) == 0:
        return "None"
    return _leaf(draw, ctx, other)


def expr(draw, ctx: _Ctx, sort: str, depth: int) -> str:
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return _leaf(draw, ctx, sort)
    return {"int": _int_expr, "str": _str_expr, "bool": _bool_expr, "any": _any_expr}[sort](draw, ctx, depth - 1)


def _cond(draw, ctx: _Ctx, depth: int) -> str:
    """A test for if/elif/assert/conditional expressions: mostly boolean, sometimes a
    plain value whose truth decides (empty strings, 0, None, empty containers)."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return expr(draw, ctx, "any", depth)
    if kind == 1:
        return expr(draw, ctx, draw(st.sampled_from(("str", "int"))), depth)
    if kind == 2 and ctx.has_out:
        return draw(st.sampled_from(("out", "not out")))
    if kind == 3 and ctx.has_cfg:
        return draw(st.sampled_from(("cfg", "not cfg")))
    return expr(draw, ctx, "bool", depth)


def _helper_call(draw, ctx: _Ctx, depth: int) -> str:
    s = expr(draw, ctx, "str", depth)
    n = expr(draw, ctx, "int", depth)
    if draw(st.booleans()):
        return f"helper({s}, {n})"
    if draw(st.booleans()):
        return f"helper({s}, n={n})"
    return f"helper(n={n}, s={s})"


def _int_expr(draw, ctx: _Ctx, depth: int) -> str:
    kind = draw(st.integers(0, 12))
    if kind <= 2:
        op = draw(st.sampled_from(("+", "-", "*", "//", "%")))
        return f"({expr(draw, ctx, 'int', depth)} {op} {expr(draw, ctx, 'int', depth)})"
    if kind == 3:
        return f"({expr(draw, ctx, 'int', depth)} if {_cond(draw, ctx, depth)} else {expr(draw, ctx, 'int', depth)})"
    if kind == 4:
        return f"TABLE.get({expr(draw, ctx, 'str', depth)}, {_lit(draw(st.sampled_from(INT_LITERALS)))})"
    if kind == 5:
        fn = draw(st.sampled_from(("min", "max")))
        return f"{fn}({expr(draw, ctx, 'int', depth)}, {expr(draw, ctx, 'int', depth)})"
    if kind == 6 and ctx.helper_sort == "int":
        return _helper_call(draw, ctx, depth)
    if kind == 7:
        return f"-{expr(draw, ctx, 'int', depth)}"
    if kind == 8 and ctx.has_cfg:
        key, default = _lit(draw(st.sampled_from(KEYS))), _lit(draw(st.sampled_from(INT_LITERALS)))
        return f"cfg.get({key}, {default})"
    if kind == 9:  # KeyError when the name is not in the table
        return f"TABLE[{expr(draw, ctx, 'str', depth)}]"
    if kind == 10:  # TypeError on None
        return f"len({expr(draw, ctx, 'str', depth)})"
    if kind == 11 and ctx.has_cfg:
        return f"cfg[{_lit(draw(st.sampled_from(KEYS)))}]"
    return _leaf(draw, ctx, "int")


def _str_expr(draw, ctx: _Ctx, depth: int) -> str:
    kind = draw(st.integers(0, 13))
    base = expr(draw, ctx, "str", depth)
    if kind == 0:
        return f"{base}.lower()"
    if kind == 1:
        return f"{base}.upper()"
    if kind == 2:
        return f"{base}.split(':')[0]"
    if kind == 3:
        return f"{base}.split(':')[-1]"
    if kind == 4:
        return f"({base} if {_cond(draw, ctx, depth)} else {expr(draw, ctx, 'str', depth)})"
    if kind == 5:
        return f"({base} or {_lit(draw(st.sampled_from(BACKENDS)))})"
    if kind == 6:
        return _fstring(draw, ctx, depth)
    if kind == 7:
        return f"({_lit(draw(st.sampled_from(PREFIXES)))} + {base})"
    if kind == 8:
        return f"ALIASES.get({base}, {expr(draw, ctx, 'str', depth)})"
    if kind == 9 and ctx.helper_sort == "str":
        return _helper_call(draw, ctx, depth)
    if kind == 10:
        return f"{base}.replace('_', '-')"
    if kind == 11:  # IndexError on "", TypeError on None
        return f"{base}[{draw(st.sampled_from(('0', '-1', '1')))}]"
    if kind == 12:
        return f"ALIASES[{base}]"
    return base


def _bool_expr(draw, ctx: _Ctx, depth: int) -> str:
    kind = draw(st.integers(0, 17))
    if kind == 0:
        return f"not {expr(draw, ctx, 'bool', depth)}"
    if kind == 1:
        op = draw(st.sampled_from(("and", "or")))
        parts = [expr(draw, ctx, "bool", depth) for _ in range(draw(st.integers(2, 3)))]
        return "(" + f" {op} ".join(parts) + ")"
    if kind == 2:
        op = draw(st.sampled_from(("==", "!=", "<", "<=", ">", ">=")))
        return f"{expr(draw, ctx, 'int', depth)} {op} {expr(draw, ctx, 'int', depth)}"
    if kind == 3:
        op1 = draw(st.sampled_from(("<", "<=")))
        op2 = draw(st.sampled_from(("<", "<=", "==")))
        return f"{_lit(draw(st.sampled_from(INT_LITERALS)))} {op1} {expr(draw, ctx, 'int', depth)} {op2} {_lit(draw(st.sampled_from(INT_LITERALS)))}"
    if kind == 4:
        op = draw(st.sampled_from(("==", "!=")))
        sort = draw(st.sampled_from(("str", "any")))
        return f"{expr(draw, ctx, sort, depth)} {op} {_lit(draw(st.sampled_from((*BACKENDS, None, 0, 1, True))))}"
    if kind == 5:
        op = draw(st.sampled_from(("in", "not in")))
        elems = draw(st.lists(st.sampled_from((*BACKENDS, None)), min_size=0, max_size=4))
        shape = draw(st.sampled_from(("list", "tuple", "set")))
        if shape == "set" and not elems:
            shape = "list"
        body = ", ".join(_lit(e) for e in elems)
        container = {"list": f"[{body}]", "tuple": f"({body}{',' if len(elems) == 1 else ''})", "set": f"{{{body}}}"}[shape]
        sort = draw(st.sampled_from(("str", "any")))
        return f"{expr(draw, ctx, sort, depth)} {op} {container}"
    if kind == 6:
        op = draw(st.sampled_from(("in", "not in")))
        const = draw(st.sampled_from(("NAMES", "FROZ", "TABLE", "ALIASES")))
        sort = draw(st.sampled_from(("str", "str", "any")))
        return f"{expr(draw, ctx, sort, depth)} {op} {const}"
    if kind == 7:
        op = draw(st.sampled_from(("is", "is not")))
        names = ctx.names.get("str", []) + ctx.names.get("any", [])
        subject = draw(st.sampled_from(names)) if names else f"({expr(draw, ctx, 'any', depth)})"
        return f"{subject} {op} None"
    if kind == 8:
        meth = draw(st.sampled_from(("startswith", "endswith")))
        if draw(st.booleans()):
            arg = _lit(draw(st.sampled_from(PREFIXES)))
        else:
            arg = _lit(tuple(draw(st.lists(st.sampled_from(PREFIXES), min_size=1, max_size=3))))
        return f"{expr(draw, ctx, 'str', depth)}.{meth}({arg})"
    if kind == 9:
        op = draw(st.sampled_from(("==", "!=", "<", "<=", ">", ">=")))
        left = f"({expr(draw, ctx, 'int', depth)}, {expr(draw, ctx, 'int', depth)})"
        right = f"({_lit(draw(st.sampled_from((7, 8, 9, 10))))}, {_lit(draw(st.sampled_from((0, 6, 9))))})"
        return f"{left} {op} {right}" if draw(st.booleans()) else f"{right} {op} {left}"
    if kind == 10:
        return f"({expr(draw, ctx, 'bool', depth)} if {_cond(draw, ctx, depth)} else {expr(draw, ctx, 'bool', depth)})"
    if kind == 11 and ctx.helper_sort == "bool":
        return _helper_call(draw, ctx, depth)
    if kind == 12:
        return f"bool({expr(draw, ctx, 'any', depth)})"
    if kind == 13 and ctx.has_out:
        op = draw(st.sampled_from(("in", "not in")))
        return f"{expr(draw, ctx, 'any', depth)} {op} out"
    if kind == 14:
        typ = draw(st.sampled_from(("str", "int", "bool", "(str, int)", "(bool, type(None))")))
        return f"isinstance({expr(draw, ctx, 'any', depth)}, {typ})"
    if kind == 15:
        return f"{expr(draw, ctx, 'int', depth)} > 0"
    if kind == 16:  # substring test: TypeError when either side is None
        op = draw(st.sampled_from(("in", "not in")))
        if draw(st.booleans()):
            return f"{_lit(draw(st.sampled_from(PREFIXES)))} {op} {expr(draw, ctx, 'str', depth)}"
        return f"{expr(draw, ctx, 'any', depth)} {op} {_lit(draw(st.sampled_from(BACKENDS)))}"
    return _leaf(draw, ctx, "bool")


def _any_expr(draw, ctx: _Ctx, depth: int) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        op = draw(st.sampled_from(("and", "or")))
        return f"({expr(draw, ctx, 'any', depth)} {op} {expr(draw, ctx, 'any', depth)})"
    if kind == 1:
        return f"({expr(draw, ctx, 'any', depth)} if {_cond(draw, ctx, depth)} else {expr(draw, ctx, 'any', depth)})"
    if kind == 2:
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=0, max_size=3, unique=True))
        items = ", ".join(f"{_lit(k)}: {expr(draw, ctx, 'any', depth)}" for k in keys)
        return "{" + items + "}"
    if kind == 3:
        n = draw(st.integers(0, 3))
        items = [expr(draw, ctx, "any", depth) for _ in range(n)]
        if draw(st.booleans()):
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if n == 1 else "") + ")"
    if kind == 4 and ctx.has_cfg:
        return f"cfg.get({_lit(draw(st.sampled_from(KEYS)))})"
    if kind == 5 and ctx.helper_sort is not None:
        return _helper_call(draw, ctx, depth)
    if kind == 6:
        seq = draw(st.sampled_from(("NAMES", "list(TABLE)", "list(ALIASES.values())", "out")))
        if seq == "out" and not ctx.has_out:
            seq = "NAMES"
        if draw(st.booleans()):  # TypeError for a non-str item in `out`
            return f"{_lit(draw(st.sampled_from((', ', '|', ''))))}.join({seq})"
        return f"sorted({seq})"  # TypeError for mixed types in `out`
    return expr(draw, ctx, draw(st.sampled_from(("str", "int", "bool"))), depth)


def _fstring(draw, ctx: _Ctx, depth: int) -> str:
    """An f-string over simple names (nested quotes inside f-strings need 3.12)."""
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        text = draw(st.sampled_from(("", "backend ", " is ", "=", ": ", "bad ", "_")))
        parts.append(text)
        sort = draw(st.sampled_from(SORTS))
        candidates = ctx.names.get(sort, [])
        if not candidates:
            continue
        name = draw(st.sampled_from(candidates))
        conv = draw(st.sampled_from(("", "", "!r", "!s")))
        spec = ""
        if sort == "int" and not conv and draw(st.integers(0, 3)) == 0:
            spec = draw(st.sampled_from((":>3", ":03d", ":x")))
        elif sort in ("str", "any") and not conv and draw(st.integers(0, 5)) == 0:
            spec = draw(st.sampled_from((":>8", ":<4", ":^6")))
        parts.append("{" + name + conv + spec + "}")
    return 'f"' + "".join(parts) + '"'


def _message(draw, ctx: _Ctx, depth: int) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return _lit(draw(st.sampled_from(("unsupported backend", "bad config", "", "x"))))
    if kind == 1:
        return f"{_lit('bad ')} + {expr(draw, ctx, 'str', depth)}"
    return _fstring(draw, ctx, depth)


# ---- statements -----------------------------------------------------------------------
def block(draw, ctx: _Ctx, depth: int, min_size: int = 1, max_size: int = 3) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(min_size, max_size))):
        lines.extend(stmt(draw, ctx, depth))
    return lines or ["pass"]


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def stmt(draw, ctx: _Ctx, depth: int) -> list[str]:
    edepth = draw(st.integers(0, MAX_EXPR_DEPTH))
    kind = draw(st.integers(0, 13))
    if kind <= 2 and depth > 0:
        lines = [f"if {_cond(draw, ctx, edepth)}:", *_indent(block(draw, ctx, depth - 1))]
        for _ in range(draw(st.integers(0, 2))):
            lines += [f"elif {_cond(draw, ctx, edepth)}:", *_indent(block(draw, ctx, depth - 1))]
        if draw(st.booleans()):
            lines += ["else:", *_indent(block(draw, ctx, depth - 1))]
        return lines
    if kind == 3 and depth > 0 and ctx.loop_depth == 0:
        # never over a set: CPython's order for strings depends on the hash seed
        sources = ["NAMES", "TABLE", "ALIASES", "['auto', 'triton', None]", "(1, 2, 3)"]
        # over a parameter: characters of a string, or a TypeError for None/int/bool
        sources += [*ctx.names.get("str", []), *ctx.names.get("any", [])][:1]
        source = draw(st.sampled_from(sources))
        sort = "int" if source == "(1, 2, 3)" else "any" if source in ("['auto', 'triton', None]", "a", "b", "c") else "str"
        inner = _Ctx(
            names={**ctx.names, sort: [*ctx.names.get(sort, []), "item"]},
            helper_sort=ctx.helper_sort, has_out=ctx.has_out, has_cfg=ctx.has_cfg,
            assignable=ctx.assignable, loop_depth=ctx.loop_depth + 1,
        )
        body = block(draw, inner, depth - 1)
        if draw(st.integers(0, 2)) == 0:
            body = [*body, f"if {_cond(draw, inner, edepth)}:", "    break"]
        lines = [f"for item in {source}:", *_indent(body)]
        if draw(st.integers(0, 3)) == 0:
            lines += ["else:", *_indent(block(draw, ctx, depth - 1, max_size=1))]
        return lines
    if kind in (4, 5) and ctx.assignable:
        name = draw(st.sampled_from(sorted(ctx.assignable)))
        sort = ctx.assignable[name]
        if sort == "int" and draw(st.booleans()):
            op = draw(st.sampled_from(("+=", "-=", "*=", "//=")))
            return [f"{name} {op} {expr(draw, ctx, 'int', edepth)}"]
        if sort == "str" and draw(st.integers(0, 3)) == 0:
            return [f"{name} += {expr(draw, ctx, 'str', edepth)}"]
        return [f"{name} = {expr(draw, ctx, sort, edepth)}"]
    if kind == 6 and ctx.has_out:
        if draw(st.integers(0, 4)) == 0:  # list += any iterable extends in place
            rhs = draw(st.sampled_from(("[x]", "(x,)", "x", "NAMES", "[n, flag]")))
            for local in ("x", "n", "flag"):
                if local in rhs and local not in ctx.assignable:
                    rhs = "[None]"
            return [f"out += {rhs}"]
        if draw(st.integers(0, 3)) == 0:
            return [f"out.extend([{expr(draw, ctx, 'any', edepth)}, {expr(draw, ctx, 'any', edepth)}])"]
        return [f"out.append({expr(draw, ctx, 'any', edepth)})"]
    if kind == 7 and ctx.has_cfg:
        return [f"cfg[{_lit(draw(st.sampled_from(KEYS)))}] = {expr(draw, ctx, 'any', edepth)}"]
    if kind == 8:
        if draw(st.integers(0, 3)) == 0:
            return [f"assert {_cond(draw, ctx, edepth)}"]
        return [f"assert {_cond(draw, ctx, edepth)}, {_message(draw, ctx, edepth)}"]
    if kind == 9 and draw(st.booleans()):
        return [f"raise ValueError({_message(draw, ctx, edepth)})"]
    if kind == 10:
        return [f"return {_return_value(draw, ctx, edepth)}"]
    if kind == 11 and ctx.loop_depth > 0:
        return [draw(st.sampled_from(("break", "continue")))]
    if kind == 12 and depth > 0 and draw(st.booleans()):
        return _try(draw, ctx, depth, edepth)
    if kind == 12:
        return _unpack(draw, ctx, edepth)
    # a guarded early return/raise: the typical shape of argument validation
    test = _cond(draw, ctx, edepth)
    if draw(st.booleans()):
        return [f"if {test}:", f"    return {_return_value(draw, ctx, edepth)}"]
    return [f"if {test}:", f"    raise ValueError({_message(draw, ctx, edepth)})"]


def _try(draw, ctx: _Ctx, depth: int, edepth: int) -> list[str]:
    """try/except around code that may fail (a table lookup, a None method call)."""
    lines = ["try:", *_indent(block(draw, ctx, depth - 1))]
    for _ in range(draw(st.integers(1, 2))):
        exc = draw(st.sampled_from((
            "KeyError", "ValueError", "(TypeError, AttributeError)", "LookupError", "Exception",
            "IndexError", "AssertionError",
        )))
        handler = draw(st.sampled_from(("pass", "return", "raise_from_e", "block")))
        if handler == "pass":
            body = ["pass"]
        elif handler == "return":
            body = [f"return {_return_value(draw, ctx, edepth)}"]
        elif handler == "raise_from_e":
            wrap = draw(st.sampled_from(('f"bad: {e}"', "str(e)", "repr(e)", 'f"{e!r}"', "e.args")))
            body = [f"raise ValueError({wrap})" if wrap != "e.args" else "return e.args"]
        else:
            body = block(draw, ctx, depth - 1, max_size=2)
        lines += [f"except {exc} as e:" if handler == "raise_from_e" else f"except {exc}:", *_indent(body)]
    if draw(st.integers(0, 3)) == 0:
        lines += ["else:", *_indent(block(draw, ctx, depth - 1, max_size=1))]
    if draw(st.integers(0, 3)) == 0:
        lines += ["finally:", *_indent(block(draw, ctx, depth - 1, max_size=1))]
    return lines


def _unpack(draw, ctx: _Ctx, depth: int) -> list[str]:
    """`quant, fmt = name.split(":")`: ValueError unless there is exactly one ':'."""
    subject = draw(st.sampled_from((
        f"{expr(draw, ctx, 'str', depth)}.split(':')",
        f"({expr(draw, ctx, 'int', depth)}, {expr(draw, ctx, 'int', depth)})",
        expr(draw, ctx, "any", depth),  # TypeError: cannot unpack non-iterable int object
    )))
    targets = draw(st.sampled_from(("head, tail", "head, *tail", "*tail, head", "(head, tail)")))
    use = draw(st.sampled_from(("return", "if")))
    if use == "return":
        return [f"{targets} = {subject}", "return head, tail"]
    return [f"{targets} = {subject}", f"if head == {_lit(draw(st.sampled_from(STR_LITERALS)))}:",
            "    return tail"]


def _return_value(draw, ctx: _Ctx, depth: int) -> str:
    kind = draw(st.integers(0, 5))
    if kind == 0 and ctx.has_out:
        return "out"
    if kind == 1 and ctx.has_cfg:
        return "cfg"
    if kind == 2:
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        return "{" + ", ".join(f"{_lit(k)}: {expr(draw, ctx, 'any', depth)}" for k in keys) + "}"
    return expr(draw, ctx, "any", depth)


# ---- whole programs -------------------------------------------------------------------
def _constants(draw) -> list[str]:
    names = draw(st.lists(st.sampled_from(BACKENDS), min_size=0, max_size=4, unique=True))
    froz = draw(st.lists(st.sampled_from(BACKENDS), min_size=0, max_size=4, unique=True))
    table = draw(st.dictionaries(st.sampled_from(BACKENDS), st.sampled_from(INT_LITERALS), max_size=4))
    aliases = draw(st.dictionaries(st.sampled_from(BACKENDS), st.sampled_from(BACKENDS), max_size=3))
    names_text = _lit(tuple(names)) if draw(st.booleans()) else _lit(list(names))
    froz_text = "frozenset({" + ", ".join(_lit(x) for x in froz) + "})" if froz else "frozenset()"
    return [
        f"NAMES = {names_text}",
        f"FROZ = {froz_text}",
        f"TABLE = {_lit(table)}",
        f"ALIASES = {_lit(aliases)}",
    ]


@st.composite
def programs(draw, maybe_unbound: bool = False) -> Program:
    """A module with ``helper`` (sometimes) and ``f``.  With ``maybe_unbound`` the locals
    of ``f`` are first assigned inside an ``if``, so a read may find them unbound."""
    param_sorts = tuple(draw(st.sampled_from(SORTS)) for _ in PARAMS)
    helper_sort = draw(st.sampled_from(("str", "int", "bool", None)))
    lines = _constants(draw)

    if helper_sort is not None:
        hctx = _Ctx(names={"str": ["s"], "int": ["n"]}, helper_sort=None, has_out=False,
                    has_cfg=False, assignable={"s": "str", "n": "int"})
        body = block(draw, hctx, MAX_STMT_DEPTH - 1, min_size=0, max_size=2)
        body.append(f"return {expr(draw, hctx, helper_sort, draw(st.integers(0, MAX_EXPR_DEPTH)))}")
        lines += ["", "", "def helper(s, n=1):", *_indent(body)]

    names: dict[str, list[str]] = {}
    for p, sort in zip(PARAMS, param_sorts, strict=True):
        names.setdefault(sort, []).append(p)
    pctx = _Ctx(names=names, helper_sort=helper_sort, has_out=False, has_cfg=False)
    body: list[str] = []
    assignable: dict[str, str] = {}
    for local, sort in LOCAL_SORT.items():
        if draw(st.booleans()):
            assignment = f"{local} = {expr(draw, pctx, sort, draw(st.integers(0, 2)))}"
            if maybe_unbound and draw(st.booleans()):
                body += [f"if {_cond(draw, pctx, 1)}:", f"    {assignment}"]
            else:
                body.append(assignment)
            assignable[local] = sort
    has_out = draw(st.booleans())
    has_cfg = draw(st.booleans())
    if has_out:
        body.append("out = []")
    if has_cfg:
        body.append("cfg = {}")
    full_names = {k: list(v) for k, v in names.items()}
    for local, sort in assignable.items():
        full_names.setdefault(sort, []).append(local)
    ctx = _Ctx(names=full_names, helper_sort=helper_sort, has_out=has_out, has_cfg=has_cfg,
               assignable=assignable)
    body += block(draw, ctx, MAX_STMT_DEPTH, min_size=1, max_size=5)
    if draw(st.integers(0, 5)) != 0:
        body.append(f"return {_return_value(draw, ctx, draw(st.integers(0, MAX_EXPR_DEPTH)))}")
    lines += ["", "", f"def f({', '.join(PARAMS)}):", *_indent(body), ""]
    return Program("\n".join(lines), param_sorts)


def arguments(program: Program) -> st.SearchStrategy[tuple]:
    return st.tuples(*(VALUE_OF_SORT[s] for s in program.param_sorts))


@st.composite
def cases(draw, min_args: int = 3, max_args: int = 8,
          maybe_unbound: bool = False) -> tuple[Program, list[tuple]]:
    """A program and ``min_args``..``max_args`` distinct argument tuples for it (fewer when
    the parameters' domain is smaller)."""
    program = draw(programs(maybe_unbound=maybe_unbound))
    size = 1
    for sort in program.param_sorts:
        size *= {"str": len(BACKENDS) + 1, "int": len(INT_VALUES), "bool": 2}.get(sort, 30)
    args = draw(st.lists(arguments(program), min_size=min(min_args, size), max_size=max_args, unique_by=repr))
    return program, args

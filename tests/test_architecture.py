"""The pipeline is visible in the folders: a stage imports only from the stages before it.

source → frontend → evaluate → inputs → hfconfig → world → resolve → rules → analyses → render → cli; the data
model (`result`), `errors`, `shipped` and `factfiles` (the tool's own data), `cachedir` and `userfiles` from anywhere.
Every import counts, at module level or inside a function, so a cycle cannot hide behind a
deferred import.
"""

from __future__ import annotations

import ast
import tokenize
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "sglang_audit"
STAGES = ["source", "frontend", "evaluate", "inputs", "hfconfig", "world", "resolve", "rules", "analyses", "render", "cli"]
BASE = {"sglang_audit", "sglang_audit.errors", "sglang_audit.result", "sglang_audit.shipped", "sglang_audit.factfiles",
        "sglang_audit.factschema",
        "sglang_audit.cachedir",
        "sglang_audit.userfiles"}
# the evaluator knows no SGLang, no torch, no command line: nothing of these names in its code
EVALUATE_FORBIDDEN_WORDS = ("sglang.", "torch", "click", "server_args")


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from pkg import module` imports the module
                full = f"{target}.{alias.name}"
                is_mod = (PACKAGE.parent / (full.replace(".", "/") + ".py")).is_file() or \
                    (PACKAGE.parent / full.replace(".", "/")).is_dir()
                out.add(full if is_mod else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.split(".")[0] == "sglang_audit" and m != mod}


ENTRY = "sglang_audit.__main__"  # `python -m sglang_audit`: the command line's own entry, the cli stage


def _stage(mod: str) -> int | None:
    if mod == ENTRY:
        return STAGES.index("cli")
    parts = mod.split(".")
    if mod in BASE or len(parts) < 2 or parts[1] not in STAGES:
        return None
    return STAGES.index(parts[1])


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for path in PACKAGE.rglob("*.py"):
        g.add_node(_module(path))
        for dep in _imports(path):
            g.add_edge(_module(path), dep)
    return g


def test_every_module_is_in_a_stage_or_the_base() -> None:
    loose = sorted(m for m in _graph() if m not in BASE and _stage(m) is None and not m.startswith("sglang_audit._"))
    assert loose == [], f"modules outside the pipeline's folders: {loose}"


def _violations(g: nx.DiGraph) -> list[str]:
    bad = []
    for a, b in g.edges:
        sa, sb = _stage(a), _stage(b)
        if b in BASE or sb is None:
            continue
        if sa is None:
            bad.append(f"{a} (base) imports {b}")
        elif sb > sa:
            bad.append(f"{a} ({STAGES[sa]}) imports {b} ({STAGES[sb]})")
    return sorted(bad)


def test_a_stage_imports_only_from_stages_before_it() -> None:
    bad = _violations(_graph())
    assert bad == [], "\n".join(bad)


def test_no_import_cycle() -> None:
    cycles = list(nx.simple_cycles(_graph()))
    assert cycles == [], cycles


def _code_words(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every code token and string literal; comments and docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                doc_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    with path.open("rb") as fh:
        return [(tok.start[0], tok.string) for tok in tokenize.tokenize(fh.readline)
                if tok.type not in (tokenize.COMMENT, tokenize.ENCODING) and tok.start[0] not in doc_lines]


def test_the_evaluator_knows_no_sglang_torch_or_command_line() -> None:
    hits = [f"{path.name}:{n}: {text}" for path in (PACKAGE / "evaluate").rglob("*.py")
            for n, text in _code_words(path) if any(w in text for w in EVALUATE_FORBIDDEN_WORDS)]
    assert hits == [], hits


def test_the_checker_sees_a_violation() -> None:
    """The direction check itself: a backwards import is reported, a base import is not."""
    g = _graph()
    g.add_edge("sglang_audit.evaluate.values", "sglang_audit.cli.main")
    g.add_edge("sglang_audit.evaluate.values", "sglang_audit.result")
    assert _violations(g) == ["sglang_audit.evaluate.values (evaluate) imports sglang_audit.cli.main (cli)"]


def test_long_modules_say_why() -> None:
    """No module over ~800 lines without a reason written at its top."""
    silent = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 800 and "Why this module is long:" not in (ast.get_docstring(ast.parse(text)) or ""):
            silent.append(f"{path.relative_to(PACKAGE)} ({text.count(chr(10))} lines)")
    assert silent == [], silent


# ---- the interpreter's contract (issue 40 step 1) --------------------------------------------
# Outside evaluate/, an interpreter is used through its methods and its declared extension
# points (hooked_calls, filtered_decisions, watched_imports, enter_path/leave_path, set_policy,
# budget, message_mode): no stage writes, deletes or replaces an interpreter attribute or
# method. An interpreter is whatever such code names interp/interpreter (or self.interp).
_INTERP_NAMES = {"interp", "interpreter"}


def _names_interpreter(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _INTERP_NAMES
    return isinstance(node, ast.Attribute) and node.attr in _INTERP_NAMES


def _interpreter_writes(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and node.args and _names_interpreter(node.args[0])):
            out.append((node.lineno, f"{node.func.id}(...)"))
        for target in targets:
            for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(t, ast.Attribute) and _names_interpreter(t.value):
                    out.append((node.lineno, t.attr))
    return out


def test_no_stage_writes_an_interpreter_attribute() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "evaluate" in path.relative_to(PACKAGE).parts:
            continue
        for line, attr in _interpreter_writes(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(PACKAGE)}:{line} {attr}")
    assert found == [], found


def test_the_interpreter_write_check_sees_a_write() -> None:
    code = ("interp.call_hook = h\nself.interp.decide = d\ndel interp.load_module\n"
            "interp.decisions, interp.taken = {}, []\nsetattr(interp, 'reads', [])\ninterp.reads += []\n"
            "result.taken = interp.taken\n")  # the last one reads the interpreter: allowed
    assert sorted(_interpreter_writes(ast.parse(code))) == [
        (1, "call_hook"), (2, "decide"), (3, "load_module"), (4, "decisions"), (4, "taken"), (5, "setattr(...)"), (6, "reads")]


# ---- names (issue 40 step 5) -----------------------------------------------------------------
# A leading underscore says "only this module uses it": another module that needs the name
# gets it promoted (a public name, its docstring saying why) or moved to its proper home
# (resolve/layerstage.py for what the layer stages share). Tests may still reach in.
_MODULES = {_module(p) for p in PACKAGE.rglob("*.py")}


def _private_uses(tree: ast.AST, mod: str, pkg: str) -> list[tuple[int, str]]:
    """``from sglang_audit.X import _name`` (absolute or relative) of another module, and
    ``m._name`` where ``m`` is another module of the package bound by an import."""
    out: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # local name -> the package module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "sglang_audit":
                continue
            for alias in node.names:
                if f"{source}.{alias.name}" in _MODULES:
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif alias.name.startswith("_") and not alias.name.startswith("__") and source != mod:
                    out.append((node.lineno, f"from {source} import {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in _MODULES:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            dotted: list[str] = []
            value: ast.expr = node.value
            while isinstance(value, ast.Attribute):
                dotted.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                target = ".".join([modules[value.id], *dotted])
                if target in _MODULES and target != mod:
                    out.append((node.lineno, f"{target}.{node.attr}"))
            elif isinstance(value, ast.Name) and value.id == "sglang_audit":
                target = ".".join([value.id, *dotted])
                if target in _MODULES and target != mod:
                    out.append((node.lineno, f"{target}.{node.attr}"))
    return sorted(out)


def test_no_module_uses_another_modules_private_names() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = _module(path)
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for line, text in _private_uses(ast.parse(path.read_text(encoding="utf-8")), mod, pkg):
            found.append(f"{path.relative_to(PACKAGE)}:{line} {text}")
    assert found == [], "\n".join(found)


def test_the_private_name_check_sees_a_use() -> None:
    code = ("from sglang_audit.resolve.layers import _explore, evaluate_layers\n"
            "from .draft import _Passed\n"
            "from sglang_audit.resolve import draft as d\n"
            "import sglang_audit.resolve.kernelread as kr\n"
            "from sglang_audit.resolve import linear\n"
            "d._draft_step(); kr._arg(); linear.SETTING; d.__name__\n"
            "import sglang_audit.resolve.workers\n"
            "sglang_audit.resolve.workers._FAILED\n"
            "from sglang_audit.resolve.layerstage import _unset_attribute\n")  # its own: allowed
    assert _private_uses(ast.parse(code), "sglang_audit.resolve.layerstage", "sglang_audit.resolve") == [
        (1, "from sglang_audit.resolve.layers import _explore"), (2, "from sglang_audit.resolve.draft import _Passed"),
        (6, "sglang_audit.resolve.draft._draft_step"), (6, "sglang_audit.resolve.kernelread._arg"),
        (8, "sglang_audit.resolve.workers._FAILED")]

"""Every path of one evaluation: the assignments of the unknown inputs it branches on.

``explore_paths`` runs ``run`` once per assignment, depth first: each run starts from
``base`` (the decisions already in force) plus the alternatives pending, and each decision
a run meets first is flipped for a later run, as the resolver does for ServerArgs and the
layer stage for a layer's tensor branches. The state of the path that called it is restored
afterwards (``Interpreter.enter_path``/``leave_path``), so what an inner question decides
never leaks into the caller's path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sglang_audit.evaluate.interpreter import Interpreter, PathState

T = TypeVar("T")


EXHAUSTIVE = "exhaustive"  # every combination of the decisions met (depth first)
ONE_AT_A_TIME = "one_at_a_time"  # the first path, then each of its decisions flipped alone


def explore_paths(interp: Interpreter, run: Callable[[], T], max_paths: int, strategy: str = EXHAUSTIVE,
                  until: Callable[[T], bool] | None = None) -> tuple[list[tuple[T, PathState]], bool]:
    """Each path's result with the path (its decisions and the conditions it took), and
    whether every path the strategy asks for was run (False: more than ``max_paths``).
    ``ONE_AT_A_TIME`` costs one run per decision of the first path instead of one per
    combination. ``until``: stop at the first result it accepts (depth first, the latest
    decision flipped first: a path that stops at a raise backs off the decision nearest to
    it), for a question one reaching path answers; the caller says so."""
    base = dict(interp.decisions)
    pending: list[dict[str, bool]] = [{}]
    out: list[tuple[T, PathState]] = []
    while pending:
        if len(out) >= max_paths:
            return out, False
        extra = pending.pop()
        saved = interp.enter_path({**base, **extra})
        try:
            result = run()
        finally:
            ran = interp.leave_path(saved)
        out.append((result, ran))
        if until is not None and until(result):
            return out, True
        if strategy == ONE_AT_A_TIME:
            if not extra:
                pending.extend({d.key: not d.first} for d in reversed(ran.new_decisions))
            continue
        prefix = dict(extra)
        for d in ran.new_decisions:
            alt = dict(prefix)
            alt[d.key] = not d.first
            pending.append(alt)
            prefix[d.key] = d.first
    return out, True

"""Every path of one evaluation: the assignments of the unknown inputs it branches on.

One frontier loop (``explore``) for every stage: it runs ``run`` once per assignment,
depth first, each run starting from the strategy's forced decisions plus the
alternatives pending, and asks the strategy which alternatives the decisions a run met
first open. The strategies are chosen here, by name, never by a flag elsewhere:

- ``EXHAUSTIVE``: every combination of the decisions met (ServerArgs' paths, the draft's
  constructor);
- ``ONE_AT_A_TIME``: the first path, then each of its decisions flipped alone (a backend
  constructor with dozens of branches on runtime state);
- a stage's own ``Strategy`` (the MoE layer's tensor branches: ``resolve/layers.py``).

``explore_paths`` runs the paths inside one interpreter, restoring the state of the path
that called it afterwards (``Interpreter.enter_path``/``leave_path``), so what an inner
question decides never leaks into the caller's path; the resolver's re-running loop calls
``explore`` with a fresh interpreter per path (forking at a branch instead is
``resolve/pathforks.py``, the one other way a path is taken).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from sglang_audit.evaluate.interpreter import Interpreter, PathState
from sglang_audit.evaluate.values import Decision

T = TypeVar("T")


class Strategy(Protocol):
    """Which paths follow a run: the alternatives a run's first-met decisions open."""

    def forced(self) -> dict[str, bool]:
        """Decisions every path run from now on starts with (below the pending ones)."""
        ...

    def alternatives(self, extra: dict[str, bool], new: Sequence[Decision]) -> list[dict[str, bool]]:
        """The assignments to run later, given the run's own (``extra``) and the decisions it
        met first, in the order met; the last one returned runs first."""
        ...


class Exhaustive:
    """Every combination: each decision met opens its other outcome, with the ones before
    it as this path took them."""

    def forced(self) -> dict[str, bool]:
        return {}

    def alternatives(self, extra: dict[str, bool], new: Sequence[Decision]) -> list[dict[str, bool]]:
        out: list[dict[str, bool]] = []
        prefix = dict(extra)
        for d in new:
            alt = dict(prefix)
            alt[d.key] = not d.first
            out.append(alt)
            prefix[d.key] = d.first
        return out


class OneAtATime:
    """The first path, then each of its decisions flipped alone: one run per decision of the
    first path instead of one per combination."""

    def forced(self) -> dict[str, bool]:
        return {}

    def alternatives(self, extra: dict[str, bool], new: Sequence[Decision]) -> list[dict[str, bool]]:
        return [] if extra else [{d.key: not d.first} for d in reversed(new)]


EXHAUSTIVE: Strategy = Exhaustive()
ONE_AT_A_TIME: Strategy = OneAtATime()


def explore(run: Callable[[dict[str, bool]], tuple[T, Sequence[Decision]]], max_paths: int,
            strategy: Strategy = EXHAUSTIVE, until: Callable[[T], bool] | None = None,
            stop: Callable[[T], bool] | None = None) -> tuple[list[T], bool]:
    """Each path's result, in the order run, and whether every path the strategy asks for
    was run. ``run(decisions)`` takes a path and returns its result and the decisions it met
    first. ``until``: stop at the first result it accepts (complete: the question is
    answered; depth first, the latest decision flipped first, so a path that stops at a
    raise backs off the decision nearest to it). ``stop``: after this result, paths still
    pending are not run (incomplete: a budget spent)."""
    pending: list[dict[str, bool]] = [{}]
    out: list[T] = []
    while pending:
        if len(out) >= max_paths:
            return out, False
        extra = pending.pop()
        result, new = run({**strategy.forced(), **extra})
        out.append(result)
        if until is not None and until(result):
            return out, True
        if stop is not None and pending and stop(result):
            return out, False
        pending.extend(strategy.alternatives(extra, new))
    return out, True


def explore_paths(interp: Interpreter, run: Callable[[], T], max_paths: int, strategy: Strategy = EXHAUSTIVE,
                  until: Callable[[T], bool] | None = None) -> tuple[list[tuple[T, PathState]], bool]:
    """``explore`` inside one interpreter: each path's result with the path (its decisions and
    the conditions it took), every path starting from the decisions already in force."""
    base = dict(interp.decisions)

    def one(decisions: dict[str, bool]) -> tuple[tuple[T, PathState], Sequence[Decision]]:
        saved = interp.enter_path({**base, **decisions})
        try:
            result = run()
        finally:
            ran = interp.leave_path(saved)
        return (result, ran), ran.new_decisions

    return explore(one, max_paths, strategy, None if until is None else (lambda r: until(r[0])))

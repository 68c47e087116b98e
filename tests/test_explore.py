"""The one frontier loop every stage explores its paths with (evaluate/explore.py), and the one
classifier of how an evaluation ended (evaluate/ending.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sglang_audit.evaluate.ending import BOUND, INTERNAL, RAISE, RECURSION, UNMODELLED, ending
from sglang_audit.evaluate.explore import EXHAUSTIVE, ONE_AT_A_TIME, explore
from sglang_audit.evaluate.interpreter import PyRaise, Unmodelled
from sglang_audit.evaluate.values import AnalysisBound, Decision


def _d(key: str) -> Decision:
    return Decision(key, "unknown", "m.py", 1, key)


def _tree(decisions: dict[str, bool]) -> tuple[str, list[Decision]]:
    """``if a: (if b: ...) else: (if c: ...)``: the path's label and the decisions it met
    first (those not given)."""
    met = ["a", "b" if decisions.get("a", True) else "c"]
    label = "".join(k if decisions.get(k, True) else k.upper() for k in met)
    return label, [_d(k) for k in met if k not in decisions]


def test_exhaustive_runs_every_combination_depth_first() -> None:
    paths, complete = explore(_tree, 10, EXHAUSTIVE)
    # the latest decision flipped first; a's other side opens c
    assert paths == ["ab", "aB", "Ac", "AC"]
    assert complete


def test_one_at_a_time_flips_each_decision_of_the_first_path_alone() -> None:
    paths, complete = explore(_tree, 10, ONE_AT_A_TIME)
    assert paths == ["ab", "Ac", "aB"]  # not AC: c is met only off the first path
    assert complete


def test_max_paths_leaves_the_exploration_incomplete() -> None:
    paths, complete = explore(_tree, 2, EXHAUSTIVE)
    assert paths == ["ab", "aB"] and not complete


def test_until_ends_at_the_first_accepted_result_complete() -> None:
    paths, complete = explore(_tree, 10, EXHAUSTIVE, until=lambda r: r.startswith("A"))
    assert paths == ["ab", "aB", "Ac"] and complete


def test_stop_leaves_pending_paths_unrun_and_incomplete() -> None:
    runs: list[str] = []

    def run(decisions: dict[str, bool]) -> tuple[str, list[Decision]]:
        label, new = _tree(decisions)
        runs.append(label)
        return label, new

    paths, complete = explore(run, 10, EXHAUSTIVE, stop=lambda r: r == "aB")
    assert paths == ["ab", "aB"] and runs == paths and not complete
    # a stop on the last pending path is no stop: nothing was left unrun
    paths, complete = explore(run, 10, EXHAUSTIVE, stop=lambda r: r == "AC")
    assert paths == ["ab", "aB", "Ac", "AC"] and complete


class _ForceA:
    """A stage's own strategy: a forced default below the pending alternatives."""

    def forced(self) -> dict[str, bool]:
        return {"a": False}

    def alternatives(self, extra: dict[str, bool], new: Sequence[Decision]) -> list[dict[str, bool]]:
        return EXHAUSTIVE.alternatives(extra, new)


def test_a_strategys_forced_decisions_start_every_path() -> None:
    paths, complete = explore(_tree, 10, _ForceA())
    assert paths == ["Ac", "AC"] and complete


# ---- how an evaluation ended (evaluate/ending.py), the one classifier of every stage -------


def test_ending_tells_a_raise_a_stop_and_a_defect_apart() -> None:
    raised = PyRaise("exc", "sglang/srt/server_args.py", 12)
    end = ending(raised)
    assert (end.kind, end.raised, end.stopped) == (RAISE, raised, False)
    stop = Unmodelled("iteration over an unknown")
    stop.where = "sglang/srt/x.py:3"  # type: ignore[attr-defined]
    end = ending(stop)
    assert (end.kind, end.stopped) == (UNMODELLED, True)
    assert end.reason == "iteration over an unknown (evaluation stopped at sglang/srt/x.py:3)"
    assert ending(AnalysisBound("more than 64 paths")).kind == BOUND
    end = ending(RecursionError())
    assert (end.kind, end.reason) == (RECURSION, "analysis bound reached: recursion too deep")
    end = ending(KeyError("k"))
    assert (end.kind, end.reason, end.stopped) == (INTERNAL, "internal evaluator error (KeyError: 'k')", False)


def test_strict_mode_lets_an_evaluator_defect_fail() -> None:
    with pytest.raises(TypeError, match="defect"):
        ending(TypeError("defect"), strict=True)
    assert ending(Unmodelled("x"), strict=True).kind == UNMODELLED  # a stop is no defect

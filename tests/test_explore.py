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


# ---- the layer stages, one table (resolve/stages.py) -----------------------------------------


def test_the_stage_table_gives_each_setting_to_one_stage_in_order() -> None:
    from sglang_audit.resolve.stages import LAYER_STAGES, STAGES

    assert [s.name for s in STAGES] == ["moe", "moe_draft", "attention", "spec_worker", "linear"]
    owned = [name for s in STAGES for name in s.settings]
    assert len(owned) == len(set(owned)) and list(LAYER_STAGES) == [s.name for s in STAGES]


def _stage(evaluate, models: str = "target"):  # type: ignore[no-untyped-def]
    from sglang_audit.resolve.stages import LayerStage

    return LayerStage("s", ("x_backend", "y_backend"), "moe", evaluate, "layer evaluation", models=models)


def test_a_stage_that_stops_costs_only_its_own_first_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    def stops(interp, sa, mc, dc):  # type: ignore[no-untyped-def]
        raise Unmodelled("iteration over an unknown")

    out = _stage(stops).run(None, None, {"model_config": object()}, lambda: 0.0)  # type: ignore[arg-type]
    assert list(out) == ["x_backend"] and out["x_backend"].status == "unknown"
    assert out["x_backend"].reason == "layer evaluation failed (Unmodelled: iteration over an unknown); treated as unknown"

    def defect(interp, sa, mc, dc):  # type: ignore[no-untyped-def]
        raise KeyError("k")

    with pytest.raises(KeyError):  # the suite runs strict: a defect fails the tests
        _stage(defect).run(None, None, {"model_config": object()}, lambda: 0.0)  # type: ignore[arg-type]
    monkeypatch.setenv("SGLANG_AUDIT_STRICT", "0")
    out = _stage(defect).run(None, None, {"model_config": object()}, lambda: 0.0)  # type: ignore[arg-type]
    assert out["x_backend"].reason.startswith("layer evaluation failed (KeyError")


def test_a_stage_gets_the_configs_it_names_and_a_draft_stage_needs_a_draft() -> None:
    seen: list[tuple[object, object]] = []

    def record(interp, sa, mc, dc):  # type: ignore[no-untyped-def]
        seen.append((mc, dc))
        return {}

    target, draft = object(), object()
    for models in ("target", "draft", "both"):
        _stage(record, models).run(None, None, {"model_config": target, "draft_model_config": draft}, lambda: 0.0)  # type: ignore[arg-type]
    assert seen == [(target, None), (None, draft), (target, draft)]
    assert _stage(record, "draft").run(None, None, {"model_config": target}, lambda: 0.0) == {}  # type: ignore[arg-type]
    assert len(seen) == 3

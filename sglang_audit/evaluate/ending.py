"""How an evaluation ended, classified once for every stage.

An evaluation of the analysed code ends in one of five ways, and each stage (ServerArgs'
paths, the MoE layers, the attention backends, the draft model) must tell them apart the
same way:

- ``raise``: the analysed code raised (``PyRaise``): SGLang's verdict when it is an explicit
  raise or assert of its own, the stage decides;
- ``unmodelled``: the evaluator met a construct whose effects it cannot bound;
- ``bound``: a bound on work was reached (steps, paths, CPU time);
- ``recursion``: the host's recursion limit;
- ``internal``: a data operation of the evaluator itself failed (an evaluator defect): never
  SGLang's verdict; with ``strict`` (the test suite) it propagates, so a defect cannot hide
  behind ``unknown``.

``except EVALUATION_ENDS as exc: end = ending(exc, strict)`` is the one ladder; the stage
turns the ``Ending`` into its own outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_audit.evaluate.interpreter import PyRaise, Unmodelled, stop_reason
from sglang_audit.evaluate.values import AnalysisBound

# what an evaluation can end with besides returning (a stage's own control exceptions, such
# as a kernel entry point reached, are caught before these)
EVALUATION_ENDS: tuple[type[BaseException], ...] = (
    PyRaise, Unmodelled, AnalysisBound, RecursionError,
    ArithmeticError, MemoryError, ValueError, TypeError, KeyError, IndexError, AttributeError,
)

RAISE, UNMODELLED, BOUND, RECURSION, INTERNAL = "raise", "unmodelled", "bound", "recursion", "internal"


@dataclass(frozen=True)
class Ending:
    kind: str  # RAISE, UNMODELLED, BOUND, RECURSION or INTERNAL
    reason: str  # for an unknown: where and why evaluation stopped
    exc: BaseException
    raised: PyRaise | None = None  # kind RAISE: the analysed code's exception

    @property
    def stopped(self) -> bool:
        """The evaluator stopped (unmodelled or a bound), as opposed to a raise or a defect."""
        return self.kind in (UNMODELLED, BOUND)


def ending(exc: BaseException, strict: bool = False) -> Ending:
    """The ending of an evaluation that raised ``exc`` (one of ``EVALUATION_ENDS``)."""
    if isinstance(exc, PyRaise):
        return Ending(RAISE, f"{exc.file}:{exc.line}", exc, exc)
    if isinstance(exc, Unmodelled):
        return Ending(UNMODELLED, stop_reason(exc), exc)
    if isinstance(exc, AnalysisBound):
        return Ending(BOUND, stop_reason(exc), exc)
    if isinstance(exc, RecursionError):
        return Ending(RECURSION, "analysis bound reached: recursion too deep", exc)
    if strict:
        raise exc
    return Ending(INTERNAL, f"internal evaluator error ({type(exc).__name__}: {exc})", exc)

"""The layer stages: one table of the stages that build SGLang's layers with the resolved
settings, in the order they run on one interpreter.

A stage evaluates SGLang's own layer code for the target (or the draft) model and gives the
layer value of the settings it owns; it runs on the interpreter the stages before it left
(their imports, the globals they published). Its own branches never become resolver paths,
and an evaluation that ends in an evaluator stop or defect costs only its own settings' layer
values (``evaluate/ending.py`` classifies the end).

To add a stage: write ``evaluate(interp, server_args, model_config, draft_config)`` returning
``{setting: LayerValue}`` (see ``layers.evaluate_layers``), register a ``LayerStage`` below at
its place in the order, and give its settings in rules/settings.toml. ``Target.layer_stages``
and explain's forced choices select stages by name from this table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_audit.errors import strict_mode
from sglang_audit.evaluate.ending import EVALUATION_ENDS, ending
from sglang_audit.evaluate.interpreter import Interpreter
from sglang_audit.resolve.attention import ATTENTION_CPU_SECONDS, evaluate_attention
from sglang_audit.resolve.layers import evaluate_layers
from sglang_audit.resolve.linear import LINEAR_CPU_SECONDS, evaluate_linear
from sglang_audit.resolve.spec_worker import WORKER_CPU_SECONDS, evaluate_spec_worker
from sglang_audit.result import STATUS_UNKNOWN, LayerValue

Evaluate = Callable[[Interpreter, Any, Any, Any], dict[str, LayerValue]]


@dataclass(frozen=True)
class LayerStage:
    name: str
    settings: tuple[str, ...]  # the settings whose layer value the stage gives
    kind: str  # LayerValue.stage of its values: "moe", "attention", "speculative" or "linear"
    evaluate: Evaluate  # (interp, server_args, model_config, draft_config) -> {setting: LayerValue}
    failure: str  # how a failed evaluation is named in the unknown's reason
    # CPU seconds the stage may spend, outside the resolution's own budget (so a slow stage
    # never turns the settings or the stages before it unknown); None: the resolution's
    cpu_budget: float | None = None
    # the model configs it is given: "target", "draft" (skipped without a draft) or "both"
    models: str = "target"
    # settings of earlier stages it builds with again (explain forces a choice of one through
    # this stage too): the draft's MoE layers take the target's runner unless the speculative
    # one is set; the speculative worker builds the draft's attention backends from the
    # attention backend (DraftBackendFactory)
    reads: tuple[str, ...] = ()

    def run(self, interp: Interpreter, server_args: Any, model: dict[str, Any],
            parse_cpu: Callable[[], float]) -> dict[str, LayerValue]:
        """The stage's layer values; an evaluation that stops makes its first setting unknown
        with the reason (in strict mode, the tests, an evaluator defect propagates)."""
        mc = model.get("model_config") if self.models != "draft" else None
        dc = model.get("draft_model_config") if self.models != "target" else None
        if self.models == "draft" and dc is None:
            return {}
        try:
            if self.cpu_budget is None:
                return self.evaluate(interp, server_args, mc, dc)
            budget = self.cpu_budget
            t0, parsed0 = time.process_time(), parse_cpu()
            # the parsing of files the stage loads is not its evaluation
            with interp.budget(lambda: time.process_time() - t0 - (parse_cpu() - parsed0) > budget):
                return self.evaluate(interp, server_args, mc, dc)
        except EVALUATION_ENDS as exc:
            ending(exc, strict_mode())  # SGLANG_AUDIT_STRICT=1: an evaluator bug fails the tests
            reason = f"{self.failure} failed ({type(exc).__name__}: {exc}); treated as unknown"
            return {self.settings[0]: LayerValue(STATUS_UNKNOWN, None, reason=reason, stage=self.kind)}


# the order they run in: the target's MoE layers, the draft's (on the interpreter the target's
# left), then the attention backends (target and draft worker: one evaluation, as the model
# runner builds both from the same server args)
STAGES: tuple[LayerStage, ...] = (
    LayerStage("moe", ("moe_runner_backend",), "moe", evaluate_layers, "layer evaluation"),
    LayerStage("moe_draft", ("speculative_moe_runner_backend",), "moe", evaluate_layers, "layer evaluation",
               models="draft", reads=("moe_runner_backend",)),
    LayerStage("attention", ("attention_backend",), "attention", evaluate_attention, "attention backend evaluation",
               cpu_budget=ATTENTION_CPU_SECONDS, models="both"),
    # the speculative worker the scheduler builds (its dispatch and constructor), last: its
    # constructors write the server args and build the draft worker's attention backends
    LayerStage("spec_worker", ("speculative_algorithm",), "speculative", evaluate_spec_worker,
               "speculative worker evaluation", cpu_budget=WORKER_CPU_SECONDS, models="both",
               reads=("attention_backend",)),
    # the dense linear layers with the model's quant config (their value is the layer value of
    # `quantization`, the draft model's its draft value), last: no other stage reads what they build
    LayerStage("linear", ("quantization",), "linear", evaluate_linear, "linear layer evaluation",
               cpu_budget=LINEAR_CPU_SECONDS, models="both"),
)

# the stage names in order -> the settings each gives (what selecting stages needs)
LAYER_STAGES: dict[str, tuple[str, ...]] = {s.name: s.settings for s in STAGES}
# the stage names in order -> the settings of earlier stages each builds with again
STAGE_READS: dict[str, tuple[str, ...]] = {s.name: s.reads for s in STAGES}
STAGE_KIND: dict[str, str] = {s.name: s.kind for s in STAGES}

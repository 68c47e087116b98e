"""The result data model shared by every stage after evaluation.

Plain frozen dataclasses, serialisable to JSON.  Renderers and rules read only these,
never the evaluator.  The JSON shape is versioned by ``SCHEMA_VERSION``; see
``docs/json-schema.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

STATUS_RESOLVED = "resolved"
STATUS_UNKNOWN = "unknown"
STATUS_UNSUPPORTED = "unsupported"
STATUS_REJECTED = "rejected"


@dataclass(frozen=True)
class UnknownValue:
    """A value the tool cannot state: why, and the values it may take (with conditions)."""

    reason: str
    candidates: tuple[Candidate, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"unknown": self.reason, "candidates": [c.to_json() for c in self.candidates]}


@dataclass(frozen=True)
class Candidate:
    value: Any  # a string/None, or "rejected: <message>"
    when: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "when": list(self.when)}


@dataclass(frozen=True)
class LayerValue:
    """What the MoE layers built with a setting do (sglang_audit/layers.py): the kernel entry
    point apply() reaches (`resolved`), the raise it hits (`unsupported`, SGLang's message and
    location), or `unknown` with the reason and the candidates of each branch."""

    status: str  # resolved | unsupported | unknown
    value: str | None  # the kernel entry point, or "<Exception>: <message>"
    method: str = ""  # the FusedMoEMethodBase subclass get_quant_method picked
    runner: str = ""  # the backend create_moe_runner built its MoeRunner with ("" if none)
    site: str = ""  # file:line of the dispatch call or the raise
    code: str = ""
    exception: str = ""
    reason: str = ""
    candidates: tuple[Candidate, ...] = ()
    paths: int = 1  # layer branches explored (branches on unknown tensors)
    # asserts on tensor data/metadata some branch hits: they fail only for a checkpoint that
    # violates them, so they are reported, never taken as the verdict
    data_dependent: tuple[str, ...] = ()
    # how it got there: quant config, method, runner, and the branch conditions of the dispatch
    chain: tuple[ChainStep, ...] = ()
    # optional packages the layer code imported, with the state assumed (--with/--without flip it)
    assumptions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "chain": [c.to_json() for c in self.chain], "assumptions": list(self.assumptions),
            "status": self.status, "value": self.value, "method": self.method, "runner": self.runner,
            "site": self.site, "code": self.code, "exception": self.exception, "reason": self.reason,
            "candidates": [c.to_json() for c in self.candidates], "paths": self.paths,
            "data_dependent": list(self.data_dependent),
        }


@dataclass(frozen=True)
class ChainStep:
    """One decision: where, the guard(s) as written, the value it produced."""

    file: str
    line: int
    guard: str
    value: Any
    code: str = ""
    layer: str = "config"  # "config" | "runtime"
    kind: str = "write"  # "default" | "flag" | "write" | "return" | "runtime"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "line": self.line, "guard": self.guard, "value": self.value,
            "code": self.code, "layer": self.layer, "kind": self.kind,
        }


@dataclass(frozen=True)
class Setting:
    name: str
    config: Any  # str | None | UnknownValue
    runtime: Any  # str | None | UnknownValue
    status: str
    chain: tuple[ChainStep, ...] = ()
    note: str = ""
    present: bool = True  # False: the release has no such field
    # what the layers do with the published value when the model is built (rules/layers.toml);
    # None: not applicable (the value is concrete, or no listed method re-decides it)
    layer: Any = None  # None | UnknownValue | LayerValue

    def to_json(self) -> dict[str, Any]:
        return {
            "config": _value_json(self.config),
            "runtime": _value_json(self.runtime),
            "layer": _value_json(self.layer),
            "status": self.status,
            "chain": [s.to_json() for s in self.chain],
            "note": self.note,
            "present": self.present,
        }


@dataclass(frozen=True)
class Rejection:
    message: str
    file: str
    line: int
    exception: str = "ValueError"
    stage: str = "config"  # config | runtime | model
    code: str = ""
    when: tuple[str, ...] = ()  # conditions, when only some paths reject

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message, "file": self.file, "line": self.line,
            "exception": self.exception, "stage": self.stage, "code": self.code,
            "when": list(self.when),
        }


@dataclass(frozen=True)
class ModelSummary:
    name: str
    path: str
    architecture: Any
    quantization: Any  # ModelConfig.quantization as the release computes it
    config_quant_method: Any  # quant_method in config.json
    draft_architecture: Any = None
    draft_quantization: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "path": self.path,
            "architecture": _value_json(self.architecture),
            "quantization": _value_json(self.quantization),
            "config_quant_method": self.config_quant_method,
            "draft_architecture": _value_json(self.draft_architecture),
            "draft_quantization": _value_json(self.draft_quantization),
        }


@dataclass(frozen=True)
class LogLine:
    file: str
    line: int
    level: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "level": self.level, "message": self.message}


@dataclass(frozen=True)
class Resolution:
    source: dict[str, Any]  # SourceTree.to_json()
    structure: str
    device: dict[str, Any]
    model: ModelSummary
    flags: dict[str, Any]
    env: dict[str, str]
    rejected: Rejection | None
    settings: dict[str, Setting]
    rejections: tuple[Rejection, ...] = ()  # conditional rejections (some paths only)
    paths: int = 1
    analysis_notes: tuple[str, ...] = ()
    logs: tuple[LogLine, ...] = ()
    files_read: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "source": {"version": self.source.get("version"), "flashinfer": self.source.get("flashinfer"), "origin": self.source.get("origin")},
            "structure": self.structure,
            "device": self.device,
            "model": self.model.to_json(),
            "flags": self.flags,
            "env": self.env,
            "rejected": self.rejected.to_json() if self.rejected else None,
            "rejections": [r.to_json() for r in self.rejections],
            "settings": {k: self.settings[k].to_json() for k in self.settings},
            "paths": self.paths,
            "analysis_notes": list(self.analysis_notes),
            "logs": [entry.to_json() for entry in self.logs],
        }


def _value_json(value: Any) -> Any:
    if isinstance(value, (UnknownValue, LayerValue)):
        return value.to_json()
    return value

"""Plain-text rendering of a Resolution (reads result data only)."""

from __future__ import annotations

from typing import Any

from .result import LayerValue, Resolution, Setting, UnknownValue


def _value(v: Any) -> str:
    if isinstance(v, UnknownValue):
        cands = ", ".join(str(c.value) for c in v.candidates)
        return f"unknown ({v.reason})" + (f" — candidates: {cands}" if cands else "")
    return "None" if v is None else str(v)


def render_resolution(res: Resolution, verbose: bool = False) -> str:
    out: list[str] = []
    src = res.source
    dev = res.device
    out.append(f"SGLang {src.get('version')} (flashinfer {src.get('flashinfer')}) — {res.structure}")
    out.append(f"device: {dev['arch']} {dev['name']}, platform {dev['platform']}" + (f", CUDA {dev['cuda']}" if dev.get("cuda") else ""))
    m = res.model
    out.append(f"model: {m.name} — {_value(m.architecture)}, quantization {_value(m.quantization)} (config.json quant_method {m.config_quant_method})")
    if m.draft_architecture is not None:
        out.append(f"draft: {_value(m.draft_architecture)}, quantization {_value(m.draft_quantization)}")
    if res.flags:
        out.append("flags: " + " ".join(f"{k}={v}" for k, v in res.flags.items()))
    if res.rejected:
        r = res.rejected
        out.append("")
        out.append(f"REJECTED by SGLang: {r.exception}: {r.message}")
        out.append(f"  at {r.file}:{r.line}" + (f"  [{r.code}]" if r.code else ""))
        return "\n".join(out) + "\n"
    for r in res.rejections:
        out.append(f"rejected when {' and '.join(r.when)}: {r.exception}: {r.message} ({r.file}:{r.line})")
    out.append("")
    width = max(len(n) for n in res.settings)
    for name, s in res.settings.items():
        if not s.present:
            continue
        out.append(_setting_line(name, s, width))
        if isinstance(s.layer, LayerValue):
            out.extend(f"{'':{width}}    {line}" for line in layer_lines(s.layer))
        elif isinstance(s.layer, UnknownValue):
            out.append(f"{'':{width}}    layers  unknown: {s.layer.reason}")
            for c in s.layer.candidates:
                out.append(f"{'':{width}}            may {c.value}  (at {', '.join(c.when)})")
        for step in s.chain if verbose or name in _PRIMARY else []:
            if step.kind in ("default",) and not verbose:
                continue
            guard = f" if {step.guard}" if step.guard and step.guard not in ("default", "set by the user") else f" ({step.guard})" if step.guard else ""
            out.append(f"{'':{width}}    {step.layer:7} {step.file}:{step.line}{guard} → {step.value!r}")
    if res.analysis_notes:
        out.append("")
        out.append("analysis notes:")
        out.extend(f"  - {n}" for n in res.analysis_notes)
    return "\n".join(out) + "\n"


def layer_lines(v: LayerValue) -> list[str]:
    """The MoE layers' outcome: kernel entry point, SGLang's raise, or unknown with candidates."""
    what = f"{v.method}" + (f", runner {v.runner}" if v.runner else "")
    if v.status == "unknown":
        lines = [f"layers  unknown: {v.reason}" + (f"  [{what}]" if v.method else "")]
        lines += [f"          may {c.value}  (when {'; '.join(c.when)})" for c in v.candidates]
    else:
        lines = [f"layers  {v.status}: {v.value} at {v.site}  [{what}]"]
    lines += [f"          assuming {a}" for a in v.assumptions]
    return lines


_PRIMARY = ("moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend")


def _setting_line(name: str, s: Setting, width: int) -> str:
    rt = ""
    if s.runtime is not None and not (not isinstance(s.runtime, UnknownValue) and s.runtime == s.config):
        rt = f" → runtime {_value(s.runtime)}"
    note = f"  [{s.note}]" if s.note else ""
    return f"{name:{width}}  {_value(s.config)}{rt}  ({s.status}){note}"

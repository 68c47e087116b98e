"""Plain-text rendering of a Resolution (reads result data only)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sglang_audit.result import (
    ROLE_APPLIED,
    ROLE_DECISION,
    ROLE_INPUT,
    ChainStep,
    LayerValue,
    ModelSummary,
    Resolution,
    Setting,
    UnknownValue,
)


def unknown_reason(v: Any) -> str | None:
    """The reason an unknown value gives (None for a known one): passed as ``shown_reason`` to
    the next value on the same line, which then says "as above"."""
    return v.reason if isinstance(v, UnknownValue) else None


def value_text(v: Any, shown_reason: str | None = None) -> str:
    """A value for a text line; an unknown's reason is printed once per line (a candidate
    that is that same unknown, or a runtime value unknown for the same reason, says so
    without repeating it)."""
    if isinstance(v, UnknownValue):
        shown: list[str] = []
        for c in v.candidates:
            text = _candidate(c.value, v.reason)
            if text not in shown:
                shown.append(text)
        cands = ", ".join(shown)
        head = "unknown (as above)" if v.reason == shown_reason else f"unknown ({v.reason})"
        return head + (f" — candidates: {cands}" if cands and shown != ["unknown"] else "")
    return "None" if v is None else str(v)


def _candidate(value: Any, reason: str) -> str:
    text = str(value)
    if text.startswith("unknown: ") and text[len("unknown: "):] in reason:
        return "unknown"  # its reason is the line's
    return text


def _origin(name: str, s: Setting, res: Resolution) -> str:
    """Where the value came from, in one phrase."""
    if isinstance(s.config, UnknownValue) or s.status == "rejected":
        return ""
    # the step that produced each value, never the last step that copied it (on 0.5.20+
    # every value ends in resolution_result's return)
    made = s.produced("config")
    if name in res.flags:
        given = res.flags[name]
        if given == s.config:
            phrase = "set by you"
        else:
            where = f" at {made.file}:{made.line}" if made is not None and made.kind != "flag" else ""
            phrase = f"rewritten from {given}{where}"
    elif made is None or made.kind == "default":
        phrase = "default"
    else:
        phrase = f"decided at {made.file}:{made.line}"
    runtime = s.produced("runtime")
    if s.runtime is not None and not isinstance(s.runtime, UnknownValue) and s.runtime != s.config and runtime is not None:
        phrase += f"; runtime decided at {runtime.file}:{runtime.line}"
    return phrase


def release_line(res: Resolution, verbose: bool = False) -> str:
    """The first line: the release and its FlashInfer pin; the resolution structure (the era,
    docs/eras.md) is the tool's own vocabulary, for -v only."""
    src = res.source
    line = f"SGLang {src.get('version')} (flashinfer {src.get('flashinfer') or 'not pinned'})"
    return f"{line} — {res.structure}" if verbose else line


def model_label(m: ModelSummary, requested: str | None = None) -> str:
    """The model as the user named it. A bundled profile standing for a Hugging Face id (an
    ``-m ORG/NAME`` not in the local HF cache, or a profile named inside --launch/--config)
    says so: it imitates that model from public reports, its files are not the hub's.
    ``requested``: the ``-m`` the user gave, when there was one (typing the profile's own
    name is no surprise: the plain name)."""
    if requested == m.name or not _bundled(m):
        return m.name
    named = requested or _hf_id(m.name) or m.name
    return f"{named} — bundled profile {m.name}, rebuilt from public reports (not the hub's files)"


def _bundled(m: ModelSummary) -> bool:
    from pathlib import Path

    from sglang_audit.shipped import profiles_dir

    try:
        return Path(m.path).resolve().parent == profiles_dir().resolve()
    except (OSError, ValueError, RuntimeError):
        return False


def _hf_id(profile: str) -> str | None:
    """The Hugging Face id a bundled profile's PROFILE.md names."""
    from sglang_audit.resolve.pipeline import profile_ids

    return next((hf for hf, name in profile_ids().items() if name == profile), None)


def env_line(res: Resolution) -> str | None:
    """The environment SGLang is evaluated with (--env, and --launch's NAME=VALUE / env /
    export / docker -e), credentials redacted as in the reports."""
    if not res.env:
        return None
    from sglang_audit.resolve.pipeline import redacted

    return "env: " + " ".join(f"{k}={v}" for k, v in redacted(dict(res.env)).items())


def driver_text(dev: dict[str, Any]) -> str:
    """The NVIDIA driver on CUDA: given (--driver) or assumed (the default), said which."""
    if dev.get("platform") != "cuda" or not dev.get("driver"):
        return ""
    if dev.get("driver_source") == "given with --driver":
        return f", driver {dev['driver']} (given with --driver)"
    return f", driver {dev['driver']} (assumed; --driver sets it)"


def cudnn_text(dev: dict[str, Any]) -> str:
    """The device's cuDNN with where it came from (``--cudnn``, or the pip profile's pin)."""
    from sglang_audit.rules.facts import cudnn_version

    version = cudnn_version(dev.get("cudnn"))
    if version is None:
        return ""
    source = dev.get("cudnn_source")
    return f", cuDNN {version}" + (f" ({source})" if source else "")


def environment_lines(res: Resolution) -> list[str]:
    """The environment profile the answer assumed (``Resolution.environment``): its name,
    what it is and why it applies, the packages it installs or leaves out, its variables."""
    p = getattr(res, "environment", None)
    if not p:
        return []
    out = [f"environment: {p['name']} — {p['summary']} ({p['chosen']})" + (f"; {p['note']}" if p.get("note") else "")]
    if p.get("installed"):
        out.append("  installed: " + ", ".join(i["package"] for i in p["installed"]))
    if p.get("absent"):
        out.append("  absent: " + ", ".join(i["package"] for i in p["absent"]))
    if p.get("env"):
        out.append("  sets: " + " ".join(f"{e['name']}={e['value']}" for e in p["env"]) + " (--env NAME=VALUE overrides)")
    return out


def hint_lines(rejections: Iterable[Any], indent: str = "  ", said: Iterable[Any] = ()) -> list[str]:
    """How to get past the SGLang rejections just printed: the hints of rules/matrix.toml
    (``rejection_hints``, keyed on SGLang's message; the ones ``matrix`` prints), each once
    however many rejections it explains, none already given for the rejections ``said``. A
    rejection is anything with SGLang's ``message`` (a ``Rejection``, recommend's ``Reason``)."""
    given = [r for r in rejections if r is not None and getattr(r, "message", None)]
    if not given:
        return []
    import textwrap

    from sglang_audit.analyses.matrix import hint_for
    from sglang_audit.render.matrix import HINT_WIDTH

    old = {hint_for(r) for r in said if r is not None and getattr(r, "message", None)}
    hints = [h for h in dict.fromkeys(hint_for(r) for r in given) if h is not None and h not in old]
    out: list[str] = []
    for h in hints:
        launch = " ".join(_launch_flag(item) for item in h.sets)
        text = f"how to get past it: rerun with {h.advice()} (in a launch command: {launch}): {h.why}"
        out.extend(textwrap.wrap(text, HINT_WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_on_hyphens=False, break_long_words=False))
        if h.alternative:
            out.extend(textwrap.wrap(h.alternative, HINT_WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                                     break_on_hyphens=False, break_long_words=False))
    return out


def _launch_flag(item: str) -> str:
    """A hint's KEY=VALUE as SGLang's command line spells it (a true boolean is its switch)."""
    key, _, value = item.partition("=")
    flag = "--" + key.replace("_", "-")
    return flag if value.lower() == "true" else f"{flag} {value}"


def render_resolution(res: Resolution, verbose: bool = False, requested_model: str | None = None) -> str:
    """``requested_model``: the model as the user named it (-m), when known."""
    out: list[str] = []
    dev = res.device
    out.append(release_line(res, verbose))
    out.append(f"device: {dev['arch']} {dev['name']}, platform {dev['platform']}" + (f", CUDA {dev['cuda']}" if dev.get("cuda") else "")
               + driver_text(dev) + cudnn_text(dev))
    m = res.model
    out.append(f"model: {model_label(m, requested_model)} — {value_text(m.architecture)}, quantization {value_text(m.quantization, unknown_reason(m.architecture))} (config.json quant_method {m.config_quant_method})")
    out += [f"  assuming: {a}" for a in m.assumptions]
    if m.draft_architecture is not None:
        out.append(f"draft: {value_text(m.draft_architecture)}, quantization {value_text(m.draft_quantization)}")
    if res.flags:
        out.append("flags: " + " ".join(f"{k}={v}" for k, v in res.flags.items()))
    env = env_line(res)
    if env:
        out.append(env)
    out += environment_lines(res)
    ks = res.kernel_source
    if ks:
        read = f"{ks.get('library')} {ks.get('version')} ({ks.get('origin')})" if "error" not in ks else f"{ks.get('library')} not read: {ks['error']}"
        out.append(f"kernel library read: {read}")
    if res.rejected:
        r = res.rejected
        out.append("")
        out.append(f"REJECTED by SGLang: {r.exception}: {r.message}")
        out.append(f"  at {r.file}:{r.line}" + (f"  [{r.code}]" if r.code else ""))
        out.extend(hint_lines([r]))
        return "\n".join(out) + "\n"
    for r in res.rejections:
        out.append(f"rejected when {' and '.join(r.when)}: {r.exception}: {r.message} ({r.file}:{r.line})")
    out.extend(hint_lines(res.rejections))
    out.append("")
    width = max(len(n) for n in res.settings)
    for name, s in res.settings.items():
        if not s.present:
            continue
        out.append(_setting_line(name, s, width, _origin(name, s, res)))
        if name == "quantization" and s.config is None and isinstance(m.quantization, str):
            # the flag is unset; ModelConfig takes the method from the checkpoint
            out.append(f"{'':{width}}    model   {m.quantization}  (from the model's config.json, as ModelConfig reads it)")
        if isinstance(s.layer, LayerValue):
            out.extend(f"{'':{width}}    {line}" for line in layer_lines(s.layer, verbose=verbose))
        elif isinstance(s.layer, UnknownValue):
            out.append(f"{'':{width}}    layers  unknown: {s.layer.reason}")
            for c in s.layer.candidates:
                out.append(f"{'':{width}}            may {c.value}  (at {', '.join(c.when)})")
        if s.kernel is not None:
            out.extend(_kernel_lines(s, width, verbose))
        for step in s.chain if verbose or name in _PRIMARY else []:
            if not verbose and (step.role == ROLE_APPLIED or step.kind == "default" and step.role != ROLE_DECISION
                                or step.role == ROLE_INPUT and step.kind != "flag"):
                continue
            out.append(f"{'':{width}}    {step.layer:7} {describe_step(step)}")
    if res.analysis_notes:
        out.append("")
        out.append("analysis notes:")
        out.extend(f"  - {n}" for n in res.analysis_notes)
    return "\n".join(out) + "\n"


_WHEN_SHOWN = 2  # without -v: a candidate's site and the last conditions before its outcome


def when_text(when: tuple[str, ...] | list[str], verbose: bool) -> str:
    """A candidate's conditions: all with -v; else its site (``at file:line``) and the last
    ones, the branches nearest the outcome (a speculative worker's path can hold twenty)."""
    sites = [w for w in when if w.startswith("at ")]
    rest = [w for w in when if not w.startswith("at ")]
    if verbose or len(rest) <= _WHEN_SHOWN + 1:
        return "; ".join(when)
    hidden = len(rest) - _WHEN_SHOWN
    return "; ".join([*sites, f"… {hidden} earlier conditions (-v lists them)", *rest[-_WHEN_SHOWN:]])


def layer_lines(v: LayerValue, label: str = "", verbose: bool = False) -> list[str]:
    """The layers' outcome: the MoE kernel entry point or the attention backend built, SGLang's
    raise, or unknown with candidates; the optional packages assumed and what the other state
    gives; the draft worker's own attention backend."""
    label = label or {"attention": "backend", "speculative": "worker"}.get(v.stage, "layers")
    what = f"{v.method}" + (f", runner {v.runner}" if v.runner else "")
    if v.status == "unknown":
        lines = [f"{label:7} unknown: {v.reason}" + (f"  [{what}]" if v.method else "")]
        lines += [f"          may {c.value}  (when {when_text(c.when, verbose)})" for c in v.candidates]
    else:
        lines = [f"{label:7} {v.status}: {v.value} at {v.site}" + (f"  [{what}]" if v.stage == "moe" else "")]
    if v.stage == "speculative":
        # the class SGLang's dispatch chose and where the scheduler builds it, whatever the outcome
        lines += [f"          {'chosen' if s.kind == 'dispatch' else 'built'}: {s.value} at {s.file}:{s.line}"
                  for s in v.chain if s.kind in ("dispatch", "worker")]
    if v.stage in ("attention", "speculative"):
        lines += [f"          logged (default branch): {step.value}" for step in v.chain if step.kind == "log"]
        if v.status != "unknown":
            lines += [f"          or {c.value}  (when {when_text(c.when, verbose)})" for c in v.candidates]
        lines += [f"          not followed: {p}" for p in v.data_dependent]
    if v.stage == "linear":
        lines += [f"          not followed: {p}" for p in v.data_dependent]
    lines += [f"          assuming {a}" for a in v.assumptions]
    lines += [f"          fork: {f}" for f in v.forks]
    if isinstance(v.draft, LayerValue):
        lines += layer_lines(v.draft, "draft", verbose)
    return lines


def describe_step(step: ChainStep) -> str:
    """One chain step as every text output shows it: what the step did, where."""
    where = f"{step.file}:{step.line}"
    if step.kind == "flag":
        text = f"{step.guard or 'set by you'} (declared at {where})"
    elif step.kind == "default":
        text = f"default {step.value!r} (declared at {where})"
    else:
        guard = f" if {step.guard}" if step.guard else ""
        label = "applied at " if step.role == ROLE_APPLIED else "input: " if step.role == ROLE_INPUT else ""
        text = f"{label}{where}{guard} → {step.value!r}"
    return f"decided: {text}" if step.role == ROLE_DECISION else text


_PRIMARY = ("moe_runner_backend", "speculative_moe_runner_backend", "fp4_gemm_runner_backend")


def _setting_line(name: str, s: Setting, width: int, origin: str = "") -> str:
    rt = ""
    if s.runtime is not None and not (not isinstance(s.runtime, UnknownValue) and s.runtime == s.config):
        shown = s.config.reason if isinstance(s.config, UnknownValue) else None
        rt = f" → runtime {value_text(s.runtime, shown)}"
    note = f"  [{s.note}]" if s.note else ""
    why = f", {origin}" if origin else ""
    return f"{name:{width}}  {value_text(s.config)}{rt}  ({s.status}{why}){note}"


def _kernel_lines(s: Setting, width: int, verbose: bool) -> list[str]:
    k = s.kernel
    assert k is not None
    pad = f"{'':{width}}    "
    lib = f"{k.library} {k.version}" if k.version else k.library
    if k.unused:  # no layer of the model calls it: the library's declaration is no question
        return [f"{pad}kernel  not used: {k.unused}"]
    if k.function:
        what = k.function + (f" backend {k.backend!r}" if k.backend else "")
        out = [f"{pad}kernel  {k.status}: {what}  ({lib})"]
    else:  # no entry point known yet (auto decided by the layers), or another library
        out = [f"{pad}kernel  {k.status} ({lib})"]
    if k.status != "supported" or not k.layers:  # a supported verdict is its layers
        out.append(f"{pad}        {k.reason}")
    if k.call_site:
        out.append(f"{pad}        called from {k.call_site}")
    for layer in k.layers:
        mark = "" if layer.enforced else " (declared; not a check the call runs)"
        out.append(f"{pad}        {layer.mechanism}: {layer.function} says {layer.says}{mark}: {layer.detail} ({layer.file}:{layer.line})")
    if verbose:
        out.extend(f"{pad}        at call time: {c}" for c in k.conditions)
    elif k.conditions:
        out.append(f"{pad}        + {len(k.conditions)} call-time conditions on dtypes/shapes (-v lists them)")
    return out


def wrap(text: str, width: int) -> str:
    """Each line folded to ``width`` columns, continuation lines indented under it; folded at
    spaces only, never inside a token (a ``file:line``, a path, a value longer than the room
    left stays whole on its own line)."""
    import textwrap

    out: list[str] = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * min(len(line) - len(line.lstrip(" ")) + 4, width // 2)
        out.extend(textwrap.wrap(line, width=width, subsequent_indent=indent, break_on_hyphens=False,
                                 break_long_words=False, drop_whitespace=True) or [line])
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")

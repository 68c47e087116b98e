"""What changed for one setting between two releases, level by level.

A setting's outcome has levels (``LEVELS``): the config value, the runtime value (the one
that runs), what the layers built with it do, the kernel library's verdict and the
known-bad findings on it. ``outcome_change`` compares two sides at every level; ``diff``'s
text and JSON and the HTML report's "changed since" column all use it, so a setting whose
layers go from working to failing is "changed" everywhere, and one failing on both sides is
"still failing", never "unchanged".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_audit.result import (
    KERNEL_UNKNOWN,
    KERNEL_UNSUPPORTED,
    STATUS_UNSUPPORTED,
    KernelVerdict,
    LayerValue,
    Setting,
    UnknownValue,
)
from sglang_audit.rules.knownbad import Finding

CHANGE_UNCHANGED = "unchanged"
CHANGE_CHANGED = "changed"
CHANGE_UNKNOWN = "unknown"  # a value on either side cannot be stated
CHANGE_ADDED = "added"  # the setting exists only in the new release
CHANGE_REMOVED = "removed"  # ... only in the old release
CHANGE_REJECTED = "rejected"  # a side rejects the configuration: there is no value to compare
CHANGE_ABSENT = "absent"  # in neither release (or renamed: compared under its new name)
# no level changed, and it fails on both sides (its layers raise, its kernel is unsupported)
CHANGE_STILL_FAILING = "still_failing"
VALUE_CHANGES = (CHANGE_CHANGED, CHANGE_ADDED, CHANGE_REMOVED)

# the levels of a setting's outcome, in the order they are decided (``outcome_change``)
LEVEL_CONFIG = "config"  # the ServerArgs value
LEVEL_RUNTIME = "runtime"  # the value that runs (the runtime initialiser's, else the config value)
LEVEL_LAYER = "layer"  # what the layers built with it do: status, kernel entry, method, runner
LEVEL_KERNEL = "kernel"  # the kernel library's declared support for the device
LEVEL_FINDINGS = "findings"  # the known-bad rules' findings on this setting
LEVELS = (LEVEL_CONFIG, LEVEL_RUNTIME, LEVEL_LAYER, LEVEL_KERNEL, LEVEL_FINDINGS)
VALUE_LEVELS = (LEVEL_CONFIG, LEVEL_RUNTIME)


# ---- comparison --------------------------------------------------------------------------
def same_value(a: Any, b: Any) -> bool | None:
    """True/False when both values are known; None when either is not.  Two unknowns with
    the same candidates under the same conditions (fully explored) are the same value."""
    if not isinstance(a, UnknownValue) and not isinstance(b, UnknownValue):
        return bool(a == b and type(a) is type(b))
    if isinstance(a, UnknownValue) and isinstance(b, UnknownValue):
        certain = a.candidates and "analysis bound" not in a.reason + b.reason and not any(
            isinstance(c.value, str) and c.value.startswith("unknown:") for c in a.candidates)
        if certain and set(a.candidates) == set(b.candidates):
            return True
    return None


def _effective(s: Setting) -> Any:
    # no runtime layer: the config value is what runs
    return s.runtime if s.runtime is not None else s.config


# ---- what changed: every level of a setting's outcome ---------------------------------------
@dataclass(frozen=True)
class SettingFindings:
    """One side's known-bad findings on one setting: the rules that fired (id -> finding)
    and the rules that could not be decided (a finding against one of those is not a change:
    it may hold)."""

    found: Mapping[str, Finding]
    undecided: frozenset[str] = frozenset()


@dataclass(frozen=True)
class OutcomeChange:
    """What changed for one setting between two releases, level by level (LEVELS)."""

    changed: tuple[str, ...]  # the levels that differ
    unknown: tuple[str, ...]  # the levels that cannot be compared (unknown on one side)
    details: tuple[str, ...]  # one line per changed level beyond the values, e.g. "layer resolved → unsupported"
    old_failing: tuple[str, ...]  # failing_levels of each side
    new_failing: tuple[str, ...]

    @property
    def change(self) -> str:
        if self.changed:
            return CHANGE_CHANGED
        if self.unknown:
            return CHANGE_UNKNOWN
        if self.old_failing and self.new_failing:
            return CHANGE_STILL_FAILING
        return CHANGE_UNCHANGED


def layer_fails(layer: Any) -> bool:
    """The layers built with the value raise (the MoE layers, the attention backend or the
    draft worker's attention backend)."""
    if not isinstance(layer, LayerValue):
        return False
    return layer.status == STATUS_UNSUPPORTED or (isinstance(layer.draft, LayerValue) and layer.draft.status == STATUS_UNSUPPORTED)


def failing_levels(s: Setting | None) -> tuple[str, ...]:
    """The levels at which a setting fails: its layers raise, its kernel library declares
    the kernel unsupported on the device; "status" when its status says unsupported for a
    reason neither level shows."""
    if s is None or not s.present:
        return ()
    out: list[str] = []
    if layer_fails(s.layer):
        out.append(LEVEL_LAYER)
    if s.kernel is not None and s.kernel.status == KERNEL_UNSUPPORTED:
        out.append(LEVEL_KERNEL)
    if not out and s.status == STATUS_UNSUPPORTED:
        out.append("status")
    return tuple(out)


def _layer_key(v: LayerValue) -> tuple[Any, ...]:
    draft = _layer_key(v.draft) if isinstance(v.draft, LayerValue) else None
    return (v.status, v.value, v.method, v.runner, draft)


def _unknown_layer(v: Any) -> bool:
    return isinstance(v, UnknownValue) or (isinstance(v, LayerValue) and v.status == "unknown") or (
        isinstance(v, LayerValue) and isinstance(v.draft, LayerValue) and v.draft.status == "unknown")


def _same_layer(a: Any, b: Any) -> bool | None:
    """True/False when both layer outcomes are known; None when one cannot be told.  A side
    with no layer outcome (no listed method re-decides the value in that release) differs
    only from a layer that fails."""
    if a is None or b is None:
        other = a if b is None else b
        return not layer_fails(other)
    if _unknown_layer(a) or _unknown_layer(b):
        if _unknown_layer(a) and _unknown_layer(b):
            # unknown on both sides, for the same reason (the same method and runner): no change is
            # claimed (each side says it cannot tell); a different reason, or the candidates
            # under the same conditions (as written: their file:line move) when the reasons
            # differ only in where, decide otherwise
            ra, rb = getattr(a, "reason", ""), getattr(b, "reason", "")
            key_a = _layer_key(a) if isinstance(a, LayerValue) else None
            key_b = _layer_key(b) if isinstance(b, LayerValue) else None
            if key_a != key_b or "analysis bound" in ra + rb:
                return None
            if _SITE_ANY.sub("", ra) == _SITE_ANY.sub("", rb) or _candidates(a) == _candidates(b):
                return True
        return None
    return _layer_key(a) == _layer_key(b)


def _candidates(v: Any) -> frozenset[tuple[Any, frozenset[str]]]:
    out = []
    for layer in (v, getattr(v, "draft", None)):
        for c in getattr(layer, "candidates", ()):
            when = frozenset(w for w in (_SITE.sub("", x).strip() for x in c.when) if w)
            out.append((c.value if isinstance(c.value, (str, int, float, bool, type(None))) else repr(c.value), when))
    return frozenset(out)


_SITE = re.compile(r"^(at )?\S+\.py:\d+")
_SITE_ANY = re.compile(r"\S+\.py:\d+")


def _layer_brief(v: Any) -> str:
    if v is None:
        return "(no layer outcome)"
    if isinstance(v, UnknownValue) or (isinstance(v, LayerValue) and v.status == "unknown"):
        return "unknown"
    assert isinstance(v, LayerValue)
    if isinstance(v.draft, LayerValue) and v.draft.status == STATUS_UNSUPPORTED and v.status != STATUS_UNSUPPORTED:
        return f"{v.status} (draft unsupported)"
    return v.status


def _layer_detail(a: Any, b: Any) -> str:
    ba, bb = _layer_brief(a), _layer_brief(b)
    if ba != bb:
        return f"layer {ba} → {bb}"
    assert isinstance(a, LayerValue) and isinstance(b, LayerValue)
    parts = [f"{what} {x or '(none)'} → {y or '(none)'}" for what, x, y in (
        ("kernel entry" if a.status != STATUS_UNSUPPORTED else "raise", a.value, b.value),
        ("method", a.method, b.method), ("runner", a.runner, b.runner)) if x != y]
    if not parts:
        parts = ["draft " + _layer_detail(a.draft, b.draft).removeprefix("layer ")]
    return "layer " + "; ".join(parts)


def _same_kernel(a: KernelVerdict | None, b: KernelVerdict | None) -> bool | None:
    """The kernel library's verdicts: the same status; a side with no
    kernel question differs only from an unsupported verdict; an unknown verdict on one side
    (or two unknowns said differently) cannot be compared."""
    if a is None or b is None:
        other = a if b is None else b
        return other is None or other.status != KERNEL_UNSUPPORTED
    if KERNEL_UNKNOWN in (a.status, b.status):
        if a.status == b.status and (a.function, a.backend, a.reason) == (b.function, b.backend, b.reason):
            return True
        return None
    # the verdict; a different kernel for a different value is the value's change
    return a.status == b.status


def outcome_change(old: Setting, new: Setting, old_findings: SettingFindings | None = None,
                   new_findings: SettingFindings | None = None) -> OutcomeChange:
    """What changed for one (present) setting, at every level of its outcome: the config
    value, the runtime value (the one that runs), the layers built with it (status, kernel
    entry, method, runner), the kernel library's verdict, and — given each side's findings
    on it — the known-bad findings.  The one definition ``diff``'s text and JSON and the
    HTML report use."""
    changed: list[str] = []
    unknown: list[str] = []
    details: list[str] = []
    for level, same in ((LEVEL_CONFIG, same_value(old.config, new.config)),
                        (LEVEL_RUNTIME, same_value(_effective(old), _effective(new))),
                        (LEVEL_LAYER, _same_layer(old.layer, new.layer)),
                        (LEVEL_KERNEL, _same_kernel(old.kernel, new.kernel))):
        if same is None:
            unknown.append(level)
        elif not same:
            changed.append(level)
            if level == LEVEL_LAYER:
                details.append(_layer_detail(old.layer, new.layer))
            elif level == LEVEL_KERNEL:
                ka, kb = old.kernel, new.kernel
                details.append(f"kernel {ka.status if ka else '(none)'} → {kb.status if kb else '(none)'}")
    if old_findings is not None and new_findings is not None:
        added = sorted(k for k in new_findings.found if k not in old_findings.found and k not in old_findings.undecided)
        removed = sorted(k for k in old_findings.found if k not in new_findings.found and k not in new_findings.undecided)
        if added or removed:
            changed.append(LEVEL_FINDINGS)
            details.append("findings " + " ".join([*(f"+{k}" for k in added), *(f"-{k}" for k in removed)]))
    return OutcomeChange(tuple(changed), tuple(unknown), tuple(details), failing_levels(old), failing_levels(new))

"""Evaluate one function of a small source text: the entry the differential tests and
the rule examples use.  The text is written to a throwaway package and interpreted by
the same evaluator as a real release (never executed)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.evaluate.interpreter import Bounds, Interpreter, PyRaise, Unmodelled, stop_reason
from sglang_audit.evaluate.values import AnalysisBound, Instance, ModuleObj, Unknown
from sglang_audit.frontend.parse import ParseFailure, SourceCache
from sglang_audit.inputs.device import Environment, parse_device
from sglang_audit.world.native import NativeWorld


@dataclass(frozen=True)
class Outcome:
    kind: str  # "value" | "raised" | "unknown"
    value: Any = None
    exception: str = ""
    message: str = ""
    line: int = 0  # where a raise is cited in ``source`` (0: outside it)


def evaluate_function(source: str, func: str, args: list[Any], kwargs: dict[str, Any] | None = None,
                      bounds: Bounds | None = None, arch: str = "sm120",
                      model_dirs: list[Path] | None = None) -> Outcome:
    """``func`` of ``source`` called with ``args``; ``model_dirs``: the directories its file
    probes may read (as a target's model directory)."""
    with tempfile.TemporaryDirectory(prefix="sga-adhoc-") as tmp:
        root = Path(tmp)
        pkg = root / "sglang"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "adhoc_module.py").write_text(source, encoding="utf-8")
        world = NativeWorld(parse_device(arch), Environment(), list(model_dirs or []))
        interp = Interpreter(root, SourceCache(use_disk=False), world, {}, bounds or Bounds())
        try:
            mod = interp.load_module("sglang.adhoc_module")
            if not isinstance(mod, ModuleObj) or mod.failed:
                return Outcome("unknown", message=f"module did not load: {getattr(mod, 'failed', '')}")
            fn = interp.getattr(mod, func)
            value = interp.call(fn, list(args), dict(kwargs or {}))
        except PyRaise as raised:
            if interp.new_decisions:
                # the exception depends on a branch taken on an unknown: not a verdict
                return Outcome("unknown", message="branch on an unknown before the exception")
            exc = raised.exc
            name = exc.cls.name if isinstance(exc, Instance) else "Exception"
            msg_args: Any = exc.attrs.get("args", ()) if isinstance(exc, Instance) else ()
            message = interp.to_str(msg_args[0]) if len(msg_args) == 1 else ""
            line = raised.line if raised.file == "sglang/adhoc_module.py" else 0
            return Outcome("raised", exception=name, message=message, line=line)
        except (Unmodelled, AnalysisBound) as exc:
            return Outcome("unknown", message=stop_reason(exc))
        except ParseFailure as exc:
            return Outcome("unknown", message=exc.message)
        if isinstance(value, Unknown) or interp.new_decisions:
            return Outcome("unknown", value=value, message=getattr(value, "reason", "branch on an unknown"))
        return Outcome("value", value=value)

"""``sglang-audit env``: the pip profile's package versions, each with its source."""

from __future__ import annotations

import json
from typing import Any

from sglang_audit.inputs.pins import PLATFORM_TEXT, PipProfile


def render_env_text(profile: PipProfile) -> str:
    lines = [f"environment: pip (a plain `pip install sglang=={profile.release}`, {PLATFORM_TEXT} wheels; "
             f"platform {profile.platform})"]
    lines += [pin.text() for pin in profile.pins]
    fallback = [pin for pin in profile.pins if pin.fallback]
    if fallback:
        lines.append(f"note: {', '.join(p.package for p in fallback)} from the fallback table rules/torch_pins.toml, "
                     "not from the package index")
    return "\n".join(lines) + "\n"


def render_env_json(profile: PipProfile, source: dict[str, Any]) -> str:
    return json.dumps({"schema": "sglang-audit-env/1", "source": source, **profile.to_json()}, indent=2)

"""What one resolution is asked: the target (source tree, device, model, flags, env).

Apart from ``resolver`` so that the pipeline can build and key a target without importing
the evaluator (a result-cache hit never loads it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_audit.inputs.device import Device
    from sglang_audit.source.locate import SourceTree

DEFAULT_MAX_PATHS = 24  # decision paths explored per resolution (part of the result-cache key)

@dataclass
class ModelInput:
    name: str
    path: Path


@dataclass
class Target:
    source: SourceTree
    device: Device
    model: ModelInput
    flags: dict[str, Any]
    env: dict[str, str]
    with_packages: frozenset[str] = frozenset()
    without_packages: frozenset[str] = frozenset()
    extra_fields: tuple[str, ...] = ()  # ServerArgs fields asked for besides settings.toml's (--field)
    # the layer stages (resolve/stages.py STAGES, by name) evaluated; None: all. A caller that reads only some settings' layer
    # values (explain's forced choices) leaves the others out; their settings then carry an
    # unknown layer value saying so, and the result-cache key holds the choice
    layer_stages: tuple[str, ...] | None = None
    # the environment profile (rules/env_profiles.toml, inputs/profiles.py): None, the
    # platform's default (ROCm: SGLang's image; CUDA: a plain pip install)
    env_profile: str | None = None
    # what the answer could not read of its inputs, said in its analysis notes (a draft model
    # given by Hugging Face id that cannot be fetched: its settings are unknown, the rest answered)
    input_notes: tuple[str, ...] = ()

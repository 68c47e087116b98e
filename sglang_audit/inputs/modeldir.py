"""A model directory as the tool reads it: one ``ModelCheckpoint`` per directory.

config.json and hf_quant_config.json are read once (regular files, size-capped:
``userfiles.read_user_file``) and parsed once per content; a safetensors header is read by
``checkpoint.read_header`` (bounded, never tensor data). Every stage that
asks the model directory something (input validation, the HF config boundary, the draft's
architecture, the rules' checkpoint facts, recommend's model kind) asks this object, so a
file is read under one size and type policy and a failure reads the same everywhere.

Callers that change what they get (the HF config boundary builds mutable attribute tables)
take ``config_copy()``: the parsed document itself is shared by the process.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.inputs.checkpoint import SafetensorsHeader, read_header
from sglang_audit.userfiles import UserFileError, read_user_file

CONFIG = "config.json"
HF_QUANT_CONFIG = "hf_quant_config.json"


@dataclass(frozen=True)
class JsonFile:
    """One JSON file of the directory: its parsed document, or why it was not read."""

    name: str
    present: bool
    data: Any = None  # the parsed document (shared: do not mutate; see ModelCheckpoint.config_copy)
    error: str | None = None  # one line naming the file; None when parsed


@dataclass(frozen=True)
class ModelCheckpoint:
    """What the tool knows of one model directory, each file read once."""

    dir: Path
    config_file: JsonFile
    hf_quant_file: JsonFile

    # ---- config.json --------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any] | None:
        """config.json when it is a JSON object (shared, read-only by convention), else None."""
        data = self.config_file.data
        return data if isinstance(data, dict) else None

    def config_copy(self) -> dict[str, Any] | None:
        """A private copy of config.json for a caller that builds mutable state from it."""
        data = self.config
        return copy.deepcopy(data) if data is not None else None

    def blocks(self) -> Iterator[dict[str, Any]]:
        """config.json's top level, then its ``text_config`` (a multimodal wrapper's language
        model), where each is an object: the order every key lookup here uses."""
        cfg = self.config
        if cfg is None:
            return
        yield cfg
        text = cfg.get("text_config")
        if isinstance(text, dict):
            yield text

    def first_key(self, keys: tuple[str, ...], accept: Callable[[Any], bool]) -> Any:
        """The first accepted value of ``keys`` (top level, else text_config); None if none."""
        for block in self.blocks():
            for key in keys:
                if accept(block.get(key)):
                    return block[key]
        return None

    @property
    def architectures(self) -> list[str] | None:
        archs = self.config.get("architectures") if self.config is not None else None
        return archs if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    @property
    def architecture(self) -> str | None:
        """``architectures[0]``: the class SGLang's model registry looks up."""
        archs = self.architectures
        return archs[0] if archs else None

    @property
    def config_quant_method(self) -> Any:
        q = self.config.get("quantization_config") if self.config is not None else None
        return q.get("quant_method") if isinstance(q, dict) else None

    # ---- hf_quant_config.json -----------------------------------------------------------
    @property
    def hf_quant(self) -> dict[str, Any] | None:
        data = self.hf_quant_file.data
        return data if isinstance(data, dict) else None

    # ---- the safetensors headers ----------------------------------------------------------
    def header(self, rel: str) -> SafetensorsHeader:
        """The header of the safetensors file ``rel`` (checkpoint.py's bounded reader: never
        tensor data, never outside the directory; raises its CheckpointError)."""
        return read_header(self.dir, rel)


def _read(path: Path) -> bytes | str | None:
    """The file's bytes under the user-file policy, the one-line reason it is not read, or
    None when there is no such file."""
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return read_user_file(path, "model file")
    except UserFileError as exc:
        return exc.message


def _parse(path: Path, name: str, raw: bytes | str | None) -> JsonFile:
    if raw is None:
        return JsonFile(name, False, error=f"{path}: no such file")
    if isinstance(raw, str):
        return JsonFile(name, True, error=raw)
    try:
        return JsonFile(name, True, json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as exc:
        return JsonFile(name, True, error=f"{path}: not valid JSON ({exc})")
    except RecursionError:
        return JsonFile(name, True, error=f"{path}: JSON nested too deeply")


# by directory: the bytes read and what they parsed to. A later call reads the files again
# (a few kB; a file edited in place keeps its size and mtime, as tests/test_resultcache.py
# does on purpose) and parses only when the bytes differ.
_MEMO: dict[Path, tuple[tuple[Any, Any], ModelCheckpoint]] = {}
_MEMO_LIMIT = 64  # model directories one process asks about (a matrix or a deployments file)


def model_checkpoint(model_dir: Path) -> ModelCheckpoint:
    """The directory's ``ModelCheckpoint``: its JSON files read under the user-file policy
    and parsed once per content per process."""
    config, hfq = model_dir / CONFIG, model_dir / HF_QUANT_CONFIG
    raw = (_read(config), _read(hfq))
    hit = _MEMO.get(model_dir)
    if hit is not None and hit[0] == raw:
        return hit[1]
    found = ModelCheckpoint(model_dir, _parse(config, CONFIG, raw[0]), _parse(hfq, HF_QUANT_CONFIG, raw[1]))
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[model_dir] = (raw, found)
    return found


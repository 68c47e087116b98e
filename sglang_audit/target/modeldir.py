"""A model directory as the tool reads it: one ``ModelCheckpoint`` per directory.

config.json and hf_quant_config.json are read once (regular files, size-capped:
``userfiles.read_user_file``) and parsed once; a safetensors header is read on first use by
``checkpoint.read_header`` (bounded, never tensor data) and kept while the file is unchanged. Every stage that
asks the model directory something (input validation, the HF config boundary, the draft's
architecture, the rules' checkpoint facts, recommend's model kind) asks this object, so a
file is read under one size and type policy and a failure reads the same everywhere.

Callers that change what they get (the HF config boundary builds mutable attribute tables)
take ``config_copy()``: the parsed document itself is shared by the process.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_audit.target.checkpoint import SafetensorsHeader, read_header
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
        """The header of the safetensors file ``rel`` (checkpoint.py's bounded reader; raises
        its CheckpointError), read once per process while the file is unchanged: SGLang's
        code opens the same shard once per probe (``safe_open`` in a loop over layers)."""
        path = self.dir / rel
        key = (path, _stamp(path))
        found = _HEADERS.get(key)
        if found is None:
            found = read_header(self.dir, rel)
            if len(_HEADERS) >= _MEMO_LIMIT * 8:
                _HEADERS.clear()
            _HEADERS[key] = found
        return found


def _read_json(path: Path, name: str) -> JsonFile:
    if not (path.exists() or path.is_symlink()):
        return JsonFile(name, False, error=f"{path}: no such file")
    try:
        return JsonFile(name, True, json.loads(read_user_file(path, "model file").decode("utf-8")))
    except UserFileError as exc:
        return JsonFile(name, True, error=exc.message)
    except (UnicodeDecodeError, ValueError) as exc:
        return JsonFile(name, True, error=f"{path}: not valid JSON ({exc})")
    except RecursionError:
        return JsonFile(name, True, error=f"{path}: JSON nested too deeply")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


_MEMO: dict[Path, tuple[tuple[Any, ...], ModelCheckpoint]] = {}
_HEADERS: dict[tuple[Path, Any], SafetensorsHeader] = {}
_MEMO_LIMIT = 64  # model directories one process asks about (a matrix or a deployments file)


def model_checkpoint(model_dir: Path) -> ModelCheckpoint:
    """The directory's ``ModelCheckpoint``, memoised per process while its JSON files are
    unchanged (inode, size, mtime): a later call in the same command reads nothing."""
    config, hfq = model_dir / CONFIG, model_dir / HF_QUANT_CONFIG
    stamp = (_stamp(config), _stamp(hfq))
    hit = _MEMO.get(model_dir)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    found = ModelCheckpoint(model_dir, _read_json(config, CONFIG), _read_json(hfq, HF_QUANT_CONFIG))
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[model_dir] = (stamp, found)
    return found


def config_of(model_dir: Path) -> Mapping[str, Any] | None:
    """config.json of ``model_dir`` as an object, None when it is missing or unreadable."""
    return model_checkpoint(model_dir).config

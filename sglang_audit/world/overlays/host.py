"""What a target overlay reads of the world composing it (``world/native.py``'s NativeWorld)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.values import Unknown
    from sglang_audit.inputs.checkpoint import SafetensorsHeader
    from sglang_audit.inputs.device import Device, Environment


class TargetHost(Protocol):
    """What a target overlay reads of the world composing it."""

    device: Device
    environment: Environment
    torch_version: str

    def checkpoint_header(self, path: str) -> SafetensorsHeader | Unknown: ...
    def load_hf_config(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any: ...
    def find_spec(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any: ...
    def dist_version(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any: ...

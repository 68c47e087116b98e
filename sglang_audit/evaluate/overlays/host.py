"""What an overlay may ask of the world composing it (``world/native.py``'s NativeWorld)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.evaluate.values import Class, External


class Host(Protocol):
    """What an overlay may ask of the world composing it."""

    object_class: Class
    exception_classes: dict[str, Class]

    def open(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any: ...
    def glob(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any: ...
    # Path.glob: the matching paths (sorted), or Unknown
    def path_glob(self, interp: Interpreter, pattern: str) -> Any: ...
    def path_probe(self, interp: Interpreter, fn_name: str, path: Any) -> Any: ...
    def external_hasattr(self, interp: Interpreter, obj: External, name: str) -> Any: ...
    def external_isinstance(self, value: External, typ: str) -> Any: ...
    # the analysed tree's own config classes declaring a config's model_type
    def config_classes(self, interp: Interpreter, model_type: Any) -> list[Class]: ...

"""The world the evaluator runs in for one target: a thin composition of overlays.

Python's builtins and the pure stdlib come from ``evaluate/overlays`` (they know nothing of
SGLang or a GPU); the device model, the installed packages, the file system and SGLang's
boundaries from ``world/overlays``. Each overlay table maps a module name to the function
listing its attributes; ``NativeWorld`` merges them once per world and implements the
interpreter's ``World`` protocol by dispatching to the overlay that owns a value or a module.
Anything no overlay lists is an ``External`` whose calls yield ``Unknown``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.evaluate.interpreter import WorldState, call_identity, short_identity
from sglang_audit.evaluate.overlays import OVERLAYS as PYTHON_OVERLAYS
from sglang_audit.evaluate.overlays import classes, paths, stdlib, typeforms
from sglang_audit.evaluate.overlays.builtins import (
    Builtins,
    make_exception_classes,
    make_object_class,
)
from sglang_audit.evaluate.overlays.common import MISSING, Environ, PathValue
from sglang_audit.evaluate.values import Class, External, HFConfig, Instance, Native, Unknown
from sglang_audit.inputs.checkpoint import SafetensorsHeader
from sglang_audit.inputs.device import Device, Environment, parse_device
from sglang_audit.shipped import load_toml  # re-exported: older call sites import it from here
from sglang_audit.world import configrun
from sglang_audit.world.overlays import OVERLAYS as TARGET_OVERLAYS
from sglang_audit.world.overlays import device as device_overlay
from sglang_audit.world.overlays import files, oplibrary, tensors
from sglang_audit.world.overlays.boundaries import Boundaries
from sglang_audit.world.overlays.packages import STDLIB_OBJECTS, Packages

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter

__all__ = ["NativeWorld", "load_toml"]


class NativeWorld:
    """Natives for one target (device + environment + model directories)."""

    def __init__(self, device: Device, environment: Environment, model_dirs: list[Path], torch_version: str = "2.9.1",
                 package_name: str = "sglang") -> None:
        # the analysed package: SGLang, or a kernel library whose guards are evaluated
        # (``resolve/libeval.py``) on the same device
        self.package_name = package_name
        self.device = device
        self.environment = environment
        self.model_dirs = [p.resolve() for p in model_dirs]
        self.torch_version = torch_version
        self.exception_classes = make_exception_classes()
        self.object_class = make_object_class()
        self.source_root: Path | None = None  # set by the resolver: probes inside it are answered
        self.packages = Packages(self.package_name, environment, torch_version)
        # import names a plain install has only as a namespace package → their subpackages
        self.namespaces: dict[str, tuple[str, ...]] = dict(environment.namespaces)
        self.boundaries = Boundaries(
            device, self.inside_model_dir, lambda: self.source_root / self.package_name if self.source_root else None)
        self._builtins = Builtins(self)
        self._static_values: dict[str, Any] | None = None  # external_value's table, built once
        self._target_paths: dict[str, str] = {}  # its entries made from the target: path -> what
        # What of the target an evaluation read, while recorded (None: not recorded; see
        # TargetReads). Every place this world answers from the device or the file system
        # notes it, so a result made with no read of the target holds for any target, and
        # one whose reads give the same answers on another target holds there too
        # (pipeline.flag_table shares the flag table that way).
        self.target_reads: TargetReads | None = None
        self._headers: dict[Path, SafetensorsHeader | Unknown] = {}  # checkpoint_header's answers

    # ---- per-interpreter state --------------------------------------------------------
    def initial_state(self) -> WorldState:
        """A new interpreter's overlay state: the deployment's environment variables as
        ``os.environ``, no transformers config or logger made yet."""
        return WorldState(environ=Environ(self.environment.env_dict()))

    def builtins(self, interp: Interpreter) -> dict[str, Any]:
        return self._builtins.table(interp)

    # ---- the overlays' host: the file system, only the model directories and the source --
    def note_target(self, what: str) -> None:
        if self.target_reads is not None:
            self.target_reads.opaque.add(what)

    def _roots(self) -> list[Path]:
        self.note_target("model")  # any file probe, the source tree's too: conservative
        return [*self.model_dirs, *([self.source_root] if self.source_root else [])]

    def inside_model_dir(self, path: str) -> Path | None:
        return files.inside(self._roots(), path)

    def open(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return files.open_file(self._roots(), interp, args, kwargs)

    def glob(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return files.glob(self._roots(), interp, args, kwargs)

    def path_probe(self, interp: Interpreter, fn_name: str, path: Any) -> Any:
        return files.path_probe(self._roots(), fn_name, path)

    def path_glob(self, interp: Interpreter, pattern: str) -> Any:
        return files.path_glob(self._roots(), self.model_dirs, interp, pattern)

    def checkpoint_header(self, path: str) -> SafetensorsHeader | Unknown:
        """The header of a safetensors file inside a model directory (read once per world),
        or Unknown with the reason."""
        self.note_target("model")
        found = files.inside(self.model_dirs, path)
        if found is not None and found in self._headers:
            return self._headers[found]
        header = files.checkpoint_header(self.model_dirs, path)
        if found is not None:
            self._headers[found] = header
        return header

    # ---- packages -----------------------------------------------------------------------
    def package_state(self, top: str) -> bool | None:
        return self.packages.package_state(top)

    def find_spec(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.packages.find_spec(interp, args, kwargs)

    def dist_version(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.packages.dist_version(interp, args, kwargs)

    # ---- SGLang's boundaries and the HF config ------------------------------------------
    def boundary_for(self, interp: Interpreter, module: str, name: str) -> Native | None:
        found = self.boundaries.boundary_for(interp, module, name)
        if found is None or self.target_reads is None:
            return found
        fn = found.fn

        def noted(i: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
            # answered from the device (memory, driver, name) or the model's config
            self.note_target("device")
            self.note_target("model")
            return fn(i, args, kwargs)

        return Native(found.name, noted, found.bind_self)

    def load_hf_config(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        self.note_target("model")
        return self.boundaries.load_hf_config(interp, args, kwargs)

    def make_hf_config(self, data: dict[str, Any], origin: str) -> HFConfig:
        return self.boundaries.make_hf_config(data, origin)

    def hf_attr(self, interp: Interpreter, cfg: HFConfig, name: str) -> Any:
        self.note_target("model")
        return self.boundaries.hf_attr(interp, cfg, name)

    def config_classes(self, interp: Interpreter, model_type: Any) -> list[Class]:
        self.note_target("model")
        return self.boundaries.release_config_classes(interp, model_type)

    # ---- modules outside the tree -------------------------------------------------------
    def native_module(self, interp: Interpreter, name: str) -> Any:
        top = name.split(".")[0]
        if top == self.package_name:
            return None
        sub = self.namespaces.get(top)
        if self.package_state(top) is False or (sub is not None and "." in name and name.split(".")[1] not in sub):
            # an optional package a plain install lacks, or a module a namespace package lacks:
            # `import X` raises ImportError
            raised = interp.make_raise("ModuleNotFoundError", f"No module named '{name}'")
            raised.explicit = True
            raise raised
        return External(name)

    def external_attr(self, interp: Interpreter, obj: External, name: str) -> Any:
        path = f"{obj.path}.{name}"
        sub = self.namespaces.get(obj.path)
        if sub is not None and name not in sub:
            if name == "__file__":
                return None  # as a namespace package's module has
            raised = interp.make_raise("AttributeError", f"module '{obj.path}' has no attribute '{name}'")
            raised.explicit = True  # what this install lacks, as an absent package's import
            raise raised
        if name == "__version__" and "." not in obj.path:
            ver = self.packages.import_version(obj.path)
            if ver is not None:
                return ver
        value = self.external_value(interp, path)
        if value is not MISSING:
            return value
        value = oplibrary.registered_op(interp, obj.path, name)
        if value is not MISSING:
            return value  # torch.ops.<ns>.<name>: what the analysed code registered
        if path in device_overlay.ABSENT_ATTRS or (path in device_overlay.PLATFORM_ATTRS and not self._platform_has(path)):
            raise interp.make_raise("AttributeError", f"module '{obj.path}' has no attribute '{name}'")
        return External(path, short_identity(f"{obj.ident}.{name}") if obj.ident else "")

    def external_hasattr(self, interp: Interpreter, obj: External, name: str) -> Any:
        sub = self.namespaces.get(obj.path)
        if sub is not None and name not in sub:
            return name == "__file__"
        path = f"{obj.path}.{name}"
        if path in device_overlay.ABSENT_ATTRS:
            return False
        if path in device_overlay.PLATFORM_ATTRS:
            return self._platform_has(path)
        if self.external_value(interp, path) is not MISSING:
            return True
        if oplibrary.registered_op(interp, obj.path, name) is not MISSING:
            return True
        if obj.path.startswith("torch.ops."):
            return False  # custom ops of GPU-only extensions are not registered on this target
        if obj.path in STDLIB_OBJECTS or self.package_state(obj.path.split(".")[0]) is True:
            return True  # an installed package at its pinned version: assume the API is there
        return Unknown(f"hasattr({obj.path}, {name!r})", f"hasattr:{obj.identity}.{name}")

    def _platform_has(self, path: str) -> bool:
        """Whether this device's platform has the torch attribute ``path`` (a read of the device)."""
        has = self.device.platform in device_overlay.PLATFORM_ATTRS[path]
        if self.target_reads is not None:
            self.target_reads.platform.append((path, has))
        return has

    def external_value(self, interp: Interpreter, path: str) -> Any:
        # mutable values are made per read (per interpreter); the rest is built once
        value = stdlib.dynamic_value(interp, path)
        if value is not MISSING:
            return value
        value = self.static_value(path)
        if self.target_reads is not None and path in self._target_paths:
            return self.target_reads.value(self._target_paths[path], path, value)
        return value

    def static_value(self, path: str) -> Any:
        """The overlays' entry for ``path`` (MISSING if none), read without noting it."""
        if self._static_values is None:
            self._static_values = self._build_static_values()
        return self._static_values.get(path, MISSING)

    def same_reads(self, reads: TargetReads) -> bool:
        """Whether this world answers every read in ``reads`` as the world that made them
        did (its opaque reads are the caller's to compare: the device, the model)."""
        for path, truth in reads.platform:
            if self._platform_has(path) != truth:
                return False
        for path, fact in reads.values:
            if _fact(self.static_value(path)) != fact:
                return False
        for path, args, fact in reads.calls:
            native = self.static_value(path)
            if not isinstance(native, Native):
                return False
            try:
                # the device overlays' natives use the interpreter only to raise
                answer = native.fn(None, list(args), {})
            except Exception:  # noqa: BLE001 - any failure means "not the same answer"
                return False
            if _fact(answer) != fact:
                return False
        return True

    def _build_static_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for python_overlay in PYTHON_OVERLAYS.values():
            values.update(python_overlay(self))
        for name, target_overlay in TARGET_OVERLAYS.items():
            made = target_overlay(self)
            if ":" in name:
                values.update(made)  # a model of torch (FlashInfer) itself, the same for every target: not a read
                continue
            # importlib's answers come from the packages (a key of their own where it matters)
            what = {"importlib": "packages", "transformers": "model", "safetensors": "model"}.get(name, "device")
            self._target_paths.update(dict.fromkeys(made, what))
            values.update(made)
        return values

    def call_external(self, interp: Interpreter, func: External, args: list[Any], kwargs: dict[str, Any]) -> Any:
        path = func.path
        if path.startswith("logging.Logger."):
            return stdlib.call_logger(interp, path, args)
        form = typeforms.call_typing(path)
        if form is not MISSING:
            return form
        if path == "enum.Enum" or path == "enum.IntEnum":
            return Unknown("functional enum API")
        # an object made by an installed package: it exists and has the API its pinned
        # version has; its value is unknown (comparing it or testing its truth forks)
        return External(f"{path}()", call_identity(interp, func, args, kwargs))

    # ---- operations on the overlays' own values -------------------------------------------
    def binop(self, interp: Interpreter, op: str, left: Any, right: Any) -> Any:
        tensor = tensors.tensor_binop(interp, op, left, right)
        if tensor is not MISSING:
            return tensor
        return paths.binop(interp, op, left, right)

    def compare(self, interp: Interpreter, op: str, left: Any, right: Any) -> Any:
        tensor = tensors.tensor_binop(interp, op, left, right)
        if tensor is not MISSING or op in ("==", "!="):
            return tensor  # the interpreter asks "==" of the world only for values it does not own
        return stdlib.compare(interp, op, left, right)

    def external_truth(self, value: External) -> Any:
        """`bool()` of an outside object the world knows, or NOT_HANDLED."""
        known = device_overlay.external_truth(value.path)
        return MISSING if known is None else known

    def external_isinstance(self, value: External, typ: str) -> Any:
        return tensors.dtype_isinstance(value.path, typ)

    def to_str(self, value: Any) -> str | None:
        return paths.to_str(value)

    def native_attr(self, interp: Interpreter, obj: Any, name: str) -> Any:
        if hasattr(obj, "native_attr"):  # tool-side stand-ins (e.g. the recording parser)
            return obj.native_attr(interp, name)
        if isinstance(obj, PathValue):
            return paths.path_attr(self, interp, obj, name)
        value = stdlib.value_attr(interp, obj, name)
        if value is not MISSING:
            return value
        return Unknown(f"attribute {name} of {type(obj).__name__}")

    def set_native_attr(self, interp: Interpreter, obj: Any, name: str, value: Any) -> None:
        if hasattr(obj, "set_native_attr"):  # tool-side stand-ins (an abstract tensor)
            obj.set_native_attr(interp, name, value)

    def external_item(self, interp: Interpreter, obj: Any, index: Any) -> Any:
        return typeforms.external_item(interp, obj, index)

    def native_item(self, interp: Interpreter, obj: Any, index: Any) -> Any:
        if hasattr(obj, "native_item"):  # tool-side stand-ins (a checkpoint's tensor)
            return obj.native_item(interp, index)
        value = stdlib.value_item(interp, obj, index)
        if value is not MISSING:
            return value
        return Unknown(f"subscript of {type(obj).__name__}")

    def set_native_item(self, interp: Interpreter, obj: Any, key: Any, value: Any) -> None:
        if hasattr(obj, "set_native_item"):  # tool-side stand-ins (an abstract tensor)
            obj.set_native_item(interp, key, value)
            return
        if isinstance(obj, Environ) and isinstance(key, str):
            obj.values[key] = value if isinstance(value, str) else interp.to_str(value)

    def is_environ(self, obj: Any) -> bool:
        return isinstance(obj, Environ)

    def environ_contains(self, interp: Interpreter, item: Any) -> Any:
        return item in interp.environ.values if isinstance(item, str) else Unknown("env key")

    def iterate_native(self, interp: Interpreter, value: Any) -> list[Any] | None:
        if hasattr(value, "native_iter"):  # tool-side stand-ins (a reduction's (values, indices))
            return list(value.native_iter(interp))
        if isinstance(value, Environ):
            return list(value.values.keys())
        return None

    # ---- classes: dataclasses, enums, msgspec structs, typing ------------------------------
    def instance_special(self, interp: Interpreter, obj: Instance, name: str) -> Any:
        return None

    def class_special(self, interp: Interpreter, cls: Class, name: str) -> Any:
        return classes.class_special(interp, cls, name)

    def before_instance_write(self, interp: Interpreter, obj: Instance, name: str, value: Any, event: Any) -> None:
        return None

    def class_created(self, interp: Interpreter, cls: Class) -> None:
        classes.class_created(interp, cls)

    def make_enum(self, interp: Interpreter, cls: Class) -> None:
        classes.make_enum(interp, cls)

    def enum_lookup(self, interp: Interpreter, cls: Class, args: list[Any]) -> Any:
        return classes.enum_lookup(interp, cls, args)

    def enum_by_name(self, interp: Interpreter, cls: Class, name: Any) -> Any:
        return classes.enum_by_name(interp, cls, name)


def _fact(value: Any, depth: int = 0) -> Any:
    """A read's answer as plain data to compare (its type kept: True is not 1), or None when
    it is not plain data (then it cannot be compared across targets)."""
    if value is None or value.__class__ in (bool, int, float, str, bytes):
        return (value.__class__.__name__, value)
    if value.__class__ in (tuple, list) and depth < 4:
        items = tuple(_fact(v, depth + 1) for v in value)
        return None if None in items else (value.__class__.__name__, items)
    return None


class TargetReads:
    """What of the target one evaluation read: answers that are plain data, kept to be asked
    again of another target (``NativeWorld.same_reads``), and the rest by kind only
    (``opaque``: "device", "model", "packages"), which only the same target answers alike."""

    def __init__(self) -> None:
        self.opaque: set[str] = set()
        self.values: list[tuple[str, Any]] = []  # an overlay entry that is plain data
        self.calls: list[tuple[str, tuple[Any, ...], Any]] = []  # an overlay native called
        self.platform: list[tuple[str, bool]] = []  # whether the platform has a torch attribute
        self._wrapped: dict[str, Native] = {}  # one wrapper per native: identity as unrecorded

    def value(self, what: str, path: str, value: Any) -> Any:
        """The overlay entry ``path`` read: noted, and a native wrapped so its calls are."""
        if what != "device" or value is MISSING:
            if value is not MISSING:
                self.opaque.add(what)
            return value
        if isinstance(value, Native):
            if path in self._wrapped:
                return self._wrapped[path]
            fn = value.fn

            def noted(i: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
                try:
                    answer = fn(i, args, kwargs)
                except BaseException:
                    self.opaque.add("device")  # a raise is an answer too (no CUDA device here)
                    raise
                given = _fact(list(args))
                fact = _fact(answer)
                if kwargs or given is None or fact is None:
                    self.opaque.add("device")
                else:
                    self.calls.append((path, tuple(args), fact))
                return answer

            wrapped = self._wrapped[path] = Native(value.name, noted, value.bind_self)
            return wrapped
        fact = _fact(value)
        if fact is None:
            self.opaque.add("device")
        else:
            self.values.append((path, fact))
        return value


# config classes' initialisers (world/configrun.py) run in a world of Python's builtins and pure
# stdlib: their module globals bind nothing of the outside, so no device is read and a CPU
# device stands for none
configrun.register_world(lambda: NativeWorld(parse_device("cpu"), Environment(), []))

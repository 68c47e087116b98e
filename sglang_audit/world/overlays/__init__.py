"""The target's overlays: what the world outside the analysed tree answers for one target.

``device.py`` (torch.cuda/torch.version/pynvml/platform/triton's driver from the ``Device``), ``packages.py``
(importlib's view of the installed packages, from the ``Environment``), ``files.py`` (file
probes, only inside the model directories and the source tree), ``boundaries.py`` (SGLang's
I/O functions answered from config.json and the device, ``rules/boundaries.toml``),
``checkpoint.py`` (safetensors' ``safe_open`` and a binary read of a safetensors file,
answered from the checkpoint's headers, ``inputs/checkpoint.py``), ``tensors.py`` (torch's
tensors as shape, dtype and device without data, and ``torch.nn.Parameter`` as a class SGLang's
parameter classes subclass; the same for every target, so never a target read),
``libtensors.py`` (kernel libraries' pure tensor helpers, FlashInfer's convert_to_block_layout,
as the shapes their Python bodies give), ``oplibrary.py`` (torch.library's operator registry:
``torch.ops.<ns>.<name>`` runs what the analysed code registered).
``OVERLAYS`` maps a module name to its attribute lister; ``NativeWorld`` composes these with
the pure Python ones of ``evaluate/overlays``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_audit.world.overlays import (
    boundaries,
    checkpoint,
    device,
    libtensors,
    oplibrary,
    packages,
    tensors,
)
from sglang_audit.world.overlays.host import TargetHost

TargetOverlay = Callable[[TargetHost], dict[str, Any]]


def module_of(key: str) -> str:
    """The module an ``OVERLAYS`` key lists (``torch:tensors`` lists torch's names)."""
    return key.split(":", 1)[0]

OVERLAYS: dict[str, TargetOverlay] = {
    "importlib": packages.importlib_attrs,
    "platform": device.platform_attrs,
    "pynvml": device.pynvml_attrs,
    "safetensors": checkpoint.safetensors_attrs,
    "torch": device.torch_attrs,
    # a second lister of torch's names, keyed "<module>:<part>": the same for every target
    "torch:tensors": tensors.tensor_attrs,
    "torch:oplibrary": oplibrary.oplibrary_attrs,
    "flashinfer:tensors": libtensors.flashinfer_attrs,
    "transformers": boundaries.transformers_attrs,
    "triton": device.triton_attrs,
}

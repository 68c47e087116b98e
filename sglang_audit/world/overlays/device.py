"""The device model as torch, NVML and ``platform`` report it: arch, CUDA, platform, memory,
driver, all from the ``Device`` the user named. Nothing else about the GPU is assumed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from sglang_audit.evaluate.values import Class, External, Instance, Native, Unknown
from sglang_audit.inputs.device import SM_COUNT

if TYPE_CHECKING:
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.inputs.device import Device
    from sglang_audit.world.overlays.host import TargetHost

# attributes that do not exist on a plain torch (GPU vendors' extensions)
ABSENT_ATTRS = {"torch.hpu", "torch.musa", "torch.cuda.is_musa", "torch.version.musa", "torch.version.xpu"}
PLATFORM_ATTRS = {"torch.npu": ("npu",)}


def capability(d: Device, interp: Interpreter) -> Any:
    if d.platform not in ("cuda", "hip"):
        raise interp.make_raise("RuntimeError", "Found no NVIDIA driver on your system")
    return (d.major, d.minor)


def device_properties(d: Device) -> Any:
    props = Class("_CudaDeviceProperties", (), {}, None)
    inst = Instance(props)
    inst.attrs.update(
        name=d.name, major=d.major, minor=d.minor, total_memory=d.memory_mib * 1024 * 1024,
        multi_processor_count=SM_COUNT.get(d.arch, Unknown("multiprocessor count")),
        gcnArchName=f"{d.arch}:sramecc+:xnack-" if d.platform == "hip" else "",
        is_integrated=d.arch == "sm121",
    )
    return inst


def torch_attrs(host: TargetHost) -> dict[str, Any]:
    d = host.device
    return {
        "torch.version.cuda": d.cuda if d.platform == "cuda" else None,
        "torch.version.hip": d.hip if d.platform == "hip" else None,
        "torch.version.git_version": "unknown",
        "torch.__version__": host.torch_version,
        "torch.cuda.is_available": Native("cuda.is_available", lambda i, a, k: d.platform in ("cuda", "hip")),
        "torch.cuda.device_count": Native("cuda.device_count", lambda i, a, k: d.gpu_count if d.platform in ("cuda", "hip") else 0),
        "torch.cuda.current_device": Native("cuda.current_device", lambda i, a, k: 0),
        "torch.cuda.is_initialized": Native("cuda.is_initialized", lambda i, a, k: False),
        "torch.cuda.get_device_capability": Native("cuda.get_device_capability", lambda i, a, k: capability(d, i)),
        "torch.cuda.get_device_name": Native("cuda.get_device_name", lambda i, a, k: d.name if d.platform in ("cuda", "hip") else Unknown("no CUDA device")),
        "torch.cuda.get_device_properties": Native("cuda.get_device_properties", lambda i, a, k: device_properties(d)),
        "torch.cuda.mem_get_info": Native("cuda.mem_get_info", lambda i, a, k: (d.memory_mib * 1024 * 1024, d.memory_mib * 1024 * 1024)),
        "torch.backends.cudnn.is_available": Native("cudnn.is_available", lambda i, a, k: d.platform == "cuda"),
        "torch.backends.cudnn.version": Native("cudnn.version", lambda i, a, k: d.cudnn if d.cudnn is not None else Unknown("the cuDNN version (pass --cudnn)", "cudnn:version")),
        "torch.cuda.is_bf16_supported": Native("is_bf16_supported", lambda i, a, k: True),
        "torch.xpu.is_available": Native("xpu.is_available", lambda i, a, k: d.platform == "xpu"),
        "torch.npu.is_available": Native("npu.is_available", lambda i, a, k: d.platform == "npu"),
        "torch.cpu.is_available": Native("cpu.is_available", lambda i, a, k: d.platform == "cpu"),
        "torch.mps.is_available": Native("mps.is_available", lambda i, a, k: False),
        "torch.backends.mps.is_available": Native("mps.is_available", lambda i, a, k: False),
        "torch.distributed.is_initialized": Native("dist.is_initialized", lambda i, a, k: False),
        "torch._C._cpu._is_amx_tile_supported": Native("amx", lambda i, a, k: Unknown("AMX support of the CPU", "cpu:amx") if d.platform == "cpu" else False),
        "torch.cpu._is_amx_tile_supported": Native("amx", lambda i, a, k: Unknown("AMX support of the CPU", "cpu:amx") if d.platform == "cpu" else False),
        "torch.get_device_module": Native("get_device_module", lambda i, a, k: External("torch.cuda")),
    }


def triton_target(d: Device, interp: Interpreter) -> Any:
    """``triton.runtime.driver.active.get_current_target()``: the GPUTarget of triton's one
    active driver. CUDA: ``GPUTarget("cuda", major * 10 + minor, 32)`` (triton-lang/triton
    third_party/nvidia/backend/driver.py, CudaDriver.get_current_target; active when
    torch.cuda.is_available() and torch.version.hip is None); ROCm: backend "hip" and the gfx
    arch (third_party/amd/backend/driver.py), its warp size from the device, not modelled.
    Without a GPU no driver is active and triton raises RuntimeError (python/triton/runtime/
    driver.py, _create_driver); XPU and NPU builds ship their own triton, not modelled."""
    if d.platform in ("xpu", "npu"):
        return Unknown(f"the triton backend of a {d.platform} build (its own triton package)", "triton:target")
    if d.platform not in ("cuda", "hip"):
        raise interp.make_raise("RuntimeError", "0 active drivers ([]). There should only be one.")
    target = Instance(Class("GPUTarget", (), {}, None))
    if d.platform == "cuda":
        # a CUDA device has its compute capability
        target.attrs.update(backend="cuda", arch=cast(int, d.major) * 10 + cast(int, d.minor), warp_size=32)
    else:
        target.attrs.update(backend="hip", arch=d.arch, warp_size=Unknown("warp size of the ROCm device"))
    return target


def triton_attrs(host: TargetHost) -> dict[str, Any]:
    d = host.device
    return {
        "triton.runtime.driver.active.get_current_target": Native("get_current_target", lambda i, a, k: triton_target(d, i)),
    }


def pynvml_attrs(host: TargetHost) -> dict[str, Any]:
    # NVML (0.5.21+ reads the compute capability through it first)
    d = host.device
    return {
        "pynvml.nvmlInit": Native("nvmlInit", lambda i, a, k: None),
        "pynvml.nvmlShutdown": Native("nvmlShutdown", lambda i, a, k: None),
        "pynvml.nvmlDeviceGetCount": Native("nvmlDeviceGetCount", lambda i, a, k: d.gpu_count),
        "pynvml.nvmlDeviceGetHandleByIndex": Native("nvmlDeviceGetHandleByIndex", lambda i, a, k: External("pynvml.handle")),
        "pynvml.nvmlDeviceGetCudaComputeCapability": Native("nvmlDeviceGetCudaComputeCapability", lambda i, a, k: (d.major, d.minor) if d.platform == "cuda" else Unknown("NVML on a non-NVIDIA device")),
        "pynvml.nvmlDeviceGetName": Native("nvmlDeviceGetName", lambda i, a, k: d.name),
        "pynvml.nvmlSystemGetDriverVersion": Native("nvmlSystemGetDriverVersion", lambda i, a, k: d.driver),
    }


def platform_attrs(host: TargetHost) -> dict[str, Any]:
    return {
        "platform.machine": Native("platform.machine", lambda i, a, k: "x86_64"),
        "platform.system": Native("platform.system", lambda i, a, k: "Linux"),
        "platform.processor": Native("platform.processor", lambda i, a, k: "x86_64"),
    }


def external_truth(path: str) -> bool | None:
    """``bool()`` of a torch object the device model knows, or None."""
    if path.startswith("torch.ops.") and "(" not in path:
        return True  # an op namespace object (always truthy, like any module)
    return None

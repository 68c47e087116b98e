# imitates flashinfer/utils.py (0.7.2 shape): the device helpers and the FA2/FA3 dispatcher
import functools

import torch


def version_at_least(version, base_version):
    from packaging import version as pkg_version

    return pkg_version.parse(version) >= pkg_version.parse(base_version)


@functools.cache
def get_compute_capability(device):
    if device.type != "cuda":
        raise ValueError("device must be a cuda device")
    properties = torch.cuda.get_device_properties(device)
    return properties.major, properties.minor


def is_sm90a_supported(device):
    major, _ = get_compute_capability(device)
    return major == 9 and version_at_least(torch.version.cuda, "12.3")


def is_sm100a_supported(device):
    major, _ = get_compute_capability(device)
    return major == 10 and version_at_least(torch.version.cuda, "12.8")


def is_fa3_backend_supported(pos_encoding_mode, use_fp16_qk_reductions, use_custom_mask, dtype_q, dtype_kv):
    if use_custom_mask:
        return False
    if pos_encoding_mode != 0:
        return False
    return True


def determine_attention_backend(device, pos_encoding_mode, use_fp16_qk_reductions, use_custom_mask, dtype_q, dtype_kv):
    if is_sm90a_supported(device) and is_fa3_backend_supported(
        pos_encoding_mode, use_fp16_qk_reductions, use_custom_mask, dtype_q, dtype_kv
    ):
        return "fa3"
    else:
        return "fa2"

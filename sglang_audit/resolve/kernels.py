"""Will the kernel exist? What the kernel library itself declares for the device (issue 17).

After resolution, each setting whose value makes SGLang call a FlashInfer entry point
(``rules/kernels.toml``) gets a ``KernelVerdict``: the entry is followed, by name, into the
FlashInfer version the release pins (``source.flashinfer.locate_flashinfer``) and its declared
requirements are read from the IR (``frontend``), never imported or run:

* ``@backend_requirement({key: fn, ...}, common_check=...)`` on the entry: the requirement
  function for SGLang's backend key and its ``@supported_compute_capability([...])``;
* ``@supported_compute_capability([...])`` on the entry itself;
* an ``is_*_supported`` helper: its capability guards, evaluated for the device;
* the JIT module getter the entry runs: the ``gen_*_module`` spec it builds (the getter's
  if/elif on the capability string evaluated), that spec's ``supported_major_versions``,
  and whether the kernels are prebuilt artifacts fetched at run time (``get_artifact``).

Each is a ``KernelLayer`` with file:line in the version read. A layer that FlashInfer
enforces on the call (the backend table, the decorator, the JIT arch list) saying
"unsupported" makes the verdict unsupported; conditions on the call's arguments (dtypes,
shapes) are listed, not evaluated; where only a runtime artifact decides, the verdict is
unknown and says so. A helper (`is_*_supported`) is a declaration, not a check the entry runs: it only informs.

This module decides which settings ask and attaches the verdicts; reading FlashInfer is
``kernelread`` (imported when a verdict is not remembered, ``kernelmemo``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.errors import AuditError
from sglang_audit.factfiles import KernelRow, KernelsFacts, OtherKernel
from sglang_audit.resolve.kernelmemo import KernelMemo, Reads
from sglang_audit.result import KERNEL_UNKNOWN as UNKNOWN
from sglang_audit.result import (
    STATUS_RESOLVED,
    STATUS_UNSUPPORTED,
    KernelVerdict,
    LayerValue,
    Resolution,
    Setting,
    UnknownValue,
)

if TYPE_CHECKING:
    from sglang_audit.frontend.parse import SourceCache
    from sglang_audit.inputs.device import Device, Environment
    from sglang_audit.source.flashinfer import FlashInferTree

# the default of --flashinfer-source (e.g. `none` in the unit tests, which must not download)
FLASHINFER_SOURCE_ENV = "SGLANG_AUDIT_FLASHINFER_SOURCE"
# the sgl-kernel source read for the attention kernel level: a wheel or directory, or `none`
# (the unit tests); unset, the release's pin (downloaded into the cache)
SGL_KERNEL_SOURCE_ENV = "SGLANG_AUDIT_SGL_KERNEL_SOURCE"
# the settings whose value names an attention backend of the release's registry (issue 42);
# the attention stage's value is on attention_backend (HybridAttnBackend names both parts)
ATTENTION_SETTINGS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
# the setting whose layer value is the speculative worker built: the attention backend classes
# its construction built (the draft's) go to the same kernel level (LayerValue.backends_built)
SPECULATIVE_SETTING = "speculative_algorithm"


def kernel_spec() -> KernelsFacts:
    from sglang_audit import factfiles

    return factfiles.kernels()


# --------------------------------------------------------------------------- attach


def attach(
    res: Resolution,
    sglang_root: Path,
    cache: SourceCache,
    flashinfer_source: str | None = None,
    progress: Callable[[str], None] | None = None,
    locate: Callable[..., Any] | None = None,
    memo: KernelMemo | None = None,
) -> Resolution:
    """``res`` with a ``kernel`` verdict on each setting that calls a kernel library.

    ``sglang_root``: the directory holding ``sglang/`` (for the SGLang call site).
    FlashInfer is located only when some setting needs it; failing to locate it makes
    those verdicts unknown (with the reason), never an error of the command. ``memo``:
    where a verdict read before from the same files may be found (``kernelmemo``)."""
    if res.rejected is not None:
        return res
    spec = kernel_spec()
    wanted: dict[str, tuple[str, KernelRow | OtherKernel | None, str]] = {}  # setting -> (kind, row, reason)
    # setting -> (call site, condition) of its derived row's call (the layers' forward)
    called: dict[str, tuple[str, str]] = {}
    unused: dict[str, str] = {}  # setting -> why no layer of the model calls its entry
    for name, setting in res.settings.items():
        if not setting.present:
            continue
        derived = _layer_call_row(name, setting, res, spec)
        if isinstance(derived, Unused):
            wanted[name] = ("unused", None, derived.entry)
            unused[name] = derived.why
            continue
        if isinstance(derived, str):
            wanted[name] = ("unknown", None, derived)
            continue
        if derived is not None:
            wanted[name] = ("flashinfer", derived[0], "")
            called[name] = derived[1:]
            continue
        choice = _classify(name, setting, res, spec)
        if choice is not None:
            wanted[name] = choice
    attention = _attention_verdicts(res, sglang_root, cache, flashinfer_source, progress, locate, memo)
    if not wanted and not attention:
        return res
    tree = None
    source_json: dict[str, Any] | None = None
    error = ""
    if any(kind == "flashinfer" for kind, _, _ in wanted.values()):
        if locate is None:
            from sglang_audit.source.flashinfer import locate_flashinfer

            locate = locate_flashinfer
        try:
            if flashinfer_source is not None and flashinfer_source.strip().lower() == "none":
                raise AuditError(f"not read (--flashinfer-source none, or {FLASHINFER_SOURCE_ENV}=none)")
            tree = locate(flashinfer_source, res.source.get("flashinfer"), progress=progress)
            source_json = {"library": "flashinfer", "version": tree.version, "origin": tree.origin}
        except AuditError as exc:
            error = str(exc)
            source_json = {"library": "flashinfer", "error": error}
    cc = _capability(res.device)
    settings = dict(res.settings)
    for name, (kind, row, reason) in wanted.items():
        if kind == "flashinfer":
            assert isinstance(row, KernelRow)
            if tree is None:
                verdict = KernelVerdict(UNKNOWN, "flashinfer", None, row.entry, row.backend,
                                        f"FlashInfer source not read: {error}")
            elif cc is None:
                verdict = KernelVerdict(UNKNOWN, "flashinfer", tree.version, row.entry,
                                        row.backend, f"no CUDA compute capability for {res.device.get('arch')}")
            else:
                verdict = _memoised_row(tree, row, res, sglang_root, cache, memo)
                layer = res.settings[name].layer
                if name in called:
                    site, condition = called[name]
                    verdict = replace(verdict, call_site=site)  # the call the forward made
                    if condition and verdict.status != UNKNOWN:
                        # made on some branches only (a fallback elsewhere): the library's
                        # answer informs, it is no verdict on the setting
                        verdict = replace(verdict, status=UNKNOWN, reason=(
                            f"{verdict.function} is called {condition} only; "
                            f"FlashInfer's answer for that call: {verdict.status}, {verdict.reason}"))
                elif isinstance(layer, LayerValue) and layer.status == STATUS_RESOLVED and layer.site:
                    # the call the built layer makes, not the first importer of the entry point;
                    # through a runner, the call in its fused function ("... -> f at file:line")
                    through_runner = layer.code.startswith("MoeRunner(")
                    site = layer.code.rsplit(" at ", 1)[1] if through_runner and " at " in layer.code else layer.site
                    verdict = replace(verdict, call_site=site) if not through_runner or " at " in layer.code else verdict
        elif kind == "unused":
            verdict = KernelVerdict(UNKNOWN, reason.split(".")[0], None, reason, "", f"not used: {unused[name]}",
                                    unused=unused[name])
        else:
            entry = row.entry if isinstance(row, KernelRow) else ""
            library = row.library if isinstance(row, OtherKernel) else "flashinfer"
            backend = row.backend if isinstance(row, KernelRow) else ""
            verdict = KernelVerdict(UNKNOWN, library, None, entry, backend, reason)
        settings[name] = settings[name].with_kernel(verdict)
    for name, verdict in attention.items():
        settings[name] = settings[name].with_kernel(verdict)
    return replace(res, settings=settings, kernel_source=source_json if wanted else res.kernel_source)


def _memoised_row(tree: FlashInferTree, row: KernelRow, res: Resolution, sglang_root: Path, cache: SourceCache,
                  memo: KernelMemo | None) -> KernelVerdict:
    key = memo.key(tree.package_dir, tree.version, row, res.device, res.env, sglang_root) if memo is not None else None
    known = memo.get(key) if memo is not None else None
    if known is not None:
        return known
    # the reading itself (kernelread) only now: a remembered verdict needs none of it
    from sglang_audit.frontend.parse import ParseFailure
    from sglang_audit.resolve.kernelread import FlashInferReader, evaluate_row
    from sglang_audit.resolve.libeval import LibraryEval

    reads = Reads()
    try:
        lib = LibraryEval(tree.package_dir, cache, *_device_model(res))
        verdict = evaluate_row(FlashInferReader(tree.package_dir, cache, reads), row, lib, tree.version, sglang_root,
                               cache, reads)
    except (RecursionError, ParseFailure) as exc:  # a pathological file: unknown, not a crash
        return KernelVerdict(UNKNOWN, "flashinfer", tree.version, row.entry,
                             row.backend, f"FlashInfer source not readable: {exc}")
    if memo is not None:
        memo.put(key, reads, verdict)
    return verdict


def _value(setting: Setting) -> Any:
    if setting.runtime is not None and not isinstance(setting.runtime, UnknownValue):
        return setting.runtime
    return setting.config


def _classify(name: str, setting: Setting, res: Resolution,
              spec: KernelsFacts) -> tuple[str, KernelRow | OtherKernel | None, str] | None:
    rows = [r for r in spec.kernel if r.setting == name]
    others = [r for r in spec.other if r.setting == name]
    if not rows and not others:
        return None
    model = res.model
    draft = any(r.model == "draft" for r in rows)
    if draft and model.draft_architecture is None:
        return None
    quant = model.draft_quantization if draft else model.quantization
    if isinstance(quant, UnknownValue):
        return ("unknown", None, f"the model's quantization is unknown ({quant.reason})") if rows else None
    value = _value(setting)
    layer = setting.layer
    # a row that holds only for checkpoints setting a quantization_config key (the block-FP8
    # runner: Fp8LinearMethod dispatches it only when weight_block_size is set) is dropped for
    # a checkpoint without it, and makes the verdict unknown when config.json cannot be read
    keys = {r.quant_config_key for r in rows if r.quant_config_key} | {r.quant_config_key for r in others if r.quant_config_key}
    present = {key: _quant_config_has(res, key) for key in sorted(keys)}
    for key, has in present.items():
        if isinstance(has, str) and any(value in r.values and quant in r.quantization and r.quant_config_key == key
                                        for r in rows):
            return ("unknown", None, has)
    rows = [r for r in rows if not r.quant_config_key or present[r.quant_config_key] is True]
    others = [r for r in others if not r.quant_config_key or present[r.quant_config_key] is True]
    for row in rows:
        if value in row.values and quant in row.quantization:
            if isinstance(layer, LayerValue) and layer.status == STATUS_RESOLVED and row.entry.rsplit(".", 1)[-1] not in (layer.value or ""):
                # the layers were built and call another kernel (a draft built unquantized runs
                # Triton whatever the checkpoint's quantization): the kernel question is theirs
                continue
            return ("flashinfer", row, "")
    built = isinstance(layer, LayerValue) and layer.status == STATUS_RESOLVED
    for other in others:
        if built:
            break  # the built layer names the kernel it calls (a deep_gemm flag on a layer running cutlass_moe_fp4)
        if value in other.values and (not other.quantization or quant in other.quantization):
            return ("other", other, other.reason)
    if not any(quant in r.quantization for r in rows):
        return None  # this model never reaches a listed kernel through this setting
    if isinstance(setting.layer, UnknownValue):
        return ("unknown", None, f"`{value}` is decided again when the layers are built; the kernel follows from that choice")
    if isinstance(value, UnknownValue):
        return ("unknown", None, f"the setting's value is unknown ({value.reason})")
    return None  # a value that calls no kernel library listed in rules/kernels.toml


@dataclass(frozen=True)
class Unused:
    """No layer of the model calls the setting's entry (``LayerValue.never_calls``)."""
    entry: str  # "flashinfer.mm_fp4"
    why: str


def _layer_call_row(name: str, setting: Setting, res: Resolution,
                    spec: KernelsFacts) -> tuple[KernelRow, str, str] | Unused | str | None:
    """The row of the kernel-library call the built layers' forward made for ``name``
    (``[[layer_call]]``: the linear stage's ``kernel_calls`` on the ``layer`` setting's value),
    with its call site and condition: the entry as SGLang called it, the ``backend=`` it
    passed; a call made on every branch that returns first, else one made on some (a fallback
    on the token count elsewhere: its verdict only informs, ``attach``). None when no resolved
    layer value holds such a call; a string (unknown, why) when
    whether the checkpoint reaches the setting's dispatch is not known (``quant_config_key``);
    ``Unused`` when the forward was read on every layer the model builds and none calls it."""
    quant = res.model.quantization
    for fact in spec.layer_call:
        if fact.setting != name or quant not in fact.quantization:
            continue
        has = _quant_config_has(res, fact.quant_config_key) if fact.quant_config_key else True
        if has is False:
            continue
        holder = res.settings.get(fact.layer)
        layer = holder.layer if holder is not None else None
        named = ", ".join(fact.functions) or f"{'/'.join(fact.libraries)} function"
        # only where the forwards read call no kernel library at all and the value is not one
        # that calls another library ([[other]]): a layer served by another kernel of the
        # setting (sgl-kernel's cutlass FP4 GEMM) uses the setting, whatever FlashInfer's entry
        never = layer.never_calls(fact.libraries, fact.functions) \
            if isinstance(layer, LayerValue) and not layer.kernel_calls and not _other_value(name, setting, spec) else ""
        if never and not isinstance(has, str):
            entry = f"{fact.libraries[0]}.{fact.functions[0]}" if fact.functions else fact.libraries[0]
            return Unused(entry, f"no dense linear layer of this model calls {entry} ({never})")
        if not isinstance(layer, LayerValue) or layer.status != STATUS_RESOLVED:
            if isinstance(layer, LayerValue) and layer.status == STATUS_UNSUPPORTED:
                continue  # SGLang refuses the layers (their value says where): no call to read
            if _other_value(name, setting, spec):
                continue  # another library's value: its own reason (rules/kernels.toml [[other]])
            why = (layer.reason or layer.value or layer.status) if isinstance(layer, LayerValue) else \
                layer.reason if isinstance(layer, UnknownValue) else "none, not built"
            return (f"no forward of the model's dense linear layers reached a {named} call (their value: {why}"
                    f"{_gaps(layer)}): no FlashInfer verdict to read")
        given = {(path, site): dict(kw) for path, site, kw in layer.library_calls}
        calls = sorted((c for c in layer.kernel_calls if c[0].split(".")[0] in fact.libraries
                        and (not fact.functions or c[1] in fact.functions)), key=lambda c: bool(c[3]))
        if not calls and layer.forward_stops and not _other_value(name, setting, spec):
            # no run of the forward ended: SGLang's code raised (or was not followed) before any
            # kernel call; the library's declaration of a call never made is no verdict
            return (f"no branch of the linear layers' forward reached a {named} call "
                    f"({'; '.join(layer.forward_stops)}): no FlashInfer verdict to read")
        for module, function, site, condition in calls[:1]:
            if isinstance(has, str):
                return has
            entry = f"{module}.{function}"
            backend = given.get((entry, site), {}).get("backend", "")
            caller = site.rsplit(":", 1)[0].removesuffix(".py").replace("/", ".")
            row = KernelRow(setting=name, model="target", values=(str(_value(setting)),), quantization=(str(quant),),
                            callers=(caller,), entry=entry, backend=backend[1:-1] if backend[:1] in "'\"" else "",
                            source=f"{fact.source}; called at {site}", quant_config_key=fact.quant_config_key)
            return row, site, condition
    return None


def _gaps(layer: Any) -> str:
    """Why the forward read on every layer the model builds decides nothing (LayerValue.forward_gaps)."""
    if not isinstance(layer, LayerValue) or not layer.forward_scope or not layer.forward_gaps:
        return ""
    return f"; on {layer.forward_scope}, not followed to its end: {'; '.join(layer.forward_gaps)}"


def _other_value(name: str, setting: Setting, spec: KernelsFacts) -> bool:
    """Whether the setting's value is one rules/kernels.toml says calls another library."""
    value = _value(setting)
    return any(o.setting == name and value in o.values for o in spec.other)


def _quant_config_has(res: Resolution, key: str) -> bool | str:
    """Whether the target checkpoint's config.json ``quantization_config`` sets ``key`` (not
    null), as SGLang's quant config reads it (``Fp8Config.from_config``: weight_block_size);
    a string says why that is not known."""
    from sglang_audit.inputs.modeldir import model_checkpoint

    path = res.model.path
    if not path:
        return f"the model directory is not known: whether its quantization_config sets {key} is not read"
    cfg = model_checkpoint(Path(path)).config
    if cfg is None:
        return f"{path}/config.json is not readable: whether its quantization_config sets {key} is not read"
    q = cfg.get("quantization_config")
    return isinstance(q, dict) and q.get(key) is not None


def _device_model(res: Resolution) -> tuple[Device, Environment]:
    """The device and environment a kernel library's code runs on (``libeval``): the
    resolution's, as its JSON holds them."""
    from dataclasses import fields

    from sglang_audit.inputs.device import Device, Environment

    known = {f.name for f in fields(Device)}
    return (Device(**{k: v for k, v in res.device.items() if k in known}),
            Environment(env=tuple(sorted(res.env.items()))))


def _capability(device: dict[str, Any]) -> tuple[int, int] | None:
    if device.get("platform") != "cuda" or device.get("major") is None or device.get("minor") is None:
        return None
    return (int(device["major"]), int(device["minor"]))


# --------------------------------------------------------------------------- attention (issue 42)


def _attention_verdicts(res: Resolution, sglang_root: Path, cache: SourceCache, flashinfer_source: str | None,
                        progress: Callable[[str], None] | None,
                        locate: Callable[..., Any] | None, memo: KernelMemo | None = None) -> dict[str, KernelVerdict]:
    """The kernel verdict of each attention setting whose backend's constructor imports a
    kernel-library function (``attnkernels``); a library is located only when one is imported.
    With ``memo``, both halves are remembered by what they read (``kernelmemo``): a hit on
    both imports neither ``attnkernels`` nor ``kernelread``."""
    cc = _capability(res.device)
    if cc is None:
        return {}
    reaches: dict[str, _ReachData] = {}
    built = res.settings.get(ATTENTION_SETTINGS[0])
    layer = built.layer if built is not None else None
    for name in ATTENTION_SETTINGS:
        setting = res.settings.get(name)
        value = _value(setting) if setting is not None and setting.present else None
        if not isinstance(value, str):
            continue
        # the kernel-library calls the built backend made serving a batch are the composition's
        # (attention_backend's), never a hybrid part's own
        ours = layer if name == ATTENTION_SETTINGS[0] and isinstance(layer, LayerValue) else None
        calls = ours.kernel_calls if ours is not None else ()
        passed = ours.kernel_call_args if ours is not None else ()
        found = _memoised_reach(sglang_root, cache, value, layer, memo, calls, passed)
        if found[2]:
            reaches[name] = found
    spec = res.settings.get(SPECULATIVE_SETTING)
    if spec is not None and isinstance(spec.layer, LayerValue) and spec.layer.backends_built:
        found = _memoised_built_reach(sglang_root, cache, spec.layer.backends_built, memo)
        if found[2]:
            reaches[SPECULATIVE_SETTING] = found
    if not reaches:
        return {}
    packages = {imp[0].split(".")[0] for r in reaches.values() for imp in r[2]}
    libraries: dict[str, tuple[Path | None, str | None, str]] = {}
    for package in sorted(packages):
        libraries[package] = _locate_library(package, res, sglang_root, flashinfer_source, progress, locate)
    out: dict[str, KernelVerdict] = {}
    for name, found in reaches.items():
        verdict = _memoised_attention_verdict(found, libraries, res, cache, memo)
        if verdict is not None:
            out[name] = verdict
    return out


# attnkernels.Reach as plain data, so a remembered one needs no attnkernels:
# (backend, class, ((module, name, site, condition, call, served "1" or "", given), ...), reason)
_ReachData = tuple[str, str, tuple[tuple[str, str, str, str, str, str, str], ...], str]


def _is_reach_data(value: object) -> bool:
    return (isinstance(value, tuple) and len(value) == 4 and isinstance(value[2], tuple)
            and all(isinstance(i, tuple) and len(i) == 7 and all(isinstance(x, str) for x in i) for i in value[2]))


def _memoised_reach(sglang_root: Path, cache: SourceCache, backend: str, layer: Any,
                    memo: KernelMemo | None, calls: tuple[tuple[str, str, str, str], ...] = (),
                    passed: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()) -> _ReachData:
    # the creator's choice reads only the stage outcome's status, site and value (attnkernels._chosen_call)
    # ... the library objects it built (attnkernels.built_objects) and the calls it served
    outcome = [layer.status, layer.site, layer.value, [[p, s, [list(g) for g in given]] for p, s, given in layer.library_calls]] \
        if isinstance(layer, LayerValue) else None
    return _remembered_reach(memo, {"format": "attn-reach5", "sglang_root": str(sglang_root), "backend": backend,
                                    "layer": outcome, "calls": [list(c) for c in calls],
                                    "passed": [[p, s, [list(g) for g in given]] for p, s, given in passed]},
                             lambda attnkernels, facts, reads: attnkernels.reach(sglang_root, cache, facts, backend,
                                                                                 layer, reads, calls, passed),
                             backend)


def _memoised_built_reach(sglang_root: Path, cache: SourceCache,
                          built: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...],
                          memo: KernelMemo | None) -> _ReachData:
    """``_memoised_reach`` for the backend classes a construction built (the speculative
    worker's draft backends): keyed by the classes and SGLang's arguments."""
    return _remembered_reach(memo, {"format": "attn-built-reach1", "sglang_root": str(sglang_root),
                                    "built": [[m, c, site, [list(g) for g in given]] for m, c, site, given in built]},
                             lambda attnkernels, facts, reads: attnkernels.reach_built(sglang_root, cache, facts,
                                                                                       built, reads),
                             "")


def _remembered_reach(memo: KernelMemo | None, key_parts: dict[str, Any], compute: Callable[[Any, Any, Reads], Any],
                      backend: str) -> _ReachData:
    """A reach from the memo (by ``key_parts``), else ``compute(attnkernels, facts, reads)``
    remembered with the SGLang files it read; a hit imports neither attnkernels nor the facts."""
    key = memo.key_of(key_parts) if memo is not None else None
    known = memo.get_value(key, _is_reach_data) if memo is not None else None
    if known is not None:
        return known  # type: ignore[return-value]  # checked by _is_reach_data
    from sglang_audit import factfiles
    from sglang_audit.resolve import attnkernels

    # the facts only now (rules/attention.toml is in the key through the tool's digest)
    facts = factfiles.attention().kernel
    if facts is None:
        return (backend, "", (), "rules/attention.toml has no [kernel] table")
    reads = Reads()
    found = compute(attnkernels, facts, reads)
    data: _ReachData = (found.backend, found.cls,
                        tuple((i.module, i.name, i.site, i.condition, i.call, "1" if i.served else "", i.given)
                              for i in found.imports),
                        found.reason)
    if memo is not None:
        memo.put(key, reads, data)
    return data


def _memoised_attention_verdict(found: _ReachData, libraries: dict[str, tuple[Path | None, str | None, str]],
                                res: Resolution, cache: SourceCache, memo: KernelMemo | None) -> KernelVerdict | None:
    used = sorted({imp[0].split(".")[0] for imp in found[2]})
    # the guards run on the device model and environment (libeval): both whole in the key
    key = memo.key_of({"format": "attn-verdict6", "reach": found, "device": res.device, "env": res.env,
                       "libraries": {p: [str(libraries[p][0]) if libraries[p][0] else None, *libraries[p][1:]]
                                     for p in used}}) if memo is not None else None
    known = memo.get_value(key, lambda v: isinstance(v, KernelVerdict) or v == _NO_VERDICT) if memo is not None else None
    if known is not None:
        return known if isinstance(known, KernelVerdict) else None
    from sglang_audit import factfiles
    from sglang_audit.resolve import attnkernels
    from sglang_audit.resolve.kernelread import FlashInferReader

    facts = factfiles.attention().kernel
    assert facts is not None  # a reach with imports was read with them
    reads = Reads()
    readers: dict[str, tuple[Any, str | None, str]] = {
        p: (FlashInferReader(d, cache, reads) if d is not None else None, v, why) for p, (d, v, why) in libraries.items()}
    reach = attnkernels.Reach(found[0], found[1], tuple(attnkernels.KernelImport(*i[:5], served=bool(i[5]), given=i[6])
                                                                  for i in found[2]),
                              found[3])
    verdict = attnkernels.verdict(reach, readers, attnkernels.DeviceFacts(*_device_model(res)),
                                  lambda p: facts.libraries.get(p, p), reads)
    if memo is not None:
        # "no verdict" too (the library objects built dispatch without a refusal): asking
        # again walks FlashInfer's dispatch on every resolution
        memo.put(key, reads, verdict if verdict is not None else _NO_VERDICT)
    return verdict


_NO_VERDICT = "no-verdict"  # remembered: the reading made no verdict


def _locate_library(package: str, res: Resolution, sglang_root: Path,
                    flashinfer_source: str | None, progress: Callable[[str], None] | None,
                    locate: Callable[..., Any] | None) -> tuple[Path | None, str | None, str]:
    """(``package``'s source directory or None, its version, why it was not read)."""
    import os

    try:
        if package == "flashinfer":
            if flashinfer_source is not None and flashinfer_source.strip().lower() == "none":
                raise AuditError(f"not read (--flashinfer-source none, or {FLASHINFER_SOURCE_ENV}=none)")
            if locate is None:
                from sglang_audit.source.flashinfer import locate_flashinfer

                locate = locate_flashinfer
            tree = locate(flashinfer_source, res.source.get("flashinfer"), progress=progress)
            return tree.package_dir, tree.version, ""
        if package == "sgl_kernel":
            spec = os.environ.get(SGL_KERNEL_SOURCE_ENV) or None
            if spec is not None and spec.strip().lower() == "none":
                raise AuditError(f"not read ({SGL_KERNEL_SOURCE_ENV}=none)")
            from sglang_audit.source.sglkernel import locate_sgl_kernel

            pin, dist = None, "sglang-kernel"
            if spec is None:
                from sglang_audit.inputs.pins import release_pins

                found = next((p for p in release_pins(sglang_root / "sglang", str(res.source.get("version")))
                              if p.package == "sgl-kernel"), None)
                if found is None or found.version is None:
                    raise AuditError(found.source if found is not None else "the release pins no sgl-kernel")
                pin, dist = found.version, found.dist or dist
            sk = locate_sgl_kernel(spec, pin, dist, progress=progress)
            return sk.package_dir, sk.version, ""
    except AuditError as exc:
        return None, None, str(exc)
    return None, None, f"{package} is not a library sglang-audit reads"

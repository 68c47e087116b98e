"""The pipeline the commands call: locate the source → read the model and flags →
resolve → (rules, render elsewhere).  Knows nothing of output formats."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_audit.errors import InputError, SourceError
from sglang_audit.evaluate.bounds import Bounds
from sglang_audit.evaluate.stack import deep_call, recursion_room
from sglang_audit.frontend import ir
from sglang_audit.frontend.bindings import bound_names
from sglang_audit.frontend.parse import ParseFailure, SourceCache
from sglang_audit.inputs.device import DEFAULT_CUDA
from sglang_audit.inputs.modeldir import HF_QUANT_CONFIG, model_checkpoint
from sglang_audit.inputs.pins import target_device
from sglang_audit.resolve.resultcache import ResultCache
from sglang_audit.resolve.targets import DEFAULT_MAX_PATHS, ModelInput, Target
from sglang_audit.result import (
    KERNEL_UNSUPPORTED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    LayerValue,
    Resolution,
)
from sglang_audit.shipped import profiles_dir
from sglang_audit.source.locate import SourceTree, locate_source

# The evaluator (interpreter, resolver, flag parser) is imported where it runs: a request
# answered from the result cache never loads it (~0.15 s of a CLI start).
if TYPE_CHECKING:
    from sglang_audit.inputs.flags import FlagTable
    from sglang_audit.inputs.launch import LaunchCommand
    from sglang_audit.resolve.resolver import Resolver


@dataclass
class Request:
    source: str | None
    arch: str
    model: str | None
    cuda: str = DEFAULT_CUDA
    cudnn: str | None = None
    driver: str | None = None  # --driver; None: DEFAULT_DRIVER, said to be assumed
    sets: list[str] = field(default_factory=list)
    launch: str | None = None
    env: list[str] = field(default_factory=list)
    with_packages: list[str] = field(default_factory=list)
    without_packages: list[str] = field(default_factory=list)
    env_profile: str | None = None  # rules/env_profiles.toml; None: the platform's default
    use_cache: bool = True
    flags: dict[str, Any] = field(default_factory=dict)  # already-typed field values (scripts)
    # the FlashInfer source read for the kernel verdicts: None = the release's pin (cache or
    # package index), a path, or "installed"; "none" = do not read it (verdicts unknown)
    flashinfer_source: str | None = None
    config: str | None = None  # SGLang's --config FILE (YAML server arguments)
    fields: tuple[str, ...] = ()  # ServerArgs fields to report besides settings.toml's
    all_fields: bool = False  # report every ServerArgs field


def launch_with_config(request: Request) -> str | None:
    """The request's launch command with its ``--config FILE`` folded in (for callers that
    carry a deployment as a launch string, e.g. ``diff``'s Deployment)."""
    import shlex

    from sglang_audit.inputs.launch import strip_comment

    if not request.config:
        return request.launch
    lines = (request.launch or "python -m sglang.launch_server").rstrip().splitlines() or [""]
    lines[-1] = strip_comment(lines[-1]).rstrip()  # a trailing comment would swallow the option
    return "\n".join(lines) + f" --config {shlex.quote(request.config)}"


def bundled_profiles() -> list[str]:
    return sorted(p.name for p in profiles_dir().iterdir() if (p / "config.json").is_file())


_HF_ID_LINE = re.compile(r"^- \*\*Hugging Face id:\*\* `([^`]+)`", re.M)


def profile_ids() -> dict[str, str]:
    """Hugging Face id → bundled profile name (each PROFILE.md names its id)."""
    out: dict[str, str] = {}
    for name in bundled_profiles():
        try:
            m = _HF_ID_LINE.search((profiles_dir() / name / "PROFILE.md").read_text(encoding="utf-8"))
        except OSError:
            continue
        if m:
            out[m.group(1)] = name
    return out


def locate_model(spec: str, progress: Callable[[str], None] | None = None, role: str = "model") -> ModelInput:
    try:
        return _locate_model(spec, progress, role)
    except OSError as exc:  # a name too long, a permission denied, ...
        shown = spec if len(spec) <= 200 else spec[:197] + "..."
        raise InputError(f"cannot access {role} {shown!r}: {exc.strerror or exc}") from None


def _warn(message: str) -> None:
    print(f"sglang-audit: warning: {message}", file=sys.stderr)


def _locate_model(spec: str, progress: Callable[[str], None] | None = None, role: str = "model") -> ModelInput:
    """A directory, a bundled profile (by name or by its Hugging Face id), or a Hugging
    Face id: the local HF cache first, then the bundled profile imitating it, then a
    download of the config files alone (unless HF_HUB_OFFLINE)."""
    from sglang_audit.inputs import hfhub

    path = Path(spec).expanduser()
    label: str | None = None
    if not path.exists() and (profiles_dir() / spec).is_dir():
        path = profiles_dir() / spec
        label = spec
    elif not path.exists() and hfhub.looks_like_repo_id(spec):
        snapshot, _quant = hfhub.cached_model_dir(spec)
        profile = profile_ids().get(spec)
        if snapshot is None and profile is not None:
            path, label = profiles_dir() / profile, profile
            if progress:
                progress(f"{role} {spec}: not in the Hugging Face cache; using the bundled profile {profile}")
        else:
            located = hfhub.locate_repo(spec, progress, warn=_warn)
            if located is None:
                raise InputError(f"{role} {spec}: not in the Hugging Face cache ({hfhub.cache_dir()}) and HF_HUB_OFFLINE "
                                 "is set; unset it to download config.json (no weights), or pass the model directory")
            path, label = located, spec
    if not path.exists():
        import difflib  # for the message only

        close = difflib.get_close_matches(spec, [*bundled_profiles(), *profile_ids()], n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        if "$" in spec:
            hint += " (a shell variable in a pasted command is not expanded; pass the path with --model)"
        raise InputError(f"{role} not found: {spec!r}{hint}: a directory with config.json, a Hugging Face id "
                         f"(ORG/NAME), or one of: {', '.join(bundled_profiles())}")
    if path.is_file() and path.name == "config.json":
        path = path.parent
    config = path / "config.json"
    if not config.is_file():
        raise InputError(f"no config.json in {role} directory {path}")
    found = model_checkpoint(path)
    if found.config_file.error is not None:
        raise InputError(found.config_file.error)
    data = found.config_file.data
    if not isinstance(data, dict):
        raise InputError(f"{config}: expected a JSON object, found {type(data).__name__}")
    if found.architectures is None:
        raise InputError(f"{config}: no \"architectures\" list naming the model class")
    hfq = path / HF_QUANT_CONFIG
    if found.hf_quant_file.present:
        if not hfq.is_file():
            raise InputError(f"{hfq}: not a regular file")
        if found.hf_quant_file.error is not None:
            raise InputError(found.hf_quant_file.error)
        if found.hf_quant is None:
            raise InputError(f"{hfq}: expected a JSON object")
    return ModelInput(label or path.name, path.resolve())


def parse_env(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"bad --env {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out



def flag_table(tree: SourceTree, resolver: Resolver) -> FlagTable:
    """The release's own flags: its entry class (rules/settings.toml `[entry]`) and parser.

    Evaluated once per release for a shared ``SourceCache`` and reused while the files it
    read are unchanged. The table may depend on the device (0.5.10's ``pre_warm_nccl``
    defaults to ``is_hip()``) or the model directory: the world notes what of the target
    the evaluation read (``NativeWorld.target_reads``), and a table is reused for another
    target only when what it read is the same there (a table that read no device fact
    serves every device). The environment (env vars, the packages installed, which follow
    the platform) is part of the key."""
    from sglang_audit.world.native import TargetReads

    target = resolver.target
    world = resolver.world
    # the environment, not just the user's env and --with/--without: which packages an image
    # carries follows the device's platform too (a ROCm image has no flashinfer)
    key = ("flag_table", str(resolver.root.resolve()), resolver.environment, repr(resolver.bounds))
    model = str(target.model.path)
    kept: list[tuple[FlagTable, Any, TargetReads, Any, str]] = resolver.cache.prepared.setdefault(key, [])
    for table, files, reads, device, model_dir in kept:
        same_device = device == target.device or ("device" not in reads.opaque and world.same_reads(reads))
        if same_device and ("model" not in reads.opaque or model_dir == model) and resolver.cache.current(files):
            return table
    first = len(resolver.cache.files_read)
    saved, world.target_reads = world.target_reads, TargetReads()
    try:
        table = _flag_table(tree, resolver)
        reads = world.target_reads
    finally:
        world.target_reads = saved
    kept[:] = [entry for entry in kept if resolver.cache.current(entry[1])]  # an edited tree's
    kept.append((table, resolver.cache.snapshot(resolver.cache.files_read[first:]), reads, target.device, model))
    return table


def _flag_table(tree: SourceTree, resolver: Resolver) -> FlagTable:
    from sglang_audit.evaluate.interpreter import Interpreter, PyRaise, Unmodelled
    from sglang_audit.evaluate.values import AnalysisBound, Class, ModuleObj
    from sglang_audit.inputs.flags import extract_flags

    entry = resolver.settings_spec.entry
    rel = entry.module.replace(".", "/") + ".py"
    interp = Interpreter(resolver.root, resolver.cache, resolver.world, {}, resolver.bounds)
    with recursion_room():
        try:
            mod = deep_call(interp.load_module, entry.module)  # evaluate/stack.py
            if not isinstance(mod, ModuleObj) or mod.failed:
                where = interp.parse_failures.get(rel) or getattr(mod, "failed", "missing")
                raise SourceError(f"cannot read {rel} in {tree.package_dir}: {where}")
            cls = mod.globals.get(entry.class_)
            if not isinstance(cls, Class):
                raise SourceError(f"no {entry.class_} class in {tree.package_dir.parent / rel}: unsupported layout")
            return deep_call(extract_flags, interp, cls)
        except (PyRaise, Unmodelled, AnalysisBound) as exc:
            # the module body itself stops (a raise at import, a bound): its flags are unknowable
            raise InputError(f"{release_name(tree)}: cannot read the flags of {rel}: {_stop_reason(exc)}") from None
        except RecursionError:
            raise InputError(f"{release_name(tree)}: cannot read the flags of {rel}: analysis bound reached: recursion too deep") from None


def release_name(tree: SourceTree) -> str:
    """How errors name the release ("SGLang 0.5.14")."""
    return f"SGLang {tree.version}" if tree.version else f"SGLang at {tree.package_dir}"


def read_argv(tree: SourceTree, resolver: Resolver, table: FlagTable, argv: list[str],
              router: bool = False) -> tuple[dict[str, Any], str | None]:
    """The server's argv as the release reads it: its own ``--config FILE`` merge
    (``yamlconfig``), then its parser (custom Action classes evaluated)."""
    from sglang_audit.evaluate.interpreter import Interpreter
    from sglang_audit.inputs.flags import parse_argv
    from sglang_audit.inputs.yamlconfig import merge_config

    interp = Interpreter(resolver.root, resolver.cache, resolver.world, {}, resolver.bounds)
    release = release_name(tree)
    with recursion_room():
        try:
            if "--config" in argv:
                argv = merge_config(interp, table, argv, release)
            return parse_argv(table, argv, release, router=router, interp=interp)
        except RecursionError:
            raise InputError(f"{release}: reading the command line: analysis bound reached: recursion too deep") from None


def _stop_reason(exc: Exception) -> str:
    from sglang_audit.evaluate.interpreter import PyRaise

    if isinstance(exc, PyRaise):
        return f"it raises at {exc.file}:{exc.line}" + (f" ({exc.text})" if exc.text else "")
    where = getattr(exc, "where", None)
    return str(exc) + (f" (evaluation stopped at {where})" if where and where not in str(exc) else "")


def check_entry(tree: SourceTree, resolver: Resolver) -> None:
    """Refuse a tree whose entry module (``ServerArgs``'s) cannot be parsed or defines no
    entry class: nothing could be resolved from it, so that is an input error (exit 2,
    with file:line), not a report of unknowns.  A SourceError, not an InputError: the
    release itself is unusable, whatever the flags (diff must not read it as "this
    release refuses the flags").  A structural check on the parsed module (no
    evaluation); the parse is cached for the resolution that follows."""
    entry = resolver.settings_spec.entry
    rel = entry.module.replace(".", "/") + ".py"
    path = resolver.root / rel
    if not path.is_file():
        raise SourceError(f"no {rel} in {resolver.root}: unsupported layout")
    try:
        module = resolver.cache.load(path)
    except ParseFailure as exc:
        where = f"{rel}:{exc.line}" if exc.line else rel
        raise SourceError(f"cannot analyse {where}: {exc.message} ({tree.package_dir})") from None
    if not _may_bind(module.body, entry.class_):
        raise SourceError(f"no {entry.class_} class in {rel} ({tree.package_dir}): unsupported or future layout")


def _may_bind(body: list[ir.Node], name: str) -> bool:
    """Whether module-level code (including if/try/with blocks) may bind ``name``."""
    return any(name in bound_names(node) for node in body) or _binds_anything(body)


def _binds_anything(body: list[ir.Node]) -> bool:
    """A star import or a module ``__getattr__`` (at any depth of if/try/with blocks) may
    supply any name."""
    for node in body:
        if node.kind in ("Import", "ImportFrom") and node.names == "*":
            return True
        if node.kind == "FunctionDef" and node.name == "__getattr__":
            return True
        blocks = [getattr(node, b, None) or [] for b in ("body", "orelse", "finalbody")] if node.kind in ("If", "For", "While", "Try", "With") else []
        blocks += [h.body for h in getattr(node, "handlers", None) or []] if node.kind == "Try" else []
        if any(_binds_anything(b) for b in blocks):
            return True
    return False


@dataclass
class Prepared:
    """A request turned into a target (and, when asked for or needed, the flag table)."""

    tree: SourceTree
    target: Target
    table: FlagTable | None


def prepare(request: Request, cache: SourceCache, progress: Callable[[str], None] | None = None,
            want_table: bool = False, results: ResultCache | None = None) -> Prepared:
    """``results``: where the typed ``--set`` flags of a plain request (no launch command,
    no config file, no --field) may be found from an earlier run on the same inputs, so
    that a result-cache hit does not evaluate the release's flag parser (nor, with no
    flags to type, build an evaluator for the entry check)."""
    watch_parsing(cache, progress)
    tree = located(request.source, cache, progress)
    release = release_name(tree)
    device = target_device(request.arch, request.cuda, request.cudnn, request.driver, tree.package_dir,
                           getattr(tree, "version", None), request.env_profile)
    launch: LaunchCommand | None = None
    if request.launch:  # shlex and the launch grammar: only for a pasted command
        from sglang_audit.inputs.launch import split_launch

        launch = split_launch(request.launch)
    # the command's own environment (NAME=VALUE, env, export, docker -e), then --env over it
    env = {**redacted(dict(launch.env if launch else ())), **parse_env(request.env)}
    model_spec = request.model
    # the flag table needs an evaluator; build the target in two steps
    placeholder = locate_model(model_spec, progress=progress) if model_spec else None
    target = Target(tree, device, placeholder or ModelInput("?", Path(".").resolve()), {}, env,
                    frozenset(request.with_packages), frozenset(request.without_packages),
                    env_profile=request.env_profile)
    flags: dict[str, Any] = dict(request.flags)
    table: FlagTable | None = None
    plain = placeholder is not None and not (launch or want_table or request.config or request.fields or request.all_fields)
    flags_key = results.flags_key(target, request.sets, request.flags) if plain and results is not None else None
    typed = results.get_flags(flags_key) if results is not None and flags_key is not None else None
    reads_from = len(cache.files_read)  # what typing the flags reads: checked before it is kept
    if typed is not None:
        # the same tool, tree and inputs typed these flags before: the entry check and the
        # flag table were passed then (both are functions of what the key holds)
        flags = typed
    else:
        from sglang_audit.resolve.resolver import Resolver, files_read_since

        resolver = Resolver(target, cache)
        check_entry(tree, resolver)
    if typed is None and (launch or request.sets or want_table or request.flags or request.config or request.fields
                          or request.all_fields):
        table = flag_table(tree, resolver)
        unknown = sorted(set(request.flags) - set(table.fields))
        if unknown:
            raise InputError(f"{release}: unknown setting {unknown[0]!r}")
        argv = list(launch.argv) if launch else []
        if request.config:
            if "--config" in argv:
                # the release's merger refuses two files; say which two
                raise InputError(f"{release}: --config given twice (as an option and inside --launch); only one file is allowed")
            argv = ["--config", request.config, *argv]
        if argv:
            launch_flags, launch_model = read_argv(tree, resolver, table, argv, router=bool(launch and launch.router))
            flags.update(launch_flags)
            if model_spec is None and launch_model:
                model_spec = launch_model
        if request.sets:
            try:
                from sglang_audit.inputs.flags import parse_set

                flags.update(parse_set(table, request.sets))
            except InputError as exc:
                raise InputError(f"{release}: {exc}") from None
        for name in request.fields:
            if name not in table.fields:
                import difflib  # for the message only

                close = difflib.get_close_matches(name, list(table.fields), n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise InputError(f"{release}: no ServerArgs field {name!r}{hint}")
    if typed is None and results is not None and flags_key is not None:
        # typed (or nothing to type) and the entry check passed: kept if what was read is keyed
        results.put_flags(flags_key, flags, files_read_since(cache, reads_from, tree.package_dir.parent))
    if model_spec is None:
        raise InputError("no model: pass --model DIR|PROFILE|ORG/NAME (or --model-path inside --launch or --config)")
    model = placeholder if placeholder is not None and model_spec == request.model else locate_model(model_spec, progress=progress)
    extra = tuple(table.fields) if request.all_fields and table is not None else tuple(request.fields)
    flags, notes = _locate_draft(flags, progress)
    target = Target(tree, device, model, flags, env, frozenset(request.with_packages), frozenset(request.without_packages),
                    extra_fields=extra, env_profile=request.env_profile, input_notes=notes)
    return Prepared(tree, target, table)


def located(source: str | None, cache: SourceCache, progress: Callable[[str], None] | None = None) -> SourceTree:
    """``locate_source`` once per source spec for a shared ``SourceCache``: verifying an
    extracted release walks its ~6,000 files (~0.04 s CPU on 0.5.23), the same answer for
    every target of the release resolved through that cache. The result cache checks the
    copy again before keying a later request by it (``ResultCache.tree_digest``)."""
    key = ("source", source)
    tree = cache.prepared.get(key)
    if tree is None:
        tree = cache.prepared[key] = locate_source(source, progress=progress)
    return tree


_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY", re.I)


def redacted(env: dict[str, str]) -> dict[str, str]:
    """A pasted command's credentials (docker --env HF_TOKEN=...) must not reach the reports;
    the value is replaced, keeping it set and non-empty as SGLang would see it."""
    return {k: ("<redacted>" if v and _SECRET.search(k) else v) for k, v in env.items()}


def _locate_draft(flags: dict[str, Any], progress: Callable[[str], None] | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A draft model given by Hugging Face id or profile name → its local directory (the
    release reads its config.json), and what could not be read. A Hugging Face id that cannot
    be fetched (offline, not in the cache, the hub unreachable) is not an input error: the id
    stays the flag's value, the release's reads of its config are unknown (the settings that
    depend on the draft, with the reason), the rest is answered, and a note says why (exit 3).
    A local path that is not a model directory stays an input error (a typo, not a fetch)."""
    from sglang_audit.inputs import hfhub

    draft = flags.get("speculative_draft_model_path")
    if not isinstance(draft, str) or not draft:
        return flags, ()
    try:
        located = locate_model(draft, progress=progress, role="draft model")
    except InputError as exc:
        if Path(draft).expanduser().exists() or (profiles_dir() / draft).is_dir() or not hfhub.looks_like_repo_id(draft):
            raise
        note = (f"draft model {draft} not read ({exc}): what SGLang reads of its config is unknown, and each "
                "setting that depends on it says so; the rest is answered")
        _warn(note)
        return flags, (note,)
    return {**flags, "speculative_draft_model_path": str(located.path)}, ()


def resolve(request: Request, progress: Callable[[str], None] | None = None,
            cache: SourceCache | None = None) -> Resolution:
    # a shared cache lets callers that resolve repeatedly (explain) parse each file once
    cache = cache or SourceCache(use_disk=request.use_cache)
    # one request: the tree is listed once for both keys (typed flags, resolution)
    results = ResultCache(enabled=request.use_cache, stable_tree=True)
    target = prepare(request, cache, progress, results=results).target
    try:
        res = resolve_target(target, cache, results)
        return with_kernels(res, target, cache, request.flashinfer_source, progress, results=results)
    finally:
        progress_done(progress)


def with_kernels(res: Resolution, target: Target, cache: SourceCache, flashinfer_source: str | None,
                 progress: Callable[[str], None] | None = None, *, results: ResultCache | None = None) -> Resolution:
    """``res`` with each setting's kernel-library verdict (``kernels.py``), read after the
    (cached) resolution so the FlashInfer source never enters the result-cache key;
    ``results``: its directory also keeps the verdicts by what their reading read
    (``kernelmemo``), so a cached resolution does not load FlashInfer's IR again."""
    from sglang_audit.resolve.kernelmemo import KernelMemo
    from sglang_audit.resolve.kernels import FLASHINFER_SOURCE_ENV, attach

    if flashinfer_source is None:
        flashinfer_source = os.environ.get(FLASHINFER_SOURCE_ENV) or None
    memo = KernelMemo(results.dir) if results is not None and results.dir is not None else None
    return attach(res, target.source.package_dir.parent, cache, flashinfer_source, progress, memo=memo)


def watch_parsing(cache: SourceCache, progress: Callable[[str], None] | None) -> None:
    """Let a terminal show the files parsed (a first run parses for 15-25 s): the CLI's
    progress callback carries the hook factory; scripts' callbacks do not."""
    factory = getattr(progress, "on_parse_factory", None)
    if factory is not None and cache.on_parse is None:
        cache.on_parse = factory()


def progress_done(progress: Callable[[str], None] | None) -> None:
    done = getattr(progress, "done", None)
    if done is not None:
        done()


def resolve_target(target: Target, cache: SourceCache, results: ResultCache | None = None, forks: bool = True) -> Resolution:
    """Resolve one target, through the result cache when one is given (``resultcache``:
    keyed by the content of the tool, the tree, the model directory and the target); with
    ``forks``, the optional packages a layer value assumed are evaluated in their other state
    too (``with_package_forks``)."""
    res = _resolve_cached(target, cache, results)
    return with_package_forks(res, target, cache, results) if forks else settle_absences(res, target)


@contextmanager
def entry_snapshot(targets: list[Target], cache: SourceCache, results: ResultCache | None) -> Iterator[bool]:
    """While the block runs, the entry module loaded once for ``targets``, which differ only
    in their flags (explain's forced choices, a recommend prefetch: ``resolver.EntrySnapshot``).
    Yields whether to resolve them in a fresh batch (``Batch(fresh=True)``), the only place a
    resolution takes the snapshot: where fork is available and at least one of them has no
    stored result (a batch of hits would only pay the forks)."""
    from sglang_audit.resolve.resolver import install_snapshot
    from sglang_audit.resolve.workers import can_fork

    fresh = bool(targets) and can_fork() and any_to_evaluate(targets, results) and install_snapshot(targets[0], cache)
    try:
        yield fresh
    finally:
        if fresh:
            install_snapshot(None)


def any_to_evaluate(targets: list[Target], results: ResultCache | None) -> bool:
    """Whether resolving ``targets`` will evaluate at least one (no stored result for it)."""
    if results is None:
        return True
    return not all(results.has(results.key(t, DEFAULT_MAX_PATHS, Bounds())) for t in targets)


def _resolve_cached(target: Target, cache: SourceCache, results: ResultCache | None) -> Resolution:
    # keyed with the resolver's defaults before building it: a hit never loads the evaluator
    key = results.key(target, DEFAULT_MAX_PATHS, Bounds()) if results is not None else None
    hit = results.get(key) if results is not None else None
    if hit is not None:
        # the key holds the flags and env as sets; the answer shows them in this request's
        # order, never in that of whichever request stored it
        return dataclasses.replace(hit, flags=dict(target.flags), env=dict(target.env))
    from sglang_audit.resolve.resolver import Resolver

    resolver = Resolver(target, cache)
    res = with_environment(resolver.resolve(), resolver.environment.profile)
    if target.input_notes:  # what of the inputs could not be read (an unreachable draft): said first
        res = dataclasses.replace(res, analysis_notes=(*target.input_notes, *res.analysis_notes))
    if results is not None:
        results.put(key, res)
    return res


def with_environment(res: Resolution, profile: Any) -> Resolution:
    """``res`` stating the environment profile it assumed (``Resolution.environment``), unless
    that is a plain pip install on CUDA: each layer's assumptions already say "a plain install
    of this release has it/lacks it" there."""
    if profile is None or (profile.name == "pip" and profile.platform == "cuda" and not profile.note):
        return res
    return dataclasses.replace(res, environment=profile.to_json())


MAX_PACKAGE_FORKS = 2  # optional packages evaluated in their other state per resolution


def package_forks(res: Resolution, target: Target) -> dict[str, bool]:
    """Optional packages whose state a layer value assumed without the release or the user
    deciding it (absent from a plain install, or not modelled): package -> the state to
    evaluate as the fork (True: installed)."""
    out: dict[str, bool] = {}
    for s in res.settings.values():
        for lv in _layer_values(s.layer):
            for a in lv.assumptions:
                pkg, _, state = a.partition(": ")
                if pkg in target.with_packages or pkg in target.without_packages:
                    continue
                if state.startswith("absent ("):  # the release's or the environment profile's (--without: above)
                    out.setdefault(pkg, True)
                elif state.startswith("not modelled"):
                    out.setdefault(pkg, False)
    return dict(sorted(out.items())[:MAX_PACKAGE_FORKS])


def with_package_forks(res: Resolution, target: Target, cache: SourceCache, results: ResultCache | None = None) -> Resolution:
    """``res`` with each layer value's forks: where it assumed an optional package's state that
    neither the release nor the user decides, the same target is resolved with the other state
    (``--with``/``--without``) and the layer outcome there is stated beside the assumption."""
    forks = package_forks(res, target)
    if not forks:
        return settle_absences(res, target)
    settings = dict(res.settings)
    for pkg, installed in forks.items():
        assuming = [name for name, s in settings.items()
                    if isinstance(s.layer, LayerValue) and any(a.startswith(f"{pkg}: ") for a in s.layer.assumptions)]
        other_target = dataclasses.replace(
            target, with_packages=target.with_packages | {pkg} if installed else target.with_packages,
            without_packages=target.without_packages if installed else target.without_packages | {pkg},
            layer_stages=_stages_giving(assuming) if target.layer_stages is None else target.layer_stages)
        other = _resolve_cached(other_target, cache, results)
        how = f"with {pkg} installed (--with {pkg})" if installed else f"without {pkg} (--without {pkg})"
        for name, s in settings.items():
            if not isinstance(s.layer, LayerValue) or not any(a.startswith(f"{pkg}: ") for a in s.layer.assumptions):
                continue
            o = other.settings.get(name)
            theirs = o.layer if o is not None and isinstance(o.layer, LayerValue) else None
            line = f"{how}: {_layer_outcome(theirs)}" + (" (the same outcome)" if _layer_outcome(theirs) == _layer_outcome(s.layer) else "")
            settings[name] = dataclasses.replace(s, layer=dataclasses.replace(s.layer, forks=(*s.layer.forks, line)))
    return settle_absences(dataclasses.replace(res, settings=settings), target)


def _stages_giving(names: list[str]) -> tuple[str, ...] | None:
    """The layer stages a fork builds to give the layer values of ``names``: up to the last
    stage giving one of them (a stage runs on what the stages before it left, so those are
    built too; the later ones change none of these values: ``explain.layer_stages_read``'s
    argument). The fork reads only those values (``with_package_forks``); a later stage is
    most of a resolution (0.5.23: the attention backends, the speculative worker, the
    linear layers). None (every stage) when a name is no stage's setting."""
    from sglang_audit.resolve.stages import LAYER_STAGES

    order = list(LAYER_STAGES)
    at = [next((i for i, given in enumerate(LAYER_STAGES.values()) if name in given), None) for name in names]
    if not at or any(i is None for i in at):
        return None
    return tuple(order[: max(i for i in at if i is not None) + 1])


def settle_absences(res: Resolution, target: Target) -> Resolution:
    """A setting whose layers fail only because an optional package was taken as absent that
    nobody decided is not ``unsupported``: the answer depends on the package (issue 43), so
    its status is ``unknown`` (exit 3) with a note naming the package and both outcomes. A
    package is decided by the user (``--with``/``--without``, or an environment profile named
    with ``--env-profile``) or by the release; the default profile's absence (a plain
    install lacks it, SGLang's images often ship it) is an assumption
    (``LayerValue.unsettled_absences``: a fork that failed too, the same way or by another
    raise, settles it)."""
    if target.env_profile is not None:
        return res  # the user named the environment: its absences are decided
    settings = dict(res.settings)
    for name, s in res.settings.items():
        if s.status != STATUS_UNSUPPORTED or (s.kernel is not None and s.kernel.status == KERNEL_UNSUPPORTED):
            continue
        failing = [lv for lv in _layer_values(s.layer) if lv.status == STATUS_UNSUPPORTED]
        pending = sorted({p for lv in failing for p in lv.unsettled_absences})
        if not failing or not all(lv.unsettled_absences for lv in failing):
            continue  # a layer fails whatever the packages: a verdict
        sides = "; ".join(f"{p} installed: {failing[0].fork_outcome(p) or f'not evaluated (--with {p})'}" for p in pending)
        note = (f"depends on {', '.join(pending)}: absent (assumed: a plain install lacks it) → unsupported; "
                f"{sides} (--with/--without or --env-profile decide it)")
        settings[name] = dataclasses.replace(s, status=STATUS_UNKNOWN, note=f"{s.note}; {note}" if s.note else note)
    return dataclasses.replace(res, settings=settings)


def _layer_values(layer: Any) -> list[LayerValue]:
    if not isinstance(layer, LayerValue):
        return []
    return [layer, *_layer_values(layer.draft)]


def _layer_outcome(v: LayerValue | None) -> str:
    if v is None:
        return "no layer value"
    if v.status == "unknown":
        return f"unknown ({v.reason})"
    return f"{v.status}: {v.value}" + (f" at {v.site}" if v.site else "")


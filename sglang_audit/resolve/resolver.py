"""Evaluate one release for one target: build ServerArgs as SGLang would, run its own
resolution, then the scheduler's runtime initialisers, and turn what the evaluator saw
into ``result.Resolution``.

Branches on unknown inputs are explored once per outcome (depth-first over the decisions,
bounded by ``max_paths``): where fork is available, from the branch by a process forked
there (``pathforks.py``, ``_explore``), else by re-running the evaluation (``_resolve``'s
loop), with the same paths in the same order; results that differ between paths are
reported as unknown with each candidate and its conditions.

Why this module is long: the stages of one resolution (ServerArgs, config read, model,
runtime initialisers, layers) and the join of their paths into one Resolution read in
order in one class; the chains are built in provenance.py and the layers in layers.py.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sglang_audit import factfiles
from sglang_audit.errors import InputError, strict_mode
from sglang_audit.evaluate.ending import EVALUATION_ENDS, INTERNAL, ending
from sglang_audit.evaluate.explore import EXHAUSTIVE, explore
from sglang_audit.evaluate.interpreter import Bounds, Interpreter, PyRaise, Unmodelled
from sglang_audit.evaluate.overlays.classes import dataclass_fields
from sglang_audit.evaluate.stack import deep_call, recursion_room
from sglang_audit.evaluate.values import (
    Decision,
    Event,
    HFConfig,
    Instance,
    ModuleObj,
    Unknown,
)
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.inputs.modeldir import model_checkpoint
from sglang_audit.resolve.expected import missing_module
from sglang_audit.resolve.pathforks import Answer, Budget, PathForks, can_fork_paths
from sglang_audit.resolve.provenance import (
    Declaration,
    Inputs,
    build_chain,
    field_declarations,
    reachable_field_event,
)
from sglang_audit.resolve.release import (
    below_validated,
    build_environment,
    detect_structure,
    torch_version,
    unregistered_architecture,
)
from sglang_audit.resolve.stages import STAGES
from sglang_audit.resolve.targets import (  # noqa: F401 - callers import them from here
    DEFAULT_MAX_PATHS,
    ModelInput,
    Target,
)
from sglang_audit.result import (
    STATUS_REJECTED,
    STATUS_RESOLVED,
    STATUS_UNKNOWN,
    STATUS_UNSUPPORTED,
    Candidate,
    ChainStep,
    LayerValue,
    LogLine,
    ModelSummary,
    Rejection,
    Resolution,
    Setting,
    UnknownValue,
)
from sglang_audit.world.native import NativeWorld
from sglang_audit.world.overlays.boundaries import NO_DEFAULT, class_default


class _Absent:
    """The release has no such field: one object, in this process and in a path a forked
    child sends back (pickled by name)."""

    def __reduce__(self) -> str:
        return "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()
# what read_model keeps of a model (interpreter objects stay in the path's process)
_MODEL_OBJECTS = frozenset({"model_config", "draft_model_config"})
_MODEL_VALUES = frozenset({"architecture", "quantization", "attention_arch", "draft_architecture", "draft_quantization"})


@dataclass
class PathResult:
    taken: list[tuple[Decision, bool]]
    config: dict[str, Any] = field(default_factory=dict)
    config_events: dict[str, Event | None] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    runtime_events: dict[str, list[Event]] = field(default_factory=dict)
    rejected: Rejection | None = None
    aborted: str | None = None
    runtime_failed: str | None = None
    steps: int = 0
    keyed: dict[str, list[Event]] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    logs: list[Any] = field(default_factory=list)
    parse_failures: dict[str, str] = field(default_factory=dict)
    new_decisions: list[Decision] = field(default_factory=list)
    layers: dict[str, Any] = field(default_factory=dict)  # setting -> LayerValue (layers.py)
    # a path a forked child sent (pathforks.py) carries no events: its chains, when the join reads them
    chains: dict[str, tuple[ChainStep, ...]] | None = None
    slim: bool = False  # sent by a child: values as the join reads them, no events


class Resolver:
    def __init__(self, target: Target, cache: SourceCache | None = None, max_paths: int = DEFAULT_MAX_PATHS,
                 bounds: Bounds | None = None, fork_paths: bool | None = None) -> None:
        self.target = target
        self.cache = cache or SourceCache()
        self.max_paths = max_paths
        self.bounds = bounds or Bounds()
        self.settings_spec = factfiles.settings()
        base = list(self.settings_spec.settings)
        self.setting_names = base + [f for f in dict.fromkeys(target.extra_fields) if f not in base]
        self.steps_used = 0
        self.total_steps = 2 * self.bounds.max_steps
        self.runtime_settings = {k for step in self.settings_spec.runtime for k in step.getters}
        self.root = target.source.package_dir.parent
        self.environment = build_environment(target)
        # the draft model's directory is read too (its config.json decides the draft runner)
        draft = target.flags.get("speculative_draft_model_path")
        dirs = [target.model.path, *([Path(draft)] if isinstance(draft, str) and Path(draft).is_dir() else [])]
        self.world = NativeWorld(target.device, self.environment, dirs, torch_version=torch_version(self.environment))
        self.world.source_root = self.root.resolve()
        self._declarations: dict[str, Declaration] | None = None
        self._files_start = 0
        self._preloaded: tuple[Path, ...] = ()  # loads made by a snapshot this resolution took
        # a decision's other outcome taken by a process forked at the branch (pathforks.py);
        # not in a batch worker: the batch keeps every core busy already, and each worker's
        # waiting children would multiply the batch's memory (the matrix's < 500 MB)
        if fork_paths is None:
            from sglang_audit.resolve.workers import in_batch_worker

            fork_paths = can_fork_paths() and not in_batch_worker()
        self.fork_paths = fork_paths
        self._forks: PathForks | None = None  # the running path's
        self._cpu_mark: tuple[float, float, float, float] | None = None  # cpu_used's origin
        self.own_budget_seconds = 0.0

    # ---- exploring paths --------------------------------------------------------------
    def resolve(self) -> Resolution:
        with _fewer_collections():
            return deep_call(self._resolve)  # evaluate/stack.py: no frame-chunk churn

    def _resolve(self) -> Resolution:
        # one CPU-time budget for the whole resolution, parsing excluded (a cold cache must not
        # turn answers unknown, nor a busy machine); the deterministic bounds come first.
        # The attention stage has its own budget (run_layers): its time is not the resolution's
        self.own_budget_seconds = 0.0
        self._cpu_from(0.0)
        self._files_start = len(self.cache.files_read)  # the cache may serve several resolutions
        if self.fork_paths:
            paths, explored_all, budget = self._explore({}, Budget())
            self.steps_used = budget.steps
            return self.join(paths, explored_all)
        def run(decisions: dict[str, bool]) -> tuple[PathResult, list[Decision]]:
            result = self.run_path(decisions)
            self.steps_used += result.steps
            return result, result.new_decisions

        # every decision first taken on a path opens the other outcome; one budget for all
        # paths: a pathological tree stops when it is spent
        paths, explored_all = explore(run, self.max_paths, EXHAUSTIVE, stop=lambda _: self.steps_used > self.total_steps)
        return self.join(paths, explored_all)

    # ---- exploring from the branch (pathforks.py) -------------------------------------
    def _explore(self, decisions: dict[str, bool], budget: Budget) -> tuple[list[PathResult], bool, Budget]:
        """The path that starts with ``decisions``, then the other outcome of each decision it
        takes first, the last first, each with what it opens in turn: the paths, in the order
        of the re-running loop (``_resolve``), whether every outcome was explored, and the
        budget after them. Each other outcome is taken by the process that forked at its
        branch (``pathforks``), or, where none waits there, re-run from the start here. In a
        process resumed at a branch of this path, this ends by answering its parent."""
        forks = PathForks(decisions, budget, self._resumed)
        saved, self._forks = self._forks, forks
        try:
            result = self.run_path(decisions)
        except BaseException as exc:
            if forks.parent is not None:
                forks.fail(exc)
            forks.stop()
            raise
        finally:
            self._forks = saved
        budget = forks.budget  # a resumed child's: what its parent counted up to the resume
        ancestors, base_before = budget.waiting, budget.have_base
        paths = [result]
        budget.paths += 1
        budget.steps += result.steps
        budget.have_base = budget.have_base or self._is_base(result)
        explored_all = True
        try:
            alternatives = forks.alternatives
            for i in range(len(alternatives) - 1, -1, -1):
                if budget.paths >= self.max_paths or budget.steps > self.total_steps:
                    explored_all = False  # one budget for all paths: a pathological tree stops here
                    break
                alt = alternatives[i]
                # the children still waiting when this one runs: its own limit on waiting ones
                budget.waiting = ancestors + sum(1 for a in alternatives[:i] if a.child is not None)
                budget.cpu = self.cpu_used()
                if alt.child is not None and self.cache.parse_count > alt.child.parsed:
                    # files parsed here since the fork: re-running here finds them parsed, the
                    # child would parse them again (a cold cache)
                    alt.child.close()
                    alt.child = None
                answer = alt.child.resume(budget) if alt.child is not None else None
                alt.child = None
                if answer is None:  # none waits there (or it died): re-run from the start
                    sub, sub_all, budget = self._explore(alt.decisions, budget)
                else:
                    if answer.failure is not None:
                        raise answer.failure.revive()
                    sub, sub_all, budget = answer.paths, answer.explored_all, answer.budget
                    self._adopt(answer)
                paths.extend(sub)
                if not sub_all:
                    explored_all = False
                    break
            budget.waiting = ancestors
        except BaseException as exc:
            if forks.parent is not None:
                forks.fail(exc)
            raise
        finally:
            forks.stop()
        if forks.parent is not None:
            try:
                budget.cpu = self.cpu_used()
                sent = self._slim_all(paths, base_before)
                cache = self.cache
                loads = [(path, cache.key_of(path)) for path in dict.fromkeys(cache.files_read[forks.loads_from:])]
                out = Answer(sent, explored_all, budget, loads, list(self.world.boundaries.assumptions))
            except BaseException as exc:
                forks.fail(exc)
            forks.answer(out)
        return paths, explored_all, budget

    def _resumed(self, budget: Budget) -> None:
        """In a child resumed at a branch: the CPU-time budget counts from its parent's total."""
        self._cpu_from(budget.cpu)

    def _adopt(self, answer: Answer) -> None:
        """What a child's paths changed that the resolution reports: the files they loaded
        (``files_read``), the model's assumptions; and the CPU-time budget counts on from the
        child's total."""
        self.cache.adopt_loads(answer.loads)  # its parse counters stay its own: what this process parsed
        kept = self.world.boundaries.assumptions
        kept.extend(a for a in answer.assumptions if a not in kept)
        self._cpu_from(answer.budget.cpu)

    @staticmethod
    def _is_base(path: PathResult) -> bool:
        """The join reads the chains of the first path neither aborted nor rejected."""
        return path.aborted is None and path.rejected is None

    def _slim_all(self, paths: list[PathResult], have_base: bool) -> list[PathResult]:
        """``paths`` as a child sends them; the first base path (when no earlier path of the
        resolution was one) with its chains."""
        out: list[PathResult] = []
        for p in paths:
            if not p.slim:
                p = self._slim(p, chains=not have_base and self._is_base(p))
            have_base = have_base or self._is_base(p)
            out.append(p)
        return out

    def _slim(self, path: PathResult, chains: bool) -> PathResult:
        """``path`` as a child sends it: the values as the join reads them (``_public``), no
        events or interpreter objects; the chains computed here when the join will need them."""
        model = {k: (_public(v) if k in _MODEL_VALUES else v) for k, v in path.model.items() if k not in _MODEL_OBJECTS}
        return PathResult(
            taken=list(path.taken),
            config={k: v if v is ABSENT else _public(v) for k, v in path.config.items()},
            runtime={k: _public(v) for k, v in path.runtime.items()},
            rejected=path.rejected, aborted=path.aborted, runtime_failed=path.runtime_failed, steps=path.steps,
            model=model, parse_failures=dict(path.parse_failures), layers=dict(path.layers),
            chains={name: tuple(self.chain_for(name, path)) for name in self.setting_names} if chains else None,
            slim=True,
        )

    def cpu_used(self) -> float:
        """CPU seconds of this resolution so far, parsing and the stages with a budget of their
        own (the attention stage) excluded."""
        # set by _cpu_from when the resolution starts, before any path runs
        t, parsed, own, used = cast("tuple[float, float, float, float]", self._cpu_mark)
        return used + time.process_time() - t - (self.cache.parse_cpu - parsed) - (self.own_budget_seconds - own)

    def _cpu_from(self, used: float) -> None:
        self._cpu_mark = (time.process_time(), self.cache.parse_cpu, self.own_budget_seconds, used)

    def over_budget(self) -> bool:
        return self.cpu_used() > self.bounds.cpu_seconds

    def new_interpreter(self, decisions: dict[str, bool]) -> Interpreter:
        interp = Interpreter(self.root, self.cache, self.world, decisions, self.bounds)
        interp.set_policy(tracked_keys=frozenset(self.setting_names))
        return interp

    def run_path(self, decisions: dict[str, bool]) -> PathResult:
        interp = (self.take_snapshot() if not decisions else None) or self.new_interpreter(decisions)
        interp.set_policy(deadline=self.over_budget if self._cpu_mark is not None else None,
                          on_decision=self._forks.at_decision if self._forks is not None else None)
        result = PathResult(taken=interp.taken)
        with recursion_room():
            server_args = self.stage(interp, result, "config", lambda: self.build_server_args(interp))
            if server_args is not None:
                self.stage(interp, result, "config", lambda: self.read_config(interp, server_args, result))
            if server_args is not None and result.rejected is None and result.aborted is None:
                # the model summary and the runtime layer fail on their own: a gap there
                # leaves the config-level values standing
                self.stage(interp, result, "model", lambda: self.read_model(interp, server_args, result))
                self.stage(interp, result, "runtime", lambda: self.run_runtime(interp, server_args, result))
                if result.runtime_failed is None:
                    # the layer stages explore their own branches (never resolver paths)
                    interp.set_policy(on_decision=None)
                    self.run_layers(interp, server_args, result)
        interp.set_policy(on_decision=None)
        result.logs = interp.logs
        result.parse_failures = dict(interp.parse_failures)
        result.new_decisions = list(interp.new_decisions)
        result.steps = interp.steps
        result.keyed = interp.keyed_events
        result.taken = list(interp.taken)
        return result

    def stage(self, interp: Interpreter, result: PathResult, stage: str, fn: Any) -> Any:
        reason: str | None = None
        try:
            return fn()
        except EVALUATION_ENDS as exc:
            # an evaluator defect costs this path, never the run and never a verdict; in strict
            # mode (the tests) it is a failure, so a defect cannot hide behind `unknown`
            end = ending(exc, strict_mode())
            raised = end.raised
            if raised is not None:
                r = self.rejection(interp, raised, stage)
                if raised.explicit and stage != "model":
                    result.rejected = r
                    return None
                reason = f"evaluation stopped: {r.exception}: {r.message} at {r.file}:{r.line} (not an explicit raise or assert in SGLang; treated as unknown)"
            else:
                reason = end.reason + ("; treated as unknown" if end.kind == INTERNAL else "")
        if stage == "config":
            result.aborted = reason
        elif stage == "runtime":
            result.runtime_failed = f"runtime layer: {reason}"
        else:
            result.model["error"] = reason
        return None

    def rejection(self, interp: Interpreter, raised: PyRaise, stage: str) -> Rejection:
        exc = raised.exc
        name = exc.cls.name if isinstance(exc, Instance) else "Exception"
        args: tuple[Any, ...] = exc.attrs.get("args", ()) if isinstance(exc, Instance) else ()
        message = interp.to_str(args[0]) if len(args) == 1 else ", ".join(interp.to_str(a) for a in args)
        return Rejection(message, raised.file, raised.line, name, stage, raised.text)

    # ---- building ServerArgs ----------------------------------------------------------
    def entry_module(self, interp: Interpreter) -> ModuleObj:
        entry = self.settings_spec.entry
        mod = interp.load_module(entry.module)
        if not isinstance(mod, ModuleObj):
            raise InputError(f"{entry.module} not found in the source tree")
        return mod

    def build_server_args(self, interp: Interpreter) -> Instance:
        entry = self.settings_spec.entry
        mod = self.entry_module(interp)
        cls = interp.getattr(mod, entry.class_)
        kwargs = {"model_path": str(self.target.model.path), **self.target.flags}
        server_args = interp.call(cls, [], kwargs)
        if not isinstance(server_args, Instance):
            raise Unmodelled(f"{entry.class_}(...) did not produce an instance ({server_args!r})")
        for method in entry.after_init:
            found, _ = server_args.cls.lookup(method)
            if found:
                interp.call(interp.getattr(server_args, method), [], {})
        return server_args

    def read_config(self, interp: Interpreter, server_args: Instance, result: PathResult) -> None:
        reader = self.settings_spec.entry.resolution_reader
        read_fn = None
        if interp.find_module_file(reader.module) is not None:
            mod = interp.load_module(reader.module)
            if isinstance(mod, ModuleObj) and reader.function in mod.globals:
                read_fn = interp.getattr(mod, reader.function)
        declared = {f for f, _line, _owner in dataclass_fields(server_args.cls)}
        for name in self.setting_names:
            if declared and name not in declared and name not in server_args.attrs:
                result.config[name] = ABSENT  # not a field of this release
                result.config_events[name] = None
            elif read_fn is not None:
                value, reads = interp.collect(functools.partial(interp.call, read_fn, [server_args, name], {}))
                result.config[name] = value
                result.config_events[name] = reads[-1] if reads else server_args.events.get(name)
            elif name in server_args.attrs:
                result.config[name] = server_args.attrs[name]
                result.config_events[name] = server_args.events.get(name)
            else:
                result.config[name] = ABSENT
                result.config_events[name] = None

    def read_model(self, interp: Interpreter, server_args: Instance, result: PathResult) -> None:
        spec = self.settings_spec.entry.model_config
        model_config = server_args.attrs.get("model_config")
        if not isinstance(model_config, Instance):
            found, _ = server_args.cls.lookup("get_model_config")
            if found:
                model_config = interp.call(interp.getattr(server_args, "get_model_config"), [], {})
            else:
                mod = interp.load_module(spec.module)
                mc_cls = interp.getattr(mod, spec.class_)
                model_config = interp.call(interp.getattr(mc_cls, spec.factory), [server_args], {})
        if isinstance(model_config, Instance):
            hf = model_config.attrs.get("hf_config")
            archs = hf.attrs.get("architectures") if isinstance(hf, HFConfig) else None
            result.model["architecture"] = archs[0] if isinstance(archs, list) and archs else None
            result.model["quantization"] = model_config.attrs.get("quantization")
            result.model["attention_arch"] = _enum_name(model_config.attrs.get("attention_arch"))
            result.model["model_config"] = model_config
        spec_algo = result.config.get("speculative_algorithm")
        if spec_algo not in (None, ABSENT) and not isinstance(spec_algo, Unknown):
            draft_path = server_args.attrs.get("speculative_draft_model_path") or str(self.target.model.path)
            try:
                mod = interp.load_module(spec.module)
                mc_cls = interp.getattr(mod, spec.class_)
                draft = interp.call(interp.getattr(mc_cls, spec.factory), [server_args], {"model_path": draft_path, "is_draft_model": True})
            except PyRaise as raised:
                result.model["draft_error"] = self.rejection(interp, raised, "model").message
                return
            if isinstance(draft, Instance):
                hf = draft.attrs.get("hf_config")
                archs = hf.attrs.get("architectures") if isinstance(hf, HFConfig) else None
                result.model["draft_architecture"] = archs[0] if isinstance(archs, list) and archs else None
                result.model["draft_quantization"] = draft.attrs.get("quantization")
                result.model["draft_model_config"] = draft

    def publish(self, interp: Interpreter, server_args: Instance) -> None:
        spec = self.settings_spec.publish
        if spec is None or interp.find_module_file(spec.module) is None:
            return
        mod = interp.load_module(spec.module)
        if not isinstance(mod, ModuleObj) or spec.function not in mod.globals:
            return
        fn = interp.getattr(mod, spec.function)
        params = {p.name for p in getattr(fn, "params", [])}
        kwargs: dict[str, Any] = {k: v for k, v in spec.kwargs.items() if k in params}
        for key, (cls_name, *args) in spec.constructed.items():
            if key in params and cls_name in mod.globals:
                kwargs[key] = interp.call(interp.getattr(mod, cls_name), [None if a == "__none__" else a for a in args], {})
        interp.call(fn, [server_args], kwargs)

    def run_runtime(self, interp: Interpreter, server_args: Instance, result: PathResult) -> None:
        self.publish(interp, server_args)
        model_config = result.model.get("model_config")
        hf = model_config.attrs.get("hf_config") if isinstance(model_config, Instance) else None
        check = hf.attrs.get("text_config", hf) if isinstance(hf, HFConfig) else None
        for step in self.settings_spec.runtime:
            # a release whose config has one of these settings has the initialiser too (every
            # release since the settings exist); one the tool cannot find -- renamed, moved,
            # unreadable -- leaves the runtime value unknown, never the config value unchanged.
            # A module missing with its whole package counts too when the tree has the
            # scheduler that runs these initialisers (expected.py); only a partial tree with
            # neither (the small fixture trees) is read as a release without that layer.
            expected = [s for s in step.getters if result.config.get(s, ABSENT) is not ABSENT]
            rel = step.module.replace(".", "/") + ".py"
            if interp.find_module_file(step.module) is None:
                missing = missing_module(interp, step.module)
                if missing is None:
                    continue
                for setting in expected:
                    result.runtime[setting] = Unknown(
                        f"runtime initialiser {step.initializer} not found: {missing}, "
                        f"which has the setting {setting}")
                continue
            mod = interp.load_module(step.module)
            if isinstance(mod, ModuleObj) and mod.failed:
                for setting in step.getters:
                    result.runtime[setting] = Unknown(f"runtime initialiser not analysed: {interp.parse_failures.get(mod.file, mod.failed)}")
                continue
            if not isinstance(mod, ModuleObj) or step.initializer not in mod.globals:
                where = mod.file if isinstance(mod, ModuleObj) else rel
                for setting in expected:
                    result.runtime[setting] = Unknown(
                        f"runtime initialiser {step.initializer} not found in {where} "
                        f"(renamed or moved?), though this release has the setting {setting}")
                continue
            wanted = step.when_model_has
            init_reads: list[Event] = []
            has = _model_has(check, wanted) if wanted else True
            if isinstance(has, Unknown):
                for setting in step.getters:
                    result.runtime[setting] = Unknown(f"whether {step.initializer} runs: {has.reason}", has.key)
                continue
            if has:
                init = interp.getattr(mod, step.initializer)
                positional = [p for p in getattr(init, "params", []) if p.star == ""]
                _, init_reads = interp.collect(functools.partial(interp.call, init, [server_args] if positional else [], {}))
            # the getters run either way: they are what the layers read (without the
            # initialiser, SGLang's getters fall back to their own defaults)
            for setting, getter in step.getters.items():
                if getter not in mod.globals:
                    if setting in expected:
                        result.runtime[setting] = Unknown(
                            f"runtime getter {getter} not found in {mod.file} (renamed or moved?), "
                            f"though this release has the setting {setting}")
                    continue
                value, reads = interp.collect(functools.partial(_call_getter, interp, mod, getter))
                if isinstance(value, Instance) and "enum" in value.cls.flags:
                    value = value.attrs.get("_value_")
                result.runtime[setting] = value
                result.runtime_events[setting] = [*init_reads, *reads]

    def run_layers(self, interp: Interpreter, server_args: Instance, result: PathResult) -> None:
        """The layers built with the published settings: each stage of ``stages.STAGES`` the
        target selects, in order, on this interpreter. A stage the target leaves out
        (``Target.layer_stages``) gives its settings an unknown layer value that says so, never
        one that reads as "no layer re-decides it"."""
        stages = self.target.layer_stages
        asked = "" if stages is None else (
            f"asked for the {', '.join(stages)} stage only" if stages else "asked for no layer stage")
        for stage in STAGES:
            if stages is not None and stage.name not in stages:
                for name in stage.settings:
                    result.layers[name] = LayerValue(STATUS_UNKNOWN, None, stage=stage.kind, reason=(
                        f"the {stage.name} layers were not built in this resolution ({asked})"))
                continue
            t0 = time.process_time()
            try:
                result.layers.update(stage.run(interp, server_args, result.model, lambda: self.cache.parse_cpu))
            finally:
                if stage.cpu_budget is not None:  # its own budget: not the resolution's time
                    self.own_budget_seconds += time.process_time() - t0

    # ---- joining paths into a Resolution ----------------------------------------------
    def join(self, paths: list[PathResult], explored_all: bool) -> Resolution:
        names = self.setting_names
        complete = [p for p in paths if p.aborted is None]
        settings: dict[str, Setting] = {}
        notes: list[str] = []
        for p in paths:
            if p.aborted:
                notes.append(f"path {_when(p)}: {p.aborted}" if p.taken else p.aborted)
            for _f, msg in p.parse_failures.items():
                if msg not in notes:
                    notes.append(msg)
        if not explored_all:
            notes.append(f"analysis bound reached: more than {self.max_paths} paths; unexplored outcomes exist")
        all_rejected = bool(paths) and all(p.rejected is not None for p in paths)
        rejected = None
        conditional: list[Rejection] = []
        if all_rejected and len({(r.message, r.file, r.line) for p in paths if (r := p.rejected) is not None}) == 1:
            rejected = paths[0].rejected
        else:
            for p in paths:
                if p.rejected is not None:
                    r = p.rejected
                    conditional.append(Rejection(r.message, r.file, r.line, r.exception, r.stage, r.code, tuple(_when(p))))
        for name in names:
            settings[name] = self.join_setting(name, paths, complete, explored_all, rejected)
        first = paths[0]
        model = ModelSummary(
            name=self.target.model.name,
            path=str(self.target.model.path),
            architecture=self.join_model_value(paths, "architecture"),
            quantization=self.join_model_value(paths, "quantization"),
            attention_arch=self.join_model_value(paths, "attention_arch"),
            config_quant_method=model_checkpoint(self.target.model.path).config_quant_method,
            draft_architecture=self.join_model_value(paths, "draft_architecture"),
            draft_quantization=self.join_model_value(paths, "draft_quantization"),
            assumptions=tuple(self.world.boundaries.assumptions),
        )
        floor_note = below_validated(self.target.source.version)
        if floor_note is not None:
            notes.append(floor_note)
        registry_note = unregistered_architecture(self.root, self.target.model.path, model.architecture, self.target.env)
        if registry_note is not None:
            notes.append(registry_note)
        joined = self.join_layers(complete)
        draft_attention = joined.pop("speculative_draft_attention_backend", None)
        if draft_attention is not None and isinstance(joined.get("attention_backend"), LayerValue):
            # the draft worker's runner builds its own backend: carried on the target's value
            joined["attention_backend"] = dataclasses.replace(joined["attention_backend"], draft=draft_attention)
        for n, layer in joined.items():
            if n in settings:
                status = settings[n].status
                failing = layer.status == STATUS_UNSUPPORTED or (
                    isinstance(layer.draft, LayerValue) and layer.draft.status == STATUS_UNSUPPORTED)
                if failing and status == STATUS_RESOLVED:
                    status = STATUS_UNSUPPORTED  # resolved by ServerArgs, fails when the layers are built
                elif layer.status == STATUS_UNKNOWN and status == STATUS_RESOLVED and layer.stage == "moe":
                    # the layers decide the published value again and the tool cannot say how:
                    # the value shown may not be the one that runs, so it is not resolved
                    status = STATUS_UNKNOWN
                settings[n] = dataclasses.replace(settings[n], layer=layer, status=status)
        logs = tuple(LogLine(rec.file, rec.line, rec.level, rec.message) for rec in first.logs)
        return Resolution(
            source=self.target.source.to_json(),
            structure=detect_structure(self.root),
            device=self.target.device.to_json(),
            model=model,
            flags=dict(self.target.flags),
            env=dict(self.target.env),
            rejected=rejected,
            settings=settings,
            rejections=tuple(conditional),
            paths=len(paths),
            analysis_notes=tuple(notes),
            logs=logs,
            files_read=self.files_read(),
        )

    def files_read(self) -> tuple[tuple[str, str], ...]:
        """(path, sha256) of every source file this resolution read, so an answer can be
        reproduced and audited."""
        return files_read_since(self.cache, self._files_start, self.root, before=self._preloaded)

    # ---- the entry module loaded once for many targets (EntrySnapshot) ----------------
    def snapshot_key(self) -> tuple[Any, ...]:
        """What loading the entry module can see: everything of the target but its flags
        (they enter as the entry class's arguments, after the load) and its layer stages,
        except the draft model's directory, which the world reads (``__init__``)."""
        t = self.target
        return (id(self.cache), dataclasses.replace(t, flags={}, layer_stages=None),
                t.flags.get("speculative_draft_model_path"), repr(self.bounds), self.max_paths)

    def take_snapshot(self) -> Interpreter | None:
        """The installed snapshot's interpreter, for this resolution's first path, if it was
        made for a target this one equals but for its flags, and only in a process forked
        for this one task (``workers.in_task_fork``): a path mutates its interpreter, so
        a snapshot serves one resolution and each task starts from a fresh copy of it."""
        global _SNAPSHOT
        from sglang_audit.resolve.workers import in_task_fork

        snap = _SNAPSHOT
        if snap is None or not in_task_fork() or snap.key != self.snapshot_key():
            return None
        _SNAPSHOT = None
        # the world the module body ran against is the one the rest of the resolution uses,
        # as it would be had this resolution loaded the module itself
        self.world = snap.world
        self._preloaded = snap.loaded
        return snap.interp

    def join_layers(self, complete: list[PathResult]) -> dict[str, LayerValue]:
        live = [p for p in complete if p.rejected is None]
        out: dict[str, LayerValue] = {}
        for name in dict.fromkeys(n for p in live for n in p.layers):
            values = [p.layers.get(name) for p in live]
            distinct = _distinct(values)
            if len(distinct) == 1 and distinct[0] is not None:
                out[name] = distinct[0]
            else:
                cands = tuple(Candidate(v.value if v.status == STATUS_RESOLVED else f"{v.status}: {v.value or v.reason}", (f"path {', '.join(_when(p))}",))
                              for v, p in zip(values, live, strict=True) if v is not None)
                out[name] = LayerValue(STATUS_UNKNOWN, None, reason="the layer's outcome differs between unknown inputs of the configuration", candidates=cands)
        return out

    def join_model_value(self, paths: list[PathResult], key: str) -> Any:
        values = [p.model.get(key) for p in paths if p.aborted is None and key in p.model]
        values = [_public(v) for v in values]
        distinct = _distinct(values)
        if len(distinct) == 1 and len(values) == len([p for p in paths if p.aborted is None]):
            return distinct[0]
        if not values:
            if key.startswith("draft_"):
                return None  # no draft on any path (no speculative algorithm): none to show
            return UnknownValue(self._model_not_read(paths), ())
        return UnknownValue("differs between unknown inputs", tuple(Candidate(v) for v in distinct))

    @staticmethod
    def _model_not_read(paths: list[PathResult]) -> str:
        """Why no path read the model's ModelConfig: SGLang rejected the flags first, the
        model stage stopped (its reason), or the configuration stage did."""
        for p in paths:
            if p.rejected is not None:
                return "ModelConfig not read: SGLang rejects the configuration before it builds the model's config"
        for p in paths:
            if p.model.get("error"):
                return f"ModelConfig not read: {p.model['error']}"
        for p in paths:
            if p.aborted is not None:
                return f"ModelConfig not read: {p.aborted}"
        return "ModelConfig not read on any path"

    def join_setting(self, name: str, paths: list[PathResult], complete: list[PathResult], explored_all: bool, rejected: Rejection | None) -> Setting:
        if rejected is not None:
            return Setting(name, None, None, STATUS_REJECTED, (), note=f"configuration rejected: {rejected.message}")
        present = any(p.config.get(name, ABSENT) is not ABSENT for p in complete)
        if complete and not present:
            return Setting(name, None, None, STATUS_RESOLVED, (), note="this release has no such setting", present=False)
        outcomes: list[tuple[Any, Any, PathResult]] = []
        for p in paths:
            if p.aborted is not None:
                outcomes.append((_AbortedValue(p.aborted), _AbortedValue(p.aborted), p))
            elif p.rejected is not None:
                outcomes.append((f"rejected: {p.rejected.message}", f"rejected: {p.rejected.message}", p))
            else:
                cfg = _public(p.config.get(name))
                rt = _public(p.runtime[name]) if name in p.runtime else cfg
                if p.runtime_failed and name in self.runtime_settings and name not in p.runtime:
                    rt = _AbortedValue(p.runtime_failed)
                outcomes.append((cfg, rt, p))
        cfg_values = _distinct([o[0] for o in outcomes])
        rt_values = _distinct([o[1] for o in outcomes])
        base = next((p for p in complete if p.rejected is None), paths[0])
        chain = base.chains[name] if base.chains is not None else tuple(self.chain_for(name, base))
        single = len(cfg_values) == 1 and len(rt_values) == 1 and explored_all
        if len(cfg_values) == 1 and explored_all and not isinstance(cfg_values[0], (_AbortedValue, Unknown)) and not single:
            # the config value is known; only the runtime layer is not
            rt = self.unknown_of(outcomes, 1, explored_all)
            return Setting(name, cfg_values[0], rt, STATUS_UNKNOWN, chain, note="runtime value unknown")
        if single and not isinstance(cfg_values[0], (_AbortedValue, Unknown)) and not isinstance(rt_values[0], (_AbortedValue, Unknown)):
            runtime = rt_values[0]
            return Setting(name, cfg_values[0], runtime if name in base.runtime else None, STATUS_RESOLVED, chain)
        cfg = self.unknown_of(outcomes, 0, explored_all)
        rt = self.unknown_of(outcomes, 1, explored_all)
        return Setting(name, cfg, rt, STATUS_UNKNOWN, chain)

    def unknown_of(self, outcomes: list[tuple[Any, Any, PathResult]], idx: int, explored_all: bool) -> Any:
        values = _distinct([o[idx] for o in outcomes])
        if len(values) == 1 and explored_all and not isinstance(values[0], (_AbortedValue, Unknown)):
            return values[0]
        candidates = []
        reasons: list[str] = []
        for value in values:
            when: list[str] = []
            for o in outcomes:
                if _same(o[idx], value):
                    when.append(" and ".join(_when(o[2])) or "always")
            shown = value
            if isinstance(value, _AbortedValue):
                shown = f"unknown: {value.reason}"
                reasons.append(value.reason)
            elif isinstance(value, Unknown):
                shown = f"unknown: {value.reason}"
                reasons.append(value.reason)
            candidates.append(Candidate(shown, tuple(sorted(set(when)))))
        decision_reasons = sorted({d.reason for o in outcomes for d, _ in o[2].taken})
        reason = "; ".join(_unique([*reasons, *decision_reasons])) or "differs between paths"
        if not explored_all:
            reason += f"; analysis bound reached ({self.max_paths} paths)"
        return UnknownValue(reason, tuple(candidates))

    # ---- evidence ---------------------------------------------------------------------
    def declarations(self) -> dict[str, Declaration]:
        if self._declarations is None:
            self._declarations = field_declarations(self.root, self.cache.load)
        return self._declarations

    def chain_for(self, name: str, path: PathResult) -> list[ChainStep]:
        """The setting's chain with roles (provenance.build_chain): origin, producers, the
        decision, where it was applied."""
        ev = path.config_events.get(name)
        keyed = path.keyed.get(name, [])
        runtime_events = path.runtime_events.get(name, [])
        flag = None
        if name in self.target.flags:
            from sglang_audit.inputs.flagnames import cli_flag

            flag = (cli_flag(name), self.target.flags[name])
        starts = [e for e in [ev, *keyed] if e is not None]
        inputs = Inputs(
            name=name,
            config_value=path.config.get(name),
            config_event=ev,
            keyed=list(keyed),
            runtime_value=path.runtime.get(name),
            has_runtime=name in path.runtime,
            runtime_events=list(runtime_events),
            flag=flag,
            declaration=self.declarations().get(name),
            default_event=reachable_field_event(starts, name),
            others=frozenset(self.settings_spec.settings),
        )
        return list(build_chain(inputs))


def files_read_since(cache: SourceCache, start: int, root: Path,
                     before: tuple[Path, ...] = ()) -> tuple[tuple[str, str], ...]:
    """(path relative to ``root``, sha256 as loaded) of every file ``cache`` loaded since its
    ``start``-th load, and of the loads ``before`` (an EntrySnapshot's), sorted."""
    out: dict[str, str] = {}
    base = root.resolve()
    # each load is listed (~600 per 0.5.23 resolution): every path once, hashed as loaded
    for path in dict.fromkeys([*before, *cache.files_read[start:]]):
        try:
            rel = path.resolve().relative_to(base).as_posix()
        except ValueError:
            rel = path.as_posix()
        if rel not in out:
            digest = cache.content_sha256(path)
            if digest is None:
                try:
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    digest = ""
            out[rel] = digest
    return tuple(sorted(out.items()))


class _AbortedValue:
    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AbortedValue) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(self.reason)


@dataclass
class EntrySnapshot:
    """An interpreter that has loaded the release's entry module (``settings.toml``
    ``[entry]``, e.g. ``sglang.srt.server_args``) for one target, no path decision taken:
    the state the first path of every target that differs from it only in its flags reaches
    at that point, because a module body cannot read the flags (they enter as the entry
    class's arguments, after the load). Loading it is ~15% of a forced choice's evaluation
    on 0.5.23. ``explain`` makes one, then resolves each forced choice in a process forked
    for that task, which starts from a copy of it (``Resolver.take_snapshot``)."""

    key: tuple[Any, ...]
    interp: Interpreter
    world: NativeWorld
    loaded: tuple[Path, ...]  # the cache loads the module bodies made (Resolution.files_read)


_SNAPSHOT: EntrySnapshot | None = None


def install_snapshot(target: Target | None, cache: SourceCache | None = None) -> bool:
    """Load ``target``'s entry module into a snapshot for the tasks forked after this (None:
    drop it). False, and no snapshot, when the load stops (a raise, a bound, an unreadable
    module): each resolution then loads it itself and meets the same stop."""
    global _SNAPSHOT
    _SNAPSHOT = None
    if target is None:
        return False
    resolver = Resolver(target, cache)
    interp = resolver.new_interpreter({})
    start = len(resolver.cache.files_read)
    try:
        with recursion_room():  # as run_path
            deep_call(resolver.entry_module, interp)
    except Exception:  # noqa: BLE001 - whatever stops the load, the resolutions meet it themselves
        return False
    _SNAPSHOT = EntrySnapshot(resolver.snapshot_key(), interp, resolver.world,
                              tuple(resolver.cache.files_read[start:]))
    return True


def _enum_name(value: Any) -> Any:
    """An enum member by its name (``AttentionArch.MLA`` -> "MLA": the members are ``auto()``
    ints, meaningless shown); an attribute ModelConfig did not set is None; else as is."""
    if isinstance(value, Instance) and "enum" in value.cls.flags:
        return value.attrs.get("_name_")
    return value


def _public(value: Any) -> Any:
    """A value as it is shown: enum members by value, plain data as is."""
    if value is ABSENT:
        return None
    if isinstance(value, Instance) and "enum" in value.cls.flags:
        return value.attrs.get("_value_")
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, Unknown):
        return value
    if isinstance(value, (list, tuple)):
        return [_public(v) for v in value]
    return repr(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Unknown) and isinstance(b, Unknown):
        return a.reason == b.reason
    return type(a) is type(b) and a == b


def _distinct(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if not any(_same(v, o) for o in out):
            out.append(v)
    return out


def _unique(items: list[str]) -> list[str]:
    out: list[str] = []
    for i in items:
        if i not in out:
            out.append(i)
    return out


def _when(path: PathResult) -> list[str]:
    return [f"{d.text} [{d.reason}] is {'true' if truth else 'false'} ({d.file}:{d.line})" for d, truth in path.taken]


def _value_text(value: Any) -> Any:
    value = _public(value)
    if isinstance(value, Unknown):
        return f"unknown: {value.reason}"
    return value


def _flatten(ev: Event, layer: str, depth: int = 0, seen: set[int] | None = None) -> list[ChainStep]:
    """Events that produced a value, oldest first: sources, guard sources, the write."""
    seen = seen if seen is not None else set()
    if id(ev) in seen or depth > 12:
        return []
    seen.add(id(ev))
    out: list[ChainStep] = []
    for g in ev.guards:
        for src in g.sources:
            out.extend(_flatten(src, layer, depth + 1, seen))
    for src in ev.sources:
        out.extend(_flatten(src, layer, depth + 1, seen))
    if ev.kind == "return" and not ev.guards:
        return out  # a plain return adds nothing a reader needs
    if not _is_data(ev.value):
        return out  # functions, classes, modules bound to names are not decisions
    guard = " and ".join(g.describe() for g in ev.guards if g.file == ev.file) or ("default" if ev.kind == "default" else "")
    if ev.kind == "flag":
        guard = "set by the user"
    out.append(ChainStep(ev.file, ev.line, guard, _value_text(ev.value), ev.text, layer, ev.kind))
    return out


def _prune(steps: list[ChainStep], name: str) -> list[ChainStep]:
    """Keep the decisions a reader needs: guarded writes, the setting's own default or
    flag, declarations of it, and the last step of each layer (the value itself)."""
    keep: list[ChainStep] = []
    last = {layer: max((i for i, s in enumerate(steps) if s.layer == layer), default=-1) for layer in ("config", "runtime")}
    for i, s in enumerate(steps):
        # the user's own flags that fed a decision always matter; defaults only of this setting
        own = s.kind in ("flag", "declare") or s.kind == "default" and s.code.startswith(name)
        # the config layer is kept whole (predicate results feed its guards); the runtime
        # layer is pruned, since publishing reads every environment variable on the way
        if s.layer == "config" or s.guard and s.kind not in ("default", "flag") or own or i == last.get(s.layer):
            keep.append(s)
    return keep


def _is_data(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool, type(None), Unknown)):
        return True
    if isinstance(value, Instance) and "enum" in value.cls.flags:
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_data(v) for v in value)
    return False


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """The evaluator allocates many objects that live for the whole resolution (modules,
    functions, events); with the default thresholds the collector walks them again and
    again (a quarter of the time on 0.5.10). Collect less often while resolving."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], 50_000), max(old[1], 20), max(old[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _call_getter(interp: Interpreter, mod: ModuleObj, getter: str) -> Any:
    """A runtime getter's value: its lookup and its call, both read inside the caller's collect."""
    return interp.call(interp.getattr(mod, getter), [], {})


def _model_has(check: Any, wanted: Sequence[str]) -> bool | Unknown:
    """``hasattr(config, w)`` for any ``w``, as SGLang sees the config object: a key of
    config.json or a default of its config class (issue #23), unknown when the class is."""
    if not isinstance(check, HFConfig):
        return False
    unknown: Unknown | None = None
    for name in wanted:
        if name in check.attrs:
            return True
        default = class_default(check, name, False)
        if isinstance(default, Unknown):
            unknown = unknown or default
        elif default is not NO_DEFAULT:
            return True
    return unknown or False

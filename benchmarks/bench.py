"""sglang-audit performance benchmark (issue 9): cold/warm `resolve` against the parse cost
of exactly the files it read, the `matrix` per-case cost and peak memory, per release.

Every measurement runs in a fresh child process with a PRIVATE cache dir (never the
user's), so "cold" really starts from an empty parsed-IR cache.  Wall and CPU time are
both reported: on a shared machine wall time moves with the load, CPU time much less.

    .venv/bin/python benchmarks/bench.py --versions 0.5.10 0.5.23 --jobs 2 \\
        --cache-dir /tmp/bench-cache --wheels-from /tmp/sa-cache/wheels \\
        --json-out /tmp/bench.json

Phases per release: extract (unpack the wheel, not timed against anything), cold resolve
(empty ir/), parse baselines (libcst.parse_module and ast.parse of the files the cold
resolve read, and the front end's own stages), warm resolve (same process: memory cache,
then a new SourceCache reading the disk cache; and a fresh process), and the matrix
(`sglang-audit matrix --jobs N`, run three times: the first fills the caches, the second
evaluates every case with the IR cached, the third answers every case from the result
cache), and optionally (--oracle-venvs) one oracle case and an oracle batch, measured here.
"""

from __future__ import annotations

import argparse
import ast
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ORACLE_SECONDS = (1.2, 2.0)  # shared/oracle/README.md: "1.2-2 s per case" in batch mode
# The README's main job (0.5.10, SM120, Qwen3.5 NVFP4 with MTP, no radix cache).
RESOLVE_CASE = {
    "arch": "sm120", "model": "qwen3.5-397b-a17b-nvfp4",
    "sets": ["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"],
}
TARGETS = {
    "cold_vs_libcst": 3.0, "warm_vs_cold": 0.25, "matrix_216_seconds": 30.0,
    "per_case_vs_oracle": 0.01, "peak_mb": 500.0,
}


# ---- child-process phases ------------------------------------------------------------------


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> dict[str, float]:
    return {"wall": time.perf_counter() - start[0], "cpu": time.process_time() - start[1]}


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _request(version: str) -> Any:
    from sglang_audit.resolve.pipeline import Request

    return Request(source=f"sglang=={version}", arch=RESOLVE_CASE["arch"], model=RESOLVE_CASE["model"],
                   sets=list(RESOLVE_CASE["sets"]))


def phase_extract(version: str) -> dict[str, Any]:
    from sglang_audit.source.locate import locate_source

    t = _clock()
    tree = locate_source(f"sglang=={version}")
    return {"time": _since(t), "package_dir": str(tree.package_dir)}


def resolve(request: Any, cache: Any) -> Any:
    """Evaluation only: prepare + Resolver, never the result cache (measured separately)."""
    from sglang_audit.resolve.pipeline import prepare
    from sglang_audit.resolve.resolver import Resolver

    return Resolver(prepare(request, cache).target, cache).resolve()


def phase_cold(version: str) -> dict[str, Any]:
    from sglang_audit.frontend.parse import SourceCache

    cache = SourceCache(use_disk=True)
    t = _clock()
    res = resolve(_request(version), cache=cache)
    cold = _since(t)
    # files_read is (path relative to the source root, sha256) per file
    from sglang_audit.source.locate import locate_source

    root = locate_source(f"sglang=={version}").package_dir.parent
    files = sorted({str(root / rel) for rel, _sha in res.files_read})
    out: dict[str, Any] = {"time": cold, "parse_count": cache.parse_count, "files_read": files,
                           "lines": sum(Path(f).read_text(encoding="utf-8").count("\n") for f in files)}
    # same process, same SourceCache: what explain/matrix workers see after the first case
    t = _clock()
    resolve(_request(version), cache=cache)
    out["warm_memory"] = _since(t)
    # same process, a new SourceCache: every file comes from the disk cache
    disk = SourceCache(use_disk=True)
    t = _clock()
    resolve(_request(version), cache=disk)
    out["warm_disk_same_process"] = _since(t)
    out["warm_disk_parse_count"] = disk.parse_count
    out["maxrss_mb"] = _maxrss_mb()
    return out


def phase_warm(version: str) -> dict[str, Any]:
    from sglang_audit.frontend.parse import SourceCache

    cache = SourceCache(use_disk=True)
    t = _clock()
    resolve(_request(version), cache=cache)
    return {"time": _since(t), "parse_count": cache.parse_count, "maxrss_mb": _maxrss_mb()}


def phase_parse(files_json: str) -> dict[str, Any]:
    """Parse baselines over exactly the files the cold resolve read, plus the front end's
    stages on the same files (libcst parse → line numbers → IR conversion → disk form)."""
    import libcst as cst

    from sglang_audit.frontend import parse as frontend

    files = json.loads(Path(files_json).read_text())
    texts = [Path(f).read_text(encoding="utf-8") for f in files]
    out: dict[str, Any] = {}
    t = _clock()
    modules = [cst.parse_module(x) for x in texts]
    out["libcst_parse"] = _since(t)
    t = _clock()
    for x in texts:
        ast.parse(x)
    out["ast_parse"] = _since(t)
    t = _clock()
    spans = [frontend.line_spans(m) for m in modules]
    out["frontend_lines"] = _since(t)
    # what the front end used for line numbers before (libcst's public provider)
    from libcst.metadata import MetadataWrapper, PositionProvider

    t = _clock()
    for m in modules:
        MetadataWrapper(m, unsafe_skip_copy=True).resolve(PositionProvider)
    out["libcst_position_provider"] = _since(t)
    t = _clock()
    trees = [frontend._Converter(m, s).block(m.body) for m, s in zip(modules, spans, strict=True)]
    out["frontend_convert"] = _since(t)
    t = _clock()
    blobs = [frontend.dump_tree(frontend.ir.Module(1, tr)) for tr in trees]
    out["disk_dump"] = _since(t)
    out["disk_bytes"] = sum(len(b) for b in blobs)
    del modules, spans, trees
    t = _clock()
    for b in blobs:
        frontend.load_tree(b)
    out["disk_load"] = _since(t)
    return out


REQUEST_ARCHS = ("sm120", "sm100", "sm90")  # new targets of one release, as a library user resolves them


def phase_requests(version: str) -> dict[str, Any]:
    """Per request through the pipeline API (``pipeline.resolve(request, cache=cache)``)
    with one shared SourceCache and no result cache: after a first request, new targets
    (the README's job on three archs, each twice) and the evaluation alone (Resolver,
    prepared target) of the same job. The kernel step is left out (flashinfer_source
    "none"; measured in docs/performance.md's kernel section)."""
    from sglang_audit.frontend.parse import SourceCache
    from sglang_audit.resolve import pipeline
    from sglang_audit.resolve.resolver import Resolver

    cache = SourceCache(use_disk=True)

    def request(arch: str) -> Any:
        return pipeline.Request(source=f"sglang=={version}", arch=arch, model=RESOLVE_CASE["model"],
                                sets=list(RESOLVE_CASE["sets"]), use_cache=False, flashinfer_source="none")

    t = _clock()
    pipeline.resolve(request(REQUEST_ARCHS[0]), cache=cache)
    first = _since(t)
    per: list[dict[str, float]] = []
    for arch in (*REQUEST_ARCHS[1:], REQUEST_ARCHS[0], *REQUEST_ARCHS[1:], REQUEST_ARCHS[0]):
        t = _clock()
        pipeline.resolve(request(arch), cache=cache)
        per.append(_since(t))
    target = pipeline.prepare(request(REQUEST_ARCHS[0]), cache).target
    evals: list[dict[str, float]] = []
    for _ in range(3):
        t = _clock()
        Resolver(target, cache).resolve()
        evals.append(_since(t))
    cpu = sorted(x["cpu"] for x in per)
    return {"first": first, "requests": per, "request_cpu_median": cpu[len(cpu) // 2],
            "request_cpu_min": cpu[0], "eval_cpu_min": min(x["cpu"] for x in evals),
            "eval_wall_min": min(x["wall"] for x in evals), "maxrss_mb": _maxrss_mb()}


def phase_instr_child(arg: str) -> dict[str, Any]:
    """Run under callgrind with instrumentation off (``instructions()``): warm up, say READY,
    wait for the flag file (the parent has switched instrumentation on), evaluate once, say
    DONE, wait for the flag to go (switched off). The CPU budgets are lifted: under valgrind a
    resolution takes ~50x its CPU time, and a budget hit would measure less work."""
    import gc
    import hashlib
    from dataclasses import replace

    from sglang_audit.evaluate.bounds import Bounds
    from sglang_audit.frontend.parse import SourceCache
    from sglang_audit.resolve import pipeline, resolver
    from sglang_audit.resolve.resolver import Resolver

    version, flag = arg.split(":", 1)
    cache = SourceCache(use_disk=True)
    request = pipeline.Request(source=f"sglang=={version}", arch=RESOLVE_CASE["arch"], model=RESOLVE_CASE["model"],
                               sets=list(RESOLVE_CASE["sets"]), use_cache=False, flashinfer_source="none")
    target = pipeline.prepare(request, cache).target
    Resolver(target, cache).resolve()
    # the stages' own budgets (the attention stage's) lifted too: the resolver runs its table
    resolver.STAGES = tuple(replace(st, cpu_budget=1e9) if st.cpu_budget is not None else st for st in resolver.STAGES)
    gc.collect()
    gc.freeze()
    print("READY", file=sys.stderr, flush=True)
    while not os.path.exists(flag):
        time.sleep(0.05)
    res = Resolver(target, cache, bounds=Bounds(cpu_seconds=1e9)).resolve()
    print("DONE", file=sys.stderr, flush=True)
    while os.path.exists(flag):
        time.sleep(0.05)
    digest = hashlib.sha256(json.dumps(res.to_json(), sort_keys=True, default=str).encode()).hexdigest()
    return {"result_sha256": digest}


def instructions(version: str, env: dict[str, str]) -> dict[str, Any]:
    """Instructions executed by one warm evaluation of the README's job (prepared target, IR in
    memory, the kernel step off), counted by valgrind's callgrind: the same count run after
    run whatever else the machine does (this machine's perf counters are not supported)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        flag = os.path.join(tmp, "on")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/cg.out",
               sys.executable, str(Path(__file__).resolve()), "_phase", "instr_child", f"{version}:{flag}"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        log: list[str] = []
        for wanted in ("READY", "DONE"):
            for line in proc.stderr:
                log.append(line)
                if line.strip() == wanted:
                    break
            else:
                raise SystemExit(f"instructions {version}: the child ended early:\n{''.join(log)[-3000:]}")
            switch = "on" if wanted == "READY" else "off"
            subprocess.run(["callgrind_control", "-i", switch, str(proc.pid)], capture_output=True, check=True)
            if wanted == "READY":
                Path(flag).touch()
        os.unlink(flag)
        out, err = proc.communicate()
        collected = [ln for ln in (*log, *err.splitlines()) if "Collected :" in ln]
        if proc.returncode != 0 or not collected:
            raise SystemExit(f"instructions {version} failed:\n{err[-3000:]}")
        return {"instructions": int(collected[-1].split(":")[-1].strip().replace(",", "")),
                **json.loads(out.strip().splitlines()[-1])}


PHASES = {"extract": phase_extract, "cold": phase_cold, "warm": phase_warm, "parse": phase_parse,
          "requests": phase_requests, "instr_child": phase_instr_child}


# ---- the driver ------------------------------------------------------------------------------


class TreeMemory:
    """Samples the summed RSS of a process and its descendants (Linux /proc), and their
    summed PSS: forked workers share the pages they inherited, which each one's RSS counts
    again and PSS divides among the sharers (the memory the tree really occupies)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_kb = 0  # max over samples of the summed VmRSS
        self.peak_pss_kb = 0  # max over samples of the summed Pss (smaps_rollup)
        self.hwm_kb: dict[int, int] = {}  # last VmHWM seen per process (upper bound when summed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _children(self) -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
        return kids

    def _rss_kb(self, pid: int) -> int:
        rss = 0
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
                    elif line.startswith("VmHWM:"):
                        self.hwm_kb[pid] = int(line.split()[1])
        except OSError:
            pass
        return rss

    @staticmethod
    def _pss_kb(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            kids = self._children()
            todo, total, pss = [self.pid], 0, 0
            while todo:
                p = todo.pop()
                total += self._rss_kb(p)
                pss += self._pss_kb(p)
                todo.extend(kids.get(p, []))
            self.peak_kb = max(self.peak_kb, total)
            self.peak_pss_kb = max(self.peak_pss_kb, pss)
            self._stop.wait(self.interval)


def run_phase(name: str, arg: str, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "_phase", name, arg]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"phase {name} {arg} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cli(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run the real CLI; wall, CPU of the process tree, sampled peak tree RSS."""
    exe = str(Path(sys.executable).with_name("sglang-audit"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([exe, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeMemory(proc.pid) as mem:
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"sglang-audit {' '.join(args)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return {"wall": wall, "cpu": cpu, "peak_tree_mb": mem.peak_kb / 1024, "peak_tree_pss_mb": mem.peak_pss_kb / 1024,
            "sum_hwm_mb": sum(mem.hwm_kb.values()) / 1024, "processes": len(mem.hwm_kb),
            "stdout": stdout, "returncode": proc.returncode}


def prepare_cache(cache_dir: Path, wheels_from: Path | None, versions: list[str], empty: bool = True) -> None:
    for part in ("ir", "results", "sources") if empty else ():
        shutil.rmtree(cache_dir / part, ignore_errors=True)
    wheels = cache_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if wheels_from is not None:
        for v in versions:
            for whl in wheels_from.glob(f"sglang-{v}-*.whl"):
                if not (wheels / whl.name).exists():
                    shutil.copy2(whl, wheels / whl.name)


def bench_version(version: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    say = lambda msg: print(f"[{version}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    r: dict[str, Any] = {"version": version}
    say("extract")
    r["extract"] = run_phase("extract", version, env)
    results_dir = Path(args.cache_dir) / "results"
    if args.commands_only:
        _cli_start(version, r, env, results_dir)
        _commands(version, args, env, r, results_dir, say)
        return r
    say("cold resolve")
    # an empty ir/ for each release: files identical across releases must not be hits
    shutil.rmtree(Path(args.cache_dir) / "ir", ignore_errors=True)
    cold = run_phase("cold", version, env)
    r["cold"] = cold
    files_json = Path(args.cache_dir) / f"files-{version}.json"
    files_json.write_text(json.dumps(cold["files_read"]))
    r["files"] = len(cold["files_read"])
    say(f"parse baselines over {r['files']} files")
    r["parse"] = run_phase("parse", str(files_json), env)
    say("warm resolve, fresh process")
    r["warm_fresh"] = run_phase("warm", version, env)
    _cli_start(version, r, env, results_dir)
    say("requests through the pipeline API")
    r["requests"] = run_phase("requests", version, env)
    _commands(version, args, env, r, results_dir, say)
    if args.oracle_venvs and (Path(args.oracle_venvs) / f"venv-{version}" / "bin" / "python").exists():
        say("oracle baseline")
        r["oracle"] = oracle_baseline(version, Path(args.oracle_venvs), args.oracle_cases,
                                      Path(args.oracle_dir) if args.oracle_dir else None)
    if args.skip_matrix:
        return r
    mx = ["matrix", "-s", f"sglang=={version}", "--jobs", str(args.jobs), "--format", "json"]
    if version in args.sample_matrix:
        mx += ["--arch", args.sample_archs, "--flags-set", "none="]
    outputs = {}
    # first: fills ir/ and results/; warm: ir/ warm, results/ emptied (evaluation of every
    # case); cached: every case a result-cache hit
    for label in ("matrix_first", "matrix_warm", "matrix_cached"):
        say(label.replace("_", " "))
        if label != "matrix_cached":
            shutil.rmtree(results_dir, ignore_errors=True)
        out = run_cli(mx, env)
        outputs[label] = out.pop("stdout")
        data = json.loads(outputs[label])
        out["cases"] = len(data["cases"])
        out["summary"] = data["summary"]
        r[label] = out
    r["matrix_cached_identical"] = outputs["matrix_cached"] == outputs["matrix_warm"]
    return r


def _cli_start(version: str, r: dict[str, Any], env: dict[str, str], results_dir: Path) -> None:
    """`resolve` evaluated, then answered from the result cache (the CLI's start-up cost)."""
    rc = ["resolve", "-s", f"sglang=={version}", "-a", RESOLVE_CASE["arch"], "-m", RESOLVE_CASE["model"],
          *[x for s in RESOLVE_CASE["sets"] for x in ("--set", s)], "--format", "json"]
    shutil.rmtree(results_dir, ignore_errors=True)
    r["warm_cli"] = {k: v for k, v in run_cli(rc, env).items() if k != "stdout"}  # evaluates
    # a result-cache hit, median of 7: as this process's environment runs the tool (an
    # editable install under PYTHONDONTWRITEBYTECODE compiles every module at each start),
    # then with the package's bytecode compiled, as `pip install` of the wheel leaves it
    r["cached_cli"] = _median_runs(rc, env, 7)
    package = Path(__file__).resolve().parent.parent / "sglang_audit"
    had = set(package.rglob("__pycache__"))
    compileall.compile_dir(str(package), quiet=1)
    try:
        r["cached_cli_bytecode"] = _median_runs(rc, env, 7)
    finally:
        for p in package.rglob("__pycache__"):
            if p not in had:
                shutil.rmtree(p, ignore_errors=True)


def _median_runs(args: list[str], env: dict[str, str], n: int) -> dict[str, Any]:
    runs = [run_cli(args, env) for _ in range(n)]
    return {"wall": statistics.median(x["wall"] for x in runs), "cpu": statistics.median(x["cpu"] for x in runs),
            "wall_min": min(x["wall"] for x in runs), "wall_max": max(x["wall"] for x in runs), "runs": n}


def _commands(version: str, args: argparse.Namespace, env: dict[str, str], r: dict[str, Any], results_dir: Path,
              say: Any) -> None:
    """explain and report as a new user runs them: IR cold (ir/ emptied), then cached;
    results/ emptied before each, so every resolution is evaluated.  With --command-jobs,
    once per --jobs value (keys ``explain_cached_j2``...), their outputs compared."""
    case = ["-s", f"sglang=={version}", "-a", RESOLVE_CASE["arch"], "-m", RESOLVE_CASE["model"],
            *[x for s in RESOLVE_CASE["sets"] for x in ("--set", s)]]
    html = Path(args.cache_dir) / f"report-{version}.html"
    commands = {"explain": ["explain", args.explain_field, *case, "--format", "json"],
                "report": ["report", *case, "-o", str(html)]}
    for name in args.commands:
        outputs: dict[str, str] = {}
        for jobs in args.command_jobs or [None]:
            suffix = "" if jobs is None else f"_j{jobs}"
            extra = [] if jobs is None else ["--jobs", str(jobs)]
            for state in ("cold", "cached"):
                say(f"{name}, IR {state}" + (f", --jobs {jobs}" if jobs else ""))
                if state == "cold":
                    shutil.rmtree(Path(args.cache_dir) / "ir", ignore_errors=True)
                shutil.rmtree(results_dir, ignore_errors=True)
                out = run_cli([*commands[name], *extra], env)
                outputs[f"{state}{suffix}"] = out.pop("stdout") if name == "explain" else html.read_text(encoding="utf-8")
                r[f"{name}_{state}{suffix}"] = out
        r[f"{name}_outputs_identical"] = len(set(outputs.values())) == 1


def oracle_baseline(version: str, venvs: Path, n_cases: int, oracle_dir: Path | None = None) -> dict[str, Any]:
    """The denominator of the per-case target, measured here: SGLang's own ServerArgs run
    by ../shared/oracle, one fresh-process case and a batch of n_cases (imports amortised).
    A run that fails or answers nothing stops the bench: its time would be a wrong ratio."""
    python = venvs / f"venv-{version}" / "bin" / "python"
    script = (oracle_dir or ROOT.parent / "shared" / "oracle") / "resolve.py"
    if not script.is_file():
        raise SystemExit(f"oracle: {script} not found (--oracle-dir)")
    model = str(ROOT / "fixtures" / "models" / RESOLVE_CASE["model"])
    flags = {"tp_size": 8, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
             "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "disable_radix_cache": True}

    def timed(cmd: list[str]) -> dict[str, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise SystemExit(f"oracle {version} failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        return {"wall": time.perf_counter() - t,
                "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}

    single = timed([str(python), str(script), "--arch", RESOLVE_CASE["arch"], "--model", model, "--flags", json.dumps(flags)])
    batch_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-oracle-{version}.jsonl"
    batch_file.write_text("".join(json.dumps({"model": model, "flags": flags}) + "\n" for _ in range(n_cases)))
    batch = timed([str(python), str(script), "--arch", RESOLVE_CASE["arch"], "--batch", str(batch_file)])
    return {"single": single, "batch": batch, "batch_cases": n_cases,
            "batch_per_case": {k: v / n_cases for k, v in batch.items()}}


def ratios(r: dict[str, Any]) -> dict[str, Any]:
    q: dict[str, Any] = {}
    if "cold" not in r:  # --commands-only
        return q
    cold, parse = r["cold"], r["parse"]
    rq = r["requests"]
    q["request_vs_ast_cpu"] = rq["request_cpu_median"] / parse["ast_parse"]["cpu"]
    q["eval_vs_ast_cpu"] = rq["eval_cpu_min"] / parse["ast_parse"]["cpu"]
    if "oracle" in r:
        q["eval_vs_oracle_batch_case_cpu"] = rq["eval_cpu_min"] / r["oracle"]["batch_per_case"]["cpu"]
    for clock in ("wall", "cpu"):
        q[f"cold_vs_libcst_{clock}"] = cold["time"][clock] / parse["libcst_parse"][clock]
        q[f"cold_vs_ast_{clock}"] = cold["time"][clock] / parse["ast_parse"][clock]
        q[f"warm_fresh_vs_cold_{clock}"] = r["warm_fresh"]["time"][clock] / cold["time"][clock]
        q[f"warm_disk_vs_cold_{clock}"] = cold["warm_disk_same_process"][clock] / cold["time"][clock]
        q[f"warm_memory_vs_cold_{clock}"] = cold["warm_memory"][clock] / cold["time"][clock]
    if "matrix_warm" not in r:
        return q
    mx = r["matrix_warm"]
    n = mx["cases"]
    q["matrix_per_case_wall"] = mx["wall"] / n
    q["matrix_per_case_cpu"] = mx["cpu"] / n
    q["matrix_216_wall_estimate"] = mx["wall"] / n * 216
    q["per_case_vs_oracle_wall"] = (q["matrix_per_case_wall"] / ORACLE_SECONDS[1], q["matrix_per_case_wall"] / ORACLE_SECONDS[0])
    q["per_case_vs_oracle_cpu"] = (q["matrix_per_case_cpu"] / ORACLE_SECONDS[1], q["matrix_per_case_cpu"] / ORACLE_SECONDS[0])
    cached = r["matrix_cached"]
    q["cached_per_case_wall"] = cached["wall"] / cached["cases"]
    q["cached_per_case_cpu"] = cached["cpu"] / cached["cases"]
    q["cached_216_wall_estimate"] = cached["wall"] / cached["cases"] * 216
    if "oracle" in r:
        o = r["oracle"]
        for what, per in (("eval", q["matrix_per_case_cpu"]), ("cached", q["cached_per_case_cpu"])):
            q[f"{what}_vs_oracle_batch_cpu"] = per / o["batch_per_case"]["cpu"]
            q[f"{what}_vs_oracle_single_cpu"] = per / o["single"]["cpu"]
    return q


def markdown(results: list[dict[str, Any]], jobs: int, load: tuple[float, float, float],
             command_jobs: list[int] | None = None) -> str:
    command_jobs = command_jobs or []
    def s(x: float) -> str:
        return f"{x:.2f}"

    lines = [f"load average at start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs", ""]
    lines.append("| measure | " + " | ".join(r["version"] for r in results) + " |")
    lines.append("|---|" + "---|" * len(results))

    def cell(fn: Any, r: dict[str, Any]) -> str:
        try:
            return str(fn(r))
        except KeyError:
            return "n/a"  # not measured for this release (e.g. no oracle venv for it)

    def row(label: str, fn: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(fn, r) for r in results) + " |")

    row("files read / lines", lambda r: f"{r['files']} / {r['cold']['lines']}")
    row("libcst.parse_module, wall / cpu s", lambda r: f"{s(r['parse']['libcst_parse']['wall'])} / {s(r['parse']['libcst_parse']['cpu'])}")
    row("ast.parse, wall / cpu s", lambda r: f"{s(r['parse']['ast_parse']['wall'])} / {s(r['parse']['ast_parse']['cpu'])}")
    row("front end: line numbers / IR conversion, cpu s", lambda r: f"{s(r['parse']['frontend_lines']['cpu'])} / {s(r['parse']['frontend_convert']['cpu'])}")
    row("(libcst PositionProvider on the same modules, cpu s)", lambda r: s(r["parse"]["libcst_position_provider"]["cpu"]))
    row("disk form: dump / load, cpu s (MB)", lambda r: f"{s(r['parse']['disk_dump']['cpu'])} / {s(r['parse']['disk_load']['cpu'])} ({r['parse']['disk_bytes'] / 2**20:.1f})")
    row("**cold resolve**, wall / cpu s", lambda r: f"{s(r['cold']['time']['wall'])} / {s(r['cold']['time']['cpu'])}")
    row("cold ÷ libcst parse, wall / cpu (target ≤ 3)", lambda r: f"{s(r['ratios']['cold_vs_libcst_wall'])} / {s(r['ratios']['cold_vs_libcst_cpu'])}")
    row("cold ÷ ast.parse, wall / cpu", lambda r: f"{s(r['ratios']['cold_vs_ast_wall'])} / {s(r['ratios']['cold_vs_ast_cpu'])}")
    row("warm, fresh process (disk cache), wall / cpu s", lambda r: f"{s(r['warm_fresh']['time']['wall'])} / {s(r['warm_fresh']['time']['cpu'])}")
    row("warm fresh ÷ cold, wall / cpu (target ≤ 0.25)", lambda r: f"{s(r['ratios']['warm_fresh_vs_cold_wall'])} / {s(r['ratios']['warm_fresh_vs_cold_cpu'])}")
    row("warm, same process, new SourceCache (disk) ÷ cold, cpu", lambda r: s(r["ratios"]["warm_disk_vs_cold_cpu"]))
    row("warm, same process, same SourceCache (memory) ÷ cold, cpu", lambda r: s(r["ratios"]["warm_memory_vs_cold_cpu"]))
    row("`sglang-audit resolve` CLI warm (process incl. imports), wall / cpu s", lambda r: f"{s(r['warm_cli']['wall'])} / {s(r['warm_cli']['cpu'])}")
    row("`resolve` CLI, result-cache hit, median of 7, wall / cpu s (wall range)",
        lambda r: f"{s(r['cached_cli']['wall'])} / {s(r['cached_cli']['cpu'])} ({s(r['cached_cli']['wall_min'])}–{s(r['cached_cli']['wall_max'])})")
    row("the same with the package's bytecode compiled (as `pip install` leaves it; target ≤ 0.3)",
        lambda r: f"{s(r['cached_cli_bytecode']['wall'])} / {s(r['cached_cli_bytecode']['cpu'])} ({s(r['cached_cli_bytecode']['wall_min'])}–{s(r['cached_cli_bytecode']['wall_max'])})")
    if any("oracle" in r for r in results):
        row("oracle, one case in a fresh process, wall / cpu s", lambda r: f"{s(r['oracle']['single']['wall'])} / {s(r['oracle']['single']['cpu'])}")
        row("oracle, batch, per case, wall / cpu s", lambda r: f"{s(r['oracle']['batch_per_case']['wall'])} / {s(r['oracle']['batch_per_case']['cpu'])} ({r['oracle']['batch_cases']} cases)")
    row("**per request**, pipeline API, shared SourceCache, new targets, cpu s: median / min", lambda r: f"{r['requests']['request_cpu_median']:.3f} / {r['requests']['request_cpu_min']:.3f}")
    row("per request ÷ ast.parse of the files read, cpu (target ≤ 0.12)", lambda r: f"{r['ratios']['request_vs_ast_cpu']:.2f}")
    row("**per-case evaluation** (prepared target), cpu s (target ≤ 0.1)", lambda r: f"{r['requests']['eval_cpu_min']:.3f}")
    row("per-case evaluation ÷ ast.parse, cpu", lambda r: f"{r['ratios']['eval_vs_ast_cpu']:.2f}")
    if any("oracle" in r for r in results):
        row("per-case evaluation ÷ oracle batch case, cpu (target ≤ 0.05)", lambda r: f"{r['ratios']['eval_vs_oracle_batch_case_cpu']:.3f}")
    for name in ("explain", "report"):
        for jobs in command_jobs or [None]:
            k = name if jobs is None else f"{name}_%s_j{jobs}"
            cold, cached = (f"{name}_cold", f"{name}_cached") if jobs is None else (k % "cold", k % "cached")
            if not any(cold in r for r in results):
                continue
            how = "" if jobs is None else f", --jobs {jobs}"
            row(f"`{name}` wall / cpu s, IR cold{how}", lambda r, c=cold: f"{s(r[c]['wall'])} / {s(r[c]['cpu'])}")
            row(f"`{name}` wall / cpu s, IR cached{how}", lambda r, c=cached: f"{s(r[c]['wall'])} / {s(r[c]['cpu'])}")
            row(f"`{name}` peak memory of the process tree, RSS / PSS MB{how}",
                lambda r, a=cold, b=cached: f"{max(r[a]['peak_tree_mb'], r[b]['peak_tree_mb']):.0f} / "
                                            f"{max(r[a]['peak_tree_pss_mb'], r[b]['peak_tree_pss_mb']):.0f}")
        if len(command_jobs) > 1 and any(f"{name}_outputs_identical" in r for r in results):
            row(f"`{name}` output identical across --jobs {' / '.join(map(str, command_jobs))}",
                lambda r, n=name: "yes" if r[f"{n}_outputs_identical"] else "NO")
    row("cold-resolve process ru_maxrss MB", lambda r: f"{r['cold']['maxrss_mb']:.0f}")
    if not all("matrix_warm" in r for r in results):
        return "\n".join(lines) + "\n"
    row(f"matrix cases (--jobs {jobs})", lambda r: str(r["matrix_warm"]["cases"]))
    row("matrix first run (fills the cache), wall s", lambda r: s(r["matrix_first"]["wall"]))
    row("**matrix warm** (IR cached, every case evaluated), wall / cpu of all processes s", lambda r: f"{s(r['matrix_warm']['wall'])} / {s(r['matrix_warm']['cpu'])}")
    row("matrix per case, wall / cpu s", lambda r: f"{r['ratios']['matrix_per_case_wall']:.3f} / {r['ratios']['matrix_per_case_cpu']:.3f}")
    row("216 cases at this rate, wall s (target < 30)", lambda r: s(r["ratios"]["matrix_216_wall_estimate"]))
    row("per case ÷ oracle case (README: 1.2–2 s), wall (target ≤ 0.01)", lambda r: "{:.3f}–{:.3f}".format(*r["ratios"]["per_case_vs_oracle_wall"]))
    row("per case ÷ oracle case, cpu", lambda r: "{:.3f}–{:.3f}".format(*r["ratios"]["per_case_vs_oracle_cpu"]))
    row("matrix with every case a result-cache hit, wall / cpu s (output identical)", lambda r: f"{s(r['matrix_cached']['wall'])} / {s(r['matrix_cached']['cpu'])} ({'yes' if r['matrix_cached_identical'] else 'NO'})")
    row("result-cache hit per case, wall / cpu s", lambda r: f"{r['ratios']['cached_per_case_wall']:.4f} / {r['ratios']['cached_per_case_cpu']:.4f}")
    if any("oracle" in r for r in results):
        row("matrix evaluation per case ÷ oracle case, cpu: batch / fresh process (target ≤ 0.01)", lambda r: f"{r['ratios']['eval_vs_oracle_batch_cpu']:.3f} / {r['ratios']['eval_vs_oracle_single_cpu']:.3f}")
        row("result-cache hit per case ÷ oracle case, cpu: batch / fresh process", lambda r: f"{r['ratios']['cached_vs_oracle_batch_cpu']:.4f} / {r['ratios']['cached_vs_oracle_single_cpu']:.4f}")
    row("**peak memory** matrix process tree (sampled) MB (target < 500)", lambda r: f"{r['matrix_warm']['peak_tree_mb']:.0f}")
    row("the same as PSS (pages shared by forked workers counted once) MB", lambda r: f"{r['matrix_warm']['peak_tree_pss_mb']:.0f}")
    row("sum of per-process peaks (VmHWM, upper bound) MB", lambda r: f"{r['matrix_warm']['sum_hwm_mb']:.0f} ({r['matrix_warm']['processes']} processes)")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "_phase":
        print(json.dumps(PHASES[sys.argv[2]](sys.argv[3])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--versions", nargs="+", default=["0.5.10", "0.5.23"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache-dir", default="/tmp/sglang-audit-bench-cache",
                    help="PRIVATE cache dir; its ir/ and sources/ are emptied first")
    ap.add_argument("--wheels-from", type=Path, default=None, help="copy sglang-X wheels from here (no download)")
    ap.add_argument("--sample-matrix", nargs="*", default=[],
                    help="releases whose matrix runs on --sample-archs × 6 models × no flags only (slow releases)")
    ap.add_argument("--sample-archs", default="sm120")
    ap.add_argument("--skip-matrix", action="store_true", help="leave out the three matrix runs (slow on 0.5.23)")
    ap.add_argument("--commands", nargs="*", default=["explain", "report"],
                    help="CLI commands timed with the IR cold and cached (explain, report)")
    ap.add_argument("--command-jobs", type=int, nargs="*", default=[],
                    help="time explain/report once per --jobs value given (e.g. 1 2); default: their own default")
    ap.add_argument("--commands-only", action="store_true",
                    help="only the CLI start (resolve, then a result-cache hit) and the --commands phases")
    ap.add_argument("--explain-field", default="moe_runner_backend")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--instructions", action="store_true",
                    help="only count the instructions of one warm evaluation per release (valgrind callgrind; "
                         "deterministic, ~2 min on 0.5.23), against the IR in --cache-dir (filled on first use)")
    ap.add_argument("--oracle-venvs", default=None,
                    help="dir of oracle venvs (venv-<version>): measure an oracle case here")
    ap.add_argument("--oracle-cases", type=int, default=10, help="cases in the oracle batch")
    ap.add_argument("--oracle-dir", default=None,
                    help="the shared oracle's folder (default: ../shared/oracle beside the checkout)")
    args = ap.parse_args()
    cache_dir = Path(args.cache_dir)
    if cache_dir.resolve() == Path(os.environ.get("SGLANG_AUDIT_CACHE_DIR", "/nonexistent")).resolve():
        raise SystemExit("--cache-dir must be a private dir, not SGLANG_AUDIT_CACHE_DIR")
    prepare_cache(cache_dir, args.wheels_from, args.versions, empty=not args.instructions)
    # the kernel step reads FlashInfer (downloaded unless cached): left out here, measured
    # in docs/performance.md's kernel section
    env = dict(os.environ, SGLANG_AUDIT_CACHE_DIR=str(cache_dir), PYTHONHASHSEED="0",
               SGLANG_AUDIT_FLASHINFER_SOURCE="none")
    if args.instructions:
        counts = {v: instructions(v, env) for v in args.versions}
        print(json.dumps(counts, indent=1))
        if args.json_out:
            args.json_out.write_text(json.dumps(counts, indent=1))
        return
    load = os.getloadavg()
    results = []
    for version in args.versions:
        r = bench_version(version, args, env)
        r["ratios"] = ratios(r)
        results.append(r)
    report = {"load_average": load, "cpus": os.cpu_count(), "jobs": args.jobs, "targets": TARGETS,
              "oracle_seconds_per_case": ORACLE_SECONDS, "results": results}
    for r in results:
        r.get("cold", {}).pop("files_read", None)
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1))
    print(markdown(results, args.jobs, load, args.command_jobs))


if __name__ == "__main__":
    main()

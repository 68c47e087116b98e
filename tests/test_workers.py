"""resolve/workers.py, the one mechanism that runs a command's independent resolutions in
worker processes: results in input order, the serial run's error, the serial path kept;
and the commands using it give the same output with one worker or several."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
from clirun import cli

from sglang_audit.analyses import explain as explain_mod
from sglang_audit.errors import AuditError, InputError
from sglang_audit.resolve import workers
from sglang_audit.resolve.workers import Batch, WorkerDied, run_all

MINI_E2 = Path(__file__).resolve().parent.parent / "fixtures" / "checkouts" / "mini_e2"
EXPLAIN = ["explain", "fp4_gemm_runner_backend", "--source", str(MINI_E2), "--arch", "sm120",
           "--model", "deepseek-r1-nvfp4", "--format", "json"]

needs_fork = pytest.mark.skipif(not workers.can_fork(), reason="worker processes need the fork start method")


def _pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


class _Unpicklable(Exception):
    """An exception that cannot cross a process boundary as itself."""

    def __init__(self, message: str, handle: object) -> None:
        super().__init__(message)
        self.handle = handle


class _TwoArgError(AuditError):
    """An AuditError whose constructor pickle cannot call again (two arguments)."""

    exit_code = 5

    def __init__(self, message: str, where: int) -> None:
        super().__init__(message)
        self.where = where


# ---- the mechanism --------------------------------------------------------------------------
@needs_fork
def test_results_are_in_input_order_and_come_from_other_processes():
    items = list(range(12))
    serial = run_all(_pid_and_square, items, 1)
    parallel = run_all(_pid_and_square, items, 3)
    assert [v for _p, v in parallel] == [v for _p, v in serial] == [x * x for x in items]
    assert {p for p, _v in serial} == {os.getpid()}
    assert os.getpid() not in {p for p, _v in parallel}


@needs_fork
def test_a_closure_runs_in_workers_on_the_parents_state():
    state = {"loaded": [10, 20, 30]}  # what the parent prepared before the batch

    def read(i: int) -> int:
        return state["loaded"][i] + os.getpid() * 0

    assert run_all(read, [2, 0, 1], 2) == [30, 10, 20]


@needs_fork
@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_the_first_failing_item_in_input_order_is_raised(jobs):
    def fn(i: int) -> int:
        if i in (3, 5):
            raise InputError(f"item {i} is bad")
        return i

    with pytest.raises(InputError) as info:
        run_all(fn, list(range(8)), jobs)
    assert str(info.value) == "item 3 is bad"
    assert type(info.value) is InputError and info.value.exit_code == 2


@needs_fork
def test_an_exception_that_does_not_pickle_keeps_its_name_message_and_exit_code():
    def fn(i: int) -> int:
        if i == 1:
            raise _Unpicklable("cannot cross", handle=lambda: None)
        if i == 2:
            raise _TwoArgError("no", 2)
        return i

    with pytest.raises(Exception) as info:
        run_all(fn, [0, 1], 2)
    assert (type(info.value).__name__, str(info.value)) == ("_Unpicklable", "cannot cross")
    with pytest.raises(AuditError) as audit:
        run_all(fn, [0, 2], 2)
    assert (type(audit.value).__name__, str(audit.value), audit.value.exit_code) == ("_TwoArgError", "no", 5)


@needs_fork
@pytest.mark.parametrize("jobs", [1, 2])
def test_kept_errors_are_the_items_results(jobs):
    def fn(i: int) -> int:
        if i % 2:
            raise InputError(f"odd {i}")
        return i

    out = run_all(fn, list(range(5)), jobs, keep_errors=(InputError,))
    assert [o if isinstance(o, int) else str(o) for o in out] == [0, "odd 1", 2, "odd 3", 4]


@needs_fork
def test_a_worker_that_dies_is_one_error():
    def fn(i: int) -> int:
        if i == 1:
            os._exit(7)  # killed, out of memory: no answer
        return i

    with pytest.raises(WorkerDied) as info:
        run_all(fn, [0, 1, 2], 2)
    assert info.value.exit_code == 3 and "--jobs 1" in str(info.value)


@needs_fork
def test_a_batch_inside_a_worker_runs_in_that_worker():
    def inner(i: int) -> int:
        return os.getpid()

    def outer(i: int) -> tuple[int, list[int]]:
        return os.getpid(), run_all(inner, [0, 1], 2)

    for pid, inner_pids in run_all(outer, [0, 1], 2):
        assert inner_pids == [pid, pid]


@needs_fork
def test_progress_sees_every_item_once_and_the_collector_is_given_back():
    seen: list[int] = []
    before = gc.get_freeze_count()
    with Batch(_pid_and_square, list(range(6)), 2) as batch:
        assert batch.parallel
        batch.results(lambda i, _r: seen.append(i))
    assert sorted(seen) == list(range(6))
    assert gc.get_freeze_count() == before


def test_one_job_runs_in_order_in_this_process():
    calls: list[int] = []

    def fn(i: int) -> int:
        calls.append(i)
        return i

    with Batch(fn, [2, 1, 0], 1) as batch:
        assert not batch.parallel and calls == []  # nothing before results()
        assert batch.results() == [2, 1, 0]
    assert calls == [2, 1, 0]


def test_default_jobs_follows_the_usable_cpus(monkeypatch):
    monkeypatch.setattr(workers, "cpu_count", lambda: 1)
    assert workers.default_jobs() == 1
    monkeypatch.setattr(workers, "cpu_count", lambda: 64)
    assert workers.default_jobs() == workers.MAX_DEFAULT_JOBS


# ---- the commands -----------------------------------------------------------------------------
@needs_fork
def test_explain_output_is_the_same_with_one_or_several_workers(isolated_cache):
    one = cli(*EXPLAIN, "--jobs", "1")
    two = cli(*EXPLAIN, "--jobs", "2")
    assert one[0] == two[0] == 0, (one[2], two[2])
    assert one[1] == two[1]
    assert len(__import__("json").loads(one[1])["choices"]) == 4


@needs_fork
def test_an_error_in_a_forced_choice_is_the_serial_runs_one_line(isolated_cache, monkeypatch):
    real = explain_mod.Resolver.resolve

    def failing(self):  # the forced cutlass choice fails, in whichever process resolves it
        if self.target.flags.get("fp4_gemm_runner_backend") == "flashinfer_cutlass":
            raise InputError("cannot resolve\nflashinfer_cutlass here")
        return real(self)

    monkeypatch.setattr(explain_mod.Resolver, "resolve", failing)
    one = cli(*EXPLAIN, "--jobs", "1")
    two = cli(*EXPLAIN, "--jobs", "3")
    assert one[0] == two[0] == 2
    assert one[2] == two[2] == "sglang-audit: error: cannot resolve flashinfer_cutlass here\n"


@needs_fork
def test_report_is_the_same_with_one_or_several_workers(isolated_cache, tmp_path):
    args = ["report", "-s", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--set", "tp_size=8"]
    one = cli(*args, "-o", tmp_path / "one.html", "--jobs", "1")
    two = cli(*args, "-o", tmp_path / "two.html", "--jobs", "2")
    assert one[0] == two[0] == 0, (one[2], two[2])
    assert (tmp_path / "one.html").read_bytes() == (tmp_path / "two.html").read_bytes()


@needs_fork
def test_recommend_is_the_same_with_one_or_several_workers(isolated_cache):
    args = ["recommend", "-s", str(MINI_E2), "-a", "sm120", "-m", "deepseek-r1-nvfp4", "--format", "json"]
    one = cli(*args, "--jobs", "1")
    two = cli(*args, "--jobs", "2")
    assert one[0] == two[0], (one[2], two[2])
    assert one[1] == two[1] and one[1]


@needs_fork
def test_diff_is_the_same_with_one_or_several_workers(isolated_cache, tmp_path):
    deployments = tmp_path / "fleet.yaml"
    deployments.write_text(
        "deployments:\n"
        "  - {name: a, arch: sm120, model: deepseek-r1-nvfp4, flags: {tp_size: 8}}\n"
        "  - {name: b, arch: sm100, model: gpt-oss-120b}\n"
        "  - {name: c, arch: sm120, model: qwen3-30b-a3b, flags: {moe_runner_backend: flashinfer_cutlass}}\n",
        encoding="utf-8")
    args = ["diff", "--from", str(MINI_E2.parent / "mini_e4"), "--to", str(MINI_E2), "--deployment", deployments,
            "--format", "json"]
    one = cli(*args, "--jobs", "1")
    two = cli(*args, "--jobs", "2")
    assert one[0] == two[0], (one[2], two[2])
    assert one[1] == two[1] and one[1]


def test_report_resolves_its_own_target_once(isolated_cache, monkeypatch):
    """The report's resolution is every explanation's base: the request as given is
    evaluated once, whatever the number of explained settings."""
    from sglang_audit.cli.report import build_report
    from sglang_audit.resolve.pipeline import Request
    from sglang_audit.resolve.resolver import Resolver

    flags_seen: list[dict[str, object]] = []
    real = Resolver.resolve

    def counting(self):
        flags_seen.append(dict(self.target.flags))
        return real(self)

    monkeypatch.setattr(Resolver, "resolve", counting)
    request = Request(source=str(MINI_E2), arch="sm120", model="deepseek-r1-nvfp4", sets=["tp_size=8"])
    data = build_report(request, jobs=1)
    assert len(data.explanations) >= 2
    assert flags_seen.count({"tp_size": 8}) == 1
    forced = sum(len(e.choices) for e in data.explanations.values())
    assert len(flags_seen) <= 1 + forced


class _Cyclic:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


_LAST: list[object] = []  # a weak reference to the previous task's cycle, per process


def _previous_cycle_collected(_x: int) -> bool:
    import weakref

    gc.set_threshold(10**9)  # no collection on the collector's own schedule: only the batch's
    prev = _LAST[-1]() if _LAST else None
    obj = _Cyclic()
    _LAST[:] = [weakref.ref(obj)]
    del obj
    return prev is None


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=needs_fork)])
def test_each_task_s_garbage_is_collected_before_the_next(jobs):
    # a resolution leaves tens of thousands of objects in cycles: left for the collector's
    # schedule they pile up across a batch's tasks and a worker's heap grows with every case
    saved = gc.get_threshold()
    try:
        assert all(run_all(_previous_cycle_collected, list(range(6)), jobs))
    finally:
        gc.set_threshold(*saved)
        _LAST.clear()
        gc.collect()


# ---- fresh batches: a process forked per task (explain's forced choices) -------------------
@needs_fork
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_fresh_batch_runs_each_task_from_the_state_before_it(jobs):
    state = {"left": 1}

    def consume(i: int) -> tuple[int, int, bool]:
        before = state["left"]
        state["left"] = 0  # what an EntrySnapshot's interpreter is to a resolution: used up
        return before, os.getpid(), workers.in_task_fork()

    out = run_all(consume, list(range(4)), jobs, fresh=True)
    assert [b for b, _p, _f in out] == [1, 1, 1, 1]
    assert all(f for _b, _p, f in out) and len({p for _b, p, _f in out}) == 4 and os.getpid() not in {p for _b, p, _f in out}
    assert state["left"] == 1 and not workers.in_task_fork()  # this process is untouched
    # without it, a serial batch's later tasks see what the first left
    assert [b for b, _p, _f in run_all(consume, list(range(3)), 1)] == [1, 0, 0]


@needs_fork
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_fresh_batch_keeps_errors_and_names_a_task_that_died(jobs):
    def fn(i: int) -> int:
        if i == 1:
            raise InputError("choice 1 is refused")
        if i == 2:
            os._exit(9)
        return i

    with pytest.raises(WorkerDied) as info:
        run_all(fn, [0, 1, 2], jobs, keep_errors=(InputError,), fresh=True)
    assert "exit code 9" in str(info.value) and isinstance(info.value, workers.TaskDied)
    out = run_all(fn, [0, 1, 3], jobs, keep_errors=(InputError,), fresh=True)
    assert out[0] == 0 and out[2] == 3 and isinstance(out[1], InputError) and str(out[1]) == "choice 1 is refused"
    with pytest.raises(InputError, match="choice 1 is refused"):
        run_all(fn, [0, 1], jobs, fresh=True)

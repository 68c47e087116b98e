"""Independent resolutions of one command run in worker processes: the one mechanism
``explain``, ``report``, ``diff``, ``recommend`` and ``matrix`` use.

The workers are forked (the fork start method) when a batch starts, so each begins as a
copy of the parent at that moment: the release located and prepared, its flag table and
its IR already loaded (``SourceCache``), the rules read.  Nothing is pickled on the way in
but a task's index (the function and its items are inherited, closures included); each
result is pickled on the way back.  Results are placed by index, so the output is the
serial run's whatever the number of workers or the order tasks finish in; a task that
raises makes the batch raise the error the serial run would (the first in input order).
``jobs == 1``, a platform without fork, or a batch started inside a worker runs in this
process, in order.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sglang_audit.errors import AuditError

T = TypeVar("T")
R = TypeVar("R")

MAX_DEFAULT_JOBS = 4  # past this, each worker's copy of the release costs more than it gains


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask, which containers and
    ``taskset`` narrow), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def default_jobs() -> int:
    """Worker processes when the command is not told: the usable CPUs, up to 4."""
    return max(1, min(MAX_DEFAULT_JOBS, cpu_count()))


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


class WorkerDied(AuditError):
    """A worker process ended without answering (killed, out of memory, a crash)."""

    exit_code = 3

    def __init__(self, detail: str) -> None:
        super().__init__(f"a worker process died ({detail}); rerun with --jobs 1 to see the failing input")
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:  # crosses back from a task's process as itself
        return (type(self), (self.detail,))


class TaskDied(WorkerDied):
    """The process forked for one task of a ``fresh`` batch ended without answering."""

    def __init__(self, detail: str) -> None:
        AuditError.__init__(self, f"the process resolving one input died ({detail}): killed, out of memory "
                                  "or a crash")
        self.detail = detail


class _RemoteTraceback(Exception):
    """The worker's traceback, chained to the re-raised error (shown with SGLANG_AUDIT_DEBUG)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Failure:
    """A task's exception as it crosses back to the parent.  ``error`` is the exception
    itself when it survives pickling unchanged; otherwise its class name, message and exit
    code rebuild one that the CLI prints identically."""

    error: BaseException | None
    name: str
    message: str
    audit: bool
    exit_code: int
    trace: str

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        audit = isinstance(exc, AuditError)
        code = int(getattr(exc, "exit_code", 2)) if audit else 2
        kept: BaseException | None = exc
        try:
            back = pickle.loads(pickle.dumps(exc))
            if type(back) is not type(exc) or str(back) != str(exc):
                kept = None
        except Exception:  # noqa: BLE001 - any failure to cross: rebuild from the text
            kept = None
        return cls(kept, type(exc).__name__, str(exc), audit, code, trace)

    def revive(self) -> BaseException:
        if self.error is not None:
            exc = self.error
        elif self.audit:
            # the same class name and exit code: the CLI's one line reads the same
            exc = type(self.name, (AuditError,), {"exit_code": self.exit_code})(self.message)
        else:
            exc = type(self.name, (Exception,), {})(self.message)
        exc.__cause__ = _RemoteTraceback(self.trace)
        return exc


# The running batch's function and items, set before the workers are forked (so they
# inherit them) and cleared when the batch ends; one batch at a time per process.
_TASKS: tuple[Callable[[Any], Any], Sequence[Any], tuple[type[BaseException], ...]] | None = None
_IN_WORKER = False
_FRESH = False  # the running batch forks a process per task (Batch(fresh=True))
_IN_TASK_FORK = False  # this process was forked to run one task, and ends with it


def in_batch_worker() -> bool:
    """True in a worker process of a batch (and in the processes it forks per task)."""
    return _IN_WORKER


def in_task_fork() -> bool:
    """True in a process forked for one task of a ``fresh`` batch: state this process holds
    from before the fork is this task's alone (it is never seen by another task)."""
    return _IN_TASK_FORK


def _mark_worker() -> None:
    global _IN_WORKER
    _IN_WORKER = True  # a batch started by a task runs in that worker, not in a new pool


_OK, _KEPT, _FAILED = "ok", "kept", "failed"


def _run_task(index: int) -> tuple[str, Any]:
    assert _TASKS is not None, "worker forked without a batch"
    fn, items, keep = _TASKS
    if _FRESH:
        return _in_fresh_fork(fn, items[index], keep)
    try:
        return _call(fn, items[index], keep)
    finally:
        _collect_task_garbage()


def _call(fn: Callable[[Any], Any], item: Any, keep: tuple[type[BaseException], ...]) -> tuple[str, Any]:
    try:
        return _OK, fn(item)
    except keep as exc:
        return _KEPT, Failure.of(exc)
    except Exception as exc:  # noqa: BLE001 - carried back, re-raised by the parent
        return _FAILED, Failure.of(exc)


def _in_fresh_fork(fn: Callable[[Any], Any], item: Any, keep: tuple[type[BaseException], ...]) -> tuple[str, Any]:
    """``_call`` in a child forked for this task alone, which starts from this process as it
    is now and exits with the answer (pickled through a pipe): no task sees what another
    left, so a task may consume state prepared before the batch (``in_task_fork``)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # the child must not write out what this process had buffered
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(read_fd)
            global _IN_TASK_FORK, _IN_WORKER
            _IN_TASK_FORK = True
            _IN_WORKER = True  # a batch this task starts runs in this process, as in a worker
            out = _call(fn, item, keep)
            try:
                data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - a result that does not pickle fails its task
                data = pickle.dumps((_FAILED, Failure.of(exc)), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as fh:
                fh.write(data)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            code = 0
        finally:
            os._exit(code)  # no atexit handlers, no cleanup of the parent's state
    os.close(write_fd)
    status = None
    try:
        with os.fdopen(read_fd, "rb") as fh:
            data = fh.read()
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:  # interrupted: the child must not outlive the batch
            _kill_and_reap(pid)
    if not data or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit code {os.waitstatus_to_exitcode(status)}"
        return _FAILED, Failure.of(TaskDied(f"ended without answering: {how}"))
    return pickle.loads(data)  # noqa: S301 - written by this process's own child


def _kill_and_reap(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def _collect_task_garbage() -> None:
    """A resolution leaves its interpreter's objects in reference cycles (~50,000-65,000 per
    0.5.23 case). Left to the collector's own schedule they pile up across tasks, and the
    heap they fragment is not given back: a matrix worker grew from 198 to 250 MB over 14
    cases, one collecting after each case stayed at 198 MB. What the batch started with is
    frozen out of the generations (``Batch``), so this walks only the task's own objects."""
    gc.collect()


class Batch(Generic[T, R]):
    """``fn(item)`` for every item: started at once in worker processes (``jobs`` > 1), so
    the caller may do other work meanwhile, and collected in item order by ``results``.
    In this process (``jobs`` == 1) nothing runs before ``results`` is called.

    ``keep_errors``: exceptions of these types raised by ``fn`` become that item's result
    instead of the batch's error.  Use as a context manager: leaving it early (an error,
    ^C) cancels what has not started."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], jobs: int,
                 keep_errors: tuple[type[BaseException], ...] = (), fresh: bool = False) -> None:
        self.fn = fn
        self.items = list(items)
        self.keep = keep_errors
        # each task in a process forked for it alone, from this process as it is now (in
        # workers, as the worker was forked): what a task consumes or leaves is its own
        self.fresh = fresh and can_fork() and not _IN_TASK_FORK
        self.jobs = max(1, min(jobs, len(self.items)))
        self.pool: ProcessPoolExecutor | None = None
        self.futures: list[Future[tuple[str, Any]]] = []
        self.froze = False
        self.owns_tasks = False  # this batch set _TASKS (a serial one leaves it alone)
        if self.jobs > 1 and can_fork() and not _IN_WORKER and _TASKS is None:
            self._start()

    @property
    def parallel(self) -> bool:
        return self.pool is not None

    def _start(self) -> None:
        global _TASKS, _FRESH
        _TASKS = (self.fn, self.items, self.keep)
        _FRESH = self.fresh
        self.owns_tasks = True
        # what the parent holds now is shared with the workers: out of the collector's
        # generations, so a worker's collections do not touch (and copy) those pages
        if gc.get_freeze_count() == 0:
            gc.freeze()
            self.froze = True
        try:
            self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("fork"),
                                            initializer=_mark_worker)
            self.futures = [self.pool.submit(_run_task, i) for i in range(len(self.items))]
        except BaseException:
            self.close()
            raise

    def results(self, on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Every result (or kept error), in item order; ``on_done(index, result)`` as each
        finishes (in this process: in order, each right after it is computed)."""
        if self.pool is None:
            out: list[Any] = []
            many = len(self.items) > 1
            froze = many and gc.get_freeze_count() == 0
            if froze:
                gc.freeze()  # as for workers: each item's collection walks only its own objects
            try:
                for i, item in enumerate(self.items):
                    if self.fresh:
                        status, value = _in_fresh_fork(self.fn, item, self.keep)
                        if status == _FAILED:
                            raise value.revive()
                        out.append(value.revive() if status == _KEPT else value)
                    else:
                        try:
                            out.append(self.fn(item))
                        except self.keep as exc:
                            out.append(exc)
                        finally:
                            if many:
                                _collect_task_garbage()
                    if on_done is not None:
                        on_done(i, out[-1])
            finally:
                if froze:
                    gc.unfreeze()
            return out
        try:
            return self._collect(on_done)
        finally:
            self.close()

    def _collect(self, on_done: Callable[[int, Any], None] | None) -> list[Any]:
        index = {id(f): i for i, f in enumerate(self.futures)}
        done: dict[int, Any] = {}
        failed: dict[int, Failure] = {}
        pending = set(self.futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: index[id(f)]):
                i = index[id(fut)]
                try:
                    status, value = fut.result()
                except BrokenProcessPool as exc:
                    raise WorkerDied(str(exc)) from None
                if status != _FAILED:
                    done[i] = value.revive() if status == _KEPT else value
                    if on_done is not None and not failed:
                        on_done(i, value)
                else:
                    failed[i] = value
            if failed:
                # the serial run raises the first failing item's error: the items before it
                # must still finish (one of them may fail first), the later ones are not needed
                first = min(failed)
                for fut in list(pending):
                    if index[id(fut)] > first:
                        fut.cancel()
                pending = {f for f in pending if index[id(f)] < first}
        if failed:
            raise failed[min(failed)].revive()
        return [done[i] for i in range(len(self.items))]

    def close(self) -> None:
        global _TASKS, _FRESH
        if self.pool is not None:
            # on an error or ^C, do not wait for the queued tasks
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        if self.owns_tasks:
            _TASKS = None
            _FRESH = False
            self.owns_tasks = False
        if self.froze:
            gc.unfreeze()  # this process goes on: give its objects back to the collector
            self.froze = False

    def __enter__(self) -> Batch[T, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_all(fn: Callable[[T], R], items: Sequence[T], jobs: int,
            on_done: Callable[[int, Any], None] | None = None,
            keep_errors: tuple[type[BaseException], ...] = (), fresh: bool = False) -> list[Any]:
    """``[fn(item) for item in items]``, in ``jobs`` worker processes when ``jobs`` > 1."""
    with Batch(fn, items, jobs, keep_errors, fresh) as batch:
        return batch.results(on_done)

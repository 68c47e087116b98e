"""Unknown branches explored from the branch, not from the start.

The resolver explores every decision on an unknown input both ways, depth-first
(``Resolver._resolve``). Re-running, a later path evaluates again everything before its
first differing decision, which is the same as on the path that met it first: about half
of every later path on the multi-path cases measured (a 24-path case on 0.5.20, its
decisions 0.2 s into 0.4 s paths: 9.5 -> 6.8 s CPU; ``docs/performance.md``).

Where fork is available, the process forks at each decision a path takes first. The child
waits at the branch with the evaluation's whole state (the Python stack included, which a
tree-walking interpreter cannot copy otherwise). When the path's own evaluation is over, its
process resumes the children, the last decision first (the order in which the re-running
resolver pops them); each continues from the branch with the other outcome, explores its
own new decisions the same way, and answers with its paths, slimmed to what the join reads,
then exits. The paths come back in the re-running order, and the bounds (paths, steps, the
CPU-time budget) are counted across them as there, so the ``Resolution`` is the one
re-running gives (``tests/test_pathforks.py``). A child that cannot be forked or dies is
replaced by re-running its path from the start, in the process that would have resumed it;
so is one whose parent parsed files after forking it (a cold cache: the child would parse
them again, for each child, where re-running here finds them parsed).

Waiting children hold the heap as it was at their branch (copy-on-write pages the running
process has since written), so at most ``MAX_WAITING`` wait at a time along a resolution;
past that, a decision's other outcome is re-run from the start. A decision met in the
first ``FORK_MIN_STEPS`` steps of its path is re-run too: re-running that prefix costs less
than the fork. The resolver does not fork in a batch worker (``Resolver.fork_paths``).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sglang_audit.evaluate.values import Decision

MAX_WAITING = 8  # processes waiting at a branch at once, along one resolution
# A fork costs ~50-70 ms of CPU on a 0.5.2x heap (the call and the copy-on-write faults it
# brings), about 15,000 interpreted steps (docs/performance.md, twelfth session): a branch
# ~5,000 steps in cost 0.05 s more forked than re-run; GLM-5.3 on 0.5.20 before its config
# class was modelled, 22 paths branching 23,000-34,000 steps in, took 7.8 s forked, 11.2 s re-run
FORK_MIN_STEPS = 20_000

_HEADER = struct.Struct("<Q")
# the pipe ends this process holds: to its waiting children, and to the parent that resumed
# it; a new child closes them all (another's end left open would hide that its holder exited)
_HELD: set[int] = set()


@dataclass
class Budget:
    """What the bounds count over every path of one resolution; handed to a child with its
    resume and back with its answer."""

    paths: int = 0  # paths evaluated so far
    steps: int = 0  # interpreter steps over those paths
    cpu: float = 0.0  # CPU seconds of the resolution so far (parsing and attention excluded)
    have_base: bool = False  # a path so far was neither aborted nor rejected (the join's base)
    waiting: int = 0  # children waiting at a branch in the processes that resumed this one


@dataclass
class Answer:
    """A resumed child's paths (its own, then its children's), and what the paths changed
    that the resolution reports: files loaded, model assumptions."""

    paths: list[Any]
    explored_all: bool
    budget: Budget
    loads: list[tuple[Any, Any]] = field(default_factory=list)  # (path, the cache's key for it)
    assumptions: list[str] = field(default_factory=list)
    failure: Any = None  # workers.Failure: the child's evaluation raised


def can_fork_paths() -> bool:
    return hasattr(os, "fork") and hasattr(os, "pipe")


class _Waiting:
    """The parent's handle on a child waiting at a branch."""

    def __init__(self, pid: int, go: int, reply: int, parsed: int) -> None:
        self.pid, self.go, self.reply = pid, go, reply
        self.parsed = parsed  # files the parent's cache had parsed when it forked this child
        _HELD.update((go, reply))

    def resume(self, budget: Budget) -> Answer | None:
        """The child's answer; None when it is gone (its path is then re-run here)."""
        try:
            _send(self.go, budget)
            answer = _receive(self.reply)
        except (OSError, EOFError, pickle.UnpicklingError):
            answer = None
        self.close()
        return answer if isinstance(answer, Answer) else None

    def close(self) -> None:
        """Stop the child (a closed pipe ends its wait) and reap it."""
        for fd in (self.go, self.reply):
            _HELD.discard(fd)
            try:
                os.close(fd)
            except OSError:
                pass
        self.go = self.reply = -1
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


@dataclass
class Alternative:
    """A decision's other outcome: the decisions a re-run would start with, and the child
    waiting at the branch to take it (None: re-run it from the start)."""

    decisions: dict[str, bool]
    child: _Waiting | None


class PathForks:
    """The decisions one path takes first, each with its alternative; the interpreter's
    ``on_decision`` hook. In a child resumed at one of them, the same object becomes that
    child's: its alternatives are the new decisions met after the branch."""

    def __init__(self, start: dict[str, bool], budget: Budget, on_resume: Callable[[Budget], None]) -> None:
        self.start = dict(start)  # the decisions this path was started with
        self.budget = budget
        self.alternatives: list[Alternative] = []
        self.on_resume = on_resume
        self.parent: tuple[int, int] | None = None  # (resume fd, answer fd): this process is a resumed child
        self.loads_from = 0  # the cache's files_read length when this process was resumed

    def waiting(self) -> int:
        return sum(1 for a in self.alternatives if a.child is not None)

    def at_decision(self, interp: Any, decision: Decision) -> bool:
        alt = {**self.start, **{d.key: d.first for d in interp.new_decisions[:-1]}, decision.key: not decision.first}
        child: _Waiting | None = None
        if interp.steps >= FORK_MIN_STEPS and self.budget.waiting + self.waiting() < MAX_WAITING:
            forked = self._fork(interp)
            if forked is None:  # this process is the child, resumed with the other outcome
                interp.decisions[decision.key] = not decision.first
                interp.new_decisions.clear()  # as on a re-run that starts with ``alt``
                self.start = alt
                return True
            child = forked if isinstance(forked, _Waiting) else None
        self.alternatives.append(Alternative(alt, child))
        return False

    def _fork(self, interp: Any) -> _Waiting | None | bool:
        """In the parent: the waiting child (False if it could not be forked). In the child:
        None once resumed (its ``budget`` and ``parent`` set); exits if never resumed."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # the child must not write out what this process had buffered
        try:
            go_r, go_w = os.pipe()
            reply_r, reply_w = os.pipe()
        except OSError:
            return False
        try:
            pid = os.fork()
        except OSError:
            for fd in (go_r, go_w, reply_r, reply_w):
                os.close(fd)
            return False
        if pid:
            os.close(go_r)
            os.close(reply_w)
            return _Waiting(pid, go_w, reply_r, interp.cache.parse_count)
        # the child: never returns into the parent's code unless resumed
        try:
            os.close(go_w)
            os.close(reply_r)
            for fd in _HELD:  # the parent's: its other children's, its own parent's
                try:
                    os.close(fd)
                except OSError:
                    pass
            _HELD.clear()
            _HELD.update((go_r, reply_w))
            budget = _receive(go_r)
        except BaseException:  # noqa: BLE001 - a waiting child must never run the parent's code
            os._exit(1)
        if not isinstance(budget, Budget):
            os._exit(0)  # stopped: the resolution ended before this outcome was needed
        self.parent = (go_r, reply_w)
        self.alternatives = []  # the parent's, whose pipe ends are closed here
        self.budget = budget
        self.loads_from = len(interp.cache.files_read)
        self.on_resume(budget)
        return None

    def stop(self) -> None:
        """Stop every child still waiting (the exploration ended before their turn)."""
        for a in self.alternatives:
            if a.child is not None:
                a.child.close()
                a.child = None

    def answer(self, answer: Answer) -> NoReturn:
        """A resumed child's last act: its answer to the parent, then exit."""
        assert self.parent is not None
        code = 1
        try:
            self.stop()
            try:
                _send(self.parent[1], answer)
            except Exception as exc:  # noqa: BLE001 - an answer that does not pickle fails the resolution
                from sglang_audit.resolve.workers import Failure

                _send(self.parent[1], Answer([], False, answer.budget, failure=Failure.of(exc)))
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            code = 0
        finally:
            os._exit(code)

    def fail(self, exc: BaseException) -> NoReturn:
        from sglang_audit.resolve.workers import Failure

        self.answer(Answer([], False, self.budget, failure=Failure.of(exc)))


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _receive(fd: int) -> Any:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    return pickle.loads(_read_exactly(fd, size))  # noqa: S301 - written by this process's own parent or child


def _read_exactly(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the other process closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)

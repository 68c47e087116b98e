"""The process's policy for the heap a command leaves: the cyclic garbage collector while a
command that resolves one deployment runs, and the end of every command (``run_and_exit``).

A full collection walks every live object, and after a release's IR is loaded that is every
IR node of the ~350 modules a 0.5.23 resolution reads: CPython runs one as soon as the newly
loaded objects outnumber a quarter of the old ones, i.e. once per process, at a cost of
0.4-0.9 s CPU on 0.5.23 (measured: `resolve` of the README's job 4.45-5.12 s CPU with the
collector on, 4.02-4.17 s with it off). One resolution leaves little garbage behind (peak RSS
114 -> 123 MB), and the process ends after it; commands that resolve many deployments
(explain, report, diff, recommend, matrix) keep the collector.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn


@contextmanager
def collector_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_and_exit(command: Any, **kwargs: Any) -> NoReturn:
    """Run a click command in standalone mode, then end the process without tearing its heap
    down: after a 0.5.23 ``explain`` the interpreter's own exit frees ~700,000 objects one
    by one, 0.9-1.1 s of a 9 s command (measured: 9.17-9.93 s wall with the normal exit,
    8.43-8.50 s with this one; docs/performance.md, twelfth session). The output is flushed first; nothing the commands open
    outlives them (worker pools, temporary directories and files are closed by their
    ``with`` blocks), so what the skipped teardown would do is free memory. Atexit handlers
    are skipped too, as mypy's ``hard_exit`` and this tool's forked workers do."""
    try:
        command.main(standalone_mode=True, **kwargs)
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"), as the interpreter shows it
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            code = 141 if stream is sys.stdout else code  # the reader went away (`| head`)
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)

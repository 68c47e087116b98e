"""The cyclic garbage collector's policy for a command that resolves one deployment and exits.

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
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

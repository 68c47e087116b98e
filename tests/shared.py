"""One ``SourceCache`` per release for the real-release tests of a process.

The real-release tests resolve hundreds of targets of some twenty releases. Each used to
build a fresh ``SourceCache``, so every test loaded the release's IR from disk again and
evaluated its flag parser again (~1.2 s of CPU per test on 0.5.2x, a third of the time of
the rule tests). They now resolve the way a library user resolving many targets of one
release does, ``pipeline.resolve(request, cache=cache)`` (issue 22): what the pipeline
shares between targets of one cache (the loaded IR, the flag table when what it read of the
target answers alike) is then exercised on every run, in whatever order xdist deals the
tests. ``tests/test_prepared.py`` checks that a target resolved on a shared cache equals it
resolved alone.

A few releases are kept (least recently used first out): a cache holds the IR of every file
its resolutions read, ~100-200 MB for a 0.5.2x release.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from sglang_audit.frontend.parse import SourceCache

KEEP = 3
_CACHES: OrderedDict[str, SourceCache] = OrderedDict()


def cache_for(source: str) -> SourceCache:
    cache = _CACHES.pop(source, None) or SourceCache(use_disk=True)
    _CACHES[source] = cache
    while len(_CACHES) > KEEP:
        _CACHES.popitem(last=False)
    return cache


def resolve(request: Any) -> Any:
    """``pipeline.resolve`` on this process's cache for the request's source."""
    from sglang_audit.resolve.pipeline import resolve as pipeline_resolve

    return pipeline_resolve(request, cache=cache_for(str(request.source)))

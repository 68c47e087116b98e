from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sglang_audit.source.locate import SourceTree, locate_source

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
MINI_E2 = FIXTURES / "checkouts" / "mini_e2"


@pytest.fixture(scope="session")
def release():
    """Real SGLang releases from the package index, downloaded once into the user cache
    dir (SGLANG_AUDIT_CACHE_DIR, else the platform cache) and never installed."""
    cache: dict[str, SourceTree] = {}

    def get(version: str) -> SourceTree:
        if version not in cache:
            cache[version] = locate_source(f"sglang=={version}")
        return cache[version]

    return get


@pytest.fixture(autouse=True)
def _no_flashinfer_download(request, monkeypatch):
    """Unit tests never download FlashInfer or sgl-kernel: kernel verdicts read no library
    unless a test passes one (tests/test_kernels.py, tests/test_attention_kernels.py) or is a
    real-release test."""
    if request.node.get_closest_marker("real_release") is None:
        monkeypatch.setenv("SGLANG_AUDIT_FLASHINFER_SOURCE", "none")
        monkeypatch.setenv("SGLANG_AUDIT_SGL_KERNEL_SOURCE", "none")


@pytest.fixture()
def isolated_cache(tmp_path, monkeypatch):
    """A private cache dir for tests that must not share state (real releases excluded)."""
    monkeypatch.setenv("SGLANG_AUDIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def pytest_configure(config):
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # strict mode: an internal evaluator error fails the test instead of becoming `unknown`
    os.environ.setdefault("SGLANG_AUDIT_STRICT", "1")
    # the pip profile's cuDNN from rules/torch_pins.toml, never the package index: the same
    # answer (and source text) on every machine; tests of the index path unset it
    os.environ.setdefault("SGLANG_AUDIT_OFFLINE", "1")


class ProcessLog:
    """A list that the processes a command forks append to as well (explain resolves each
    forced choice in a process forked for it): one JSON line per entry, in a file."""

    def __init__(self, path):
        self.path = path
        path.write_text("")

    def append(self, value) -> None:
        import json

        with open(self.path, "a", encoding="utf-8") as fh:  # one short write: whole lines
            fh.write(json.dumps(value) + "\n")

    def items(self) -> list:
        import json

        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines()]

    def __len__(self) -> int:
        return len(self.items())


@pytest.fixture()
def process_log(tmp_path):
    return ProcessLog(tmp_path / "process-log.jsonl")


_VERSION = re.compile(r"^0\.\d+\.\d+(?:\.post\d+)?$")


def _release_of(item: pytest.Item) -> tuple[int, ...] | None:
    """The SGLang release a real-release test is parametrized with, if one of its parameters is."""
    if item.get_closest_marker("real_release") is None:
        return None
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec is not None else ()):
        if isinstance(value, str) and _VERSION.match(value):
            return tuple(int(x) for x in re.findall(r"\d+", value))
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests parametrized with a release run last, grouped by release: tests/shared.py keeps
    one SourceCache per release for the last three, and a test of another release evicts one
    (~2 s of CPU to load a release's IR and flag table again). In file order the suite
    changed release ~150 times; grouped, ~40 (2 workers). Deterministic, as xdist requires."""
    versioned = [(rel, i, item) for i, item in enumerate(items) if (rel := _release_of(item)) is not None]
    if not versioned:
        return
    moved = {id(item) for _, _, item in versioned}
    items[:] = [item for item in items if id(item) not in moved] + [item for _, _, item in sorted(versioned, key=lambda t: (t[0], t[1]))]

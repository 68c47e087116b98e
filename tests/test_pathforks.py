"""Unknown branches explored from the branch (resolve/pathforks.py): a decision's other
outcome taken by a process forked there gives the Resolution re-running from the start
gives, bounds included, and no process outlives the resolution.

The fixture is mini_e2 with unknown branches (``numpy.*`` is outside the analysed tree)
at the start of ``ServerArgs.__post_init__``: a rejection on one side, a module only one
side imports (its file must be listed in ``files_read``), nested decisions."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

import sglang_audit.resolve.pathforks as pathforks
from sglang_audit.frontend.parse import SourceCache
from sglang_audit.resolve import pipeline
from sglang_audit.resolve.resolver import Resolver

ROOT = Path(__file__).resolve().parent.parent
MINI_E2 = ROOT / "fixtures" / "checkouts" / "mini_e2"

BRANCHES = '''
import numpy


def _branches(self):
    if numpy.reject:
        raise ValueError("rejected on this side")
    if numpy.a:
        self.moe_runner_backend = "triton"
        if numpy.b:
            self.fp4_gemm_runner_backend = "flashinfer_cutlass"
    else:
        from sglang.srt.only_one_side import CHOICE

        self.moe_runner_backend = CHOICE
    for i, name in enumerate(["c", "d"]):
        if getattr(numpy, name):
            self.tp_size += i + 1
'''

pytestmark = pytest.mark.skipif(not pathforks.can_fork_paths(), reason="no fork on this platform")


REAL_FORK_MIN_STEPS = pathforks.FORK_MIN_STEPS


@pytest.fixture(autouse=True)
def fork_at_every_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The branches here come early in their paths, where a resolution re-runs them
    (FORK_MIN_STEPS); these tests are about the forks, so they fork there."""
    monkeypatch.setattr(pathforks, "FORK_MIN_STEPS", 0)


def _counting_forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    forks: list[int] = []
    real_fork = os.fork

    def counting_fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(pathforks.os, "fork", counting_fork)
    return forks


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pathforks") / "checkout"
    shutil.copytree(MINI_E2, root)
    srt = root / "python" / "sglang" / "srt"
    (srt / "only_one_side.py").write_text('CHOICE = "flashinfer_trtllm"\n')
    server_args = srt / "server_args.py"
    text = server_args.read_text()
    text = text.replace("@dataclasses.dataclass\nclass ServerArgs:", BRANCHES + "\n\n@dataclasses.dataclass\nclass ServerArgs:", 1)
    text = text.replace("    def __post_init__(self):\n", "    def __post_init__(self):\n        _branches(self)\n", 1)
    assert "_branches(self)\n" in text
    server_args.write_text(text)
    return root


def _target(checkout: Path, cache: SourceCache) -> pipeline.Target:
    request = pipeline.Request(source=str(checkout), arch="sm100", model="deepseek-r1-nvfp4", use_cache=False)
    return pipeline.prepare(request, cache).target


def _json(res) -> str:
    return json.dumps(res.to_json(), sort_keys=True, default=str)


def _both(checkout: Path, **kw) -> tuple[object, object]:
    """Re-running first, so the forked resolution finds every file parsed (a child whose
    parent parsed after forking it is not resumed: test_a_cold_cache_reruns_...)."""
    cache = SourceCache(use_disk=False)
    target = _target(checkout, cache)
    rerun = Resolver(target, cache, fork_paths=False, **kw).resolve()
    forked = Resolver(target, cache, fork_paths=True, **kw).resolve()
    return forked, rerun


@pytest.fixture()
def resumes(monkeypatch: pytest.MonkeyPatch, process_log) -> object:
    """The children resumed at their branch, by whichever process resumed them (a resumed
    child resumes its own): the rest were re-run or stopped."""
    real = pathforks._Waiting.resume

    def resume(self, budget):
        process_log.append(self.pid)
        return real(self, budget)

    monkeypatch.setattr(pathforks._Waiting, "resume", resume)
    return process_log


def _no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)  # a child, running or ended, means one was left
    except ChildProcessError:
        return True
    return False


def test_forked_exploration_equals_rerunning_every_path(checkout: Path, resumes) -> None:
    forked, rerun = _both(checkout)
    assert len(resumes) == forked.paths - 1  # every other outcome taken from its branch
    # reject (1 path) + a: 2 (b) x 4 (c, d) + not a: 4, in the re-running loop's order
    assert forked.paths == rerun.paths == 13
    assert _json(forked) == _json(rerun)
    moe = forked.settings["moe_runner_backend"]
    assert moe.status == "unknown"
    shown = {c.value for c in moe.config.candidates}
    assert {"triton", "flashinfer_trtllm"} <= shown
    assert any("rejected on this side" in c.value for c in moe.config.candidates)
    # the module only the other side of numpy.a imports is listed as read
    files = {rel for rel, _sha in forked.files_read}
    assert "sglang/srt/only_one_side.py" in files
    assert forked.files_read == rerun.files_read
    assert _no_children_left()


def test_a_cold_cache_reruns_what_was_parsed_after_the_fork(checkout: Path, resumes) -> None:
    # nothing parsed yet: the first path parses every file after its first branch, so its
    # children are stopped and their paths re-run here (the IR now in memory); the decisions
    # those re-runs meet are taken from their branches
    cache = SourceCache(use_disk=False)
    target = _target(checkout, cache)
    parsed_before = cache.parse_count
    forked = Resolver(target, cache, fork_paths=True).resolve()
    rerun = Resolver(target, SourceCache(use_disk=False), fork_paths=False).resolve()
    assert _json(forked) == _json(rerun)
    assert cache.parse_count > parsed_before
    assert 0 < len(resumes) < forked.paths - 1
    assert _no_children_left()


def test_the_path_bound_stops_both_alike(checkout: Path) -> None:
    forked, rerun = _both(checkout, max_paths=5)
    assert forked.paths == rerun.paths == 5
    assert any("more than 5 paths" in n for n in forked.analysis_notes)
    assert _json(forked) == _json(rerun)
    assert _no_children_left()  # the children waiting past the bound were stopped


def test_the_step_bound_stops_both_alike(checkout: Path) -> None:
    from sglang_audit.evaluate.bounds import Bounds

    cache = SourceCache(use_disk=False)
    target = _target(checkout, cache)
    one_path = Resolver(target, cache, fork_paths=False, max_paths=1)
    one_path.resolve()
    # room for about four paths' steps in all: the total-steps bound (2 x max_steps) ends it
    bounds = Bounds(max_steps=one_path.steps_used * 2)
    rerun = Resolver(target, cache, fork_paths=False, bounds=bounds).resolve()
    forked = Resolver(target, cache, fork_paths=True, bounds=bounds).resolve()
    assert 1 < forked.paths < 13
    assert _json(forked) == _json(rerun)
    assert _no_children_left()


def test_with_one_waiting_child_at_a_time_the_rest_is_rerun(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pathforks, "MAX_WAITING", 1)
    forks = _counting_forks(monkeypatch)
    forked, rerun = _both(checkout)
    assert _json(forked) == _json(rerun)
    assert 0 < len(forks) < forked.paths - 1  # some outcomes forked, the others re-run
    assert _no_children_left()


def test_a_child_that_dies_is_replaced_by_rerunning_its_path(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_resume = pathforks._Waiting.resume
    killed: list[int] = []

    def kill_then_resume(self, budget):
        if len(killed) < 2:  # two of them die before their turn
            os.kill(self.pid, signal.SIGKILL)
            killed.append(self.pid)
        return real_resume(self, budget)

    monkeypatch.setattr(pathforks._Waiting, "resume", kill_then_resume)
    forked, rerun = _both(checkout)
    assert len(killed) == 2
    assert _json(forked) == _json(rerun)
    assert _no_children_left()


def test_an_error_on_a_forked_path_is_raised_in_the_resolution(checkout: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 resumes) -> None:
    # strict mode (conftest): an evaluator defect fails the resolution; on a path a child
    # took, the same error class and message reach the caller, as re-running raises them
    real = Resolver.read_config

    def broken_on_other_sides(self, interp, server_args, result):
        if any(v is False for k, v in interp.decisions.items() if "reject" not in k):
            raise KeyError("defect met on another side")
        return real(self, interp, server_args, result)

    monkeypatch.setattr(Resolver, "read_config", broken_on_other_sides)
    cache = SourceCache(use_disk=False)
    target = _target(checkout, cache)
    with pytest.raises(KeyError, match="defect met on another side"):
        Resolver(target, cache, fork_paths=False).resolve()
    with pytest.raises(KeyError, match="defect met on another side"):
        Resolver(target, cache, fork_paths=True).resolve()
    assert len(resumes)  # raised in a child, revived here
    assert _no_children_left()


@pytest.mark.real_release
@pytest.mark.parametrize("version, arch, model, sets", [
    # 0.5.9: three paths on SM120 (Qwen3.5 NVFP4) while the cuDNN version its torch-2.9.1 check
    # reads is unknown (SGLang's image: the pip profile would pin it); 0.5.23 on ROCm: two
    # (whether the image's flash_attn is the full package, hf_transformers_patches.py)
    ("0.5.9", "sm120", "qwen3.5-397b-a17b-nvfp4", ["tp_size=8"]),
    ("0.5.23", "gfx942", str(ROOT / "tests" / "field" / "models" / "granite-4.0-h-tiny"), ["attention_backend=triton"]),
])
def test_real_releases_forked_equal_rerun(release, version, arch, model, sets) -> None:
    tree = release(version)
    cache = SourceCache(use_disk=True)
    request = pipeline.Request(source=str(tree.package_dir), arch=arch, use_cache=False, flashinfer_source="none",
                               model=model, sets=sets, env_profile="image")
    target = pipeline.prepare(request, cache).target
    rerun = Resolver(target, cache, fork_paths=False).resolve()
    forked = Resolver(target, cache, fork_paths=True).resolve()
    assert forked.paths == rerun.paths > 1
    assert _json(forked) == _json(rerun)
    assert _no_children_left()


def test_a_branch_early_in_its_path_is_rerun_not_forked(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every branch of the fixture is a few hundred steps in: re-running costs less than a fork
    monkeypatch.setattr(pathforks, "FORK_MIN_STEPS", REAL_FORK_MIN_STEPS)
    forks = _counting_forks(monkeypatch)
    forked, rerun = _both(checkout)
    assert forks == []
    assert forked.paths == rerun.paths == 13
    assert _json(forked) == _json(rerun)


def test_only_branches_past_the_threshold_are_forked(checkout: Path, monkeypatch: pytest.MonkeyPatch, resumes) -> None:
    met: list[int] = []
    real_at = pathforks.PathForks.at_decision

    def recording(self, interp, decision):
        met.append(interp.steps)
        return real_at(self, interp, decision)

    monkeypatch.setattr(pathforks.PathForks, "at_decision", recording)
    _both(checkout)
    every = len(resumes)
    assert every == 12  # 13 paths, each other outcome taken from its branch
    first_paths_steps = sorted(set(met))
    # the first path's first branch (numpy.reject) is re-run, the later ones are forked
    monkeypatch.setattr(pathforks, "FORK_MIN_STEPS", first_paths_steps[0] + 1)
    forked, rerun = _both(checkout)
    assert 0 < len(resumes) - every < every
    assert _json(forked) == _json(rerun)
    assert _no_children_left()


def _fork_setting(target: pipeline.Target) -> bool:
    return Resolver(target, SourceCache(use_disk=False)).fork_paths


def test_batch_workers_do_not_fork_paths(checkout: Path) -> None:
    from sglang_audit.resolve.workers import can_fork, run_all

    if not can_fork():
        pytest.skip("no forked workers on this platform")
    target = _target(checkout, SourceCache(use_disk=False))
    assert _fork_setting(target) is True  # a resolution of its own
    assert run_all(_fork_setting, [target, target], jobs=2) == [False, False]

"""Format-only checks of the held-out set (tests/field/heldout/, issue 44).

Fast and offline: every case and known-good file parses and has the required fields, a source
and a category; no held-out case cites a thread opened before the cutoff or one a rule or an
in-sample case cites; the known-good set has at least 40 deployments. Nothing is run through the
tool here (tests/field/heldout/measure.py does that). A failure names the file only, never its
content: the held-out reports are not for rule authors' eyes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HELDOUT = Path(__file__).resolve().parent / "field" / "heldout"


def _measure():
    spec = importlib.util.spec_from_file_location("heldout_measure", HELDOUT / "measure.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["heldout_measure"] = module
    spec.loader.exec_module(module)
    return module


M = _measure()
CASE_FILES = sorted((HELDOUT / "cases").glob("*.yaml"))
GOOD_FILES = sorted((HELDOUT / "known_good").glob("*.yaml"))


def _load(loader, path: Path, *args):
    try:
        return loader(path, *args)
    except M.CaseError as e:  # the message names the file and the rule broken, not the content
        pytest.fail(str(e), pytrace=False)
    except Exception as e:  # a YAML error would quote the file: say only which file
        pytest.fail(f"{path.name}: does not parse ({type(e).__name__})", pytrace=False)


@pytest.fixture(scope="module")
def cited() -> set[str]:
    return M.contaminated()


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_case_format(path: Path, cited: set[str]) -> None:
    case = _load(M.load_case, path, cited)  # held out, not contaminated, kind, category, cause
    assert case.category in M.CATEGORIES, path.name
    assert case.version.startswith("0.5."), f"{path.name}: checked release must be a 0.5.x release"
    assert (HELDOUT / "models" / case.model).is_dir() or Path(case.model_spec).is_dir(), \
        f"{path.name}: model config not found"


@pytest.mark.parametrize("path", GOOD_FILES, ids=[p.stem for p in GOOD_FILES])
def test_known_good_format(path: Path) -> None:
    case = _load(M.load_known_good, path)
    assert case.version.startswith("0.5."), f"{path.name}: checked release must be a 0.5.x release"
    assert Path(case.model_spec).is_dir(), f"{path.name}: model config not found"


def test_known_good_count_and_platforms() -> None:
    assert len(GOOD_FILES) >= 40
    archs = [_load(M.load_known_good, p).arch for p in GOOD_FILES]
    for needed in (("gfx942",), ("gfx950",), ("sm120", "sm121"), ("sm90",), ("sm100", "sm103")):
        assert any(a in needed for a in archs), f"no known-good deployment on {needed}"


def test_excluded_rows() -> None:
    try:
        rows = M.load_excluded()
    except M.CaseError as e:
        pytest.fail(str(e), pytrace=False)
    for thread, opened, reason in rows:
        if reason != "opening date undetermined":
            assert M.held_out(thread, opened), "excluded.tsv: a row is not held out"


def test_cutoff_rule() -> None:
    assert M.held_out("sgl-project/sglang#1", "2026-08-01")
    assert not M.held_out("sgl-project/sglang#1", "2026-07-31")
    assert M.held_out("sgl-project/sglang#33604", "unknown")
    assert not M.held_out("sgl-project/sglang#33603", "unknown")
    assert not M.held_out("other/repo#99999", "unknown")


def test_a_held_out_model_named_outside_the_set_contaminates_its_cases(tmp_path, monkeypatch) -> None:
    # a held-out model directory copied into a fixture (or named in code, docs or tests) was
    # seen while writing them: its cases are left out of the figures, mechanically
    here = tmp_path / "tests" / "field" / "heldout"
    (here / "models" / "seen-model").mkdir(parents=True)
    (here / "models" / "unseen-model").mkdir()
    (here / "cases").mkdir()
    (here / "cases" / "c.yaml").write_text("model: seen-model and unseen-model\n", encoding="utf-8")  # inside: no effect
    (tmp_path / "tests" / "data").mkdir()
    (tmp_path / "tests" / "data" / "README.md").write_text("config.json is heldout/models/seen-model's\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()  # the same name as a bundled profile's, not the held-out copy: no effect
    (tmp_path / "docs" / "x.md").write_text("the unseen-model profile\n", encoding="utf-8")
    monkeypatch.setattr(M, "HERE", here)
    monkeypatch.setattr(M, "ROOT", tmp_path)
    assert M.models_used_outside() == {"seen-model"}

    class C:
        def __init__(self, model: str) -> None:
            self.model = model

    kept, dropped = M.drop_model_contaminated([C("seen-model"), C("unseen-model")])
    assert [c.model for c in kept] == ["unseen-model"] and dropped == 1

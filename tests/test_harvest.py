"""scripts/harvest.py: the committed issue-harvest ledger validates, and small bad ledgers give
one one-line error naming the row (a bad outcome, a post-CUTOFF thread, a missing rule id)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import harvest  # noqa: E402

CUTOFF = "2026-08-01"
RULES = {"SGA101", "SGA201"}
QUERIES = {"Q001", "Q002"}
HEADER = list(harvest.COLUMNS)


def _row(thread="sgl-project/sglang#100", opened="2026-01-02", outcome="candidate-rule",
         note="kernel X asserts on sm120", query_ids="Q001"):
    return [thread, opened, "a title", query_ids, "sm120", "moe:flashinfer_trtllm", "0.5.10",
            "-", outcome, note]


def _errors(*rows, heldout=None):
    return harvest.validate([HEADER, *rows], CUTOFF, RULES, QUERIES, heldout)


def test_committed_ledger_validates():
    cutoff, queries = harvest.load_queries()
    ledger = harvest.read_tsv(harvest.LEDGER)
    heldout = harvest.read_tsv(harvest.HELDOUT)
    errors = harvest.validate(ledger, cutoff, harvest.rule_ids(), set(queries), heldout)
    assert errors == []
    assert len(ledger) - 1 >= 150
    assert cutoff == CUTOFF


def test_committed_files_via_cli(capsys):
    assert harvest.main([]) == 0
    out = capsys.readouterr().out
    assert "by outcome kind" in out and f"CUTOFF {CUTOFF}" in out


def test_good_rows_pass():
    assert _errors(_row(), _row("flashinfer-ai/flashinfer#7", outcome="rule:SGA101"),
                   _row("sgl-project/sglang#101", outcome="covered-by-evaluation:moe-layers"),
                   _row("sgl-project/sglang#102", outcome="out-of-scope:performance"),
                   _row("sgl-project/sglang#103", outcome="not-reproducible-from-code")) == []


@pytest.mark.parametrize("outcome", ["maybe-rule", "covered-by-evaluation:vibes",
                                     "out-of-scope:", "candidate-rule:x"])
def test_bad_outcome_is_one_line_naming_the_row(outcome):
    errors = _errors(_row(), _row("sgl-project/sglang#200", outcome=outcome))
    assert len(errors) == 1
    assert "\n" not in errors[0]
    assert errors[0].startswith("ledger.tsv:3: sgl-project/sglang#200:")
    assert "outcome" in errors[0]


def test_post_cutoff_thread_is_rejected():
    errors = _errors(_row(), _row("sgl-project/sglang#300", opened="2026-08-01"))
    assert len(errors) == 1
    assert errors[0].startswith("ledger.tsv:3: sgl-project/sglang#300:")
    assert "CUTOFF" in errors[0]


def test_missing_rule_id_is_rejected():
    errors = _errors(_row("sgl-project/sglang#400", outcome="rule:SGA999"))
    assert len(errors) == 1
    assert errors[0].startswith("ledger.tsv:2: sgl-project/sglang#400:")
    assert "SGA999" in errors[0]


def test_duplicate_and_bad_date_and_unknown_query():
    assert "duplicate" in _errors(_row(), _row())[0]
    assert "YYYY-MM-DD" in _errors(_row(opened="2026-02-30"))[0]
    assert "Q999" in _errors(_row(query_ids="Q001,Q999"))[0]


def test_unknown_date_is_placed_by_number_or_earliest_post():
    dated = _row("sgl-project/sglang#500", opened="2026-07-30")
    assert _errors(dated, _row("sgl-project/sglang#499", opened="unknown")) == []
    late = _row("sgl-project/sglang#501", opened="unknown")
    errors = _errors(dated, late)
    assert len(errors) == 1 and "sgl-project/sglang#501" in errors[0]
    noted = _row("sgl-project/sglang#501", opened="unknown",
                 note="earliest post 2026-07-28; mechanism")
    assert _errors(dated, noted) == []


def test_heldout_file_checks():
    ledger = _row("sgl-project/sglang#600")
    ok = [["thread", "opened"], ["sgl-project/sglang#700", "2026-08-02"],
          ["sgl-project/sglang#701", "unknown"]]
    assert _errors(ledger, heldout=ok) == []
    read = [["thread", "opened"], ["sgl-project/sglang#600", "2026-08-02"]]
    assert "also in the ledger" in _errors(ledger, heldout=read)[0]
    early = [["thread", "opened"], ["sgl-project/sglang#702", "2026-07-02"]]
    assert "before the CUTOFF" in _errors(ledger, heldout=early)[0]
    # an undated held-out thread numbered below a dated pre-CUTOFF ledger thread is not after it
    low = [["thread", "opened"], ["sgl-project/sglang#599", "unknown"]]
    errors = _errors(ledger, heldout=low)
    assert len(errors) == 1 and errors[0].startswith("heldout-candidates.tsv:2: sgl-project/sglang#599:")


def test_bad_header_is_one_error():
    errors = harvest.validate([["thread", "opened"], _row()], CUTOFF, RULES, QUERIES)
    assert len(errors) == 1 and errors[0].startswith("ledger.tsv:1:")


def test_rule_ids_read_from_the_rule_files():
    ids = harvest.rule_ids()
    assert {"SGA101", "SGA201", "SGA551"} <= ids

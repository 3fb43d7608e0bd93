"""Files written before the guard's facts were codes keep working: a SQLite study and its
``best.json`` written by the code of d4d770e (``tests/data/d4d770e/make.py``: a simulated
search with a confirmed fast answer, an unresolved faster candidate and a lagging baseline
seed). ``show``, ``show --detail``, the report and ``verify`` read them; the sentences the
JSON stored are shown as stored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import autotune
from autotune._cli import main
from autotune._guard.confirmation import Confirmation, NoBound, Reason, Verdict
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET

OLD = Path(__file__).resolve().parent / "data" / "d4d770e"
SETTLE = (
    "the paired differences vary by ±0.0137 (mean paired drop +0.0041, 4 better by more "
    "than the tolerance counted at it): 39 seeds would confirm a harmless change at this "
    "spread 80% of the time (--accuracy-repeats 39 / SearchOptions(accuracy_repeats=39))"
)


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the old files (the study is opened for writing by Optuna)."""
    for name in ("study.db", "best.json"):
        shutil.copy(OLD / name, tmp_path / name)
    return tmp_path


def test_an_old_confirmation_reads_its_sentences_as_codes_or_as_stored() -> None:
    data = json.loads((OLD / "best.json").read_text())
    pending = data["answers"]["pending"]["confirmation"]
    c = Confirmation.from_dict(pending)
    assert c.verdict is Verdict.UNRESOLVED and c.settle is None
    assert c.stored_settle is not None and c.stored_settle.startswith(SETTLE)
    assert Confirmation.from_dict({**pending, "bound": None, "no_bound": "one seed"}).no_bound is (
        NoBound.ONE_SEED
    )
    again = Confirmation.from_dict(c.to_dict())
    assert again.stored_settle == c.stored_settle  # kept through the codec


def test_show_and_detail_render_an_old_result(old: Path, capsys) -> None:
    assert main(["show", str(old / "best.json")]) == 0
    short = capsys.readouterr().out
    assert short.startswith("autotune result:")
    assert all(len(line) <= 120 for line in short.splitlines())
    assert main(["show", str(old / "best.json"), "--detail"]) == 0
    detail = capsys.readouterr().out
    assert SETTLE in detail  # the stored sentence, shown as stored
    assert "seed 3 reached accuracy 0.7600" in detail  # the lagging baseline seed


def test_the_report_of_an_old_study_derives_its_facts_again(old: Path) -> None:
    """The study's checks are judged again as they are read, so the old study's pending check
    carries a reason code, and the report says what would settle it from that code."""
    result = autotune.SearchResult.from_study(f"sqlite:///{old / 'study.db'}", "old")
    assert result.pending is not None and result.pending.confirmation is not None
    settle = result.pending.confirmation.settle
    assert settle is not None and settle.reason is Reason.CONFIRM and settle.need == 39
    page = result.report(old / "report.html").read_text()
    assert "39 seeds would confirm a harmless change" in page


def test_verify_reads_an_old_result(old: Path) -> None:
    report = autotune.verify(
        old / "best.json", tiny_model(), tiny_data(), rounds=1, budget=FAST_BUDGET
    )
    assert len(report.throughput_ratios) == 1
    assert report.recorded_speedup == json.loads((OLD / "best.json").read_text())["speedup"]
    assert report.winner.batch_size == 64 and report.baseline.batch_size == 32
    assert "winner:" in report.summary()

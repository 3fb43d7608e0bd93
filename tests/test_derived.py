"""The derived figures, each computed in one place: the speedup, the side-by-side speedup, how a
speedup is written, and the accuracy verdict's words."""

from __future__ import annotations

import math

import pytest

from autotune._guard.confirmation import Confirmation, Verdict
from autotune._search.derived import accuracy_verdict, format_speedup, side_by_side, speedup
from autotune._search.ranking import rank_time


@pytest.mark.parametrize(
    ("baseline_time", "time", "expected"),
    [(200.0, 100.0, 2.0), (100.0, 125.0, 0.8), (None, 100.0, None), (200.0, None, None),
     (0.0, 100.0, None), (200.0, 0.0, None)],
)  # fmt: skip
def test_speedup_is_the_baseline_time_over_the_config_time(baseline_time, time, expected) -> None:
    assert speedup(baseline_time, time) == expected


def test_the_side_by_side_speedup_needs_two_rounds_and_is_their_median() -> None:
    assert side_by_side([]) is None
    assert side_by_side([1.5]) is None  # one round is one draw
    assert side_by_side([1.4, 1.2, 1.5]) == (1.4, 1.2, 1.5)
    # Of an even number, the lower middle: a round whose baseline a burst of load slowed
    # lifts its ratio, and two rounds' mean followed it (2.79x for a 1.03x config).
    assert side_by_side([4.62, 0.96]) == (0.96, 0.96, 4.62)
    assert side_by_side([1.5, 1.7, 1.2, 1.6]) == (1.5, 1.2, 1.7)


def test_a_speedup_is_written_one_way() -> None:
    assert format_speedup(2.0) == "2.00x"
    assert format_speedup(1.0 / 3.0) == "0.33x"
    assert format_speedup(None) == "n/a"


def _confirmation(verdict: Verdict) -> Confirmation:
    return Confirmation(trial=3, verdict=verdict, runs=(0.9, 0.91), tolerance=0.01)


@pytest.mark.parametrize(
    ("confirmation", "screened", "expected"),
    [
        (_confirmation(Verdict.CONFIRMED), True, "confirmed"),
        (_confirmation(Verdict.REJECTED), True, "rejected"),
        (_confirmation(Verdict.UNRESOLVED), True, "unresolved"),
        (None, True, "passed screening"),
        (None, False, "outside tolerance"),
        (None, None, None),  # the baseline's numerics, or no accuracy run
    ],
)
def test_the_accuracy_verdict_is_the_confirmation_s_else_the_screening_s(
    confirmation, screened, expected
) -> None:
    assert accuracy_verdict(confirmation, screened) == expected


def test_a_missing_projected_time_ranks_last_never_first() -> None:
    assert rank_time(None) == math.inf
    assert rank_time(12.5) == 12.5
    assert sorted([None, 3.0, 1.0], key=rank_time) == [1.0, 3.0, None]

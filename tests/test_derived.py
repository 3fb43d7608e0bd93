"""The derived figures, each computed in one place: the speedup, the side-by-side speedup, how a
speedup is written, and the accuracy verdict's words."""

from __future__ import annotations

import math

import pytest

from autotune._guard.confirmation import Confirmation, Verdict
from autotune._search.derived import (
    accuracy_verdict,
    format_speedup,
    round_interval,
    side_by_side,
    speedup,
)
from autotune._search.ranking import rank_time


@pytest.mark.parametrize(
    ("baseline_time", "time", "expected"),
    [(200.0, 100.0, 2.0), (100.0, 125.0, 0.8), (None, 100.0, None), (200.0, None, None),
     (0.0, 100.0, None), (200.0, 0.0, None)],
)  # fmt: skip
def test_speedup_is_the_baseline_time_over_the_config_time(baseline_time, time, expected) -> None:
    assert speedup(baseline_time, time) == expected


def test_the_side_by_side_speedup_needs_two_rounds_and_is_their_mean_log_ratio() -> None:
    assert side_by_side([]) is None
    assert side_by_side([1.5]) is None  # one round is one draw
    figure = side_by_side([1.4, 1.2, 1.5])
    assert figure == pytest.approx(((1.4 * 1.2 * 1.5) ** (1 / 3), 1.2, 1.5))
    # A round whose baseline a burst of load slowed lifts its ratio: two such rounds leave an
    # interval far too wide to show any gain (2.11x, 95% from far below 1).
    burst = round_interval([4.62, 0.96])
    assert burst is not None and burst.estimate == pytest.approx(2.106, abs=1e-3)
    assert burst.low < 0.01 and not burst.above_one
    # Four consistent rounds show it: 1.52x, 95% interval 1.39-1.66x.
    steady = round_interval([1.5, 1.6, 1.45, 1.55])
    assert steady is not None and steady.above_one
    shown = (steady.estimate, steady.low, steady.high)
    assert shown == pytest.approx((1.524, 1.395, 1.665), abs=1e-3)


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

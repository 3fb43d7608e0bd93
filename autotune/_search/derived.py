"""The figures a search derives and every output shows, each computed in one place: the
search's progress lines, the result's JSON, the summary, the HTML report and ``verify`` call
these rather than computing them again."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from autotune._guard.confirmation import Confirmation

__all__ = [
    "MIN_ROUNDS",
    "accuracy_verdict",
    "format_speedup",
    "round_speedup",
    "side_by_side",
    "speedup",
]

MIN_ROUNDS = 2  # side-by-side rounds that make a measured speedup (one round is one draw)


def speedup(baseline_time: float | None, time: float | None) -> float | None:
    """How many times faster than the baseline a config trains: the baseline's projected
    training time over the config's (a trial's, or a round's measured side by side). None
    where either is unknown."""
    if not baseline_time or not time:
        return None
    return baseline_time / time


def round_speedup(speedups: Sequence[float]) -> float | None:
    """The speedup a set of side-by-side rounds measured, for the search and ``verify`` alike:
    the median of the rounds' ratios, of an even number the lower middle one (None: no rounds).

    A round whose baseline measurement a burst of load slowed lifts every ratio in it, and the
    mean of two rounds' ratios follows it. Where two rounds disagree, the claim rests on the
    smaller."""
    return float(statistics.median_low(speedups)) if speedups else None


def side_by_side(speedups: Sequence[float]) -> tuple[float, float, float] | None:
    """The speedup measured side by side (:func:`round_speedup`), and the lowest and the
    highest round's; None with fewer than :data:`MIN_ROUNDS` rounds."""
    median = round_speedup(speedups)
    if len(speedups) < MIN_ROUNDS or median is None:
        return None
    return median, min(speedups), max(speedups)


def format_speedup(value: float | None) -> str:
    """A speedup as every output writes it: ``1.23x``, or ``n/a`` where it is unknown."""
    return "n/a" if value is None else f"{value:.2f}x"


def accuracy_verdict(confirmation: Confirmation | None, screened: bool | None) -> str | None:
    """What a trial's accuracy check says so far: its confirmation's verdict, else its
    screening's ("passed screening", "outside tolerance"); None where it had no check (its
    numerics are the baseline's, or it had no accuracy run)."""
    if confirmation is not None:
        return confirmation.verdict.value
    if screened is None:
        return None
    return "passed screening" if screened else "outside tolerance"

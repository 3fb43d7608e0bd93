"""The figures a search derives and every output shows, each computed in one place: the
search's progress lines, the result's JSON, the summary, the HTML report and ``verify`` call
these rather than computing them again."""

from __future__ import annotations

import math
from collections.abc import Sequence

from autotune._guard.confirmation import Confirmation
from autotune._speed import stats
from autotune._speed.stats import Interval, Noise

__all__ = [
    "MIN_ROUNDS",
    "accuracy_verdict",
    "format_speedup",
    "round_interval",
    "round_speedup",
    "side_by_side",
    "speedup",
]

MIN_ROUNDS = stats.MIN_ROUNDS  # side-by-side rounds that make a measured speedup


def speedup(baseline_time: float | None, time: float | None) -> float | None:
    """How many times faster than the baseline a config trains: the baseline's projected
    training time over the config's (a trial's, or a round's measured side by side). None
    where either is unknown."""
    if not baseline_time or not time:
        return None
    return baseline_time / time


def round_interval(
    speedups: Sequence[float], *, looks: int | None = None, pooled: Noise | None = None
) -> Interval | None:
    """The speedup a set of side-by-side rounds measured (each round's baseline time over the
    config's), with its 95% interval, for the search, the result and ``verify`` alike: a t
    interval on the rounds' log-ratios (:func:`autotune._speed.stats.interval`), the error rate
    shared by the ``looks`` at which the rounds could have stopped (the search's
    :data:`~autotune._speed.stats.LOOKS` by default; ``verify``'s fixed rounds: one), its
    spread the ``pooled`` noise of the rounds (:func:`autotune._speed.stats.noise`) where
    given, else the rounds' own. None with fewer than :data:`MIN_ROUNDS` rounds."""
    logs = [math.log(s) for s in speedups if s > 0]
    contenders = 1 if pooled is None else pooled.contenders
    alpha = stats.round_alpha(len(logs), looks=looks, contenders=contenders)
    return stats.interval(logs, alpha, pooled)


def round_speedup(speedups: Sequence[float]) -> float | None:
    """The speedup of :func:`round_interval` (one round's own ratio; None: no rounds)."""
    figure = round_interval(speedups)
    if figure is not None:
        return figure.estimate
    return float(speedups[0]) if len(speedups) == 1 else None


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

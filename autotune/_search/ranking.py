"""Ranking, as pure functions: a trial's time is the median of its measurements, its noise their
range, between configs whose difference is within that noise the simpler one wins, and a trial
without a projected time ranks last."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = [
    "MAX_NOISE",
    "TIE",
    "best",
    "median_time",
    "rank_time",
    "relative_noise",
]

TIE = 0.03  # relative difference below which two configs count as equally fast (at least)
MAX_NOISE = 0.25  # a wild outlier must not make every config "equal"

T = TypeVar("T")


def median_time(times: Sequence[float]) -> float:
    """A trial's projected time as ranked: the median of its measurement and re-measurements."""
    return float(statistics.median(times))


def rank_time(projected: float | None) -> float:
    """A projected time as ranked: a missing one (the trial failed, or was not measured)
    ranks last, never first."""
    return math.inf if projected is None else float(projected)


def relative_noise(times: Sequence[float]) -> float:
    """The range of repeated measurements over their median, at least :data:`TIE` and at most
    :data:`MAX_NOISE`."""
    between = (max(times) - min(times)) / statistics.median(times) if len(times) > 1 else 0.0
    return min(MAX_NOISE, max(TIE, between))


def best(
    items: Sequence[T],
    *,
    time: Callable[[T], float],
    noise: Callable[[T], float],
    complexity: Callable[[T], tuple[float, ...]],
    settled: Callable[[T], bool] = lambda item: False,
) -> T | None:
    """The fastest item; between it and items within its noise of it, one that was
    ``settled`` (measured again side by side: its speedup is a measured one, not a single
    draw that may have been lucky), then the simplest, then the faster. None when ``items``
    is empty. The fastest's noise alone: a slower config drawn twice far apart is not made as
    fast as one drawn once by its own spread (it would then win as the simpler, and the search
    build on it)."""
    if not items:
        return None
    fastest = min(items, key=time)
    floor = time(fastest)
    equals = [i for i in items if time(i) <= floor * (1 + noise(fastest))]
    return min(equals, key=lambda i: (not settled(i), complexity(i), time(i)))

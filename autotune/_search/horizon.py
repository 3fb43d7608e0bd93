"""The accuracy runs' horizon, chosen by what a second of runs tells.

A check at horizon ``h`` (samples per accuracy run) costs about ``pairs(h) x 2 x run(h)``
seconds: ``run(h)`` grows with ``h``, while ``pairs(h)``, the pairs a harmless change needs to
be confirmed, follows the spread of runs at ``h``. Early in training, runs that differ only in
their random draws (and a change's pairs) spread widely, and on some tasks some data orders
have not yet taken off; that spread shrinks as training goes on. Where it shrinks faster
than the cost rises (the variance more than halves when the horizon doubles), a longer
horizon settles checks in fewer seconds, and a few pairs there say more than many here.

The baseline's own runs measure that: each validates halfway too (where that is a run of half
the samples: a constant rate without warm-up), so its seed-to-seed spread is known at ``h``
and ``h / 2`` for one more validation pass per run. The plan projects the spread at ``2 h`` by
the same ratio (the variance falling at most 4-fold per doubling, and never rising), prices a
check at each horizon, and the search lengthens the baseline's runs where the longer horizon
is expected to cost less; there its runs measure the spread again (their halfway point is the
old horizon), and the plan is made anew. It never shortens below the planned horizon, where
the baseline has learned the task.

What it assumes, and why that is safe: a change's pairs vary by the baseline's spread times
``sqrt(2)`` (two runs that share nothing but the data order and the initial weights), which
overstates the pairs of a change that hardly moves training (bf16 on most models) and so errs
toward the horizon the search would have used anyway; and that the spread goes on falling as
it fell from ``h / 2`` to ``h`` (at most 4-fold), which it need not (a constant rate on a
plateau), so a doubling can fail to pay: that costs time, never soundness. The horizon
chooses only *where* the guard measures; the test at that horizon, and its error rate, are
the guard's own.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from autotune._search.guard import (
    FIRST_PAIR,
    MAX_NEED,
    AccuracyGuard,
    look_alpha,
    question_runs,
    t_quantile,
)
from autotune._trial.outcome import AccuracyRun

__all__ = ["MAX_DECAY", "HorizonPlan", "longer_reason", "pairs_to_confirm", "plan_horizon"]

# The most a doubling of the horizon is projected to divide the variance by. Measured spreads
# do not keep falling: the ResNet's baseline varied by ±0.043 halfway, ±0.005 at 3 epochs and
# ±0.013 at 6 (a constant rate on a plateau), so a steep first fall is not extrapolated.
MAX_DECAY = 4.0


def pairs_to_confirm(spread: float, tolerance: float, least: int) -> int | None:
    """The pairs with which a change whose true drop is zero, its pairs varying by
    ``spread`` (std), is confirmed at the first look of a study's first check (at least
    ``least``); None beyond :data:`MAX_NEED`."""
    if spread <= 0.0:
        return least
    alpha = look_alpha(1, 1)

    def enough(m: int) -> bool:
        return t_quantile(1.0 - alpha, m - 1) * spread / math.sqrt(m) < tolerance

    if not enough(MAX_NEED):
        return None
    lo = max(2, least)
    if enough(lo):
        return lo
    hi = MAX_NEED
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@dataclasses.dataclass(frozen=True, kw_only=True)
class HorizonPlan:
    """The baseline's runs at ``samples`` priced against twice as long (``longer``)."""

    samples: int
    spread: float  # the baseline's seed-to-seed spread (std) at ``samples``
    half_spread: float | None  # ... at half of it (None: not measured)
    run_seconds: float  # one accuracy run at ``samples``
    pairs: int | None  # pairs a harmless change needs at ``samples`` (None: beyond reach)
    seconds: float  # a harmless change's check at ``samples`` (inf: beyond reach)
    longer: int  # the next horizon (0: none, the planned run reached)
    longer_spread: float | None  # projected
    longer_pairs: int | None
    longer_seconds: float  # its check, the baseline's runs at it included (inf: none)
    least_longer_seconds: float  # the least check there: the baseline's runs and as many pairs
    left: float | None = None  # seconds the search has left for checks (None: no time budget)

    @property
    def reason(self) -> str | None:
        """Why the longer horizon is the better place to check, or None: it is expected to
        settle a check in fewer seconds; or, with no spread halfway to project from, a check
        that moves training cannot be settled here in the time left while the least check
        there fits (only there can it be)."""
        if self.longer <= self.samples:
            return None
        if self.longer_seconds < self.seconds:
            return "a check is expected to settle sooner there"
        if (
            self.longer_spread is None
            and self.left is not None
            and self.seconds > self.left
            and self.least_longer_seconds <= self.left
        ):
            return (
                "a change that moves training cannot be settled here in the time left "
                f"(~{self.left:.0f} s), and the least check there fits"
            )
        return None

    @property
    def short_by(self) -> float | None:
        """How many seconds more than the search has left for checks a harmless change's
        check at this horizon is expected to take (inf: beyond reach here); None where it
        fits, or with no time budget."""
        if self.left is None or self.seconds <= self.left:
            return None
        return self.seconds - self.left

    @property
    def lengthen(self) -> bool:
        return self.reason is not None

    def describe(self) -> str:
        def check(pairs: int | None, seconds: float) -> str:
            if pairs is None:
                return f"more than {MAX_NEED:,} pairs"
            return f"{pairs} pairs, ~{seconds:.0f} s"

        text = f"runs of {self.samples:,} samples vary by ±{self.spread:.4f}"
        if self.half_spread is not None:
            text += f" (±{self.half_spread:.4f} at {self.samples // 2:,})"
        text += f"; a harmless change's check: {check(self.pairs, self.seconds)}"
        if self.longer <= self.samples:
            return text + " (the planned run's length: no longer horizon)"
        if self.longer_spread is None:
            text += f"; at {self.longer:,} samples: not projected (no halfway spread)"
        else:
            text += (
                f"; at {self.longer:,} samples (±{self.longer_spread:.4f} projected): "
                f"{check(self.longer_pairs, self.longer_seconds)} with the baseline's runs there"
            )
        return text + (f": lengthen, {self.reason}" if self.reason else ": keep it")


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def plan_horizon(
    runs: Sequence[AccuracyRun],
    *,
    samples: int,
    limit: int,
    tolerance: float,
    run_seconds: float,
    left: float | None = None,
) -> HorizonPlan:
    """The plan at ``samples`` from the baseline's ``runs`` there (with their halfway
    metrics, where measured), the horizon at most ``limit`` samples (the planned run), with
    ``left`` seconds for checks (None: no time budget)."""
    repeats = max(2, len(runs))
    spread = _spread([r.metric for r in runs])
    halves = [r.midpoint for r in runs]
    half_spread = _spread([h for h in halves if h is not None]) if None not in halves else None
    pairs = pairs_to_confirm(math.sqrt(2.0) * spread, tolerance, repeats)
    # The baseline's runs at this horizon are bought; a check is the candidate's screening
    # run, its pairs after it, and the baseline's runs of the seeds it has none of.
    seconds = (
        math.inf
        if pairs is None
        else run_seconds * (FIRST_PAIR + pairs + max(0, FIRST_PAIR + pairs - len(runs)))
    )
    longer = min(2 * samples, limit)
    longer_spread: float | None = None
    longer_pairs: int | None = None
    longer_seconds = math.inf
    if longer > samples and half_spread is not None and len(runs) > 1:
        ratio = 1.0 if half_spread <= 0.0 else min(1.0, (spread / half_spread) ** 2)
        ratio = max(ratio, 1.0 / MAX_DECAY)
        longer_spread = spread * math.sqrt(ratio)
        longer_pairs = pairs_to_confirm(math.sqrt(2.0) * longer_spread, tolerance, repeats)
        if longer_pairs is not None:
            longer_seconds = 2 * (FIRST_PAIR + longer_pairs) * run_seconds * longer / samples
    return HorizonPlan(
        samples=samples,
        spread=spread,
        half_spread=half_spread,
        run_seconds=run_seconds,
        pairs=pairs,
        seconds=seconds,
        longer=longer,
        longer_spread=longer_spread,
        longer_pairs=longer_pairs,
        longer_seconds=longer_seconds,
        least_longer_seconds=question_runs(repeats) * run_seconds * longer / samples,
        left=left,
    )


def longer_reason(guard: AccuracyGuard, plan: HorizonPlan) -> str | None:
    """Why the baseline's runs should be made again at ``plan.longer`` samples, or None: it
    did not learn measurably (every check would compare untrained models), some of its seeds
    had not taken off where another had (:attr:`AccuracyGuard.lagging`: a pair could set a
    run that learned beside one that had not yet), or the plan says the longer horizon is the
    better place to check (:attr:`HorizonPlan.reason`). Never past the planned run, nor for a
    metric that moved the wrong way (a longer run would not fix the metric)."""
    if guard.wrong_way or plan.longer <= plan.samples:
        return None
    if not guard.learned:
        return (
            f"the baseline's {guard.metric_name} barely moved from the untrained model's in "
            f"{plan.samples:,} samples per run"
        )
    if guard.lagging:
        return (
            f"{guard.lagging} of the baseline's {guard.repeats} seeds had not taken off in "
            f"{plan.samples:,} samples per run where another had"
        )
    return None if plan.reason is None else f"at {plan.longer:,} samples {plan.reason}"

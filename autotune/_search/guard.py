"""The accuracy guard: is a candidate's validation metric within tolerance of the baseline's?

Short-budget metrics are noisy, so the guard first measures the baseline's own run-to-run spread
over several data-order seeds. It then decides in two steps:

- **Screening** (every candidate, one run): a candidate is rejected only for a drop larger than
  both the tolerance and what one run can resolve against that spread. Cheap, and never rejects
  on noise; it may let a borderline candidate through.
- **Confirmation** (the winner, as many runs as the baseline): the means are compared, at the
  baseline's spread; a candidate whose drop exceeds the tolerance (or, when the noise is wider than
  the tolerance, what the runs can resolve) does not win.

When even the confirmation cannot resolve a drop of ``tolerance`` the guard says so plainly
(``reliable`` is False, and ``advice`` says what to change) instead of passing or failing
candidates on noise.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

__all__ = [
    "AccuracyGuard",
    "AccuracyPlan",
    "Confirmation",
    "plan_accuracy_budget",
    "worth_growing",
]

CONFIDENCE = 0.95
ACCURACY_SHARE = 0.15  # of the time left, for the baseline's accuracy runs
FLOOR_STEPS = 128  # baseline steps (at most one epoch) below which an accuracy run says little
TARGET_EPOCHS = 3  # the accuracy budget when time allows: three epochs (and >= 64 steps)
GROWTH_SHARE = 0.3  # of the time left, the most a re-measurement at a doubled budget may take


def _t_quantile(q: float, dof: int) -> float:
    return float(stats.t.ppf(q, dof))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """The leading candidate's accuracy re-checked over as many seeds as the baseline's: the
    mean of ``runs`` against the baseline's, ``drop`` compared with ``margin``. A confirmation
    whose runs failed carries the ``failure`` message and did not pass."""

    runs: tuple[float, ...]
    passed: bool
    mean: float | None = None
    drop: float | None = None
    margin: float | None = None
    failure: str | None = None
    trial: int | None = None  # the trial it confirmed

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs": list(self.runs), "passed": self.passed}
        for key in ("mean", "drop", "margin", "failure", "trial"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmation:
        return cls(
            runs=tuple(float(r) for r in data.get("runs") or ()),
            passed=bool(data["passed"]),
            mean=data.get("mean"),
            drop=data.get("drop"),
            margin=data.get("margin"),
            failure=data.get("failure"),
            trial=data.get("trial"),
        )

    def describe(self) -> str:
        if self.mean is None or self.drop is None or self.margin is None:
            return str(self.failure)
        return (
            f"mean {self.mean:.4f} over {len(self.runs)} seeds, drop {self.drop:+.4f} vs "
            f"margin {self.margin:.4f}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyGuard:
    metric_name: str
    higher_is_better: bool
    tolerance: float
    baseline_runs: tuple[float, ...]
    accuracy_samples: int

    @property
    def repeats(self) -> int:
        return len(self.baseline_runs)

    @property
    def baseline_metric(self) -> float:
        return statistics.fmean(self.baseline_runs)

    @property
    def spread(self) -> float:
        """Sample standard deviation of the baseline's metric across data-order seeds."""
        return statistics.stdev(self.baseline_runs) if self.repeats > 1 else 0.0

    def noise_margin(self, n: int = 1) -> float:
        """The smallest drop of a mean of ``n`` candidate runs below the baseline's mean that is
        not noise (one-sided, 95%): t * s * sqrt(1/k + 1/n), s the baseline's spread, the
        candidate's runs assumed to scatter alike (dof k + n - 2 when n > 1)."""
        k = self.repeats
        if k < 2:
            return 0.0
        dof = k + n - 2 if n > 1 else k - 1
        return _t_quantile(CONFIDENCE, dof) * self.spread * math.sqrt(1 / k + 1 / n)

    @property
    def screening_margin(self) -> float:
        """The drop one candidate run may show and still pass screening."""
        return max(self.tolerance, self.noise_margin())

    @property
    def confirmation_resolution(self) -> float:
        """What a mean of as many runs as the baseline's can resolve, at the baseline's spread."""
        return self.noise_margin(self.repeats) if self.repeats > 1 else math.inf

    @property
    def reliable(self) -> bool:
        """Whether the confirmation can resolve a drop of ``tolerance`` at all."""
        return self.repeats > 1 and self.confirmation_resolution <= self.tolerance

    def drop(self, metric: float) -> float:
        """How much worse than the baseline mean ``metric`` is (negative: better)."""
        diff = self.baseline_metric - metric
        return diff if self.higher_is_better else -diff

    def violation(self, metric: float) -> float:
        """Screening, as an Optuna constraint value: <= 0 means it may be within tolerance."""
        if not math.isfinite(metric):
            return math.inf
        return self.drop(metric) - self.screening_margin

    def confirm(self, runs: Sequence[float], *, trial: int | None = None) -> Confirmation:
        """Compare the means of ``runs`` (several seeds) and the baseline's."""
        mean = statistics.fmean(runs)
        # The noise level is the baseline's: a candidate whose own runs scatter widely is
        # unstable, and that must not widen the margin it is held to.
        margin = max(self.tolerance, self.noise_margin(len(runs)))
        drop = self.drop(mean) if math.isfinite(mean) else math.inf
        return Confirmation(
            runs=tuple(runs),
            mean=mean,
            drop=drop,
            margin=margin,
            passed=drop <= margin,
            trial=trial,
        )

    def advice(self) -> str | None:
        if self.reliable:
            return None
        if self.repeats < 2:
            return (
                "The baseline was trained with one data-order seed, so its run-to-run noise is "
                "unknown; use accuracy_repeats >= 2 for an honest accuracy guard."
            )
        return (
            f"The baseline's {self.metric_name} varies by ±{self.spread:.4f} (std) across "
            f"{self.repeats} data-order seeds, so even {self.repeats} runs of a candidate cannot "
            f"resolve a drop of {self.tolerance:g}: only drops above "
            f"{self.confirmation_resolution:.4f} can be told from noise. For a guard at "
            f"{self.tolerance:g}, give the accuracy check a longer budget (accuracy_samples > "
            f"{self.accuracy_samples}), more repeats (accuracy_repeats > {self.repeats}), or "
            f"accept a tolerance >= {self.confirmation_resolution:.3f}."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric_name,
            "higher_is_better": self.higher_is_better,
            "tolerance": self.tolerance,
            "baseline_runs": list(self.baseline_runs),
            "baseline_metric": self.baseline_metric,
            "baseline_spread": self.spread,
            "screening_margin": self.screening_margin,
            "confirmation_resolution": (
                self.confirmation_resolution
                if math.isfinite(self.confirmation_resolution)
                else None
            ),
            "reliable": self.reliable,
            "accuracy_samples": self.accuracy_samples,
            "advice": self.advice(),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyPlan:
    """How many training samples each accuracy run gets: ``first`` to start with, growing
    (doubling) towards ``most`` (the planned run's length) while the baseline's own spread
    hides a drop of the tolerance.
    ``note`` says when the time budget cannot hold even ``floor`` in its share."""

    first: int
    most: int
    floor: int
    note: str | None = None

    def grown(self, samples: int) -> int:
        return min(self.most, 2 * samples)


def plan_accuracy_budget(
    *,
    n_train: int,
    batch_size: int,
    throughput: float,
    repeats: int,
    seconds_left: float | None,
    planned_epochs: float = TARGET_EPOCHS,
) -> AccuracyPlan:
    """The baseline's accuracy budget: three epochs (at least 64 steps) when time allows; with a
    deadline, what fits in ``ACCURACY_SHARE`` of the time left; never below one epoch or
    ``FLOOR_STEPS`` baseline steps, whichever is fewer, because a shorter run measures noise
    (large batches get a handful of steps and look as good as any). It may grow up to the
    planned run (``planned_epochs``) where the spread calls for it. When the floor does not fit
    its share, the plan says so up front, with the timeout that would hold it."""
    target = max(TARGET_EPOCHS * n_train, 64 * batch_size)
    most = max(target, math.ceil(planned_epochs * n_train))
    floor = min(n_train, FLOOR_STEPS * batch_size)
    if seconds_left is None:
        return AccuracyPlan(first=target, most=most, floor=floor)
    share = int(ACCURACY_SHARE * seconds_left * throughput / repeats)
    first = max(floor, min(target, share))
    note = None
    if share < floor:
        need = repeats * floor / throughput
        what = "one epoch" if floor == n_train else f"{FLOOR_STEPS} baseline steps"
        note = (
            f"the time budget is short for an honest accuracy check: {ACCURACY_SHARE:.0%} of the "
            f"{seconds_left:.0f} s left is {ACCURACY_SHARE * seconds_left:.0f} s for the "
            f"baseline's {repeats} accuracy runs, but each needs at least {floor} samples "
            f"({what}), about {need:.0f} s in all. The check takes that, leaving less time for "
            f"candidates; a timeout of {need / ACCURACY_SHARE:.0f} s or more holds it in its "
            "share (or pass accuracy_samples= to choose the budget yourself)."
        )
    return AccuracyPlan(first=first, most=most, floor=floor, note=note)


def worth_growing(
    guard: AccuracyGuard, plan: AccuracyPlan, *, run_seconds: float, seconds_left: float | None
) -> bool:
    """Whether to measure the baseline again at a doubled budget: the guard cannot resolve the
    tolerance, the plan allows more, and (with a deadline) the doubled runs, about twice
    ``run_seconds``, fit in ``GROWTH_SHARE`` of the time left."""
    if guard.reliable or guard.repeats < 2 or guard.accuracy_samples >= plan.most:
        return False
    grown = plan.grown(guard.accuracy_samples)
    cost = run_seconds * grown / guard.accuracy_samples
    return seconds_left is None or cost <= GROWTH_SHARE * seconds_left

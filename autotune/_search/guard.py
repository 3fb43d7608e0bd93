"""The accuracy guard: is a candidate's validation metric within tolerance of the baseline's?

Accuracy runs are paired: a candidate's run with data-order seed ``s`` starts from the same
initial weights and sees the same samples in the same order as the baseline's run with seed
``s``, so the noise the two share cancels in their difference. The guard decides in two steps:

- **Screening** (every candidate whose numerics change, one run, seed 0): rejected only for a
  drop larger than the tolerance plus what one pair can vary by. Before any confirmation that
  variation is bounded by the baseline's own seed-to-seed spread (lenient); once confirmations
  have measured how much paired differences really vary, by that (much tighter, since the
  shared noise cancels), so a clearly worse candidate is not sent to a costly confirmation.
- **Confirmation** (a candidate about to become the fast answer, as many seeds as the
  baseline): the mean of the paired differences, and its resolution (one-sided 95%, Student's t
  on the differences' own spread). *Confirmed*: the drop is within the tolerance and the
  resolution is finer than it. *Rejected*: the drop is beyond the tolerance, clearly. Otherwise
  *unresolved*: the check cannot tell, and says what would settle it.

Where the baseline did not learn measurably in its accuracy budget (its metric barely moved
from the untrained model's), no change of the numerics can be confirmed: every check would
compare untrained models.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

__all__ = [
    "AccuracyGuard",
    "AccuracyPlan",
    "Confirmation",
    "Verdict",
    "plan_accuracy_budget",
]

CONFIDENCE = 0.95
ACCURACY_SHARE = 0.25  # of the whole budget, the most the baseline's accuracy runs may take
TARGET_EPOCHS = 3  # the accuracy budget when time allows: three epochs (and >= 64 steps)
MIN_STEPS = 8  # baseline steps an accuracy run takes at the least
LEARNED = 2.0  # the baseline must move its metric by this many of its own spreads (std) to learn


def _t_quantile(q: float, dof: int) -> float:
    return float(stats.t.ppf(q, dof))


class Verdict(str, enum.Enum):
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    UNRESOLVED = "unresolved"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """A candidate's accuracy checked over several seeds, paired with the baseline's runs:
    ``drop`` is the mean paired drop, ``resolution`` the smallest drop its runs can tell from
    noise. A confirmation whose runs failed carries the ``failure`` message."""

    runs: tuple[float, ...]  # the candidate's metric per seed (0, 1, ...)
    verdict: Verdict
    mean: float | None = None
    drop: float | None = None
    resolution: float | None = None
    failure: str | None = None
    settle: str | None = None  # what would settle an unresolved check
    need: int | None = None  # seeds that would resolve the tolerance, at the pairs' spread
    trial: int | None = None  # the trial it checked
    at: float | None = None  # wall-clock time it was filed

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.CONFIRMED

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "runs": list(self.runs),
            "verdict": self.verdict.value,
            "passed": self.passed,
        }
        for key in ("mean", "drop", "resolution", "failure", "settle", "need", "trial", "at"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmation:
        return cls(
            runs=tuple(float(r) for r in data.get("runs") or ()),
            verdict=Verdict(data["verdict"]),
            mean=data.get("mean"),
            drop=data.get("drop"),
            resolution=data.get("resolution"),
            failure=data.get("failure"),
            settle=data.get("settle"),
            need=data.get("need"),
            trial=data.get("trial"),
            at=data.get("at"),
        )

    def describe(self) -> str:
        if self.drop is None:
            return str(self.failure)
        resolution = "unknown" if self.resolution is None else f"±{self.resolution:.4f}"
        return (
            f"mean paired drop {self.drop:+.4f} over {len(self.runs)} seeds, resolution "
            f"{resolution}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyGuard:
    """The baseline's accuracy runs (one per data-order seed), and the rules they make."""

    metric_name: str
    higher_is_better: bool
    tolerance: float
    baseline_runs: tuple[float, ...]  # the baseline's metric for seeds 0, 1, ...
    accuracy_samples: int
    initial_metric: float | None = None  # the untrained model's metric
    # The spread (std) of paired differences that confirmations measured, and its dof.
    paired_spread: float | None = None
    paired_dof: int = 0

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

    @property
    def learned(self) -> bool:
        """Whether the baseline's metric moved from the untrained model's by more than twice
        its own seed-to-seed spread: only then do its accuracy runs tell a config that trains
        from one that does not (a budget too short to learn leaves every config at the
        untrained metric, and every check would pass)."""
        if self.initial_metric is None or not math.isfinite(self.initial_metric):
            return True
        floor = 1e-6 * max(1.0, abs(self.initial_metric))
        return self.drop(self.initial_metric) > max(LEARNED * self.spread, floor)

    def drop(self, metric: float) -> float:
        """How much worse than the baseline's mean ``metric`` is (negative: better)."""
        diff = self.baseline_metric - metric
        return diff if self.higher_is_better else -diff

    def _paired_drop(self, seed: int, metric: float) -> float:
        base = self.baseline_runs[seed] if seed < self.repeats else self.baseline_metric
        diff = base - metric
        return diff if self.higher_is_better else -diff

    @property
    def screening_margin(self) -> float:
        """The drop one paired run may show and still pass screening: the tolerance, or what
        the baseline's spread lets one pair vary by (one-sided 95%), whichever is larger; once
        confirmations measured the paired differences' own spread, at most the tolerance plus
        what that lets one pair vary by."""
        if self.repeats < 2:
            return self.tolerance
        noise = _t_quantile(CONFIDENCE, self.repeats - 1) * self.spread * math.sqrt(2)
        margin = max(self.tolerance, noise)
        if self.paired_spread is not None and self.paired_dof > 0:
            paired = _t_quantile(CONFIDENCE, self.paired_dof) * self.paired_spread
            margin = min(margin, self.tolerance + paired)
        return margin

    def with_pairs(self, confirmations: Sequence[Confirmation]) -> AccuracyGuard:
        """This guard, screening with the largest spread of paired differences that the
        ``confirmations`` (those with two or more finite runs) measured."""
        spreads: list[tuple[float, int]] = []
        for c in confirmations:
            drops = [self._paired_drop(seed, m) for seed, m in enumerate(c.runs)]
            if len(drops) > 1 and all(math.isfinite(d) for d in drops):
                spreads.append((statistics.stdev(drops), len(drops) - 1))
        if not spreads:
            return self
        spread, dof = max(spreads)
        return dataclasses.replace(self, paired_spread=spread, paired_dof=dof)

    def violation(self, metric: float, seed: int = 0) -> float:
        """Screening, as an Optuna constraint value: <= 0 means it may be within tolerance."""
        if not math.isfinite(metric):
            return math.inf
        return self._paired_drop(seed, metric) - self.screening_margin

    def confirm(
        self, runs: Sequence[float], *, trial: int | None = None, at: float | None = None
    ) -> Confirmation:
        """Compare ``runs`` (the candidate's metric for seeds 0, 1, ...) with the baseline's
        runs of the same seeds, pair by pair."""
        drops = [self._paired_drop(seed, m) for seed, m in enumerate(runs)]
        mean = statistics.fmean(runs)
        if not all(math.isfinite(d) for d in drops):
            return Confirmation(
                runs=tuple(runs), verdict=Verdict.REJECTED, mean=mean, drop=math.inf,
                failure="a run's metric is not finite", trial=trial, at=at,
            )  # fmt: skip
        drop = statistics.fmean(drops)
        n = len(drops)
        resolution = math.inf
        if n > 1:
            resolution = _t_quantile(CONFIDENCE, n - 1) * statistics.stdev(drops) / math.sqrt(n)
        tol = self.tolerance
        if drop - resolution > tol or (drop > tol and resolution <= tol):
            verdict = Verdict.REJECTED
        elif drop <= tol and resolution <= tol and self.learned:
            verdict = Verdict.CONFIRMED
        else:
            verdict = Verdict.UNRESOLVED
        settle, need = None, None
        if verdict is Verdict.UNRESOLVED:
            settle, need = self._settle(drops)
        return Confirmation(
            runs=tuple(runs),
            verdict=verdict,
            mean=mean,
            drop=drop,
            resolution=resolution if math.isfinite(resolution) else None,
            settle=settle,
            need=need,
            trial=trial,
            at=at,
        )

    def _settle(self, drops: Sequence[float]) -> tuple[str, int | None]:
        """What would settle an unresolved check, and how many seeds (None: more seeds would
        not do it)."""
        if not self.learned:
            return (
                f"the baseline's {self.metric_name} barely moved from the untrained model's in "
                f"{self.accuracy_samples} samples per run: a longer accuracy budget "
                "(a longer timeout, or accuracy_samples=) would let the check tell"
            ), None
        if len(drops) < 2:
            return "accuracy_repeats >= 2 would let the check measure its own noise", None
        sd = statistics.stdev(drops)
        need = len(drops)
        while need < 1000 and (
            _t_quantile(CONFIDENCE, need - 1) * sd / math.sqrt(need) > self.tolerance
        ):
            need += 1
        return (
            f"the paired differences vary by ±{sd:.4f}: about {need} seeds "
            f"(accuracy_repeats={need}), or a longer accuracy budget, would resolve a drop of "
            f"{self.tolerance:g}"
        ), need

    def advice(self) -> str | None:
        if not self.learned:
            return self._settle([])[0]
        if self.repeats < 2:
            return (
                "The baseline was trained with one data-order seed; use accuracy_repeats >= 2 "
                "so that a change of the numerics can be confirmed at all."
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric_name,
            "higher_is_better": self.higher_is_better,
            "tolerance": self.tolerance,
            "baseline_runs": list(self.baseline_runs),
            "baseline_metric": self.baseline_metric,
            "baseline_spread": self.spread,
            "initial_metric": self.initial_metric,
            "learned": self.learned,
            "screening_margin": self.screening_margin,
            "paired_spread": self.paired_spread,
            "accuracy_samples": self.accuracy_samples,
            "paired": True,
            "advice": self.advice(),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyPlan:
    """How many training samples each accuracy run gets, and, when that is less than an epoch,
    a note that says the guard is weaker and what timeout would give it an epoch."""

    samples: int
    note: str | None = None


def plan_accuracy_budget(
    *,
    n_train: int,
    batch_size: int,
    throughput: float,
    repeats: int,
    seconds: float | None,
    planned_epochs: float = TARGET_EPOCHS,
) -> AccuracyPlan:
    """The baseline's accuracy budget: three epochs (at least 64 steps, at most the planned
    run) when time allows; with a time budget, what fits in ``ACCURACY_SHARE`` of ``seconds``
    (the search's whole budget) for ``repeats`` runs, never fewer than ``MIN_STEPS`` steps.
    Less than an epoch is said up front: the check is weaker, and which timeout would hold an
    epoch."""
    target = max(TARGET_EPOCHS * n_train, 64 * batch_size)
    target = min(target, max(n_train, math.ceil(planned_epochs * n_train)))
    if seconds is None:
        return AccuracyPlan(samples=target)
    share = int(ACCURACY_SHARE * seconds * throughput / repeats)
    samples = max(MIN_STEPS * batch_size, min(target, share))
    note = None
    if samples < n_train:
        need = repeats * n_train / throughput / ACCURACY_SHARE
        note = (
            f"the accuracy check trains on {samples} samples per run ({samples / n_train:.0%} "
            f"of an epoch), all its {ACCURACY_SHARE:.0%} share of the budget allows for "
            f"{repeats} seeds: a weaker check, said in the result. A timeout of {need:.0f} s "
            "or more gives it a full epoch (or pass accuracy_samples= to choose)."
        )
    return AccuracyPlan(samples=samples, note=note)

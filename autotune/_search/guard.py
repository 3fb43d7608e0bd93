"""The accuracy guard: is a candidate's validation metric within tolerance of the baseline's?

Accuracy runs are paired: a candidate's run with data-order seed ``s`` starts from the same
initial weights and sees the same samples in the same order as the baseline's run with seed
``s``, so the noise the two share cancels in their difference. The guard decides in two steps:

- **Screening** (every candidate whose numerics change, one run, seed 0): rejected only for a
  drop larger than the tolerance plus what one pair can vary by. Before any confirmation that
  variation is bounded by the baseline's own seed-to-seed spread (lenient); once confirmations
  have measured how much paired differences really vary, by that (much tighter, since the
  shared noise cancels), so a clearly worse candidate is not sent to a costly confirmation.
- **Confirmation**, a sequential non-inferiority test on the mean paired drop ``δ`` (how much
  worse the candidate is; negative: better). H0: ``δ > tolerance``. At each look (the baseline's
  seeds first, then more seeds while the search buys them) the one-sided Student-t confidence
  bounds of the mean paired drop are taken at level ``1 - α_k``: *confirmed* when the upper
  bound is within the tolerance, *rejected* when the lower bound is beyond it, otherwise
  *unresolved* (and it says how many seeds would settle it). The looks share the error rate by
  an alpha-spending rule, ``α_k = α / (k (k + 1))``, whose sum over any number of looks stays
  below ``α = 1 - CONFIDENCE``: however many times the search looks, a candidate whose true drop
  is beyond the tolerance is confirmed with probability at most ``α`` (a union bound; the
  rejections are non-binding, so they cannot raise it). A confirmation states the confidence it
  achieved: one minus the error spent on its earlier looks and the last look's p-value.

Where the baseline did not learn measurably in its accuracy budget (its metric barely moved
from the untrained model's), no change of the numerics can be confirmed: every check would
compare untrained models. Where it moved the *wrong* way (the trained model scores worse than
the untrained one), the metric cannot be right for the task, and the guard says so.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

__all__ = [
    "ALPHA",
    "AccuracyGuard",
    "AccuracyPlan",
    "Confirmation",
    "Verdict",
    "look_alpha",
    "percent",
    "plan_accuracy_budget",
    "spent_alpha",
]

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE  # a confirmation's false-accept rate, across all its looks
ACCURACY_SHARE = 0.25  # of the whole budget, the most the baseline's accuracy runs may take
TARGET_EPOCHS = 3  # the accuracy budget when time allows: three epochs (and >= 64 steps)
MIN_STEPS = 8  # baseline steps an accuracy run takes at the least
LEARNED = 2.0  # the baseline must move its metric by this many of its own spreads (std) to learn
MIN_LEARNED_SEEDS = 2  # ... or this many of its seeds must each move it by more than the tolerance
MAX_NEED = 10_000  # seeds beyond which an unresolved check counts as unsettleable


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, dof: int) -> float:
    return float(stats.t.ppf(q, dof))


def percent(confidence: float) -> str:
    """A confidence as a percentage that never rounds up to a certainty: ">99.9%"."""
    return ">99.9%" if confidence > 0.999 else f"{confidence:.1%}"


def look_alpha(look: int) -> float:
    """The error rate the ``look``-th look (1, 2, ...) of a confirmation may spend."""
    return ALPHA / (look * (look + 1))


def spent_alpha(looks: int) -> float:
    """The error rate ``looks`` looks have spent in all: ``α (1 - 1 / (looks + 1))`` < ``α``."""
    return ALPHA * looks / (looks + 1)


def paired_bounds(drops: Sequence[float], look: int) -> tuple[float, float, float]:
    """(mean, lower, upper): the mean paired drop and its one-sided confidence bounds at the
    ``look``-th look's level (infinite with fewer than two pairs)."""
    mean = statistics.fmean(drops)
    n = len(drops)
    if n < 2:
        return mean, -math.inf, math.inf
    half = _t_quantile(1.0 - look_alpha(look), n - 1) * statistics.stdev(drops) / math.sqrt(n)
    return mean, mean - half, mean + half


def p_inferior(drops: Sequence[float], tolerance: float) -> float:
    """The one-sided p-value of H0 ``δ >= tolerance`` (Student's t on the paired drops): small
    when the drops are clearly within the tolerance."""
    n = len(drops)
    mean = statistics.fmean(drops)
    if n < 2:
        return 1.0
    se = statistics.stdev(drops) / math.sqrt(n)
    if se == 0.0:
        return 0.0 if mean < tolerance else 1.0
    return float(stats.t.sf((tolerance - mean) / se, n - 1))


def seeds_to_settle(drops: Sequence[float], tolerance: float, look: int) -> int | None:
    """The fewest seeds with which the ``look``-th look would settle the check (either way),
    were the drops' mean and spread to hold; None beyond :data:`MAX_NEED` (a drop at the
    tolerance itself never settles)."""
    n = len(drops)
    if n < 2:
        return None
    gap = abs(statistics.fmean(drops) - tolerance)
    sd = statistics.stdev(drops)
    if sd == 0.0:
        return n if gap > 0 else None
    if gap == 0.0:
        return None

    def settles(m: int) -> bool:
        return _t_quantile(1.0 - look_alpha(look), m - 1) * sd / math.sqrt(m) < gap

    if not settles(MAX_NEED):
        return None
    lo, hi = max(2, n), MAX_NEED  # settles(hi); the bound shrinks as seeds grow
    if settles(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if settles(mid) else (mid, hi)
    return hi


class Verdict(str, enum.Enum):
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    UNRESOLVED = "unresolved"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """A candidate's accuracy checked over several seeds, paired with the baseline's runs, at
    its ``looks``-th look: ``drop`` is the mean paired drop, ``bound`` its upper confidence
    bound (``lower`` its lower one) at that look's level, ``resolution`` their half-width, and
    ``confidence`` what a confirmation achieved across its looks. A confirmation whose runs
    failed carries the ``failure`` message."""

    runs: tuple[float, ...]  # the candidate's metric per seed (0, 1, ...)
    verdict: Verdict
    mean: float | None = None
    drop: float | None = None
    resolution: float | None = None
    bound: float | None = None  # upper confidence bound of the mean paired drop
    lower: float | None = None  # lower confidence bound of the mean paired drop
    looks: int = 1  # the looks taken at this candidate (each one spends part of the error rate)
    confidence: float | None = None  # achieved by a confirmation, across its looks
    tolerance: float | None = None
    failure: str | None = None
    settle: str | None = None  # what would settle an unresolved check
    need: int | None = None  # seeds that would settle it at the next look, at the pairs' spread
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
            "looks": self.looks,
        }
        for key in _OPTIONAL:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmation:
        return cls(
            runs=tuple(float(r) for r in data.get("runs") or ()),
            verdict=Verdict(data["verdict"]),
            looks=int(data.get("looks") or 1),
            **{key: data.get(key) for key in _OPTIONAL},
        )

    def describe(self) -> str:
        if self.drop is None:
            return str(self.failure)
        text = f"mean paired drop {self.drop:+.4f} over {len(self.runs)} seeds"
        if self.bound is None or self.lower is None:
            return f"{text}, no confidence bound (one seed)"
        level = 1.0 - look_alpha(self.looks)
        text += f", upper bound {self.bound:+.4f} ({level:.1%} one-sided, look {self.looks})"
        if self.tolerance is not None:
            text += f" against tolerance {self.tolerance:g}"
        if self.confidence is not None:
            text += f": within it at {percent(self.confidence)} confidence"
        elif self.verdict is Verdict.REJECTED:
            text += f"; lower bound {self.lower:+.4f}, beyond it"
        return text


_OPTIONAL = (
    "mean", "drop", "resolution", "bound", "lower", "confidence", "tolerance", "failure",
    "settle", "need", "trial", "at",
)  # fmt: skip


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

    def _moved(self) -> float:
        """How far training moved the baseline's metric from the untrained model's, in its own
        spreads (positive: better), with a floor for a spread of zero."""
        if self.initial_metric is None or not math.isfinite(self.initial_metric):
            return math.inf
        floor = 1e-6 * max(1.0, abs(self.initial_metric))
        return self.drop(self.initial_metric) / max(self.spread, floor)

    @property
    def learned(self) -> bool:
        """Whether the baseline learned in its accuracy budget: its mean metric moved from the
        untrained model's by more than twice its own seed-to-seed spread, or at least two of
        its seeds each moved by more than the tolerance (a horizon where some data orders
        have taken off and others not yet: the seeds that learned carry the paired test).
        Only then do its runs tell a config that trains from one that does not (a budget too
        short to learn leaves every config at the untrained metric, and every check would
        pass)."""
        if self._moved() > LEARNED:
            return True
        if self.initial_metric is None or self.wrong_way:
            return False
        floor = max(self.tolerance, 1e-6 * max(1.0, abs(self.initial_metric)))
        initial = self.initial_metric
        took_off = sum(1 for run in self.baseline_runs if self._paired_gain(run, initial) > floor)
        return took_off >= MIN_LEARNED_SEEDS

    @property
    def wrong_way(self) -> bool:
        """Whether training made the baseline's metric clearly *worse* than the untrained
        model's: a metric that cannot be right for the task (while the loss falls)."""
        return self._moved() < -LEARNED

    def _paired_gain(self, run: float, initial: float) -> float:
        """How much better ``run`` is than ``initial`` (negative: worse)."""
        return run - initial if self.higher_is_better else initial - run

    def drop(self, metric: float) -> float:
        """How much worse than the baseline's mean ``metric`` is (negative: better)."""
        diff = self.baseline_metric - metric
        return diff if self.higher_is_better else -diff

    def _paired_drop(self, seed: int, metric: float) -> float:
        base = self.baseline_runs[seed] if seed < self.repeats else self.baseline_metric
        diff = base - metric
        return diff if self.higher_is_better else -diff

    def paired_drops(self, runs: Sequence[float]) -> list[float]:
        """The candidate's ``runs`` (seeds 0, 1, ...) less the baseline's run of each seed."""
        return [self._paired_drop(seed, m) for seed, m in enumerate(runs)]

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
            drops = self.paired_drops(c.runs)
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
        self,
        runs: Sequence[float],
        *,
        looks: int = 1,
        trial: int | None = None,
        at: float | None = None,
    ) -> Confirmation:
        """The ``looks``-th look at ``runs`` (the candidate's metric for seeds 0, 1, ...),
        paired with the baseline's runs of the same seeds: the sequential non-inferiority test
        of the module's docstring."""
        drops = self.paired_drops(runs)
        mean = statistics.fmean(runs)
        base = Confirmation(
            runs=tuple(runs), verdict=Verdict.REJECTED, looks=looks, tolerance=self.tolerance,
            mean=mean, trial=trial, at=at,
        )  # fmt: skip
        if not all(math.isfinite(d) for d in drops):
            return dataclasses.replace(base, drop=math.inf, failure="a run's metric is not finite")
        drop, lower, upper = paired_bounds(drops, looks)
        tol = self.tolerance
        confidence = None
        if lower > tol:
            verdict = Verdict.REJECTED
        elif upper <= tol and self.learned:
            verdict = Verdict.CONFIRMED
            confidence = 1.0 - (spent_alpha(looks - 1) + p_inferior(drops, tol))
        else:
            verdict = Verdict.UNRESOLVED
        settle, need = None, None
        if verdict is Verdict.UNRESOLVED:
            settle, need = self._settle(drops, looks)
        finite = math.isfinite(upper)
        return dataclasses.replace(
            base,
            verdict=verdict,
            drop=drop,
            resolution=upper - drop if finite else None,
            bound=upper if finite else None,
            lower=lower if finite else None,
            confidence=confidence,
            settle=settle,
            need=need,
        )

    def _settle(self, drops: Sequence[float], looks: int) -> tuple[str, int | None]:
        """What would settle an unresolved check, and how many seeds at the next look (None:
        more seeds would not do it)."""
        if self.wrong_way:
            return self._wrong_way_advice(), None
        if not self.learned:
            return (
                f"the baseline's {self.metric_name} barely moved from the untrained model's in "
                f"{self.accuracy_samples} samples per run: a longer accuracy budget "
                "(a longer timeout, or accuracy_samples=) would let the check tell"
            ), None
        if len(drops) < 2:
            return "accuracy_repeats >= 2 would let the check measure its own noise", None
        sd = statistics.stdev(drops)
        need = seeds_to_settle(drops, self.tolerance, looks + 1)
        if need is None:
            return (
                f"its mean paired drop {statistics.fmean(drops):+.4f} sits at the tolerance "
                f"{self.tolerance:g} (pairs vary by ±{sd:.4f}): no practical number of seeds "
                "would tell; a longer accuracy budget might"
            ), None
        return (
            f"the paired differences vary by ±{sd:.4f}: about {need} seeds "
            f"(accuracy_repeats={need}), or a longer accuracy budget, would settle it against "
            f"the tolerance {self.tolerance:g}"
        ), need

    def _wrong_way_advice(self) -> str:
        return (
            f"the baseline's {self.metric_name} got worse as it trained (untrained model "
            f"{self.initial_metric:.4f}, trained {self.baseline_metric:.4f} ± {self.spread:.4f}): "
            "it cannot be the right metric for this task. Pass the one you judge the model by: "
            "metric='loss' (--metric loss) for the model's loss, or metric=your_fn "
            "(--metric MODULE:FUNCTION) with metric_name= and higher_is_better="
        )

    def advice(self) -> str | None:
        if self.wrong_way:
            return self._wrong_way_advice()
        if not self.learned:
            return self._settle([], 1)[0]
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
            "wrong_way": self.wrong_way,
            "screening_margin": self.screening_margin,
            "paired_spread": self.paired_spread,
            "accuracy_samples": self.accuracy_samples,
            "paired": True,
            "test": (
                f"sequential non-inferiority: confirmed when the one-sided upper bound of the "
                f"mean paired drop is within the tolerance; look k at level 1 - {ALPHA:g}/(k(k+1))"
                f", at most {ALPHA:g} false accepts across all looks"
            ),
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

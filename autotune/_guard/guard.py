"""The accuracy guard's decisions: screening, confirmation, what would settle a check and
why none can, as verdicts, reason codes and numbers (never words: ``_guard/words.py``).

**What a pair shares.** A candidate's accuracy run with data-order seed ``s`` and the
baseline's run with seed ``s`` start from the same initial weights, see the same training
samples in the same order and are scored on the same validation examples in the same
batches. Both train the same numerics-free settings (the baseline's, with the safe answer's
pinning, memory-format, optimizer-kernel and thread knobs: ``_knobs.pair_base``), so a pair
differs only in the numerics judged (batch size and accumulation, precision, LR schedule).
Pairing cancels the noise the two runs share; what is left, the pairs measure.

- **Screening** (every candidate whose numerics change, one run, seed 0): rejected only for a
  drop larger than the tolerance plus what one pair can vary by
  (:attr:`AccuracyGuard.screening_margin`, :func:`screening_margin`). The screening run is
  not a pair of the confirmation (:data:`FIRST_PAIR`): it selected the candidate, so it is
  a lucky one more often than not.
- **Confirmation** (:meth:`AccuracyGuard.confirm`): the sequential non-inferiority test of
  ``_guard/stats.py``; *confirmed* when the upper bound of the counted drops is within the
  tolerance (and the baseline learned, the sample's noise is bounded, ``min_pairs`` pairs are
  in), *rejected* when the lower bound is beyond it, otherwise *unresolved*, with what would
  settle it (:func:`settle`). The error rate is claimed for drops whose failure modes the
  pairs show: ``n`` pairs all miss a mode of rate ``f`` with probability ``(1 - f)^n``.

Where the baseline did not learn measurably in its accuracy budget, no change of the numerics
can be confirmed (every check would compare untrained models); where it moved the wrong way,
the metric cannot be right for the task.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autotune._guard.confirmation import (
    Confirmation,
    NoBound,
    Reason,
    RunFailed,
    Settle,
    Verdict,
)
from autotune._guard.stats import (
    CONFIDENCE,
    SampleNoise,
    confirming_bound,
    counted_drops,
    counting_floor,
    lagging_run,
    look_alpha,
    look_settles,
    paired_bounds,
    sample_floor,
    sample_noise,
    seeds_to_settle,
    spent_alpha,
    t_quantile,
    worse,
    z_quantile,
)

__all__ = [
    "FIRST_PAIR",
    "SHORT_LOOK",
    "AccuracyGuard",
    "Judged",
    "counted_noise",
    "judge",
    "rejudged",
    "screening_margin",
    "screening_violation",
    "settle",
    "steady_runs",
    "unsettleable",
    "validation_floor",
]

LEARNED = 2.0  # the baseline must move its metric by this many of its own spreads (std) to learn
MIN_LEARNED_SEEDS = 2  # ... or this many of its seeds must each move it by more than the tolerance
LOOK_POWER = 0.8  # a next look is sized to confirm a harmless change this often
# A check's first pair: seed 0 is the candidate's screening run, which chose it (a run that
# passed screening is likelier than not a lucky one), so a confirmation pairs the seeds after.
FIRST_PAIR = 1
# The fewest pairs with a bound: a check's first look where the baseline's runs say that two
# would settle a harmless change (see :meth:`AccuracyGuard.first_pairs`).
SHORT_LOOK = 2
# A pair the candidate won by more than the tolerance leaves the counted bound's validation
# noise where it won by this many of its own sample errors more (see counted_noise).
CAPPED_MARGIN = 3.0


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
    # Per baseline seed, its metric's sums per validation unit (None: not recorded), and the
    # items each unit counts (None: one each).
    baseline_units: tuple[tuple[float, ...] | None, ...] = ()
    unit_counts: tuple[float, ...] | None = None
    min_pairs: int = 0  # paired seeds a confirmation needs at the least (SearchOptions.min_pairs)
    first_look: int = 0  # the pairs of a check's first look, at the most (see first_pairs)

    @property
    def repeats(self) -> int:
        return len(self.baseline_runs)

    def first_pairs(self) -> int:
        """The pairs of a check's first look: as many as the baseline's first seeds after the
        screening run's (``first_look``, from ``accuracy_repeats``), and ``min_pairs`` at the
        least; :data:`SHORT_LOOK` (two, the fewest with a bound) where the baseline's own runs
        say two would confirm a harmless change at the first look's level 80% of the time
        (:data:`LOOK_POWER`): were its pairs to differ as much as two of the baseline's runs
        of different data orders do, pairing cancelling nothing, and the validation sample to
        judge them as it judges those two runs. A task whose runs barely vary settles a
        harmless change in two pairs, where a third run buys nothing. The choice is made from
        the baseline's runs alone, before the candidate's first run of its check, so it cannot
        lean on what the candidate's pairs show (``guard_error_rates.py``'s ``quiet`` rows)."""
        least = max(self.first_look, self.min_pairs)
        short = max(SHORT_LOOK, self.min_pairs)
        if short >= least or not short_look_settles(self):
            return least
        return short

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
    def lagging(self) -> int:
        """How many of the baseline's seeds have not taken off where another has: each moved
        the metric from the untrained model's by less than half as much as the seed that moved
        it most (which moved it by more than the tolerance). At such a horizon a pair can set
        a run that learned beside one that did not yet, and a change that only delays the
        take-off reads as a loss (or a harmful one as none)."""
        initial = self.initial_metric
        if initial is None or not math.isfinite(initial) or self.wrong_way:
            return 0
        gains = [self._paired_gain(run, initial) for run in self.baseline_runs]
        best = max(gains, default=0.0)
        if best <= self.tolerance:
            return 0
        return sum(1 for gain in gains if gain < 0.5 * best)

    @property
    def wrong_way(self) -> bool:
        """Whether training made the baseline's metric clearly *worse* than the untrained
        model's: a metric that cannot be right for the task (while the loss falls)."""
        return self._moved() < -LEARNED

    def _paired_gain(self, run: float, initial: float) -> float:
        """How much better ``run`` is than ``initial`` (negative: worse)."""
        return worse(run - initial, self.higher_is_better)

    def drop(self, metric: float) -> float:
        """How much worse than the baseline's mean ``metric`` is (negative: better)."""
        return worse(self.baseline_metric - metric, self.higher_is_better)

    def _paired_drop(self, seed: int, metric: float) -> float:
        return worse(self.baseline_runs[seed] - metric, self.higher_is_better)

    def paired_drops(self, runs: Sequence[float], first: int = 0) -> list[float]:
        """The candidate's ``runs`` (seeds ``first``, ``first + 1``, ...) less the baseline's
        run of each seed, for the seeds the baseline has a run of: a candidate's seed without
        its baseline run is not a pair, and is not used (never compared with the baseline's
        mean)."""
        seeds = range(first, self.repeats)
        return [self._paired_drop(seed, m) for seed, m in zip(seeds, runs, strict=False)]

    def pair_squares(self, runs: Sequence[Any]) -> float | None:
        """The sum over ``runs`` (the candidate's accuracy runs, each with its ``seed`` and
        ``units``) and over validation units of the squared difference from the baseline's
        run of the same seed: what :func:`sample_noise` splits the variance with. None where
        a run or its baseline run has no units."""
        total = 0.0
        for run in runs:
            base = self.baseline_units[run.seed] if run.seed < len(self.baseline_units) else None
            if run.units is None or base is None or len(base) != len(run.units):
                return None
            total += math.fsum((b - c) ** 2 for b, c in zip(base, run.units, strict=True))
        return total

    def sample_noise(
        self,
        units: Sequence[float] | None,
        drops: Sequence[float],
        squares: float | None = None,
        first: int = 0,
    ) -> SampleNoise | None:
        """The validation sample's noise in the mean of the paired ``drops``, from the
        candidate's per-unit sums over their seeds (``units``), the baseline's per-unit sums of
        the same seeds and the pairs' ``squares`` (see :meth:`pair_squares`); None where the
        units were not recorded."""
        return _noise_over(self, range(first, first + len(drops)), units, drops, squares)

    @property
    def screening_margin(self) -> float:
        """The drop one paired run may show and still pass screening: the tolerance, or what
        the baseline's spread lets one pair vary by (one-sided 95%), whichever is larger; once
        confirmations measured the paired differences' own spread, at most the tolerance plus
        what that lets one pair vary by. A baseline run far behind its others
        (:func:`lagging_run`) is left out of the spread, which it would widen enough to pass
        clearly worse candidates on to costly checks. Screening only saves checks; a candidate
        it passes is still held by its confirmation."""
        runs = steady_runs(self)
        if len(runs) < 2:
            return self.tolerance
        noise = t_quantile(CONFIDENCE, len(runs) - 1) * statistics.stdev(runs) * math.sqrt(2)
        margin = max(self.tolerance, noise)
        if self.paired_spread is not None and self.paired_dof > 0:
            paired = t_quantile(CONFIDENCE, self.paired_dof) * self.paired_spread
            margin = min(margin, self.tolerance + paired)
        return margin

    def with_pairs(self, confirmations: Sequence[Confirmation]) -> AccuracyGuard:
        """This guard, screening with the largest spread of paired differences that the
        ``confirmations`` (those with two or more finite runs) measured."""
        spreads: list[tuple[float, int]] = []
        for c in confirmations:
            drops = self.paired_drops(c.runs, c.first_seed)
            if len(drops) > 1 and all(math.isfinite(d) for d in drops):
                spreads.append((statistics.stdev(drops), len(drops) - 1))
        if not spreads:
            return self
        spread, dof = max(spreads)
        return dataclasses.replace(self, paired_spread=spread, paired_dof=dof)

    def violation(
        self, metric: float, seed: int = 0, units: Sequence[float] | None = None
    ) -> float:
        """Screening, as an Optuna constraint value: <= 0 means it may be within tolerance
        (``units``: the run's per-unit values, see :func:`screening_margin`)."""
        if not math.isfinite(metric):
            return math.inf
        drop = self._paired_drop(seed, metric)
        return drop - screening_margin(self, seed, drop, units)

    def confirm(
        self,
        runs: Sequence[float],
        *,
        units: Sequence[float] | None = None,
        squares: float | None = None,
        looks: int = 1,
        order: int = 1,
        trial: int | None = None,
        at: float | None = None,
        first: int = 0,
        capped: Sequence[tuple[int, Sequence[float]]] | None = None,
    ) -> Confirmation:
        """The ``looks``-th look of the study's ``order``-th check at ``runs`` (the
        candidate's metric for seeds ``first``, ``first + 1``, ...; ``units``, its per-unit
        sums over those seeds; ``capped``, its per-unit values of the seeds whose pair it won
        by more than the tolerance), paired with the baseline's runs of the same seeds: the
        sequential non-inferiority test of the module's docstring."""
        drops = self.paired_drops(runs, first)
        pairs = len(drops)
        base = Confirmation(
            runs=tuple(runs), verdict=Verdict.REJECTED, looks=looks, tolerance=self.tolerance,
            first_seed=first,
            mean=statistics.fmean(runs), trial=trial, at=at, order=order,
            units=None if units is None else tuple(units), squares=squares,
            capped_units=None if not capped else tuple(
                sorted((seed, tuple(values)) for seed, values in capped)
            ),
        )  # fmt: skip
        if not drops:
            return dataclasses.replace(base, verdict=Verdict.UNRESOLVED, no_bound=NoBound.UNPAIRED)
        if not all(math.isfinite(d) for d in drops):
            return dataclasses.replace(base, drop=math.inf, failed=RunFailed.NOT_FINITE)
        # Units summed over seeds the baseline lacks would not match its sums: no pairs there.
        noise = self.sample_noise(units, drops, squares, first) if pairs == len(runs) else None
        # The counted drops' own: without the pairs won by far more than the tolerance.
        counted = (
            counted_noise(self, units, drops, squares, first, capped, plain=noise)
            if noise is not None
            else None
        )
        tol = self.tolerance
        drop, lower, _ = paired_bounds(drops, looks, order=order, noise=noise)
        judged = confirming_bound(drops, tol, looks, order=order, noise=counted)
        upper = judged.bound
        confidence = None
        if lower > tol:
            verdict = Verdict.REJECTED
        elif upper <= tol and self.learned and noise is not None and pairs >= self.min_pairs:
            verdict = Verdict.CONFIRMED
            confidence = 1.0 - (spent_alpha(looks - 1, order) + judged.p)
        else:
            verdict = Verdict.UNRESOLVED
        settled: Settle | None = None
        need, wide = None, None
        if verdict is Verdict.UNRESOLVED and upper <= tol and self.learned and noise is not None:
            need = self.min_pairs
            settled = Settle(
                reason=Reason.MIN_PAIRS, need=need, pairs=pairs, min_pairs=self.min_pairs
            )
        elif verdict is Verdict.UNRESOLVED:
            settled = settle(self, drops, looks, order, noise, counted)
            need = None if settled.need is None else max(settled.need, self.min_pairs)
            if need is None and counted is not None:
                # The counted mean, were it to hold, plus the sample's own half-width: no
                # seeds bring the bound below that (a change clearly better may still confirm).
                wide = judged.mean + sample_floor(counted, looks, order) >= tol or None
        finite = math.isfinite(upper)
        no_bound = None
        if not finite:
            no_bound = NoBound.ONE_SEED if pairs < 2 else NoBound.EXACT
        return dataclasses.replace(
            base,
            verdict=verdict,
            drop=drop,
            resolution=upper - judged.mean if finite else None,
            bound=upper if finite else None,
            lower=lower if math.isfinite(lower) else None,
            confidence=confidence,
            settle=settled,
            need=need,
            no_bound=no_bound,
            sample_error=None if counted is None else math.sqrt(counted.variance),
            counted=judged.counted or None,
            wide_sample=wide,
        )

    def advice(self) -> Settle | None:
        """What keeps every change of the numerics from being confirmed, or None: the metric
        moved the wrong way, the baseline did not learn, the validation set is too small for
        the tolerance, or the baseline has one seed."""
        if self.wrong_way:
            return Settle(reason=Reason.WRONG_WAY)
        if not self.learned:
            return Settle(reason=Reason.NOT_LEARNED)
        floor = validation_floor(self)
        if floor is not None and floor > self.tolerance:
            small = Reason.ZERO_TOLERANCE if self.tolerance <= 0.0 else Reason.SMALL_VALIDATION
            examples = self.validation_examples or 0
            need = None if self.tolerance <= 0.0 else math.ceil(examples * floor / self.tolerance)
            return Settle(reason=small, floor=floor, need=need, examples=examples)
        if self.repeats < 2:
            return Settle(reason=Reason.BASELINE_ONE_SEED)
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
            "lagging_run": lagging_run(
                self.baseline_runs, higher_is_better=self.higher_is_better, tolerance=self.tolerance
            ),
            "accuracy_samples": self.accuracy_samples,
            "paired": True,
            "validation_examples": self.validation_examples,
            **_advice_facts(self.advice()),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyGuard:
        """The guard a result's JSON describes, without the per-example values it leaves out
        (what its words are rendered from)."""
        return cls(
            metric_name=str(data.get("metric") or "metric"),
            higher_is_better=bool(data.get("higher_is_better", True)),
            tolerance=float(data.get("tolerance") or 0.0),
            baseline_runs=tuple(float(r) for r in data.get("baseline_runs") or ()),
            accuracy_samples=int(data.get("accuracy_samples") or 0),
            initial_metric=data.get("initial_metric"),
        )

    @property
    def validation_examples(self) -> int | None:
        """The validation units each run is scored on (None: no per-example values)."""
        units = next((u for u in self.baseline_units if u), None)
        return None if units is None else len(self.unit_counts or units)


def short_look_settles(guard: AccuracyGuard) -> bool:
    """Whether two of ``guard``'s baseline runs of a first look's seeds, read as a harmless
    candidate's pairs, would settle a look of :data:`SHORT_LOOK` pairs (see
    :meth:`AccuracyGuard.first_pairs`)."""
    seeds = (FIRST_PAIR, FIRST_PAIR + 1)
    if guard.repeats <= seeds[-1] or not guard.learned:
        return False
    other = guard.baseline_units[seeds[1]] if len(guard.baseline_units) > seeds[1] else None
    if other is None:
        return False
    (drop,) = guard.paired_drops([guard.baseline_runs[seeds[1]]], seeds[0])
    noise = _noise_over(guard, seeds[:1], other, [drop], None)
    if noise is None:
        return False
    seed_var = 2.0 * statistics.variance(guard.baseline_runs)
    return look_settles(seed_var, SHORT_LOOK, guard.tolerance, look_alpha(1), noise, LOOK_POWER)


def validation_floor(guard: AccuracyGuard) -> float | None:
    """The half-width that the validation sample alone gives the most lenient bound any check
    of the search can take (the first look of its first check, at the normal quantile: no
    look's degrees of freedom make it narrower), for a counting metric with per-example values:
    never less than if ``3 / U`` of its ``U`` units disagreed entirely (see
    :func:`sample_noise`), however many seeds and whatever the candidate. None where the metric
    does not count or has no per-example values. A pair counts a gain of at most the
    tolerance (:func:`counted_drops`), so where this is more than twice the tolerance no
    candidate can be confirmed but one that beats the baseline by far on nearly every seed
    (such pairs leave the sample's noise: :func:`counted_noise`); where it is more than the
    tolerance, only one better than the baseline by a margin."""
    units = [u for u in guard.baseline_units if u is not None]
    if not units:
        return None
    counts = guard.unit_counts or (1.0,) * len(units[0])
    if len(counts) < 2 or any(
        not (v.is_integer() and 0.0 <= v <= n)
        for run in units
        for v, n in zip(run, counts, strict=True)
    ):
        return None
    if math.fsum(counts) <= 0.0:
        return None
    return z_quantile(1.0 - look_alpha(1)) * math.sqrt(counting_floor(counts))


def unsettleable(guard: AccuracyGuard) -> Reason | None:
    """Why no check can settle a change of the numerics against ``guard``, or None where one
    can: the baseline's metric moved the wrong way or did not move measurably in its accuracy
    budget (every check would compare untrained models), or the validation set's own noise
    (:func:`validation_floor`) is more than twice the tolerance (a pair counts a gain of at
    most the tolerance, so none confirms). How many seeds a check needs is the budget's to
    decide, not this rule's (see :mod:`autotune._search.evidence`)."""
    if guard.wrong_way:
        return Reason.WRONG_WAY
    if not guard.learned:
        return Reason.NOT_LEARNED
    floor = validation_floor(guard)
    if floor is None or floor <= 2.0 * guard.tolerance:
        return None
    return Reason.ZERO_TOLERANCE if guard.tolerance <= 0 else Reason.SMALL_VALIDATION


def steady_runs(guard: AccuracyGuard) -> list[float]:
    """The baseline's runs but those far behind their others (:func:`lagging_run`): the
    spread screening allows is theirs."""
    runs = list(guard.baseline_runs)
    lag = lagging_run(runs, higher_is_better=guard.higher_is_better, tolerance=guard.tolerance)
    if lag is None:
        return runs
    return [r for i, r in enumerate(runs) if i not in lag["seeds"]]


def screening_violation(guard: AccuracyGuard, runs: Sequence[Any]) -> float:
    """:meth:`AccuracyGuard.violation` of a candidate's screening ``runs`` (its accuracy
    runs: their mean metric; one run's own seed and per-unit values)."""
    metric = statistics.fmean(run.metric for run in runs)
    if len(runs) != 1:
        return guard.violation(metric)
    return guard.violation(metric, runs[0].seed, runs[0].units)


def screening_margin(
    guard: AccuracyGuard, seed: int, drop: float, units: Sequence[float] | None
) -> float:
    """The drop a candidate's screening run (``seed``, ``drop``, its per-unit values
    ``units``) may show and pass: :attr:`AccuracyGuard.screening_margin`, and at least the
    tolerance plus what one pair of a candidate *at* the tolerance varies by (one-sided 95%):
    the pairs' spread (the baseline's runs' where no check measured it) and the validation
    sample's own noise in this candidate's drop. The sample's part is shared by every run of
    the candidate, its check's pairs too: a margin without it passes only the candidates that
    drew below the tolerance, so the first to pass is a selected one and the first check's
    level no longer holds (``guard_error_rates.py``, ``quiet-6``); with it a candidate at the
    tolerance passes about 19 times in 20."""
    margin = guard.screening_margin
    noise = _noise_over(guard, (seed,), units, [drop], None)  # None without units
    if noise is None:
        return margin
    runs = steady_runs(guard)
    pair = 2.0 * statistics.variance(runs) if len(runs) >= 2 else 0.0
    if guard.paired_spread is not None and guard.paired_dof > 0:
        # The smaller, as the baseline's margin takes it: pairs that hold a lagging baseline
        # run vary by its gap, which would pass candidates clearly behind.
        pair = min(pair, guard.paired_spread**2) if len(runs) >= 2 else guard.paired_spread**2
    return max(margin, guard.tolerance + z_quantile(CONFIDENCE) * math.sqrt(pair + noise.variance))


def _noise_over(
    guard: AccuracyGuard,
    seeds: Sequence[int],
    units: Sequence[float] | None,
    drops: Sequence[float],
    squares: float | None,
) -> SampleNoise | None:
    """:meth:`AccuracyGuard.sample_noise` of the pairs of ``seeds`` (``units``: the
    candidate's sums over them, ``drops`` and ``squares`` theirs)."""
    pairs = len(seeds)
    base = [guard.baseline_units[s] if s < len(guard.baseline_units) else None for s in seeds]
    if units is None or pairs < 1 or any(b is None for b in base):
        return None
    if any(len(b) != len(units) for b in base if b is not None):
        return None
    sign = worse(1.0, guard.higher_is_better)
    # Array arithmetic: a check may hold dozens of seeds of thousands of validation units.
    rows = np.asarray(base, dtype=float)
    differences = (sign * (rows.sum(axis=0) - np.asarray(units, dtype=float)) / pairs).tolist()
    counts = guard.unit_counts or (1.0,) * len(units)
    items = np.asarray(counts, dtype=float)
    counting = bool(np.all((rows == np.floor(rows)) & (rows >= 0.0) & (rows <= items)))
    return sample_noise(differences, counts, counting=counting, drops=drops, squares=squares)


def counted_noise(
    guard: AccuracyGuard,
    units: Sequence[float] | None,
    drops: Sequence[float],
    squares: float | None = None,
    first: int = 0,
    capped: Sequence[tuple[int, Sequence[float]]] | None = None,
    *,
    plain: SampleNoise | None = None,
) -> SampleNoise | None:
    """The validation sample's noise in the mean of the *counted* drops
    (:func:`counted_drops`): :meth:`AccuracyGuard.sample_noise`'s, less the pairs the
    candidate won by more than the tolerance by more than :data:`CAPPED_MARGIN` of that pair's
    own sample error (``capped``: the candidate's per-unit values of such seeds). Such a pair counts
    as ``-tolerance`` whatever the sample says, so its disagreements move the counted mean
    by nothing (a lagging baseline run's many disagreements would otherwise make the next
    look cost far more seeds); the rest is the kept pairs' noise in their mean, scaled by
    their share of the pairs. A pair within the margin keeps its noise (it might have been
    counted as it is), and where every pair would leave, none does. ``plain``:
    :meth:`AccuracyGuard.sample_noise`'s, where the caller has it already."""
    noise = plain if plain is not None else guard.sample_noise(units, drops, squares, first)
    if noise is None or units is None or not capped:
        return noise
    n = len(drops)
    sign = worse(1.0, guard.higher_is_better)
    counts = guard.unit_counts or (1.0,) * len(units)
    total = math.fsum(counts)
    out: dict[int, Sequence[float]] = {}
    for seed, values in capped:
        i = seed - first
        base = guard.baseline_units[seed] if 0 <= seed < len(guard.baseline_units) else None
        if not 0 <= i < n or base is None or not len(base) == len(values) == len(units):
            continue
        diffs = [sign * (b - c) for b, c in zip(base, values, strict=True)]
        mean = math.fsum(diffs) / total
        spread = math.fsum((x - mean * m) ** 2 for x, m in zip(diffs, counts, strict=True))
        error = math.sqrt(len(diffs) / max(len(diffs) - 1, 1) * spread) / total
        if drops[i] < -guard.tolerance - CAPPED_MARGIN * error:
            out[seed] = values
    if not out or len(out) >= n:
        return noise
    seeds = [s for s in range(first, first + n) if s not in out]
    kept_units = [u - math.fsum(values[j] for values in out.values()) for j, u in enumerate(units)]
    kept_squares = None
    if squares is not None:
        removed = math.fsum(
            (b - c) ** 2
            for seed, values in out.items()
            for b, c in zip(guard.baseline_units[seed] or (), values, strict=True)
        )
        kept_squares = max(0.0, squares - removed)
    kept = _noise_over(guard, seeds, kept_units, [drops[s - first] for s in seeds], kept_squares)
    if kept is None:
        return noise
    share = (len(seeds) / n) ** 2
    return dataclasses.replace(
        kept,
        variance=kept.variance * share,
        shrinks=kept.shrinks * share,
        floor=kept.floor * share,
        pairs=n,
    )


def settle(
    guard: AccuracyGuard,
    drops: Sequence[float],
    looks: int,
    order: int = 1,
    noise: SampleNoise | None = None,
    bound_noise: SampleNoise | None = None,
) -> Settle:
    """What would settle ``guard``'s unresolved check, with how many seeds at the next look
    (``need``; None: more seeds would not do it). ``noise``: the validation sample's in the
    plain drops (a rejection's); ``bound_noise``: in the counted ones (a confirmation's;
    ``noise`` where not given)."""
    if bound_noise is None:
        bound_noise = noise
    if guard.wrong_way:
        return Settle(reason=Reason.WRONG_WAY)
    if not guard.learned:
        return Settle(reason=Reason.NOT_LEARNED)
    if len(drops) < 2:
        return Settle(reason=Reason.ONE_SEED)
    mean = statistics.fmean(drops)
    if noise is None:
        return Settle(reason=Reason.NO_UNITS)
    # The next look's size follows the pairs' spread and the validation sample's noise, never
    # the interim mean (the error shares assume sizes that do not depend on it): the pairs
    # that would confirm a harmless change (a true drop of 0) at the counted drops' spread
    # LOOK_POWER of the time, at least one more than now.
    counted = counted_drops(drops, guard.tolerance)
    sd = statistics.stdev(counted)
    centred = [d - statistics.fmean(counted) for d in counted]
    planned = seeds_to_settle(
        centred, guard.tolerance, looks + 1, order=order, noise=bound_noise, power=LOOK_POWER
    )
    sizing = bound_noise  # the noise the planned look is sized with
    capped = sum(1 for d, c in zip(drops, counted, strict=True) if c != d)
    reason = Reason.CONFIRM
    if mean > guard.tolerance:
        # Beyond the tolerance so far: the seeds that would reject it, where fewer (a size
        # chosen from a bad-looking mean can only bias the look towards rejecting).
        reject = seeds_to_settle(drops, guard.tolerance, looks + 1, order=order, noise=noise)
        if reject is not None and (planned is None or reject < planned):
            # Sized on the plain drops, as the lower bound that rejects takes them.
            planned, reason = reject, Reason.REJECT
            sd, capped, sizing = statistics.stdev(drops), 0, noise
    assert sizing is not None
    floor = sample_floor(sizing, looks, order)
    if planned is None:
        # Sized for a harmless change: one better than the baseline may still confirm.
        if floor >= guard.tolerance:
            return Settle(reason=Reason.SAMPLE_AS_WIDE, floor=floor)
        if floor > guard.tolerance / 2:
            return Settle(reason=Reason.SAMPLE_TOO_WIDE, floor=floor, spread=sd, mean=mean)
        return Settle(reason=Reason.SPREAD_TOO_WIDE, spread=sd, mean=mean)
    need = max(planned, len(drops) + 1)
    return Settle(reason=reason, need=need, spread=sd, mean=mean, counted=capped, floor=floor)


def _advice_facts(advice: Settle | None) -> dict[str, Any]:
    """What a guard's JSON says of its :meth:`AccuracyGuard.advice`: the reason's code and
    figures (no words: they are rendered when shown)."""
    if advice is None:
        return {"advice_reason": None}
    return {"advice_reason": advice.reason.value, "advice_facts": advice.facts()}


# A check as stored, its rank among the study's checks, and as judged from them.
Judged = tuple[Confirmation, int, Confirmation]


def rejudged(
    confirmations: Mapping[str, Confirmation], guard: AccuracyGuard
) -> dict[str, Confirmation]:
    """The confirmations, each judged from its stored runs under ``guard`` (its tolerance,
    the baseline's runs as they are now), at the look it was filed at: a verdict is derived,
    never carried over. Each check's share of the answer's error rate follows from its rank
    among the study's checks (by the order each was opened in, then its trial), so that two
    checks never spend the same share. A check whose runs failed (no test was made, nothing
    can be confirmed by it) takes no rank: it spends none of the error rate."""
    return {key: judged for key, (_, _, judged) in judge(confirmations, guard).items()}


def judge(
    confirmations: Mapping[str, Confirmation],
    guard: AccuracyGuard,
    earlier: Mapping[str, Judged] | None = None,
) -> dict[str, Judged]:
    """:func:`rejudged`, with what each check was judged from. ``earlier``: the study's
    checks judged under this same guard before; one stored and ranked as it was then keeps
    that verdict (a verdict is a function of the guard, the stored check and its rank), so
    that filing one check does not judge every other again."""
    ranked = sorted(confirmations.items(), key=lambda kv: (kv[1].order, kv[1].trial or 0, kv[0]))
    out: dict[str, Judged] = {}
    rank = 0
    for key, stored in ranked:
        c = stored
        before = (earlier or {}).get(key)
        if c.tested:
            rank += 1
        if c.tested and before is not None and before[1] == rank and before[0] == stored:
            c = before[2]
        elif c.tested:
            c = guard.confirm(
                c.runs,
                units=c.units,
                squares=c.squares,
                looks=c.looks,
                order=rank,
                trial=c.trial,
                at=c.at,
                first=c.first_seed,
                capped=c.capped_units,
            )
        out[key] = (stored, rank, c)
    return out

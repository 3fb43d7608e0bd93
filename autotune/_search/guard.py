"""The accuracy guard: is a candidate's validation metric within tolerance of the baseline's?

**What a pair shares, and what it does not.** A candidate's accuracy run with data-order seed
``s`` and the baseline's run with seed ``s`` start from the same initial weights, see the same
training samples in the same order (the same DataLoader generator seed; augmentation drawn in
the loader's workers is not shared where the worker seeding differs) and are scored on the same
validation examples, in the same batches. Both arms, and the baseline's own runs, train the
same numerics-free settings: the baseline's, with the pinning, memory-format, optimizer-kernel
and thread knobs of the fastest safe config measured before the baseline's runs
(``_knobs.pair_base``; never loader workers, compile or cuDNN benchmark), and the
candidate's checkpointing, which only trades memory. So a pair differs only in the numerics
being judged (batch size and accumulation, precision, LR schedule), and each run costs about
what the safe answer's training costs. What the pair does not share: every random draw that
the judged change moves (a larger batch consumes the data order differently; dropout and other
in-model RNG streams advance with the batch), and the kernels a different precision selects.
What pairing cancels is the noise the two runs share; what is left, it measures from the pairs.

The guard decides in two steps:

- **Screening** (every candidate whose numerics change, one run, seed 0): rejected only for a
  drop larger than the tolerance plus what one pair can vary by (without per-example values,
  the larger of the two: :attr:`AccuracyGuard.screening_margin`). The screening run is not a
  pair of the confirmation (:data:`FIRST_PAIR`): it selected the candidate, so a run that
  passed it is a lucky one more often than not, and a test that counted it would lean towards
  accepting. Before any confirmation that
  variation is bounded by the baseline's own seed-to-seed spread (lenient); once confirmations
  have measured how much paired differences really vary, by that (much tighter, since the
  shared noise cancels), so a clearly worse candidate is not sent to a costly confirmation.
- **Confirmation**, a sequential non-inferiority test on the mean paired drop ``δ`` (how much
  worse the candidate is on the *data* the validation set was drawn from; negative: better). H0:
  ``δ > tolerance``. The standard error has two parts: the seeds' (``s² / n``, the pairs' own
  spread) and the validation sample's (the same examples judge every seed, so more seeds do not
  shrink it), which the runs' per-example outcomes measure (:func:`sample_noise`: over the
  validation units, conservatively; never below what ``3 / N`` of the examples disagreeing would
  give for a counting metric). Without per-example values (a trainer's logged metric) that part
  cannot be bounded, and nothing is confirmed. At each look the one-sided bounds (Student's
  t, Welch-Satterthwaite degrees of freedom with the seeds' variance at an upper confidence
  limit, 75% at the first look of the first check and higher at the smaller levels after it:
  :func:`conservative_dof`) are taken at level ``1 - α_{j,k}``:
  *confirmed* when the upper bound is within the tolerance, *rejected* when the lower bound is
  beyond it, otherwise *unresolved* (and it says how many seeds the next look takes: those
  that would confirm a harmless change at the pairs' spread, never chosen from the interim
  mean; or that a larger validation set would settle it). The upper bound is taken over the
  *counted* drops (:func:`counted_drops`): a pair where the candidate is better by more than
  the tolerance counts as better by the tolerance. ``E[max(d, -tol)] >= E[d]``, so a bound on
  the counted mean bounds the drop too (conservatively), and a baseline run far behind its
  others (a constant rate's noisy last iterate: one pair better by 0.23) no longer widens the
  bound of a candidate that beats it. The validation sample's part is the counted drops':
  a pair won by more than the tolerance by several of its own sample errors counts as
  ``-tolerance`` whatever the sample says, so its disagreements leave that part
  (:func:`counted_noise`; the candidate's per-example values of such seeds are
  kept with the check); every other pair keeps its noise. The lower bound, which rejects, is
  the plain drops', with every pair's noise.
  **The error rate is held for the
  answer**: the study's ``j``-th check may spend ``α_j = α w_j`` and its ``k``-th look ``α_j
  w_k``, with ``w_1 = 3/4`` and ``w_k =
  1 / (4 (k - 1) k)`` after (:func:`share`: most to the first, where checks settle inside a
  budget); their sum over any number of checks and looks stays below ``α = 1 - CONFIDENCE``,
  so the answer (the fastest confirmed candidate) is a candidate whose true drop is beyond the
  tolerance with probability at most ``α`` (a union bound; rejections are non-binding, so
  they cannot raise it). The bound is as good as its normal approximation: a failure mode
  that no run of a check has shown (a run that fails to take off 1 time in 10) slips through
  *any* test on a few pairs, since ``n`` pairs all miss a mode of rate ``f`` with probability
  ``(1 - f)^n``
  (``benchmarks/guard_error_rates.py`` measures how often, beside that floor). So the error
  rate is claimed for drops whose modes the pairs show, and a confirmation says how often a
  mode of 1 run in 10 goes unseen in its pairs (:func:`unseen_chance`: 73% at 3 pairs, 48%
  at 7, 12% at 20), stored with it; ``min_pairs`` holds every confirmation until it has that
  many pairs. A confirmation states one confidence, the answer's (:func:`answer_claim`); a
  drop whose seeds' part is skewed towards harm (a lognormal tail) and dominates the pairs is
  not held: a few pairs mostly miss its rare, much worse runs (simulated, the answer's rate
  about 0.07 with that part 4x the validation's, and a first look's 0.10-0.17 on 2-16 pairs of
  a pure skew: ``guard_error_rates.py --skew-table``, which shows the wider bound that would
  hold it costing a third to a half of the power).

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

import numpy as np
from scipy import stats

from autotune._search import words

__all__ = [
    "ALPHA",
    "FIRST_PAIR",
    "SHORT_LOOK",
    "AccuracyGuard",
    "AccuracyPlan",
    "Confirmation",
    "SampleNoise",
    "Verdict",
    "answer_claim",
    "check_alpha",
    "confirming_bound",
    "conservative_dof",
    "counted_drops",
    "counted_noise",
    "lag_words",
    "lagging_run",
    "look_alpha",
    "look_settles",
    "percent",
    "plan_accuracy_budget",
    "question_runs",
    "screening_margin",
    "screening_violation",
    "settle_advice",
    "share",
    "shares_spent",
    "spent_alpha",
    "steady_runs",
    "t_quantile",
    "unseen_chance",
    "unseen_note",
    "unseen_rate",
    "unsettleable",
    "validation_floor",
]

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE  # a confirmation's false-accept rate, across all its looks
ACCURACY_SHARE = 0.25  # of the whole budget, the most the baseline's accuracy runs may take
TARGET_EPOCHS = 3  # the accuracy budget when time allows: three epochs (and >= 64 steps)
MIN_STEPS = 8  # baseline steps an accuracy run takes at the least
LEARNED = 2.0  # the baseline must move its metric by this many of its own spreads (std) to learn
MIN_LEARNED_SEEDS = 2  # ... or this many of its seeds must each move it by more than the tolerance
MAX_NEED = 10_000  # seeds beyond which an unresolved check counts as unsettleable
LOOK_POWER = 0.8  # a next look is sized to confirm a harmless change this often
# A check's first pair: seed 0 is the candidate's screening run, which chose it (a run that
# passed screening is likelier than not a lucky one), so a confirmation pairs the seeds after.
FIRST_PAIR = 1
# The fewest pairs with a bound: a check's first look where the baseline's runs say that two
# would settle a harmless change (see :meth:`AccuracyGuard.first_pairs`).
SHORT_LOOK = 2
# Of the answer's error rate, the share the study's first check may spend, and of a check's,
# the share its first look may (see :func:`share`).
FIRST_SHARE = 0.75


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, dof: float) -> float:
    return float(stats.t.ppf(q, dof))


def percent(confidence: float) -> str:
    """A confidence as a percentage that never rounds up to a certainty: ">99.9%"."""
    return ">99.9%" if confidence > 0.999 else f"{confidence:.1%}"


def unseen_rate(pairs: int) -> float:
    """The largest share of runs that a failure mode (a run that does not take off, diverges,
    ...) may have and still go unseen in ``pairs`` pairs with probability ``ALPHA``: ``1 -
    ALPHA^(1/n)``. No test on ``n`` pairs can tell such a mode from its absence."""
    return 1.0 - float(ALPHA ** (1.0 / max(pairs, 1)))


def share(k: int) -> float:
    """The ``k``-th (1, 2, ...) of a sequence's shares of an error rate: :data:`FIRST_SHARE` for
    the first, ``(1 - FIRST_SHARE) / ((k - 1) k)`` after it. They sum to 1 over any number of
    terms, and the first gets most: a budget rarely holds more than a check or two of a look
    or two each, and the first look of the first check is where most checks that settle do."""
    return FIRST_SHARE if k == 1 else (1.0 - FIRST_SHARE) / ((k - 1) * k)


def shares_spent(k: int) -> float:
    """The first ``k`` shares together: ``1 - (1 - FIRST_SHARE) / k`` (0 for none)."""
    return 0.0 if k <= 0 else 1.0 - (1.0 - FIRST_SHARE) / k


def check_alpha(order: int) -> float:
    """The error rate the ``order``-th check of a study (1, 2, ...) may spend over all its
    looks: ``α`` times its :func:`share`, which sums to at most ``α`` over any number of
    checks, so the *answer* (the fastest confirmed candidate) is a false accept with
    probability at most ``α`` however many candidates were checked."""
    return ALPHA * share(order)


def look_alpha(look: int, order: int = 1) -> float:
    """The error rate the ``look``-th look (1, 2, ...) of the ``order``-th check may spend: the
    check's, times the look's :func:`share`."""
    return check_alpha(order) * share(look)


def spent_alpha(looks: int, order: int = 1) -> float:
    """The error rate ``looks`` looks of the ``order``-th check have spent in all."""
    return check_alpha(order) * shares_spent(looks)


@dataclasses.dataclass(frozen=True)
class SampleNoise:
    """The validation sample's own noise in a mean paired drop over ``pairs`` pairs: its
    ``variance`` (of the mean drop as an estimate for the data the validation set was drawn
    from) and the degrees of freedom of that estimate; ``shrinks``, the part of it that more
    seeds would reduce (an example's outcome varying from seed to seed), the rest being what
    the same examples judging every seed leaves however many seeds there are."""

    variance: float
    dof: float
    shrinks: float = 0.0
    pairs: int = 1
    floor: float = 0.0

    def replace_variance(self, variance: float) -> SampleNoise:
        return dataclasses.replace(self, variance=variance)

    def at(self, pairs: int) -> float:
        """The variance expected over ``pairs`` pairs, were the runs' spreads to hold."""
        fixed = self.variance - self.shrinks
        return max(self.floor, fixed + self.shrinks * self.pairs / max(pairs, 1))


def sample_noise(
    differences: Sequence[float],
    counts: Sequence[float],
    *,
    counting: bool,
    drops: Sequence[float] = (),
    squares: float | None = None,
) -> SampleNoise | None:
    """The validation sample's noise in a mean paired drop, from the per-unit ``differences``
    (the baseline's sum less the candidate's in each validation unit, averaged over the pairs
    and signed so that positive is worse) and the items each unit counts: the ratio
    estimator's variance over units, ``U / (U - 1) Σ (d_u - D n_u)² / N²``.

    In a seed x example analysis of variance the mean drop's variance is ``σ²_seed / n +
    σ²_example / N + σ²_within / (n N)``; the pairs' own spread measures the first and last
    terms, and this estimate holds the last two (the within term counted twice: conservative;
    subtracting it, as the analysis would, made the bound too narrow in simulation at the
    small error rates of later checks). With one item per unit, the pairs' ``drops`` and
    ``squares`` (the sum over pairs and units of the squared per-unit differences) say how
    much of it is the within term, which more seeds reduce (:meth:`SampleNoise.at`).

    For a ``counting`` metric (correct predictions: a unit's difference is at most its items),
    never less than if ``3 / U`` of the units (the 95% bound on a rate never observed in
    ``U``) disagreed entirely: identical predictions on a finite sample bound the disagreement
    on the data, they do not make it zero."""
    units = len(differences)
    total = float(sum(counts))
    if units < 2 or total <= 0.0:
        return None
    drop = math.fsum(differences) / total
    spread = math.fsum((d - drop * n) ** 2 for d, n in zip(differences, counts, strict=True))
    variance = units / (units - 1) * spread / total**2
    n = len(drops)
    shrinks = 0.0
    if squares is not None and n >= 2 and all(c == 1.0 for c in counts):
        within_ss = (
            squares
            - n * math.fsum(d * d for d in differences)
            - units * math.fsum(x * x for x in drops)
            + n * units * drop * drop
        )
        within = max(0.0, within_ss) / ((n - 1) * (units - 1))  # MS_within
        shrinks = min(variance, within / (n * units))
    floor = counting_floor(counts) if counting else 0.0
    if variance <= floor:
        if floor <= 0.0:
            return None
        return SampleNoise(variance=floor, dof=float(units - 1), pairs=max(n, 1), floor=floor)
    return SampleNoise(
        variance=variance, dof=float(units - 1), shrinks=shrinks, pairs=max(n, 1), floor=floor
    )


def standard_error(
    drops: Sequence[float], noise: SampleNoise | None, alpha: float | None = None
) -> tuple[float, float] | None:
    """(standard error, degrees of freedom) of the mean paired drop as an estimate of the
    drop on the data: the seed-to-seed part from the pairs (``s² / n``) plus the validation
    sample's part (``noise``), with Welch-Satterthwaite degrees of freedom. None: no bound
    (one pair, or pairs that agree exactly with nothing to say what the validation sample's
    noise is: a zero spread is not a certainty)."""
    n = len(drops)
    if n < 2:
        return None
    seed = statistics.variance(drops) / n
    if noise is None:
        return (math.sqrt(seed), float(n - 1)) if seed > 0.0 else None
    total = seed + noise.variance
    if total <= 0.0:
        return None
    return math.sqrt(total), conservative_dof(seed, n, noise, alpha)


MAX_SEED_QUANTILE = 0.25  # see :func:`seed_quantile`


@functools.lru_cache(maxsize=1024)
def _chi2(q: float, dof: int) -> float:
    return float(stats.chi2.ppf(q, dof))


def seed_quantile(alpha: float) -> float:
    """Where the seeds' variance is taken for the degrees of freedom: its upper confidence
    limit at ``1 - q``, ``q = min(0.25, 10 α)`` for a look at level ``α`` (a later look's
    smaller level needs the more conservative limit)."""
    return min(MAX_SEED_QUANTILE, 10.0 * alpha)


def conservative_dof(
    seed: float, n: int, noise: SampleNoise | None, alpha: float | None = None
) -> float:
    """Degrees of freedom of a standard error whose variance is ``seed`` (the pairs' part, from
    ``n`` pairs) plus the validation sample's (``noise``), for a bound at level ``α`` (the
    first look's where not given): Welch-Satterthwaite's, computed with the seed part at its
    upper confidence limit ``seed (n - 1) / χ²_q(n - 1)`` (:func:`seed_quantile`), and never
    more than Welch-Satterthwaite's own. Plain Welch-Satterthwaite treats a seed variance
    estimated from 2-3 pairs as nearly known once it happens to come out small: simulated at
    the first look's level (0.028) it let 0.033-0.041 false accepts through at 3 pairs, 0.066
    at 2, with the seed part 1-16x the validation part, and 2-3.5x the level at a later look's
    0.0047. With the upper limit, at most 1.07x the level over seed parts 1/16-64x the
    validation part and 2-16 pairs at 0.028, and under the level at 0.0047 and 0.0016; the
    pairs' own ``n - 1`` (Hsu's rule) held it too, but gave up most of the first look's power
    where the validation part dominates. Pairs that agree exactly bound nothing about the
    seeds: their part is taken as large as the validation sample's."""
    if noise is None or noise.dof <= 0 or n < 2:
        return float(max(n - 1, 1))
    q = seed_quantile(look_alpha(1) if alpha is None else alpha)
    sample = noise.variance
    welch = _satterthwaite(seed, n, sample, noise.dof)
    upper = seed * (n - 1) / _chi2(q, n - 1) if seed > 0.0 else sample
    return float(min(welch, _satterthwaite(upper, n, sample, noise.dof)))


def _satterthwaite(seed: float, n: int, sample: float, sample_dof: float) -> float:
    total = seed + sample
    parts = seed**2 / (n - 1) + sample**2 / sample_dof
    return total**2 / parts if parts > 0.0 else float(n - 1)


def paired_bounds(
    drops: Sequence[float], look: int, *, order: int = 1, noise: SampleNoise | None = None
) -> tuple[float, float, float]:
    """(mean, lower, upper): the mean paired drop and its one-sided confidence bounds at the
    level of the ``look``-th look of the ``order``-th check (infinite where there is no
    bound; see :func:`standard_error`)."""
    mean = statistics.fmean(drops)
    alpha = look_alpha(look, order)
    se = standard_error(drops, noise, alpha)
    if se is None:
        # Pairs that agree exactly bound nothing above; they may still reject (a rejection
        # is non-binding: it cannot raise the false-accept rate).
        lower = mean if len(drops) > 1 and statistics.variance(drops) == 0.0 else -math.inf
        return mean, lower, math.inf
    half = t_quantile(1.0 - alpha, se[1]) * se[0]
    return mean, mean - half, mean + half


def counted_drops(drops: Sequence[float], tolerance: float) -> list[float]:
    """The paired ``drops`` a confirmation bounds: a pair where the candidate is better by more
    than the ``tolerance`` counts as better by it: ``max(d, -tolerance)``. Since
    ``E[max(d, -tol)] >= E[d]``, a test that the counted mean is within the tolerance holds
    the false-accept rate for the drop itself; what it removes is the spread that gains beyond
    the question put into the bound (a baseline run that lags its others). Simulated
    (``guard_error_rates.py``, 300 searches a row), counting at the tolerance confirmed about
    half the harmless candidates at the first look where baseline runs lag (0.47-0.49, against
    0.31-0.33 at twice the tolerance and 0.19-0.31 with no counting) and held the false
    accepts of every row the plain rule held; its cost is the power of checks whose pairs'
    spread is several tolerances, over many looks (0.50 against 0.60 at 48 seeds)."""
    return [max(d, -tolerance) for d in drops]


@dataclasses.dataclass(frozen=True)
class UpperBound:
    """The bound a confirmation is judged by (:func:`confirming_bound`): ``bound`` (infinite
    where none), the ``mean`` of the drops it bounds, ``counted`` (the pairs it counted as
    better by the tolerance, being better by more) and ``p``, the p-value of "the drop is beyond the
    tolerance" on those drops (the confidence a confirmation states)."""

    bound: float
    mean: float
    counted: int
    p: float


def confirming_bound(
    drops: Sequence[float],
    tolerance: float,
    look: int,
    *,
    order: int = 1,
    noise: SampleNoise | None = None,
) -> UpperBound:
    """The upper bound of the counted drops (:func:`counted_drops`) at the look's level, the
    validation sample's ``noise`` included; without that noise (nothing is confirmed then),
    the plain drops' bound."""
    counted = counted_drops(drops, tolerance) if noise is not None else list(drops)
    mean, _, upper = paired_bounds(counted, look, order=order, noise=noise)
    capped = sum(1 for d, c in zip(drops, counted, strict=True) if c != d)
    return UpperBound(upper, mean, capped, p_inferior(counted, tolerance, noise))


def p_inferior(drops: Sequence[float], tolerance: float, noise: SampleNoise | None = None) -> float:
    """The one-sided p-value of H0 ``δ >= tolerance`` (Student's t on the paired drops, the
    validation sample's noise included): small when the drops are clearly within the
    tolerance; 1 where there is no bound."""
    se = standard_error(drops, noise)
    if se is None:
        return 1.0
    return float(stats.t.sf((tolerance - statistics.fmean(drops)) / se[0], se[1]))


def seeds_to_settle(
    drops: Sequence[float],
    tolerance: float,
    look: int,
    *,
    order: int = 1,
    noise: SampleNoise | None = None,
    power: float = 0.5,
) -> int | None:
    """The fewest pairs with which the ``look``-th look would settle the check (either way),
    were the drops' mean and spread (and the validation sample's noise, which more seeds do
    not reduce) to hold; None beyond :data:`MAX_NEED` (a drop at the tolerance itself never
    settles, nor one within the validation sample's own noise of it). ``power``: the chance
    that a look of that size settles it where that is the truth (0.5: the bound just reaches
    the tolerance; a look sized to settle half the time leaves the other half unresolved)."""
    n = len(drops)
    if n < 2:
        return None
    gap = abs(statistics.fmean(drops) - tolerance)
    seed_var = statistics.variance(drops)
    if gap == 0.0:
        return None
    alpha = look_alpha(look, order)

    def settles(m: int) -> bool:
        return look_settles(seed_var, m, gap, alpha, noise, power)

    if not settles(MAX_NEED):
        return None
    lo, hi = max(2, n), MAX_NEED  # settles(hi); the bound shrinks as seeds grow
    if settles(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if settles(mid) else (mid, hi)
    return hi


def look_settles(
    seed_var: float,
    pairs: int,
    gap: float,
    alpha: float,
    noise: SampleNoise | None,
    power: float = 0.5,
) -> bool:
    """Whether a look of ``pairs`` pairs at level ``alpha`` settles a drop ``gap`` from the
    tolerance with probability ``power``, were the pairs' variance ``seed_var`` and the
    validation sample's ``noise`` to hold."""
    sample = noise.at(pairs) if noise is not None else 0.0
    part = seed_var / pairs
    total = part + sample
    if total <= 0.0:
        return False
    dof = conservative_dof(part, pairs, noise.replace_variance(sample) if noise else None, alpha)
    return (t_quantile(1.0 - alpha, dof) + _z(power)) * math.sqrt(total) < gap


@functools.lru_cache(maxsize=16)
def _z(power: float) -> float:
    return float(stats.norm.ppf(power))


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
    ``confidence`` this check's own margin, kept in the study: one less its earlier looks'
    error shares and this look's p-value. It is not the answer's confidence (which counts
    every check's share: :func:`answer_claim`), so the result's JSON does not show it. A
    confirmation whose runs failed carries the ``failure`` message."""

    runs: tuple[float, ...]  # the candidate's metric per seed (first_seed, first_seed + 1, ...)
    verdict: Verdict
    # The seed of the first run: FIRST_PAIR (checks filed before it existed paired from 0).
    first_seed: int = 0
    # The candidate's metric sums per validation unit, summed over its seeds (None: the
    # metric has no units, a trainer's logged one): with the baseline's, the validation
    # sample's own noise in the mean drop.
    units: tuple[float, ...] | None = None
    squares: float | None = None  # Σ over seeds and units of the squared paired difference
    order: int = 1  # the study's order-th check: its share of the answer's error rate
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
    no_bound: str | None = None  # why the pairs give no confidence bound
    sample_error: float | None = None  # the validation sample's part of the standard error
    counted: int | None = None  # pairs better by more than the tolerance, counted at it
    # The counted mean plus the validation sample's own half-width at the next look's level
    # reaches the tolerance, whatever the seeds: no number of them would confirm it.
    wide_sample: bool | None = None
    # The candidate's per-unit values of each seed whose pair it won by more than the
    # tolerance (seed, units): what takes such a pair out of the counted bound's validation
    # noise (see :func:`counted_noise`).
    capped_units: tuple[tuple[int, tuple[float, ...]], ...] | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.CONFIRMED

    @property
    def confirmable(self) -> bool:
        """Whether more seeds could still confirm it: its runs bound the validation sample's
        error (per-example values were recorded), or there are not yet two pairs to tell."""
        return (
            self.failure is None
            and not self.wide_sample
            and (len(self.runs) < 2 or self.sample_error is not None)
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "runs": list(self.runs),
            "verdict": self.verdict.value,
            "passed": self.passed,
            "looks": self.looks,
            "order": self.order,
            "first_seed": self.first_seed,
            "units": None if self.units is None else [_compact(u) for u in self.units],
        }
        if self.capped_units:
            out["capped_units"] = {
                str(seed): [_compact(u) for u in units] for seed, units in self.capped_units
            }
        for key in _OPTIONAL:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.runs:
            # Derived, stored for readers of the JSON: how likely these pairs missed a mode.
            out["unseen_one_in_ten"] = round(unseen_chance(len(self.runs)), 4)
        return out

    def summary(self) -> dict[str, Any]:
        """What a result's JSON shows of it: all but the per-example values (which stay in
        the study, where the verdict is derived from them)."""
        out = self.to_dict()
        out.pop("units", None)
        out.pop("squares", None)
        out.pop("capped_units", None)
        out.pop("confidence", None)  # this check's own, not the answer's (see the class)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmation:
        units = data.get("units")
        capped = data.get("capped_units")
        return cls(
            capped_units=None
            if not capped
            else tuple(
                sorted(
                    (int(seed), tuple(float(u) for u in values)) for seed, values in capped.items()
                )
            ),
            runs=tuple(float(r) for r in data.get("runs") or ()),
            verdict=Verdict(data["verdict"]),
            looks=int(data.get("looks") or 1),
            order=int(data.get("order") or 1),
            first_seed=int(data.get("first_seed") or 0),
            units=None if units is None else tuple(float(u) for u in units),
            **{key: data.get(key) for key in _OPTIONAL},
        )

    def describe(self) -> str:
        if self.drop is None:
            return str(self.failure)
        text = f"mean paired drop {self.drop:+.4f} over {len(self.runs)} seeds"
        if self.bound is None or self.lower is None:
            text += f", no confidence bound ({self.no_bound or 'one seed'})"
            if self.verdict is Verdict.REJECTED and self.lower is not None:
                text += f"; every pair {self.lower:+.4f} worse, beyond it"
            return text
        text += f", upper bound {self.bound:+.4f} (look {self.looks} of check {self.order}"
        if self.counted:
            many = "a pair" if self.counted == 1 else f"{self.counted} pairs"
            text += f"; {many} better by more than the tolerance counted as better by it"
        text += ")"
        if self.tolerance is not None:
            text += f" against tolerance {self.tolerance:g}"
        if self.verdict is Verdict.CONFIRMED:
            text += f": within it; {answer_claim()}; {unseen_note(len(self.runs))}"
        elif self.verdict is Verdict.REJECTED:
            text += f"; lower bound {self.lower:+.4f}, beyond it"
        return text


def answer_claim() -> str:
    """The guarantee a confirmed answer carries, once, in the words a user reads."""
    return (
        f"after the checks' length of training, the answer is within the tolerance with "
        f"{CONFIDENCE:.0%} confidence, one-sided, across every check and look of the search, "
        "for drops whose modes its pairs show"
    )


# A baseline run lags where it trails the median of its others by more than this many
# tolerances and this many times their range: one data order whose training ended somewhere
# else (a constant rate's noisy last iterate, a run that had not taken off yet).
# A pair the candidate won by more than the tolerance leaves the counted bound's validation
# noise where it won by this many of its own sample errors more (see counted_noise).
CAPPED_MARGIN = 3.0
LAG_TOLERANCES = 5.0
LAG_RANGES = 4.0


def lagging_run(
    runs: Sequence[float], *, higher_is_better: bool, tolerance: float
) -> dict[str, Any] | None:
    """The baseline's runs (a minority of 3 or more) that trail its others far beyond their own
    spread: ``seeds`` and ``metrics`` (the worst as ``seed`` and ``metric``) and the
    ``others``' range; None where none does. Every check pairs against them: the README's CNN
    at a constant rate ran seeds 0-2 at 0.98-0.99 and seed 3 at 0.76, and a candidate's pairs
    then varied by ±0.13; bought for a check's second look, its seed 4 lagged too (0.76), and
    with two such runs the one-run rule saw none."""
    if len(runs) < 3 or not all(math.isfinite(r) for r in runs):
        return None
    sign = 1.0 if higher_is_better else -1.0
    order = sorted(range(len(runs)), key=lambda i: sign * runs[i])  # the worst first
    found = None
    for k in range(1, (len(runs) - 1) // 2 + 1):
        behind, others = order[:k], [runs[i] for i in order[k:]]
        gap = sign * (statistics.median(others) - runs[behind[-1]])
        if gap > max(LAG_TOLERANCES * tolerance, LAG_RANGES * (max(others) - min(others))):
            found = (sorted(behind), others)
    if found is None:
        return None
    behind, others = found
    worst = order[0]
    return {
        "seed": worst,
        "metric": runs[worst],
        "seeds": behind,
        "metrics": [runs[i] for i in behind],
        "others": [min(others), max(others)],
    }


def lag_words(lag: Mapping[str, Any], metric: str) -> str:
    """Lagging baseline runs (:func:`lagging_run`), in words."""
    lo, hi = lag["others"]
    seeds = list(lag.get("seeds") or [lag["seed"]])
    metrics = list(lag.get("metrics") or [lag["metric"]])
    if len(seeds) == 1:
        which = f"run of seed {seeds[0]} reached {metric} {metrics[0]:.4f}"
    else:
        names = ", ".join(str(s) for s in seeds[:-1]) + f" and {seeds[-1]}"
        values = ", ".join(f"{m:.4f}" for m in metrics[:-1]) + f" and {metrics[-1]:.4f}"
        which = f"runs of seeds {names} reached {metric} {values}"
    if all(seed < FIRST_PAIR for seed in seeds):
        carried = "the screening runs are judged against it, no check's pair includes it"
    elif len(seeds) == 1:
        carried = "a check's pair of that seed carries it"
    else:
        carried = "a check's pairs of those seeds carry it"
    return (
        f"the baseline's {which} where its others reached {lo:.4f}-{hi:.4f}: the baseline's "
        f"own training varies that much from one data order to the next, and {carried}"
    )


def unseen_chance(pairs: int, rate: float = 0.1) -> float:
    """The chance that ``pairs`` pairs all miss a failure mode that ``rate`` of runs show."""
    return float((1.0 - rate) ** max(pairs, 0))


def unseen_note(pairs: int) -> str:
    """What a confirmation over ``pairs`` pairs cannot rule out, in words."""
    return (
        f"a failure mode of 1 run in 10 would go unseen in {pairs} pairs "
        f"{unseen_chance(pairs):.0%} of the time"
    )


_OPTIONAL = (
    "mean", "drop", "resolution", "bound", "lower", "confidence", "tolerance", "failure",
    "settle", "need", "trial", "at", "no_bound", "sample_error", "squares", "counted",
    "wide_sample",
)  # fmt: skip


def _compact(value: float) -> float | int:
    """A whole number as an int (per-example sums of an accuracy are counts)."""
    return int(value) if value.is_integer() else value


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
        judge them as it judges those two runs. A task whose runs barely vary (GPT-2's
        validation loss varied by ±0.0005 from seed to seed at 2,224 sequences, against a
        tolerance of 0.01) settles a harmless change in two pairs, and a third run would buy
        nothing; one whose runs vary by a good part of the tolerance keeps its three. The
        choice is made before the candidate's first run of its check, from the baseline's runs
        alone, so it cannot lean on what the candidate's pairs show (``guard_error_rates.py``'s
        ``quiet`` rows simulate it)."""
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
        return run - initial if self.higher_is_better else initial - run

    def drop(self, metric: float) -> float:
        """How much worse than the baseline's mean ``metric`` is (negative: better)."""
        diff = self.baseline_metric - metric
        return diff if self.higher_is_better else -diff

    def _paired_drop(self, seed: int, metric: float) -> float:
        diff = self.baseline_runs[seed] - metric
        return diff if self.higher_is_better else -diff

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
        (:func:`lagging_run`) is left out of the spread: bought for a check, the README CNN's
        seed 3 at 0.76 (its others 0.98-0.99) widened the margin from 0.022 to 0.38, and a
        half-length schedule that screening had rejected (0.92) passed and took a check.
        Screening only saves checks; a candidate it passes is still held by its confirmation."""
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
            return dataclasses.replace(
                base, verdict=Verdict.UNRESOLVED, no_bound="no seed paired with the baseline's"
            )
        if not all(math.isfinite(d) for d in drops):
            return dataclasses.replace(base, drop=math.inf, failure="a run's metric is not finite")
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
        settle, need, wide = None, None, None
        if verdict is Verdict.UNRESOLVED and upper <= tol and self.learned and noise is not None:
            more = f"{self.min_pairs} pairs before a confirmation: {self.min_pairs - pairs} more"
            settle, need = f"min_pairs={self.min_pairs} asks for {more}", self.min_pairs
        elif verdict is Verdict.UNRESOLVED:
            settle, need = settle_advice(self, drops, looks, order, noise, counted)
            need = None if need is None else max(need, self.min_pairs)
            if need is None and counted is not None:
                # The counted mean, were it to hold, plus the sample's own half-width: no
                # seeds bring the bound below that (a change clearly better may still confirm).
                wide = judged.mean + sample_floor(counted, looks, order) >= tol or None
        finite = math.isfinite(upper)
        no_bound = None
        if not finite:
            no_bound = (
                "one seed"
                if pairs < 2
                else "the pairs agree exactly, and the metric has no per-example values to "
                "bound the validation sample's noise"
            )
        return dataclasses.replace(
            base,
            verdict=verdict,
            drop=drop,
            resolution=upper - judged.mean if finite else None,
            bound=upper if finite else None,
            lower=lower if math.isfinite(lower) else None,
            confidence=confidence,
            settle=settle,
            need=need,
            no_bound=no_bound,
            sample_error=None if counted is None else math.sqrt(counted.variance),
            counted=judged.counted or None,
            wide_sample=wide,
        )

    def _settle(
        self,
        drops: Sequence[float],
        looks: int,
        order: int = 1,
        noise: SampleNoise | None = None,
    ) -> tuple[str, int | None]:
        """What would settle an unresolved check, and how many seeds at the next look (None:
        more seeds would not do it): see :func:`settle_advice`."""
        return settle_advice(self, drops, looks, order, noise)

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
        floor = validation_floor(self)
        if floor is not None and floor > self.tolerance:
            return small_validation_advice(self, floor)
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
            "lagging_run": lagging_run(
                self.baseline_runs, higher_is_better=self.higher_is_better, tolerance=self.tolerance
            ),
            "accuracy_samples": self.accuracy_samples,
            "paired": True,
            "test": (
                f"sequential non-inferiority: confirmed when the one-sided upper bound of the "
                f"mean paired drop (seed-to-seed and validation-sample noise; a pair better by "
                f"more than the tolerance counted as better by it) is within the "
                f"tolerance; check j, look k at level 1 - {ALPHA:g} w_j w_k (w_1 = "
                f"{FIRST_SHARE:g}, w_k = {1 - FIRST_SHARE:g}/((k-1)k) after), at most "
                f"{ALPHA:g} false accepts for the answer across all checks and looks"
            ),
            "advice": self.advice(),
        }


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
    tolerance, only one better than the baseline by a margin. The tiny BERT's 128 examples
    give ±0.026 against a tolerance of 0.01: four checks ran, each unresolved at a mean paired
    drop of 0.0000."""
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
    return _z(1.0 - look_alpha(1)) * math.sqrt(counting_floor(counts))


def counting_floor(counts: Sequence[float]) -> float:
    """The least variance a counting metric's validation sample may put in a mean drop: as if
    ``3 / U`` of its ``U`` units (each counting ``counts`` items) disagreed entirely (the 95%
    bound on a rate never observed in ``U``)."""
    return 3.0 * max(counts) ** 2 / math.fsum(counts) ** 2


def small_validation_advice(guard: AccuracyGuard, floor: float) -> str:
    """What a validation set too small for the tolerance allows, and what would do
    (``floor``: :func:`validation_floor`)."""
    if guard.tolerance <= 0.0:
        return (
            f"a tolerance of 0 leaves no room for the validation sample's own noise (±{floor:.4f} "
            "at the most lenient look's level whatever the seeds): no change of the numerics "
            "can be confirmed; pass a tolerance above 0"
        )
    examples = len(guard.unit_counts or next(u for u in guard.baseline_units if u))
    need = math.ceil(examples * floor / guard.tolerance)  # the floor falls as 1 / examples
    which = (
        "no change of the numerics can be confirmed"
        if floor > 2.0 * guard.tolerance
        else "only a change better than the baseline by a margin can be confirmed"
    )
    return (
        f"the validation set's {examples} examples are too few for the tolerance "
        f"{guard.tolerance:g}: their own noise, shared by every seed, is ±{floor:.4f} at the "
        f"most lenient look's level whatever the seeds, so {which}. Confirming a harmless "
        f"change takes at least {need} validation examples or a tolerance of at least "
        f"{floor:.2g} (more where the runs disagree on more examples)"
    )


def unsettleable(guard: AccuracyGuard) -> str | None:
    """Why no check can settle a change of the numerics against ``guard``, or None where one
    can: the baseline's metric moved the wrong way or did not move measurably in its accuracy
    budget (every check would compare untrained models), or the validation set's own noise
    (:func:`validation_floor`) is more than twice the tolerance (a pair counts a gain of at
    most the tolerance, so none confirms). How many seeds a check needs is the budget's to
    decide, not this rule's (see :mod:`autotune._search.evidence`)."""
    if guard.wrong_way:
        return "its metric got worse as the baseline trained"
    if not guard.learned:
        return "the baseline did not learn measurably in its accuracy budget"
    floor = validation_floor(guard)
    if floor is None or floor <= 2.0 * guard.tolerance:
        return None
    small = (
        "a tolerance of 0 leaves no room for"
        if guard.tolerance <= 0
        else "the validation set is too small for the tolerance, given"
    )
    return f"{small} the validation sample's own noise, ±{floor:.4f} whatever the seeds"


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
    sample's own noise in this candidate's drop. The sample's part is the candidate's every
    run shares, its check's pairs too: where screening passed only the candidates it drew
    below the tolerance (about half of those at it), the first to pass, checked at the first
    check's level, was a selected one, and six candidates at the tolerance on a quiet task
    were answered 7.1% of the time (``guard_error_rates.py``, ``quiet-6``). With it a
    candidate at the tolerance passes about 19 times in 20, and the order of the checks no
    longer picks the lucky ones."""
    margin = guard.screening_margin
    noise = _noise_over(guard, (seed,), units, [drop], None)  # None without units
    if noise is None:
        return margin
    runs = steady_runs(guard)
    pair = 2.0 * statistics.variance(runs) if len(runs) >= 2 else 0.0
    if guard.paired_spread is not None and guard.paired_dof > 0:
        # The smaller, as the baseline's margin takes it: a check's pairs that held the
        # baseline's lagging run vary by its gap (the idle README run's ±0.13 let a
        # half-length schedule 0.065 behind pass).
        pair = min(pair, guard.paired_spread**2) if len(runs) >= 2 else guard.paired_spread**2
    return max(margin, guard.tolerance + _z(CONFIDENCE) * math.sqrt(pair + noise.variance))


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
    sign = 1.0 if guard.higher_is_better else -1.0
    # Array arithmetic: a check of GPT-2 holds 48 seeds of 8,192 validation sequences, and
    # every look of every check reads them all again.
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
    by nothing; the rest is the kept pairs' noise in their mean, scaled by their share
    of the pairs. The README's CNN, a constant-rate baseline whose seed-3 run lagged at
    0.76: the candidate was right on a quarter of the examples that run got wrong, which
    made the validation sample's part ±0.0071 at the next look's level and the next
    look 157 seeds, while that pair's counted value could not move. A pair within the
    margin keeps its noise (it might have been counted as it is), and where every pair
    would leave, none does. ``plain``: :meth:`AccuracyGuard.sample_noise`'s, where the caller
    has it already (a check is re-judged at every read of the study)."""
    noise = plain if plain is not None else guard.sample_noise(units, drops, squares, first)
    if noise is None or units is None or not capped:
        return noise
    n = len(drops)
    sign = 1.0 if guard.higher_is_better else -1.0
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


def sample_floor(noise: SampleNoise, looks: int, order: int = 1) -> float:
    """The half-width that the validation sample's own ``noise`` alone gives a check's next
    look (after ``looks``), however many seeds it had: where it is as wide as the tolerance,
    no number of seeds would confirm the check."""
    level = t_quantile(1.0 - look_alpha(looks + 1, order), noise.dof)
    return level * math.sqrt(noise.at(MAX_NEED))


def settle_advice(
    guard: AccuracyGuard,
    drops: Sequence[float],
    looks: int,
    order: int = 1,
    noise: SampleNoise | None = None,
    bound_noise: SampleNoise | None = None,
) -> tuple[str, int | None]:
    """What would settle ``guard``'s unresolved check, and how many seeds at the next look
    (None: more seeds would not do it). ``noise``: the validation sample's in the plain drops
    (a rejection's); ``bound_noise``: in the counted ones (a confirmation's; ``noise`` where
    not given)."""
    if bound_noise is None:
        bound_noise = noise
    if guard.wrong_way:
        return guard._wrong_way_advice(), None
    if not guard.learned:
        return (
            f"the baseline's {guard.metric_name} barely moved from the untrained model's in "
            f"{guard.accuracy_samples} samples per run: a longer accuracy budget "
            f"(a longer timeout, or {words.option('accuracy_samples')}) would let the check tell"
        ), None
    if len(drops) < 2:
        return "accuracy_repeats >= 2 would let the check measure its own noise", None
    mean = statistics.fmean(drops)
    if noise is None:
        return (
            f"the {guard.metric_name} has no per-example values (a metric your trainer "
            "logs), so the validation sample's own error, which every seed shares, cannot "
            "be bounded: no number of seeds can confirm it (a rejection still stands); "
            "autotune's own loop (find_best) records them"
        ), None
    # The next look's size follows the pairs' spread and the validation sample's noise,
    # never the interim mean: the pairs that would confirm a harmless change (a true drop
    # of 0) at that spread 80% of the time, at least one more than now. A look sized by
    # how good the candidate looks so far would bias that look's test (the error shares
    # assume sizes that do not depend on the drops' mean); spread and mean are independent.
    # The spread of the drops the confirmation bounds (gains beyond the tolerance counted
    # at it), as the confirming bound takes them.
    counted = counted_drops(drops, guard.tolerance)
    sd = statistics.stdev(counted)
    centred = [d - statistics.fmean(counted) for d in counted]
    planned = seeds_to_settle(
        centred, guard.tolerance, looks + 1, order=order, noise=bound_noise, power=LOOK_POWER
    )
    sizing = bound_noise  # the noise the planned look is sized with
    capped = sum(1 for d, c in zip(drops, counted, strict=True) if c != d)
    counting = f", {capped} better by more than the tolerance counted at it" if capped else ""
    rejecting = False  # the look is sized to reject the drop seen so far
    if mean > guard.tolerance:
        # Beyond the tolerance so far: the seeds that would reject it, where fewer. A size
        # chosen from a mean that looks bad can only bias the look towards rejecting,
        # which the error rate (of false accepts) does not count.
        reject = seeds_to_settle(drops, guard.tolerance, looks + 1, order=order, noise=noise)
        if reject is not None and (planned is None or reject < planned):
            # Sized on the plain drops, as the lower bound that rejects takes them.
            planned, rejecting = reject, True
            sd, counting, sizing = statistics.stdev(drops), "", noise
    assert sizing is not None
    floor = sample_floor(sizing, looks, order)
    if planned is None:
        # Sized for a harmless change (a true drop of 0): one better than the baseline may
        # still be confirmed by more seeds, so the words say what more seeds would not do.
        if floor >= guard.tolerance:
            return (
                f"the validation sample's own noise (±{floor:.4f} at the next "
                f"look's level, whatever the seeds) is as wide as the tolerance "
                f"{guard.tolerance:g}: more seeds would not confirm a change no better than "
                "the baseline; a larger validation set would"
            ), None
        if floor > guard.tolerance / 2:
            return (
                f"the validation sample's own noise (±{floor:.4f} at the next look's level, "
                f"whatever the seeds) leaves too little of the tolerance {guard.tolerance:g} "
                f"beside the pairs' ±{sd:.4f} (mean paired drop {mean:+.4f}): no practical "
                f"number of seeds would confirm a harmless change {LOOK_POWER:.0%} of the "
                "time; a larger validation set would"
            ), None
        return (
            f"its pairs vary by ±{sd:.4f} (mean paired drop {mean:+.4f}): no practical "
            f"number of seeds would confirm a harmless change {LOOK_POWER:.0%} of the time "
            f"against the tolerance {guard.tolerance:g}; a longer accuracy budget might"
        ), None
    need = max(planned, len(drops) + 1)
    would = (
        f"{need} seeds would reject it as often as not, were its drop and spread to hold"
        if rejecting
        else f"{need} seeds would confirm a harmless change at this spread {LOOK_POWER:.0%} of "
        "the time"
    )
    text = (
        f"the paired differences vary by ±{sd:.4f} (mean paired drop {mean:+.4f}{counting}): "
        f"{would} ({words.option('accuracy_repeats', need)}), or a longer accuracy budget "
        "would settle it "
        f"against the tolerance {guard.tolerance:g}"
    )
    lag = lagging_run(
        guard.baseline_runs, higher_is_better=guard.higher_is_better, tolerance=guard.tolerance
    )
    if lag is not None:
        text += f" ({lag_words(lag, guard.metric_name)})"
    if floor > guard.tolerance / 2:
        # Most of the tolerance goes to the noise the same validation examples put in every
        # seed's drop: the seeds are what is left of it (an H100 ResNet check asked for 3,446).
        text += (
            f"; the validation sample's own noise (±{floor:.4f} at the next look's "
            "level, whatever the seeds) takes most of the tolerance: a larger validation set "
            "would need far fewer"
        )
    return text, need


def question_runs(repeats: int) -> int:
    """Accuracy runs the question takes at the least: the baseline's ``repeats``, and one
    check's (the candidate's screening run, its ``repeats`` pairs after it, and the baseline's
    run of the seed its own runs do not reach)."""
    return 2 * repeats + 1 + FIRST_PAIR


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyPlan:
    """How many training samples each accuracy run gets, and, when that is less than an epoch,
    a note that says the guard is weaker and what timeout would give it an epoch. ``fits``:
    whether the baseline's runs and one check fit in the time given for them at all (at the
    shortest horizon a check may use); where not, ``samples`` is that shortest horizon."""

    samples: int
    note: str | None = None
    fits: bool = True
    least: int = 0  # the shortest horizon a check may use (samples per run)


def plan_accuracy_budget(
    *,
    n_train: int,
    batch_size: int,
    throughput: float,
    repeats: int,
    seconds: float | None,
    planned_epochs: float = TARGET_EPOCHS,
    whole_run: bool = False,
    left: float | None = None,
) -> AccuracyPlan:
    """The baseline's accuracy budget: three epochs (at least 64 steps, at most the planned
    run) when time allows; with a time budget, what fits in ``ACCURACY_SHARE`` of ``seconds``
    (the search's whole budget) for ``repeats`` runs, never fewer than ``MIN_STEPS`` steps.
    ``left``: the seconds there are now for the baseline's runs *and* one candidate's check
    (about as many again): the horizon shrinks to what they hold, down to ``MIN_STEPS`` steps,
    rather than the check being dropped (a plan that chose its runs from a share of the whole
    budget, then found them not to fit in the time left, used to drop every check). Less than
    an epoch is said up front: the check is weaker, and which timeout would hold an epoch.
    ``whole_run`` (the space searches the training length): the whole planned run where it
    fits (or with no time budget), so that a shorter run is judged against the recipe it
    would replace, not against a horizon where both may still be climbing."""
    target = max(TARGET_EPOCHS * n_train, 64 * batch_size)
    whole = max(n_train, math.ceil(planned_epochs * n_train))
    target = min(target, whole)
    least = min(target, MIN_STEPS * batch_size)
    planned = math.inf if seconds is None else ACCURACY_SHARE * seconds * throughput / repeats
    # The baseline's runs, and a check's: its screening run, its pairs, and the baseline's
    # run of the seed after its own (a check pairs the seeds after the screening run).
    room = math.inf if left is None else max(0.0, left) * throughput / question_runs(repeats)
    share = min(planned, room)
    if whole_run and whole > target and share >= whole:
        return AccuracyPlan(
            samples=whole,
            least=least,
            note=(
                f"the accuracy runs train the whole planned run ({planned_epochs:g} epochs, "
                f"{whole} samples): the space searches the training length, and a shorter run "
                "is judged against the whole one"
            ),
        )
    if room < least:
        return AccuracyPlan(samples=least, least=least, fits=False)
    if not math.isfinite(share):
        return AccuracyPlan(samples=target, least=least)
    samples = max(least, min(target, int(share)))
    note = None
    if samples < n_train:
        need = repeats * n_train / throughput / ACCURACY_SHARE
        if room < planned and seconds is not None and left is not None:
            # Limited by the time left: the budget spent before now stays spent, and the
            # question's runs of an epoch need their own time after it.
            need = max(need, seconds - left + question_runs(repeats) * n_train / throughput)
        why = (
            "all the time left for the baseline's runs and one check allows"
            if room < planned
            else f"all its {ACCURACY_SHARE:.0%} share of the budget allows for {repeats} seeds"
        )
        note = (
            f"the accuracy check trains on {samples} samples per run ({samples / n_train:.0%} "
            f"of an epoch), {why}: a weaker check, said in the result. A timeout of "
            f"{need:.0f} s or more gives it a full epoch (or choose: "
            f"{words.option('accuracy_samples')})."
        )
    elif room < min(planned, target):
        note = (
            f"the accuracy runs train {samples} samples each, all the time left holds for the "
            "baseline's runs and one check (a shorter horizon than planned)"
        )
    return AccuracyPlan(samples=samples, note=note, least=least)

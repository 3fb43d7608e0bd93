"""The accuracy guard's statistics: numbers in, numbers out, no words and no I/O.

A confirmation is a sequential non-inferiority test on the mean paired drop ``δ`` (how much
worse a candidate is than the baseline on the data the validation set was drawn from;
negative: better), H0 ``δ > tolerance``. Its standard error has two parts: the pairs' own
spread (``s² / n``) and the validation sample's (the same examples judge every seed, so more
seeds do not shrink it: :func:`sample_noise`), joined with Welch-Satterthwaite degrees of
freedom taken at an upper confidence limit of the seeds' variance (:func:`conservative_dof`).
The upper bound is taken over the *counted* drops (:func:`counted_drops`), the lower one over
the plain drops. The error rate is held for the answer: the study's ``j``-th check may spend
``α w_j`` and its ``k``-th look ``α w_j w_k`` (:func:`share`), which sum to at most ``α``
over any number of checks and looks (a union bound; rejections are non-binding).
``benchmarks/guard_error_rates.py`` simulates the whole rule.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from scipy import stats

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "MAX_NEED",
    "SampleNoise",
    "UpperBound",
    "check_alpha",
    "confirming_bound",
    "conservative_dof",
    "counted_drops",
    "counting_floor",
    "fewest",
    "lagging_run",
    "look_alpha",
    "look_settles",
    "p_inferior",
    "paired_bounds",
    "sample_floor",
    "sample_noise",
    "seeds_to_settle",
    "share",
    "shares_spent",
    "spent_alpha",
    "standard_error",
    "t_quantile",
    "unseen_chance",
    "unseen_rate",
    "worse",
    "z_quantile",
]

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE  # a confirmation's false-accept rate, across all its looks
MAX_NEED = 10_000  # seeds beyond which an unresolved check counts as unsettleable
# Of the answer's error rate, the share the study's first check may spend, and of a check's,
# the share its first look may (see :func:`share`).
FIRST_SHARE = 0.75
MAX_SEED_QUANTILE = 0.25  # see :func:`seed_quantile`
# A baseline run lags where it trails the median of its others by more than this many
# tolerances and this many times their range (see :func:`lagging_run`).
LAG_TOLERANCES = 5.0
LAG_RANGES = 4.0


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, dof: float) -> float:
    return float(stats.t.ppf(q, dof))


@functools.lru_cache(maxsize=16)
def z_quantile(q: float) -> float:
    return float(stats.norm.ppf(q))


@functools.lru_cache(maxsize=1024)
def _chi2(q: float, dof: int) -> float:
    return float(stats.chi2.ppf(q, dof))


def worse(difference: float, higher_is_better: bool) -> float:
    """``difference`` (a reference's metric less another's) signed so that positive means the
    other is worse: the one place the metric's direction turns a difference into a drop."""
    return difference if higher_is_better else -difference


def fewest(enough: Callable[[int], bool], lo: int, hi: int) -> int:
    """The least ``m`` in ``[lo, hi]`` with ``enough(m)``, for a monotone ``enough`` that holds
    at ``hi`` (a bisection)."""
    if enough(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def unseen_rate(pairs: int) -> float:
    """The largest share of runs that a failure mode (a run that does not take off, diverges,
    ...) may have and still go unseen in ``pairs`` pairs with probability ``ALPHA``: ``1 -
    ALPHA^(1/n)``. No test on ``n`` pairs can tell such a mode from its absence."""
    return 1.0 - float(ALPHA ** (1.0 / max(pairs, 1)))


def unseen_chance(pairs: int, rate: float = 0.1) -> float:
    """The chance that ``pairs`` pairs all miss a failure mode that ``rate`` of runs show."""
    return float((1.0 - rate) ** max(pairs, 0))


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


def counting_floor(counts: Sequence[float]) -> float:
    """The least variance a counting metric's validation sample may put in a mean drop: as if
    ``3 / U`` of its ``U`` units (each counting ``counts`` items) disagreed entirely (the 95%
    bound on a rate never observed in ``U``)."""
    return 3.0 * max(counts) ** 2 / math.fsum(counts) ** 2


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
    estimated from 2-3 pairs as nearly known once it happens to come out small, and lets
    false accepts through at up to twice the level (simulated over seed parts 1/16-64x the
    validation part and 2-16 pairs); the upper limit holds the level there. Pairs that agree
    exactly bound nothing about the seeds: their part is taken as large as the validation
    sample's."""
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
    (``guard_error_rates.py``), it confirms about half the harmless candidates at the first
    look where baseline runs lag (a third with no counting) and holds every row's false
    accepts; its cost is some power where the pairs spread over several tolerances."""
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
    return fewest(settles, max(2, n), MAX_NEED)  # the bound shrinks as seeds grow


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
    return (t_quantile(1.0 - alpha, dof) + z_quantile(power)) * math.sqrt(total) < gap


def sample_floor(noise: SampleNoise, looks: int, order: int = 1) -> float:
    """The half-width that the validation sample's own ``noise`` alone gives a check's next
    look (after ``looks``), however many seeds it had: where it is as wide as the tolerance,
    no number of seeds would confirm the check."""
    level = t_quantile(1.0 - look_alpha(looks + 1, order), noise.dof)
    return level * math.sqrt(noise.at(MAX_NEED))


def lagging_run(
    runs: Sequence[float], *, higher_is_better: bool, tolerance: float
) -> dict[str, Any] | None:
    """The baseline's runs (a minority of 3 or more) that trail its others far beyond their own
    spread: ``seeds`` and ``metrics`` (the worst as ``seed`` and ``metric``) and the
    ``others``' range; None where none does. Every check pairs against them, so one data order
    whose training ended somewhere else (a constant rate's noisy last iterate) widens every
    pair of its seed; a minority of any size is looked for, since a second lagging seed hides
    the first from a one-run rule."""
    if len(runs) < 3 or not all(math.isfinite(r) for r in runs):
        return None
    order = sorted(range(len(runs)), key=lambda i: worse(runs[i], higher_is_better))  # worst first
    found = None
    for k in range(1, (len(runs) - 1) // 2 + 1):
        behind, others = order[:k], [runs[i] for i in order[k:]]
        gap = worse(statistics.median(others) - runs[behind[-1]], higher_is_better)
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

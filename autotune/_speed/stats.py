"""The statistics of side-by-side rounds, numbers in and numbers out: each round measures the
baseline and every contender once, in an order drawn afresh for the round; a contender's
figure is the per-round log-ratio of the baseline's time over its own, its speedup the
exponent of their mean, and its interval a t interval on those logs whose spread is the
machine's noise pooled over every measurement of the rounds (:func:`noise`).

The intervals hold for the answer after the rounds stopped: the error rate :data:`ALPHA` is
shared by the :data:`LOOKS` at which the rounds may stop (a union bound, the first look's share
the largest: see :func:`share`), so stopping when the answer looks decided does not shrink
their coverage. It is not split over the
contenders: the answer is the simplest of those standing, not the highest draw, and its
coverage over the simulated races of ``benchmarks/race_sim.py`` (six contenders as fast as the
baseline included) stays above 95% where a split would cost every real gain its power.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import random
import statistics
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

import numpy
from scipy import stats as scipy_stats

__all__ = [
    "ALPHA",
    "EQUIVALENT",
    "FIRST_SHARE",
    "LOOKS",
    "MIN_ROUNDS",
    "Decision",
    "Interval",
    "Noise",
    "Race",
    "after_round",
    "interval",
    "is_look",
    "log_ratios",
    "noise",
    "race",
    "round_alpha",
    "round_order",
    "share",
]

K = TypeVar("K", bound=Hashable)

ALPHA = 0.05  # two-sided: a reported 95% interval misses the true speedup at most this often
EQUIVALENT = 0.03  # two configs whose ratio's interval lies within ±3% are shown as fast
MIN_ROUNDS = 2  # the fewest rounds that make a measured speedup (one round is one draw)
# The round counts at which the rounds may stop as decided. Fewer looks leave each more of the
# error rate; later ones are further apart, as each adds less to what the last one knew.
LOOKS = (4, 6, 9, 14, 20)
FIRST_SHARE = 0.5  # the first look's share of the error rate (see share)


class Decision(enum.Enum):
    """What the rounds showed of the leader against the rest it was measured beside."""

    SEPARATED = "separated"  # faster than every other beyond the noise
    EQUIVALENT = "equivalent"  # the rest not separated from it shown within ±EQUIVALENT
    NOT_SEPARATED = "not separated"  # the time ended before either


@dataclasses.dataclass(frozen=True)
class Interval:
    """A ratio of speeds measured over paired rounds: ``estimate`` (the exponent of the mean
    log-ratio), its interval ``low``-``high``, the ``rounds`` it came from and ``spread``, the
    standard deviation of the rounds' log-ratios (0 from one round)."""

    estimate: float
    low: float
    high: float
    rounds: int
    spread: float

    @property
    def above_one(self) -> bool:
        """Faster beyond the noise: the interval's lower bound is above 1."""
        return self.low > 1.0

    @property
    def within(self) -> bool:
        """Shown as fast: the interval lies within ±:data:`EQUIVALENT` of 1."""
        return self.low >= 1.0 / (1.0 + EQUIVALENT) and self.high <= 1.0 + EQUIVALENT


@dataclasses.dataclass(frozen=True)
class Noise:
    """The machine's noise as the rounds saw it: ``spread``, the standard deviation of one
    round's log-ratio of two configs, estimated with ``dof`` degrees of freedom, from rounds
    that measured ``contenders`` configs beside the baseline (the answer is chosen among
    them)."""

    spread: float
    dof: int
    contenders: int = 1


def noise(rounds: Sequence[Mapping[K, float]], baseline: K) -> Noise | None:
    """The noise of the rounds that measured ``baseline``, pooled over every config they
    measured: a two-way fit of the log times (a config's own level plus a round's, the
    machine's state that round), its residual variance with ``N - rank`` degrees of freedom,
    doubled for a log-ratio of two measurements. One contender beside the baseline gives the
    paired t test's own spread; more give the same figure with more degrees of freedom, so a
    config whose few rounds happened to agree is not read as surer than the machine allows.
    None where no degree of freedom is left."""
    cells = [
        (c, i, math.log(t))
        for i, r in enumerate(rounds)
        if baseline in r
        for c, t in r.items()
        if t and t > 0
    ]
    keys = list(dict.fromkeys(c for c, _, _ in cells))
    used = list(dict.fromkeys(i for _, i, _ in cells))
    if len(keys) < 2 or len(used) < 2:
        return None
    column = {c: j for j, c in enumerate(keys)}
    row = {i: len(keys) + j for j, i in enumerate(used[1:])}  # the first round: the reference
    design = numpy.zeros((len(cells), len(keys) + len(used) - 1))
    for n, (c, i, _) in enumerate(cells):
        design[n, column[c]] = 1.0
        if i in row:
            design[n, row[i]] = 1.0
    y = numpy.array([v for _, _, v in cells])
    fitted, _, rank, _ = numpy.linalg.lstsq(design, y, rcond=None)
    dof = len(cells) - int(rank)
    if dof < 1:
        return None
    squares = float(numpy.sum((y - design @ fitted) ** 2))
    return Noise(math.sqrt(2.0 * squares / dof), dof, len(keys) - 1)


def log_ratios(rounds: Sequence[Mapping[K, float]], over: K, under: K) -> list[float]:
    """``log(time of over / time of under)`` in every round that measured both: how many
    times faster ``under`` ran than ``over`` in each, as a log."""
    out = []
    for r in rounds:
        a, b = r.get(over), r.get(under)
        if a and b and a > 0 and b > 0:
            out.append(math.log(a / b))
    return out


def interval(logs: Sequence[float], alpha: float, pooled: Noise | None = None) -> Interval | None:
    """The ratio ``logs`` measured and its two-sided ``1 - alpha`` t interval, its spread the
    ``pooled`` noise of the rounds ``logs`` came from (:func:`noise`), else their own (None
    with fewer than :data:`MIN_ROUNDS`)."""
    n = len(logs)
    if n < MIN_ROUNDS:
        return None
    mean = statistics.fmean(logs)
    sd = statistics.stdev(logs)
    spread, dof = (sd, n - 1) if pooled is None else (pooled.spread, pooled.dof)
    half = _quantile(1.0 - alpha / 2.0, dof) * spread / math.sqrt(n)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, sd)


@functools.lru_cache(maxsize=256)
def _quantile(p: float, dof: int) -> float:
    return float(scipy_stats.t.ppf(p, dof))


def round_alpha(
    rounds: int | None = None, *, looks: int | None = None, contenders: int = 1
) -> float:
    """The error rate of the interval ``rounds`` rounds make, so that the rates of every interval
    the rounds could have been reported at sum to at most :data:`ALPHA`: at a look, ALPHA times
    its share (:func:`share`: the rounds may have stopped there as decided); off a look, where
    only the deadline stops them, what the looks before it left, split over the ``contenders``
    the answer is chosen among. ``looks=1``: rounds of a fixed number, which could stop nowhere
    else (``verify``'s): all of it."""
    n = rounds or 0
    if looks == 1:
        return ALPHA
    if is_look(n):
        return ALPHA * share(LOOKS.index(n) + 1)
    # The deadline does not look at the draws: rounds it stops spend what no look before used,
    # shared by every config the answer could be (the luckiest draw is the one chosen).
    left = 1.0 - sum(share(i) for i, look in enumerate(LOOKS, 1) if look < n)
    return ALPHA * left / max(contenders - 1, 1)


def share(look: int) -> float:
    """The ``look``-th (1, 2, ...) look's share of the error rate: :data:`FIRST_SHARE` for the
    first, ``(1 - FIRST_SHARE) / ((look - 1) look)`` after it, as the accuracy guard shares its
    looks: rounds end at the search's deadline far more often than at a later look."""
    return FIRST_SHARE if look == 1 else (1.0 - FIRST_SHARE) / ((look - 1) * look)


def is_look(rounds: int) -> bool:
    """Whether the rounds may stop as decided after ``rounds`` rounds."""
    return rounds in LOOKS


def round_order(items: Sequence[K], seed: str, index: int) -> list[K]:
    """``items`` in the order round ``index`` measures them: drawn afresh for each round from
    ``seed`` (so a rerun draws the same orders), so that drift and a neighbour's load fall on
    every config alike."""
    out = list(items)
    random.Random(f"{seed}:{index}").shuffle(out)
    return out


@dataclasses.dataclass(frozen=True)
class Race(Generic[K]):
    """What the rounds decided between the contenders ``among`` asked about.

    ``leader``: the fastest by its estimate; ``answer``: the simplest of those not separated
    from the leader that beat the baseline beyond the noise (the baseline where none did and
    it was among them); ``versus_baseline``: each one's speedup over the baseline;
    ``versus_leader``: the leader's speedup over each other one; ``noise``: the machine's noise
    every interval's spread is (:func:`noise`; None before two rounds)."""

    baseline: K
    leader: K
    answer: K
    decision: Decision
    versus_baseline: Mapping[K, Interval]
    versus_leader: Mapping[K, Interval]
    noise: Noise | None

    @property
    def decided(self) -> bool:
        return self.decision is not Decision.NOT_SEPARATED

    @property
    def spread(self) -> float | None:
        """The spread of one round's log-ratio (:attr:`noise`'s; None before two rounds)."""
        return None if self.noise is None else self.noise.spread

    @property
    def fell_back(self) -> bool:
        """Whether the answer is the baseline because nothing beat it beyond the noise (not
        because the leader was shown as fast as it)."""
        return (
            self.answer == self.baseline
            and self.leader != self.baseline
            and not (
                self.baseline in self.versus_leader and self.versus_leader[self.baseline].within
            )
        )

    def separated(self, key: K) -> bool:
        """Whether the leader ran faster than ``key`` beyond the noise."""
        if key == self.leader or key not in self.versus_baseline:
            return False
        return _apart(self.versus_baseline, self.versus_leader, self.leader, key)

    def beats_baseline(self, key: K) -> bool:
        versus = self.versus_baseline.get(key)
        return key == self.baseline or (versus is not None and versus.above_one)


def race(
    rounds: Sequence[Mapping[K, float]],
    baseline: K,
    among: Collection[K],
    complexity: Callable[[K], tuple[float, ...]],
) -> Race[K] | None:
    """The rounds' decision between the configs ``among`` (those measured in at least
    :data:`MIN_ROUNDS` rounds beside the baseline; the baseline among them where it is),
    each interval at :func:`round_alpha` of its own rounds. None where none of them was
    measured so."""
    pooled = noise(rounds, baseline)
    base_rounds = sum(1 for r in rounds if baseline in r)
    versus_baseline: dict[K, Interval] = {}
    for key in among:
        if key == baseline:
            if base_rounds >= MIN_ROUNDS:
                versus_baseline[key] = Interval(1.0, 1.0, 1.0, base_rounds, 0.0)
            continue
        figure = _figure(log_ratios(rounds, baseline, key), pooled)
        if figure is not None:
            versus_baseline[key] = figure
    if not versus_baseline:
        return None
    ranked = sorted(
        versus_baseline,
        key=lambda k: (versus_baseline[k].estimate, _neg(complexity(k))),
        reverse=True,
    )
    leader = ranked[0]
    for key in ranked[1:]:
        # One shown faster than the leader in the rounds both were in leads, whatever rounds
        # each one's figure against the baseline came from.
        figure = _figure(log_ratios(rounds, key, leader), pooled)
        if figure is not None and figure.high < 1.0:
            leader = key
    versus_leader: dict[K, Interval] = {}
    for key in versus_baseline:
        if key != leader:
            figure = _figure(log_ratios(rounds, key, leader), pooled)
            if figure is not None:
                versus_leader[key] = figure
    others = [k for k in versus_baseline if k != leader]
    # Shown within ±EQUIVALENT, a config stands beside the leader even where the rounds
    # separated the two: a gain that small does not buy the leader's extra changes.
    close = [
        k
        for k in others
        if not _apart(versus_baseline, versus_leader, leader, k)
        or (k in versus_leader and versus_leader[k].within)
    ]
    if not close:
        decision = Decision.SEPARATED
    elif all(k in versus_leader and versus_leader[k].within for k in close):
        decision = Decision.EQUIVALENT
    else:
        decision = Decision.NOT_SEPARATED
    standing = [leader, *close]
    beating = [k for k in standing if k == baseline or versus_baseline[k].above_one]
    if beating:
        answer = min(beating, key=lambda k: (complexity(k), -versus_baseline[k].estimate))
    elif baseline in among:
        answer = baseline
    else:
        answer = min(standing, key=lambda k: (complexity(k), -versus_baseline[k].estimate))
    return Race(
        baseline=baseline,
        leader=leader,
        answer=answer,
        decision=decision,
        versus_baseline=versus_baseline,
        versus_leader=versus_leader,
        noise=pooled,
    )


def _figure(logs: Sequence[float], pooled: Noise | None) -> Interval | None:
    contenders = 1 if pooled is None else pooled.contenders
    return interval(logs, round_alpha(len(logs), contenders=contenders), pooled)


def _apart(
    versus_baseline: Mapping[K, Interval], versus_leader: Mapping[K, Interval], leader: K, key: K
) -> bool:
    """Whether ``leader`` ran faster than ``key`` beyond the noise: by the rounds both were in,
    or where none were, by their intervals against the baseline lying apart."""
    paired = versus_leader.get(key)
    if paired is not None:
        return paired.above_one
    return versus_baseline[leader].low > versus_baseline[key].high


def _neg(values: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(-v for v in values)


def after_round(
    rounds: Sequence[Mapping[K, float]],
    baseline: K,
    active: Sequence[K],
    complexity: Callable[[K], tuple[float, ...]],
) -> tuple[bool, list[K]]:
    """Whether the rounds stop after the last of ``rounds`` (decided at a look, or the last
    look reached), and the contenders the next round measures: at a look, those the leader was
    separated from leave (the baseline never does: every ratio is taken against it)."""
    done = sum(1 for r in rounds if baseline in r)
    if done >= LOOKS[-1]:
        return True, list(active)
    if not is_look(done):
        return False, list(active)
    now = race(rounds, baseline, active, complexity)
    if now is None:
        return False, list(active)
    if now.decided:
        return True, list(active)
    keep = [k for k in active if k in (baseline, now.leader) or not now.separated(k)]
    return False, keep

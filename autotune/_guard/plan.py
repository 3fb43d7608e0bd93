"""The one planner of accuracy time: how long the baseline's accuracy runs are (a budget
share, or the time left), where they are judged (the horizon, lengthened where a longer one
settles checks sooner), and each "a budget of N s would ..." figure, as numbers and reason
codes that every output renders the same way (the words are ``_guard/words.py``'s).

**The horizon.** A check at horizon ``h`` (samples per accuracy run) costs about
``pairs(h) x 2 x run(h)`` seconds: ``run(h)`` grows with ``h``, while ``pairs(h)``, the pairs
a harmless change needs, follows the spread of runs at ``h``, which shrinks as training goes
on. The baseline's runs validate halfway too, so their spread is known at ``h`` and
``h / 2``; the plan projects it at ``2 h`` by the same ratio (at most :data:`MAX_DECAY`-fold
a doubling, never rising), prices a check at each, and the search lengthens the runs where the
longer horizon is expected to cost less. It assumes a change's pairs vary by the baseline's
spread times ``sqrt(2)`` (which errs towards the horizon the search would have used anyway)
and that the spread goes on falling (which it need not: a doubling can fail to pay, which
costs time, never soundness). The horizon chooses only *where* the guard measures; the test
and its error rate are the guard's own.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune._guard.guard import FIRST_PAIR, AccuracyGuard
from autotune._guard.stats import MAX_NEED, fewest, look_alpha, t_quantile
from autotune._trial.outcome import AccuracyRun

__all__ = [
    "ACCURACY_SHARE",
    "MAX_DECAY",
    "AccuracyPlan",
    "HorizonPlan",
    "Longer",
    "LongerMiss",
    "PlanNote",
    "check_timeout",
    "epoch_timeout",
    "longer_reason",
    "pairs_to_confirm",
    "plan_accuracy_budget",
    "plan_horizon",
    "question_runs",
    "share_timeout",
    "suggested_timeout",
    "timeout_for",
    "whole_run_timeout",
]

ACCURACY_SHARE = 0.25  # of the whole budget, the most the baseline's accuracy runs may take
TARGET_EPOCHS = 3  # the accuracy budget when time allows: three epochs (and >= 64 steps)
MIN_STEPS = 8  # baseline steps an accuracy run takes at the least
# The most a doubling of the horizon is projected to divide the variance by: a steep first
# fall of the spread is not extrapolated (on a plateau it stops, or rises again).
MAX_DECAY = 4.0


class PlanNote(str, enum.Enum):
    """What an accuracy plan says of its horizon."""

    WHOLE_RUN = "whole_run"  # the whole planned run: the space searches the training length
    EPOCH_SHARE = "epoch_share"  # less than an epoch: all the budget's share allows
    EPOCH_TIME_LEFT = "epoch_time_left"  # less than an epoch: all the time left allows
    TIME_LEFT = "time_left"  # shorter than planned: all the time left holds


class Longer(str, enum.Enum):
    """Why the baseline's runs are made again at a longer horizon."""

    NOT_LEARNED = "not_learned"  # its metric barely moved from the untrained model's
    LAGGING = "lagging"  # some seeds had not taken off where another had
    SOONER = "sooner"  # a check is expected to settle sooner there
    ONLY_THERE = "only_there"  # a check cannot settle here in the time left; there it fits


def question_runs(repeats: int) -> int:
    """Accuracy runs the question takes at the least: the baseline's ``repeats``, and one
    check's (the candidate's screening run, its ``repeats`` pairs after it, and the baseline's
    run of the seed its own runs do not reach)."""
    return 2 * repeats + 1 + FIRST_PAIR


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyPlan:
    """How many training samples each accuracy run gets, and what its ``note`` says of that
    (less than an epoch: a weaker check, and the ``epoch_timeout`` that would give it one).
    ``fits``: whether the baseline's runs and one check fit in the time given for them at all
    (at the shortest horizon a check may use); where not, ``samples`` is that shortest
    horizon."""

    samples: int
    note: PlanNote | None = None
    fits: bool = True
    least: int = 0  # the shortest horizon a check may use (samples per run)
    epoch_timeout: float | None = None  # a timeout whose share holds an epoch per run
    n_train: int = 0
    repeats: int = 0
    planned_epochs: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "note": None if self.note is None else self.note.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyPlan:
        note = data.get("note")
        return cls(**{**data, "note": None if note is None else PlanNote(note)})


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
    rather than the check being dropped. Less than an epoch is said up front: the check is
    weaker, and which timeout would hold an epoch.
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
    made = functools.partial(
        AccuracyPlan, least=least, n_train=n_train, repeats=repeats, planned_epochs=planned_epochs
    )
    if whole_run and whole > target and share >= whole:
        return made(samples=whole, note=PlanNote.WHOLE_RUN)
    if room < least:
        return made(samples=least, fits=False)
    if not math.isfinite(share):
        return made(samples=target)
    samples = max(least, min(target, int(share)))
    if samples < n_train:
        timeout = epoch_timeout(
            n_train=n_train, throughput=throughput, repeats=repeats, seconds=seconds,
            left=left if room < planned else None,
        )  # fmt: skip
        note = PlanNote.EPOCH_TIME_LEFT if room < planned else PlanNote.EPOCH_SHARE
        return made(samples=samples, note=note, epoch_timeout=timeout)
    if room < min(planned, target):
        return made(samples=samples, note=PlanNote.TIME_LEFT)
    return made(samples=samples)


# A suggested timeout's margin: the search screens candidates before any passes and is
# checked, which the plan does not price, so a timeout that just holds the work falls short.
SUGGESTION_MARGIN = 1.1


def suggested_timeout(seconds: float) -> int:
    """A timeout to suggest where ``seconds`` would just hold the work: with
    :data:`SUGGESTION_MARGIN`, rounded up to 10 s."""
    return 10 * math.ceil(SUGGESTION_MARGIN * seconds / 10)


def timeout_for(*, budget: float, left: float, need: float) -> int:
    """A budget of N s would hold ``need`` more seconds of work: what is spent of ``budget``
    (all but ``left``) stays spent, and the work comes after it. One check at a horizon
    (:func:`check_timeout`), the runs of a longer horizon and one check there, or any check at
    all (the shortest horizon's runs and one check) each ask this of their own ``need``."""
    return suggested_timeout(budget - left + need)


def check_timeout(plan: HorizonPlan, budget: float | None) -> int | None:
    """A budget of N s would hold one check of a change that moves training at ``plan``'s
    horizon (None: one fits, no time budget, or none would: :attr:`HorizonPlan.short_by`)."""
    short = plan.short_by
    if short is None or budget is None or plan.left is None or not math.isfinite(short):
        return None
    return timeout_for(budget=budget, left=plan.left, need=plan.seconds)


def share_timeout(*, runs: int, samples: int, throughput: float) -> float:
    """A budget of N s whose :data:`ACCURACY_SHARE` holds ``runs`` accuracy runs of
    ``samples`` samples each at ``throughput``."""
    return runs * samples / throughput / ACCURACY_SHARE


def epoch_timeout(
    *, n_train: int, throughput: float, repeats: int, seconds: float | None, left: float | None
) -> float:
    """A budget of N s would give the accuracy runs a full epoch: the budget whose share holds
    ``repeats`` runs of ``n_train`` samples; where the time ``left`` limits them (of
    ``seconds``), at least what is spent already plus the question's runs of an epoch."""
    need = share_timeout(runs=repeats, samples=n_train, throughput=throughput)
    if seconds is not None and left is not None:
        need = max(need, seconds - left + question_runs(repeats) * n_train / throughput)
    return need


def whole_run_timeout(*, repeats: int, planned_samples: int, throughput: float) -> float:
    """A budget of N s would make the accuracy runs the whole planned run (where a shorter
    run, a share of the epochs, is judged against the whole one)."""
    return share_timeout(runs=repeats, samples=planned_samples, throughput=throughput)


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
    return fewest(enough, max(2, least), MAX_NEED)


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

    def to_dict(self) -> dict[str, Any]:
        """Its fields, an infinite price as None (JSON has no infinity)."""
        return {
            k: None if isinstance(v, float) and math.isinf(v) else v
            for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HorizonPlan:
        prices = ("seconds", "longer_seconds", "least_longer_seconds")
        fields: dict[str, Any] = {
            k: math.inf if k in prices and v is None else v for k, v in data.items()
        }
        return cls(**fields)

    @property
    def reason(self) -> Longer | None:
        """Why the longer horizon is the better place to check, or None: it is expected to
        settle a check in fewer seconds; or, with no spread halfway to project from, a check
        that moves training cannot be settled here in the time left while the least check
        there fits (only there can it be)."""
        if self.longer <= self.samples:
            return None
        if self.longer_seconds < self.seconds:
            return Longer.SOONER
        if (
            self.longer_spread is None
            and self.left is not None
            and self.seconds > self.left
            and self.least_longer_seconds <= self.left
        ):
            return Longer.ONLY_THERE
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class LongerMiss:
    """A longer horizon that did not fit: why it was asked for (``reason``, at ``plan``), its
    ``samples``, the ``seconds`` the baseline's runs and one check there take, and the
    ``timeout`` that would hold them (:func:`timeout_for`; None: no time budget); ``lagging``
    of the baseline's ``repeats`` seeds had not taken off then (later checks buy it more)."""

    reason: Longer
    plan: HorizonPlan
    samples: int
    seconds: float
    timeout: int | None = None
    lagging: int = 0
    repeats: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason.value,
            "plan": self.plan.to_dict(),
            "samples": self.samples,
            "seconds": self.seconds,
            "timeout": self.timeout,
            "lagging": self.lagging,
            "repeats": self.repeats,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LongerMiss:
        return cls(
            reason=Longer(data["reason"]),
            plan=HorizonPlan.from_dict(data["plan"]),
            samples=int(data["samples"]),
            seconds=float(data["seconds"]),
            timeout=data.get("timeout"),
            lagging=int(data.get("lagging") or 0),
            repeats=int(data.get("repeats") or 0),
        )


def longer_reason(guard: AccuracyGuard, plan: HorizonPlan) -> Longer | None:
    """Why the baseline's runs should be made again at ``plan.longer`` samples, or None: it
    did not learn measurably (every check would compare untrained models), some of its seeds
    had not taken off where another had (:attr:`AccuracyGuard.lagging`: a pair could set a
    run that learned beside one that had not yet), or the plan says the longer horizon is the
    better place to check (:attr:`HorizonPlan.reason`). Never past the planned run, nor for a
    metric that moved the wrong way (a longer run would not fix the metric)."""
    if guard.wrong_way or plan.longer <= plan.samples:
        return None
    if not guard.learned:
        return Longer.NOT_LEARNED
    if guard.lagging:
        return Longer.LAGGING
    return plan.reason

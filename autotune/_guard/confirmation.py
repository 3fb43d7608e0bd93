"""A check of a candidate's accuracy as the study stores it: facts only (verdicts, bounds,
reasons as codes, numbers), with its one codec. The words are ``_guard/words.py``'s."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from autotune._guard.stats import unseen_chance

__all__ = ["Confirmation", "NoBound", "Reason", "Settle", "Verdict"]


class Verdict(str, enum.Enum):
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    UNRESOLVED = "unresolved"

    def __str__(self) -> str:
        return self.value


class NoBound(str, enum.Enum):
    """Why a check's pairs give no confidence bound."""

    ONE_SEED = "one_seed"
    UNPAIRED = "unpaired"  # no seed of the candidate's has a baseline run
    EXACT = "exact"  # the pairs agree exactly, and no per-example values bound the sample


class RunFailed(str, enum.Enum):
    """Why a check made no test: its runs (or the baseline's) did not give a usable metric."""

    STOPPED = "stopped"  # its runs were stopped by the search's time: no verdict
    BASELINE_STOPPED = "baseline_stopped"  # the baseline's runs it needed were: no verdict
    FAILED = "failed"  # a run failed on its own (a crash, a hang past its limit): rejected
    NOT_FINITE = "not_finite"  # a run's metric is not finite: rejected


# The sentences records written before NoBound stored, read back as their codes.
_NO_BOUND_WORDS = {
    "one seed": NoBound.ONE_SEED,
    "no seed paired with the baseline's": NoBound.UNPAIRED,
    "the pairs agree exactly, and the metric has no per-example values to bound the "
    "validation sample's noise": NoBound.EXACT,
}


def _no_bound(value: Any) -> NoBound | None:
    if value is None:
        return None
    return _NO_BOUND_WORDS.get(value) or NoBound(value)


class Reason(str, enum.Enum):
    """Why a check is unresolved (what would settle it), or why no check can settle."""

    CONFIRM = "confirm"  # more seeds would confirm a harmless change
    REJECT = "reject"  # more seeds would reject the drop seen so far
    MIN_PAIRS = "min_pairs"  # within the tolerance, held until min_pairs pairs
    ONE_SEED = "one_seed"  # one pair: the check cannot measure its own noise
    NO_UNITS = "no_units"  # no per-example values: the validation sample's noise is unbounded
    NOT_LEARNED = "not_learned"  # the baseline's metric barely moved in its accuracy budget
    WRONG_WAY = "wrong_way"  # the baseline's metric got worse as it trained
    SAMPLE_AS_WIDE = "sample_as_wide"  # the sample's own noise is as wide as the tolerance
    SAMPLE_TOO_WIDE = "sample_too_wide"  # ... leaves too little of it beside the pairs' spread
    SPREAD_TOO_WIDE = "spread_too_wide"  # the pairs vary too much for any practical seeds
    SMALL_VALIDATION = "small_validation"  # the validation set is too small for the tolerance
    ZERO_TOLERANCE = "zero_tolerance"  # a tolerance of 0 leaves the sample's noise no room
    BASELINE_ONE_SEED = "baseline_one_seed"  # the baseline was trained with one seed


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settle:
    """What would settle an unresolved check (or any check), as facts: the ``reason``, the
    seeds a next look takes (``need``; None: more seeds would not do it) and the figures its
    words give: the pairs' ``spread`` and ``mean`` drop, the validation sample's own
    half-width at the next look (``floor``), the pairs ``counted`` at the tolerance, and, for
    ``MIN_PAIRS``, the ``pairs`` there are and ``min_pairs``."""

    reason: Reason
    need: int | None = None
    spread: float | None = None
    mean: float | None = None
    floor: float | None = None
    counted: int = 0
    pairs: int = 0
    min_pairs: int = 0
    examples: int = 0  # the validation set's (SMALL_VALIDATION; ``need``: those it takes)

    def facts(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k != "reason" and v not in (None, 0)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settle:
        facts = dict(data.get("settle_facts") or {})
        return cls(reason=Reason(data["settle_reason"]), **facts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """A candidate's accuracy checked over several seeds, paired with the baseline's runs, at
    its ``looks``-th look: ``drop`` is the mean paired drop, ``bound`` its upper confidence
    bound (``lower`` its lower one) at that look's level, ``resolution`` their half-width, and
    ``confidence`` this check's own margin, kept in the study: one less its earlier looks'
    error shares and this look's p-value. It is not the answer's confidence (which counts
    every check's share: :func:`answer_claim`), so the result's JSON does not show it. A
    confirmation whose runs failed says why in ``failed``, with the run's own ``failure``
    message."""

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
    failed: RunFailed | None = None  # why its runs made no test (None: they did, or old)
    # The failed run's message (a trial's own words, kept as given); in a record written
    # before `failed`, the whole sentence the search wrote.
    failure: str | None = None
    settle: Settle | None = None  # what would settle an unresolved check
    need: int | None = None  # seeds that would settle it at the next look, at the pairs' spread
    trial: int | None = None  # the trial it checked
    at: float | None = None  # wall-clock time it was filed
    no_bound: NoBound | None = None  # why the pairs give no confidence bound
    sample_error: float | None = None  # the validation sample's part of the standard error
    counted: int | None = None  # pairs better by more than the tolerance, counted at it
    # The counted mean plus the validation sample's own half-width at the next look's level
    # reaches the tolerance, whatever the seeds: no number of them would confirm it.
    wide_sample: bool | None = None
    # The candidate's per-unit values of each seed whose pair it won by more than the
    # tolerance (seed, units): what takes such a pair out of the counted bound's validation
    # noise (see :func:`counted_noise`).
    capped_units: tuple[tuple[int, tuple[float, ...]], ...] | None = None
    # What a record written before reasons were codes said would settle it, shown as stored.
    stored_settle: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.CONFIRMED

    @property
    def tested(self) -> bool:
        """Whether its runs made a test (none failed): only such a check spends a share of the
        answer's error rate, and is judged again from its runs."""
        return self.failed is None and self.failure is None

    @property
    def confirmable(self) -> bool:
        """Whether more seeds could still confirm it: its runs bound the validation sample's
        error (per-example values were recorded), or there are not yet two pairs to tell."""
        return (
            self.tested
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
        if self.no_bound is not None:
            out["no_bound"] = self.no_bound.value
        if self.failed is not None:
            out["failed"] = self.failed.value
        if self.settle is not None:
            out["settle_reason"] = self.settle.reason.value
            out["settle_facts"] = self.settle.facts()
        elif self.stored_settle is not None:
            out["settle"] = self.stored_settle
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
            no_bound=_no_bound(data.get("no_bound")),
            failed=RunFailed(data["failed"]) if data.get("failed") else None,
            settle=Settle.from_dict(data) if data.get("settle_reason") else None,
            stored_settle=data.get("settle") if isinstance(data.get("settle"), str) else None,
            **{key: data.get(key) for key in _OPTIONAL},
        )


_OPTIONAL = (
    "mean", "drop", "resolution", "bound", "lower", "confidence", "tolerance", "failure",
    "need", "trial", "at", "sample_error", "squares", "counted",
    "wide_sample",
)  # fmt: skip


def _compact(value: float) -> float | int:
    """A whole number as an int (per-example sums of an accuracy are counts)."""
    return int(value) if value.is_integer() else value

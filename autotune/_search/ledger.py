"""The ledger: one snapshot of a study (every trial's record, the re-measurements, the
confirmations) and the rules read from it: a trial's projected time, its noise, whether it may
win, and which trial wins.

The search decides with it, and a result rebuilt from the storage alone
(:meth:`autotune.SearchResult.from_study`) reads the same snapshot through the same rules, so
the two cannot disagree about a trial.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

import optuna

from autotune import _knobs
from autotune._config import TrainingConfig
from autotune._search import ranking, storage
from autotune._search.guard import AccuracyGuard, Confirmation
from autotune._search.record import Record, Role
from autotune._search.settings import SearchSettings
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement
from autotune._trial.runner import AccuracyRun

__all__ = ["Entry", "Ledger", "TrialRecord", "make_guard"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as the result reports it: its record, and the study's verdict on it (its
    projected time over every measurement, whether it may win, its confirmation)."""

    number: int
    role: str  # "baseline" or "candidate"
    config: TrainingConfig
    measurement: Measurement | None
    metric: float | None
    accuracy_checked: bool
    projected_time: float | None
    feasible: bool
    failure: str | None = None
    message: str | None = None
    seconds: float = 0.0
    reused: bool = False
    fingerprint: str | None = None  # of the machine that measured it (see device.fingerprint)
    # The winner's accuracy re-checked over as many seeds as the baseline (see AccuracyGuard).
    confirmation: Confirmation | None = None

    @property
    def confirmed(self) -> bool | None:
        """True/False once confirmed/rejected; None when there was nothing (or no time) to
        confirm."""
        return None if self.confirmation is None else self.confirmation.passed

    @property
    def throughput(self) -> float | None:
        return self.measurement.throughput if self.measurement is not None else None

    def metrics(self, metric_name: str, planned_samples: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.measurement is not None:
            out.update(self.measurement.summary())
        runs = self.confirmation.runs if self.confirmation is not None else ()
        out["validation_metric"] = sum(runs) / len(runs) if runs else self.metric
        out["validation_metric_runs"] = len(runs) if runs else (1 if self.metric is not None else 0)
        out["metric_name"] = metric_name
        out["accuracy_checked"] = self.accuracy_checked
        out["accuracy_confirmed"] = self.confirmed
        out["projected_training_time"] = self.projected_time
        out["planned_samples"] = planned_samples
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "role": self.role,
            "config": self.config.to_dict(),
            "throughput": self.throughput,
            "validation_metric": self.metric,
            "accuracy_checked": self.accuracy_checked,
            "projected_training_time": self.projected_time,
            "feasible": self.feasible,
            "failure": self.failure,
            "message": self.message,
            "seconds": self.seconds,
            "reused": self.reused,
            "fingerprint": self.fingerprint,
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
        }


@dataclasses.dataclass(frozen=True)
class Entry:
    """A finished trial of the study and its record."""

    number: int
    record: Record

    @property
    def config(self) -> TrainingConfig:
        return self.record.config


def make_guard(settings: SearchSettings, runs: tuple[float, ...], samples: int) -> AccuracyGuard:
    """The accuracy guard that the baseline's runs (of ``samples`` samples each) and the
    search's tolerance make."""
    return AccuracyGuard(
        metric_name=settings.metric_name,
        higher_is_better=settings.higher_is_better,
        tolerance=settings.tolerance,
        baseline_runs=runs,
        accuracy_samples=samples,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ledger:
    """A snapshot of the study; every verdict on a trial is a method of it."""

    entries: tuple[Entry, ...]
    remeasured: Mapping[int, tuple[float, ...]]
    confirmations: Mapping[str, Confirmation]
    guard: AccuracyGuard | None  # None until the baseline is measured

    @classmethod
    def read(cls, study: optuna.Study, settings: SearchSettings) -> Ledger:
        entries = tuple(Entry(t.number, rec) for t, rec in storage.read_records(study))
        base = next((e.record for e in entries if e.record.role is Role.BASELINE), None)
        return cls(
            entries=entries,
            remeasured=storage.read_remeasured(study),
            confirmations=storage.read_confirmations(study),
            guard=None
            if base is None
            else make_guard(
                settings, tuple(r.metric for r in base.accuracy), int(base.accuracy_samples or 0)
            ),
        )

    # -- What was measured ---------------------------------------------------------------------

    @property
    def baseline(self) -> Entry | None:
        return next((e for e in self.entries if e.record.role is Role.BASELINE), None)

    @property
    def candidates(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.record.role is Role.CANDIDATE)

    def failures(self) -> dict[str, int]:
        return dict(Counter(e.record.failure.value for e in self.entries if e.record.failure))

    def measured(self, cfg: TrainingConfig) -> Entry | None:
        """The trial that measured ``cfg`` itself (not one that reused another's record)."""
        return next((e for e in self.entries if e.config == cfg and not e.record.reused), None)

    def accuracy_of_numerics(self, cfg: TrainingConfig) -> tuple[AccuracyRun, ...] | None:
        """Accuracy runs of a candidate with ``cfg``'s numerics (the same trained model)."""
        key = cfg.numerics_key()
        for e in self.candidates:
            r = e.record
            if r.ok and r.accuracy and r.config.numerics_key() == key:
                return r.accuracy
        return None

    def oom_batch_sizes(self) -> list[int]:
        return sorted(
            e.config.batch_size for e in self.entries if e.record.failure is FailureReason.OOM
        )

    # -- Verdicts -------------------------------------------------------------------------------

    def times(self, entry: Entry) -> list[float]:
        first = entry.record.projected_time
        return [] if first is None else [first, *self.remeasured.get(entry.number, ())]

    def projected(self, entry: Entry) -> float | None:
        """Projected training time: the median over the measurement and re-measurements."""
        times = self.times(entry)
        return ranking.median_time(times) if times else None

    def noise(self, entry: Entry) -> float:
        times = self.times(entry)
        return ranking.relative_noise(times) if times else ranking.MAX_NOISE

    def comparable(self, entry: Entry) -> bool:
        """Timings compare only between identical hardware and software (the fingerprint)."""
        base = self.baseline
        theirs, ours = entry.record.fingerprint, base.record.fingerprint if base else ""
        return not (theirs and ours and theirs != ours)

    def confirmation(self, entry: Entry) -> Confirmation | None:
        if not entry.record.accuracy:
            return None
        return self.confirmations.get(_knobs.numerics_id(entry.config))

    def feasible(self, entry: Entry) -> bool:
        """Whether a trial may win: it ran, was not pruned, was measured on the baseline's
        hardware, and its accuracy passed: the baseline and candidates with the baseline's
        numerics pass; a confirmation over several seeds, where there is one, overrides the
        one-run screening."""
        r = entry.record
        if not r.ok or r.projected_time is None or r.pruned or not self.comparable(entry):
            return False
        if r.role is Role.BASELINE or r.metric is None:
            return True
        confirmation = self.confirmation(entry)
        if confirmation is not None:
            return confirmation.passed
        return self.guard is not None and self.guard.violation(r.metric) <= 0

    def best(self) -> Entry | None:
        """The fastest feasible trial; between trials whose difference is within their measured
        noise, the simpler config (no compile beats compile, fewer workers beat more)."""
        base = self.baseline
        if base is None:
            return None
        return ranking.best(
            [e for e in self.entries if self.feasible(e)],
            time=lambda e: float(self.projected(e) or 0.0),
            noise=self.noise,
            complexity=lambda e: _knobs.complexity(e.config, base.config),
        )

    def leaders(self, top: int) -> list[Entry]:
        """The ``top`` fastest feasible candidates, one per config."""
        ranked = sorted(
            (e for e in self.candidates if self.feasible(e) and not e.record.reused),
            key=lambda e: float(self.projected(e) or 0.0),
        )
        out: list[Entry] = []
        for e in ranked:
            if all(e.config != o.config for o in out):
                out.append(e)
        return out[:top]

    def trial_records(self) -> tuple[TrialRecord, ...]:
        return tuple(self.trial_record(e) for e in self.entries)

    def trial_record(self, entry: Entry) -> TrialRecord:
        r = entry.record
        return TrialRecord(
            number=entry.number,
            role=r.role.value,
            config=r.config,
            measurement=r.measurement,
            metric=r.metric,
            accuracy_checked=bool(r.accuracy),
            projected_time=self.projected(entry),
            feasible=self.feasible(entry),
            failure=r.failure.value if r.failure else None,
            message=r.message,
            seconds=r.seconds,
            reused=r.reused,
            fingerprint=r.fingerprint or None,
            confirmation=self.confirmation(entry),
        )

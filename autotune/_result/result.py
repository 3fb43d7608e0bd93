"""The search result: the winner, the baseline, every trial, and the exported JSON.

A result is made from the study's ledger and the search's settings, whether the search has just
run (:func:`autotune.find_best`) or is read back from its storage
(:meth:`SearchResult.from_study`): one reader, so the two cannot disagree.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import optuna

from autotune._config import SCHEMA_VERSION, TrainingConfig
from autotune._errors import ConfigError, StorageError
from autotune._result.files import write_text_atomic
from autotune._result.report import write_report
from autotune._result.summary import render_summary
from autotune._search import storage as stored
from autotune._search.guard import AccuracyGuard
from autotune._search.ledger import Ledger, TrialRecord
from autotune._search.settings import SearchSettings
from autotune._trial.probe import MemoryLimits

__all__ = ["SearchResult", "load_config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    """What :func:`autotune.find_best` found.

    ``config`` is the fastest config whose metric stayed within tolerance of the baseline's
    (the baseline itself when nothing beat it); ``speedup`` is the baseline's projected training
    time over the winner's.
    """

    winner: TrialRecord
    baseline_trial: TrialRecord
    trials: tuple[TrialRecord, ...]
    guard: AccuracyGuard
    environment: dict[str, Any]
    search: dict[str, Any]
    planned_samples: int
    interrupted: bool = False

    @classmethod
    def from_ledger(
        cls,
        ledger: Ledger,
        settings: SearchSettings,
        *,
        study_name: str,
        storage: str | None,
        seconds: float,
        interrupted: bool,
        memory: MemoryLimits | None,
    ) -> SearchResult:
        """The result a study's ledger amounts to: the ledger's best trial wins."""
        base, guard = ledger.baseline, ledger.guard
        if base is None or guard is None:
            raise StorageError(
                f"Study {study_name!r} has no completed autotune baseline trial, so there is "
                "nothing to report yet (is it an autotune study, and has its baseline finished?)."
            )
        best = ledger.best() or base
        search: dict[str, Any] = {
            "study_name": study_name,
            "storage": storage,
            "space": settings.space.name,
            "space_notes": list(settings.space.notes),
            "stratified_split": settings.stratified,
            "seed": settings.seed,
            "val_fraction": settings.val_fraction,
            "n_trials": settings.n_trials,
            "timeout": settings.timeout,
            "planned_epochs": settings.planned_epochs,
            "isolation": "process" if settings.isolated else "in-process",
            "trial_limit": settings.trial_timeout or base.record.trial_limit,
            "guided": settings.guided,
            "hooks": settings.hooks.to_dict(),
            "seconds": seconds,
            "accuracy_samples": guard.accuracy_samples,
        }
        if memory is not None:
            search["memory_probe"] = memory.to_dict()
        foreign = [e.number for e in ledger.entries if not ledger.comparable(e)]
        if foreign:
            search["not_ranked"] = {
                "trials": foreign,
                "reason": "measured on hardware or software other than the baseline's "
                f"(fingerprint {base.record.fingerprint}); timings do not compare",
            }
        return cls(
            winner=ledger.trial_record(best),
            baseline_trial=ledger.trial_record(base),
            trials=ledger.trial_records(),
            guard=guard,
            environment=dict(settings.environment),
            search=search,
            planned_samples=settings.planned_samples,
            interrupted=interrupted,
        )

    @classmethod
    def from_study(
        cls,
        storage: str | Any,
        study_name: str | None = None,
        *,
        tolerance: float | None = None,
        metric_name: str | None = None,
        higher_is_better: bool | None = None,
    ) -> SearchResult:
        """The result of the search stored as ``study_name`` in ``storage`` (an Optuna storage
        URL or object; the name may be left out when the storage holds one study), without the
        model or the data. The tolerance and the metric are the search's own; pass them to
        see the trials judged otherwise."""
        study = stored.load_study(storage, study_name)
        settings = stored.read_settings(study)
        if settings is None:
            raise StorageError(
                f"Study {study.study_name!r} holds no autotune settings, so there is nothing to "
                "report yet (is it an autotune study, and has its baseline finished?)."
            )
        overrides = {"tolerance": tolerance, "metric_name": metric_name}
        overrides["higher_is_better"] = higher_is_better
        settings = settings.replace(**{k: v for k, v in overrides.items() if v is not None})
        ledger = Ledger.read(study, settings)
        return cls.from_ledger(
            ledger,
            settings,
            study_name=study.study_name,
            storage=stored.redact(storage),
            seconds=_span(study),
            interrupted=False,
            memory=stored.read_memory(study),
        )

    @property
    def config(self) -> TrainingConfig:
        return self.winner.config

    @property
    def baseline(self) -> TrainingConfig:
        return self.baseline_trial.config

    @property
    def tolerance(self) -> float:
        return self.guard.tolerance

    @property
    def metrics(self) -> dict[str, Any]:
        return self.winner.metrics(self.guard.metric_name, self.planned_samples)

    @property
    def baseline_metrics(self) -> dict[str, Any]:
        return self.baseline_trial.metrics(self.guard.metric_name, self.planned_samples)

    @property
    def speedup(self) -> float:
        base, best = self.baseline_trial.projected_time, self.winner.projected_time
        return base / best if base and best else 1.0

    @property
    def throughput_ratio(self) -> float:
        base, best = self.baseline_trial.throughput, self.winner.throughput
        return best / base if base and best else 1.0

    @property
    def failures(self) -> dict[str, int]:
        return dict(Counter(t.failure for t in self.trials if t.failure is not None))

    def to_dict(self) -> dict[str, Any]:
        search = dict(self.search)
        search["trials"] = len(self.trials)
        search["failures"] = self.failures
        search["interrupted"] = self.interrupted
        return {
            "schema_version": SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "metrics": self.metrics,
            "baseline": {"config": self.baseline.to_dict(), "metrics": self.baseline_metrics},
            "speedup": self.speedup,
            "throughput_ratio": self.throughput_ratio,
            "tolerance": self.tolerance,
            "accuracy_guard": self.guard.to_dict(),
            "environment": self.environment,
            "search": search,
            "trials": [t.to_dict() for t in self.trials],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False, default=_json_default)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the result as JSON, atomically: a reader never sees half a file, and a failed
        write leaves any previous file intact."""
        return write_text_atomic(path, self.to_json())

    def summary(self) -> str:
        return render_summary(self.to_dict())

    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a self-contained HTML report (opens offline): winner against baseline,
        throughput against the validation metric with the tolerance, optimisation history,
        which knobs mattered, where the time goes, and every trial with its failure reason."""
        return write_report(self, path)

    def __repr__(self) -> str:
        return self.summary()


def _span(study: optuna.Study) -> float:
    """Seconds from the first trial's start to the last one's end."""
    trials = study.get_trials(deepcopy=False, states=stored.FINISHED)
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def load_config(path: str | os.PathLike[str]) -> TrainingConfig:
    """The config in a saved result (``best.json``) or in a bare config JSON file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {str(path)!r}: {exc.strerror}.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid JSON: {exc}.") from None
    if isinstance(data, dict) and "schema_version" in data:
        version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise ConfigError(
                f"Config file {str(path)!r} has schema_version {version!r}; this autotune reads "
                f"version {SCHEMA_VERSION}. Upgrade autotune or re-export the result."
            )
        data = data.get("config")
    return TrainingConfig.from_dict(data)

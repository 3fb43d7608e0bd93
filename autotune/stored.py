"""Rebuild a :class:`~autotune.result.SearchResult` from a study in an Optuna storage, without
the model or the data: what ``autotune report --storage URL --study NAME`` reads.

Each trial's record is in its user attribute ``autotune`` (role, config, measurement, accuracy
runs, metric, failure, projected time); confirmations of the winner's accuracy are in the study's
``autotune_confirmations``. What a study does not hold (the tolerance, the metric's name and
direction, the environment) comes from the study attribute ``autotune_search`` where a search
wrote it, from the caller, or is inferred from the trials' constraints (the tolerance).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import TrainingConfig
from autotune.errors import StorageError
from autotune.guard import AccuracyGuard
from autotune.measure import Measurement
from autotune.records import (
    ACCURACY_CONSTRAINT,
    CONFIRMATIONS,
    RECORD,
    REMEASURED,
    SEARCH_META,
    SETTINGS,
    WINNER,
    feasible,
    median_time,
    numerics_id,
)
from autotune.result import SearchResult, TrialRecord

__all__ = ["load_study", "result_from_study"]


def load_study(storage: str | optuna.storages.BaseStorage, study_name: str | None) -> optuna.Study:
    """Open an existing study for reading; the error lists the studies that do exist."""
    if isinstance(storage, str) and "://" not in storage:
        raise StorageError(
            f"`storage` must be a database URL such as 'sqlite:///autotune.db', but got "
            f"{storage!r}."
        )
    if isinstance(storage, str) and storage.startswith("sqlite:///"):
        # SQLAlchemy would create an empty database file at a mistyped path.
        path = Path(storage.removeprefix("sqlite:///"))
        if not path.is_file():
            raise StorageError(
                f"No SQLite database at {str(path)!r} (from storage {storage!r}). Run the command "
                "where the search ran, or pass the storage URL it used."
            )
    try:
        names = optuna.get_all_study_names(storage=storage)
    except Exception as exc:  # SQLAlchemy's errors for unreachable or malformed databases
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise StorageError(
            f"Cannot read storage {storage!r}: {type(exc).__name__}: {first}"
        ) from exc
    if study_name is None:
        if len(names) == 1:
            study_name = names[0]
        else:
            raise StorageError(
                f"Storage {storage!r} holds {len(names)} studies; name one with --study / "
                f"study_name. Studies there: {', '.join(names) or 'none'}."
            )
    if study_name not in names:
        raise StorageError(
            f"No study {study_name!r} in storage {storage!r}. Studies there: "
            f"{', '.join(names) or 'none'}."
        )
    return optuna.load_study(study_name=study_name, storage=storage)


def _infer_tolerance(
    records: list[tuple[FrozenTrial, dict[str, Any]]], guard: AccuracyGuard
) -> float | None:
    """The search stores each candidate's accuracy constraint: ``-tolerance`` for a candidate
    that needed no accuracy check, ``drop - max(tolerance, noise margin)`` for one that did."""
    for trial, rec in records:
        if rec["role"] == "candidate" and rec["failure"] is None and rec["metric"] is None:
            value = trial.constraints.get(ACCURACY_CONSTRAINT)
            if value is not None and value <= 0:
                return -float(value)
    noise = guard.noise_margin()
    for trial, rec in records:
        if rec["role"] != "candidate" or rec["failure"] is not None or rec["metric"] is None:
            continue
        value = trial.constraints.get(ACCURACY_CONSTRAINT)
        if value is None or not math.isfinite(float(rec["metric"])):
            continue
        margin = guard.drop(float(rec["metric"])) - float(value)
        if margin > noise + 1e-9:
            return margin
    return None


def _planned_samples(records: list[dict[str, Any]]) -> int:
    """projected time = planned samples / throughput + one-time cost (+ worker restarts)."""
    for rec in records:
        m = rec.get("measurement")
        if rec["failure"] is not None or not m or rec["projected_time"] is None:
            continue
        measurement = Measurement.from_dict(m)
        if measurement.epoch_restart:
            continue
        steady = float(rec["projected_time"]) - measurement.one_time_cost
        return max(0, round(steady * measurement.throughput))
    return 0


def _projected(study: optuna.Study, number: int, first: float | None) -> float | None:
    """The median of a trial's measurement and its re-measurements, as the search ranks."""
    if first is None:
        return None
    return median_time(first, study.user_attrs.get(REMEASURED, {}).get(str(number), []))


def result_from_study(
    study: optuna.Study,
    *,
    tolerance: float | None = None,
    metric_name: str | None = None,
    higher_is_better: bool | None = None,
) -> SearchResult:
    """The :class:`SearchResult` a finished (or interrupted) search in ``study`` amounts to.

    Arguments override what the study says about itself; without them the study attribute
    ``autotune_search`` is used, then the trials' constraints (the tolerance), then the
    defaults of ``find_best`` (``accuracy``, higher is better).
    """
    records = [
        (t, t.user_attrs[RECORD])
        for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE, TrialState.PRUNED])
        if isinstance(t.user_attrs.get(RECORD), dict)
    ]
    base = next((r for _, r in records if r["role"] == "baseline"), None)
    if base is None:
        raise StorageError(
            f"Study {study.study_name!r} has no completed autotune baseline trial, so there is "
            "nothing to report yet (is it an autotune study, and has its baseline finished?)."
        )
    # What the search published for its workers (autotune_settings), then anything written
    # under autotune_search.
    meta: dict[str, Any] = {}
    for attr in (SETTINGS, SEARCH_META):
        value = study.user_attrs.get(attr)
        if isinstance(value, dict):
            meta.update(value)
    name = metric_name or meta.get("metric_name") or "accuracy"
    higher = higher_is_better if higher_is_better is not None else meta.get("higher_is_better")
    if higher is None:
        higher = name != "loss"
    guard = AccuracyGuard(
        metric_name=name,
        higher_is_better=bool(higher),
        tolerance=0.0,
        baseline_runs=tuple(float(r["metric"]) for r in base["accuracy_runs"]),
        accuracy_samples=int(base.get("accuracy_samples") or 0),
    )
    tol = tolerance if tolerance is not None else meta.get("tolerance")
    if tol is None:
        tol = _infer_tolerance(records, guard)
    if tol is None:
        raise StorageError(
            f"Study {study.study_name!r} does not say which tolerance it searched with, and its "
            "trials do not reveal it; pass it (--tolerance / tolerance=)."
        )
    guard = AccuracyGuard(
        metric_name=guard.metric_name,
        higher_is_better=guard.higher_is_better,
        tolerance=float(tol),
        baseline_runs=guard.baseline_runs,
        accuracy_samples=guard.accuracy_samples,
    )
    stored = study.user_attrs.get(CONFIRMATIONS)
    confirmations: dict[str, Any] = stored if isinstance(stored, dict) else {}

    def confirmation(rec: dict[str, Any]) -> dict[str, Any] | None:
        if not rec["accuracy_runs"]:
            return None
        found = confirmations.get(numerics_id(rec["config"]))
        return found if isinstance(found, dict) else None

    trials = tuple(
        TrialRecord(
            number=t.number,
            role=rec["role"],
            config=TrainingConfig.from_dict(rec["config"]),
            measurement=Measurement.from_dict(rec["measurement"]) if rec["measurement"] else None,
            metric=rec["metric"],
            accuracy_checked=bool(rec["accuracy_runs"]),
            projected_time=_projected(study, t.number, rec["projected_time"]),
            feasible=feasible(rec, guard, confirmation(rec)),
            failure=rec["failure"],
            message=rec["message"],
            seconds=float(rec["seconds"]),
            reused=bool(rec.get("reused")),
            confirmation=confirmation(rec),
        )
        for t, rec in records
    )
    baseline = next(tr for tr in trials if tr.role == "baseline")
    chosen = study.user_attrs.get(WINNER)  # the search's own decision, where it finished
    winner = next((tr for tr in trials if tr.number == chosen), None) or min(
        (tr for tr in trials if tr.feasible),
        key=lambda tr: float(tr.projected_time or math.inf),
        default=baseline,
    )
    starts = [t.datetime_start for t, _ in records if t.datetime_start is not None]
    ends = [t.datetime_complete for t, _ in records if t.datetime_complete is not None]
    seconds = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    search: dict[str, Any] = {
        "study_name": study.study_name,
        "seconds": seconds,
        "accuracy_samples": guard.accuracy_samples,
        "trials_without_record": len(study.get_trials(deepcopy=False, states=[TrialState.FAIL])),
    }
    search.update({k: v for k, v in meta.items() if k not in ("environment",)})
    planned = meta.get("planned_samples")
    return SearchResult(
        winner=winner,
        baseline_trial=baseline,
        trials=trials,
        guard=guard,
        environment=dict(meta.get("environment") or {}),
        search=search,
        planned_samples=int(planned) if planned else _planned_samples([r for _, r in records]),
    )

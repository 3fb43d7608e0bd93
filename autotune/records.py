"""What a search keeps in its Optuna study, and the rules read from it: shared by the search
that writes the study (:mod:`autotune.search`) and the report that reads it back without the
model or data (:mod:`autotune.stored`), so the two cannot disagree about a trial.

Each trial's record is a dict in its user attribute ``autotune`` (role, config, measurement,
accuracy runs, metric, failure, projected time, ...); the study's user attributes hold what
spans trials (settings for workers, confirmations, re-measurements, the memory probe, the
winner).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from autotune.config import TrainingConfig
from autotune.guard import AccuracyGuard

__all__ = [
    "ACCURACY_CONSTRAINT",
    "CONFIRMATIONS",
    "FAILED_CONSTRAINT",
    "MEMORY",
    "RECORD",
    "REMEASURED",
    "ROLE",
    "SEARCH_META",
    "SETTINGS",
    "WINNER",
    "feasible",
    "median_time",
    "numerics_id",
]

RECORD = "autotune"  # trial user attribute: the trial's record
ROLE = "autotune_role"  # trial user attribute: "baseline" or "candidate"
FAILED_CONSTRAINT = "failed"
ACCURACY_CONSTRAINT = "accuracy"
CONFIRMATIONS = "autotune_confirmations"  # study user attribute: numerics -> confirmation
SETTINGS = "autotune_settings"  # study user attribute: what workers need to join the search
WINNER = "autotune_winner"  # study user attribute: the winning trial's number
MEMORY = "autotune_memory"  # study user attribute: the memory probe's findings
REMEASURED = "autotune_remeasured"  # study user attribute: trial -> re-measured projected times
SEARCH_META = "autotune_search"  # study user attribute: tolerance, metric, environment, ...


def numerics_id(config: dict[str, Any]) -> str:
    """The key confirmations are filed under: what decides the trained model's numerics (batch
    size, precision, LR schedule)."""
    cfg = TrainingConfig.from_dict(config)
    return json.dumps([cfg.batch_size, cfg.precision.value, cfg.lr_schedule.to_dict()])


def median_time(first: float, again: Sequence[float]) -> float:
    """A trial's projected time as ranked: the median of its measurement and re-measurements."""
    return float(statistics.median([float(first), *(float(t) for t in again)]))


def feasible(
    rec: dict[str, Any],
    guard: AccuracyGuard,
    confirmation: dict[str, Any] | None,
    *,
    comparable: bool = True,
) -> bool:
    """Whether a trial may win: it ran, was not pruned, was measured on the baseline's hardware
    (``comparable``), and its accuracy passed: the baseline and candidates with the baseline's
    numerics pass; a confirmation over several seeds, where there is one, overrides the one-run
    screening."""
    if rec["failure"] is not None or rec["projected_time"] is None:
        return False
    if not comparable or rec.get("pruned"):
        return False
    if rec["role"] == "baseline" or rec["metric"] is None:
        return True
    if confirmation is not None:
        return bool(confirmation["passed"])
    return guard.violation(float(rec["metric"])) <= 0

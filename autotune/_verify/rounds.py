"""The paired rounds a verify run measures, each in an order drawn afresh as the search's rounds
draw theirs, and the accuracy runs it may add."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune._knobs.config import TrainingConfig
from autotune._speed import stats as speed
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, Budget
from autotune._trial.workload import Workload
from autotune._verify.limits import Limited

__all__ = ["accuracy_runs", "measure_rounds"]


def accuracy_runs(
    data: Mapping[str, Any],
    pair: dict[str, TrainingConfig],
    workload: Workload,
    executor: Limited,
    budget: Budget,
    measured: dict[str, list[Measurement]],
    failures: dict[str, str],
    seeds: int,
    report: Callable[[str], None],
) -> dict[str, Any] | None:
    """Both configs trained on the search's accuracy budget over ``seeds`` data-order seeds."""
    if not seeds or pair["winner"] == pair["baseline"] or failures:
        return None
    search = data.get("search") or {}
    samples = int(
        search.get("accuracy_samples")
        or (data.get("accuracy_guard") or {}).get("accuracy_samples")
        or 3 * len(workload.train)  # type: ignore[arg-type]
    )
    check = AccuracyCheck(samples=samples, seeds=tuple(range(seeds)))
    runs: dict[str, list[float]] = {}
    for name, cfg in pair.items():
        outcome = executor.run(cfg, budget, accuracy=check, measured=measured[name][0])
        if not outcome.ok:
            failures[name] = f"{outcome.failure}: {outcome.message}"
            return None
        runs[name] = [run.metric for run in outcome.accuracy]
        report(f"accuracy: {name:8} {', '.join(f'{v:.4f}' for v in runs[name])}")
    return {"samples": samples, **runs}


def measure_rounds(
    pair: dict[str, TrainingConfig],
    executor: Limited,
    budget: Budget,
    rounds: int,
    report: Callable[[str], None],
    seed: str,
) -> tuple[dict[str, list[Measurement]], dict[str, str]]:
    """Both configs' throughput, each round in an order drawn afresh as the search's rounds
    draw theirs (:func:`autotune._speed.stats.round_order`); the failures by name."""
    measured: dict[str, list[Measurement]] = {"baseline": [], "winner": []}
    failures: dict[str, str] = {}
    if pair["winner"] == pair["baseline"]:
        return measured, failures
    # A first, discarded pass of each: thread pools, allocator caches and lazy imports warm
    # up in whichever config runs first, and would otherwise flatter the other one.
    for name in ("baseline", "winner"):
        outcome = executor.run(pair[name], budget)
        if outcome.failure is FailureReason.TIMEOUT:
            failures[name] = f"{outcome.failure}: {outcome.message}"
            report(f"warm-up: {name} failed ({failures[name]})")
            return measured, failures
    for r in range(rounds):
        order = speed.round_order(["baseline", "winner"], f"verify:{seed}", r)
        for name in order:
            if name in failures:
                continue
            outcome = executor.run(pair[name], budget)
            if not outcome.ok or outcome.measurement is None:
                failures[name] = f"{outcome.failure}: {outcome.message}"
                report(f"round {r + 1}: {name} failed ({failures[name]})")
                continue
            measured[name].append(outcome.measurement)
            report(f"round {r + 1}/{rounds}: {name:8} {outcome.measurement!r}")
        if failures:
            break
    return measured, failures

"""Before a winner is declared: the leaders are measured again side by side with the baseline
(the winner is not simply the luckiest single measurement), and the leader's accuracy is
confirmed over as many seeds as the baseline's."""

from __future__ import annotations

from autotune import _knobs
from autotune._search import storage
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.guard import Confirmation
from autotune._trial.runner import AccuracyCheck

__all__ = ["RERANK_TOP", "confirm_leader", "remeasure_leaders"]

RERANK_TOP = 3  # candidates re-measured, with the baseline, before a winner is declared
MAX_CONFIRMATIONS = 3  # leaders tried in turn when confirmations reject them


def remeasure_leaders(bench: Bench, baseline: Baseline) -> None:
    """Measure the baseline and the leading candidates again (each once per study)."""
    ledger = bench.ledger()
    leaders = ledger.leaders(RERANK_TOP)
    plan = [e for e in [baseline.entry, *leaders] if e.number not in ledger.remeasured]
    if not leaders or not plan:
        return
    s = bench.settings
    for entry in plan:
        if bench.deadline.past(baseline.remeasure_seconds):
            break
        outcome = bench.execute(entry.config)
        if outcome.ok and outcome.measurement is not None:
            projected = outcome.measurement.projected_time(s.planned_samples, s.planned_epochs)
            storage.add_remeasurement(bench.study, entry.number, projected)
    ledger = bench.ledger()
    best = ledger.best()
    base = ledger.baseline
    if best is not None and base is not None:
        speedup = float(ledger.projected(base) or 0) / float(ledger.projected(best) or 1)
        bench.report(
            f"re-measured the baseline and the {len(leaders)} fastest candidates: best "
            f"{speedup:.2f}x (trial #{best.number}, noise ±{ledger.noise(best):.0%})"
        )


def confirm_leader(bench: Bench, baseline: Baseline) -> None:
    """Re-check the leading candidate's accuracy with the baseline's number of seeds and
    compare means; on failure the next leader is tried, while the budget lasts."""
    seeds = tuple(range(1, baseline.guard.repeats))
    if not seeds:
        return
    for _ in range(MAX_CONFIRMATIONS):
        ledger = bench.ledger()
        best = ledger.best()
        if best is None:
            return
        record = best.record
        if record.role.value == "baseline" or not record.accuracy:
            return  # same numerics as the baseline: nothing to confirm
        if ledger.confirmation(best) is not None:
            return  # already confirmed (passed, or best() would not return it)
        if bench.deadline.past(baseline.confirm_seconds):
            bench.report("no time left to confirm the winner's accuracy over several seeds")
            return
        check = AccuracyCheck(samples=baseline.guard.accuracy_samples, seeds=seeds)
        outcome = bench.execute(best.config, accuracy=check, measured=record.measurement)
        metric = record.metric
        if outcome.ok and metric is not None:
            runs = [metric, *(r.metric for r in outcome.accuracy)]
            result = baseline.guard.confirm(runs, trial=best.number)
        else:
            result = Confirmation(runs=(), passed=False, failure=outcome.message, trial=best.number)
        storage.file_confirmation(bench.study, _knobs.numerics_id(best.config), result)
        verdict = "confirmed" if result.passed else "rejected"
        bench.report(f"confirmation of trial #{best.number}: {verdict} ({result.describe()})")
        if result.passed:
            return

"""The baseline: measured first, with the same budget as every candidate, and trained over
several data-order seeds so the accuracy guard knows its noise.

The accuracy budget is fixed once, from the baseline's speed and spread (the guard's plan):
every candidate then trains on the same number of samples.
"""

from __future__ import annotations

import dataclasses
import statistics

from autotune._errors import AutotuneError
from autotune._search.bench import Bench
from autotune._search.guard import (
    AccuracyGuard,
    AccuracyPlan,
    plan_accuracy_budget,
    worth_growing,
)
from autotune._search.ledger import Entry, Ledger, make_guard
from autotune._search.record import Record, Role
from autotune._space import SearchSpace
from autotune._trial.measure import Measurement
from autotune._trial.runner import AccuracyCheck, TrialOutcome

__all__ = ["Baseline", "measure_baseline"]

MIN_TRIAL_LIMIT = 60.0  # seconds: the automatic trial limit is never shorter
TRIAL_LIMIT_FACTOR = 5.0  # the automatic trial limit, as a multiple of the baseline's trial
CONFIRM_SLACK = 1.2  # a confirmation's expected time, as a multiple of the baseline's runs


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The measured baseline, and what the rest of the search derives from it."""

    entry: Entry
    guard: AccuracyGuard

    @classmethod
    def of(cls, ledger: Ledger) -> Baseline | None:
        entry = ledger.baseline
        if entry is None or ledger.guard is None:
            return None
        return cls(entry, ledger.guard)

    @property
    def record(self) -> Record:
        return self.entry.record

    @property
    def projected_time(self) -> float:
        return float(self.record.projected_time or 0.0)

    @property
    def accuracy(self) -> AccuracyCheck:
        """The accuracy budget every candidate gets (one seed; confirmations add the rest)."""
        return AccuracyCheck(samples=self.guard.accuracy_samples, seeds=(0,))

    @property
    def confirm_seconds(self) -> float:
        """Expected time of confirming a winner: as many more runs as the baseline made, less
        one; candidates worth confirming train faster than the baseline."""
        seconds = [run.seconds for run in self.record.accuracy]
        return CONFIRM_SLACK * statistics.fmean(seconds) * (len(seconds) - 1) if seconds else 0.0

    @property
    def remeasure_seconds(self) -> float:
        """Expected time of measuring a config's throughput again."""
        return self.record.measure_seconds


def measure_baseline(bench: Bench, space: SearchSpace) -> Baseline:
    """Measure the baseline (or adopt the study's) and store it as a trial of the study."""
    ledger = bench.ledger()
    found = Baseline.of(ledger)
    if found is not None:
        bench.report(f"baseline: reusing trial {found.entry.number} from the study")
        return found
    cfg = bench.settings.baseline
    bench.report(f"baseline: {cfg.describe()}")
    probe = bench.execute(cfg)
    if not probe.ok or probe.measurement is None:
        raise AutotuneError(
            f"The baseline config failed ({probe.failure}): {probe.message}. Nothing can be "
            "compared against it: fix the model/data, or pass a baseline= that runs."
        )
    samples, outcome = _accuracy_runs(bench, probe.measurement)
    runs = [r.seconds for r in outcome.accuracy]
    record = bench.record(
        dataclasses.replace(outcome, seconds=outcome.seconds + probe.seconds),
        role=Role.BASELINE,
        measure_seconds=probe.seconds,
        accuracy_samples=samples,
        trial_limit=max(
            MIN_TRIAL_LIMIT, TRIAL_LIMIT_FACTOR * (probe.seconds + statistics.fmean(runs))
        ),
    )
    # The baseline is a point of the space (the space includes it), so it is stored with its
    # parameters and every sampler, grid samplers included, can place it.
    bench.study.enqueue_trial(space.params_of(cfg, cfg))
    trial = bench.ask()
    space.suggest(trial, cfg)  # the sampler sees the baseline's parameters
    bench.tell(trial, record, None, float(record.projected_time or 0.0))
    baseline = Baseline.of(bench.ledger())
    assert baseline is not None
    return baseline


def _accuracy_runs(bench: Bench, m: Measurement) -> tuple[int, TrialOutcome]:
    """The baseline's accuracy runs over ``accuracy_repeats`` seeds. Unless the user fixed
    ``accuracy_samples``, the budget starts from the plan (time share, floor) and doubles while
    the baseline's own spread hides a drop of the tolerance and time allows."""
    s = bench.settings
    seeds = tuple(range(s.accuracy_repeats))
    plan = plan_accuracy_budget(
        n_train=s.n_train,
        batch_size=s.baseline.batch_size,
        throughput=m.throughput,
        repeats=s.accuracy_repeats,
        seconds_left=bench.deadline.left(),
        planned_epochs=s.planned_epochs,
    )
    if s.accuracy_samples is not None:
        plan = AccuracyPlan(first=s.accuracy_samples, most=s.accuracy_samples, floor=plan.floor)
    elif plan.note is not None:
        bench.report(f"accuracy guard: {plan.note}")
    samples = plan.first
    spent = 0.0
    while True:
        outcome = bench.execute(
            s.baseline, accuracy=AccuracyCheck(samples=samples, seeds=seeds), measured=m
        )
        if not outcome.ok:
            raise AutotuneError(
                f"The baseline config failed its accuracy runs ({outcome.failure}): "
                f"{outcome.message}."
            )
        spent += outcome.seconds
        guard = make_guard(s, tuple(r.metric for r in outcome.accuracy), samples)
        run_seconds = sum(r.seconds for r in outcome.accuracy)
        left = bench.deadline.left()
        if not worth_growing(guard, plan, run_seconds=run_seconds, seconds_left=left):
            return samples, dataclasses.replace(outcome, seconds=spent)
        grown = plan.grown(samples)
        bench.report(
            f"accuracy guard: at {samples} samples per run the baseline's "
            f"{guard.metric_name} varies by ±{guard.spread:.4f} over {guard.repeats} seeds, "
            f"too much to resolve a drop of {s.tolerance:g}: measuring again at {grown}"
        )
        samples = grown

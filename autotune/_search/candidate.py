"""One candidate trial: ask the sampler, skip what is already known, measure throughput first,
prune the clearly slower, pay for accuracy runs only where the numerics change, record."""

from __future__ import annotations

import dataclasses

import optuna
from optuna.trial import TrialState

from autotune._config import TrainingConfig
from autotune._errors import ConfigError
from autotune._search import storage
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.ledger import Ledger
from autotune._search.progress import trial_line
from autotune._search.record import Record, Role
from autotune._space import SearchSpace
from autotune._trial.failures import FailureReason
from autotune._trial.probe import MemoryLimits
from autotune._trial.runner import TrialOutcome

__all__ = ["CandidateRun", "run_candidate"]

PRUNE_MARGIN = 1.10  # prune only candidates >10% slower than the best (beyond timing noise)


@dataclasses.dataclass(frozen=True)
class CandidateRun:
    """How a candidate trial went, for the loop's bookkeeping."""

    seconds: float | None = None  # how long it ran (None: it did not run)
    repeated: bool = False  # the sampler proposed a config already measured
    exhausted: bool = False  # the sampler has covered its whole space


def run_candidate(
    bench: Bench,
    space: SearchSpace,
    *,
    baseline: Baseline,
    memory: MemoryLimits | None,
    guided: bool,
    stage: str,
) -> CandidateRun:
    trial = bench.ask()
    try:
        cfg = space.suggest(trial, bench.settings.baseline)
    except ConfigError as exc:  # a combination the config itself rejects
        bench.fail(trial, str(exc))
        return CandidateRun()
    ledger = bench.ledger()
    previous = ledger.measured(cfg)
    if previous is not None:
        # Its record again, as a candidate (even when it repeats the baseline's config).
        record = dataclasses.replace(previous.record, reused=True, role=Role.CANDIDATE)
        return _finish(bench, trial, record, baseline, stage, repeated=True)
    predicted = _predicted_oom(cfg, memory)
    if predicted is not None:
        record = bench.record(predicted, role=Role.CANDIDATE)
        return _finish(bench, trial, record, baseline, stage)
    checked = cfg.numerics_key() != baseline.record.config.numerics_key()
    # Same batch size, precision and schedule train the same model: reuse its accuracy runs.
    known = ledger.accuracy_of_numerics(cfg) if checked else None
    try:
        with storage.heartbeat(bench.study, trial):
            record = _measure(bench, trial, cfg, baseline, ledger, guided, checked and not known)
    except KeyboardInterrupt:
        # The trial did not finish: fail it and let a resumed search run it again.
        bench.study.tell(trial, state=TrialState.FAIL)
        storage.retry_once(bench.study, bench.study.trials[trial.number])
        raise
    if known is not None and record.ok:
        record = dataclasses.replace(
            record, accuracy=known, accuracy_samples=baseline.accuracy.samples
        )
    return _finish(bench, trial, record, baseline, stage, seconds=record.seconds)


def _measure(
    bench: Bench,
    trial: optuna.Trial,
    cfg: TrainingConfig,
    baseline: Baseline,
    ledger: Ledger,
    guided: bool,
    needs_accuracy: bool,
) -> Record:
    """Throughput first: a clearly slower candidate does not pay for accuracy runs."""
    outcome = bench.execute(cfg)
    measured = outcome.seconds
    pruned = False
    if outcome.ok and needs_accuracy:
        pruned = guided and _should_prune(bench, trial, outcome, ledger)
        if not pruned:
            outcome = bench.execute(cfg, accuracy=baseline.accuracy, measured=outcome.measurement)
            outcome = dataclasses.replace(outcome, seconds=outcome.seconds + measured)
    samples = baseline.accuracy.samples if outcome.accuracy else None
    return bench.record(
        outcome,
        role=Role.CANDIDATE,
        pruned=pruned,
        measure_seconds=measured,
        accuracy_samples=samples,
    )


def _should_prune(bench: Bench, trial: optuna.Trial, outcome: TrialOutcome, ledger: Ledger) -> bool:
    """Optuna's pruner on the throughput phase's projected time, and clearly (beyond noise)
    slower than the best feasible config so far."""
    assert outcome.measurement is not None
    s = bench.settings
    projected = outcome.measurement.projected_time(s.planned_samples, s.planned_epochs)
    trial.report(projected, step=0)
    best = ledger.best()
    if best is None:
        return False
    return bool(trial.should_prune()) and projected > PRUNE_MARGIN * float(
        ledger.projected(best) or 0
    )


def _predicted_oom(cfg: TrainingConfig, memory: MemoryLimits | None) -> TrialOutcome | None:
    if memory is None or memory.allows(cfg):
        return None
    peak = memory.predicted_peak(cfg)
    need = f" (needs ~{peak / 2**30:.2f} GiB" if peak else " ("
    return TrialOutcome(
        config=cfg,
        failure=FailureReason.OOM,
        message=(
            f"out of memory, predicted by the memory probe: batch {cfg.batch_size} is above "
            f"{memory.limit(cfg)}, the largest that fits with {cfg.precision.value} and "
            f"checkpointing={cfg.checkpointing}{need} of "
            f"{memory.capacity / 2**30:.2f} GiB usable); not run"
        ),
    )


def _finish(
    bench: Bench,
    trial: optuna.Trial,
    record: Record,
    baseline: Baseline,
    stage: str,
    *,
    repeated: bool = False,
    seconds: float | None = None,
) -> CandidateRun:
    exhausted = bench.tell(trial, record, baseline.guard, baseline.projected_time)
    ledger = bench.ledger()
    entry = next(e for e in ledger.entries if e.number == trial.number)
    bench.report(
        trial_line(
            ledger,
            entry,
            stage=stage,
            n_trials=bench.settings.n_trials,
            time_left=bench.deadline.describe(),
        )
    )
    if exhausted:
        bench.report("the sampler has tried every config in the space")
    return CandidateRun(seconds=seconds, repeated=repeated, exhausted=exhausted)

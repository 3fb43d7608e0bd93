"""The baseline: its throughput measured first, with the same budget as every candidate; its
accuracy runs (one per data-order seed, which the guard pairs with each candidate's) measured
only when the first candidate that changes the numerics needs them, within a bounded share of
the budget.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Protocol

from autotune._errors import AutotuneError
from autotune._guard import words as guard_words
from autotune._guard.guard import FIRST_PAIR, AccuracyGuard, unsettleable
from autotune._guard.plan import (
    AccuracyPlan,
    HorizonPlan,
    LongerMiss,
    longer_reason,
    plan_accuracy_budget,
    plan_horizon,
    question_runs,
    timeout_for,
)
from autotune._knobs.config import TrainingConfig
from autotune._knobs.registry import config_from, pair_base
from autotune._search import storage
from autotune._search.bench import Bench
from autotune._search.ledger import Entry, Ledger
from autotune._search.record import (
    BaselineAccuracy,
    BaselineCheck,
    GuardFailure,
    NoCheck,
    Record,
    Role,
)
from autotune._space import Choice, SearchSpace
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, Budget, TrialOutcome
from autotune._trial.probe import MemoryLimits

__all__ = [
    "Baseline",
    "Calibration",
    "GuardCost",
    "GuardRunsFailed",
    "calibrate",
    "choose_horizon",
    "measure_baseline",
    "measure_baseline_accuracy",
    "measurement_seconds",
    "pair_settings",
    "run_baseline",
    "smaller_split",
    "split_to_fit",
]

WIDE_SPREAD = 0.25  # a baseline measurement spread wider than this is measured again
REMEASURE = 2  # ... at most this many times (the least spread kept)
_ORDINALS = ("first", "second", "third")  # the measurements' names, up to REMEASURE + 1

SLACK = 1.2  # expected times of runs like the baseline's, as a multiple of the baseline's
# The steady-state part of a measurement lasts about 1% of the budget, within these bounds: a
# 240-s search then measures ~2.4 s per config, a 1-hour one 10 s.
TIMED_SHARE, MIN_TIMED, MAX_TIMED, UNTIMED_TARGET = 0.01, 1.0, 10.0, 3.0
MAX_MEASURE_SHARE = 0.10  # a batch size one measurement of which takes more is not searched


class Measured(Protocol):
    """A trial's record or outcome: its config, and its measurement where it has one."""

    @property
    def config(self) -> TrainingConfig: ...

    @property
    def measurement(self) -> Measurement | None: ...


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The measured baseline, and what the rest of the search derives from it."""

    entry: Entry
    accuracy: BaselineAccuracy | None  # None until its accuracy runs are measured
    guard: AccuracyGuard | None
    # Its latest measurement (its trial's, or one taken again during the search): what the
    # search prices runs from, the machine as it is now (None: its trial's own).
    latest: BaselineCheck | None = None

    @classmethod
    def of(cls, ledger: Ledger) -> Baseline | None:
        entry = ledger.baseline
        if entry is None:
            return None
        return cls(entry, ledger.baseline_accuracy, ledger.guard, ledger.latest_check)

    @property
    def record(self) -> Record:
        return self.entry.record

    @property
    def throughput(self) -> float:
        """Samples/s, as the baseline's latest measurement read."""
        if self.latest is not None and self.latest.throughput:
            return self.latest.throughput
        m = self.record.measurement
        return m.throughput if m is not None else 0.0

    @property
    def check(self) -> AccuracyCheck | None:
        """The accuracy run every candidate that changes the numerics makes (seed 0)."""
        return None if self.accuracy is None else self.check_of(None, (0,))

    @property
    def pair_config(self) -> TrainingConfig:
        """The settings the guard's runs train with, both arms of every pair (the baseline's
        config with the safe answer's shared knobs, see :func:`pair_settings`)."""
        if self.accuracy is not None and self.accuracy.config is not None:
            return self.accuracy.config
        return self.record.config

    @property
    def pair_throughput(self) -> float:
        """The throughput the baseline's accuracy runs trained at (see :attr:`pair_config`)."""
        if self.accuracy is not None and self.accuracy.throughput:
            return self.accuracy.throughput
        return self.throughput

    def check_of(self, cfg: TrainingConfig | None, seeds: tuple[int, ...]) -> AccuracyCheck:
        """Accuracy runs of ``seeds`` for ``cfg``'s arm of each pair: the pair's settings
        with ``cfg``'s numerics (see ``TrainingConfig.pair_arm``); None: the trial's own."""
        assert self.accuracy is not None
        arm = None if cfg is None else cfg.pair_arm(self.pair_config)
        return AccuracyCheck(samples=self.accuracy.samples, seeds=seeds, config=arm)

    def run_seconds(self, of: Measured | None = None) -> float:
        """Expected seconds of one accuracy run of ``of`` (a trial's record or outcome: its
        config at its measured throughput, training its share of the horizon); of the
        baseline's own when not given."""
        if self.accuracy is None or not self.accuracy.runs:
            return 0.0
        mean = statistics.fmean(run.seconds for run in self.accuracy.runs)
        if of is None:
            return SLACK * mean
        throughput = of.measurement.throughput if of.measurement is not None else None
        base = self.pair_throughput
        ratio = base / throughput if throughput and base else 1.0
        return SLACK * mean * ratio * of.config.train_fraction

    def first_seeds(self) -> tuple[int, ...]:
        """The seeds of a check's first look: from :data:`FIRST_PAIR` (the screening run,
        seed 0, chose the candidate and is no pair), as many as the guard's
        :meth:`~autotune._guard.guard.AccuracyGuard.first_pairs`, or as the baseline has runs
        of, where later looks bought more."""
        have = len(self.accuracy.runs) if self.accuracy is not None else 0
        least = self.guard.first_pairs() if self.guard is not None else 0
        return tuple(range(FIRST_PAIR, FIRST_PAIR + max(least, have - FIRST_PAIR)))

    def confirm_seconds(self, of: Measured | None = None) -> float:
        """Expected seconds of a check's first look: the candidate's runs of its seeds, and the
        baseline's of those it has no run of yet."""
        seeds = self.first_seeds()
        have = len(self.accuracy.runs) if self.accuracy is not None else 0
        missing = sum(1 for seed in seeds if seed >= have)
        return self.run_seconds(of) * len(seeds) + self.run_seconds() * missing

    @property
    def measure_seconds(self) -> float:
        """Seconds of measuring a config's throughput once, as the baseline's latest took."""
        if self.latest is not None and self.latest.measure_seconds:
            return SLACK * self.latest.measure_seconds
        return SLACK * self.record.measure_seconds


def measurement_seconds(
    batch_size: int,
    budget: Budget,
    throughput: float,
    overhead: float,
    accumulation: int = 1,
    ranks: int = 1,
) -> float:
    """Seconds one measurement of a config at ``batch_size`` (and ``accumulation`` steps)
    takes at ``throughput``: its warm-up and timed micro-batches, plus a fixed ``overhead``
    (model copy, set-up, a validation batch). Under DDP ``batch_size`` is a rank's, each rank
    runs the budget's steps, and ``throughput`` counts every rank's samples."""
    steps = sum(budget.steps(batch_size, accumulation))
    return overhead + steps * batch_size * ranks / max(throughput, 1e-9)


def smaller_split(space: SearchSpace, cfg: TrainingConfig) -> TrainingConfig | None:
    """With the global batch kept: ``cfg`` split into the next smaller micro-batch of the
    space (more accumulation steps, the same global batch); None when there is none."""
    total, batch = space.global_batch_size, space.knobs.get("batch_size")
    if total is None or not isinstance(batch, Choice):
        return None
    smaller = [int(b) for b in batch.values if int(b) < cfg.batch_size]  # type: ignore[arg-type]
    if not smaller:
        return None
    micro = max(smaller)
    # Through the registry, so that knobs that do not exist with accumulation are dropped.
    steps = total // (micro * cfg.ranks)
    return config_from({"batch_size": micro, "gradient_accumulation_steps": steps}, cfg)


def split_to_fit(bench: Bench, space: SearchSpace, memory: MemoryLimits | None) -> TrainingConfig:
    """With the global batch kept: the baseline, its batch split into smaller micro-batches
    until the memory probe says it fits (before anything runs), and said so. The baseline
    itself where it fits, or where there is no smaller split."""
    cfg = bench.settings.baseline
    while memory is not None and not memory.allows(cfg):
        split = smaller_split(space, cfg)
        if split is None:
            break
        bench.report(
            f"baseline: batch {cfg.batch_size} does not fit in memory (the memory probe); "
            f"splitting the global batch of {cfg.global_batch_size} into {split.batch_size}"
            f" x {split.gradient_accumulation_steps}"
        )
        cfg = split
    return cfg


def run_baseline(bench: Bench, space: SearchSpace, *, floor: float = 0.0) -> TrialOutcome:
    """Measure the baseline's throughput. With the global batch kept, a baseline out of
    memory is split into smaller micro-batches until one fits (the same global batch, so the
    same numerics), and it is said so: the outcome's config is the split that ran, which the
    search then takes as its baseline. ``floor``: the seconds its run gets at the least,
    however close the deadline."""
    cfg = bench.settings.baseline
    outcome = bench.execute(cfg, floor=floor)
    while outcome.failure is FailureReason.OOM:
        split = smaller_split(space, cfg)
        if split is None:
            break
        bench.report(
            f"baseline: batch {cfg.batch_size} x {cfg.gradient_accumulation_steps} does not "
            f"fit in memory; trying {split.batch_size} x {split.gradient_accumulation_steps}, "
            f"the same global batch of {split.global_batch_size}"
        )
        cfg = split
        outcome = bench.execute(cfg, floor=floor)
    return outcome


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What measuring the baseline once fixes for the whole search."""

    baseline: TrainingConfig  # the config that ran: where the one asked for did not fit, a split
    budget: Budget  # the measurement budget every config gets
    space: SearchSpace  # less the batch sizes one measurement of which would take too long
    seconds: float = 0.0  # how long the calibration's run took


def calibrate(bench: Bench, space: SearchSpace) -> Calibration:
    """Measure the baseline once, to warm the trial worker up (the first run in a fresh
    process is slow) and to learn its speed; then fix the measurement budget every config gets:
    the same number of timed samples (the same batches, for configs of one batch size), about
    1% of the time budget at the baseline's speed. Batch sizes one measurement of which would
    take more than a tenth of the budget leave the space. Where the baseline fails, the
    budget and the space stay as they are (its own measurement says why, next)."""
    bench.report.trial("calibration: the baseline's speed")
    outcome = run_baseline(bench, space)
    s = bench.settings
    cfg = outcome.config
    m = outcome.measurement
    if not outcome.ok or m is None:
        return Calibration(cfg, s.budget, space, outcome.seconds)
    overhead = max(
        0.0, outcome.seconds - (m.warmup_steps + m.timed_steps) * m.batch_size / m.throughput
    )
    seconds = UNTIMED_TARGET
    timed_share = bench.deadline.share(TIMED_SHARE)
    if s.timed_seconds is not None:
        seconds = s.timed_seconds
    elif timed_share is not None:
        seconds = min(MAX_TIMED, max(MIN_TIMED, timed_share))
    budget = dataclasses.replace(
        s.budget,
        warmup_steps=2,
        # Samples a rank times (each rank runs the budget): its share of the throughput.
        timed_samples=max(cfg.batch_size, round(m.throughput / cfg.ranks * seconds)),
        min_timed_steps=3,
        min_timed_seconds=0.0,  # the same samples for every config, however fast
        max_timed_seconds=0.0,
    )
    batch = space.knobs.get("batch_size")
    limit = bench.deadline.share(MAX_MEASURE_SHARE)
    if limit is None or not isinstance(batch, Choice):
        return Calibration(cfg, budget, space, outcome.seconds)
    kept = tuple(
        b
        for b in batch.values
        if b == cfg.batch_size
        or SLACK * measurement_seconds(int(b), budget, m.throughput, overhead, ranks=cfg.ranks)  # type: ignore[arg-type]
        <= limit
    )
    if kept == batch.values:
        return Calibration(cfg, budget, space, outcome.seconds)
    dropped = ", ".join(str(b) for b in batch.values if b not in kept)
    note = (
        f"batch_size: dropped {dropped} (one measurement would take more than "
        f"{MAX_MEASURE_SHARE:.0%} of the budget at the baseline's {m.throughput:,.0f} samples/s)"
    )
    bench.detail(f"space: {note}")  # the space's notes, in the result, keep it too
    return Calibration(cfg, budget, space.with_choice("batch_size", kept, note), outcome.seconds)


def _spread_words(m: Measurement | None) -> str:
    return "it failed" if m is None else f"its step times spread {m.spread:.0%} of the median"


def measure_baseline(bench: Bench, space: SearchSpace, *, needs: float = 0.0) -> Baseline:
    """Measure the baseline's throughput (or adopt the study's) and store it as a trial. Its
    record's config is the one measured: where the one asked for did not fit, a split.
    ``needs``: the seconds its run was seen to take (the calibration's): it gets twice that
    at the least, however close the deadline: a baseline cut short by the deadline would
    fail the search as a fault of the model or data."""
    found = Baseline.of(bench.ledger())
    if found is not None:
        bench.report(f"baseline: reusing trial {found.entry.number} from the study")
        return found
    bench.report(f"baseline: {bench.settings.baseline.describe()}")
    bench.report.trial("baseline")
    floor = 2.0 * needs
    outcome = run_baseline(bench, space, floor=floor)
    latest = outcome.measurement
    for attempt in range(REMEASURE):
        m = outcome.measurement
        if not outcome.ok or m is None or m.spread <= WIDE_SPREAD:
            break
        if not bench.deadline.fits(outcome.seconds / MAX_MEASURE_SHARE):
            break  # a short budget: another measurement would be a large part of it
        # Every screening ratio divides by this figure: a slow first window would inflate all
        # of them. Each line names its own measurement, so no two lines read alike.
        bench.report(
            f"baseline: its step times spread {m.spread:.0%} of the median; measuring it again"
            if attempt == 0
            else f"baseline: measured again, {_spread_words(latest)}; measuring it a "
            f"{_ORDINALS[attempt + 1]} time (the steadiest is kept)"
        )
        again = run_baseline(bench, space, floor=floor)
        latest = again.measurement if again.ok else None
        if again.ok and again.measurement is not None and again.measurement.spread < m.spread:
            outcome = again
    cfg = outcome.config
    if not outcome.ok or outcome.measurement is None:
        raise AutotuneError(
            f"The baseline config failed ({outcome.failure}): {outcome.message}. Nothing can "
            "be compared against it: fix the model/data, or pass a baseline= that runs."
        )
    record = bench.record(
        outcome,
        role=Role.BASELINE,
        measure_seconds=outcome.seconds,
    )
    # The baseline is a point of the space (the space includes it), so it is stored with its
    # parameters and every sampler, grid samplers included, can place it.
    bench.study.enqueue_trial(space.params_of(cfg, cfg))
    trial = bench.ask()
    space.suggest(trial, cfg)  # the sampler sees the baseline's parameters
    bench.tell(trial, record, None, record.projected_time)
    baseline = Baseline.of(bench.ledger())
    assert baseline is not None
    load = record.load
    if load is not None and load.busy:
        # Every ratio until the machine's state changes is of this state: said when it starts.
        bench.report(
            f"machine: other processes used ~{load.others:.1f} of {load.cores} cores while the "
            "baseline was measured: ratios are of that state until it changes"
        )
    return baseline


def pair_settings(ledger: Ledger, baseline: Baseline) -> tuple[TrainingConfig, float]:
    """The settings the baseline's accuracy runs, and both arms of every pair, train with, and
    their throughput: those of the runs already made; else the baseline's config with the
    shared knobs of the fastest safe config measured so far (see ``registry.pair_base``), at
    that config's measured throughput (the baseline's where it was not measured itself: the
    safe answer's own may owe part of its speed to knobs a pair does not share). A pair then
    differs only in the numerics judged, as before, and each of its runs lays out memory and
    steps the optimizer as the safe answer does."""
    if baseline.accuracy is not None:
        return baseline.pair_config, baseline.pair_throughput
    base = baseline.record.config
    safe = ledger.best_safe()
    if safe is None:
        return base, baseline.throughput
    cfg = pair_base(base, safe.config)
    if cfg == base:
        return base, baseline.throughput
    measured = ledger.measured(cfg)
    m = measured.record.measurement if measured is not None else None
    return cfg, m.throughput if m is not None else baseline.throughput


@dataclasses.dataclass(frozen=True)
class GuardCost:
    """The baseline's accuracy runs as planned: ``samples`` per run, ``seconds`` for all of
    them, the budget's ``plan`` (None where the user fixed the samples); ``fits``: whether they
    and one check fit in the time given (at the shortest horizon a check may use, whose runs
    take ``least_seconds``)."""

    samples: int
    seconds: float
    plan: AccuracyPlan | None
    fits: bool = True
    least_seconds: float = 0.0
    # The same runs and one check's after them (see guard.question_runs), at the plan's
    # horizon and at the shortest.
    question_seconds: float = 0.0
    least_question_seconds: float = 0.0


def accuracy_plan_seconds(
    bench: Bench, baseline: Baseline, *, left: float | None = None
) -> GuardCost:
    """The baseline's accuracy runs at the plan's horizon: a share of the whole budget, and
    no more than ``left`` seconds (the time there is now for those runs and one candidate's
    check) hold; a shorter horizon where the time left is short, down to the shortest a
    check may use."""
    s = bench.settings
    _, throughput = pair_settings(bench.ledger(), baseline)
    plan = plan_accuracy_budget(
        n_train=s.n_train,
        batch_size=s.baseline.global_batch_size,  # optimizer steps, accumulation included
        throughput=throughput,
        repeats=s.accuracy_repeats,
        seconds=bench.deadline.budget,
        planned_epochs=s.planned_epochs,
        whole_run=s.space.searches_length,
        left=None if left is None else left / SLACK,
    )
    chosen: AccuracyPlan | None = plan
    samples, fits = plan.samples, plan.fits
    per_sample = SLACK * s.accuracy_repeats / max(throughput, 1e-9)
    question = question_runs(s.accuracy_repeats) / s.accuracy_repeats
    if s.accuracy_samples is not None:
        samples, chosen = s.accuracy_samples, None
        fits = left is None or question * per_sample * samples <= left
    least = s.accuracy_samples if s.accuracy_samples is not None else plan.least
    return GuardCost(
        samples=samples,
        seconds=per_sample * samples,
        plan=chosen,
        fits=fits,
        least_seconds=per_sample * least,
        question_seconds=question * per_sample * samples,
        least_question_seconds=question * per_sample * least,
    )


def measure_baseline_accuracy(
    bench: Bench,
    baseline: Baseline,
    samples: int | None = None,
    horizons: tuple[HorizonPlan, ...] = (),
    reserve: float = 0.0,
    left: float | None = None,
) -> Baseline:
    """The baseline's accuracy runs over ``accuracy_repeats`` seeds (and the untrained model's
    metric), each validated halfway too, stored in the study with the horizon's plan (after
    the ``horizons`` tried before): the guard every candidate is then held to.
    ``samples``: a horizon other than the plan's (a longer one, see :func:`choose_horizon`);
    ``left``: the seconds there are for these runs and one check (see
    :func:`accuracy_plan_seconds`)."""
    s = bench.settings
    cost = accuracy_plan_seconds(bench, baseline, left=left)
    planned, expected, chosen = cost.samples, cost.seconds, cost.plan
    if samples is None:
        samples = planned
    else:
        expected, chosen = expected * samples / planned, None
    said = None if chosen is None else guard_words.plan_note(chosen)
    if said is not None:
        bench.detail(f"accuracy guard: {said}")
    pair, pair_throughput = pair_settings(bench.ledger(), baseline)
    own = pair == baseline.record.config
    if not own:
        line = (
            f"accuracy guard: every accuracy run, the baseline's and both arms of each pair, "
            f"trains with the safe answer's settings ({pair.describe()}): the same for both "
            "arms, numerics unchanged"
        )
        bench.detail(line)  # the pair's settings are in the summary's guard line
    check = AccuracyCheck(
        samples=samples,
        seeds=tuple(range(s.accuracy_repeats)),
        initial=True,
        config=None if own else pair,
        midpoint=True,
    )
    bench.report.trial("the baseline's accuracy runs (the accuracy guard)")
    outcome = bench.execute(
        s.baseline, accuracy=check, measured=baseline.record.measurement, expected=expected
    )
    if not outcome.ok:
        raise GuardRunsFailed(
            GuardFailure(
                why=NoCheck.of(outcome.failure, outcome.message),
                failure=outcome.failure,
                message=outcome.message or "",
                samples=samples,
                longer=bool(horizons),
            )
        )
    accuracy = BaselineAccuracy(
        runs=outcome.accuracy,
        samples=samples,
        initial_metric=outcome.initial_metric,
        seconds=outcome.seconds,
        plan=chosen,
        config=None if own else pair,
        throughput=None if own else pair_throughput,
    )
    plan = horizon_plan(bench, accuracy, reserve)
    accuracy = dataclasses.replace(accuracy, horizons=(*horizons, plan))
    storage.write_baseline_accuracy(bench.study, accuracy)
    measured = Baseline.of(bench.ledger())
    assert measured is not None and measured.guard is not None
    guard = measured.guard
    budget = None
    # Only for a baseline that learned on every data order (else the advice, or the longer
    # horizon choose_horizon asks for, says what the guard needs) at its final horizon.
    settled_horizon = s.accuracy_samples is not None or longer_reason(guard, plan) is None
    # A baseline that learned but whose validation set rules every check out: no check is
    # priced (the advice says why and what would do).
    checkable = not guard.learned or unsettleable(guard) is None
    if guard.learned and not guard.wrong_way and not guard.lagging and settled_horizon:
        budget = guard_words.budget_words(plan, bench.deadline.budget) if checkable else None
    if budget:
        timed = dataclasses.replace(accuracy, budget=bench.deadline.budget)
        storage.write_baseline_accuracy(bench.study, timed)
        measured = Baseline.of(bench.ledger()) or measured
    # One line per horizon tried; the plan, the budget and the advice are the detail's (the
    # summary says what is unsettled), so that a search that tries many horizons stays short.
    bench.report(
        f"accuracy guard: baseline {guard.metric_name} {guard.baseline_metric:.4f} "
        f"± {guard.spread:.4f} over {guard.repeats} seeds of {samples:,} samples "
        f"(untrained model: {_fmt(guard.initial_metric)}), in {outcome.seconds:.0f} s"
    )
    if checkable:
        bench.detail(f"accuracy guard: horizon: {guard_words.horizon(plan)}")
    if budget:
        bench.detail(f"accuracy guard: {budget}")
    advice = guard_words.advice(guard.advice(), guard)
    if advice:
        bench.detail(f"accuracy guard: {advice}")
    return measured


class GuardRunsFailed(AutotuneError):
    """The baseline's accuracy runs failed (an error, a stream that ended, a hang stopped at
    its limit): no accuracy check can be made. The search goes on with the knobs that leave
    the numerics alone (see ``AccuracyQuestion.ask``)."""

    def __init__(self, failure: GuardFailure) -> None:
        super().__init__(
            f"The baseline config failed its accuracy runs ({failure.failure}): {failure.message}."
        )
        self.failure = failure


def accuracy_words(accuracy: BaselineAccuracy, guard: AccuracyGuard) -> str | None:
    """What the baseline's accuracy record says of its horizon, in sentences: a study filed
    before these facts, its note as stored, and what came after it."""
    said = guard_words.accuracy_note(
        plan=accuracy.plan,
        horizon=accuracy.horizons[-1] if accuracy.horizons else None,
        budget=accuracy.budget,
        longer=accuracy.longer,
        guard=guard,
    )
    return guard_words.sentences(accuracy.stored_note, said) or None


def horizon_plan(bench: Bench, accuracy: BaselineAccuracy, reserve: float) -> HorizonPlan:
    """The horizon's plan (see :mod:`autotune._guard.plan`) from the baseline's runs, with
    the time left but ``reserve`` seconds for checks."""
    s = bench.settings
    left = bench.deadline.left()
    mean = statistics.fmean(r.seconds for r in accuracy.runs) if accuracy.runs else 0.0
    return plan_horizon(
        accuracy.runs,
        samples=accuracy.samples,
        limit=max(accuracy.samples, s.planned_samples),
        tolerance=s.tolerance,
        run_seconds=SLACK * mean,
        left=None if left is None else max(0.0, left - reserve),
    )


def choose_horizon(bench: Bench, baseline: Baseline, reserve: float) -> Baseline:
    """Double the baseline's horizon (its runs again, at twice the samples, up to the planned
    run) where :func:`horizon.longer_reason` says (it did not learn, some of its seeds lag
    in take-off, or the plan finds the longer horizon the better place to check), while the
    longer runs and a candidate's check after them fit before the deadline with ``reserve``
    seconds kept. Not where the user fixed ``accuracy_samples``."""
    s = bench.settings
    while True:
        guard, accuracy = baseline.guard, baseline.accuracy
        if guard is None or accuracy is None or s.accuracy_samples is not None:
            return baseline
        plan = horizon_plan(bench, accuracy, reserve)
        why = guard_words.longer_words(longer_reason(guard, plan), guard, plan)
        if why is None:
            return baseline
        samples = plan.longer
        runs = question_runs(s.accuracy_repeats)
        seconds = SLACK * runs * samples / max(baseline.throughput, 1e-9)
        if not bench.deadline.fits(seconds + reserve):
            left, budget = bench.deadline.left(), bench.deadline.budget
            more = None
            if budget is not None and left is not None:
                more = timeout_for(budget=budget, left=left, need=seconds + reserve)
            reason = longer_reason(guard, plan)
            assert reason is not None  # why is its words
            miss = LongerMiss(
                reason=reason,
                plan=plan,
                samples=samples,
                seconds=seconds,
                timeout=more,
                lagging=guard.lagging,
                repeats=guard.repeats,
            )
            bench.report(f"accuracy guard: {guard_words.longer_miss_words(miss, guard)}")
            missed = dataclasses.replace(accuracy, longer=miss)
            storage.write_baseline_accuracy(bench.study, missed)
            return Baseline.of(bench.ledger()) or baseline
        bench.report(f"accuracy guard: {why}; trying {samples:,}")
        baseline = measure_baseline_accuracy(
            bench, baseline, samples, horizons=accuracy.horizons, reserve=reserve
        )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"

"""The ledger: one snapshot of a study (every trial's record, the re-measurements, the
confirmations) and the rules read from it: a trial's projected time, its noise, whether it may
win, and which trial wins.

The search decides with it, and a result rebuilt from the storage alone
(:meth:`autotune.SearchResult.from_study`) reads the same snapshot through the same rules, so
the two cannot disagree about a trial.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import optuna

from autotune._guard.confirmation import Confirmation, Reason, Verdict
from autotune._guard.guard import (
    AccuracyGuard,
    Judged,
    judge,
    screening_violation,
    unsettleable,
)
from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._load import Load
from autotune._search import derived, ranking, storage, yardstick
from autotune._search.record import BaselineAccuracy, BaselineCheck, Record, Role, TrialRecord
from autotune._search.settings import SearchSettings
from autotune._speed import stats as speed
from autotune._speed.stats import Interval, Noise, Race
from autotune._trial.failures import FailureReason
from autotune._trial.outcome import AccuracyRun

__all__ = [
    "Entry",
    "Ledger",
    "TrialRecord",
    "beside",
    "configs_measured",
    "could_win_bar",
    "fastest_verified",
    "first_win_at",
    "loads",
    "make_guard",
    "promise",
    "rounds_noise",
    "screening_noise",
    "step_draws",
    "unproven",
]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Entry:
    """A finished trial of the study and its record."""

    number: int
    record: Record

    @property
    def config(self) -> TrainingConfig:
        return self.record.config


def make_guard(settings: SearchSettings, accuracy: BaselineAccuracy) -> AccuracyGuard:
    """The accuracy guard that the baseline's accuracy runs and the search's tolerance make."""
    return AccuracyGuard(
        metric_name=settings.metric_name,
        higher_is_better=settings.higher_is_better,
        tolerance=settings.tolerance,
        baseline_runs=tuple(run.metric for run in accuracy.runs),
        accuracy_samples=accuracy.samples,
        initial_metric=accuracy.initial_metric,
        baseline_units=tuple(run.units for run in accuracy.runs),
        unit_counts=next((run.counts for run in accuracy.runs if run.counts is not None), None),
        min_pairs=settings.min_pairs,
        first_look=settings.accuracy_repeats,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
    """What a ledger was read from: the finished trials' numbers, the study's attributes and
    the settings it was judged under."""

    numbers: tuple[int, ...]
    attrs: Mapping[str, Any]
    settings: SearchSettings
    writes: int = dataclasses.field(default=0, compare=False)  # storage.writes() then
    at: float = dataclasses.field(default=0.0, compare=False)  # time.monotonic() then

    def attrs_stand(self, numbers: tuple[int, ...]) -> bool:
        """Whether its attributes stand for a read now, with ``numbers`` finished: no trial
        finished since, this process wrote none, and they were read within
        :data:`storage.ATTRS_FRESH` seconds (another process's writes are seen within it)."""
        return (
            numbers == self.numbers
            and storage.writes() == self.writes
            and time.monotonic() - self.at < storage.ATTRS_FRESH
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ledger:
    """A snapshot of the study; every verdict on a trial is a method of it."""

    entries: tuple[Entry, ...]
    rounds: tuple[Mapping[int, float], ...]  # side-by-side rounds: trial -> projected time
    confirmations: Mapping[str, Confirmation]
    baseline_accuracy: BaselineAccuracy | None  # None until it is measured
    guard: AccuracyGuard | None  # made from it
    split_free: bool = False  # how the global batch is split leaves the numerics alone
    # The same rounds' throughputs, trial -> samples/s (none in rounds filed before them).
    round_throughputs: tuple[Mapping[int, float], ...] = ()
    round_loads: tuple[Mapping[int, Load], ...] = ()  # their machine states, trial -> load
    baseline_checks: tuple[BaselineCheck, ...] = ()  # the baseline measured again meanwhile
    notes: tuple[str, ...] = ()  # the whole texts of event lines shortened (the detail)

    # What it was read from (None: built by hand), so that the next read rebuilds only what
    # changed since: see :meth:`read`.
    source: Source | None = dataclasses.field(default=None, compare=False, repr=False)
    judged: Mapping[str, Judged] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )  # what each confirmation was judged from (see :func:`judge`)
    # What its methods computed, kept for the next question asked of the same snapshot: the
    # search asks it many per trial, and each weighs every trial against the others.
    memo: dict[Any, Any] = dataclasses.field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def kept(self, key: Any, make: Callable[[], T]) -> T:
        """``make()``, computed once per snapshot under ``key``."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]  # type: ignore[no-any-return]

    @classmethod
    def read(
        cls, study: optuna.Study, settings: SearchSettings, previous: Ledger | None = None
    ) -> Ledger:
        """The study as it stands. With ``previous`` (an earlier read of the same study), only
        what changed since is rebuilt: the records of trials that finished since are parsed
        (a finished trial never changes), the checks judged again only where their evidence
        (the confirmations, the baseline's runs, the settings) changed, and ``previous``
        itself returned where nothing did, so that what it computed is kept."""
        return _read(study, settings, previous)

    # -- What was measured ---------------------------------------------------------------------

    @functools.cached_property
    def baseline(self) -> Entry | None:
        return next((e for e in self.entries if e.record.role is Role.BASELINE), None)

    @functools.cached_property
    def candidates(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.record.role is Role.CANDIDATE)

    @functools.cached_property
    def _by_config(self) -> dict[TrainingConfig, tuple[Entry, ...]]:
        """Every entry by its config, in trial order."""
        out: dict[TrainingConfig, list[Entry]] = {}
        for e in self.entries:
            out.setdefault(e.config, []).append(e)
        return {cfg: tuple(es) for cfg, es in out.items()}

    def failures(self) -> dict[str, int]:
        return dict(Counter(e.record.failure.value for e in self.entries if e.record.failure))

    def measured(self, cfg: TrainingConfig) -> Entry | None:
        """The trial that measured ``cfg`` itself (not a reuse), one not :func:`away` first."""
        own = [e for e in self._by_config.get(cfg, ()) if not e.record.reused]
        return min(own, key=lambda e: away(self, e), default=None)

    def numerics_id(self, cfg: TrainingConfig) -> str:
        """The key ``cfg``'s confirmation is filed under: equal for configs that train the same
        model (see :func:`autotune._knobs.registry.numerics_key`)."""
        return registry.numerics_id(cfg, split_free=self.split_free)

    def same_numerics(self, a: TrainingConfig, b: TrainingConfig) -> bool:
        """Whether ``a`` and ``b`` train the same model."""
        split_free = self.split_free
        return a.numerics_key(split_free=split_free) == b.numerics_key(split_free=split_free)

    def accuracy_of_numerics(self, cfg: TrainingConfig) -> tuple[AccuracyRun, ...] | None:
        """Accuracy runs of a candidate with ``cfg``'s numerics (the same trained model)."""
        for e in self.candidates:
            r = e.record
            if r.ok and r.accuracy and self.same_numerics(r.config, cfg):
                return r.accuracy
        return None

    def oom_batch_sizes(self) -> list[int]:
        return sorted(
            e.config.batch_size for e in self.entries if e.record.failure is FailureReason.OOM
        )

    # -- Verdicts -------------------------------------------------------------------------------

    def twins(self, entry: Entry) -> tuple[int, ...]:
        """The trial numbers of every entry with ``entry``'s config (itself included): a
        config re-measured side by side under one trial number is re-measured for all of them,
        so a twin that kept only its first, luckier measurement cannot outrank it."""
        return tuple(e.number for e in self._by_config.get(entry.config, ()))

    def remeasured(self, entry: Entry) -> tuple[float, ...]:
        """Its config's projected times measured again in the side-by-side rounds."""
        twins = self.twins(entry) if self.rounds else ()
        return tuple(r[n] for r in self.rounds for n in twins if n in r)

    def times(self, entry: Entry) -> list[float]:  # its screening draws, then its rounds'
        first = draws(self, entry)
        return [] if not first else [*first, *self.remeasured(entry)]

    # -- The baseline's measurements, and each trial's against the one of its state ------------

    @functools.cached_property
    def checks(self) -> tuple[BaselineCheck, ...]:
        """Every measurement of the baseline's throughput, its trial's first, in time order."""
        base = self.baseline
        return yardstick.checks(base.record if base else None, self.baseline_checks)

    @property
    def latest_check(self) -> BaselineCheck | None:
        """The baseline's latest measurement: the machine now, which prices are taken from."""
        checks = self.checks
        return checks[-1] if checks else None

    def reference(self, record: Record) -> BaselineCheck | None:
        """The baseline measurement ``record``'s is compared with (:func:`yardstick.reference`)."""
        return yardstick.reference(self.checks, record)

    def normalized(self, record: Record) -> float | None:
        """``record``'s projected time in the machine's latest state
        (:func:`yardstick.normalized`)."""
        return yardstick.normalized(self.checks, record)

    def projected(self, entry: Entry) -> float | None:
        """Projected training time: the median over the side-by-side rounds where they
        measured it (at least :data:`derived.MIN_ROUNDS`: every figure of such a config comes
        from them), else over its measurement (and a lone re-measurement)."""
        again = self.remeasured(entry)
        times = list(again) if len(again) >= derived.MIN_ROUNDS else self.times(entry)
        return ranking.median_time(times) if times else None

    def side_throughput(self, entry: Entry) -> float | None:
        """Its throughput measured side by side: the median over the rounds that measured it
        (None with fewer than :data:`derived.MIN_ROUNDS`, or in rounds that kept none)."""
        twins = self.twins(entry)
        rates = [r[n] for r in self.round_throughputs for n in twins if n in r]
        return float(statistics.median(rates)) if len(rates) >= derived.MIN_ROUNDS else None

    def rank_time(self, entry: Entry) -> float:
        """Its projected time as ranked: without one, or :func:`away`, it ranks last."""
        return ranking.rank_time(None if away(self, entry) else self.projected(entry))

    def noise(self, entry: Entry) -> float:
        return ranking.relative_noise(self.times(entry)) if self.times(entry) else ranking.MAX_NOISE

    def comparable(self, entry: Entry) -> bool:
        """Timings compare only between identical hardware and software (the fingerprint)."""
        base = self.baseline
        theirs, ours = entry.record.fingerprint, base.record.fingerprint if base else ""
        return not (theirs and ours and theirs != ours)

    def safe(self, entry: Entry) -> bool:
        """Whether it trains the baseline's model (its numerics unchanged): no accuracy risk."""
        base = self.baseline
        return base is not None and self.same_numerics(entry.config, base.config)

    def confirmation(self, entry: Entry) -> Confirmation | None:
        if self.safe(entry):
            return None
        return self.confirmations.get(self.numerics_id(entry.config))

    def screened(self, entry: Entry) -> bool | None:
        """Whether its one-run accuracy screening passed (None: no run, or no guard)."""
        runs = entry.record.accuracy
        if self.safe(entry) or not runs or self.guard is None:
            return None
        return screening_violation(self.guard, runs) <= 0

    def measured_ok(self, entry: Entry) -> bool:
        r = entry.record
        return r.ok and r.projected_time is not None and self.comparable(entry)

    def feasible(self, entry: Entry) -> bool:
        """Whether a trial may win: it ran, was measured on the baseline's hardware, and trains
        the baseline's model (a safe answer) or had its accuracy confirmed (a fast answer)."""
        if not self.measured_ok(entry) or entry.record.pruned:
            return False
        if self.safe(entry):
            return True
        confirmation = self.confirmation(entry)
        return confirmation is not None and confirmation.passed

    def _best_of(self, entries: list[Entry]) -> Entry | None:
        """The fastest of ``entries``, like compared with like: once the side-by-side rounds
        measured any of them, the rounds' answer among those (:func:`race`: the simplest not
        separated from the leader that beat the baseline beyond the noise, else the
        baseline's own settings); before any rounds, by their screening draws (each against
        the baseline's measurement of its own state)."""
        base = self.baseline
        if base is None:
            return None
        rounded = [e for e in entries if self.side_speedup(e) is not None]
        decided = race(self, rounded)
        if decided is None:
            complexity = lambda e: registry.complexity(e.config, base.config)  # noqa: E731
            top = ranking.best(
                entries, time=self.rank_time, noise=self.noise, complexity=complexity
            )
            return _away_best(self, entries) if top and away(self, top) else top
        # Once the rounds measured the answers, the answer is one they measured: not one
        # that only screening measured, against a baseline draw the rounds did not pair with.
        return next(e for e in rounded if e.config == decided.answer)

    def side_interval(self, entry: Entry) -> Interval | None:
        """Its speedup over the baseline measured side by side, with its 95% interval (from
        at least :data:`derived.MIN_ROUNDS` rounds that measured both; the baseline's own:
        exactly 1)."""
        base = self.baseline
        if base is None:
            return None
        if entry.config == base.config:
            measured = sum(1 for r in self.rounds if base.number in r)
            return (
                Interval(1.0, 1.0, 1.0, measured, 0.0) if measured >= derived.MIN_ROUNDS else None
            )
        return derived.round_interval(self.round_speedups(entry), pooled=rounds_noise(self))

    def side_speedup(self, entry: Entry) -> float | None:
        """Its speedup over the baseline measured side by side (:meth:`side_interval`'s; 1 for
        the baseline once rounds ran); None with fewer than :data:`derived.MIN_ROUNDS`."""
        figure = self.side_interval(entry)
        return None if figure is None else figure.estimate

    def screening_speedup(self, entry: Entry) -> float | None:
        """Its speedup by the screening measurements alone (one draw each: its own, and the
        baseline's taken in its state nearest it, see :meth:`reference`): what a config the
        rounds did not measure is compared by."""
        ref = self.reference(entry.record)
        return derived.speedup(
            ref.projected_time if ref is not None else None, entry.record.projected_time
        )

    def best_safe(self) -> Entry | None:
        """The fastest trial that trains the baseline's model (the baseline, at worst)."""
        return self._best_of([e for e in self.entries if self.feasible(e) and self.safe(e)])

    def best_fast(self) -> Entry | None:
        """The fastest trial whose changed numerics passed their confirmation."""
        return self._best_of([e for e in self.entries if self.feasible(e) and not self.safe(e)])

    def best(self) -> Entry | None:
        """The chosen answer: the fastest feasible trial, safe or confirmed; between trials
        whose difference is within their measured noise, the simpler config."""
        return self._best_of([e for e in self.entries if self.feasible(e)])

    def open_checks(self, *, unresolved: bool = False) -> list[Entry]:
        """The candidates that passed screening and have no confirmation yet (with
        ``unresolved``: or one that could not settle yet), screened faster than the chosen
        answer or as fast within a tie, each by its :func:`promise` (screening gave it its
        accuracy run; the rounds decide, and only a confirmed one joins them), fastest first:
        the checks that could change the answer (one screened within a tie of the answer
        may still be the faster)."""
        bar = could_win_bar(self)
        floor = bar[1] if bar is not None else math.inf

        def open_check(e: Entry) -> bool:
            c = self.confirmation(e)
            return c is None or (unresolved and c.verdict is Verdict.UNRESOLVED)

        waiting = [
            e
            for e in self.candidates
            if self.measured_ok(e)
            and not e.record.pruned
            and not e.record.reused
            and self.screened(e)
            and open_check(e)
            and promise(self, e) < floor
        ]
        return sorted(waiting, key=lambda e: promise(self, e))

    def pending(self, *, unresolved: bool = False) -> Entry | None:
        """The fastest of :meth:`open_checks`: the check that is pending, or (with
        ``unresolved``) that more evidence would settle."""
        return next(iter(self.open_checks(unresolved=unresolved)), None)

    def metric_of(self, entry: Entry) -> float | None:
        """Its validation metric: its own runs (the confirmation's mean where confirmed), the
        baseline's for a safe config, None when unknown."""
        confirmation = self.confirmation(entry)
        if confirmation is not None and confirmation.mean is not None:
            return confirmation.mean
        if entry.record.metric is not None:
            return entry.record.metric
        if self.safe(entry) and self.guard is not None:
            return self.guard.baseline_metric
        return None

    def pareto(self) -> list[Entry]:
        """The speed/accuracy Pareto front of every measured config with a known metric:
        nothing else is both faster and (at least) as accurate. Fastest first."""
        return _pareto(self)

    @property
    def checks_unsettleable(self) -> Reason | None:
        """Why the accuracy checks cannot settle anything, or None (no guard yet, or they can):
        :func:`autotune._guard.guard.unsettleable`."""
        return None if self.guard is None else unsettleable(self.guard)

    def slower_side_by_side(self, entry: Entry) -> bool:
        """Whether the side-by-side rounds measured it and did not show it faster than the
        baseline beyond the noise (its interval's lower bound is not above 1): never the
        answer then, however its unpaired times rank: paired rounds are the fairer measure."""
        base = self.baseline
        if base is None or entry.config == base.config:
            return False
        figure = self.side_interval(entry)
        return figure is not None and not figure.above_one

    def round_speedups(self, entry: Entry) -> list[float]:
        """The baseline's projected time over ``entry``'s, round by round, side by side."""
        base = self.baseline
        if base is None:
            return []
        twins = self.twins(entry)
        speedups = (
            derived.speedup(r[base.number], r[n])
            for r in self.rounds
            for n in twins
            if base.number in r and n != base.number and n in r
        )
        return [s for s in speedups if s is not None]

    def trial_records(self) -> tuple[TrialRecord, ...]:
        return tuple(self.trial_record(e) for e in self.entries)

    def trial_record(self, entry: Entry) -> TrialRecord:
        return _trial_record(self, entry)


def _read(study: optuna.Study, settings: SearchSettings, previous: Ledger | None) -> Ledger:
    """:meth:`Ledger.read`."""
    before = previous.source if previous is not None else None
    known = {e.number: e.record for e in previous.entries} if previous is not None else {}
    records = storage.records_since(study, known)
    numbers = tuple(n for n, _ in records)
    if before is not None and before.attrs_stand(numbers):
        now = dataclasses.replace(before, settings=settings)
    else:
        now = Source(
            numbers=numbers,
            attrs=study.user_attrs,
            settings=settings,
            writes=storage.writes(),
            at=time.monotonic(),
        )
    attrs = now.attrs
    if previous is not None and before is not None and before == now:
        return previous
    evidence = storage.guard_evidence(attrs)
    if (
        previous is not None
        and before is not None
        and before.settings == settings
        and storage.guard_evidence(before.attrs) == evidence
    ):
        accuracy, guard, judged = previous.baseline_accuracy, previous.guard, previous.judged
    else:
        accuracy = storage.read_baseline_accuracy(attrs)
        stored = storage.read_confirmations(attrs)
        guard, judged = None, {key: (c, 0, c) for key, c in stored.items()}
        if accuracy is not None:
            guard = make_guard(settings, accuracy).with_pairs(list(stored.values()))
            same = previous is not None and previous.guard == guard
            judged = judge(stored, guard, previous.judged if same and previous else None)
    return Ledger(
        entries=tuple(Entry(n, rec) for n, rec in records),
        rounds=tuple(storage.read_rounds(attrs)),
        round_throughputs=tuple(storage.read_round_throughputs(attrs)),
        round_loads=tuple(storage.read_round_loads(attrs)),
        baseline_checks=tuple(storage.read_baseline_checks(attrs)),
        notes=tuple(storage.read_notes(attrs)),
        confirmations={key: c for key, (_, _, c) in judged.items()},
        baseline_accuracy=accuracy,
        guard=guard,
        split_free=settings.split_free,
        source=now,
        judged=judged,
    )


def _trial_record(ledger: Ledger, entry: Entry) -> TrialRecord:
    r = entry.record
    return TrialRecord(
        number=entry.number,
        role=r.role.value,
        config=r.config,
        measurement=r.measurement,
        metric=r.metric,
        accuracy_checked=bool(r.accuracy),
        projected_time=ledger.projected(entry),
        feasible=ledger.feasible(entry),
        failure=r.failure.value if r.failure else None,
        message=r.message,
        seconds=r.seconds,
        reused=r.reused,
        fingerprint=r.fingerprint or None,
        confirmation=ledger.confirmation(entry),
        safe=ledger.safe(entry),
        screened=ledger.screened(entry),
        screened_then=r.screened_then,
        no_accuracy_run=r.no_run.value if r.no_run is not None else None,
        side_rounds=len(ledger.remeasured(entry)),
        side_throughput=ledger.side_throughput(entry),
        side_speedup=ledger.side_speedup(entry),
        screening_time=ledger.normalized(r),
        screening_ratio=yardstick.ratio(ledger.checks, r),
        load=r.load,
    )


def config_rounds(ledger: Ledger) -> tuple[dict[TrainingConfig, float], ...]:
    """The side-by-side rounds by config: each round's projected time of every config it
    measured (under any of its trials' numbers)."""

    def make() -> tuple[dict[TrainingConfig, float], ...]:
        config_of = {e.number: e.config for e in ledger.entries}
        return tuple(
            {config_of[n]: t for n, t in r.items() if n in config_of} for r in ledger.rounds
        )

    return ledger.kept("config rounds", make)


def rounds_noise(ledger: Ledger) -> Noise | None:
    """The machine's noise over every side-by-side round (:func:`autotune._speed.stats.noise`):
    the spread of every interval the rounds give."""
    base = ledger.baseline
    if base is None:
        return None
    config = base.config
    return ledger.kept("rounds noise", lambda: speed.noise(config_rounds(ledger), config))


def race(ledger: Ledger, entries: list[Entry]) -> Race[TrainingConfig] | None:
    """What the side-by-side rounds decided between ``entries``' configs
    (:func:`autotune._speed.stats.race`); None where the rounds measured none of them beside
    the baseline."""
    base = ledger.baseline
    if base is None or not entries:
        return None
    among = frozenset(e.config for e in entries)

    def make() -> Race[TrainingConfig] | None:
        return speed.race(
            config_rounds(ledger),
            base.config,
            among,
            lambda cfg: registry.complexity(cfg, base.config),
        )

    return ledger.kept(("race", among), make)


def runner_up(ledger: Ledger, decided: Race[TrainingConfig], best: Entry) -> Entry | None:
    """The config the rounds measured fastest after ``best`` (the baseline's entry where that
    is the baseline; None where the rounds measured no other)."""
    others = [c for c in decided.versus_baseline if c != best.config]
    near = max(others, key=lambda c: decided.versus_baseline[c].estimate, default=None)
    if near is None:
        return None
    base = ledger.baseline
    return base if base is not None and near == base.config else ledger.measured(near)


def unproven(decided: Race[TrainingConfig], runner: TrainingConfig, answer: TrainingConfig) -> bool:
    """Whether the runner-up is simpler than the answer and was not shown faster than the
    baseline beyond the noise: why the rounds answered the more complex of the two."""
    base = decided.baseline
    simpler = registry.complexity(runner, base) < registry.complexity(answer, base)
    return runner != base and simpler and not decided.beats_baseline(runner)


def away(ledger: Ledger, entry: Entry) -> bool:
    """Whether ``entry``'s figure is of a busy machine where the baseline was also measured
    free (:func:`yardstick.away`) and no side-by-side rounds measured it since: it ranks last
    (never an answer, a round's leader nor a bar others must beat) until measured again."""
    base = ledger.baseline
    if base is None or entry.config == base.config:
        return False
    if len(ledger.remeasured(entry)) >= derived.MIN_ROUNDS:
        return False
    return yardstick.away(ledger.checks, entry.record)


def _away_best(ledger: Ledger, items: list[Entry]) -> Entry | None:
    """Of ``items``, all :func:`away`, the fastest in its own state (by its screening ratio
    there): the one for the rounds to measure, never an answer before they do."""
    return max(items, key=lambda e: ledger.screening_speedup(e) or 0.0, default=None)


def measure_again(ledger: Ledger, limit: int) -> list[Entry]:
    """The configs measured only while the machine was busy (:func:`away`) that led their
    state, at most ``limit``, the fastest there first: each screened faster than the baseline
    measured in its state beyond a tie, and measured in no other since."""
    out: list[Entry] = []
    for e in sorted(ledger.entries, key=lambda e: -(ledger.screening_speedup(e) or 0.0)):
        speedup = ledger.screening_speedup(e)
        if (
            len(out) < limit
            and e.record.ok
            and not e.record.reused
            and away(ledger, e)
            and ledger.measured(e.config) is e
            and speedup is not None
            and speedup > 1 + ranking.TIE
            and all(e.config != o.config for o in out)
        ):
            out.append(e)
    return out


def first_win_at(ledger: Ledger) -> float | None:
    """When the first answer faster than the baseline (beyond a tie) was verified: a safe
    trial when it ended, a fast one when its confirmation was filed."""
    base = ledger.baseline
    base_time = ledger.projected(base) if base is not None else None
    if base_time is None:
        return None
    floor = base_time * (1 - ranking.TIE)
    times = []
    for e in ledger.entries:
        if e is base or not ledger.feasible(e) or ledger.rank_time(e) > floor:
            continue
        confirmation = ledger.confirmation(e)
        at = confirmation.at if confirmation is not None else e.record.at
        if at is not None:
            times.append(at)
    return min(times, default=None)


def configs_measured(ledger: Ledger) -> int:
    """How many distinct candidate configs were run (not a repeat of a measured config,
    not one the memory probe predicted out of memory)."""
    return len(
        {
            e.config
            for e in ledger.candidates
            if not e.record.reused and (e.record.measurement is not None or e.record.seconds)
        }
    )


def loads(ledger: Ledger) -> list[Load]:
    """The machine's state read in every measurement: trials, baseline checks, rounds."""
    out = [e.record.load for e in ledger.entries if not e.record.reused]
    out += [c.load for c in ledger.baseline_checks]
    out += [load for r in ledger.round_loads for load in r.values()]
    return [load for load in out if load is not None]


def draws(ledger: Ledger, entry: Entry) -> list[float]:
    """Its config's screening draws, each in the machine's latest state (see
    :meth:`Ledger.normalized`): one per trial that measured the config (a reuse of another's
    record is not one), those taken while the machine was busy only where none was taken free;
    the baseline's: its latest measurement. A config drawn twice ranks by both, so that one
    high draw does not carry it (nor what a later pass builds on it)."""
    base = ledger.baseline
    if entry.record.role is Role.BASELINE or (base is not None and entry.config == base.config):
        first = ledger.normalized(entry.record)
        return [] if first is None else [first]
    own = [e for e in ledger._by_config.get(entry.config, ()) if not e.record.reused]
    free = [e for e in own or [entry] if not yardstick.away(ledger.checks, e.record)]
    figures = [ledger.normalized(e.record) for e in (free or own or [entry])]
    return [f for f in figures if f is not None]


def step_draws(ledger: Ledger, cfg: TrainingConfig) -> list[float]:
    """Every screening draw of ``cfg``'s steps: the projected time of each measured config
    that makes the steps ``cfg`` makes (see :func:`registry.step_key`: only its learning rate
    or its run's length differs), its steady part scaled to ``cfg``'s share of the run."""
    out: list[float] = []
    busy: list[float] = []
    for seconds, once, fraction, away_ in _step_measurements(ledger).get(
        registry.step_key(cfg), ()
    ):
        share = cfg.train_fraction / fraction
        (busy if away_ else out).append((seconds - once) * share + once)
    return out or busy  # a busy state's draws only where no other state drew them


def _step_measurements(
    ledger: Ledger,
) -> dict[TrainingConfig, list[tuple[float, float, float, bool]]]:
    """By :func:`registry.step_key`, each measured trial's projected time (in the machine's
    latest state), one-time cost, share of the run, and whether it was :func:`away`."""

    def make() -> dict[TrainingConfig, list[tuple[float, float, float, bool]]]:
        out: dict[TrainingConfig, list[tuple[float, float, float, bool]]] = {}
        for e in ledger.entries:
            r = e.record
            if (
                ledger.measured_ok(e)
                and not r.reused
                and r.measurement is not None
                and r.projected_time is not None
            ):
                seconds = ledger.normalized(r) or r.projected_time
                row = (
                    seconds,
                    r.measurement.one_time_cost,
                    e.config.train_fraction,
                    away(ledger, e),
                )
                out.setdefault(registry.step_key(e.config), []).append(row)
        return out

    return ledger.kept("step measurements", make)


def promise(ledger: Ledger, entry: Entry) -> float:
    """Its projected time as "could it win?" reads it: its side-by-side figure where the
    rounds measured it (see :meth:`Ledger.projected`), else the median of every screening draw
    of its steps (see :func:`step_draws`). One draw is noisy: one high draw of a safe config
    would rule out every change of the numerics below it, even a shorter schedule of the same
    steps. Without any, it ranks last."""

    def make() -> float:
        if len(ledger.remeasured(entry)) >= derived.MIN_ROUNDS:
            return ledger.rank_time(entry)
        times = step_draws(ledger, entry.config)
        return ranking.median_time(times) if times else ledger.rank_time(entry)

    return ledger.kept(("promise", entry.number), make)


def fastest_verified(ledger: Ledger) -> tuple[Entry, float] | None:
    """The verified answer (safe, or confirmed) of the least :func:`promise`, and that
    figure."""

    def make() -> tuple[Entry, float] | None:
        feasible = [e for e in ledger.entries if ledger.feasible(e)]
        ranked = [(promise(ledger, e), e.number, e) for e in feasible]
        if not ranked:
            return None
        seconds, _, entry = min(ranked, key=lambda t: (t[0], t[1]))
        return entry, seconds

    return ledger.kept("fastest verified", make)


def could_win_bar(ledger: Ledger) -> tuple[Entry, float] | None:
    """The fastest verified answer and the projected time a change of the numerics must beat
    to be worth checking: its figure, and beyond it a tie where the rounds measured it side by
    side, else the spread of this search's screening draws (:func:`screening_noise`). Its
    figure is then one draw, and the least of several, so likely low: without the noise
    beyond it, a change as fast would be ruled out."""
    fastest = fastest_verified(ledger)
    if fastest is None:
        return None
    entry, seconds = fastest
    settled = len(ledger.remeasured(entry)) >= derived.MIN_ROUNDS
    margin = ranking.TIE if settled else screening_noise(ledger)
    return entry, seconds * (1 + margin)


def screening_noise(ledger: Ledger) -> float:
    """How far two screening draws of the same steps lie apart in this search: the median,
    over the steps drawn more than once (configs that differ only in the learning rate or the
    run's length, see :func:`step_draws`), of their draws' relative range (at least a tie, at
    most :data:`ranking.MAX_NOISE`); :data:`ranking.MAX_NOISE` before any steps were drawn
    twice."""

    def make() -> float:
        seen: set[TrainingConfig] = set()
        spreads = []
        for e in ledger.entries:
            key = registry.step_key(e.config)
            if key in seen:
                continue
            seen.add(key)
            draws = step_draws(ledger, e.config)
            if len(draws) >= 2:
                spreads.append(ranking.relative_noise(draws))
        return float(statistics.median(spreads)) if spreads else ranking.MAX_NOISE

    return ledger.kept("screening noise", make)


def beside(ledger: Ledger, entry: Entry) -> Ledger:
    """``ledger`` with only the side-by-side rounds that measured ``entry``'s config (the
    baseline's figures beside the winner's: the table and the headline from one set)."""
    twins = ledger.twins(entry)
    kept = [i for i, r in enumerate(ledger.rounds) if any(n in r for n in twins)]
    rated, loads = ledger.round_throughputs, ledger.round_loads
    return dataclasses.replace(
        ledger,
        rounds=tuple(ledger.rounds[i] for i in kept),
        round_throughputs=tuple(rated[i] for i in kept if i < len(rated)),
        round_loads=tuple(loads[i] for i in kept if i < len(loads)),
        source=None,  # not the study as read: never a next read's `previous`
    )


def _pareto(ledger: Ledger) -> list[Entry]:
    guard = ledger.guard
    if guard is None:
        return []
    sign = 1.0 if guard.higher_is_better else -1.0
    points = []
    for e in ledger.entries:
        metric = ledger.metric_of(e)
        if ledger.measured_ok(e) and not e.record.reused and metric is not None:
            points.append((ledger.rank_time(e), sign * metric, e))
    front: list[tuple[float, float, Entry]] = []
    for t, m, e in sorted(points, key=lambda p: (p[0], -p[1])):
        if all(m > fm for _, fm, _ in front):
            front.append((t, m, e))
    return [e for _, _, e in front]


def trials_counted(ledger: Ledger) -> int:
    """The candidate trials the trial limit counts, and the progress lines with it: every
    proposal, one of a config measured already too (it runs nothing, but counting it is what
    ends a search whose sampler keeps proposing measured configs between ones that cannot
    start, which no stage's repeat count sees)."""
    return len(ledger.candidates)

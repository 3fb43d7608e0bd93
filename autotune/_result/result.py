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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna

from autotune._errors import ConfigError, StorageError
from autotune._guard.confirmation import Verdict
from autotune._guard.guard import AccuracyGuard
from autotune._knobs.config import SCHEMA_VERSION, TrainingConfig
from autotune._knobs.trainer_args import trainer_settings
from autotune._result.files import write_text_atomic
from autotune._result.report import write_report
from autotune._result.summary import render_summary
from autotune._search import coverage, derived, ranking
from autotune._search import storage as stored
from autotune._search.ledger import (
    Entry,
    Ledger,
    TrialRecord,
    beside,
    configs_measured,
    first_win_at,
    loads,
    race,
    runner_up,
    unproven,
)
from autotune._search.record import BaselineAccuracy, GuardFailure
from autotune._search.settings import SearchSettings
from autotune._speed.stats import Noise
from autotune._trial.probe import MemoryLimits

__all__ = ["SearchResult", "load_config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    """What :func:`autotune.find_best` found: two answers and one choice.

    ``safe`` is the fastest config that trains the baseline's model (its numerics unchanged:
    no accuracy risk); ``fast`` the fastest that changed the numerics and whose accuracy was
    confirmed within the tolerance, paired with the baseline's runs. ``config`` is the chosen
    one: ``fast`` where it was confirmed and is faster, ``safe`` otherwise (the baseline itself
    when nothing beat it). ``pending`` is a faster candidate whose check could not settle, with
    what would settle it. ``speedup`` is the baseline's projected training time over the
    chosen config's, measured side by side in paired rounds where there was time
    (``speedup_range``); where there was not, only the ratio of the two configs' steady-state
    throughputs (no projection with one-time costs measured in different processes).
    """

    winner: TrialRecord
    baseline_trial: TrialRecord
    trials: tuple[TrialRecord, ...]
    guard: AccuracyGuard | None  # None when no accuracy check was made
    tolerance: float
    metric_name: str
    higher_is_better: bool
    environment: dict[str, Any]
    search: dict[str, Any]
    planned_samples: int
    interrupted: bool = False
    safe: TrialRecord | None = None
    fast: TrialRecord | None = None
    pending: TrialRecord | None = None
    pareto: tuple[int, ...] = ()  # trial numbers on the speed/accuracy Pareto front
    round_speedups: tuple[float, ...] = ()  # the chosen config's, side by side, per round
    rounds: RoundsVerdict | None = None  # what the rounds decided (None: no rounds)
    metric_reason: str = ""  # why the guarded metric is the one it is
    eval_batch_size: int | None = None  # every config validated in batches of this size
    trainer: str | None = None  # the user's trainer whose loop ran the trials (tune)
    streams: bool = False  # the training set streams: its run is planned_samples (passes: epochs)

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
        skipped: Sequence[coverage.Skipped] = (),
        no_check: GuardFailure | None = None,
    ) -> SearchResult:
        """The result a study's ledger amounts to: the ledger's best trial wins. ``skipped``:
        the trials failed before they ran (why a listed value was not measured)."""
        base = ledger.baseline
        if base is None:
            raise StorageError(
                f"Study {study_name!r} has no completed autotune baseline trial, so there is "
                "nothing to report yet (is it an autotune study, and has its baseline finished?)."
            )
        best = ledger.best() or base
        first_win = first_win_at(ledger)
        search: dict[str, Any] = {
            "study_name": study_name,
            "storage": storage,
            **settings.described(),
            "seconds": seconds,
            "candidates": len(ledger.candidates),
            "configs_measured": configs_measured(ledger),
            # Proposals of a config measured already: they ran nothing.
            "proposals_repeated": sum(1 for e in ledger.candidates if e.record.reused),
            # Seconds into this run; a win verified by an earlier run of the study (a resumed
            # search) is said as such, not as a negative time.
            "first_win_seconds": (
                None
                if first_win is None or first_win < settings.started
                else first_win - settings.started
            ),
            "first_win_earlier": first_win is not None and first_win < settings.started,
            "accuracy_samples": ledger.guard.accuracy_samples if ledger.guard else None,
            # Whether any knob searched changes the numerics (none: no check was needed).
            "numerics_searched": bool(
                settings.space.numerics_knobs(split_free=settings.split_free)
            ),
            "accuracy_plan": _accuracy_plan(ledger.baseline_accuracy),
            "no_accuracy_check": no_check.to_dict() if no_check else None,  # a NoCheck, why
            # The settings every accuracy run trained with (None: the baseline's own).
            "accuracy_runs_config": (
                ledger.baseline_accuracy.config.to_dict()
                if ledger.baseline_accuracy and ledger.baseline_accuracy.config
                else None
            ),
            "unmeasured": [
                u.to_dict()
                for u in coverage.unmeasured(ledger, settings.space, settings.baseline, skipped)
            ],
        }
        search["machine"], search["notes"] = _machine(ledger), list(ledger.notes)
        if memory is not None:
            search["memory_probe"] = memory.to_dict()
        foreign = [e.number for e in ledger.entries if not ledger.comparable(e)]
        if foreign:
            search["not_ranked"] = {
                "trials": foreign,
                "reason": "measured on hardware or software other than the baseline's "
                f"(fingerprint {base.record.fingerprint}); timings do not compare",
            }
        pending = ledger.pending(unresolved=True)
        fast = ledger.best_fast()
        return cls(
            winner=ledger.trial_record(best),
            # The baseline's figures from the rounds that measured the winner: the table and
            # the headline from one set of rounds.
            baseline_trial=beside(ledger, best).trial_record(base),
            trials=ledger.trial_records(),
            guard=ledger.guard,
            tolerance=settings.tolerance,
            metric_name=settings.metric_name,
            higher_is_better=settings.higher_is_better,
            environment=dict(settings.environment),
            search=search,
            planned_samples=settings.planned_samples,
            interrupted=interrupted,
            safe=ledger.trial_record(ledger.best_safe() or base),
            fast=None if fast is None else ledger.trial_record(fast),
            pending=None if pending is None else ledger.trial_record(pending),
            pareto=tuple(e.number for e in ledger.pareto()),
            round_speedups=tuple(ledger.round_speedups(best)),
            rounds=_rounds_verdict(ledger, best),
            metric_reason=settings.metric_reason,
            eval_batch_size=settings.eval_batch_size,
            trainer=settings.trainer,
            streams=settings.streams,
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
            skipped=coverage.read_skipped(study),
            no_check=stored.read_guard_failure(study),
        )

    @property
    def config(self) -> TrainingConfig:
        return self.winner.config

    @property
    def baseline(self) -> TrainingConfig:
        return self.baseline_trial.config

    @property
    def chosen(self) -> str:
        """Which answer ``config`` is: "fast" (confirmed) or "safe"."""
        return (
            "fast" if self.fast is not None and self.winner.number == self.fast.number else "safe"
        )

    @property
    def metrics(self) -> dict[str, Any]:
        return self.metrics_of(self.winner)

    @property
    def baseline_metrics(self) -> dict[str, Any]:
        return self.metrics_of(self.baseline_trial)

    def metrics_of(self, trial: TrialRecord) -> dict[str, Any]:
        """``trial``'s figures: side by side where the rounds measured both, else screening."""
        side = _side(self.winner) and _side(self.baseline_trial)
        out = trial.metrics(self.metric_name, self.planned_samples, side=side)
        if not side and trial is self.baseline_trial:
            _beside_winner(out, trial, self.winner)
        if out["validation_metric"] is None and trial.safe and self.guard is not None:
            out["validation_metric"] = self.guard.baseline_metric  # the baseline's model
        return out

    @property
    def speedup(self) -> float:
        """Side by side (the median over rounds), else the throughputs' ratio (no range)."""
        measured = derived.side_by_side(self.round_speedups)
        return self.throughput_ratio if measured is None else measured[0]

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """The 95% interval of :attr:`speedup` from the side-by-side rounds' paired log-ratios
        (None: not measured side by side)."""
        pooled = None if self.rounds is None else self.rounds.pooled
        figure = derived.round_interval(self.round_speedups, pooled=pooled)
        return None if figure is None else (figure.low, figure.high)

    @property
    def speedup_range(self) -> tuple[float, float] | None:
        """The lowest and highest side-by-side speedup over the rounds (None: not measured)."""
        measured = derived.side_by_side(self.round_speedups)
        return None if measured is None else (measured[1], measured[2])

    def speedup_of(self, trial: TrialRecord) -> float | None:
        """``trial``'s speedup, like measured with like (:func:`_speedup_of`)."""
        return _speedup_of(self.baseline_trial, trial)

    @property
    def throughput_ratio(self) -> float:
        """The winner's throughput over the baseline's, from one source (:func:`_ratio`)."""
        return _ratio(self.baseline_trial, self.winner)

    @property
    def failures(self) -> dict[str, int]:
        return dict(Counter(t.failure for t in self.trials if t.failure is not None))

    def to_dict(self) -> dict[str, Any]:
        search = dict(self.search)
        search["trials"] = len(self.trials)
        search["failures"] = self.failures
        search["interrupted"] = self.interrupted
        span = self.speedup_range
        return {
            "schema_version": SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "metrics": self.metrics,
            "baseline": {"config": self.baseline.to_dict(), "metrics": self.baseline_metrics},
            "speedup": self.speedup,
            "speedup_range": list(span) if span else None,
            "speedup_rounds": len(self.round_speedups),
            "speedup_interval": list(self.speedup_interval) if self.speedup_interval else None,
            "rounds": None if self.rounds is None else self.rounds.to_dict(),
            "throughput_ratio": self.throughput_ratio,
            "tolerance": self.tolerance,
            "validation": {
                "metric": self.metric_name,
                "higher_is_better": self.higher_is_better,
                "reason": self.metric_reason,
                "batch_size": self.eval_batch_size,
            },
            "accuracy_guard": self.guard.to_dict() if self.guard is not None else None,
            "answers": self._answers(),
            "pareto_front": [self._point(t) for t in self.trials if t.number in self.pareto],
            "environment": self.environment,
            "search": search,
            "trials": [t.to_dict() for t in self.trials],
            "trainer": None if self.trainer is None else self.trainer_settings(),
        }

    def trainer_settings(self) -> dict[str, Any]:
        """The settings of your own trainer that train as the chosen config did (``tune``):
        ``training_arguments`` for a Hugging Face Trainer; ``trainer``, ``dataloader`` and
        ``notes`` for Lightning; over a stream, ``max_steps`` that read its planned samples
        with the chosen batch. See :func:`autotune._knobs.trainer_args.trainer_settings`."""
        if self.trainer is None:
            raise ConfigError(
                "This result was searched with find_best, not through a trainer: use "
                "result.config.to_lightning() / to_transformers()."
            )
        # A stream's run: its samples (max_steps of the batch), its passes (Lightning's epochs).
        samples = self.planned_samples if self.streams else None
        passes = self.search.get("planned_epochs") if self.streams else None
        settings = trainer_settings(self.trainer, self.config, self.baseline, samples, passes)
        return {"kind": self.trainer, **settings}

    def _answers(self) -> dict[str, Any]:
        def answer(t: TrialRecord | None) -> dict[str, Any] | None:
            if t is None:
                return None
            return {
                "trial": t.number,
                "config": t.config.to_dict(),
                "speedup": self.speedup_of(t),
                "validation_metric": self.metrics_of(t)["validation_metric"],
                "confirmation": t.confirmation.summary() if t.confirmation else None,
            }

        # Faster than the chosen answer: none where its time is unknown (nothing to compare).
        chosen = self.winner.projected_time
        rejected = [
            t
            for t in self.trials
            if t.confirmation is not None
            and t.confirmation.verdict is Verdict.REJECTED
            and not t.reused
            and chosen is not None
            and ranking.rank_time(t.projected_time) < chosen
        ]
        rejected.sort(key=lambda t: ranking.rank_time(t.projected_time))
        return {
            "chosen": self.chosen,
            "safe": answer(self.safe),
            "fast": answer(self.fast),
            "pending": answer(self.pending),
            # Faster than the chosen answer, but the guard's bound put them beyond tolerance.
            "rejected": [answer(t) for t in rejected[:3]],
        }

    def _point(self, t: TrialRecord) -> dict[str, Any]:
        return {
            "trial": t.number,
            "config": t.config.describe(),
            "projected_training_time": t.projected_time,
            "speedup": self.speedup_of(t),
            "validation_metric": self.metrics_of(t)["validation_metric"],
            "safe": t.safe,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False, default=_json_default)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the result as JSON, atomically: a reader never sees half a file, and a failed
        write leaves any previous file intact."""
        return write_text_atomic(path, self.to_json())

    def summary(self, *, detail: bool = False) -> str:
        return render_summary(self.to_dict(), detail=detail)

    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a self-contained HTML report (opens offline): winner against baseline,
        throughput against the validation metric with the tolerance, optimisation history,
        which knobs mattered, where the time goes, and every trial with its failure reason."""
        return write_report(self, path)

    def __repr__(self) -> str:
        return self.summary()


def _machine(ledger: Ledger) -> dict[str, Any]:
    """What the search read of the machine's state (see autotune._load): in how many
    measurements, in how many other processes used it (a ratio measured then is true of that
    moment), how much, and every measurement of the baseline's throughput, its trial's first."""
    read = loads(ledger)
    shared = [load for load in read if load.busy]
    return {
        "readings": len(read),
        "shared": len(shared),
        "others_max": round(max((load.others for load in shared), default=0.0), 2),
        "cores": max((load.cores for load in shared), default=None),
        "gpu_others": max((load.gpu_others for load in shared), default=0),
        "baseline_checks": [c.to_dict() for c in ledger.checks],
    }


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


def _beside_winner(out: dict[str, Any], baseline: TrialRecord, winner: TrialRecord) -> None:
    """The baseline's screening figures in ``out`` made those of its measurement in the
    winner's state of the machine (the one :attr:`SearchResult.throughput_ratio` divides by):
    a baseline measured while the machine was busy is not shown beside a winner measured with
    it free."""
    m, ratio = winner.measurement, winner.screening_ratio
    if m is None or not ratio or winner.number == baseline.number:
        return
    out["throughput"] = m.throughput / ratio
    out["step_time"] = baseline.config.batch_size / out["throughput"]
    out["measured_as"] = "screening (its measurement in the winner's state of the machine)"


def _side(trial: TrialRecord) -> bool:
    """Whether the side-by-side rounds measured it (its figures are theirs)."""
    return trial.side_rounds >= derived.MIN_ROUNDS


def _accuracy_plan(accuracy: BaselineAccuracy | None) -> dict[str, Any] | None:
    """The facts of the baseline's accuracy record that its words are written from (see
    :func:`autotune._result.facts.accuracy_note`)."""
    if accuracy is None:
        return None
    return {
        "plan": None if accuracy.plan is None else accuracy.plan.to_dict(),
        "horizon": accuracy.horizons[-1].to_dict() if accuracy.horizons else None,
        "budget": accuracy.budget,
        "longer": None if accuracy.longer is None else accuracy.longer.to_dict(),
        "note": accuracy.stored_note,
    }


@dataclasses.dataclass(frozen=True)
class RoundsVerdict:
    """What the side-by-side rounds decided (:func:`autotune._speed.stats.race`): the leader
    against the runner-up (``decision``, a :class:`~autotune._speed.stats.Decision` value),
    ``runner_up`` (its trial number, the baseline's included; None: no other), the spread of
    one round's log-ratio (``noise``, pooled over the rounds with ``noise_dof`` degrees of
    freedom: every interval's spread), how many rounds ran, and whether the answer is the
    baseline because nothing beat it beyond that noise (``fell_back``), and the fastest the
    rounds measured (``leader``) with its speed-up and interval."""

    decision: str
    runner_up: int | None
    noise: float | None
    count: int
    fell_back: bool
    leader: int | None = None  # the fastest the rounds measured (its trial number)
    leader_speedup: tuple[float, float, float] | None = None  # its estimate, low, high
    leader_rounds: int | None = None  # the rounds that measured it
    noise_dof: int | None = None
    # The configs beside the baseline the rounds measured (None in files written before it).
    noise_contenders: int | None = None
    # The runner-up, simpler than the answer, was not shown faster than the baseline (so the
    # simpler was not answered); None in files written before it.
    runner_up_unproven: bool | None = None

    @property
    def pooled(self) -> Noise | None:
        """The noise every interval of these rounds is spread by."""
        if self.noise is None or self.noise_dof is None:
            return None
        return Noise(self.noise, self.noise_dof, self.noise_contenders or 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _rounds_verdict(ledger: Ledger, best: Entry) -> RoundsVerdict | None:
    decided = race(ledger, [e for e in ledger.entries if ledger.feasible(e)])
    if decided is None:
        return None
    runner = runner_up(ledger, decided, best)
    lead = ledger.measured(decided.leader)
    figure = decided.versus_baseline[decided.leader]
    return RoundsVerdict(
        decision=decided.decision.value,
        runner_up=None if runner is None else runner.number,
        noise=decided.spread,
        noise_dof=None if decided.noise is None else decided.noise.dof,
        noise_contenders=None if decided.noise is None else decided.noise.contenders,
        runner_up_unproven=runner is not None and unproven(decided, runner.config, best.config),
        count=len(ledger.rounds),
        fell_back=decided.fell_back,
        leader=None if lead is None else lead.number,
        leader_speedup=(figure.estimate, figure.low, figure.high),
        leader_rounds=figure.rounds,
    )


def _speedup_of(base: TrialRecord, trial: TrialRecord) -> float | None:
    """``trial``'s speedup, like measured with like: from its side-by-side rounds' paired
    ratios where the rounds measured it (the headline's, for the winner), else the baseline's
    screening projected time over its (None where either is unknown). Not the ratio of two
    medians: a config measured in a second pass, while the machine ran faster, would be
    compared with the baseline's figures from other rounds."""
    if trial.side_speedup is not None:  # set only where the rounds measured it
        return trial.side_speedup
    return derived.speedup(base.screening_time, trial.screening_time)


def _ratio(base: TrialRecord, best: TrialRecord) -> float:
    """``best``'s throughput over ``base``'s, both from one source: side by side where the
    rounds measured both (with throughputs), else ``best``'s screening measurement over the
    baseline's measured in its state nearest it (never a figure of one source over one of the
    other, nor over the baseline's cold first measurement)."""
    if best.config == base.config:
        return 1.0
    if base.side_throughput is not None and best.side_throughput is not None:
        return best.side_throughput / base.side_throughput
    return best.screening_ratio or 1.0

"""Where a search's trials run and are recorded: the study, the executor and the loop's state
(the settings and the deadline), shared by the parts of the search (baseline, candidates,
re-measuring, confirming)."""

from __future__ import annotations

import dataclasses
import math
import warnings

import optuna
from optuna.trial import TrialState

from autotune._choices import CompileMode
from autotune._guard.guard import AccuracyGuard, screening_violation
from autotune._knobs.config import TrainingConfig
from autotune._load import Meter, meter
from autotune._progress import Briefed, Progress, Report, as_progress
from autotune._search import storage
from autotune._search.deadline import Deadline
from autotune._search.ledger import Ledger
from autotune._search.record import Record, Role
from autotune._search.settings import SearchSettings
from autotune._search.state import LoopState
from autotune._trial.failures import FailureReason
from autotune._trial.isolation import TrialExecutor
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, Budget, TrialOutcome

__all__ = ["Bench"]

PENALTY = 10.0  # objective of a failed trial, as a multiple of the baseline's projected time
MIN_TRIAL_LIMIT = 60.0  # seconds: no run is stopped sooner, unless the user says so
TRIAL_LIMIT_FACTOR = 5.0  # a run's limit, as a multiple of what it is expected to take
# Seconds a compiled run may spend compiling on top of its limit: a first compile of a real
# model takes minutes (max-autotune much longer), on a fast GPU far more than 5x a trial, and a
# compile stopped half-way leaves nothing cached, so compile would never seem to help.
COMPILE_ALLOWANCE = {
    CompileMode.DEFAULT: 300.0,
    CompileMode.REDUCE_OVERHEAD: 300.0,
    CompileMode.MAX_AUTOTUNE: 1200.0,
    CompileMode.MAX_AUTOTUNE_NO_CUDAGRAPHS: 1200.0,
}
FAILED_CONSTRAINT = "failed"
ACCURACY_CONSTRAINT = "accuracy"


class Bench:
    """Runs a config through the executor within the trial limit, and stores each trial's
    record, its constraints (the guard reaches the sampler through them) and its value. It
    reads the settings and the deadline from the loop's ``state``, and never changes them."""

    def __init__(
        self,
        *,
        study: optuna.Study,
        state: LoopState,
        executor: TrialExecutor,
        report: Progress | Report,
        fingerprint: str,
        load_meter: Meter | None = None,
    ) -> None:
        self.study = study
        self.state = state
        self.executor = executor
        # Event lines within 120 characters; the whole of a longer one is the result's detail.
        self.report = Briefed(as_progress(report), lambda text: storage.add_note(study, text))
        self.fingerprint = fingerprint
        # Reads other processes' use of the machine around each run (None: not read).
        self.load_meter = load_meter
        self._ledger: Ledger | None = None  # the last read: the next one reads what changed

    def detail(self, line: str) -> None:
        """Say ``line`` in the result's detail only (see :meth:`Briefed.detail`)."""
        self.report.detail(line)

    @property
    def settings(self) -> SearchSettings:
        """The search's settings as the loop's state holds them now (a split baseline, the
        calibrated budget, the narrowed space)."""
        return self.state.settings

    @property
    def deadline(self) -> Deadline:
        return self.state.deadline

    def ledger(self) -> Ledger:
        """The study as it stands, rebuilt from the last read where it changed since (another
        process's trials and checks included)."""
        self._ledger = Ledger.read(self.study, self.settings, previous=self._ledger)
        return self._ledger

    def execute(
        self,
        cfg: TrainingConfig,
        *,
        accuracy: AccuracyCheck | None = None,
        measured: Measurement | None = None,
        expected: float | None = None,
        budget: Budget | None = None,
        keep: float = 0.0,
        limit: float | None = None,
        floor: float = 0.0,
    ) -> TrialOutcome:
        """Run ``cfg`` within its wall-clock limit: ``limit``, the user's ``trial_timeout``, or
        5x what the run is ``expected`` to take in steady state (at least a minute) plus, for
        a compiled config, its mode's compile allowance; never past the search's deadline by
        more than its grace, nor into the ``keep`` seconds held for pending work; but never
        less than ``floor`` seconds (the baseline's measurement: the time it needs, which a
        deadline cut to its last second would only turn into a failed search)."""
        explicit = limit
        limit = self.settings.trial_timeout if explicit is None else explicit
        if limit is None and expected is not None:
            limit = max(MIN_TRIAL_LIMIT, TRIAL_LIMIT_FACTOR * expected)
            limit += COMPILE_ALLOWANCE.get(cfg.compile_mode, 0.0)
        what = "throughput"
        if accuracy is not None:
            seeds = ", ".join(str(seed) for seed in accuracy.seeds)
            what = f"accuracy run{'s' if len(accuracy.seeds) > 1 else ''} (seed {seeds})"
        self.report.run(f"{what} of {cfg.describe()}", expected)
        cut = _at_least(self.deadline.trial_limit(limit, keep), floor)
        with meter(self.load_meter) as seen:
            outcome = self.executor.run(
                cfg,
                budget or self.settings.budget,
                accuracy=accuracy,
                measured=measured,
                time_limit=cut,
                # Steps from an isolated worker made a fault test's baseline time out
                # (unexplained, see issue 12's closing note): the panel shows only their
                # elapsed time for now.
                progress=None if self.executor.isolated else self.report.step,
            )
        if seen:
            outcome = dataclasses.replace(outcome, load=seen[0])
        if (
            outcome.failure is FailureReason.TIMEOUT
            and cut is not None
            and (limit is None or cut < limit)
        ):
            # Stopped at what the search had left, not at a limit of the run's own: a compile
            # started near the end would read as a hang ("ran past its limit").
            own = "none" if limit is None else f"{limit:.0f} s"
            outcome = dataclasses.replace(
                outcome,
                message=f"{outcome.message or 'timeout'}; the search's time left set that "
                f"limit (the run's own: {own})",
            )
        return outcome

    def ask(self) -> optuna.Trial:
        with warnings.catch_warnings():
            # Optuna warns that heartbeats are meant for study.optimize; autotune beats itself
            # (storage.heartbeat) around each trial of its ask-and-tell loop.
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = self.study.ask()
        storage.mark_owner(self.study, trial)
        return trial

    def waiting(self) -> bool:
        """Whether enqueued trials (first guesses, variants, retries) are still waiting."""
        return bool(self.study.get_trials(deepcopy=False, states=[TrialState.WAITING]))

    def record(self, outcome: TrialOutcome, *, role: Role, **extra: object) -> Record:
        """The record of a finished trial: its projected time for the planned run."""
        m = outcome.measurement
        projected = (
            self.settings.projected_time(m, outcome.config)
            if m is not None and outcome.ok
            else None
        )
        return Record(
            role=role,
            config=outcome.config,
            measurement=m,
            accuracy=outcome.accuracy,
            failure=outcome.failure,
            message=outcome.message,
            seconds=outcome.seconds,
            projected_time=projected,
            fingerprint=self.fingerprint,
            at=self.deadline.now(),
            load=outcome.load,
            **extra,  # type: ignore[arg-type]
        )

    def tell(
        self,
        trial: optuna.Trial,
        record: Record,
        guard: AccuracyGuard | None,
        baseline_time: float | None,
        value: float | None = None,
    ) -> bool:
        """Store the record and the constraints, then complete the trial: its value is its
        projected time, or for a trial without one a penalty of :data:`PENALTY` times the
        baseline's (10 s where that is unknown), so a failure never looks fast to the sampler.
        ``value``: its projected time as the sampler should compare it (in the machine's
        latest state, see :meth:`Ledger.normalized`), where not its own. Returns True when the
        sampler says it has covered the whole space (a grid)."""
        violation = 0.0 if record.role is Role.BASELINE else -self.settings.tolerance
        if record.accuracy and guard is not None and record.role is Role.CANDIDATE:
            violation = screening_violation(guard, record.accuracy)
        if not record.ok:
            violation = max(violation, 1.0)
        storage.store_record(trial, record)
        trial.set_constraint(FAILED_CONSTRAINT, 0.0 if record.ok else 1.0)
        trial.set_constraint(ACCURACY_CONSTRAINT, min(violation, 1e9))
        penalty = PENALTY
        if baseline_time is not None and math.isfinite(baseline_time):
            penalty *= baseline_time
        if value is None:
            value = record.projected_time if record.projected_time is not None else penalty
        try:
            if record.pruned:
                self.study.tell(trial, state=TrialState.PRUNED)
            else:
                self.study.tell(trial, value)
        except RuntimeError as exc:
            # A sampler that has covered its whole grid (BruteForceSampler) calls study.stop(),
            # which Optuna only allows inside study.optimize; the trial is already stored.
            if "Study.stop" not in str(exc):
                raise
            return record.role is Role.CANDIDATE  # the baseline exhausts no grid
        return False

    def fail(self, trial: optuna.Trial, message: str) -> None:
        """Fail a trial that never ran (a combination the config itself rejects)."""
        trial.set_user_attr("message", message)
        self.study.tell(trial, state=TrialState.FAIL)


def _at_least(limit: float | None, floor: float) -> float | None:
    """A time ``limit`` (None: none) raised to ``floor`` seconds."""
    return None if limit is None else max(limit, floor)

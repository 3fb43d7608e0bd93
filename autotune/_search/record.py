"""A trial's record: what the search keeps in the study about one trial, with one codec.

The record lives in the trial's user attribute ``autotune`` (see :mod:`autotune._search.storage`),
so a resumed search, a worker on another host and a report rebuilt from the storage all read the
same thing through :meth:`Record.from_dict`. :class:`TrialRecord` is one trial as a result
reports it: its record with the study's verdicts on it (see :meth:`Ledger.trial_record`).
"""

from __future__ import annotations

import dataclasses
import enum
import statistics
from collections.abc import Mapping
from typing import Any

from autotune._guard.confirmation import Confirmation
from autotune._guard.plan import AccuracyPlan, HorizonPlan, LongerMiss
from autotune._knobs.config import TrainingConfig
from autotune._load import Load
from autotune._search import derived
from autotune._stream import StreamEnded
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyRun

__all__ = [
    "BaselineAccuracy",
    "BaselineCheck",
    "CheckReason",
    "GuardFailure",
    "NoCheck",
    "NoRun",
    "Record",
    "Role",
    "TrialRecord",
]


class Role(str, enum.Enum):
    BASELINE = "baseline"
    CANDIDATE = "candidate"

    def __str__(self) -> str:
        return self.value


class NoRun(str, enum.Enum):
    """Why a candidate that changes the numerics got no accuracy run (its message says it in
    words): the summary counts these, not the words."""

    NO_GUARD = "no guard"  # the baseline's accuracy runs were not measured
    COULD_NOT_WIN = "could not win"  # slower than a verified answer, or its steps
    NO_TIME = "no time"  # its run (and the check after it) did not fit the time left

    def __str__(self) -> str:
        return self.value


class NoCheck(str, enum.Enum):
    """Why no accuracy check was possible at all: the baseline's accuracy runs failed, and
    how. The result keeps this value; its words are written from it (see ``summary``)."""

    FAILED = "baseline runs failed"  # an error in the baseline's accuracy runs
    STREAM_ENDED = "stream ended"  # the training stream ended before the runs' samples
    HUNG = "baseline runs hung"  # stopped at their time limit

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, failure: FailureReason | None, message: str | None) -> NoCheck:
        """The reason for runs that ended with ``failure`` and ``message``."""
        if failure is FailureReason.TIMEOUT:
            return cls.HUNG
        # The trial's message starts with the exception's name (failures.classify).
        if message and StreamEnded.__name__ in message:
            return cls.STREAM_ENDED
        return cls.FAILED


@dataclasses.dataclass(frozen=True, kw_only=True)
class GuardFailure:
    """The baseline's accuracy runs that failed, so that no accuracy check could be made: why
    (:class:`NoCheck`), the trial's failure reason and message, the samples each run was to
    train (the horizon tried), and whether a shorter horizon's runs had been measured before."""

    why: NoCheck
    failure: FailureReason | None
    message: str
    samples: int
    longer: bool = False  # the runs of a longer horizon (choose_horizon), after a shorter one

    def describe(self) -> str:
        """In words (the progress line and the summary say it): which runs failed, and how."""
        runs = "the baseline's accuracy runs"
        if self.longer:
            runs += f" at a longer horizon ({self.samples:,} samples each)"
        how = {
            NoCheck.FAILED: "failed",
            NoCheck.STREAM_ENDED: "ran out of stream",
            NoCheck.HUNG: "hung, stopped at their limit",
        }[self.why]
        return f"{runs} {how} ({self.message or self.failure})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "why": self.why.value,
            "failure": None if self.failure is None else self.failure.value,
            "message": self.message,
            "samples": self.samples,
            "longer": self.longer,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GuardFailure:
        failure = data.get("failure")
        return cls(
            why=NoCheck(data["why"]),
            failure=None if failure is None else FailureReason(failure),
            message=str(data.get("message") or ""),
            samples=int(data.get("samples") or 0),
            longer=bool(data.get("longer")),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """One trial: its config, its measurement, its accuracy runs, how it ended."""

    role: Role
    config: TrainingConfig
    measurement: Measurement | None = None
    accuracy: tuple[AccuracyRun, ...] = ()
    failure: FailureReason | None = None
    message: str | None = None
    seconds: float = 0.0  # the whole trial, wall clock
    measure_seconds: float = 0.0  # its throughput phase
    projected_time: float | None = None  # for the planned run, one-time costs included
    reused: bool = False  # the same config as an earlier trial: its record, not a new run
    pruned: bool = False  # clearly slower than the best: no accuracy runs
    no_run: NoRun | None = None  # why a change of the numerics got no accuracy run
    fingerprint: str = ""  # of the machine that measured it (see autotune._device.fingerprint)
    accuracy_samples: int | None = None  # samples each accuracy run trained on
    at: float | None = None  # wall-clock time the trial ended
    load: Load | None = None  # other processes' use of the machine while it ran (None: unread)
    # Its screening verdict when it finished (what its progress row said); the ledger judges
    # it again as the baseline's runs grow, and the summary says where the two differ.
    screened_then: bool | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def metric(self) -> float | None:
        """The validation metric, the mean over the accuracy runs (None: none were made)."""
        if not self.accuracy:
            return None
        return statistics.fmean(run.metric for run in self.accuracy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role.value,
            "config": self.config.to_dict(),
            "measurement": self.measurement.to_dict() if self.measurement is not None else None,
            "accuracy_runs": [run.to_dict() for run in self.accuracy],
            "metric": self.metric,  # derived; stored for tools that read the study directly
            "failure": self.failure.value if self.failure is not None else None,
            "message": self.message,
            "seconds": self.seconds,
            "measure_seconds": self.measure_seconds,
            "projected_time": self.projected_time,
            "reused": self.reused,
            "pruned": self.pruned,
            "no_accuracy_run": self.no_run.value if self.no_run is not None else None,
            "fingerprint": self.fingerprint,
            "accuracy_samples": self.accuracy_samples,
            "at": self.at,
            "load": self.load.to_dict() if self.load is not None else None,
            "screened_then": self.screened_then,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        m = data.get("measurement")
        failure = data.get("failure")
        return cls(
            role=Role(data["role"]),
            config=TrainingConfig.from_dict(data["config"]),
            measurement=Measurement.from_dict(m) if m else None,
            accuracy=tuple(AccuracyRun.from_dict(r) for r in data.get("accuracy_runs") or ()),
            failure=FailureReason(failure) if failure is not None else None,
            message=data.get("message"),
            seconds=float(data.get("seconds") or 0.0),
            measure_seconds=float(data.get("measure_seconds") or 0.0),
            projected_time=_float(data.get("projected_time")),
            reused=bool(data.get("reused")),
            pruned=bool(data.get("pruned")),
            no_run=NoRun(data["no_accuracy_run"]) if data.get("no_accuracy_run") else None,
            fingerprint=str(data.get("fingerprint") or ""),
            accuracy_samples=_int(data.get("accuracy_samples")),
            at=_float(data.get("at")),
            load=Load.from_dict(data.get("load")),
            screened_then=data.get("screened_then"),
        )


class CheckReason(str, enum.Enum):
    """Why the baseline was measured (again)."""

    FIRST = "first"  # the baseline's trial itself
    CADENCE = "cadence"  # time had passed since the last: the machine drifts
    STATE = "state"  # a candidate ran while other processes used the machine differently

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaselineCheck:
    """One measurement of the baseline's throughput, and the machine's state during it: a
    candidate's screening ratio is taken against the one of its own state nearest it in time
    (see :meth:`autotune._search.ledger.Ledger.reference`)."""

    at: float  # wall-clock time it ended
    projected_time: float  # for the planned run, as a trial's
    throughput: float  # samples/s
    measure_seconds: float = 0.0  # how long the measurement took
    load: Load | None = None
    reason: CheckReason = CheckReason.CADENCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "projected_time": self.projected_time,
            "throughput": self.throughput,
            "measure_seconds": self.measure_seconds,
            "load": self.load.to_dict() if self.load is not None else None,
            "reason": self.reason.value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BaselineCheck:
        return cls(
            at=float(data["at"]),
            projected_time=float(data["projected_time"]),
            throughput=float(data["throughput"]),
            measure_seconds=float(data.get("measure_seconds") or 0.0),
            load=Load.from_dict(data.get("load")),
            reason=CheckReason(data.get("reason") or CheckReason.CADENCE.value),
        )

    @classmethod
    def of(cls, record: Record) -> BaselineCheck | None:
        """The baseline trial's own measurement as the first check (None: it has none)."""
        m = record.measurement
        if record.projected_time is None or m is None:
            return None
        return cls(
            at=record.at or 0.0,
            projected_time=record.projected_time,
            throughput=m.throughput,
            measure_seconds=record.measure_seconds or record.seconds,
            load=record.load,
            reason=CheckReason.FIRST,
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaselineAccuracy:
    """The baseline's accuracy runs (one per data-order seed, each of ``samples`` samples) and
    its untrained model's metric: what the accuracy guard holds every candidate to."""

    runs: tuple[AccuracyRun, ...]
    samples: int
    initial_metric: float | None = None
    seconds: float = 0.0  # all the runs, wall clock
    # The budget's plan where it chose the horizon (None: the user's accuracy_samples, or a
    # longer horizon the plan of the horizon asked for).
    plan: AccuracyPlan | None = None
    # The horizon's plan made at each horizon tried (see autotune._guard.plan), the last one
    # at ``samples``.
    horizons: tuple[HorizonPlan, ...] = ()
    # The time budget, where a check at the last horizon does not fit in what is left of it.
    budget: float | None = None
    longer: LongerMiss | None = None  # a longer horizon asked for that did not fit
    stored_note: str | None = None  # a study filed before these facts: its note, as stored
    # The settings every accuracy run trains with, the baseline's and both arms of every pair
    # (the baseline's config with the safe answer's shared knobs, see registry.pair_base), and
    # that config's throughput; None: the baseline's own (and studies filed before).
    config: TrainingConfig | None = None
    throughput: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [run.to_dict() for run in self.runs],
            "samples": self.samples,
            "initial_metric": self.initial_metric,
            "seconds": self.seconds,
            "plan": None if self.plan is None else self.plan.to_dict(),
            "horizons": [h.to_dict() for h in self.horizons],
            "budget": self.budget,
            "longer": None if self.longer is None else self.longer.to_dict(),
            "note": self.stored_note,
            "config": None if self.config is None else self.config.to_dict(),
            "throughput": self.throughput,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BaselineAccuracy:
        return cls(
            runs=tuple(AccuracyRun.from_dict(r) for r in data["runs"]),
            samples=int(data["samples"]),
            initial_metric=_float(data.get("initial_metric")),
            seconds=float(data.get("seconds") or 0.0),
            plan=None if data.get("plan") is None else AccuracyPlan.from_dict(data["plan"]),
            horizons=tuple(HorizonPlan.from_dict(h) for h in data.get("horizons") or ()),
            budget=_float(data.get("budget")),
            longer=None if data.get("longer") is None else LongerMiss.from_dict(data["longer"]),
            stored_note=data.get("note"),
            config=None if data.get("config") is None else TrainingConfig.from_dict(data["config"]),
            throughput=_float(data.get("throughput")),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as the result reports it: its record, and the study's verdict on it (its
    projected time over every measurement, whether it may win, its confirmation)."""

    number: int
    role: str  # "baseline" or "candidate"
    config: TrainingConfig
    measurement: Measurement | None
    metric: float | None
    accuracy_checked: bool
    projected_time: float | None
    feasible: bool
    failure: str | None = None
    message: str | None = None
    seconds: float = 0.0
    reused: bool = False
    fingerprint: str | None = None  # of the machine that measured it (see device.fingerprint)
    # Its accuracy checked over as many seeds as the baseline's, paired (see AccuracyGuard).
    confirmation: Confirmation | None = None
    safe: bool = False  # trains the baseline's model: numerics unchanged, no accuracy risk
    screened: bool | None = None  # passed its one-run accuracy screening (None: not checked)
    screened_then: bool | None = None  # that verdict when it finished (its progress row's)
    no_accuracy_run: str | None = None  # why a change of the numerics got none (NoRun's value)
    # Measured again side by side with the baseline: in how many rounds, and its throughput
    # there (the median); its figures then come from those rounds, not its screening.
    side_rounds: int = 0
    side_throughput: float | None = None
    # Its speedup over the baseline, paired: the median of its rounds' ratios (None: no rounds).
    side_speedup: float | None = None
    # Its projected time by its screening measurement, in the machine's latest state: taken
    # against the baseline measured nearest it in its own state (see Ledger.reference).
    screening_time: float | None = None
    # Its screening throughput over that baseline measurement's (None: no measurement).
    screening_ratio: float | None = None
    load: Load | None = None  # other processes' use of the machine while it was measured

    @property
    def confirmed(self) -> bool | None:
        """True/False once confirmed/rejected; None when there was nothing (or no time) to
        confirm."""
        return None if self.confirmation is None else self.confirmation.passed

    @property
    def throughput(self) -> float | None:
        """Samples/s: measured side by side where it was, else its screening measurement."""
        if self.side_throughput is not None:
            return self.side_throughput
        return self.measurement.throughput if self.measurement is not None else None

    @property
    def measured_as(self) -> str:
        """Where its throughput and projected time come from."""
        if self.side_rounds >= derived.MIN_ROUNDS:
            return f"side by side over {self.side_rounds} rounds"
        return "screening (one measurement)"

    def metrics(
        self, metric_name: str, planned_samples: int, *, side: bool = True
    ) -> dict[str, Any]:
        """Its figures: throughput, step time and projected time from the side-by-side rounds
        where they measured it (and ``side``: the config it is compared with was measured
        there too), else from its screening measurement; the rest from screening."""
        out: dict[str, Any] = {}
        side = side and self.side_rounds >= derived.MIN_ROUNDS
        if self.measurement is not None:
            out.update(self.measurement.summary())
            out["screening_throughput"] = self.measurement.throughput
            if side and self.side_throughput is not None:  # the same fact as the throughput
                out["throughput"] = self.side_throughput
                out["step_time"] = self.measurement.batch_size / self.side_throughput
        out["measured_as"] = self.measured_as if side else "screening (one measurement)"
        runs = self.confirmation.runs if self.confirmation is not None else ()
        out["validation_metric"] = sum(runs) / len(runs) if runs else self.metric
        out["validation_metric_runs"] = len(runs) if runs else (1 if self.metric is not None else 0)
        out["metric_name"] = metric_name
        out["accuracy_checked"] = self.accuracy_checked
        out["accuracy_confirmed"] = self.confirmed
        out["projected_training_time"] = self.projected_time if side else self.screening_time
        out["planned_samples"] = planned_samples
        # What it trains of them: a config that trains a share of the epochs trains fewer.
        out["trained_samples"] = round(planned_samples * self.config.train_fraction)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "role": self.role,
            "config": self.config.to_dict(),
            "throughput": self.throughput,
            "validation_metric": self.metric,
            "accuracy_checked": self.accuracy_checked,
            "projected_training_time": self.projected_time,
            "feasible": self.feasible,
            "failure": self.failure,
            "message": self.message,
            "seconds": self.seconds,
            "reused": self.reused,
            "fingerprint": self.fingerprint,
            "confirmation": self.confirmation.summary() if self.confirmation else None,
            "safe": self.safe,
            "screened": self.screened,
            "screened_then": self.screened_then,
            "no_accuracy_run": self.no_accuracy_run,
            "measured_as": self.measured_as,
            "screening_throughput": (
                self.measurement.throughput if self.measurement is not None else None
            ),
            "screening_ratio": self.screening_ratio,
            "load": self.load.to_dict() if self.load is not None else None,
        }

"""What a trial is asked and what it gives back: the measurement's :class:`Budget`, the
:class:`AccuracyCheck` it makes, each :class:`AccuracyRun`, and the :class:`TrialOutcome`
(read by the search, the result, the reports and the trainers' loops alike)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from autotune._knobs.config import TrainingConfig
from autotune._load import Load
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement

__all__ = ["AccuracyCheck", "AccuracyRun", "Budget", "TrialOutcome"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budget:
    """How long a trial's throughput measurement runs. The baseline gets exactly the same
    budget. (How long accuracy runs train is the accuracy guard's to decide, per search.)"""

    warmup_steps: int = 3
    timed_samples: int = 2048
    min_timed_steps: int = 6
    chunks: int = 3
    eval_peak: bool = True  # include a validation batch in the peak memory
    # A timed phase shorter than this measures timer noise (a small MLP does 2,048 samples in
    # 70 ms): the steady-state steps are stretched to last about this long (at most 16x).
    min_timed_seconds: float = 0.5
    # A slow model's timed phase is cut to about this long (never below min_timed_steps): a
    # real model at 100 samples/s would spend 20 s on 2,048 samples, most of a short budget.
    max_timed_seconds: float = 3.0
    # Train on the dataset's longest items (the memory probe): the peak a real run meets.
    longest: bool = False

    def timed_steps(self, batch_size: int) -> int:
        steps = max(self.min_timed_steps, math.ceil(self.timed_samples / batch_size))
        return math.ceil(steps / self.chunks) * self.chunks

    def steps(self, batch_size: int, accumulation: int = 1) -> tuple[int, int]:
        """(warm-up, timed) micro-batches of a measurement: with gradient accumulation, whole
        optimizer steps in the warm-up and in every chunk."""
        unit = self.chunks * accumulation
        timed = math.ceil(self.timed_steps(batch_size) / unit) * unit
        return math.ceil(self.warmup_steps / accumulation) * accumulation, timed


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyCheck:
    """Accuracy runs a trial makes: one per data-order seed, each training on ``samples``
    samples from the initial weights."""

    samples: int
    seeds: tuple[int, ...]
    initial: bool = False  # also evaluate the untrained model (the baseline's first check)
    # The config the runs train, where it is not the trial's: a pair's arm, the baseline's
    # settings with the numerics being judged (see AccuracyGuard), so that the two runs of a
    # pair differ only in what the guard judges.
    config: TrainingConfig | None = None
    # Also validate halfway (where that equals a run of half the samples: a constant rate
    # without warm-up): the baseline's spread at two horizons, from which the search judges
    # whether a longer horizon settles checks sooner (see autotune._guard.plan).
    midpoint: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyRun:
    """One accuracy run: the validation metric after training on ``samples`` samples with
    data-order ``seed``; ``units``, the metric's sums per validation unit (see
    :class:`Validation`), and ``counts``, the items per unit (None: one each), where the
    metric is autotune's own (a trainer's logged metric has none); ``midpoint``, the metric
    after half the samples, where the check asked for it (see :class:`AccuracyCheck`)."""

    seed: int
    metric: float
    final_loss: float
    samples: int
    seconds: float
    units: tuple[float, ...] | None = None
    counts: tuple[float, ...] | None = None
    midpoint: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key in ("units", "counts"):
            values = getattr(self, key)
            out[key] = None if values is None else [_compact(v) for v in values]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AccuracyRun:
        units, counts = data.get("units"), data.get("counts")
        return cls(
            seed=int(data["seed"]),
            metric=float(data["metric"]),
            final_loss=float(data["final_loss"]),
            samples=int(data["samples"]),
            seconds=float(data["seconds"]),
            units=None if units is None else tuple(float(v) for v in units),
            counts=None if counts is None else tuple(float(v) for v in counts),
            midpoint=None if data.get("midpoint") is None else float(data["midpoint"]),
        )


def _compact(value: float) -> float | int:
    """A whole number as an int (an accuracy's per-example sums are counts): a shorter JSON."""
    return int(value) if value.is_integer() else value


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialOutcome:
    config: TrainingConfig
    measurement: Measurement | None = None
    accuracy: tuple[AccuracyRun, ...] = ()
    failure: FailureReason | None = None
    message: str | None = None
    seconds: float = 0.0
    initial_metric: float | None = None  # the untrained model's, where asked for
    load: Load | None = None  # other processes' use of the machine during it (the search reads it)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def poisoned(self) -> bool:
        """The trial left its process's CUDA context unusable: no further trial may run there."""
        return self.failure is FailureReason.DEVICE

    @property
    def metric(self) -> float | None:
        if not self.accuracy:
            return None
        return statistics.fmean(run.metric for run in self.accuracy)

"""The values knobs take: string enums (JSON-ready) and the learning-rate schedule.

These are the leaves of the configuration: the knob registry (:mod:`autotune._knobs`), the
config (:mod:`autotune._knobs.config`) and the code that applies a config all build on them.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from autotune._errors import ConfigError

__all__ = [
    "WSD_DECAY",
    "BatchScaling",
    "CompileMode",
    "LRSchedule",
    "OptimizerImpl",
    "Precision",
    "ScheduleKind",
    "check_type",
    "known_keys",
    "to_enum",
    "wsd_decay_steps",
]


class Precision(str, enum.Enum):
    """Numeric precision of the forward/backward pass."""

    FP32 = "fp32"  # what a plain script does: PyTorch's defaults (cuDNN convolutions may use TF32)
    FP32_STRICT = "fp32_strict"  # TF32 off everywhere, cuDNN convolutions included
    TF32 = "tf32"  # fp32 storage, TensorFloat-32 matmuls/convolutions (Ampere+ GPUs)
    BF16 = "bf16"  # autocast to bfloat16
    FP16 = "fp16"  # autocast to float16, with a GradScaler

    def __str__(self) -> str:
        return self.value


class CompileMode(str, enum.Enum):
    """``torch.compile`` mode; ``none`` runs eagerly."""

    NONE = "none"
    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE = "max-autotune"
    MAX_AUTOTUNE_NO_CUDAGRAPHS = "max-autotune-no-cudagraphs"

    def __str__(self) -> str:
        return self.value


class OptimizerImpl(str, enum.Enum):
    """How torch's optimizer updates the parameters: its own default choice, one multi-tensor
    (``foreach=True``) kernel per group, or one fused kernel (``fused=True``)."""

    DEFAULT = "default"
    FOREACH = "foreach"
    FUSED = "fused"

    def __str__(self) -> str:
        return self.value

    def kwargs(self) -> dict[str, bool]:
        """The optimizer constructor's keyword arguments for this implementation."""
        return {} if self is OptimizerImpl.DEFAULT else {self.value: True}


class ScheduleKind(str, enum.Enum):
    """Shape of the learning-rate schedule over a run."""

    CONSTANT = "constant"
    COSINE = "cosine"  # linear warm-up, then cosine decay to zero
    ONE_CYCLE = "one_cycle"  # torch.optim.lr_scheduler.OneCycleLR
    # Warm-up, stable, decay: linear warm-up, the peak held, then a cosine decay to zero over
    # the run's last WSD_DECAY share (Hugging Face's "warmup_stable_decay").
    WSD = "wsd"
    # The user's own trainer's optimizer and schedule (autotune.tune): its shape is theirs;
    # peak_lr is their first parameter group's learning rate, which a candidate scales (every
    # group alike). Never a value of a search space.
    TRAINER = "trainer"

    def __str__(self) -> str:
        return self.value


class BatchScaling(str, enum.Enum):
    """How the peak learning rate was scaled from the reference batch size."""

    NONE = "none"
    LINEAR = "linear"
    SQRT = "sqrt"

    def __str__(self) -> str:
        return self.value

    def factor(self, batch_size: int, reference_batch_size: int) -> float:
        ratio = batch_size / reference_batch_size
        if self is BatchScaling.LINEAR:
            return ratio
        if self is BatchScaling.SQRT:
            return math.sqrt(ratio)
        return 1.0


_E = TypeVar("_E", bound=enum.Enum)


def to_enum(cls: type[_E], value: object, field: str) -> _E:
    """``value`` as a member of ``cls``, or a ConfigError naming the field and the choices."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"`{field}` must be one of {allowed}, but got {value!r}.") from None


def check_type(field: str, value: object, types: tuple[type, ...], what: str) -> None:
    """A ConfigError unless ``value`` is one of ``types`` (a bool is not a number here)."""
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ConfigError(f"`{field}` must be {what}, but got {value!r} ({type(value).__name__}).")


def known_keys(cls: type, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``data`` as keyword arguments of the dataclass ``cls``; unknown keys are an error."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"`{where}` must be a JSON object, but got {data!r}.")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"Unknown key(s) {', '.join(map(repr, unknown))} in `{where}`. "
            f"Known keys are: {', '.join(sorted(names))}."
        )
    return dict(data)


WSD_DECAY = 0.2  # the share of a warm-up / stable / decay run that decays


def wsd_decay_steps(total_steps: int) -> int:
    """The steps a ``wsd`` schedule of ``total_steps`` decays over (at least one)."""
    return max(1, round(WSD_DECAY * total_steps))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LRSchedule:
    """Learning-rate schedule: its shape, the peak LR, warm-up and batch-size scaling.

    ``peak_lr`` is already resolved for the config's batch size; ``batch_scaling`` and
    ``reference_batch_size`` record how it was derived from the baseline's learning rate.
    """

    kind: ScheduleKind = ScheduleKind.CONSTANT
    peak_lr: float = 1e-3
    warmup_fraction: float = 0.0
    batch_scaling: BatchScaling = BatchScaling.NONE
    reference_batch_size: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", to_enum(ScheduleKind, self.kind, "lr_schedule.kind"))
        object.__setattr__(
            self,
            "batch_scaling",
            to_enum(BatchScaling, self.batch_scaling, "lr_schedule.batch_scaling"),
        )
        check_type("lr_schedule.peak_lr", self.peak_lr, (float, int), "a number")
        check_type("lr_schedule.warmup_fraction", self.warmup_fraction, (float, int), "a number")
        check_type("lr_schedule.reference_batch_size", self.reference_batch_size, (int,), "an int")
        if not (self.peak_lr > 0 and math.isfinite(self.peak_lr)):
            raise ConfigError(f"`lr_schedule.peak_lr` must be > 0, but got {self.peak_lr!r}.")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(
                "`lr_schedule.warmup_fraction` must be in [0, 1), "
                f"but got {self.warmup_fraction!r}."
            )
        if self.reference_batch_size < 1:
            raise ConfigError(
                "`lr_schedule.reference_batch_size` must be >= 1, "
                f"but got {self.reference_batch_size!r}."
            )
        object.__setattr__(self, "peak_lr", float(self.peak_lr))
        object.__setattr__(self, "warmup_fraction", float(self.warmup_fraction))

    def lr_factor(self, step: int, total_steps: int) -> float:
        """Multiplier of ``peak_lr`` at optimizer step ``step`` of ``total_steps``.

        For ``one_cycle`` this is an approximation for display; training uses torch's
        ``OneCycleLR`` (see :meth:`TrainingConfig.lr_scheduler`).
        """
        total = max(1, total_steps)
        warmup = round(self.warmup_fraction * total)
        if step < warmup:
            return (step + 1) / warmup
        if self.kind is ScheduleKind.CONSTANT:
            return 1.0
        start = warmup
        if self.kind is ScheduleKind.WSD:
            start = max(warmup, total - wsd_decay_steps(total))
            if step < start:
                return 1.0
        frac = min(1.0, (step - start) / max(1, total - start))
        return 0.5 * (1 + math.cos(math.pi * frac))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "peak_lr": self.peak_lr,
            "warmup_fraction": self.warmup_fraction,
            "batch_scaling": self.batch_scaling.value,
            "reference_batch_size": self.reference_batch_size,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LRSchedule:
        return cls(**known_keys(cls, data, "lr_schedule"))

"""The training configuration: every knob autotune tunes, as one frozen, JSON-ready value.

A :class:`TrainingConfig` is what a search hands back and what a user applies to their own loop::

    cfg = autotune.load_config("best.json")
    loader = cfg.dataloader(train_dataset)
    model = cfg.prepare(model)
    optimizer = cfg.optimizer(model.parameters())
    scheduler = cfg.lr_scheduler(optimizer, total_steps=len(loader) * epochs)
    scaler = cfg.grad_scaler()
    with cfg.backends():
        for inputs, targets in loader:
            inputs, targets = cfg.to_device((inputs, targets))
            with cfg.autocast():
                loss = loss_fn(model(inputs), targets)
            ...
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    from autotune.integrations import LightningSettings

__all__ = [
    "BatchScaling",
    "CompileMode",
    "LRSchedule",
    "Precision",
    "ScheduleKind",
    "TrainingConfig",
]

SCHEMA_VERSION = 1


class Precision(str, enum.Enum):
    """Numeric precision of the forward/backward pass."""

    FP32 = "fp32"
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


class ScheduleKind(str, enum.Enum):
    """Shape of the learning-rate schedule over a run."""

    CONSTANT = "constant"
    COSINE = "cosine"  # linear warm-up, then cosine decay to zero
    ONE_CYCLE = "one_cycle"  # torch.optim.lr_scheduler.OneCycleLR

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


def _enum(cls: type[_E], value: object, field: str) -> _E:
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"`{field}` must be one of {allowed}, but got {value!r}.") from None


def _check_type(field: str, value: object, types: tuple[type, ...], what: str) -> None:
    # bool is an int subclass: reject it where a number is meant, and ints where a bool is meant.
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ConfigError(f"`{field}` must be {what}, but got {value!r} ({type(value).__name__}).")


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
        object.__setattr__(self, "kind", _enum(ScheduleKind, self.kind, "lr_schedule.kind"))
        object.__setattr__(
            self,
            "batch_scaling",
            _enum(BatchScaling, self.batch_scaling, "lr_schedule.batch_scaling"),
        )
        _check_type("lr_schedule.peak_lr", self.peak_lr, (float, int), "a number")
        _check_type("lr_schedule.warmup_fraction", self.warmup_fraction, (float, int), "a number")
        _check_type("lr_schedule.reference_batch_size", self.reference_batch_size, (int,), "an int")
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
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
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
        return cls(**_known_keys(cls, data, "lr_schedule"))


def _known_keys(cls: type, data: Mapping[str, Any], where: str) -> dict[str, Any]:
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """Every tuned knob, with PyTorch's defaults as the default values.

    The defaults are what a plain training script does: batch 32, no DataLoader workers, fp32,
    eager execution, no checkpointing, a constant learning rate.
    """

    device: str = "cpu"
    batch_size: int = 32
    num_workers: int = 0
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    pin_memory: bool = False
    precision: Precision = Precision.FP32
    compile_mode: CompileMode = CompileMode.NONE
    cudnn_benchmark: bool = False
    checkpointing: int = 0  # 0: none; k: wrap every k-th repeated block in torch.utils.checkpoint
    channels_last: bool = False
    intra_op_threads: int | None = None  # None: leave torch's thread count as it is
    lr_schedule: LRSchedule = dataclasses.field(default_factory=LRSchedule)

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", _enum(Precision, self.precision, "precision"))
        object.__setattr__(
            self, "compile_mode", _enum(CompileMode, self.compile_mode, "compile_mode")
        )
        if isinstance(self.lr_schedule, Mapping):
            object.__setattr__(self, "lr_schedule", LRSchedule.from_dict(self.lr_schedule))
        _check_type("device", self.device, (str,), "a device string such as 'cpu' or 'cuda:0'")
        _check_type("batch_size", self.batch_size, (int,), "an int")
        _check_type("num_workers", self.num_workers, (int,), "an int")
        _check_type("checkpointing", self.checkpointing, (int,), "an int")
        for name in ("persistent_workers", "pin_memory", "cudnn_benchmark", "channels_last"):
            _check_type(name, getattr(self, name), (bool,), "true or false")
        if self.prefetch_factor is not None:
            _check_type("prefetch_factor", self.prefetch_factor, (int,), "an int or null")
        if self.intra_op_threads is not None:
            _check_type("intra_op_threads", self.intra_op_threads, (int,), "an int or null")
        if not isinstance(self.lr_schedule, LRSchedule):
            raise ConfigError(f"`lr_schedule` must be an LRSchedule, but got {self.lr_schedule!r}.")
        if self.batch_size < 1:
            raise ConfigError(f"`batch_size` must be >= 1, but got {self.batch_size}.")
        if self.num_workers < 0:
            raise ConfigError(f"`num_workers` must be >= 0, but got {self.num_workers}.")
        if self.checkpointing < 0:
            raise ConfigError(
                f"`checkpointing` must be 0 (none) or k >= 1 (every k-th block), "
                f"but got {self.checkpointing}."
            )
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor is not None):
            raise ConfigError(
                "`persistent_workers` and `prefetch_factor` need `num_workers` > 0, but got "
                f"num_workers=0, persistent_workers={self.persistent_workers}, "
                f"prefetch_factor={self.prefetch_factor}. Set them to false/null or add workers."
            )
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ConfigError(f"`prefetch_factor` must be >= 1, but got {self.prefetch_factor}.")
        if self.intra_op_threads is not None and self.intra_op_threads < 1:
            raise ConfigError(
                f"`intra_op_threads` must be >= 1 or null, but got {self.intra_op_threads}."
            )

    # -- JSON ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, LRSchedule):
                value = value.to_dict()
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingConfig:
        kwargs = _known_keys(cls, data, "config")
        if "lr_schedule" in kwargs:
            kwargs["lr_schedule"] = LRSchedule.from_dict(kwargs["lr_schedule"])
        return cls(**kwargs)

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_json(cls, text: str) -> TrainingConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"The config is not valid JSON: {exc}.") from None
        return cls.from_dict(data)

    def replace(self, **changes: Any) -> TrainingConfig:
        """A copy with ``changes`` applied (the config itself is frozen)."""
        return dataclasses.replace(self, **changes)

    def numerics_key(self) -> tuple[Any, ...]:
        """The knobs that change the optimisation maths: equal keys train to the same model."""
        return (self.batch_size, self.precision, self.lr_schedule)

    def describe(self) -> str:
        """One line naming the knobs, for logs and summaries."""
        s = self.lr_schedule
        parts = [
            f"batch={self.batch_size}",
            f"workers={self.num_workers}",
            f"precision={self.precision.value}",
            f"compile={self.compile_mode.value}",
            f"lr={s.kind.value}@{s.peak_lr:.3g}",
        ]
        if self.pin_memory:
            parts.append("pin_memory")
        if self.cudnn_benchmark:
            parts.append("cudnn.benchmark")
        if self.channels_last:
            parts.append("channels_last")
        if self.checkpointing:
            parts.append(f"checkpoint every {self.checkpointing}")
        if self.intra_op_threads is not None:
            parts.append(f"threads={self.intra_op_threads}")
        return " ".join(parts)

    # -- Applying the config to a user's own training loop ------------------------------------

    def dataloader(
        self,
        dataset: Dataset[Any],
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        generator: torch.Generator | None = None,
        batch_size: int | None = None,
    ) -> DataLoader[Any]:
        """A DataLoader over ``dataset`` with the tuned batch size, workers and pinning."""
        from autotune import knobs

        return knobs.make_dataloader(
            self,
            dataset,
            shuffle=shuffle,
            drop_last=drop_last,
            collate_fn=collate_fn,
            generator=generator,
            batch_size=batch_size,
        )

    def prepare(self, model: nn.Module, *, inplace: bool = False) -> nn.Module:
        """The model on the config's device, in its memory format, checkpointed and compiled.

        The caller's model is copied first unless ``inplace=True``.
        """
        from autotune import knobs

        return knobs.prepare_model(self, model, inplace=inplace)

    def autocast(self) -> AbstractContextManager[Any]:
        """The autocast context for the config's precision (disabled for fp32/tf32)."""
        from autotune import knobs

        return knobs.autocast(self)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler, enabled only for fp16 (where gradients can underflow)."""
        from autotune import knobs

        return knobs.grad_scaler(self)

    def backends(self) -> AbstractContextManager[None]:
        """Set cuDNN benchmark, matmul precision and thread count; restore them on exit."""
        from autotune import knobs

        return knobs.backend_flags(self)

    def optimizer(
        self,
        params: Iterable[Any],
        optimizer_cls: Callable[..., torch.optim.Optimizer] | None = None,
        **kwargs: Any,
    ) -> torch.optim.Optimizer:
        """``optimizer_cls(params, lr=peak_lr, **kwargs)``; AdamW when no class is given."""
        import torch

        cls = optimizer_cls if optimizer_cls is not None else torch.optim.AdamW
        return cls(params, lr=self.lr_schedule.peak_lr, **kwargs)

    def lr_scheduler(
        self, optimizer: torch.optim.Optimizer, total_steps: int
    ) -> torch.optim.lr_scheduler.LRScheduler:
        """The tuned schedule over ``total_steps`` optimizer steps (call ``.step()`` per step)."""
        from autotune import knobs

        return knobs.lr_scheduler(self.lr_schedule, optimizer, total_steps)

    def to_device(self, batch: Any) -> Any:
        """Move every tensor in ``batch`` (nested tuples, lists, dicts) to the device, and
        image-shaped inputs to channels_last when that knob is on."""
        from autotune import knobs

        moved = knobs.to_device(batch, self.device, non_blocking=self.pin_memory)
        return knobs.to_channels_last(moved) if self.channels_last else moved

    # -- Other trainers -----------------------------------------------------------------------

    def to_transformers(self) -> dict[str, Any]:
        """Keyword arguments for ``transformers.TrainingArguments``::

            args = TrainingArguments(output_dir="out", **cfg.to_transformers())

        Batch size, DataLoader workers / pinning / persistence / prefetch, precision
        (``bf16``/``fp16``/``tf32``), ``torch_compile`` and its mode, checkpointing (every k-th
        layer), peak learning rate, schedule and warm-up map directly; ``use_cpu`` is set for a
        config measured on the CPU. Schedules: ``constant`` -> ``"constant"`` (or
        ``"constant_with_warmup"``), ``cosine`` -> ``"cosine"``, ``one_cycle`` -> ``"cosine"``
        with a warm-up of OneCycleLR's warm-up share (0.05-0.5), its nearest Hugging Face shape
        (HF warms up from 0 rather than peak/25 and does not cycle momentum).

        Not TrainingArguments fields, to apply yourself: ``cudnn_benchmark`` and
        ``intra_op_threads`` (``with cfg.backends(): trainer.train()``), ``channels_last``
        (``model.to(memory_format=torch.channels_last)``), the CUDA device index (run with
        ``CUDA_VISIBLE_DEVICES``), and the optimizer the search tuned the LR for (AdamW, unless
        ``find_best(optimizer=...)`` said otherwise: set ``optim``/``weight_decay`` to match).
        """
        from autotune.integrations import transformers_kwargs

        return transformers_kwargs(self)

    def to_lightning(self) -> LightningSettings:
        """``lightning.pytorch.Trainer`` arguments (``.trainer``: accelerator, devices,
        precision such as ``"bf16-mixed"``, cuDNN ``benchmark``), the ``DataLoader`` arguments
        Lightning leaves to you (``.dataloader``), and ``.notes`` on applying the rest (model
        knobs through :meth:`prepare`, the LR schedule in ``configure_optimizers``, TF32 and
        threads through :meth:`backends`). See :class:`autotune.integrations.LightningSettings`.
        """
        from autotune.integrations import lightning_settings

        return lightning_settings(self)

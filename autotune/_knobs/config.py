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

Which fields are knobs, and what values each may take, is declared in the knob registry
(:mod:`autotune._knobs`); the config checks itself against it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from autotune._choices import (
    CompileMode,
    LRSchedule,
    OptimizerImpl,
    Precision,
    check_type,
    known_keys,
    to_enum,
)
from autotune._errors import ConfigError
from autotune._knobs import apply, registry, trainer_args

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    from autotune._knobs.trainer_args import LightningSettings

__all__ = ["SCHEMA_VERSION", "TrainingConfig"]

SCHEMA_VERSION = 1
_TYPE_WORDS = {
    registry.ValueKind.INT: "an int",
    registry.ValueKind.BOOL: "true or false",
    registry.ValueKind.FLOAT: "a number",
}


def _word(value: Any) -> str:
    """A value as a config file writes it: false, null, none, 4."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return str(value.value) if isinstance(value, enum.Enum) else repr(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """Every tuned knob, with PyTorch's defaults as the default values.

    The defaults are what a plain training script does: batch 32, no DataLoader workers, fp32,
    eager execution, no checkpointing, one optimizer step per batch, a constant learning rate.

    ``batch_size`` is the micro-batch: what one forward/backward pass sees (and what the
    DataLoader yields). With ``gradient_accumulation_steps`` = k the optimizer steps once every
    k micro-batches, so the global batch (:attr:`global_batch_size`) is ``batch_size * k``;
    with ``ranks`` = n data-parallel processes, each training its micro-batch, it is
    ``batch_size * k * n``.
    """

    device: str = "cpu"
    batch_size: int = 32
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step
    num_workers: int = 0
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    pin_memory: bool = False
    precision: Precision = Precision.FP32
    optimizer_impl: OptimizerImpl = OptimizerImpl.DEFAULT  # torch's default, foreach or fused
    compile_mode: CompileMode = CompileMode.NONE
    compile_dynamic: bool = False  # torch.compile(dynamic=True): no recompile per batch shape
    cudnn_benchmark: bool = False
    checkpointing: int = 0  # 0: none; k: wrap every k-th repeated block in torch.utils.checkpoint
    channels_last: bool = False
    intra_op_threads: int | None = None  # None: leave torch's thread count as it is
    lr_schedule: LRSchedule = dataclasses.field(default_factory=LRSchedule)
    # The share of the planned epochs this config trains (its schedule compressed to them).
    train_fraction: float = 1.0
    # Data-parallel processes (DDP ranks) that train together, each on its own share of the
    # data: fixed by the search (``SearchOptions(ranks=)``), not searched. ``batch_size`` is
    # per rank; the DDP knobs below matter only where ``ranks`` > 1 (DDP's defaults).
    ranks: int = 1
    ddp_bucket_cap_mb: int | None = None  # None: DDP's default (25 MB)
    ddp_gradient_as_bucket_view: bool = False
    ddp_static_graph: bool = False
    ddp_broadcast_buffers: bool = True
    ddp_no_sync: bool = False  # skip the all-reduce on accumulation's inner micro-batches

    def __post_init__(self) -> None:
        check_type("device", self.device, (str,), "a device string such as 'cpu' or 'cuda:0'")
        for knob in registry.KNOBS:
            if knob.field is not None:
                self._check_knob(knob)
        object.__setattr__(self, "train_fraction", float(self.train_fraction))
        check_type("ranks", self.ranks, (int,), "an int >= 1")
        if self.ranks < 1:
            raise ConfigError(f"`ranks` must be >= 1, but got {self.ranks!r}.")
        if isinstance(self.lr_schedule, Mapping):
            object.__setattr__(self, "lr_schedule", LRSchedule.from_dict(self.lr_schedule))
        if not isinstance(self.lr_schedule, LRSchedule):
            raise ConfigError(f"`lr_schedule` must be an LRSchedule, but got {self.lr_schedule!r}.")
        self._check_exists()

    def _check_knob(self, knob: registry.Knob) -> None:
        """The field of ``knob`` against the registry's type and rule."""
        assert knob.field is not None
        name, value = knob.field, getattr(self, knob.field)
        if value is None and knob.nullable:
            return
        if knob.kind is registry.ValueKind.ENUM:
            assert knob.enum is not None
            object.__setattr__(self, name, to_enum(knob.enum, value, name))
            return
        what = _TYPE_WORDS[knob.kind] + (" or null" if knob.nullable else "")
        types: tuple[type, ...] = (int, float) if knob.kind is registry.ValueKind.FLOAT else (int,)
        check_type(name, value, (bool,) if knob.kind is registry.ValueKind.BOOL else types, what)
        if not knob.check(value):
            raise ConfigError(f"`{name}` must be {knob.rule}, but got {value!r}.")

    def _check_exists(self) -> None:
        """No value but its default for a knob that does not exist in this config (the rule
        the sampler follows, ``Knob.exists``): one would be exported, or applied where it
        means nothing or fails (DDP's static graph under accumulation asserts)."""
        defaults = registry.field_defaults(self)
        for knob in registry.KNOBS:
            if knob.field is None or knob.exists is None or knob.present(self):
                continue
            value, default = getattr(self, knob.field), defaults[knob.field]
            if value == default:
                continue
            reads = knob.exists.reads
            raise ConfigError(
                f"`{knob.field}` does not exist in this config: {knob.exists.rule}, but got "
                f"{reads}={_word(getattr(self, reads))}, {knob.field}={_word(value)}. Set "
                f"{knob.field} to {_word(default)} (its default), or change {reads}."
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
        kwargs = known_keys(cls, data, "config")
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
        """A copy with ``changes`` applied (the config itself is frozen). A knob that no longer
        exists in the copy, and that ``changes`` do not name, takes its default (no
        persistent workers without workers, no static graph with accumulation)."""
        return dataclasses.replace(self, **registry.reset_absent(self, changes))

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step: the micro-batch times the accumulation steps times the
        data-parallel ranks."""
        return self.batch_size * self.gradient_accumulation_steps * self.ranks

    @property
    def rank_batch_size(self) -> int:
        """Samples per optimizer step on one rank: the micro-batch times the accumulation."""
        return self.batch_size * self.gradient_accumulation_steps

    def batch_exceeds(self, n_train: int) -> str | None:
        """Why no full batch of this config fits in ``n_train`` training samples (None: one
        does): its global batch is larger than the training set."""
        if self.global_batch_size <= n_train:
            return None
        ranks = f" x {self.ranks} ranks" if self.ranks > 1 else ""
        return (
            f"its global batch of {self.global_batch_size} samples (batch {self.batch_size} x "
            f"{self.gradient_accumulation_steps} accumulation steps{ranks}) is larger than the "
            f"{n_train:,} training samples: not one full batch to train"
        )

    def epochs(self, planned: float) -> float:
        """The epochs to train where the whole run would be ``planned`` epochs: this config
        trains ``train_fraction`` of them, and its LR schedule (``lr_scheduler``'s
        ``total_steps``) spans those, so warm-up and decay end where the shorter run ends."""
        return planned * self.train_fraction

    def optimizer_steps(self, batches: int) -> int:
        """Optimizer steps that ``batches`` micro-batches make (the LR schedule counts these)."""
        return apply.optimizer_steps(self, batches)

    def numerics_key(self, *, split_free: bool = False) -> tuple[Any, ...]:
        """The knobs that change the optimisation maths: equal keys train to the same model.
        ``split_free``: how the global batch is split into micro-batches does not matter (a
        model without batch-norm layers)."""
        return registry.numerics_key(self, split_free=split_free)

    def pair_arm(self, baseline: TrainingConfig) -> TrainingConfig:
        """What this config's accuracy runs train beside ``baseline``'s: ``baseline``'s
        settings with this config's numerics (see the accuracy guard)."""
        return registry.pair_arm(self, baseline)

    def describe(self) -> str:
        """One line naming the knobs, for logs and summaries (each knob's words, declared with
        it in the registry)."""
        return registry.describe(self)

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
        """A DataLoader over ``dataset`` with the tuned batch size, workers and pinning; where a
        process group of ``ranks`` > 1 is initialized, each rank loads its own share through a
        ``DistributedSampler`` (seeded from ``generator``; call :meth:`set_epoch` before each
        epoch, as with any DistributedSampler)."""
        return apply.make_dataloader(
            self,
            dataset,
            shuffle=shuffle,
            drop_last=drop_last,
            collate_fn=collate_fn,
            generator=generator,
            batch_size=batch_size,
        )

    def set_epoch(self, loader: DataLoader[Any], epoch: int) -> None:
        """Start ``epoch`` on a loader from :meth:`dataloader`: under DDP its sampler (also
        inside the micro-batch sampler of gradient accumulation) shuffles each epoch anew, as a
        DistributedSampler needs; nothing otherwise. Call it before each epoch."""
        apply.set_epoch(loader, epoch)

    def prepare(self, model: nn.Module, *, inplace: bool = False) -> nn.Module:
        """The model on the config's device, in its memory format, checkpointed, wrapped in
        ``DistributedDataParallel`` (with the DDP knobs, where a process group of ``ranks`` > 1
        is initialized, as under ``torchrun``) and compiled.

        The caller's model is copied first unless ``inplace=True``.
        """
        return apply.prepare_model(self, model, inplace=inplace)

    def wrap_ddp(self, model: nn.Module, *, device_ids: list[int] | None = None) -> nn.Module:
        """``model`` in ``DistributedDataParallel`` with the tuned DDP knobs (bucket size,
        ``gradient_as_bucket_view``, ``static_graph``, ``broadcast_buffers``), for a process
        group that is initialized (``torchrun`` and ``torch.distributed.init_process_group``).
        :meth:`prepare` does this itself, before compiling, where a process group of
        ``ranks`` > 1 is up; ``device_ids`` defaults to the config's CUDA device."""
        return apply.wrap_ddp(self, model, device_ids=device_ids)

    def autocast(self) -> AbstractContextManager[Any]:
        """The autocast context for the config's precision (disabled for fp32/tf32)."""
        return apply.autocast(self)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler, enabled only for fp16 (where gradients can underflow)."""
        return apply.grad_scaler(self)

    def backends(self) -> AbstractContextManager[None]:
        """Set cuDNN benchmark, matmul precision and thread count; restore them on exit."""
        return apply.backend_flags(self)

    def optimizer(
        self,
        params: Iterable[Any],
        optimizer_cls: Callable[..., torch.optim.Optimizer] | None = None,
        **kwargs: Any,
    ) -> torch.optim.Optimizer:
        """``optimizer_cls(params, lr=peak_lr, **kwargs)``; AdamW when no class is given. The
        tuned implementation is passed as ``foreach=True`` or ``fused=True`` (nothing for
        ``default``), unless ``kwargs`` already say."""
        cls = optimizer_cls if optimizer_cls is not None else torch.optim.AdamW
        options = {**self.optimizer_impl.kwargs(), **kwargs}
        return cls(params, lr=self.lr_schedule.peak_lr, **options)

    def lr_scheduler(
        self, optimizer: torch.optim.Optimizer, total_steps: int
    ) -> torch.optim.lr_scheduler.LRScheduler:
        """The tuned schedule over ``total_steps`` optimizer steps (call ``.step()`` per step;
        with gradient accumulation, :meth:`optimizer_steps` turns batches into steps)."""
        return apply.lr_scheduler(self.lr_schedule, optimizer, total_steps)

    def to_device(self, batch: Any) -> Any:
        """Move every tensor in ``batch`` (nested tuples, lists, dicts) to the device, and
        image-shaped inputs to channels_last when that knob is on."""
        moved = apply.to_device(batch, self.device, non_blocking=self.pin_memory)
        return apply.to_channels_last(moved) if apply.changes_batches(self) else moved

    # -- Other trainers -----------------------------------------------------------------------

    def to_transformers(
        self,
        *,
        planned_epochs: float | None = None,
        train_size: int | None = None,
        planned_samples: int | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments for ``transformers.TrainingArguments``::

            args = TrainingArguments(output_dir="out", **cfg.to_transformers())

        Batch size, DataLoader workers / pinning / persistence / prefetch, precision
        (``bf16``/``fp16``/``tf32``), ``torch_compile`` and its mode, checkpointing (every k-th
        layer), peak learning rate, schedule and warm-up map directly; ``use_cpu`` is set for a
        config measured on the CPU. Schedules: ``constant`` -> ``"constant"`` (or
        ``"constant_with_warmup"``), ``cosine`` -> ``"cosine"``, ``one_cycle`` -> ``"cosine"``
        with a warm-up of OneCycleLR's warm-up share (0.05-0.5), its nearest Hugging Face shape
        (HF warms up from 0 rather than peak/25 and does not cycle momentum), ``wsd`` ->
        ``"warmup_stable_decay"`` with ``lr_scheduler_kwargs={"num_decay_steps": ...}``, the
        last 20% of the run's optimizer steps (it needs ``planned_epochs`` and ``train_size``,
        the items in your training set, to count them).

        Not TrainingArguments fields, to apply yourself: ``cudnn_benchmark`` and
        ``intra_op_threads`` (``with cfg.backends(): trainer.train()``), ``channels_last``
        (``model.to(memory_format=torch.channels_last)``), the CUDA device index (run with
        ``CUDA_VISIBLE_DEVICES``), and the optimizer the search tuned the LR for (AdamW, unless
        ``find_best(optimizer=...)`` said otherwise: set ``optim``/``weight_decay`` to match).

        A config of several data-parallel ``ranks``: ``per_device_train_batch_size`` is per rank
        (launch with ``torchrun --nproc-per-node ranks``), and ``ddp_bucket_cap_mb``,
        ``ddp_static_graph`` and ``ddp_broadcast_buffers`` are set; ``gradient_as_bucket_view``
        is not a TrainingArguments field (wrap the model yourself, or leave it), and the
        Trainer skips the all-reduce on accumulation's inner steps by itself.

        ``planned_epochs`` (the ``num_train_epochs`` you train now) sets ``num_train_epochs``:
        this config's share of them (:meth:`epochs`); a config that trains a share needs it.
        A run over a stream (an ``IterableDataset``, which Hugging Face's Trainer reads with no
        epochs) is counted in samples: ``planned_samples`` (over as many passes as they take:
        the Trainer reads the stream again from its start) sets ``max_steps``, the optimizer
        steps of this config's global batch that read its share.
        """
        return trainer_args.transformers_kwargs(
            self,
            planned_epochs=planned_epochs,
            train_size=train_size,
            planned_samples=planned_samples,
        )

    def to_lightning(
        self,
        *,
        planned_epochs: float | None = None,
        planned_samples: int | None = None,
        passes: float | None = None,
    ) -> LightningSettings:
        """``lightning.pytorch.Trainer`` arguments (``.trainer``: accelerator, devices,
        precision such as ``"bf16-mixed"``, cuDNN ``benchmark``), the ``DataLoader`` arguments
        Lightning leaves to you (``.dataloader``), and ``.notes`` on applying the rest (model
        knobs through :meth:`prepare`, the LR schedule in ``configure_optimizers``, TF32 and
        threads through :meth:`backends`). See :class:`autotune.LightningSettings`. With
        ``planned_epochs`` (your ``max_epochs`` now), ``max_epochs`` is this config's share;
        with ``planned_samples`` (a stream's run), ``max_steps``: the optimizer steps of this
        config's global batch that read its share of them; or, where that run is ``passes``
        whole passes over the stream (the result's ``search["planned_epochs"]``),
        ``max_epochs``: this config's share of them (:meth:`epochs`), where whole.
        """
        return trainer_args.lightning_settings(
            self, planned_epochs=planned_epochs, planned_samples=planned_samples, passes=passes
        )

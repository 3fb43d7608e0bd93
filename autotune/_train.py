"""A plain reference training loop that applies every knob of a config: ``autotune.train``.

It trains through the trial runner's own training step (``autotune._trial.runner``), so the loop a
config was measured with is the loop it trains with here; the LR schedule spans every epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune._checks import check_int
from autotune._choices import CompileMode
from autotune._device import resolve_device
from autotune._display import reporter
from autotune._errors import ArgumentError
from autotune._knobs import apply
from autotune._knobs.config import TrainingConfig
from autotune._result.result import load_config
from autotune._stream import is_stream
from autotune._task import MetricFn, Task, as_task, check_model
from autotune._trial.data import DataModuleLike, unpack_data
from autotune._trial.runner import Trainer, evaluate, seeded
from autotune._trial.streaming import stream_length
from autotune._trial.task import default_optimizer, set_up_task
from autotune._trial.workload import Workload

__all__ = ["EpochStats", "TrainReport", "train"]

_CHECK_EVERY = 32  # steps between NaN/inf checks (each check synchronises with the device)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpochStats:
    """One epoch of :func:`train`."""

    epoch: int  # 1-based
    loss: float  # mean training loss over the epoch's steps
    steps: int  # batches (micro-batches, with gradient accumulation)
    samples: int
    seconds: float  # wall clock, synchronised with the device, data loading included
    data_wait: float  # seconds spent waiting for the DataLoader
    lr: float  # learning rate after the epoch's last step

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["samples_per_second"] = self.samples_per_second
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainReport:
    """What :func:`train` did: the trained model, per-epoch loss and speed, the final metric."""

    model: nn.Module = dataclasses.field(repr=False)
    config: TrainingConfig
    epochs: tuple[EpochStats, ...]
    val_metric: float | None  # None when no validation set was given
    metric_name: str
    seconds: float

    @property
    def losses(self) -> list[float]:
        """Mean training loss of each epoch."""
        return [e.loss for e in self.epochs]

    @property
    def samples_per_second(self) -> float:
        """Training samples per second over the whole run, one-time costs included."""
        samples = sum(e.samples for e in self.epochs)
        seconds = sum(e.seconds for e in self.epochs)
        return samples / seconds if seconds > 0 else math.inf

    @property
    def steady_samples_per_second(self) -> float:
        """Median of the epochs after the first (whose compile / warm-up is a one-time cost);
        the first epoch's figure when there is only one."""
        later = self.epochs[1:] or self.epochs
        return statistics.median(e.samples_per_second for e in later)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "epochs": [e.to_dict() for e in self.epochs],
            "val_metric": self.val_metric,
            "metric_name": self.metric_name,
            "seconds": self.seconds,
            "samples_per_second": self.samples_per_second,
            "steady_samples_per_second": self.steady_samples_per_second,
        }

    def summary(self) -> str:
        lines = [f"trained {len(self.epochs)} epoch(s) with {self.config.describe()}"]
        for e in self.epochs:
            lines.append(
                f"  epoch {e.epoch}: loss {e.loss:.4f}, {e.samples_per_second:,.0f} samples/s, "
                f"data wait {e.data_wait / e.seconds if e.seconds else 0:.0%}, lr {e.lr:.3g}"
            )
        metric = "n/a (no val_dataset)" if self.val_metric is None else f"{self.val_metric:.4f}"
        lines.append(
            f"  val {self.metric_name}: {metric}; {self.samples_per_second:,.0f} samples/s "
            f"overall in {self.seconds:.1f} s"
        )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _as_config(config: TrainingConfig | str | os.PathLike[str]) -> TrainingConfig:
    if isinstance(config, TrainingConfig):
        return config
    if isinstance(config, str | os.PathLike):
        return load_config(config)
    raise TypeError(
        "`config` must be a TrainingConfig or the path of a result / config JSON file, but got "
        f"{type(config).__name__}. Use autotune.load_config('best.json') or result.config."
    )


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def train(
    model: nn.Module,
    dataset: Dataset[Any] | DataModuleLike,
    config: TrainingConfig | str | os.PathLike[str],
    *,
    epochs: int = 1,
    val_dataset: Dataset[Any] | None = None,
    task: Task | None = None,
    metric: str | MetricFn | None = None,
    drop_last: bool | None = None,
    seed: int | None = 0,
    progress: bool | Callable[[str], None] = False,
) -> TrainReport:
    """Train ``model`` on ``dataset`` for ``epochs`` epochs with every knob of ``config``
    applied: DataLoader batch size / workers / pinning / prefetch, device, channels_last,
    checkpointing, ``torch.compile``, precision (autocast, and a GradScaler for fp16), cuDNN
    benchmark / TF32 / CPU threads (restored afterwards), gradient accumulation (one optimizer
    step every ``gradient_accumulation_steps`` batches, and at the end of each epoch), the
    optimizer implementation (``foreach``/``fused``, passed to ``optimizer``), and the LR
    schedule over all epochs' optimizer steps.

    ``model`` is not modified: a copy is trained and returned as ``report.model`` (the eager
    module, on the config's device; its weights are the trained ones whether or not it was
    compiled). ``config`` is a :class:`TrainingConfig` or the path of ``best.json``.
    ``task`` and ``metric`` mean what they mean for :func:`autotune.find_best` (``"auto"``
    chooses the metric from a batch as it does), and ``dataset`` may be a
    ``LightningDataModule`` there too. With ``val_dataset`` the final model's metric is
    reported (in batches of the config's batch size; builtin metrics do not depend on it).
    ``seed`` fixes the data order (and dropout); the caller's RNG states are restored
    afterwards. ``None`` leaves the global RNGs as they are. ``drop_last``
    (default: as the search measured, True for a compiled config with static shapes, whose last
    partial batch would otherwise be compiled again, False otherwise) drops each epoch's last
    partial batch.

    Raises ``RuntimeError`` ("diverged: ...") when the loss becomes NaN/inf.
    """
    check_model(model)
    task = as_task(task, metric)
    cfg = _as_config(config)
    check_int("epochs", epochs, rule=">= 1", ok=lambda v: v >= 1)
    check_int("seed", seed, rule="an int or None", ok=lambda v: True, optional=True)
    cfg = cfg.replace(device=resolve_device(cfg.device))
    data = unpack_data(dataset, val_dataset, task.collate_fn)
    train_set: Dataset[Any] = data.train
    val_set: Dataset[Any] | None = data.val
    if is_stream(train_set) and stream_length(train_set) is None:
        raise ArgumentError(
            f"`dataset` is a stream ({type(train_set).__name__}) with no length: train() counts "
            "its epochs' steps, so give it one (WebDataset's .with_length(n), __len__), or "
            "train it in your own loop with cfg.dataloader(stream)."
        )
    resolved = set_up_task(model, train_set, val_set, task.replace(collate_fn=data.collate_fn))
    workload = Workload(
        model=model,
        train=train_set,
        val=val_set if val_set is not None else train_set,
        task=resolved.resolved,
        optimizer=task.optimizer or default_optimizer,
        eval_batch_size=cfg.batch_size,
    )
    report = reporter(progress)
    if drop_last is None:
        drop_last = cfg.compile_mode is not CompileMode.NONE and not cfg.compile_dynamic
    rng = seeded(seed, cfg.device) if seed is not None else contextlib.nullcontext()
    start = time.perf_counter()
    with apply.current_device(cfg.device), cfg.backends(), rng:
        loader = cfg.dataloader(
            train_set,
            shuffle=True,
            drop_last=drop_last,
            collate_fn=workload.task.collate_fn,
            generator=torch.Generator().manual_seed(seed) if seed is not None else None,
        )
        steps_per_epoch = len(loader)
        if steps_per_epoch == 0:
            raise ArgumentError(
                f"The DataLoader has no batches: {len(loader.dataset)} samples with "  # type: ignore[arg-type]
                f"batch_size {cfg.batch_size} and drop_last=True. Use drop_last=False or a "
                "smaller batch size."
            )
        # Each epoch ends with an optimizer step, even on an incomplete window of micro-batches.
        k = cfg.gradient_accumulation_steps
        trainer = Trainer(cfg, workload, epochs * cfg.optimizer_steps(steps_per_epoch) * k)
        stats: list[EpochStats] = []
        for epoch in range(1, epochs + 1):
            apply.set_epoch(loader, epoch)  # under torchrun: each epoch shuffled anew
            stats.append(_run_epoch(trainer, iter(loader), epoch, cfg))
            report(
                f"epoch {epoch}/{epochs}: loss {stats[-1].loss:.4f}, "
                f"{stats[-1].samples_per_second:,.0f} samples/s"
            )
        del loader
        metric_value = evaluate(trainer.model, cfg, workload) if val_set is not None else None
    trained = apply.unwrap_compiled(trainer.model)
    return TrainReport(
        model=trained,
        config=cfg,
        epochs=tuple(stats),
        val_metric=metric_value,
        metric_name=workload.task.metric_name,
        seconds=time.perf_counter() - start,
    )


def _run_epoch(
    trainer: Trainer, batches: Iterator[Any], epoch: int, cfg: TrainingConfig
) -> EpochStats:
    losses: list[torch.Tensor] = []
    pending: list[torch.Tensor] = []
    samples = 0
    data_wait = 0.0
    _synchronize(cfg.device)
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            break
        data_wait += time.perf_counter() - t
        samples += _batch_size(batch)
        loss = trainer.step(batch)
        losses.append(loss)
        pending.append(loss)
        if len(pending) == _CHECK_EVERY:
            trainer.check(pending)
            pending = []
    trainer.optimizer_step()  # the epoch's last, incomplete window of micro-batches
    trainer.check(pending)
    _synchronize(cfg.device)
    seconds = time.perf_counter() - start
    mean_loss = float(torch.stack([x.float() for x in losses]).mean()) if losses else math.nan
    return EpochStats(
        epoch=epoch,
        loss=mean_loss,
        steps=len(losses),
        samples=samples,
        seconds=seconds,
        data_wait=data_wait,
        lr=float(trainer.optimizer.param_groups[0]["lr"]),
    )


def _batch_size(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, dict):
        values = list(batch.values())
    elif isinstance(batch, list | tuple):
        values = list(batch)
    else:
        return 0
    for value in values:
        n = _batch_size(value)
        if n:
            return n
    return 0

"""What ``autotune.tune`` reads from a Lightning ``Trainer``, ``LightningModule`` and their data,
and the checks it makes before any trial: the baseline is the user's own settings, the metric
is one their ``validation_step`` logs, and one training step and one validation batch run
through their code on the CPU, so a broken hook is an error naming it, not a failed search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, RandomSampler

from autotune._choices import CompileMode, LRSchedule, Precision, ScheduleKind
from autotune._errors import ArgumentError, DataError, ModelError
from autotune._knobs.config import TrainingConfig
from autotune._options import PLANNED_EPOCHS
from autotune._stream import is_stream
from autotune._task import TaskRefs
from autotune._trial.bounded import RUN_HINT, step
from autotune._trial.direction import Said, choose_direction, direction_in_name
from autotune._trial.fingerprint import fit_data_fingerprint
from autotune._trial.lightning_loop import LEFT_OUT_CALLBACKS, LightningLoop, Loaders
from autotune._trial.metrics import MetricChoice
from autotune._trial.streaming import stream_length
from autotune._trial.task import cpu_copy, logged_task
from autotune._trial.workload import (
    Prepared,
    SearchStart,
    Workload,
    check_workload,
    longest_items,
    trainer_data,
)

__all__ = ["prepare_lightning"]

PRECISIONS = {
    "32-true": Precision.FP32,
    "32": Precision.FP32,
    "bf16-mixed": Precision.BF16,
    "16-mixed": Precision.FP16,
}
LIGHTNING_DEFAULT_EPOCHS = 1000  # what Lightning sets when neither max_epochs nor max_steps is


def prepare_lightning(
    trainer: Any,
    module: Any,
    *,
    datamodule: Any = None,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    metric: str | None = None,
    higher_is_better: bool | None = None,
    seed: int = 0,
    planned_samples: int | None = None,
    passes: float | None = None,
) -> SearchStart:
    """Read and check everything a Lightning search needs, before any trial runs.
    ``planned_samples``, or ``passes`` over it: a training stream's run (else the Trainer's
    ``max_steps``, else its ``max_epochs`` passes, else one)."""
    if not isinstance(module, pl.LightningModule):
        raise TypeError(
            f"`model` must be the LightningModule that `trainer.fit` trains, but got "
            f"{type(module).__name__}."
        )
    compiled = isinstance(module, torch._dynamo.eval_frame.OptimizedModule)
    module = module._orig_mod if compiled else module
    train, val, notes = _loaders(module, datamodule, train_dataloaders, val_dataloaders)
    loaders = Loaders(
        shuffle=isinstance(train.sampler, RandomSampler),
        drop_last=train.drop_last,
        collate_fn=train.collate_fn,
        worker_init_fn=train.worker_init_fn,
        val_batch_size=int(val.batch_size or 1),
        val_collate_fn=val.collate_fn,
    )
    monitor, said = _monitor(trainer.callbacks)
    name = metric or monitor
    callbacks = tuple(c for c in trainer.callbacks if not _left_out(c))
    left = sorted({type(c).__name__ for c in trainer.callbacks if _left_out(c)})
    if left:
        notes.append(
            f"callbacks: {', '.join(left)} are left out of trials (they write files, show "
            "progress or stop training on their own); the others run"
        )
    device = str(trainer.strategy.root_device)
    if trainer.num_devices > 1:
        notes.append(
            f"devices: your Trainer uses {trainer.num_devices} devices; trials train on one "
            f"({device}): the answer is per device"
        )
    loop = LightningLoop(
        trainer_kwargs=_kept_settings(trainer),
        callbacks=callbacks,
        datamodule=datamodule,
        loaders=loaders,
        metric=name or "val_loss",
        device=device if device != "cuda" else "cuda:0",
        peak_lr=1.0,
    )
    checked = _check(loop, module, train.dataset, val.dataset, given=name)
    loop = dataclasses.replace(loop, metric=checked.metric, peak_lr=checked.lr)
    # A callback's mode speaks for the metric it watches, whether or not metric= names it too;
    # but "min" is also what both callbacks take when no mode is given, so where the name says
    # higher is better, the name is read and the callback named.
    said = said if checked.metric == monitor else None
    if said is not None and not said.higher_is_better and direction_in_name(checked.metric):
        notes.append(
            f"metric: {said.where} minimises {checked.metric}, whose name says higher is "
            "better (min is the callbacks' default mode): guarded as higher is better; pass "
            "higher_is_better=False if it is not"
        )
        said = None
    choice = choose_direction(checked.metric, higher_is_better, said=said)
    samples, passes = _stream_run(trainer, train, planned_samples, passes)
    train_set, val_set, data_notes = trainer_data(
        train.dataset,
        val.dataset,
        planned_samples=samples,
        passes=passes,
        seed=seed,
        names=("train_dataloaders", "val_dataloaders"),
    )
    notes += data_notes
    task = logged_task(choice.metric, choice.higher_is_better, loaders.collate_fn)
    workload = Workload(
        model=cpu_copy(module),
        train=train_set,
        val=val_set,
        task=task,
        longest=longest_items(train_set, seed=seed),
        eval_batch_size=loaders.val_batch_size,
        loop=loop,
    )
    refs = TaskRefs.from_dict(
        {"metric": choice.metric, "higher_is_better": choice.higher_is_better}
    )
    baseline = _baseline(trainer, train, loop, compiled=compiled, lr=checked.lr)
    prepared = Prepared(
        workload=workload, stratified=False, refs=refs, metric=choice,
        note="; ".join(notes) or None,
        data_fingerprint=fit_data_fingerprint(datamodule, train, val),
    )  # fmt: skip
    # A stream's run is its planned samples, its passes counted from them (see make_stream).
    epochs = None if is_stream(train.dataset) else _planned_epochs(trainer, train)
    return SearchStart(prepared, baseline, epochs)


# -- The data ------------------------------------------------------------------------------


def _loaders(
    module: Any, datamodule: Any, train: Any, val: Any
) -> tuple[DataLoader[Any], DataLoader[Any], list[str]]:
    """The user's training and validation loaders, as ``trainer.fit`` would get them."""
    notes: list[str] = []
    if datamodule is not None and train is not None:
        raise ArgumentError(
            "Pass the data once: `datamodule=` or `train_dataloaders=` (as Trainer.fit takes it)."
        )
    if datamodule is not None:
        if not isinstance(datamodule, pl.LightningDataModule):
            raise TypeError(
                f"`datamodule` must be a LightningDataModule, but got {type(datamodule).__name__}."
            )
        name = type(datamodule).__name__
        try:
            step(
                f"your {name}'s prepare_data(), setup('fit') and dataloaders",
                "Call them alone to see them return (a download, a lock or a network read "
                "can wait for ever).",
            )
            datamodule.prepare_data()
            datamodule.setup("fit")
            train = datamodule.train_dataloader()
            val = datamodule.val_dataloader() if val is None else val
        except Exception as exc:
            raise DataError(
                f"`datamodule` ({type(datamodule).__name__}) could not give its loaders after "
                f"setup('fit'): {type(exc).__name__}: {exc}"
            ) from exc
    if train is None:
        raise ArgumentError(
            "tune needs the data trainer.fit trains on: `datamodule=` or `train_dataloaders=` "
            "(and `val_dataloaders=`)."
        )
    train = _one(train, "train_dataloaders")
    if val is None:
        raise DataError(
            "tune guards the metric your validation_step logs, so it needs validation data: "
            "pass `val_dataloaders=`, or a datamodule with val_dataloader()."
        )
    val = _one(val, "val_dataloaders")
    for name, loader in (("train_dataloaders", train), ("val_dataloaders", val)):
        dataset = loader.dataset
        if not (
            is_stream(dataset) or (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"))
        ):
            raise DataError(
                f"`{name}` loads a {type(dataset).__name__}, neither a map-style dataset (with "
                "__len__ and __getitem__) nor a stream (a torch IterableDataset)."
            )
    if train.batch_size is None:
        raise DataError(
            "`train_dataloaders` batches through a batch_sampler: autotune tunes the batch size "
            "of a DataLoader(dataset, batch_size=...)."
        )
    return train, val, notes


def _one(loaders: Any, name: str) -> DataLoader[Any]:
    if isinstance(loaders, DataLoader):
        return loaders
    if isinstance(loaders, Sequence) and len(loaders) == 1 and isinstance(loaders[0], DataLoader):
        return loaders[0]
    raise DataError(
        f"`{name}` must be one torch DataLoader, but got {type(loaders).__name__}: autotune "
        "tunes one training loader against one validation set."
    )


# -- The user's settings ------------------------------------------------------------------


def _left_out(callback: Any) -> bool:
    return any(part in type(callback).__name__ for part in LEFT_OUT_CALLBACKS)


def _monitor(callbacks: Sequence[Any]) -> tuple[str | None, Said | None]:
    """The metric a checkpoint or early-stopping callback watches, and the direction its
    mode says."""
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and monitor:
            mode = getattr(callback, "mode", None)
            if mode not in ("min", "max"):
                return monitor, None
            where = f"your {type(callback).__name__}(monitor={monitor!r}, mode={mode!r})"
            return monitor, Said(higher_is_better=mode == "max", where=where)
    return None, None


def _kept_settings(trainer: Any) -> dict[str, Any]:
    """The user's Trainer settings that change what a step computes or costs, kept in trials."""
    return {
        "gradient_clip_val": trainer.gradient_clip_val,
        "gradient_clip_algorithm": trainer.gradient_clip_algorithm,
        "detect_anomaly": bool(getattr(trainer, "_detect_anomaly", False)),
        "log_every_n_steps": trainer.log_every_n_steps,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "inference_mode": bool(trainer.validate_loop.inference_mode),
    }


def _baseline(
    trainer: Any, train: DataLoader[Any], loop: LightningLoop, *, compiled: bool, lr: float
) -> TrainingConfig:
    precision = PRECISIONS.get(str(trainer.precision))
    if precision is None:
        raise ArgumentError(
            f"Your Trainer's precision is {trainer.precision!r}: autotune tunes the precision "
            f"among {', '.join(sorted(PRECISIONS))}. Build the Trainer with one of them."
        )
    workers = int(train.num_workers)
    prefetch = train.prefetch_factor if workers > 0 and train.prefetch_factor != 2 else None
    return TrainingConfig(
        device=loop.device,
        batch_size=int(train.batch_size),  # type: ignore[arg-type]
        gradient_accumulation_steps=int(trainer.accumulate_grad_batches),
        num_workers=workers,
        persistent_workers=bool(train.persistent_workers) and workers > 0,
        prefetch_factor=prefetch,
        pin_memory=bool(train.pin_memory) and not loop.device.startswith("cpu"),
        precision=precision,
        compile_mode=CompileMode.DEFAULT if compiled else CompileMode.NONE,
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        lr_schedule=LRSchedule(kind=ScheduleKind.TRAINER, peak_lr=lr),
    )


def _planned_epochs(trainer: Any, train: DataLoader[Any]) -> float:
    """The user's run: ``max_steps`` (in epochs of the loader) or ``max_epochs``."""
    if trainer.max_steps and trainer.max_steps > 0:
        batches = max(1, len(train)) / max(1, int(trainer.accumulate_grad_batches))
        return float(trainer.max_steps) / float(batches)
    epochs = trainer.max_epochs
    if epochs and epochs > 0 and epochs != LIGHTNING_DEFAULT_EPOCHS:
        return float(epochs)
    return PLANNED_EPOCHS


def _stream_run(
    trainer: Any, train: DataLoader[Any], given: int | None, passes: float | None
) -> tuple[int | None, float | None]:
    """(the samples a run over a training stream reads, or its passes over it): ``given`` or
    ``passes`` (the options'), else the Trainer's ``max_steps`` optimizer steps of the loader's
    batch x accumulation, else one epoch of its ``limit_train_batches`` batches (a whole
    number) per epoch, else its ``max_epochs`` passes (each epoch reads the stream again from
    its start; one where it sets none). A stream with no length and nothing that says its run
    is refused. (None, None) for a map-style set."""
    stream = train.dataset
    if not is_stream(stream):
        return None, None
    if given is not None or passes is not None:
        return given, passes
    per_step = int(train.batch_size or 1) * int(trainer.accumulate_grad_batches)
    if trainer.max_steps and trainer.max_steps > 0:
        return int(trainer.max_steps) * per_step, None
    epochs = trainer.max_epochs
    said = epochs is not None and epochs > 0 and epochs != LIGHTNING_DEFAULT_EPOCHS
    limit = trainer.limit_train_batches
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit * int(train.batch_size or 1) * (int(epochs) if said else 1), None
    if said:
        return None, float(epochs)
    if stream_length(stream) is None:
        raise DataError(
            f"`train_dataloaders` loads a stream ({type(stream).__name__}) with no length, and "
            "your Trainer sets neither max_steps nor max_epochs: set one (Trainer(max_steps=N), "
            "the optimizer steps of your run, or max_epochs=N, its passes over the stream), or "
            "pass SearchOptions(planned_samples=N)."
        )
    return None, None


# -- The check before any trial ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Checked:
    metric: str
    lr: float


class _ReadLR(pl.Callback):
    """The learning rate the user's configure_optimizers gave its first parameter group."""

    def __init__(self) -> None:
        self.lr: float | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.optimizers:
            group = trainer.optimizers[0].param_groups[0]
            self.lr = float(group.get("initial_lr", group["lr"]))


def _check(
    loop: LightningLoop, module: Any, train: Any, val: Any, *, given: str | None
) -> _Checked:
    """One training step and one validation batch of 2 items through the user's code, on a
    CPU copy: the learning rate their optimizer starts at, and the metric they log."""
    cfg = TrainingConfig(
        device="cpu", batch_size=2, lr_schedule=LRSchedule(kind=ScheduleKind.TRAINER, peak_lr=1.0)
    )
    check = dataclasses.replace(loop, device="cpu", peak_lr=1.0)
    work = check_workload(cpu_copy(module), train, val, check)
    read = _ReadLR()
    loader = check.train_loader(cfg, work.train, shuffle=False, seed=0)
    module_name = type(module).__name__
    try:
        step(
            f"one training step of your {module_name} (trainer.fit on its first batch: 2 "
            "training items, on the CPU)",
            RUN_HINT,
        )
        trainer, fitted = check.fit(cfg, work, loader, read, 1)
    except Exception as exc:
        raise ModelError(
            f"Your LightningModule's training step failed on a batch of 2 training items: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if read.lr is None:
        raise ModelError("Your LightningModule's configure_optimizers returned no optimizer.")
    trainer.limit_val_batches = 1.0
    try:
        step(
            f"your {module_name}'s validation (trainer.validate on its first batch: 2 "
            "validation items, on the CPU)",
            RUN_HINT,
        )
        with check._data(val=check.val_loader(work.val)) as data:
            logged = trainer.validate(fitted, verbose=False, **data)
    except Exception as exc:
        raise ModelError(
            f"Your LightningModule's validation failed on a batch of 2 validation items: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    values = logged[0] if logged else {}
    metric = given or _default_metric(values)
    if metric not in values:
        keys = ", ".join(sorted(values)) or "nothing"
        raise DataError(
            f"Your validation_step logged no {metric!r} (it logged {keys}): pass metric= one of "
            f"those, or log it with self.log({metric!r}, value)."
        )
    return _Checked(metric=metric, lr=read.lr)


def _default_metric(logged: dict[str, Any]) -> str:
    if "val_loss" in logged or len(logged) != 1:
        return "val_loss"
    return next(iter(logged))


def describe(choice: MetricChoice) -> str:
    return f"{choice.metric} ({'higher' if choice.higher_is_better else 'lower'} is better)"

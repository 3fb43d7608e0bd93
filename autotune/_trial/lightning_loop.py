"""The user's Lightning ``Trainer`` as the loop of every trial (``autotune.tune``).

Each trial is a short ``trainer.fit`` of a fresh copy of the user's ``LightningModule``: their
``training_step`` and ``configure_optimizers`` run, their callbacks too. The candidate's
settings are applied the way ``cfg.to_lightning()`` tells a user to apply them: the ``Trainer``
arguments it gives (precision, ``accumulate_grad_batches``, cuDNN ``benchmark``) over the
user's own, the ``DataLoader`` arguments on the user's datasets and collate function, the model
knobs through ``cfg.prepare(module)`` (compile, channels_last, checkpointing), TF32 and threads
through ``cfg.backends()`` (the trial runner's), and the learning rate by scaling every
parameter group of the user's optimizers (and their schedulers' base rates) by one factor.

A throughput trial is timed by a callback (:class:`~autotune._trial.step_clock.StepClock`); an
accuracy run fits for the guard's samples and then scores the user's validation set with
``trainer.validate``: the guarded metric is what their ``validation_step`` logs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from autotune._errors import DataError
from autotune._knobs import apply, registry
from autotune._knobs.config import TrainingConfig
from autotune._knobs.registry import Where
from autotune._space import SearchSpace
from autotune._stream import is_stream, source_of
from autotune._trial.measure import Measurement, MemoryTracker
from autotune._trial.outcome import AccuracyRun, Budget
from autotune._trial.passes import pass_steps, pays_restarts
from autotune._trial.runner import accuracy_data, measured_data, restart_seconds, seeded
from autotune._trial.step_clock import LossCheck, StepClock, loss_of
from autotune._trial.workload import Workload

__all__ = ["LEFT_OUT_CALLBACKS", "LightningLoop", "Loaders", "validated"]

# Callbacks a trial leaves out: they write files, need a logger, show progress or stop training
# on their own (a trial stops when its measurement is done).
LEFT_OUT_CALLBACKS = (
    "Checkpoint",
    "ProgressBar",
    "ModelSummary",
    "EarlyStopping",
    "LearningRateMonitor",
    "DeviceStatsMonitor",
    "Timer",
)
# Knobs a Lightning trial cannot apply as the export would: the optimizer and its schedule
# are the user's configure_optimizers' (only their learning rate is scaled).
_KEPT = {
    Where.OPTIMIZER: "your configure_optimizers builds the optimizer",
    Where.LR_SHAPE: "your configure_optimizers' schedule is kept (its learning rate is scaled)",
}
_NOT_APPLIED = {k.name: _KEPT[k.where] for k in registry.knobs_where(*_KEPT)}
_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Loaders:
    """How the user's loaders are built, but for what autotune tunes (batch size, workers,
    pinning, prefetch): their shuffling, last partial batch, collate and worker functions."""

    shuffle: bool = True
    drop_last: bool = False
    collate_fn: Any = None
    worker_init_fn: Any = None
    val_batch_size: int = 32
    val_collate_fn: Any = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LightningLoop:
    """What a trial needs of the user's ``Trainer`` and data, picklable for trial workers."""

    kind: str = "lightning"
    trainer_kwargs: Mapping[str, Any]  # the user's Trainer settings that every trial keeps
    callbacks: tuple[Any, ...] = ()  # the user's callbacks (a fresh copy per trial)
    datamodule: Any = None  # the user's LightningDataModule, its loaders replaced per trial
    loaders: Loaders = dataclasses.field(default_factory=Loaders)
    metric: str  # the key the user's validation_step logs
    device: str  # where the user's Trainer trains (one device)
    peak_lr: float  # the baseline's: the user's first parameter group's learning rate

    def restrict(self, space: SearchSpace) -> SearchSpace:
        return space.not_searching(_NOT_APPLIED)

    # -- A trial ----------------------------------------------------------------------------

    def measure(self, cfg: TrainingConfig, workload: Workload, budget: Budget) -> Measurement:
        with MemoryTracker(cfg.device) as memory:
            clock = StepClock(cfg, budget, memory)
            data, shuffle = measured_data(cfg, workload, budget, clock.most_steps)
            clock.fit_to_pass(pass_steps(cfg, data))
            loader = self.train_loader(cfg, data, shuffle=shuffle, seed=0)
            trainer, module = self.fit(cfg, workload, loader, _Timed(clock), clock.most_steps)
            if budget.eval_peak:
                # A validation batch after training, the model and optimizer still held: its
                # peak counts too (a batch that trains but does not validate does not fit).
                self.validate(trainer, module, self.val_loader(first_batch(workload, self)))
                memory.sample()
        return clock.measurement(
            lambda wait: restart_seconds(loader, wait), restarts=pays_restarts(cfg, workload.train)
        )

    def initial_metric(self, cfg: TrainingConfig, workload: Workload) -> float:
        trainer = self.trainer(cfg, max_steps=0, callbacks=[])
        module = apply.prepare_model(cfg, workload.model)
        return self.validate(trainer, module, self.val_loader(workload.val))

    def accuracy_run(
        self, cfg: TrainingConfig, workload: Workload, samples: int, seed: int
    ) -> AccuracyRun:
        """Fit from the initial weights for ``samples`` samples (whole optimizer steps) in
        data order ``seed``, then validate."""
        steps = max(1, math.ceil(samples / cfg.global_batch_size))
        start = time.perf_counter()
        with seeded(seed, cfg.device):
            losses = LossCheck(cfg)
            # A stream's items in the seed's order, loaded by the config's workers.
            data, loading = accuracy_data(
                cfg,
                workload,
                seed,
                steps * cfg.global_batch_size,
                worker_init_fn=self.loaders.worker_init_fn,
            )
            loader = self.train_loader(loading, data, shuffle=True, seed=seed)
            micro = steps * cfg.gradient_accumulation_steps
            trainer, module = self.fit(cfg, workload, loader, _Losses(losses), micro)
            losses.flush()
            metric = self.validate(trainer, module, self.val_loader(workload.val))
        return AccuracyRun(
            seed=seed,
            metric=metric,
            final_loss=math.nan if losses.last is None else losses.last,
            samples=losses.steps * cfg.batch_size,
            seconds=time.perf_counter() - start,
        )

    # -- Pieces, each as the export tells a user --------------------------------------------

    def train_loader(
        self, cfg: TrainingConfig, data: Dataset[Any], *, shuffle: bool, seed: int
    ) -> DataLoader[Any]:
        """``DataLoader(train_set, shuffle=..., **cfg.to_lightning().dataloader)``, with the
        user's own collate function, worker function and last-batch rule; a stream as the user
        gave it, which orders itself (no shuffle=)."""
        source = source_of(data)
        order: dict[str, Any] = (
            {} if is_stream(source) else {"shuffle": shuffle and self.loaders.shuffle}
        )
        return DataLoader(
            source,
            **order,
            drop_last=self.loaders.drop_last,
            collate_fn=self.loaders.collate_fn,
            worker_init_fn=self.loaders.worker_init_fn,
            generator=torch.Generator().manual_seed(seed),
            **cfg.to_lightning().dataloader,
        )

    def val_loader(self, data: Dataset[Any]) -> DataLoader[Any]:
        """The validation set in order, in the user's validation batches (every config alike)."""
        return DataLoader(
            data,
            batch_size=self.loaders.val_batch_size,
            shuffle=False,
            collate_fn=self.loaders.val_collate_fn,
        )

    def trainer(self, cfg: TrainingConfig, *, max_steps: int, callbacks: list[Any]) -> Any:
        """A fresh ``Trainer``: the user's settings, the candidate's ``cfg.to_lightning()``
        arguments over them, no logger, checkpoints or progress bar, no validation in fit."""
        own = [copy.deepcopy(c) for c in self.callbacks]
        factor = cfg.lr_schedule.peak_lr / self.peak_lr
        with _quiet():
            return pl.Trainer(
                **{
                    **self.trainer_kwargs,
                    **cfg.to_lightning().trainer,
                    "max_steps": max_steps,
                    "max_epochs": -1,
                    "logger": False,
                    "enable_checkpointing": False,
                    "enable_progress_bar": False,
                    "enable_model_summary": False,
                    "num_sanity_val_steps": 0,
                    "limit_val_batches": 0,
                    "default_root_dir": tempfile.gettempdir(),
                    "callbacks": [*own, _ScaleLR(factor), *callbacks],
                }
            )

    def fit(
        self,
        cfg: TrainingConfig,
        workload: Workload,
        loader: DataLoader[Any],
        callback: Any,
        micro_batches: int,
    ) -> tuple[Any, Any]:
        """``trainer.fit`` of a prepared copy of the module on ``loader`` for at most
        ``micro_batches`` micro-batches (``callback`` may stop it sooner)."""
        steps = math.ceil(micro_batches / cfg.gradient_accumulation_steps)
        trainer = self.trainer(cfg, max_steps=steps, callbacks=[callback])
        module = apply.prepare_model(cfg, workload.model)
        with _quiet(), _interrupts_kept(), self._data(train=loader) as data:
            trainer.fit(module, **data)
        return trainer, module

    def validate(self, trainer: Any, module: Any, loader: DataLoader[Any]) -> float:
        """The user's ``validation_step`` over ``loader``: the metric it logs."""
        trainer.limit_val_batches = 1.0
        with _quiet(), _interrupts_kept(), self._data(val=loader) as data:
            logged = trainer.validate(module, verbose=False, **data)
        return validated(logged[0] if logged else {}, self.metric)

    @contextlib.contextmanager
    def _data(
        self, *, train: DataLoader[Any] | None = None, val: DataLoader[Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The loaders as ``fit``/``validate`` take them: through the user's data module where
        there is one (its batch-transfer hooks then run, as in their own run)."""
        dm = self.datamodule
        if dm is None:
            yield {"train_dataloaders": train} if train is not None else {"dataloaders": val}
            return
        given = {"train_dataloader": train, "val_dataloader": val}
        for name, loader in given.items():
            if loader is not None:
                setattr(dm, name, lambda loader=loader: loader)
        try:
            yield {"datamodule": dm}
        finally:
            for name, loader in given.items():
                if loader is not None:
                    with contextlib.suppress(AttributeError):
                        delattr(dm, name)


def first_batch(workload: Workload, loop: LightningLoop) -> Dataset[Any]:
    """The validation set's first batch of items."""
    n = min(len(workload.val), loop.loaders.val_batch_size)  # type: ignore[arg-type]
    return Subset(workload.val, range(n))


def validated(logged: Mapping[str, Any], metric: str) -> float:
    """The metric ``metric`` among what a validation logged, as a float."""
    if metric not in logged:
        keys = ", ".join(sorted(logged)) or "nothing"
        raise DataError(
            f"The validation logged no {metric!r} (it logged {keys}): log it in "
            f"validation_step (self.log({metric!r}, value)), or pass metric= one of those."
        )
    value = logged[metric]
    return float(value.item() if isinstance(value, torch.Tensor) else value)


# -- Callbacks ----------------------------------------------------------------------------


class _ScaleLR(pl.Callback):
    """Scale every parameter group of the user's optimizers (and their schedulers' base rates)
    by one factor, once they are built: the learning rate of a batch change, through the
    user's own optimizer and schedule."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.factor == 1.0:
            return
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                for key in _LR_KEYS:
                    if isinstance(group.get(key), int | float):
                        group[key] *= self.factor
        for config in trainer.lr_scheduler_configs:
            for attr in ("base_lrs", "_last_lr"):
                rates = getattr(config.scheduler, attr, None)
                if isinstance(rates, list):
                    setattr(config.scheduler, attr, [r * self.factor for r in rates])


class _Timed(pl.Callback):
    """Tell a :class:`StepClock` how the fit advances; stop the fit once it has measured."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.clock.started()

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.clock.batch_started()

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, *a: Any) -> None:
        if self.clock.batch_ended(loss_of(outputs)):
            trainer.should_stop = True


class _Losses(pl.Callback):
    """Keep an accuracy run's losses, checked for NaN/inf as it goes."""

    def __init__(self, losses: LossCheck) -> None:
        self.losses = losses

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, *a: Any) -> None:
        self.losses.add(loss_of(outputs))


# -- Keeping Lightning's habits out of the search ------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No "GPU available" lines or loader advice for every trial: the search reports."""
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"lightning\..*")
            warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def _interrupts_kept() -> Iterator[None]:
    """Lightning turns Ctrl-C inside ``fit`` into ``sys.exit(1)`` and ignores SIGINT from then
    on: a search must see the KeyboardInterrupt (it ends with the best answer so far)."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    try:
        yield
    except SystemExit as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise
    finally:
        if main and handler is not None:
            signal.signal(signal.SIGINT, handler)

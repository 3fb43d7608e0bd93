"""The trial runner: short, honest runs of the user's own model under one config.

A trial has up to two parts:

1. **Throughput**: warm-up steps (compilation, cuDNN autotuning, worker start-up) timed apart as a
   one-time cost, then several synchronised chunks of steady-state steps, data loading included.
2. **Accuracy** (only for configs that change the numerics): training from the same initial
   weights on the same sample budget as the baseline, the config's LR schedule annealed over that
   budget, then the validation metric.

Every part trains through :mod:`autotune._knobs.apply`, the same code a user's loop applies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch._dynamo.utils import counters as dynamo_counters
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate

from autotune._choices import CompileMode, ScheduleKind
from autotune._device import is_accelerator
from autotune._errors import DataError
from autotune._knobs import apply
from autotune._knobs.config import TrainingConfig
from autotune._stream import Stream, StreamEnded, epoch_of
from autotune._trial.failures import (
    Diverged,
    FailureReason,
    classify,
    free_memory,
    poisons_process,
)
from autotune._trial.measure import Measurement, MemoryTracker, UtilizationSampler
from autotune._trial.outcome import AccuracyCheck, AccuracyRun, Budget, TrialOutcome
from autotune._trial.passes import Passes, pass_steps, pays_restarts, queue_batches
from autotune._trial.workload import Workload

__all__ = [
    "InOrder",
    "StepListener",
    "Trainer",
    "Workload",
    "accuracy_data",
    "cold_compile",
    "evaluate",
    "fitted_steps",
    "graphs_compiled",
    "halfway_is_a_shorter_run",
    "initial_metric",
    "measure_throughput",
    "measured_data",
    "reporting_steps",
    "restart_seconds",
    "run_samples",
    "run_trial",
    "seeded",
    "stream_items",
    "tell",
    "train_for_accuracy",
]

# Told (phase, steps done, steps in the phase) as a trial advances: a live display's progress.
StepListener = Callable[[str, int, int], None]
_listener: StepListener | None = None


@contextlib.contextmanager
def reporting_steps(listener: StepListener | None) -> Iterator[None]:
    """Tell ``listener`` how the trials run inside this block advance."""
    global _listener
    saved, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = saved


def tell(phase: str, done: int, total: int) -> None:
    if _listener is not None:
        _listener(phase, done, total)


@contextlib.contextmanager
def preserved_rng(device: str) -> Iterator[None]:
    """Restore the torch (CPU and the device's CUDA), numpy and random RNG states on exit: the
    caller's stay untouched. After a CUDA error that poisoned the process the CUDA state cannot
    be restored: the error already on its way out says why, so restoring it is skipped."""
    dev = torch.device(device)
    index = dev.index or 0
    py_state, np_state = random.getstate(), np.random.get_state()
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state(index) if dev.type == "cuda" else None
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            try:
                torch.cuda.set_rng_state(cuda_state, index)
            except RuntimeError as exc:
                if not (failed and poisons_process(exc)):
                    raise


@contextlib.contextmanager
def seeded(seed: int, device: str) -> Iterator[None]:
    """Seed torch, numpy and random for a trial; restore the caller's RNG states after."""
    with preserved_rng(device):
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        yield


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One model, optimizer, scaler and scheduler set up from a config; steps on demand.

    ``total_steps`` counts micro-batches (what :meth:`step` takes); the LR schedule counts the
    optimizer steps they make (one every ``gradient_accumulation_steps`` micro-batches)."""

    def __init__(self, cfg: TrainingConfig, workload: Workload, total_steps: int) -> None:
        self.cfg = cfg
        self.task = workload.task
        self.model = cfg.prepare(workload.model)
        self.model.train()
        self.optimizer = apply.make_optimizer(cfg, workload.optimizer, self.model.parameters())
        self.scheduler = cfg.lr_scheduler(self.optimizer, cfg.optimizer_steps(total_steps))
        self.scaler = cfg.grad_scaler()
        self.initial_scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        self.step_count = 0  # optimizer steps made
        self.pending = 0  # micro-batches whose gradients wait for the next optimizer step
        # CUDA graphs (reduce-overhead, max-autotune) replay into the same output memory: each
        # step is marked as a new iteration, and the loss kept past it is a copy.
        self.graphs = apply.uses_cuda_graphs(cfg)
        # Data-parallel accumulation without an all-reduce on the inner micro-batches.
        self.ddp = apply.ddp_module(self.model) if cfg.ddp_no_sync else None
        # What a plain loop would skip, skipped too (a small batch's step is a few hundred
        # microseconds, and a fixed cost per step would penalise it): moving a CPU batch to the
        # CPU, and stepping a schedule whose LR never changes (constant, no warm-up).
        self.moves = is_accelerator(cfg.device) or apply.changes_batches(cfg)
        schedule = cfg.lr_schedule
        self.schedules = not (
            schedule.kind is ScheduleKind.CONSTANT
            and round(schedule.warmup_fraction * total_steps) == 0
        )

    def step(self, batch: Any) -> torch.Tensor:
        """Forward and backward one micro-batch, its loss scaled by 1/k (so k micro-batches
        add up to the gradient of their global batch); the optimizer steps after every k-th."""
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        if self.moves:
            batch = self.cfg.to_device(batch)
        if self.pending == 0:
            self.optimizer.zero_grad(set_to_none=True)
        k = self.cfg.gradient_accumulation_steps
        inner = self.ddp is not None and self.pending + 1 < k
        with self.ddp.no_sync() if inner else contextlib.nullcontext():  # type: ignore[union-attr]
            with self.cfg.autocast():
                outputs, targets = self.task.forward(self.model, batch)
                loss = self.task.loss_fn(outputs, targets)
            self.scaler.scale(loss / k if k > 1 else loss).backward()
        self.pending += 1
        if self.pending == k:
            self.optimizer_step()
        return loss.detach().clone() if self.graphs else loss.detach()

    def optimizer_step(self) -> None:
        """Step the optimizer (and the LR schedule) on the gradients accumulated so far; also
        what ends an epoch whose last window of micro-batches is incomplete."""
        if self.pending == 0:
            return
        if self.ddp is not None and self.pending < self.cfg.gradient_accumulation_steps:
            # An incomplete window ran every micro-batch under no_sync: no all-reduce has
            # averaged these gradients, and stepping on them would let the replicas drift.
            apply.average_gradients(self.model)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.schedules and self.step_count < self.scheduler_total():
            self.scheduler.step()
        self.step_count += 1
        self.pending = 0

    def scheduler_total(self) -> int:
        total = getattr(self.scheduler, "total_steps", None)
        return int(total) - 1 if total is not None else 1 << 62

    def check(self, losses: list[torch.Tensor]) -> None:
        """Raise :class:`Diverged` on a NaN/inf loss or a collapsed GradScaler."""
        if not losses:
            return
        stacked = torch.stack([loss.float() for loss in losses])
        if not bool(torch.isfinite(stacked).all()):
            bad = stacked[~torch.isfinite(stacked)][0].item()
            raise Diverged(
                f"diverged: loss became {bad} by step {self.step_count} under "
                f"precision {self.cfg.precision.value}, lr {self.cfg.lr_schedule.peak_lr:.3g}"
            )
        if self.scaler.is_enabled() and self.scaler.get_scale() < 1e-4:
            raise Diverged(
                f"diverged: GradScaler's scale collapsed to {self.scaler.get_scale():.1e} "
                "(fp16 gradients keep overflowing)"
            )


MAX_STRETCH = 16


def fitted_steps(
    timed: int,
    budget: Budget,
    later_warmup_time: float,
    warmup: int | None = None,
    unit: int | None = None,
) -> int:
    """Timed steps, fitted so the timed phase lasts between ``min_timed_seconds`` and
    ``max_timed_seconds``, judging the step time by the ``warmup`` steps after the first (the
    budget's by default): raised at most ``MAX_STRETCH`` times, lowered to ``min_timed_steps``
    at the least; a multiple of ``unit`` (chunks of whole optimizer steps; the budget's chunks
    by default)."""
    warmup = budget.warmup_steps if warmup is None else warmup
    unit = budget.chunks if unit is None else unit
    if warmup < 2 or later_warmup_time <= 0:
        return timed
    per_step = later_warmup_time / (warmup - 1)
    wanted = timed
    if budget.min_timed_seconds > 0 and per_step * timed < budget.min_timed_seconds:
        wanted = min(timed * MAX_STRETCH, math.ceil(budget.min_timed_seconds / per_step))
    elif budget.max_timed_seconds > 0 and per_step * timed > budget.max_timed_seconds:
        wanted = max(budget.min_timed_steps, math.ceil(budget.max_timed_seconds / per_step))
    return math.ceil(wanted / unit) * unit


def graphs_compiled() -> int:
    """Graphs torch.compile has compiled in this process (dynamo's counter)."""
    return int(dynamo_counters["stats"]["unique_graphs"])


class _Longest(Dataset[Any]):
    """The dataset's longest items, over and over: every batch is as big as one can be."""

    def __init__(self, data: Dataset[Any], indices: tuple[int, ...], length: int) -> None:
        self.data, self.indices, self.length = data, indices, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.data[self.indices[index % len(self.indices)]]


def measured_data(
    cfg: TrainingConfig, workload: Workload, budget: Budget, steps: int
) -> tuple[Dataset[Any], bool]:
    """(the data a measurement of ``steps`` micro-batches trains on, whether to shuffle it):
    the training set, or for the memory probe (``budget.longest``) its longest items over and
    over, so that every batch is as big as one can be."""
    if budget.longest and workload.longest:
        return _Longest(workload.train, workload.longest, cfg.batch_size * steps), False
    return workload.train, True


def measure_throughput(cfg: TrainingConfig, workload: Workload, budget: Budget) -> Measurement:
    """Warm-up, then ``budget.chunks`` synchronised chunks of steady-state training steps,
    stretched to last ``budget.min_timed_seconds`` where the warm-up shows steps are short.
    A step is a micro-batch; with gradient accumulation the warm-up and every chunk hold whole
    optimizer steps, so each chunk's time includes its share of optimizer updates.

    Nothing but the training steps runs inside a timed chunk: memory is read by a background
    thread (and at chunk boundaries), progress is told between chunks, so in-process and
    isolated trials are timed by the same code and a small batch pays no per-step overhead.
    A workload trained by the user's own trainer is measured by that trainer's loop."""
    if workload.loop is not None:
        return workload.loop.measure(cfg, workload, budget)
    with MemoryTracker(cfg.device) as memory:
        return _measure(cfg, workload, budget, memory)


def _measure(
    cfg: TrainingConfig, workload: Workload, budget: Budget, memory: MemoryTracker
) -> Measurement:
    unit = budget.chunks * cfg.gradient_accumulation_steps
    warmup, timed = budget.steps(cfg.batch_size, cfg.gradient_accumulation_steps)
    trainer = Trainer(cfg, workload, warmup + timed)
    data, shuffle = measured_data(cfg, workload, budget, warmup + timed * MAX_STRETCH)
    loader = cfg.dataloader(
        data,
        shuffle=shuffle,
        drop_last=True,
        collate_fn=workload.task.collate_fn,
        generator=torch.Generator().manual_seed(0),
    )
    graphs = graphs_compiled()
    device = cfg.device
    _synchronize(device)
    tell("warm-up", 0, warmup)
    start = time.perf_counter()
    batches = Passes(loader)
    batch = next(batches)
    first_batch_time = time.perf_counter() - start
    losses = [trainer.step(batch)]
    _synchronize(device)
    first_step_done = time.perf_counter()
    first_step = first_step_done - start - first_batch_time
    first_graphs = graphs_compiled()
    for _ in range(warmup - 1):
        losses.append(trainer.step(next(batches)))
    _synchronize(device)
    warmup_time = time.perf_counter() - start
    tell("warm-up", warmup, warmup)
    trainer.check(losses)
    settle = math.ceil(SETTLE_STEPS / cfg.gradient_accumulation_steps)
    settle *= cfg.gradient_accumulation_steps
    if cfg.num_workers > 0 and not budget.longest:
        # The workers ran ahead while the first steps were slow: their queue is dropped, and
        # the steps are judged again from the pace the pipeline keeps.
        settled = _settle(trainer, batches, cfg, settle)
        timed = fitted_steps(timed, budget, settled * (settle - 1) / settle, settle, unit)
    else:
        timed = fitted_steps(timed, budget, warmup_time - (first_step_done - start), warmup, unit)
    timed = _agreed(cfg, timed)
    if not budget.longest:
        timed = _within_a_pass(trainer, batches, cfg, timed, unit, settle, data)
    chunk_steps = timed // budget.chunks

    chunk_times: list[float] = []
    data_wait = 0.0
    total = chunk_steps * budget.chunks
    with UtilizationSampler(device) as utilization:
        for chunk in range(budget.chunks):
            losses = []
            chunk_start = time.perf_counter()
            for _ in range(chunk_steps):
                t = time.perf_counter()
                batch = next(batches)
                data_wait += time.perf_counter() - t
                losses.append(trainer.step(batch))
            _synchronize(device)
            chunk_times.append(time.perf_counter() - chunk_start)
            # Between chunks, outside their timing: the loss check, a memory read, progress.
            trainer.check(losses)
            memory.sample()
            tell("timed", (chunk + 1) * chunk_steps, total)
    _until_optimizer_state(trainer, batches, memory)
    if budget.eval_peak:
        # A validation batch of the same size: its peak counts too (after the timed region).
        _eval_batch(trainer, cfg, workload)
        memory.sample()
    epoch_restart = pays_restarts(cfg, workload.train)
    restart = None
    if epoch_restart and not budget.longest:
        batches.close()  # this epoch's workers shut down, as at the end of an epoch
        restart = restart_seconds(loader, data_wait / max(1, total))
    return Measurement(
        batch_size=cfg.batch_size,
        chunk_steps=chunk_steps,
        chunk_times=tuple(chunk_times),
        data_wait=data_wait,
        warmup_steps=warmup,
        warmup_time=warmup_time,
        first_batch_time=first_batch_time,
        epoch_restart=epoch_restart,
        restart_seconds=restart,
        peak_memory_bytes=memory.result(),
        memory_kind=memory.kind,
        peak_reserved_bytes=memory.reserved(),
        device_free_bytes=memory.free_at_start,
        gpu_utilization=utilization.mean,
        gpu_utilization_note=None if utilization.mean is not None else utilization.note,
        # Graphs compiled after the first step: the batches' shapes changed under compile.
        recompiles=graphs_compiled() - first_graphs if first_graphs > graphs else 0,
        compile_seconds=(
            max(0.0, first_step - statistics.median(chunk_times) / chunk_steps)
            if cfg.compile_mode is not CompileMode.NONE
            else None
        ),
    )


SETTLE_STEPS = 3  # steps after the queue is dropped, before the timing: the pace they keep
DROP_SECONDS = 1.0  # the most the dropping of a queue may take


def _drop_queued(batches: Iterator[Any], cfg: TrainingConfig) -> None:
    """Fetch and drop as many batches as a loader's workers may queue ahead of the training
    steps (``num_workers x prefetch_factor``), or as many as :data:`DROP_SECONDS` allow.

    While the first steps are slow (a compile, cuDNN's benchmark, a lazy initialisation, or
    only the workers' start), the workers run ahead; a timed phase served from their queue
    measures the model, not the pipeline that feeds it, and reads a config faster than its own
    loop trains. How full the queue is cannot be told from a fetch's time (a queued batch's
    hand-over time varies too widely), so the whole of it is dropped: what the workers had not
    queued costs a wait for them, at most the pipeline's pace times the queue. Where the
    pipeline outpaces the model, the queue refills in the settling steps."""
    until = time.perf_counter() + DROP_SECONDS
    for _ in range(queue_batches(cfg)):
        next(batches)
        if time.perf_counter() > until:
            return


def _settle(trainer: Trainer, batches: Passes, cfg: TrainingConfig, settle: int) -> float:
    """Drop the queue the workers filled ahead of the steps (:func:`_drop_queued`), then
    ``settle`` untimed steps at the pace the pipeline keeps: their seconds."""
    if cfg.num_workers > 0:
        _drop_queued(batches, cfg)
    start = time.perf_counter()
    trainer.check([trainer.step(next(batches)) for _ in range(settle)])
    _synchronize(cfg.device)
    return time.perf_counter() - start


def _within_a_pass(
    trainer: Trainer,
    batches: Passes,
    cfg: TrainingConfig,
    timed: int,
    unit: int,
    settle: int,
    data: Dataset[Any],
) -> int:
    """The timed steps, fitted into one pass (:mod:`autotune._trial.passes`): fewer where a
    whole pass would not hold them after a new pass's queue and settling steps, and a new pass
    begun (its queue dropped, its pace settled) where the rest of the current one would not.
    Where a pass is too short for a chunk of whole optimizer steps, the timed phase crosses its
    ends as before. Every data-parallel rank takes the same decision (their steps' all-reduces
    must pair)."""
    steps = pass_steps(cfg, data)
    if steps is None:
        return timed
    room = steps - queue_batches(cfg) - settle
    if timed > room >= unit:
        timed = room // unit * unit
    if timed <= room and _agreed(cfg, int(batches.position + timed > steps)):
        batches.close()  # the next batch begins a new pass
        _settle(trainer, batches, cfg, settle)
    return timed


def _agreed(cfg: TrainingConfig, steps: int) -> int:
    """The steps every data-parallel rank runs: the most any rank asked for (each fits the
    timed phase to its own warm-up; ranks that ran different numbers of steps would wait
    forever in the extra steps' all-reduce). ``steps`` itself in a single process."""
    if not apply.data_parallel(cfg):
        return steps
    agreed = torch.tensor([steps], device=cfg.device)
    torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
    return int(agreed.item())


def restart_seconds(loader: DataLoader[Any], steady_wait: float) -> float:
    """What a new epoch costs a loader whose workers do not persist, measured warm (this
    process has loaded batches already; the cold first batch of a trial also pays imports and
    first reads): the first batch of a fresh iterator, its workers started again, beyond the
    steady state's wait for a batch."""
    start = time.perf_counter()
    iterator = iter(loader)
    try:
        next(iterator)
    except StopIteration:
        return 0.0
    seconds = time.perf_counter() - start
    del iterator  # its workers shut down
    return max(0.0, seconds - steady_wait)


MAX_SKIPPED_STEPS = 16  # steps the GradScaler may skip in a row before the peak is read


def _until_optimizer_state(trainer: Trainer, batches: Iterator[Any], memory: MemoryTracker) -> None:
    """With fp16 the GradScaler skips every step whose gradients overflow, and the optimizer's
    state (twice the model's size for Adam) exists only after a step that was taken: a short
    run (the memory probe's) can end before it, and its peak would be too low. Step on (after
    the timed region) until the state exists, where the scaler has been skipping."""
    scaler = trainer.scaler
    if not scaler.is_enabled() or trainer.optimizer.state:
        return
    for _ in range(MAX_SKIPPED_STEPS):
        if trainer.optimizer.state or scaler.get_scale() >= trainer.initial_scale:
            return  # a step was taken, or none skipped: this optimizer keeps no state
        trainer.check([trainer.step(next(batches))])
        memory.sample()


def _val_loader(cfg: TrainingConfig, workload: Workload) -> DataLoader[Any]:
    """The validation set in order, in the workload's batches (the same for every config),
    loaded in this process (validation speed is not tuned)."""
    plain = cfg.replace(num_workers=0, persistent_workers=False, prefetch_factor=None)
    return apply.make_dataloader(
        plain,
        workload.val,
        shuffle=False,
        collate_fn=workload.task.collate_fn,
        batch_size=workload.eval_batch_size,
        shard=False,  # every rank scores the whole set (its model is the same)
    )


def _eval_batch(trainer: Trainer, cfg: TrainingConfig, workload: Workload) -> None:
    eager = apply.unwrap_compiled(trainer.model)
    batch = next(iter(_val_loader(cfg, workload)), None)
    if batch is None:
        return
    eager.eval()
    try:
        with torch.no_grad(), cfg.autocast():
            workload.task.forward(eager, cfg.to_device(batch))
        _synchronize(cfg.device)
    finally:
        eager.train()


@dataclasses.dataclass(frozen=True)
class Validation:
    """One evaluation: the metric, and its sums and counts per unit (an example for the
    accuracies, a batch otherwise; see ``ResolvedTask.metric_units``), in the validation set's
    fixed order: the same units, in the same order, for every config."""

    metric: float
    units: tuple[float, ...]
    counts: tuple[float, ...]


def validate(model: nn.Module, cfg: TrainingConfig, workload: Workload) -> Validation:
    """The validation metric: its sum over the validation set's items over the items counted
    (tokens not -100 for a token metric), in the workload's fixed batches, so it does not
    depend on the config's batch size; with its per-unit sums and counts."""
    eager = apply.unwrap_compiled(model)  # validation speed is not tuned: skip recompiling
    was_training = eager.training
    eager.eval()
    loader = _val_loader(cfg, workload)
    units: list[float] = []
    counts: list[float] = []
    try:
        with torch.no_grad():
            for i, batch in enumerate(loader):
                tell("validation", i, len(loader))
                batch = cfg.to_device(batch)
                with cfg.autocast():
                    outputs, targets = workload.task.forward(eager, batch)
                sums, ns = workload.task.metric_units(outputs, targets)
                units.extend(sums)
                counts.extend(ns)
    finally:
        eager.train(was_training)
    count = sum(counts)
    if count == 0:
        raise DataError(
            f"The validation set has no item the {workload.task.metric_name} counts (every "
            "label is -100?): give it labeled items."
        )
    return Validation(metric=sum(units) / count, units=tuple(units), counts=tuple(counts))


def evaluate(model: nn.Module, cfg: TrainingConfig, workload: Workload) -> float:
    """The validation metric (see :func:`validate`)."""
    return validate(model, cfg, workload).metric


def initial_metric(cfg: TrainingConfig, workload: Workload) -> float:
    """The untrained model's validation metric (what the guard tells learning from)."""
    if workload.loop is not None:
        return workload.loop.initial_metric(cfg, workload)
    return evaluate(Trainer(cfg, workload, 1).model, cfg, workload)


def halfway_is_a_shorter_run(cfg: TrainingConfig) -> bool:
    """Whether a run's metric halfway is what a run of half its samples would score: a
    constant rate without warm-up (an annealed schedule is still at a high rate there)."""
    s = cfg.lr_schedule
    return s.kind is ScheduleKind.CONSTANT and s.warmup_fraction == 0.0


def run_samples(cfg: TrainingConfig, horizon: int) -> int:
    """The samples an accuracy run of ``cfg`` trains at a ``horizon`` of samples: its share
    of them (``train_fraction``), as its run would train its share of the planned epochs."""
    return max(1, round(horizon * cfg.train_fraction))


def train_for_accuracy(
    cfg: TrainingConfig, workload: Workload, samples: int, seed: int, *, midpoint: bool = False
) -> AccuracyRun:
    """Train from the initial weights for ``samples`` samples (the horizon: a config that
    trains a share of the planned epochs trains that share of them, ``train_fraction``) with
    data-order ``seed``, the config's schedule annealed over exactly its run; then validate.
    Two configs of one seed see the same samples in the same order for as long as both
    train (their loaders share the seed's generator). With gradient
    accumulation, whole global batches: the same optimizer steps on the same samples as a
    config that takes each global batch in one piece. ``midpoint``: also validate after half
    the optimizer steps, where that is a shorter run's metric (:func:`halfway_is_a_shorter_run`),
    with every RNG state kept, so the run trains exactly as one without it. A workload
    trained by the user's own trainer trains and validates through it (no midpoint)."""
    if workload.loop is not None:
        return workload.loop.accuracy_run(cfg, workload, samples, seed)
    samples = run_samples(cfg, samples)
    k = cfg.gradient_accumulation_steps
    optimizer_steps = max(1, math.ceil(samples / cfg.global_batch_size))
    steps = optimizer_steps * k  # micro-batches
    half = (optimizer_steps // 2) * k if midpoint and halfway_is_a_shorter_run(cfg) else 0
    halfway: float | None = None
    start = time.perf_counter()
    with seeded(seed, cfg.device):
        trainer = Trainer(cfg, workload, steps)
        batches = _training_batches(cfg, workload, seed, steps)
        losses: list[torch.Tensor] = []
        phase = f"accuracy run, seed {seed}"
        for i in range(steps):
            losses.append(trainer.step(next(batches)))
            tell(phase, i + 1, steps)
            if len(losses) == 32:
                trainer.check(losses)
                losses = losses[-1:]
            if i + 1 == half:
                with preserved_rng(cfg.device):
                    halfway = validate(trainer.model, cfg, workload).metric
        trainer.check(losses)
        final_loss = float(losses[-1])
        batches.close()  # the loader's workers shut down before validation
        del batches
        validation = validate(trainer.model, cfg, workload)
    metric = validation.metric
    if not math.isfinite(metric):
        raise Diverged(f"diverged: validation {workload.task.metric_name} is {metric}")
    return AccuracyRun(
        seed=seed,
        metric=metric,
        final_loss=final_loss,
        samples=steps * cfg.batch_size * cfg.ranks,  # every rank's
        seconds=time.perf_counter() - start,
        units=validation.units,
        counts=None if all(c == 1.0 for c in validation.counts) else validation.counts,
        midpoint=halfway if halfway is not None and math.isfinite(halfway) else None,
    )


def _training_batches(
    cfg: TrainingConfig, workload: Workload, seed: int, steps: int
) -> Passes | Generator[Any, None, None]:
    """An accuracy run's ``steps`` micro-batches, in the order of data-order ``seed``: the
    training set shuffled from the seed's generator (two configs of one seed see the same
    samples in the same order, whatever their batch sizes), or a stream read from its start at
    the seed's pass (:func:`_stream_batches`)."""
    if isinstance(workload.train, Stream):
        return _stream_batches(cfg, workload.train, workload, seed, steps)
    drop_last = len(workload.train) >= cfg.global_batch_size  # type: ignore[arg-type]
    loader = cfg.dataloader(
        workload.train,
        shuffle=True,
        drop_last=drop_last,
        collate_fn=workload.task.collate_fn,
        generator=torch.Generator().manual_seed(seed),
    )
    return Passes(loader)


def _stream_batches(
    cfg: TrainingConfig, stream: Stream, workload: Workload, seed: int, steps: int
) -> Generator[Any, None, None]:
    """A stream's first ``steps`` micro-batches at data-order ``seed`` (:func:`stream_items`),
    batched here."""
    items = stream_items(cfg, stream, seed, steps * cfg.batch_size)
    collate = workload.task.collate_fn or default_collate
    try:
        for _ in range(steps):
            yield collate(list(itertools.islice(items, cfg.batch_size)))
    finally:
        items.close()  # the loader's workers shut down


def stream_items(
    cfg: TrainingConfig,
    stream: Stream,
    seed: int,
    needed: int,
    worker_init_fn: Callable[[int], None] | None = None,
) -> Generator[Any, None, None]:
    """A stream's first ``needed`` items at data-order ``seed``, loaded one by one by the
    config's workers (each worker's items interleave item by item, so the order does not
    depend on the batch size: two configs of one seed and one worker count see the same
    samples in the same order). Past a pass's end the stream is read again from its start, as
    a trainer reads a finite stream (its workers started again: the run pays the restart),
    each pass at the (seed, pass)'s own data-order value (:func:`~autotune._stream.epoch_of`).
    A pass that gives no item is an error saying how many items the stream gave.
    ``worker_init_fn``: the user's loader's, which starts each worker."""
    given = 0
    for pass_ in itertools.count():
        stream.at_epoch(seed, pass_)
        loader = apply.make_item_loader(
            cfg,
            stream,
            generator=torch.Generator().manual_seed(epoch_of(seed, pass_)),
            worker_init_fn=worker_init_fn,
        )
        before = given
        for item in itertools.islice(loader, needed - given):
            given += 1
            yield item
        if given >= needed:
            return
        if given == before:
            raise StreamEnded(
                f"The stream ({type(stream.source).__name__}) gave no items when read again "
                f"from its start (pass {pass_ + 1}), after {given:,}: this run trains "
                f"{needed:,} (the planned run reads {stream.samples:,}). A stream read again "
                "must give its items again: an __iter__ that returns one generator object gives "
                "them once; make it start a new one."
            )


class InOrder(IterableDataset[Any]):
    """A stream's first items as an accuracy run reads them (:func:`stream_items`), for a
    trainer's own loader to batch: that loader has no workers of its own (the config's load
    the items), so both arms of a pair see the same samples in the same order."""

    def __init__(
        self,
        cfg: TrainingConfig,
        stream: Stream,
        seed: int,
        needed: int,
        worker_init_fn: Callable[[int], None] | None = None,
    ) -> None:
        self.cfg, self.stream, self.seed, self.needed = cfg, stream, seed, needed
        self.worker_init_fn = worker_init_fn

    def __iter__(self) -> Iterator[Any]:
        return stream_items(self.cfg, self.stream, self.seed, self.needed, self.worker_init_fn)


def accuracy_data(
    cfg: TrainingConfig,
    workload: Workload,
    seed: int,
    samples: int,
    *,
    worker_init_fn: Callable[[int], None] | None = None,
) -> tuple[Dataset[Any], TrainingConfig]:
    """(what a trainer's accuracy run of ``samples`` samples trains on, the config its loader
    is built from): the training set and ``cfg``, or for a stream its items in the order of
    data-order ``seed`` (:class:`InOrder`, its workers started by the user's
    ``worker_init_fn``) and ``cfg`` with no loader workers."""
    if not isinstance(workload.train, Stream):
        return workload.train, cfg
    items = InOrder(cfg, workload.train, seed, samples, worker_init_fn)
    return items, cfg.replace(num_workers=0)


def run_trial(
    cfg: TrainingConfig,
    workload: Workload,
    budget: Budget,
    *,
    accuracy: AccuracyCheck | None = None,
    measured: Measurement | None = None,
) -> TrialOutcome:
    """Measure ``cfg`` (unless ``measured`` already holds its throughput), then make the
    ``accuracy`` runs. Never raises for a failing config: the outcome carries the reason."""
    start = time.perf_counter()
    measurement: Measurement | None = measured
    runs: list[AccuracyRun] = []
    initial: float | None = None
    failure: tuple[FailureReason, str] | None = None
    compiled = cfg.compile_mode is not CompileMode.NONE
    if compiled:
        # Dynamo's caches are keyed on the model's code, shared by every trial's copy: without a
        # reset, later trials hit the recompile limit and silently fall back to eager.
        torch._dynamo.reset()
    try:
        with (
            apply.current_device(cfg.device),
            cfg.backends(),
            seeded(0, cfg.device),
            cold_compile(compiled),
        ):
            if measurement is None:
                measurement = measure_throughput(cfg, workload, budget)
            if accuracy is not None and accuracy.initial:
                initial = initial_metric(cfg, workload)
            if accuracy is not None:
                arm = accuracy.config or cfg
                with arm.backends():
                    for seed in accuracy.seeds:
                        runs.append(
                            train_for_accuracy(
                                arm, workload, accuracy.samples, seed, midpoint=accuracy.midpoint
                            )
                        )
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # any failure inside a trial is recorded, never fatal
        failure = classify(exc)
    poisoned = failure is not None and failure[0] is FailureReason.DEVICE
    # Outside the except block: its traceback no longer pins the trial's tensors.
    if compiled and not poisoned:
        # Compiled graphs and CUDA-graph pools of this trial are released now, not held until
        # the next compiled trial resets them.
        torch._dynamo.reset()
    free_memory(cfg.device, poisoned=poisoned)
    return TrialOutcome(
        config=cfg,
        measurement=measurement,
        accuracy=tuple(runs),
        failure=None if failure is None else failure[0],
        message=None if failure is None else failure[1],
        seconds=time.perf_counter() - start,
        initial_metric=initial,
    )


@contextlib.contextmanager
def cold_compile(compiled: bool) -> Iterator[None]:
    """Compile without the on-disk caches that an earlier trial may have filled: a user's real
    run compiles cold, so the compile cost a trial records must be the cold one. (Trial
    workers also get an empty cache directory of their own; see ``isolation``.)"""
    if not compiled:
        yield
        return
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    caches = {
        "fx_graph_cache": False,
        "fx_graph_remote_cache": False,
        "autotune_local_cache": False,
        "bundled_autotune_remote_cache": False,
    }
    with inductor_config.patch(caches), functorch_config.patch(enable_autograd_cache=False):
        yield

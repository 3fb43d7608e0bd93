"""Timing a trainer's own loop from its callbacks: the same measurement as the runner's.

A Lightning or Hugging Face trainer owns its loop, so autotune cannot put its clock around the
steps; it listens instead. The trainer's callbacks tell the :class:`StepClock` when training
starts and when each micro-batch starts and ends. The clock synchronises with the device only
at the boundaries the runner synchronises at (after the first step, after the warm-up, at the
end of each timed chunk), checks the losses for NaN/inf there, and says when the measurement is
complete (the trainer is then told to stop). What lies between two steps (loading the next
batch, the trainer's own per-step work, the user's callbacks) is in the chunk times, as it is in
the user's real run. :meth:`StepClock.measurement` then builds the same :class:`Measurement` the
runner does.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from autotune._choices import CompileMode
from autotune._knobs.config import TrainingConfig
from autotune._trial.failures import Diverged
from autotune._trial.measure import Measurement, MemoryTracker, UtilizationSampler
from autotune._trial.outcome import Budget
from autotune._trial.passes import queue_batches
from autotune._trial.runner import (
    DROP_SECONDS,
    MAX_STRETCH,
    SETTLE_STEPS,
    fitted_steps,
    graphs_compiled,
    tell,
)

__all__ = ["LossCheck", "StepClock", "check_losses", "loss_of"]

CHECK_EVERY = 32  # micro-batches between NaN/inf checks of an accuracy run's losses


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def check_losses(losses: list[torch.Tensor], cfg: TrainingConfig, step: int) -> None:
    """Raise :class:`Diverged` on a NaN/inf loss (as the runner's trainer does)."""
    if not losses:
        return
    stacked = torch.stack([loss.detach().float().reshape(()) for loss in losses])
    if not bool(torch.isfinite(stacked).all()):
        bad = stacked[~torch.isfinite(stacked)][0].item()
        raise Diverged(
            f"diverged: loss became {bad} by step {step} under precision "
            f"{cfg.precision.value}, lr {cfg.lr_schedule.peak_lr:.3g}"
        )


class LossCheck:
    """The losses of an accuracy run, checked every :data:`CHECK_EVERY` micro-batches; the last
    one is the run's final loss."""

    def __init__(self, cfg: TrainingConfig) -> None:
        self.cfg = cfg
        self.losses: list[torch.Tensor] = []
        self.steps = 0
        self.last: float | None = None

    def add(self, loss: torch.Tensor | None) -> None:
        self.steps += 1
        if loss is None:
            return
        self.losses.append(loss.detach())
        if len(self.losses) >= CHECK_EVERY:
            self.flush()

    def flush(self) -> None:
        check_losses(self.losses, self.cfg, self.steps)
        if self.losses:
            self.last = float(self.losses[-1])
        self.losses = []


class StepClock:
    """The warm-up and the timed chunks of one throughput measurement, told by a trainer's
    callbacks. Steps are micro-batches; with gradient accumulation the warm-up and every chunk
    hold whole optimizer steps, as in the runner.

    As in the runner, where loader workers ran ahead of the slow first steps, the batches they
    may have queued (``num_workers x prefetch_factor``) and a few settling steps are not timed
    (the trainer owns the loop, so they are stepped through rather than dropped), the timed
    steps are fitted to the settling steps' pace, and they are fitted into one pass of the data
    where a new pass costs more than a batch (:func:`fit_to_pass`)."""

    def __init__(self, cfg: TrainingConfig, budget: Budget, memory: MemoryTracker) -> None:
        self.cfg, self.budget, self.memory = cfg, budget, memory
        k = cfg.gradient_accumulation_steps
        self.unit = budget.chunks * k
        self.warmup, self.timed = budget.steps(cfg.batch_size, k)
        # Untimed steps after the warm-up: the workers' queue (as many batches as they may
        # queue, or as many as DROP_SECONDS allow: stepped through, they train), then settling
        # steps. The timed phase starts after them (``timed_from``, set when the queue is through).
        self.settle = math.ceil(SETTLE_STEPS / k) * k if cfg.num_workers > 0 else 0
        self.queue = math.ceil(queue_batches(cfg) / k) * k
        self.lead = self.queue + self.settle if self.settle and not budget.longest else 0
        self.timed_from = self.warmup + self.lead  # the most it can be
        self.chunk_steps = self.timed // budget.chunks
        self.done_steps = 0
        self.losses: list[torch.Tensor] = []
        self.chunk_times: list[float] = []
        self.data_wait = 0.0
        self.graphs = graphs_compiled()
        self.first_graphs = self.graphs
        self._start = self._first_batch = self._first_step_done = 0.0
        self._warmup_done = self._chunk_start = 0.0
        self._settle_start: float | None = None
        self._last_end: float | None = None
        self._pass: int | None = None
        self.utilization = UtilizationSampler(cfg.device)
        self.complete = False

    @property
    def most_steps(self) -> int:
        """The most micro-batches this measurement can take (the timed steps stretched)."""
        return self.warmup + self.lead + self.timed * MAX_STRETCH

    def fit_to_pass(self, steps: int | None) -> None:
        """The micro-batches a pass of the measured data holds (:func:`pass_steps`; None: no
        pass's end to keep out of the timed phase). The trainer's loop starts a new pass only
        at the end of one, so the timed steps are fitted into the first, down to a chunk of
        whole optimizer steps."""
        self._pass = None if self.budget.longest else steps

    def _fit(self, seconds: float, steps: int) -> None:
        """The timed steps fitted to ``seconds`` over ``steps`` steps (the pace after the
        first), then into the first pass."""
        self.timed = fitted_steps(self.timed, self.budget, seconds, steps, self.unit)
        if self._pass is not None:
            room = self._pass - self.timed_from
            if self.timed > room >= self.unit:
                self.timed = room // self.unit * self.unit
        self.chunk_steps = self.timed // self.budget.chunks

    def started(self) -> None:
        """Training starts (the loaders and the optimizer are set up)."""
        _synchronize(self.cfg.device)
        tell("warm-up", 0, self.warmup)
        self._start = time.perf_counter()

    def batch_started(self) -> None:
        now = time.perf_counter()
        if self.done_steps == 0:
            self._first_batch = now - self._start
        elif self.done_steps > self.timed_from and self._last_end is not None:
            self.data_wait += now - self._last_end

    def batch_ended(self, loss: torch.Tensor | None) -> bool:
        """One micro-batch done; True once the measurement is complete (stop training)."""
        self.done_steps += 1
        n = self.done_steps
        if loss is not None:
            self.losses.append(loss.detach())
        if n == 1:
            _synchronize(self.cfg.device)
            self._first_step_done = time.perf_counter()
            self.first_graphs = graphs_compiled()
        if n == self.warmup:
            self._end_warmup()
        if self.lead and self._settle_start is None and self._queue_through(n):
            _synchronize(self.cfg.device)
            self._settle_start = time.perf_counter()
            self.timed_from = n + self.settle
        elif self.lead and n == self.timed_from:
            self._end_settling()
        elif n > self.timed_from and (n - self.timed_from) % self.chunk_steps == 0:
            self._end_chunk()
        self._last_end = time.perf_counter()
        return self.complete

    def _queue_through(self, n: int) -> bool:
        """Whether the steps after the warm-up have taken the workers' queue: all the batches
        they may queue, or (at a whole optimizer step) what :data:`DROP_SECONDS` allow."""
        after = n - self.warmup
        if after < 0 or after % self.cfg.gradient_accumulation_steps:
            return False
        spent = time.perf_counter() - (self._start + self._warmup_done)
        return after >= self.queue or (after > 0 and spent > DROP_SECONDS)

    def _end_warmup(self) -> None:
        _synchronize(self.cfg.device)
        now = time.perf_counter()
        self._warmup_done = now - self._start
        tell("warm-up", self.warmup, self.warmup)
        check_losses(self.losses, self.cfg, self.done_steps)
        self.losses = []
        if not self.lead:
            later = self._warmup_done - (self._first_step_done - self._start)
            self._fit(later, self.warmup)
            self._start_timing()

    def _end_settling(self) -> None:
        _synchronize(self.cfg.device)
        assert self._settle_start is not None
        settled = time.perf_counter() - self._settle_start
        check_losses(self.losses, self.cfg, self.done_steps)
        self.losses = []
        self._fit(settled * (self.settle - 1) / self.settle, self.settle)
        self._start_timing()

    def _start_timing(self) -> None:
        self.utilization.__enter__()
        self._chunk_start = time.perf_counter()

    def _end_chunk(self) -> None:
        _synchronize(self.cfg.device)
        now = time.perf_counter()
        self.chunk_times.append(now - self._chunk_start)
        # Between chunks, outside their timing: the loss check, a memory read, progress.
        check_losses(self.losses, self.cfg, self.done_steps)
        self.losses = []
        self.memory.sample()
        tell("timed", len(self.chunk_times) * self.chunk_steps, self.timed)
        self.complete = len(self.chunk_times) == self.budget.chunks
        if self.complete:
            self.utilization.__exit__()
        self._chunk_start = time.perf_counter()

    def measurement(
        self, restart: Callable[[float], float | None] | None = None, *, restarts: bool = False
    ) -> Measurement:
        """The measurement, once complete. ``restart(steady_wait)``: what an epoch's restart
        costs the loader (None where its workers persist or there are none); ``restarts``:
        each pass pays one even so (a stream read over several passes, see
        ``passes.pays_restarts``)."""
        if not self.complete:
            raise RuntimeError(
                f"the trainer stopped after {self.done_steps} of the "
                f"{self.timed_from + self.timed} steps a measurement needs (max_steps, "
                "limit_train_batches or a callback that stops training?)"
            )
        cfg = self.cfg
        timed = self.chunk_steps * len(self.chunk_times)
        epoch_restart = restarts or (cfg.num_workers > 0 and not cfg.persistent_workers)
        step = statistics.median(self.chunk_times) / self.chunk_steps
        first_step = self._first_step_done - self._start - self._first_batch
        return Measurement(
            batch_size=cfg.batch_size,
            chunk_steps=self.chunk_steps,
            chunk_times=tuple(self.chunk_times),
            data_wait=self.data_wait,
            warmup_steps=self.warmup,
            warmup_time=self._warmup_done,
            first_batch_time=self._first_batch,
            epoch_restart=epoch_restart,
            restart_seconds=(
                restart(self.data_wait / max(1, timed))
                if epoch_restart and restart is not None and not self.budget.longest
                else None
            ),
            peak_memory_bytes=self.memory.result(),
            memory_kind=self.memory.kind,
            peak_reserved_bytes=self.memory.reserved(),
            device_free_bytes=self.memory.free_at_start,
            gpu_utilization=self.utilization.mean,
            gpu_utilization_note=None
            if self.utilization.mean is not None
            else self.utilization.note,
            recompiles=(
                graphs_compiled() - self.first_graphs if self.first_graphs > self.graphs else 0
            ),
            compile_seconds=(
                max(0.0, first_step - step) if cfg.compile_mode is not CompileMode.NONE else None
            ),
        )


def loss_of(outputs: Any) -> torch.Tensor | None:
    """The loss in what a training step returned (a tensor, or a dict with ``loss``)."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, dict):
        loss = outputs.get("loss")
        return loss if isinstance(loss, torch.Tensor) else None
    return None

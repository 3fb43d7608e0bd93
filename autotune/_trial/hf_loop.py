"""The user's Hugging Face ``Trainer`` as the loop of every trial (``autotune.tune``).

Each trial is a short ``trainer.train()`` (``max_steps``) of a fresh ``Trainer`` of the user's
own class, built from their ``TrainingArguments`` with the candidate's put over them, exactly
the arguments ``cfg.to_transformers()`` exports for the knobs searched (batch size,
accumulation, bf16/fp16/tf32, loader workers, pinning, prefetch, ``torch_compile``, gradient
checkpointing, the fused optimizer, the learning rate and warm-up), its model fresh from
``model_init`` or a copy of the pristine one, their collator, ``compute_metrics``, loss
function and callbacks. cuDNN benchmark and CPU threads are not ``TrainingArguments``: the
runner's ``cfg.backends()`` sets them around the trial, as the export tells a user to.

A throughput trial is timed by a ``TrainerCallback`` (:class:`StepClock`) and then evaluates
one batch of the evaluation set with the model and optimizer still held: a batch size that
trains but runs out of memory in evaluation does not fit. An accuracy run trains for the
guard's samples and scores ``trainer.evaluate()``'s metric.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import Dataset, Subset
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from autotune._errors import DataError
from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._knobs.registry import Where
from autotune._space import SearchSpace
from autotune._stream import source_of
from autotune._trial.measure import Measurement, MemoryTracker
from autotune._trial.outcome import AccuracyRun, Budget
from autotune._trial.passes import pass_steps, pays_restarts
from autotune._trial.runner import accuracy_data, measured_data, seeded
from autotune._trial.step_clock import LossCheck, StepClock
from autotune._trial.workload import Workload

__all__ = ["APPLIED", "HFLoop"]

# The knobs whose TrainingArguments mapping a trial applies: every knob's that has one (the LR
# schedule's carries the learning rate and warm-up of every LR knob), but the optimizer
# implementation's (applied only where the user's optimizer is torch's AdamW), DDP's (a trial
# is one process) and the length's (a trial sets its own steps).
APPLIED = tuple(
    k.name
    for k in registry.KNOBS
    if k.maps_to_transformers and k.where not in (Where.OPTIMIZER, Where.DDP, Where.LENGTH)
)
# What a trial changes beside the candidate's settings: no files, reports or progress output,
# no evaluation or checkpoints during training, no batch-size search of its own.
TRIAL_ARGUMENTS: dict[str, Any] = {
    "report_to": "none",
    "save_strategy": "no",
    "eval_strategy": "no",
    "disable_tqdm": True,
    "auto_find_batch_size": False,
    "load_best_model_at_end": False,
    "push_to_hub": False,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class HFLoop:
    """What a trial needs of the user's ``Trainer``, picklable for trial workers."""

    kind: str = "transformers"
    trainer_class: type
    args: TrainingArguments
    parts: Mapping[str, Any]  # collator, compute_metrics, processing_class, loss function...
    callbacks: tuple[Any, ...] = ()
    model_init: Any = None
    metric: str  # a key of trainer.evaluate(): eval_loss, eval_accuracy, ...
    tunes_optimizer: bool = False  # the user's optimizer is torch's AdamW (fused or not)
    not_searched: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def restrict(self, space: SearchSpace) -> SearchSpace:
        space = space.not_searching(self.not_searched)
        impl = space.knobs.get("optimizer_impl")
        values = getattr(impl, "values", ())
        if "foreach" in values:  # TrainingArguments.optim has no foreach of its own
            space = space.with_choice(
                "optimizer_impl",
                tuple(v for v in values if v != "foreach"),
                "optimizer_impl: foreach left out (Hugging Face's optim names adamw_torch and "
                "adamw_torch_fused only)",
            )
        checkpointing = space.knobs.get("checkpointing")
        steps = getattr(checkpointing, "values", ())
        if any(int(v) > 1 for v in steps):
            space = space.with_choice(
                "checkpointing",
                tuple(v for v in steps if int(v) <= 1),
                "checkpointing: 0 or 1 (Hugging Face checkpoints every layer or none)",
            )
        return space

    def arguments(self, cfg: TrainingConfig) -> dict[str, Any]:
        """The candidate's ``TrainingArguments``: the export's mapping of every knob a trial
        applies (the trial and the export are the same function)."""
        names = frozenset(f.name for f in dataclasses.fields(TrainingArguments))
        applied = (*APPLIED, "optimizer_impl") if self.tunes_optimizer else APPLIED
        out: dict[str, Any] = {}
        for name in applied:
            out.update(registry.BY_NAME[name].transformers(cfg, names))
        out["use_cpu"] = cfg.device.startswith("cpu")
        return out

    # -- A trial ----------------------------------------------------------------------------

    def measure(self, cfg: TrainingConfig, workload: Workload, budget: Budget) -> Measurement:
        with MemoryTracker(cfg.device) as memory:
            clock = StepClock(cfg, budget, memory)
            data, _ = measured_data(cfg, workload, budget, clock.most_steps)
            clock.fit_to_pass(pass_steps(cfg, data))
            steps = math.ceil(clock.most_steps / cfg.gradient_accumulation_steps)
            timed = _Timed(clock)
            with self.trainer(cfg, workload, data, timed, max_steps=steps, seed=0) as trainer:
                timed.watch(trainer)
                with _quiet():
                    trainer.train()
                    if budget.eval_peak:
                        # One evaluation batch with the model and optimizer still held.
                        n = min(len(workload.val), self.args.per_device_eval_batch_size)  # type: ignore[arg-type]
                        trainer.evaluate(eval_dataset=Subset(workload.val, range(n)))
                        memory.sample()
        return clock.measurement(restarts=pays_restarts(cfg, workload.train))

    def initial_metric(self, cfg: TrainingConfig, workload: Workload) -> float:
        with (
            self.trainer(cfg, workload, workload.train, None, max_steps=1, seed=0) as trainer,
            _quiet(),
        ):
            return self.evaluate(trainer, workload.val)

    def accuracy_run(
        self, cfg: TrainingConfig, workload: Workload, samples: int, seed: int
    ) -> AccuracyRun:
        steps = max(1, math.ceil(samples / cfg.global_batch_size))
        start = time.perf_counter()
        with seeded(seed, cfg.device):
            checked = _Checked(LossCheck(cfg))
            # A stream's items in the seed's order, loaded by the config's workers.
            data, loading = accuracy_data(cfg, workload, seed, steps * cfg.global_batch_size)
            with self.trainer(
                loading, workload, data, checked, max_steps=steps, seed=seed
            ) as trainer:
                checked.watch(trainer)
                with _quiet():
                    out = trainer.train()
                    checked.losses.flush()
                    metric = self.evaluate(trainer, workload.val)
        return AccuracyRun(
            seed=seed,
            metric=metric,
            final_loss=float(out.training_loss),
            samples=steps * cfg.global_batch_size,
            seconds=time.perf_counter() - start,
        )

    # -- Pieces ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def trainer(
        self,
        cfg: TrainingConfig,
        workload: Workload,
        data: Dataset[Any],
        callback: Any,
        *,
        max_steps: int,
        seed: int,
    ) -> Iterator[Any]:
        """A fresh trainer of the user's class: their arguments with the candidate's over
        them, a fresh model, their data and callbacks; its output directory (nothing is saved
        there) is removed when the trial is done with it."""
        with tempfile.TemporaryDirectory(prefix="autotune-hf-", ignore_cleanup_errors=True) as out:
            yield self._trainer(cfg, workload, data, callback, out, max_steps=max_steps, seed=seed)

    def _trainer(
        self,
        cfg: TrainingConfig,
        workload: Workload,
        data: Dataset[Any],
        callback: Any,
        output_dir: str,
        *,
        max_steps: int,
        seed: int,
    ) -> Any:
        args = dataclasses.replace(
            self.args,
            **self.arguments(cfg),
            **TRIAL_ARGUMENTS,
            output_dir=output_dir,
            max_steps=max_steps,
            seed=seed,
            data_seed=seed,
        )
        model: dict[str, Any] = (
            {"model_init": self.model_init}
            if self.model_init is not None
            else {"model": copy.deepcopy(workload.model)}
        )
        callbacks = [copy.deepcopy(c) for c in self.callbacks]
        with _quiet():
            trainer = self.trainer_class(
                args=args,
                train_dataset=source_of(data),  # a stream as the user gave it
                eval_dataset=workload.val,
                callbacks=[*callbacks, *([callback] if callback is not None else [])],
                **self.parts,
                **model,
            )
        for quiet in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(quiet)
        return trainer

    def evaluate(self, trainer: Any, data: Dataset[Any]) -> float:
        """``trainer.evaluate()`` on ``data``: the guarded metric."""
        metrics = trainer.evaluate(eval_dataset=data)
        if self.metric not in metrics:
            raise DataError(
                f"trainer.evaluate() gave no {self.metric!r} (it gave "
                f"{', '.join(sorted(metrics))}): pass metric= one of those, or return it from "
                "compute_metrics."
            )
        return float(metrics[self.metric])


class _StepLosses(TrainerCallback):
    """A callback that sees each micro-batch's loss: the trainer's ``training_step`` (which
    returns it, detached) is wrapped on the instance, so the loss reaches the callback that
    follows it, as a Lightning callback gets its step's outputs."""

    def __init__(self) -> None:
        self.loss: torch.Tensor | None = None

    def watch(self, trainer: Any) -> None:
        step = trainer.training_step

        def training_step(*args: Any, **kwargs: Any) -> Any:
            loss = step(*args, **kwargs)
            self.loss = loss if isinstance(loss, torch.Tensor) else None
            return loss

        trainer.training_step = training_step

    def take(self) -> torch.Tensor | None:
        loss, self.loss = self.loss, None
        return loss


class _Timed(_StepLosses):
    """Tell a :class:`StepClock` how training advances (each micro-batch's loss checked for
    NaN/inf with the chunk it ends, as the plain loop does); stop once it has measured."""

    def __init__(self, clock: StepClock) -> None:
        super().__init__()
        self.clock = clock

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.started()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.batch_started()

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.batch_ended(self.take())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.clock.batch_ended(self.take()):
            control.should_training_stop = True


class _Checked(_StepLosses):
    """Keep an accuracy run's losses, checked for NaN/inf as it goes (see :class:`LossCheck`):
    a diverged run fails with its step named, not after training to the end."""

    def __init__(self, losses: LossCheck) -> None:
        super().__init__()
        self.losses = losses

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.losses.add(self.take())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.losses.add(self.take())


class _quiet(warnings.catch_warnings):
    """No per-trial warnings from the trainer (a search reports what matters)."""

    def __enter__(self) -> None:
        super().__enter__()
        warnings.simplefilter("ignore")

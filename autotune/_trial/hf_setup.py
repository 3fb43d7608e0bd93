"""What ``autotune.tune`` reads from a Hugging Face ``Trainer``, and the checks it makes before
any trial: the baseline is the user's ``TrainingArguments``, the metric a key of their
``trainer.evaluate()``, and one training step and one evaluation batch run through a trainer
of their class on the CPU, so a broken collator or ``compute_metrics`` is an error naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch
from transformers import TrainingArguments

from autotune._choices import CompileMode, LRSchedule, OptimizerImpl, Precision, ScheduleKind
from autotune._errors import ArgumentError, DataError, ModelError
from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._knobs.registry import Where
from autotune._stream import is_stream
from autotune._task import TaskRefs
from autotune._trial.bounded import RUN_HINT, step
from autotune._trial.direction import Said, choose_direction
from autotune._trial.fingerprint import data_fingerprint
from autotune._trial.hf_loop import HFLoop
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

__all__ = ["prepare_hf"]

# The Trainer's own parts a trial passes on to each fresh trainer.
_PARTS = (
    "data_collator",
    "processing_class",
    "compute_metrics",
    "compute_loss_func",
    "preprocess_logits_for_metrics",
    "optimizer_cls_and_kwargs",
)
_OPTIMIZERS = {"adamw_torch": OptimizerImpl.DEFAULT, "adamw_torch_fused": OptimizerImpl.FUSED}
# Callbacks every Trainer makes for itself (flow, progress, report_to's integrations).
_OWN_CALLBACKS = ("DefaultFlowCallback", "ProgressCallback", "PrinterCallback")


def prepare_hf(
    trainer: Any,
    *,
    metric: str | None,
    higher_is_better: bool | None,
    seed: int = 0,
    planned_samples: int | None = None,
    passes: float | None = None,
) -> SearchStart:
    """Read and check everything a Hugging Face search needs, before any trial runs.
    ``planned_samples``, or ``passes`` over it: a training stream's run (else its
    ``max_steps``, else its ``num_train_epochs`` passes)."""
    args: TrainingArguments = trainer.args
    if getattr(trainer, "optimizer", None) is not None:
        raise ArgumentError(
            "Your Trainer was given optimizers=(optimizer, scheduler): they hold one model's "
            "parameters, and every trial trains a fresh model. Give the optimizer by "
            "TrainingArguments(optim=...) or Trainer(optimizer_cls_and_kwargs=...) instead."
        )
    train, val = trainer.train_dataset, trainer.eval_dataset
    for name, data in (("train_dataset", train), ("eval_dataset", val)):
        if data is None:
            raise DataError(
                f"Your Trainer has no {name}: tune trains on train_dataset and guards the "
                "metric trainer.evaluate() gives on eval_dataset."
            )
        if not (is_stream(data) or (hasattr(data, "__getitem__") and hasattr(data, "__len__"))):
            raise DataError(
                f"Your Trainer's {name} is a {type(data).__name__}, neither a map-style dataset "
                "(with __len__ and __getitem__) nor a stream (a torch IterableDataset, as a "
                "Hugging Face dataset loaded with streaming=True is)."
            )
    samples, passes = _stream_run(args, train, planned_samples, passes)
    name = _metric_name(metric or args.metric_for_best_model or "loss")
    choice = choose_direction(name, higher_is_better, said=_said(args, name))
    not_searched = _not_searched(trainer, args)
    loop = HFLoop(
        trainer_class=type(trainer),
        args=args,
        parts={p: getattr(trainer, p, None) for p in _PARTS if getattr(trainer, p, None)},
        callbacks=tuple(c for c in trainer.callback_handler.callbacks if _users(c)),
        model_init=trainer.model_init,
        metric=name,
        tunes_optimizer=str(getattr(args.optim, "value", args.optim)) in _OPTIMIZERS,
        not_searched=not_searched,
    )
    model = cpu_copy(trainer.model)
    _check(loop, model, train, val)
    train_set, val_set, notes = trainer_data(
        train, val, planned_samples=samples, passes=passes, seed=seed,
        names=("train_dataset", "eval_dataset"),
    )  # fmt: skip
    workload = Workload(
        model=model,
        train=train_set,
        val=val_set,
        task=logged_task(name, choice.higher_is_better, loop.parts.get("data_collator")),
        longest=longest_items(train_set, seed=seed),
        eval_batch_size=int(args.per_device_eval_batch_size),
        loop=loop,
    )  # fmt: skip
    refs = TaskRefs.from_dict({"metric": name, "higher_is_better": choice.higher_is_better})
    notes.insert(0, f"trainer: every trial runs your {type(trainer).__name__}'s own training loop")
    prepared = Prepared(
        workload=workload, stratified=False, refs=refs, metric=choice, note="; ".join(notes),
        data_fingerprint=data_fingerprint(train, val),
    )  # fmt: skip
    # A stream's run is its planned samples, its passes counted from them (see make_stream).
    epochs = None if is_stream(train) else _planned_epochs(args, len(train))
    return SearchStart(prepared, _baseline(args, loop), epochs)


def _said(args: Any, name: str) -> Said | None:
    """What the user's ``TrainingArguments`` say of ``name``'s direction: ``greater_is_better``
    where ``metric_for_best_model`` is that metric."""
    best = args.metric_for_best_model
    if not best or _metric_name(best) != name or args.greater_is_better is None:
        return None
    if bool(args.greater_is_better) == (not best.endswith("loss")):
        return None  # what TrainingArguments fills in by itself: not a word of the user's
    where = (
        f"your TrainingArguments(metric_for_best_model={best!r}, "
        f"greater_is_better={bool(args.greater_is_better)!r})"
    )
    return Said(higher_is_better=bool(args.greater_is_better), where=where)


def _metric_name(name: str) -> str:
    """A key of ``trainer.evaluate()``: Hugging Face prefixes its metrics with ``eval_``."""
    return name if name.startswith("eval_") else f"eval_{name}"


def _users(callback: Any) -> bool:
    """A callback the user gave (not one every Trainer makes, nor a report_to integration)."""
    cls = type(callback)
    return cls.__name__ not in _OWN_CALLBACKS and not cls.__module__.startswith(
        "transformers.integrations"
    )


def _not_searched(trainer: Any, args: TrainingArguments) -> dict[str, str]:
    out = {"lr_schedule": f"your lr_scheduler_type ({_value(args.lr_scheduler_type)}) is kept"}
    # A change to the model with no TrainingArguments field: the Trainer builds the model's
    # wrappers itself.
    for knob in registry.knobs_where(Where.MODEL):
        if not knob.maps_to_transformers:
            out[knob.name] = "not a TrainingArguments field"
    if str(_value(args.optim)) not in _OPTIMIZERS:
        out["optimizer_impl"] = f"your optim ({_value(args.optim)}) is kept"
    if not getattr(trainer.model, "supports_gradient_checkpointing", False):
        out["checkpointing"] = "the model does not support gradient checkpointing"
    if _warmup(args) is None:
        out["warmup_fraction"] = f"your warm-up of {args.warmup_steps} steps is kept"
    return out


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def _warmup(args: TrainingArguments) -> float | None:
    """The warm-up as a share of the run, where the arguments give it as one (or none)."""
    ratio = getattr(args, "warmup_ratio", None)
    if ratio:
        return float(ratio)
    steps = args.warmup_steps
    if not steps:
        return 0.0
    return float(steps) if 0 < steps < 1 else None


def _baseline(args: TrainingArguments, loop: HFLoop) -> TrainingConfig:
    precision = Precision.FP32
    if args.bf16:
        precision = Precision.BF16
    elif args.fp16:
        precision = Precision.FP16
    elif args.tf32 is True:
        precision = Precision.TF32
    elif args.tf32 is False:
        precision = Precision.FP32_STRICT
    workers = int(args.dataloader_num_workers)
    device = str(args.device)
    device = "cuda:0" if device == "cuda" else device
    compiled = bool(args.torch_compile)
    mode = args.torch_compile_mode or "default"
    return TrainingConfig(
        device=device,
        batch_size=int(args.per_device_train_batch_size),
        gradient_accumulation_steps=int(args.gradient_accumulation_steps),
        num_workers=workers,
        persistent_workers=bool(args.dataloader_persistent_workers) and workers > 0,
        prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
        pin_memory=bool(args.dataloader_pin_memory) and not device.startswith("cpu"),
        precision=precision,
        optimizer_impl=_OPTIMIZERS.get(str(_value(args.optim)), OptimizerImpl.DEFAULT),
        compile_mode=CompileMode(mode) if compiled else CompileMode.NONE,
        checkpointing=1 if args.gradient_checkpointing else 0,
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        lr_schedule=LRSchedule(
            kind=ScheduleKind.TRAINER,
            peak_lr=float(args.learning_rate),
            warmup_fraction=_warmup(args) or 0.0,
        ),
    )


def _planned_epochs(args: TrainingArguments, n_train: int) -> float:
    if args.max_steps and args.max_steps > 0:
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        return float(args.max_steps * per_step) / max(1, n_train)
    return float(args.num_train_epochs)


def _stream_run(
    args: TrainingArguments, train: Any, given: int | None, passes: float | None
) -> tuple[int | None, float | None]:
    """(the samples a run over a training stream reads, or its passes over it): ``given`` or
    ``passes`` (the options'), else the arguments' ``max_steps`` optimizer steps of the
    baseline's global batch (the Trainer reads the stream again from its start where they
    outrun it), else their ``num_train_epochs`` passes of a stream with a length. (None,
    None) for a map-style set."""
    if not is_stream(train):
        return None, None
    if given is not None or passes is not None:
        return given, passes
    if args.max_steps and args.max_steps > 0:
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        return int(args.max_steps * per_step), None
    if stream_length(train) is None:
        raise DataError(
            f"Your Trainer's train_dataset is a stream ({type(train).__name__}) with no length "
            "and its TrainingArguments set no max_steps: set max_steps (the optimizer steps of "
            "your run), or pass SearchOptions(planned_samples=N)."
        )
    return None, float(args.num_train_epochs)


def _check(loop: HFLoop, model: Any, train: Any, val: Any) -> None:
    """One training step and one evaluation batch of 2 items on the CPU, through a trainer of
    the user's class with their collator, loss and ``compute_metrics``: and the metric is
    there."""
    cfg = TrainingConfig(
        device="cpu", batch_size=2,
        lr_schedule=LRSchedule(kind=ScheduleKind.TRAINER, peak_lr=float(loop.args.learning_rate)),
    )  # fmt: skip
    small = dataclasses.replace(
        loop, args=dataclasses.replace(loop.args, per_device_eval_batch_size=2)
    )
    work = check_workload(model, train, val, small)
    name = loop.trainer_class.__name__
    with contextlib.ExitStack() as trial:  # the trainer's output directory, removed after
        try:
            step(
                f"one training step of your {name} (train() on its first batch: 2 training items, "
                "on the CPU)",
                RUN_HINT,
            )
            trainer = trial.enter_context(
                small.trainer(cfg, work, work.train, None, max_steps=1, seed=0)
            )
            trainer.train()
        except TypeError as exc:
            if "__init__" in str(exc):
                raise ArgumentError(
                    f"autotune builds a fresh {loop.trainer_class.__name__} per trial with "
                    f"Trainer's own arguments, and its __init__ refused them: {exc}. Give its "
                    "extra arguments defaults."
                ) from exc
            raise ModelError(f"Your Trainer failed a training step on 2 items: {exc}") from exc
        except Exception as exc:
            raise ModelError(
                "Your Trainer failed a training step on 2 training items: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        try:
            step(f"your {name}'s evaluate() on its first batch (2 items, on the CPU)", RUN_HINT)
            small.evaluate(trainer, work.val)
        except DataError:
            raise
        except Exception as exc:
            raise ModelError(
                f"Your Trainer's evaluation failed on 2 items: {type(exc).__name__}: {exc}"
            ) from exc

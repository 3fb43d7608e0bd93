"""The workload a verify run measures: the user's model and data as the search prepared them,
or the trainer's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune._errors import ArgumentError
from autotune._knobs.config import TrainingConfig
from autotune._task import Task, check_model
from autotune._trial.workload import Workload, prepare_workload

__all__ = ["check_entry", "own_workload", "trainer_workload"]


def own_workload(
    data: Mapping[str, Any],
    model: Any,
    dataset: Any,
    val_dataset: Any,
    task: Task,
    baseline: TrainingConfig,
    report: Callable[[str], None],
) -> Workload:
    """The workload of a find_best result: the split find_best made, so that an accuracy
    check validates on the same items, in the search's validation batches (a result from
    before they were fixed: the baseline's)."""
    search = data.get("search") or {}
    prepared = prepare_workload(
        model,
        dataset,
        val_dataset,
        task,
        val_fraction=float(search.get("val_fraction") or 0.1),
        seed=int(search.get("seed") or 0),
        eval_batch_size=int(
            (data.get("validation") or {}).get("batch_size") or baseline.batch_size
        ),
        planned_samples=(data.get("metrics") or {}).get("planned_samples"),  # a stream's run
        search_workers=False,
    )
    if prepared.note:
        report(prepared.note)
    return prepared.workload


def check_entry(data: Mapping[str, Any], model: Any, trainer: Any, task: Any) -> str | None:
    """What the result was searched through (a trainer's kind, None for find_best), checked
    against what was passed."""
    kind: str | None = (data.get("trainer") or {}).get("kind")
    if trainer is not None and task is not None:
        raise ArgumentError(
            "`task` does not apply with `trainer`: the trainer's own training step and "
            "evaluation are measured, guarding the metric the search guarded."
        )
    if trainer is None:
        if kind:
            raise ArgumentError(
                f"This result was measured through your {kind} trainer (autotune.tune): pass "
                "it, as tune took it (verify(result, trainer=...); --trainer FACTORY), and "
                "verify measures both configs through it."
            )
        check_model(model)
    return kind


def trainer_workload(
    data: Mapping[str, Any],
    kind: str | None,
    trainer: Any,
    model: Any,
    dataset: Any,
    val_dataset: Any,
) -> Workload:
    """The workload a :func:`autotune.tune` result was searched on: the user's trainer, its
    module and data (Lightning) or what it holds (Hugging Face), guarding the same metric."""
    from autotune._tune import trainer_kind

    given = trainer_kind(trainer)
    if given is None or not kind:
        raise ArgumentError(
            f"`trainer` is a {type(trainer).__name__}, but "
            + (
                f"this result was searched through a {kind} trainer."
                if kind
                else "this result was searched with find_best (autotune's own loop): pass "
                "the model and dataset instead."
            )
        )
    if given != kind:
        raise ArgumentError(
            f"`trainer` is a {given} trainer, but this result was searched through a {kind} one."
        )
    validation = data.get("validation") or {}
    metric, higher = validation.get("metric"), validation.get("higher_is_better")
    search = data.get("search") or {}
    seed = int(search.get("seed") or 0)
    # A stream's run as it was searched (the trainer's max_steps, or the options' samples).
    streamed = (data.get("metrics") or {}).get("planned_samples") if search.get("streams") else None
    samples = None if streamed is None else int(streamed)
    if kind == "lightning":
        from autotune._trial.lightning_setup import prepare_lightning

        datamodule = dataset if hasattr(dataset, "train_dataloader") else None
        start = prepare_lightning(
            trainer, model, datamodule=datamodule,
            train_dataloaders=None if datamodule is not None else dataset,
            val_dataloaders=val_dataset, metric=metric, higher_is_better=higher, seed=seed,
            planned_samples=samples,
        )  # fmt: skip
    else:
        if model is not None or dataset is not None:
            raise ArgumentError(
                "A Hugging Face Trainer holds its model and data: leave out the model and "
                "dataset (verify(result, trainer=trainer))."
            )
        from autotune._trial.hf_setup import prepare_hf

        start = prepare_hf(
            trainer, metric=metric, higher_is_better=higher, seed=seed, planned_samples=samples
        )
    return start.prepared.workload

"""The public entry point for the trainer you already have: ``autotune.tune``.

A Lightning ``Trainer`` with its ``LightningModule`` (and a data module or loaders, as
``Trainer.fit`` takes them), or a Hugging Face ``Trainer``: every trial runs that trainer's own
loop (``fit`` / ``train``) with the candidate's settings applied the way the export applies
them, and the guarded metric is one that trainer's evaluation reports. The search itself is the
one ``find_best`` runs (:func:`autotune._run.run_search`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from autotune._errors import ArgumentError
from autotune._options import TOLERANCE, SearchOptions, as_options
from autotune._result.result import SearchResult
from autotune._run import check_limits, keeps_callers_rng, search
from autotune._space import SearchSpace
from autotune._trial.workload import SearchStart

__all__ = ["trainer_kind", "tune"]


def trainer_kind(trainer: Any) -> str | None:
    """``lightning``, ``transformers`` or None, from the trainer's class (neither library is
    imported for anything else)."""
    for cls in type(trainer).__mro__:
        module = cls.__module__
        if cls.__name__ == "Trainer" and module.startswith("lightning.pytorch"):
            return "lightning"
        if cls.__name__ == "Trainer" and module.startswith("transformers"):
            return "transformers"
        if cls.__name__ == "Trainer" and module.startswith("pytorch_lightning"):
            raise TypeError(
                "`trainer` is a pytorch_lightning.Trainer: autotune tunes lightning.pytorch "
                "(`pip install lightning`; `import lightning.pytorch as pl`)."
            )
    return None


@keeps_callers_rng
def tune(
    trainer: Any,
    model: Any = None,
    *,
    datamodule: Any = None,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    metric: str | None = None,
    higher_is_better: bool | None = None,
    tolerance: float = TOLERANCE,
    timeout: float | None = None,
    space: str | SearchSpace | Mapping[str, Any] = "default",
    progress: bool | Callable[[str], None] = False,
    options: SearchOptions | None = None,
) -> SearchResult:
    """Find the fastest settings for the trainer you already have, measured by its own loop.

    **Lightning**: ``tune(trainer, module, datamodule=dm)`` (or ``train_dataloaders=`` and
    ``val_dataloaders=``), as ``trainer.fit`` takes them. Each trial is a short ``trainer.fit``
    of a fresh copy of ``module``: your ``training_step``, ``configure_optimizers`` and
    callbacks run, with the candidate's ``Trainer`` arguments (precision,
    ``accumulate_grad_batches``, ``benchmark``), ``DataLoader`` arguments (batch size, workers,
    pinning, prefetch) and ``cfg.prepare(module)`` (compile, channels_last, checkpointing); a
    batch change scales your optimizer's learning rates. The guarded metric is what your
    ``validation_step`` logs: ``metric="val_acc"`` (default: what your checkpoint callback
    monitors, else ``val_loss``).

    **Hugging Face**: ``tune(hf_trainer)``. Each trial is a short ``trainer.train()`` of a
    fresh model (``model_init``, or a copy of the trainer's) with candidate
    ``TrainingArguments`` (batch size, accumulation, bf16/fp16/tf32, loader workers, pinning,
    prefetch, ``torch_compile``, gradient checkpointing, the fused optimizer, the learning
    rate and warm-up); evaluation memory is part of every throughput trial. The guarded metric
    is ``eval_loss`` or a key of your ``compute_metrics`` (``metric="eval_accuracy"``;
    default: ``metric_for_best_model``, else ``eval_loss``).

    ``higher_is_better`` says the metric's direction where its name does not (a name with
    "loss" or "error" is lower-is-better, one with "acc" or "f1" higher). The run the
    candidates are ranked for is your trainer's (``max_epochs`` / ``num_train_epochs``) unless
    ``options.planned_epochs`` says otherwise.

    **Streams**: training data that streams (a torch ``IterableDataset``, such as a Hugging
    Face dataset loaded with ``streaming=True``) is read by every trial from its start with the
    trial's loader settings. Its run is its planned samples, over as many passes as they
    take (each pass reads the stream again from its start, as your trainer does):
    ``options.planned_samples`` (or ``options.planned_epochs`` passes) where given, else your
    trainer's ``max_steps`` x its batch x accumulation, else its epochs' passes over the
    stream (its length read whole where it has no ``len()``). A validation stream's first
    2,048 items are kept.

    ``tolerance``, ``timeout``, ``space``, ``progress`` and ``options`` are
    :func:`autotune.find_best`'s. The result exports your trainer's settings:
    ``result.trainer_settings()``.
    """
    started = time.time()
    options = as_options(options)
    check_limits(tolerance, timeout)
    if metric is not None and not isinstance(metric, str):
        raise TypeError(f"`metric` must be the name of a logged metric, but got {metric!r}.")
    if options.baseline is not None:
        raise ArgumentError(
            "`options.baseline` is for find_best: with tune, the baseline is your trainer's "
            "own settings."
        )
    kind = trainer_kind(trainer)
    if kind is None:
        raise TypeError(
            f"`trainer` must be a lightning.pytorch.Trainer or a transformers.Trainer, but "
            f"got {type(trainer).__name__}. For a model and datasets, use "
            "autotune.find_best(model, dataset)."
        )
    given = {"model": model, "datamodule": datamodule, "train_dataloaders": train_dataloaders,
             "val_dataloaders": val_dataloaders}  # fmt: skip

    def prepare() -> SearchStart:
        if kind == "lightning":
            from autotune._trial.lightning_setup import prepare_lightning

            return prepare_lightning(
                trainer, model, datamodule=datamodule, train_dataloaders=train_dataloaders,
                val_dataloaders=val_dataloaders, metric=metric,
                higher_is_better=higher_is_better, seed=options.seed,
                planned_samples=options.planned_samples, passes=options.planned_epochs,
            )  # fmt: skip
        extra = [name for name, value in given.items() if value is not None]
        if extra:
            raise ArgumentError(
                f"A Hugging Face Trainer holds its model and data: leave out "
                f"{', '.join(extra)} (tune(trainer, metric=...))."
            )
        from autotune._trial.hf_setup import prepare_hf

        return prepare_hf(
            trainer, metric=metric, higher_is_better=higher_is_better, seed=options.seed,
            planned_samples=options.planned_samples, passes=options.planned_epochs,
        )  # fmt: skip

    return search(
        prepare, space=space, tolerance=tolerance, timeout=timeout, options=options,
        progress=progress, started=started,
    )  # fmt: skip

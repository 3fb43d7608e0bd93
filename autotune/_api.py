"""The public entry point for a model and its datasets: ``autotune.find_best``. It checks every
argument before any trial runs, prepares what every trial trains (:func:`prepare_workload`),
and hands the search to :func:`autotune._run.run_search`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune._device import resolve_device
from autotune._options import TOLERANCE, SearchOptions, as_options
from autotune._result.result import SearchResult
from autotune._run import baseline_config, check_limits, check_ranks, keeps_callers_rng, search
from autotune._space import SearchSpace
from autotune._task import MetricFn, Task, as_task, check_model
from autotune._trial.data import DataModuleLike
from autotune._trial.workload import SearchStart, prepare_workload

__all__ = ["find_best"]


@keeps_callers_rng
def find_best(
    model: nn.Module,
    dataset: Dataset[Any] | DataModuleLike,
    *,
    val_dataset: Dataset[Any] | None = None,
    task: Task | None = None,
    metric: str | MetricFn | None = None,
    tolerance: float = TOLERANCE,
    timeout: float | None = None,
    space: str | SearchSpace | Mapping[str, Any] = "default",
    device: str | torch.device | None = None,
    progress: bool | Callable[[str], None] = False,
    options: SearchOptions | None = None,
) -> SearchResult:
    """Find the fastest training config for ``model`` on ``dataset`` on this machine whose
    validation metric stays within ``tolerance`` of the baseline's.

    ``model`` is never modified: every trial trains a copy of its initial weights. ``task``
    (an :class:`autotune.Task`) says how a batch becomes a loss and a metric where autotune's
    defaults do not fit: by default batches are ``(inputs, targets)`` and the loss is
    cross-entropy (MSE for float targets); dict batches go to a Hugging Face model as its
    ``Trainer`` sends them (``model(**batch)``, the model's own loss).

    ``metric`` (or ``task.metric``) is the guarded metric: ``"auto"`` (the default) chooses it
    once, from a batch: the model's own loss where it computes one from ``labels``, accuracy
    for (batch, classes) logits against (batch,) labels, the loss otherwise. Or ``"accuracy"``,
    ``"loss"``, ``"token_accuracy"`` (labels -100 skipped, shifted for a causal LM) or
    ``metric(outputs, targets) -> float`` (``Task(higher_is_better=...)`` says its direction).
    The result says which metric and why. ``dataset`` may be a ``LightningDataModule``: its
    datasets and collate function are used (its DataLoader settings are what autotune tunes);
    a ``LightningModule`` with its ``Trainer`` goes through :func:`autotune.tune`.

    The search stops after ``timeout`` seconds (10 minutes when neither it nor
    ``options.n_trials`` is given); ``space`` is a built-in space's name, a space file or a
    dict; ``device`` defaults to the best available. ``progress=True`` shows a live display
    (or pass a function that takes each line). Everything else (trial count, planned run,
    storage and study, sampler, isolation, trial limit, accuracy budget, baseline, workers) is
    in ``options``: see :class:`autotune.SearchOptions`.
    """
    started = time.time()
    check_model(model)
    _refuse_lightning_module(model)
    task = as_task(task, metric)
    options = as_options(options)
    check_limits(tolerance, timeout)
    device_str = resolve_device(device)
    check_ranks(options.ranks, device_str)
    if options.ranks > 1 and device_str.startswith("cuda"):
        # Each rank trains on its own GPU: "cuda", the current device of the rank (rank i on
        # cuda:i in the trials; torch.cuda.set_device(local_rank) in the user's torchrun).
        device_str = "cuda"
    baseline = baseline_config(options.baseline, device_str).replace(ranks=options.ranks)

    def prepare() -> SearchStart:
        prepared = prepare_workload(
            model,
            dataset,
            val_dataset,
            task,
            val_fraction=options.val_fraction,
            seed=options.seed,
            eval_batch_size=baseline.batch_size,  # every candidate validates in the same batches
            planned_samples=options.planned_samples,
            planned_epochs=options.planned_epochs,  # a stream's passes (a dataset's: the run's)
        )
        return SearchStart(prepared, baseline)

    return search(
        prepare, space=space, tolerance=tolerance, timeout=timeout, options=options,
        progress=progress, started=started,
    )  # fmt: skip


def _refuse_lightning_module(model: nn.Module) -> None:
    """A LightningModule trains through its own training_step and optimizers: measuring
    ``model(x)`` with autotune's default loss would guard and time another training."""
    if any(cls.__name__ == "LightningModule" for cls in type(model).__mro__):
        raise TypeError(
            f"`model` is a LightningModule ({type(model).__name__}): find_best would train "
            "`model(inputs)` with its own loss and optimizer, not your training_step and "
            "configure_optimizers. Tune it through your Trainer instead: "
            "autotune.tune(trainer, model, datamodule=...) (or train_dataloaders=, "
            "val_dataloaders=), whose trials run trainer.fit."
        )

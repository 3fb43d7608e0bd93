"""What every trial trains: a pristine copy of the user's model, the data, and the task."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from torch import nn
from torch.utils.data import Dataset

from autotune._trial.task import (
    Hooks,
    OptimizerFactory,
    Task,
    check_model_consumes,
    checked_task,
    default_optimizer,
    split_dataset,
)

__all__ = ["Prepared", "Workload", "prepare_workload"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """What every trial trains: a pristine copy of the model and the data."""

    model: nn.Module
    train: Dataset[Any]
    val: Dataset[Any]
    task: Task
    optimizer: OptimizerFactory = default_optimizer


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The workload, and whether the validation split kept the label proportions."""

    workload: Workload
    stratified: bool


def prepare_workload(
    model: nn.Module,
    dataset: Dataset[Any],
    val_dataset: Dataset[Any] | None,
    hooks: Hooks,
    *,
    val_fraction: float,
    seed: int,
) -> Prepared:
    """The task from the hooks, the datasets checked (and split, without a validation set),
    the model checked against a batch and copied once: the caller's is never touched again."""
    task = checked_task(dataset, val_dataset, hooks)
    if val_dataset is not None:
        train, val, stratified = dataset, val_dataset, False
    else:
        train, val, stratified = split_dataset(dataset, task, val_fraction=val_fraction, seed=seed)
    check_model_consumes(model, train, task)
    template = copy.deepcopy(model).cpu()
    workload = Workload(
        model=template, train=train, val=val, task=task, optimizer=hooks.optimizer_factory()
    )
    return Prepared(workload=workload, stratified=stratified)

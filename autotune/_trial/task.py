"""The user's task: how a batch becomes a loss and a validation metric, and the data checks.

By default a batch is ``(inputs, targets)`` (or a dict given to the model as ``model(**batch)``),
the loss is the model's own or cross-entropy (MSE for float targets), and the metric is chosen
from a batch at set-up (``metric="auto"``, :mod:`autotune._trial.metrics`). Other batch
structures work through a ``forward(model, batch) -> (outputs, targets)`` hook;
``loss_fn(outputs, targets)`` and a callable ``metric(outputs, targets)`` then see whatever that
hook returns.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import Dataset, Subset, default_collate

from autotune._errors import DataError, ModelError
from autotune._knobs.apply import to_device
from autotune._stream import is_stream
from autotune._task import ForwardFn, LossFn, MetricFn, Task
from autotune._trial.bounded import ITEM_HINT, RUN_HINT, step
from autotune._trial.direction import callable_direction
from autotune._trial.metrics import (
    AUTO,
    BUILTIN_METRICS,
    GIVEN,
    MetricChoice,
    accuracy_rows,
    batch_items,
    choose_metric,
    describe_output,
    is_causal_lm,
    label_items,
    logits_of,
    own_loss,
    token_accuracy_rows,
)
from autotune._trial.streaming import first_items

__all__ = [
    "METRIC_CHOICES",
    "ResolvedTask",
    "SetUp",
    "check_dataset",
    "check_model_consumes",
    "checked_task",
    "cpu_copy",
    "default_optimizer",
    "holds_device_tensors",
    "logged_task",
    "make_task",
    "set_up_task",
    "split_dataset",
]

CALLABLE = "callable"  # ResolvedTask.metric of a metric function of yours
LOGGED = "logged"  # ResolvedTask.metric of a metric the user's own trainer reports
METRIC_CHOICES = (AUTO, *BUILTIN_METRICS)


def default_optimizer(
    params: Iterable[nn.Parameter], lr: float, **impl: Any
) -> torch.optim.Optimizer:
    """torch's AdamW; ``impl`` is ``foreach=True`` or ``fused=True`` where the optimizer
    implementation knob says (a factory of your own takes them the same way, or is left at
    torch's default implementation)."""
    return torch.optim.AdamW(params, lr=lr, **impl)


def default_forward(model: nn.Module, batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` pairs: ``model(inputs)``. Mappings, as Hugging Face's ``Trainer``
    does: ``model(**batch)``, the targets under ``labels``."""
    if isinstance(batch, Mapping):
        return model(**batch), batch.get("labels")
    inputs, targets = batch
    return model(inputs), targets


def default_loss(outputs: Any, targets: Any) -> torch.Tensor:
    """The model's own loss where it computed one (a Hugging Face model given ``labels``);
    otherwise cross-entropy on the logits (MSE for float targets)."""
    own = own_loss(outputs)
    if own is not None:
        return own
    logits = logits_of(outputs)
    if targets is None:
        raise ModelError(
            f"The batch has no targets for the model's output, a {describe_output(outputs)}: "
            "put them under `labels` (as Hugging Face's Trainer expects), or pass loss_fn=."
        )
    if isinstance(targets, torch.Tensor) and targets.is_floating_point():
        return F.mse_loss(logits.float(), targets)
    if logits.dim() > 2:  # per-position logits (batch, ..., classes), as a language model's
        return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten())
    return F.cross_entropy(logits.float(), targets)


@dataclasses.dataclass(frozen=True)
class ResolvedTask:
    """A :class:`~autotune.Task` with its defaults filled in: how one batch is turned into a
    loss and a metric. ``metric`` is the builtin metric (``accuracy``, ``loss``,
    ``token_accuracy``), ``callable`` for ``metric_fn`` (yours), or ``auto`` until
    :func:`set_up_task` chooses from a batch."""

    forward: ForwardFn
    loss_fn: LossFn
    metric_fn: MetricFn | None  # yours; None for a builtin metric
    metric_name: str
    higher_is_better: bool
    collate_fn: Callable[[list[Any]], Any] | None = None
    metric: str = CALLABLE
    causal_lm: bool = False  # a causal LM: its position t predicts label t + 1
    direction_reason: str = GIVEN  # why higher_is_better is what it is

    def is_default_batch(self) -> bool:
        return self.forward is default_forward

    def metric_sum(self, outputs: Any, targets: Any) -> tuple[float, int]:
        """The batch's metric as (sum over its items, items counted): the validation metric
        is the sum over all batches over the count, whatever the batches' sizes. A metric of
        yours (a value per batch) is weighted by the batch's items."""
        sums, counts = self.metric_units(outputs, targets)
        return float(sum(sums)), int(sum(counts))

    def metric_units(
        self, outputs: Any, targets: Any
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The batch's metric as (sum, items counted) per *unit*: per example (row) for the
        accuracies, whose items are counts of correct predictions; the whole batch as one unit
        for a loss or a metric of yours. The units are what the accuracy guard pairs example
        by example between two configs (the validation batches are the same for every
        config), to bound the validation sample's own noise."""
        if self.metric in ("accuracy", "token_accuracy"):
            if self.metric == "accuracy":
                correct, counted = accuracy_rows(outputs, targets)
            else:
                correct, counted = token_accuracy_rows(outputs, targets, causal_lm=self.causal_lm)
            return (
                tuple(float(v) for v in correct.tolist()),
                tuple(float(v) for v in counted.tolist()),
            )
        value, n = self._batch_metric(outputs, targets)
        return (value,), (float(n),)

    def _batch_metric(self, outputs: Any, targets: Any) -> tuple[float, int]:
        if self.metric == "loss":
            loss = float(self.loss_fn(outputs, targets))
            if self.loss_fn is default_loss:  # a mean over the label items it counts
                n = label_items(targets, causal_lm=self.causal_lm)
            else:
                n = batch_items(targets)
            return loss * n, n
        if self.metric_fn is None:
            raise RuntimeError(
                f"The task's metric is {self.metric!r}: set_up_task() chooses it from a batch "
                "before any batch is evaluated."
            )
        n = batch_items(targets)
        return float(self.metric_fn(outputs, targets)) * n, n


def logged_task(name: str, higher_is_better: bool, collate_fn: Any = None) -> ResolvedTask:
    """The task of a search through the user's own trainer: its loop computes the loss, its
    evaluation reports the metric ``name``; the hooks are autotune's defaults, unused."""
    return ResolvedTask(
        forward=default_forward,
        loss_fn=default_loss,
        metric_fn=None,
        metric_name=name,
        higher_is_better=higher_is_better,
        collate_fn=collate_fn,
        metric=LOGGED,
    )


def make_task(task: Task, *, causal_lm: bool = False) -> ResolvedTask:
    """``task`` with autotune's defaults where it leaves a hook out."""
    metric_fn: MetricFn | None = None
    reason = GIVEN
    if isinstance(task.metric, str):
        kind = name = task.metric
        higher = BUILTIN_METRICS.get(kind, True)
    else:
        metric_fn, kind = task.metric, CALLABLE
        direction = callable_direction(task.metric, task.higher_is_better)
        higher, reason = direction.higher_is_better, direction.reason
        name = "metric"  # a function's name (`<lambda>`, `loss_metric`) reads badly in a report
    return ResolvedTask(
        forward=task.forward if task.forward is not None else default_forward,
        loss_fn=task.loss_fn if task.loss_fn is not None else default_loss,
        metric_fn=metric_fn,
        metric_name=task.metric_name.strip() if task.metric_name else name,
        higher_is_better=higher,
        collate_fn=task.collate_fn,
        metric=kind,
        causal_lm=causal_lm,
        direction_reason=reason,
    )


def check_dataset(dataset: Any, task: ResolvedTask, *, argument: str = "dataset") -> None:
    """Fail fast, naming the problem, on a dataset that no trial could use: a map-style dataset
    (``__len__`` and ``__getitem__``) or a stream (an ``IterableDataset``), whose first item is
    what a batch of the task is made of."""
    if is_stream(dataset):
        items = first_items(dataset, 1, argument=argument)
        if not items:
            raise DataError(f"`{argument}` is a stream that gave no items.")
        if task.is_default_batch() and task.collate_fn is None:
            _check_item(items[0], f"the first item of `{argument}`")
        return
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise DataError(
            f"`{argument}` must be a torch Dataset: map-style (with __len__ and __getitem__) or "
            f"an IterableDataset, but got {type(dataset).__name__}."
        )
    n = len(dataset)
    if n == 0:
        raise DataError(f"`{argument}` is empty (len 0); give it at least a few batches of data.")
    if task.is_default_batch() and task.collate_fn is None:
        step(f"the first item, `{argument}[0]` ({_name(type(dataset))}.__getitem__)", ITEM_HINT)
        _check_item(dataset[0], f"`{argument}[0]`")


def _check_item(item: Any, shown_as: str) -> None:
    """An item the default batch takes: an (inputs, targets) pair, or a dict with labels."""
    if isinstance(item, Mapping):
        if "labels" not in item:
            raise DataError(
                f"{shown_as} is a dict with keys {sorted(item)} but no `labels`: "
                "autotune calls model(**batch) as Hugging Face's Trainer does and reads the "
                "targets from `labels`. Rename the key, or pass forward=lambda model, batch: "
                "(outputs, targets) (and a loss_fn/metric that understand them)."
            )
        return
    if not (isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2):
        shown = type(item).__name__
        if isinstance(item, Sequence):
            shown = f"{type(item).__name__} of length {len(item)}"
        raise DataError(
            f"{shown_as} must be an (inputs, targets) pair, but got a {shown}. "
            "For other item structures pass forward=lambda model, batch: (outputs, targets) "
            "(and a loss_fn/metric that understand them)."
        )


def checked_task(
    dataset: Any, val_dataset: Any | None, task: Task, *, causal_lm: bool = False
) -> ResolvedTask:
    """The task resolved, with the dataset (and validation set) checked against it."""
    resolved = make_task(task, causal_lm=causal_lm)
    check_dataset(dataset, resolved)
    if val_dataset is not None:
        check_dataset(val_dataset, resolved, argument="val_dataset")
    return resolved


def _metric_step(task: ResolvedTask) -> str:
    if task.metric_fn is not None:
        return f"your metric {_name(task.metric_fn)} on the first batch's outputs"
    if task.metric == AUTO:
        return "the metric chosen from the first batch's outputs (metric='auto')"
    return f"the {task.metric} of the first batch's outputs"


def _name(fn: Any) -> str:
    """A function's or class's name as its code says it (``Net.forward``, ``default_collate``)."""
    return str(getattr(fn, "__qualname__", None) or type(fn).__qualname__)


def describe_batch(batch: Any) -> str:
    """Shapes and dtypes of the tensors in a batch, for error messages."""
    if isinstance(batch, torch.Tensor):
        return f"tensor{tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}"
    if isinstance(batch, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe_batch(v)}" for k, v in batch.items()) + "}"
    if isinstance(batch, list | tuple):
        return "(" + ", ".join(describe_batch(v) for v in batch) + ")"
    return type(batch).__name__


def cpu_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` on the CPU, made without a second copy where it lives: a model
    already on the GPU is not doubled in GPU memory (its tensors are copied straight to the
    CPU; gradients are not copied)."""
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        if tensor.device.type != "cpu" and id(tensor) not in memo:
            clone = tensor.detach().to("cpu", copy=True)
            if isinstance(tensor, nn.Parameter):
                clone = nn.Parameter(clone, requires_grad=tensor.requires_grad)
            memo[id(tensor)] = clone
    return copy.deepcopy(model, memo)


def holds_device_tensors(item: Any) -> bool:
    """Whether a dataset item (or batch) holds tensors that are not in CPU memory."""
    if isinstance(item, torch.Tensor):
        return item.device.type != "cpu"
    if isinstance(item, Mapping):
        return any(holds_device_tensors(v) for v in item.values())
    if isinstance(item, list | tuple):
        return any(holds_device_tensors(v) for v in item)
    return False


@dataclasses.dataclass(frozen=True)
class SetUp:
    """The resolved task a search (or a training run) uses, the task as given with
    ``metric="auto"`` replaced by the metric chosen (what other processes load), and the
    choice with its reason."""

    resolved: ResolvedTask
    task: Task
    choice: MetricChoice


def set_up_task(
    model: nn.Module, dataset: Dataset[Any], val_dataset: Dataset[Any] | None, task: Task
) -> SetUp:
    """The task resolved, the datasets checked, a batch of ``dataset`` run through a CPU copy
    of the model, and ``metric="auto"`` resolved from it, once."""
    causal = is_causal_lm(model)
    resolved = checked_task(dataset, val_dataset, task, causal_lm=causal)
    choice = check_model_consumes(model, dataset, resolved)
    if resolved.metric == AUTO:
        task.check_choice(choice.metric, choice.higher_is_better)
        task = task.replace(metric=choice.metric, higher_is_better=None)
        resolved = make_task(task, causal_lm=causal)
    return SetUp(resolved=resolved, task=task, choice=choice)


def _choice(task: ResolvedTask, outputs: Any, targets: Any) -> MetricChoice:
    if task.metric == AUTO:
        return choose_metric(outputs, targets, default_loss=task.loss_fn is default_loss)
    return MetricChoice(
        metric=task.metric, higher_is_better=task.higher_is_better, reason=task.direction_reason
    )


def check_model_consumes(
    model: nn.Module, dataset: Dataset[Any], task: ResolvedTask
) -> MetricChoice:
    """Run one tiny batch through a CPU copy of the model (wherever the model and the data
    are: a model already on the GPU is accepted); report shapes if it cannot consume it.
    Returns the metric the task guards (chosen from this batch for ``metric="auto"``)."""
    collate = task.collate_fn or default_collate
    n, first = 2, "items 0 and 1"
    try:
        if is_stream(dataset):
            items = first_items(dataset, 2)
        else:
            items = []
            for i in range(min(2, len(dataset))):  # type: ignore[arg-type]
                step(
                    f"item {i} of the first batch, `dataset[{i}]` "
                    f"({_name(type(dataset))}.__getitem__)",
                    ITEM_HINT,
                )
                items.append(dataset[i])
        n = len(items)
        first = "item 0" if n == 1 else "items 0 and 1"
        step(
            f"the collate function {_name(collate)} on the first batch ({first})",
            "Call it alone on those items to see it return.",
        )
        batch = to_device(collate(items), "cpu")
    except Exception as exc:
        raise DataError(
            f"The first {n} items of the dataset cannot be collated into a batch: "
            f"{type(exc).__name__}: {exc}. Pass collate_fn= (--collate on the command line) "
            "to build batches yourself."
        ) from exc
    step(
        "the model's copy for its first forward (copy.deepcopy)", "Copy it alone to see it return."
    )
    probe = cpu_copy(model).eval()  # eval: BatchNorm takes a batch of one too
    try:
        with torch.no_grad():
            step(
                f"the model's first forward ({_name(task.forward)} with "
                f"{_name(type(model))}, on the first batch: {first}, on the CPU)",
                RUN_HINT,
            )
            outputs, targets = task.forward(probe, batch)
            step(f"the loss {_name(task.loss_fn)} on the first batch's outputs", RUN_HINT)
            loss = task.loss_fn(outputs, targets)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ModelError(
                    f"The loss must be a scalar tensor, but got {describe_batch(loss)}. "
                    "Check loss_fn (it should reduce over the batch)."
                )
            step(_metric_step(task), RUN_HINT)
            choice = _choice(task, outputs, targets)
            dataclasses.replace(task, metric=choice.metric).metric_sum(outputs, targets)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(
            f"The model cannot consume the dataset's batches: on a batch of {n} items "
            f"{describe_batch(batch)} it raised {type(exc).__name__}: {exc}. Check that the "
            "model's input shape matches the dataset's items, or pass forward=/loss_fn=."
        ) from exc
    return choice


def labels_of(
    dataset: Dataset[Any], task: ResolvedTask, *, limit: int = 200_000
) -> list[int] | None:
    """Integer class labels for a stratified split, where they can be had cheaply."""
    for attr in ("targets", "labels"):
        labels = getattr(dataset, attr, None)
        if labels is not None:
            try:
                values = [int(v) for v in labels]
            except (TypeError, ValueError):
                return None
            return values if len(values) == len(dataset) else None  # type: ignore[arg-type]
    if not task.is_default_batch() or len(dataset) > limit:  # type: ignore[arg-type]
        return None
    out: list[int] = []
    for i in range(len(dataset)):  # type: ignore[arg-type]
        step(f"`dataset[{i}]`, read for its label (the stratified validation split)", ITEM_HINT)
        item = dataset[i]
        target = item.get("labels") if isinstance(item, Mapping) else item[1]
        if isinstance(target, torch.Tensor):
            if target.numel() != 1 or target.is_floating_point():
                return None
            target = int(target.item())
        if isinstance(target, bool) or not isinstance(target, int):
            return None
        out.append(target)
    return out


def split_dataset(
    dataset: Dataset[Any], task: ResolvedTask, *, val_fraction: float, seed: int
) -> tuple[Subset[Any], Subset[Any], bool]:
    """Hold out ``val_fraction`` of ``dataset``; stratified by label where labels allow.

    Returns (train, val, stratified).
    """
    n = len(dataset)  # type: ignore[arg-type]
    if n < 4:
        raise DataError(
            f"`dataset` has {n} items, too few to hold out a validation split; "
            "pass val_dataset= or use more data."
        )
    indices = list(range(n))
    labels = labels_of(dataset, task)
    stratify = None
    if labels is not None:
        counts: dict[int, int] = {}
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
        n_val = max(1, round(val_fraction * n))
        if min(counts.values()) >= 2 and n_val >= len(counts):
            stratify = labels
    train_idx, val_idx = train_test_split(
        indices, test_size=val_fraction, random_state=seed, stratify=stratify
    )
    return Subset(dataset, train_idx), Subset(dataset, val_idx), stratify is not None

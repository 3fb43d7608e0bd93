"""The user's task: how a batch becomes a loss and a validation metric, and the data checks.

By default a batch is ``(inputs, targets)``, the loss is cross-entropy (MSE for float targets) and
the metric is accuracy. Other batch structures (dicts, as Hugging Face models take) work through a
``forward(model, batch) -> (outputs, targets)`` hook; ``loss_fn(outputs, targets)`` and a callable
``metric(outputs, targets)`` then see whatever that hook returns.
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
from torch.utils.data import Dataset, IterableDataset, Subset, default_collate

from autotune import _refs
from autotune._errors import ArgumentError, DataError, ModelError
from autotune._trial.apply import to_device

__all__ = [
    "HookRefs",
    "Hooks",
    "Task",
    "check_dataset",
    "check_model_consumes",
    "checked_task",
    "cpu_copy",
    "default_optimizer",
    "make_task",
    "on_accelerator",
    "split_dataset",
]

ForwardFn = Callable[[nn.Module, Any], tuple[Any, Any]]
LossFn = Callable[[Any, Any], torch.Tensor]
MetricFn = Callable[[Any, Any], float | torch.Tensor]
CollateFn = Callable[[list[Any]], Any]
OptimizerFactory = Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]
BUILTIN_METRICS = ("accuracy", "loss")


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


def _field(outputs: Any, name: str) -> Any:
    if isinstance(outputs, Mapping):
        return outputs.get(name)
    return getattr(outputs, name, None)


def describe_output(outputs: Any) -> str:
    """An output's type and, for mappings and model outputs, its keys."""
    if isinstance(outputs, Mapping):
        keys = [k for k, v in outputs.items() if v is not None]
        return f"{type(outputs).__name__} with keys {keys}"
    if isinstance(outputs, tuple | list):
        return f"{type(outputs).__name__} of length {len(outputs)}"
    return type(outputs).__name__


def logits_of(outputs: Any) -> torch.Tensor:
    """The model's predictions: the output itself, or its ``logits`` (a Hugging Face
    ``ModelOutput``, or a dict)."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = _field(outputs, "logits")
    if isinstance(logits, torch.Tensor):
        return logits
    raise ModelError(
        f"autotune cannot interpret the model's output, a {describe_output(outputs)}: it needs "
        "a tensor of logits, or an output with `.logits` (and `.loss` when the batch has "
        "labels). Pass forward=(model, batch) -> (outputs, targets), with loss_fn= and "
        "metric= that understand the outputs (on the command line: --forward, --loss, "
        "--metric)."
    )


def default_loss(outputs: Any, targets: Any) -> torch.Tensor:
    """The model's own loss where it computed one (a Hugging Face model given ``labels``);
    otherwise cross-entropy on the logits (MSE for float targets)."""
    own = _field(outputs, "loss") if not isinstance(outputs, torch.Tensor) else None
    if isinstance(own, torch.Tensor) and own.numel() == 1:
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


def accuracy(outputs: Any, targets: Any) -> torch.Tensor:
    correct: torch.Tensor = logits_of(outputs).argmax(dim=-1) == targets
    return correct.float().mean()


@dataclasses.dataclass(frozen=True)
class Task:
    """How one batch is turned into a loss and a metric."""

    forward: ForwardFn
    loss_fn: LossFn
    metric_fn: MetricFn
    metric_name: str
    higher_is_better: bool
    collate_fn: Callable[[list[Any]], Any] | None = None

    def is_default_batch(self) -> bool:
        return self.forward is default_forward


def make_task(
    *,
    forward: ForwardFn | None,
    loss_fn: LossFn | None,
    metric: str | MetricFn,
    higher_is_better: bool | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    metric_name: str | None = None,
) -> Task:
    if metric_name is not None and not isinstance(metric_name, str):
        raise TypeError(f"`metric_name` must be a str or None, but got {metric_name!r}.")
    if metric_name is not None and not metric_name.strip():
        raise ArgumentError("`metric_name` must name the metric, but got an empty string.")
    for name, fn in (("forward", forward), ("loss_fn", loss_fn), ("collate_fn", collate_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"`{name}` must be callable or None, but got {fn!r}.")
    loss = loss_fn if loss_fn is not None else default_loss
    if isinstance(metric, str):
        if metric == "accuracy":
            metric_fn: MetricFn = accuracy
            higher = True if higher_is_better is None else higher_is_better
        elif metric == "loss":
            metric_fn, higher = loss, False if higher_is_better is None else higher_is_better
        else:
            raise ArgumentError(
                f"`metric` must be 'accuracy', 'loss' or a callable (outputs, targets) -> float, "
                f"but got {metric!r}."
            )
        name = metric
    elif callable(metric):
        metric_fn = metric
        higher = True if higher_is_better is None else higher_is_better
        name = "metric"  # a function's name (`<lambda>`, `loss_metric`) reads badly in a report
    else:
        raise TypeError(f"`metric` must be 'accuracy', 'loss' or a callable, but got {metric!r}.")
    return Task(
        forward=forward if forward is not None else default_forward,
        loss_fn=loss,
        metric_fn=metric_fn,
        metric_name=metric_name.strip() if metric_name else name,
        higher_is_better=higher,
        collate_fn=collate_fn,
    )


def check_dataset(dataset: Any, task: Task, *, argument: str = "dataset") -> None:
    """Fail fast, naming the problem, on a dataset that no trial could use."""
    if isinstance(dataset, IterableDataset):
        raise DataError(
            f"`{argument}` is an IterableDataset; autotune needs a map-style dataset "
            "(with __len__ and __getitem__) so every trial sees the same samples."
        )
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise DataError(
            f"`{argument}` must be a map-style torch Dataset with __len__ and __getitem__, "
            f"but got {type(dataset).__name__}."
        )
    n = len(dataset)
    if n == 0:
        raise DataError(f"`{argument}` is empty (len 0); give it at least a few batches of data.")
    if task.is_default_batch() and task.collate_fn is None:
        item = dataset[0]
        if isinstance(item, Mapping):
            if "labels" not in item:
                raise DataError(
                    f"`{argument}[0]` is a dict with keys {sorted(item)} but no `labels`: "
                    "autotune calls model(**batch) as Hugging Face's Trainer does and reads the "
                    "targets from `labels`. Rename the key, or pass forward=lambda model, batch: "
                    "(outputs, targets) (and a loss_fn/metric that understand them)."
                )
            return
        if not (isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2):
            shown = type(item).__name__
            if isinstance(item, Mapping):
                shown = f"dict with keys {sorted(item)}"
            elif isinstance(item, Sequence):
                shown = f"{type(item).__name__} of length {len(item)}"
            raise DataError(
                f"`{argument}[0]` must be an (inputs, targets) pair, but got a {shown}. "
                "For other item structures pass forward=lambda model, batch: (outputs, targets) "
                "(and a loss_fn/metric that understand them)."
            )


def checked_task(dataset: Any, val_dataset: Any | None, hooks: Hooks) -> Task:
    """The task from the user's hooks, with the dataset (and validation set) checked against it."""
    if hooks.optimizer is not None and not callable(hooks.optimizer):
        raise TypeError(f"`optimizer` must be callable or None, but got {hooks.optimizer!r}.")
    task = hooks.task()
    check_dataset(dataset, task)
    if val_dataset is not None:
        check_dataset(val_dataset, task, argument="val_dataset")
    return task


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


def on_accelerator(item: Any) -> bool:
    """Whether a dataset item (or batch) holds tensors that are not in CPU memory."""
    if isinstance(item, torch.Tensor):
        return item.device.type != "cpu"
    if isinstance(item, Mapping):
        return any(on_accelerator(v) for v in item.values())
    if isinstance(item, list | tuple):
        return any(on_accelerator(v) for v in item)
    return False


def check_model_consumes(model: nn.Module, dataset: Dataset[Any], task: Task) -> None:
    """Run one tiny batch through a CPU copy of the model (wherever the model and the data
    are: a model already on the GPU is accepted); report shapes if it cannot consume it."""
    n = min(2, len(dataset))  # type: ignore[arg-type]
    collate = task.collate_fn or default_collate
    try:
        batch = to_device(collate([dataset[i] for i in range(n)]), "cpu")
    except Exception as exc:
        raise DataError(
            f"The first {n} items of the dataset cannot be collated into a batch: "
            f"{type(exc).__name__}: {exc}. Pass collate_fn= (--collate on the command line) "
            "to build batches yourself."
        ) from exc
    probe = cpu_copy(model).eval()  # eval: BatchNorm takes a batch of one too
    try:
        with torch.no_grad():
            outputs, targets = task.forward(probe, batch)
            loss = task.loss_fn(outputs, targets)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ModelError(
                    f"The loss must be a scalar tensor, but got {describe_batch(loss)}. "
                    "Check loss_fn (it should reduce over the batch)."
                )
            task.metric_fn(outputs, targets)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(
            f"The model cannot consume the dataset's batches: on a batch of {n} items "
            f"{describe_batch(batch)} it raised {type(exc).__name__}: {exc}. Check that the "
            "model's input shape matches the dataset's items, or pass forward=/loss_fn=."
        ) from exc


def labels_of(dataset: Dataset[Any], task: Task, *, limit: int = 200_000) -> list[int] | None:
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
    dataset: Dataset[Any], task: Task, *, val_fraction: float, seed: int
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


# -- Hooks by reference -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class HookRefs:
    """The task's hooks as every process of a search loads them: a reference
    (``module:name`` / ``file.py:name``) per hook, None where the default is used; ``metric``
    is ``accuracy``, ``loss`` or a reference. ``unnamed`` lists hooks that were given as
    callables with no reference (lambdas, functions in ``__main__``): other processes cannot
    load those."""

    forward: str | None = None
    loss_fn: str | None = None
    metric: str = "accuracy"
    higher_is_better: bool | None = None
    metric_name: str | None = None
    collate_fn: str | None = None
    optimizer: str | None = None
    unnamed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["unnamed"] = list(self.unnamed)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookRefs:
        values = dict(data)
        values["unnamed"] = tuple(values.get("unnamed") or ())
        return cls(**values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hooks:
    """The user's hooks as given (None: autotune's default), and their references."""

    forward: ForwardFn | None = None
    loss_fn: LossFn | None = None
    metric: str | MetricFn = "accuracy"
    higher_is_better: bool | None = None
    metric_name: str | None = None
    collate_fn: CollateFn | None = None
    optimizer: OptimizerFactory | None = None

    def task(self) -> Task:
        return make_task(
            forward=self.forward,
            loss_fn=self.loss_fn,
            metric=self.metric,
            higher_is_better=self.higher_is_better,
            collate_fn=self.collate_fn,
            metric_name=self.metric_name,
        )

    def optimizer_factory(self) -> OptimizerFactory:
        return self.optimizer if self.optimizer is not None else default_optimizer

    def references(self) -> HookRefs:
        refs: dict[str, Any] = {}
        unnamed = []
        for name in ("forward", "loss_fn", "metric", "collate_fn", "optimizer"):
            value = getattr(self, name)
            if value is None or (name == "metric" and value in BUILTIN_METRICS):
                refs[name] = value
                continue
            ref = _refs.reference_of(value)
            if ref is None:
                unnamed.append(name)
            refs[name] = ref
        if refs["metric"] is None:
            refs["metric"] = "accuracy"  # unnamed: listed, and never loaded
        return HookRefs(
            **refs,
            higher_is_better=self.higher_is_better,
            metric_name=self.metric_name,
            unnamed=tuple(unnamed),
        )

    @classmethod
    def load(cls, refs: HookRefs) -> Hooks:
        """The hooks ``refs`` name, loaded in this process."""
        if refs.unnamed:
            raise ArgumentError(
                f"The search's {', '.join(refs.unnamed)} hook(s) were given as callables that "
                "cannot be loaded by reference (lambdas, local functions, or functions defined "
                "in __main__), so another process cannot use them. Define them in an importable "
                "module (or a file named on the command line) to add workers to this search."
            )
        loaded: dict[str, Any] = {}
        for name in ("forward", "loss_fn", "collate_fn", "optimizer"):
            ref = getattr(refs, name)
            loaded[name] = None if ref is None else _load_hook(ref, name)
        metric: str | MetricFn = refs.metric
        if refs.metric not in BUILTIN_METRICS:
            metric = _load_hook(refs.metric, "metric")
        return cls(
            **loaded,
            metric=metric,
            higher_is_better=refs.higher_is_better,
            metric_name=refs.metric_name,
        )


def _load_hook(ref: str, name: str) -> Any:
    try:
        return _refs.load(ref)
    except _refs.UnresolvedReference as exc:
        raise ArgumentError(
            f"The search's `{name}` hook {ref!r} cannot be loaded here: {exc}"
        ) from exc

"""The user's task: how a batch becomes a loss and a validation metric, described once.

:class:`Task` is what ``find_best``, ``train``, ``verify``, the CLI and the workers of a search
all take. Each hook is one field, declared here with its command-line option and help (the CLI
builds its hook options from these fields); :class:`TaskRefs` is the same task by reference,
as a search publishes it to its study so that other processes load the same functions.

Leaving a hook out (None) means autotune's default: a batch is ``(inputs, targets)`` or a dict
given to the model as ``model(**batch)`` (targets under ``labels``); the loss is the model's own
or cross-entropy (MSE for float targets); ``metric="auto"`` chooses the guarded metric from a
batch; the optimizer is torch's AdamW.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from autotune import _refs
from autotune._errors import ArgumentError
from autotune._trial.direction import DIRECTION_FLAGS, callable_direction
from autotune._trial.metrics import AUTO, BUILTIN_METRICS

__all__ = [
    "CollateFn",
    "ForwardFn",
    "LossFn",
    "MetricFn",
    "OptimizerFactory",
    "Task",
    "TaskRefs",
    "as_task",
    "check_model",
]

ForwardFn = Callable[[nn.Module, Any], tuple[Any, Any]]
LossFn = Callable[[Any, Any], torch.Tensor]
MetricFn = Callable[[Any, Any], float | torch.Tensor]
CollateFn = Callable[[list[Any]], Any]
OptimizerFactory = Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]


def _hook(cli: str, help: str) -> Any:
    """A hook field: a callable, given by reference (``module:name`` / ``file.py:name``) on the
    command line and in a study."""
    return dataclasses.field(default=None, metadata={"cli": cli, "help": help, "hook": True})


def _option(default: Any, cli: str, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"cli": cli, "help": help, "hook": False})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task:
    """How your training step reads a batch, scores it and builds its optimizer.

    ::

        task = autotune.Task(forward=my_forward, loss_fn=my_loss, metric="accuracy")
        result = autotune.find_best(model, train_set, task=task)

    Every field is optional; see the module docstring for the defaults.
    """

    forward: ForwardFn | None = _hook("--forward", "forward(model, batch) -> (outputs, targets)")
    loss_fn: LossFn | None = _hook("--loss", "loss(outputs, targets) -> scalar tensor")
    metric: str | MetricFn = _option(
        AUTO,
        "--metric",
        "auto: the model's own loss where it computes one from `labels` (lower is "
        "better, as Hugging Face's Trainer evaluates), accuracy for (batch, classes) logits "
        "against (batch,) labels, the loss otherwise; accuracy; token_accuracy (labels -100 "
        "skipped, shifted for a causal LM); loss; or MODULE:FUNCTION naming "
        "metric(outputs, targets) -> float",
    )
    higher_is_better: bool | None = _option(
        None,
        "--lower-is-better",
        "needed where a --metric MODULE:FUNCTION's name does not say which way it is better "
        "(mse, f1_score and val_loss do); builtin metrics know theirs",
    )
    metric_name: str | None = _option(
        None, "--metric-name", "the metric's name in progress and reports"
    )
    collate_fn: CollateFn | None = _hook("--collate", "collate_fn(items) -> batch")
    optimizer: OptimizerFactory | None = _hook(
        "--optimizer", "optimizer(params, lr) -> torch.optim.Optimizer (default: AdamW)"
    )

    def __post_init__(self) -> None:
        for name in self.hook_names():
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"`{name}` must be callable or None, but got {value!r}.")
        if self.metric_name is not None and not isinstance(self.metric_name, str):
            raise TypeError(f"`metric_name` must be a str or None, but got {self.metric_name!r}.")
        if self.metric_name is not None and not self.metric_name.strip():
            raise ArgumentError("`metric_name` must name the metric, but got an empty string.")
        if self.higher_is_better is not None and not isinstance(self.higher_is_better, bool):
            raise TypeError(
                f"`higher_is_better` must be True, False or None, but got "
                f"{self.higher_is_better!r}."
            )
        self._check_metric()

    def _check_metric(self) -> None:
        metric, higher = self.metric, self.higher_is_better
        known = ", ".join(repr(m) for m in (AUTO, *BUILTIN_METRICS))
        if not isinstance(metric, str):
            if not callable(metric):
                raise TypeError(f"`metric` must be {known} or a callable, but got {metric!r}.")
            callable_direction(metric, higher)  # asked for here where nothing says it
            return
        if metric != AUTO and metric not in BUILTIN_METRICS:
            raise ArgumentError(
                f"`metric` must be {known} or a callable (outputs, targets) -> float, "
                f"but got {metric!r}."
            )
        if metric in BUILTIN_METRICS and higher is not None and higher != BUILTIN_METRICS[metric]:
            better = "higher" if BUILTIN_METRICS[metric] else "lower"
            raise ArgumentError(
                f"`higher_is_better` is {higher!r}, but {metric} is better when {better}. "
                "Leave it out for a builtin metric, or pass a metric callable of your own."
            )

    @classmethod
    def hook_names(cls) -> tuple[str, ...]:
        """The fields that hold callables (loaded by reference in other processes)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("hook"))

    def replace(self, **changes: Any) -> Task:
        return dataclasses.replace(self, **changes)

    def with_metric(self, metric: str | MetricFn | None) -> Task:
        """This task guarding ``metric`` (None: as it is). A metric given both ways must agree,
        and so must its direction where the task gives one (``higher_is_better``)."""
        if metric is None or metric == self.metric:
            return self
        if self.metric != AUTO:
            raise ArgumentError(
                f"`metric` is {metric!r}, but the task already says metric={self.metric!r}. "
                "Give the metric once: as metric= or in the Task."
            )
        higher = self.higher_is_better
        if (
            isinstance(metric, str)
            and higher is not None
            and BUILTIN_METRICS.get(metric) is (not higher)
        ):
            better = "higher" if BUILTIN_METRICS[metric] else "lower"
            raise ArgumentError(
                f"metric={metric!r} is better when {better}, but the task says "
                f"Task(higher_is_better={higher!r}). Say the direction once: leave "
                "higher_is_better out for a builtin metric."
            )
        return self.replace(metric=metric)

    def check_choice(self, metric: str, higher_is_better: bool) -> None:
        """``metric="auto"`` chose ``metric`` (better when ``higher_is_better``): where the
        task gave a direction of its own, they must agree (checked before any trial)."""
        given = self.higher_is_better
        if self.metric == AUTO and given is not None and given != higher_is_better:
            better = "higher" if higher_is_better else "lower"
            raise ArgumentError(
                f"`higher_is_better` is {given!r} ({DIRECTION_FLAGS[given]} on the command line), "
                f"but metric='auto' chose {metric} from the model's outputs, which is better "
                f"when {better}. Give the metric too (metric='loss', 'accuracy', or a callable "
                "with higher_is_better), or leave the direction out."
            )

    def references(self) -> TaskRefs:
        """The references other processes load. ``metric="auto"`` must be resolved first, so
        that every process guards the metric chosen once."""
        if self.metric == AUTO:
            raise ValueError(
                "metric='auto' is resolved when the search sets up, before references."
            )
        values: dict[str, Any] = {}
        unnamed = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            loaded_by_reference = f.metadata["hook"] or (f.name == "metric" and callable(value))
            if value is None or not loaded_by_reference:
                values[f.name] = value
                continue
            ref = _refs.reference_of(value)
            if ref is None:
                unnamed.append(f.name)
            values[f.name] = ref
        if values["metric"] is None:
            values["metric"] = "accuracy"  # unnamed: listed, and never loaded
        return TaskRefs(values=values, unnamed=tuple(unnamed))


@dataclasses.dataclass(frozen=True)
class TaskRefs:
    """A :class:`Task` by reference: ``module:name`` / ``file.py:name`` per hook (None for the
    default), the builtin metric guarded (``auto`` is resolved first) or a reference, and its
    name and direction. ``unnamed`` lists hooks given as callables with no reference (lambdas,
    functions in ``__main__``): other processes cannot load those."""

    values: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _defaults())
    unnamed: tuple[str, ...] = ()

    @property
    def metric(self) -> str:
        """The builtin metric guarded, or the reference of a metric function."""
        return str(self.values["metric"])

    def __getattr__(self, name: str) -> Any:
        """A field of the task by name (``refs.loss_fn``: its reference, or None)."""
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.values.items())

    def to_dict(self) -> dict[str, Any]:
        return {**self.values, "unnamed": list(self.unnamed)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskRefs:
        values = dict(data)
        unnamed = tuple(values.pop("unnamed", None) or ())
        names = {f.name for f in dataclasses.fields(Task)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"Unknown task field(s) {', '.join(unknown)} in a stored task.")
        return cls(values={**_defaults(), **values}, unnamed=unnamed)

    def load(self, *, higher_is_better: bool | None = None) -> Task:
        """The task these references name, loaded in this process; ``higher_is_better``: the
        direction the search resolved, for a metric function a study stored without one
        (before a direction that no name says was asked for)."""
        if self.unnamed:
            raise ArgumentError(
                f"The search's {', '.join(self.unnamed)} hook(s) were given as callables that "
                "cannot be loaded by reference (lambdas, local functions, or functions defined "
                "in __main__), so another process cannot use them. Define them in an importable "
                "module (or a file named on the command line) to add workers to this search."
            )
        loaded: dict[str, Any] = {}
        for f in dataclasses.fields(Task):
            value = self.values.get(f.name, f.default)
            by_reference = f.metadata["hook"] or (
                f.name == "metric" and value not in BUILTIN_METRICS
            )
            loaded[f.name] = (
                load_hook(value, f.name) if by_reference and value is not None else value
            )
        if loaded["higher_is_better"] is None and callable(loaded["metric"]):
            loaded["higher_is_better"] = higher_is_better
        return Task(**loaded)


def _defaults() -> dict[str, Any]:
    """A stored task's values where it says nothing: the defaults, accuracy guarded."""
    return {**{f.name: f.default for f in dataclasses.fields(Task)}, "metric": "accuracy"}


def load_hook(ref: str, name: str) -> Any:
    """The callable ``ref`` names, for the hook ``name``."""
    try:
        return _refs.load(ref)
    except _refs.UnresolvedReference as exc:
        raise ArgumentError(
            f"The search's `{name}` hook {ref!r} cannot be loaded here: {exc}"
        ) from exc


def as_task(task: Task | None, metric: str | MetricFn | None = None) -> Task:
    """The task as given (autotune's defaults for None), guarding ``metric`` where given."""
    if task is None:
        task = Task()
    if not isinstance(task, Task):
        raise TypeError(
            f"`task` must be an autotune.Task or None, but got {type(task).__name__}. "
            "Build one with autotune.Task(forward=..., loss_fn=..., metric=...)."
        )
    return task.with_metric(metric)


def check_model(model: Any) -> None:
    """``model`` is an ``nn.Module`` instance (every entry point asks the same)."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"`model` must be a torch.nn.Module, but got {type(model).__name__}. "
            "Pass the model instance (not its class or a factory)."
        )

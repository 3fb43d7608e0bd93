"""Which way a metric is better: one reading for every entry point.

A direction comes from, in order: what the user gave (``higher_is_better``, ``--lower-is-better``
/ ``--higher-is-better``); what another of their settings already says about the same metric
(a checkpoint or early-stopping callback's ``mode``, ``TrainingArguments.greater_is_better`` for
``metric_for_best_model``); the metric's name (``val_loss``, ``eval_f1``, a function named
``mean_abs_error``). Where two of the user's own settings disagree, that is an error naming both;
where nothing says, the direction is asked for: a guard that reads a metric the wrong way round
accepts exactly the changes that hurt it. Builtin metrics (``accuracy``, ``loss``) know theirs,
and a contradiction with them is refused by :class:`autotune.Task`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from autotune._errors import ArgumentError
from autotune._trial.metrics import GIVEN, MetricChoice

__all__ = [
    "DIRECTION_FLAGS",
    "Said",
    "callable_direction",
    "choose_direction",
    "direction_in_name",
    "metric_label",
]

# Words in a metric's name that say which way it is better.
LOWER = ("loss", "error", "err", "mse", "mae", "rmse", "perplexity", "ppl", "wer", "cer")
HIGHER = (
    "acc", "accuracy", "f1", "auc", "auroc", "precision", "recall", "bleu", "rouge", "map",
    "iou", "dice", "score", "r2", "matthews", "mcc",
)  # fmt: skip
# The command line's two flags for higher_is_better (neither given: None).
DIRECTION_FLAGS = {True: "--higher-is-better", False: "--lower-is-better"}
# Words that may turn a metric's direction round (scikit-learn's neg_*, a drop in accuracy).
TURNING = ("neg", "negative", "minus", "inv", "inverse", "drop", "gap", "delta", "reduction")
FLAGS = (
    "higher_is_better=True or False (--higher-is-better / --lower-is-better on the command line)"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Said:
    """A direction another of the user's settings states for the metric, and where."""

    higher_is_better: bool
    where: str  # "your ModelCheckpoint(mode='min')", "TrainingArguments(greater_is_better=True)"


def direction_in_name(name: str) -> bool | None:
    """True / False where the name's words say higher / lower is better, else None: also
    where a word may turn the other round (``neg_mean_squared_error``, ``accuracy_drop``)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if any(w in TURNING for w in words):
        return None
    lower = any(w in LOWER or w.endswith("loss") for w in words)
    higher = any(w in HIGHER or w.startswith("acc") for w in words)
    return None if lower == higher else higher


def _better(higher: bool) -> str:
    return "higher" if higher else "lower"


def choose_direction(
    metric: str, higher_is_better: bool | None, *, said: Said | None = None
) -> MetricChoice:
    """The guarded metric ``metric`` and its direction, with the reason: given, else what
    another setting ``said``, else its name; the given and the said must agree."""
    given = higher_is_better
    if given is not None and said is not None and said.higher_is_better != given:
        raise ArgumentError(
            f"Which way is {metric!r} better? You gave higher_is_better={given!r} "
            f"({_better(given)} is better), but {said.where} says "
            f"{_better(said.higher_is_better)} is better. Say it once: leave "
            "higher_is_better out, or change the other setting."
        )
    if higher_is_better is not None:
        return MetricChoice(metric=metric, higher_is_better=higher_is_better, reason=GIVEN)
    if said is not None:
        return MetricChoice(
            metric=metric,
            higher_is_better=said.higher_is_better,
            reason=f"{said.where} says {_better(said.higher_is_better)} is better",
        )
    higher = direction_in_name(metric)
    if higher is None:
        raise ArgumentError(f"Which way is {metric!r} better? Its name does not say: pass {FLAGS}.")
    return MetricChoice(
        metric=metric,
        higher_is_better=higher,
        reason=f"its name says {_better(higher)} is better",
    )


def metric_label(fn: Any) -> str:
    """The name a metric function goes by: its own, a partial's function's, a callable
    object's class."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def callable_direction(fn: Any, higher_is_better: bool | None) -> MetricChoice:
    """The direction of a metric function of yours: given, else read from its name; a name
    that does not say (``<lambda>``, ``my_metric``) is asked about, never guessed."""
    name = metric_label(fn)
    try:
        choice = choose_direction(name, higher_is_better)
    except ArgumentError:
        raise ArgumentError(
            f"Which way is your metric {name!r} better? Its name does not say, and the guard "
            f"must know (read the wrong way round, it accepts the changes that hurt): pass "
            f"{FLAGS}, e.g. Task(metric={name}, higher_is_better=False)."
        ) from None
    return dataclasses.replace(choice, metric="callable")

"""Which way a metric a trainer logs is better: given, said by the user's own checkpoint or
early-stopping callback (its ``mode``), or read from the metric's name."""

from __future__ import annotations

import re

from autotune._errors import ArgumentError
from autotune._trial.metrics import GIVEN, MetricChoice

__all__ = ["choose_direction"]

# Words in a metric's name that say which way it is better.
LOWER = ("loss", "error", "err", "mse", "mae", "rmse", "perplexity", "ppl", "wer", "cer")
HIGHER = (
    "acc", "accuracy", "f1", "auc", "auroc", "precision", "recall", "bleu", "rouge", "map",
    "iou", "dice", "score", "r2", "matthews", "mcc",
)  # fmt: skip


def choose_direction(
    metric: str, higher_is_better: bool | None, *, mode: str | None = None
) -> MetricChoice:
    """The guarded metric and its direction, with the reason."""
    if higher_is_better is not None:
        return MetricChoice(metric=metric, higher_is_better=higher_is_better, reason=GIVEN)
    if mode in ("min", "max"):
        return MetricChoice(
            metric=metric,
            higher_is_better=mode == "max",
            reason=f"the metric your checkpoint / early-stopping callback watches (mode {mode!r})",
        )
    words = [w for w in re.split(r"[^a-z0-9]+", metric.lower()) if w]
    lower = any(w in LOWER or w.endswith("loss") for w in words)
    higher = any(w in HIGHER or w.startswith("acc") for w in words)
    if lower != higher:
        better = "lower" if lower else "higher"
        return MetricChoice(
            metric=metric,
            higher_is_better=higher,
            reason=f"logged by your validation; its name says {better} is better",
        )
    raise ArgumentError(
        f"Which way is {metric!r} better? Its name does not say: pass higher_is_better=True or "
        "False (--lower-is-better on the command line)."
    )

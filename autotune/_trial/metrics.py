"""The validation metric: the builtin metrics as sums over items, and the choice ``"auto"`` makes.

Every builtin metric of a batch is a sum and the number of items it counts, so the validation
metric is one sum over all items divided by one count, however the items are batched (a mean of
per-batch means is not, where batches hold different numbers of counted tokens).

- ``accuracy``: argmax of the logits against integer labels; labels ``-100`` (padding, as Hugging
  Face's collators write it) are not counted.
- ``token_accuracy``: the same per token; for a causal LM (which predicts the *next* token from
  its ``labels``) position ``t``'s prediction is compared with label ``t + 1``.
- ``loss``: the task's loss (the model's own where it computes one) weighted by the label items
  it averages over: labels not ``-100`` (shifted for a causal LM) for integer labels, every
  element for float targets. A ``loss_fn`` of your own is weighted by items per batch (its
  reduction is not known), as a callable metric is.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autotune._errors import ModelError

__all__ = [
    "AUTO",
    "BUILTIN_METRICS",
    "IGNORE_INDEX",
    "MetricChoice",
    "accuracy_rows",
    "batch_items",
    "choose_metric",
    "describe_output",
    "field_of",
    "is_causal_lm",
    "label_items",
    "logits_of",
    "own_loss",
    "token_accuracy_rows",
]

AUTO = "auto"
# The builtin metrics and their direction (True: higher is better).
BUILTIN_METRICS = {"accuracy": True, "loss": False, "token_accuracy": True}
IGNORE_INDEX = -100  # the label PyTorch's cross-entropy and Hugging Face's models skip

# Reasons a result gives for the metric it guarded.
GIVEN = "given by you"
OWN_LOSS = (
    "the model's own loss: it computes one from `labels`, as Hugging Face's Trainer evaluates"
)
CLASSES = "accuracy: logits (batch, classes) against (batch,) integer labels"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetricChoice:
    """The metric a search guards: a builtin name (or ``"callable"``), its direction, and why."""

    metric: str
    higher_is_better: bool
    reason: str


def field_of(outputs: Any, name: str) -> Any:
    """``outputs[name]`` of a mapping, ``outputs.name`` otherwise (None where absent)."""
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
    logits = field_of(outputs, "logits")
    if isinstance(logits, torch.Tensor):
        return logits
    raise ModelError(
        f"autotune cannot interpret the model's output, a {describe_output(outputs)}: it needs "
        "a tensor of logits, or an output with `.logits` (and `.loss` when the batch has "
        "labels). Pass forward=(model, batch) -> (outputs, targets), with loss_fn= and "
        "metric= that understand the outputs (on the command line: --forward, --loss, "
        "--metric)."
    )


def own_loss(outputs: Any) -> torch.Tensor | None:
    """The loss the model computed itself (a Hugging Face model given ``labels``), if any."""
    if isinstance(outputs, torch.Tensor):
        return None
    loss = field_of(outputs, "loss")
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


def is_causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` is a Hugging Face causal language model: given ``labels`` it predicts
    each position's *next* token (and shifts the labels itself). Read from its class (or a base
    class): one of transformers' causal-LM classes, or a name ending in ``ForCausalLM`` /
    ``LMHeadModel``; encoder-decoder models (whose decoder is fed shifted labels) are not."""
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        return False
    known: set[str] = set()
    if "transformers" in sys.modules:  # a model of transformers' has imported it already
        try:
            from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        except ImportError:  # another layout: the class names below still tell
            pass
        else:
            known = {v for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() if isinstance(v, str)}
    return any(
        cls.__name__ in known or cls.__name__.endswith(("ForCausalLM", "LMHeadModel"))
        for cls in type(model).__mro__
    )


def _next_tokens(labels: torch.Tensor, causal_lm: bool) -> torch.Tensor:
    """The labels a causal LM's positions predict: position t's is label t + 1 (its own loss
    drops the first label and the last prediction)."""
    return labels[..., 1:] if causal_lm and labels.dim() >= 2 else labels


def label_items(targets: Any, *, causal_lm: bool) -> int:
    """The label items a mean loss averages over: integer labels other than ``-100`` (after
    the causal shift), every element of float targets."""
    if not isinstance(targets, torch.Tensor):
        return batch_items(targets)
    if targets.is_floating_point():
        return targets.numel()
    return int((_next_tokens(targets, causal_lm) != IGNORE_INDEX).sum())


def batch_items(targets: Any) -> int:
    """Items in a batch, by its targets' leading dimension (1 for anything else)."""
    if isinstance(targets, torch.Tensor) and targets.dim() > 0:
        return int(targets.shape[0])
    return 1


def _integer_labels(targets: Any, metric: str) -> torch.Tensor:
    if isinstance(targets, torch.Tensor) and not targets.is_floating_point():
        return targets
    got = type(targets).__name__
    if isinstance(targets, torch.Tensor):
        got = f"float tensor{tuple(targets.shape)}"
    raise ModelError(
        f"metric={metric!r} compares predicted classes with integer labels, but the targets "
        f"are {got}. Pass metric='loss', or a metric(outputs, targets) -> float of your own."
    )


def _rows(values: torch.Tensor) -> torch.Tensor:
    """Per example: the sum over everything but the leading (batch) dimension."""
    return values.reshape(values.shape[0], -1).sum(dim=1) if values.dim() > 1 else values


def accuracy_rows(outputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, counted) per example: argmax of the logits against the labels, labels -100
    not counted."""
    labels = _integer_labels(targets, "accuracy")
    counted = labels != IGNORE_INDEX
    correct = (logits_of(outputs).argmax(dim=-1) == labels) & counted
    return _rows(correct), _rows(counted)


def token_accuracy_rows(
    outputs: Any, targets: Any, *, causal_lm: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, counted) tokens per example: labels -100 not counted; a causal LM's
    prediction at t is compared with label t + 1."""
    labels = _integer_labels(targets, "token_accuracy")
    logits = logits_of(outputs)
    if logits.dim() != labels.dim() + 1 or logits.shape[:-1] != labels.shape:
        raise ModelError(
            f"metric='token_accuracy' needs logits (batch, tokens, vocab) and labels (batch, "
            f"tokens), but got logits {tuple(logits.shape)} and labels {tuple(labels.shape)}. "
            "Pass metric='accuracy' for one label per item."
        )
    if causal_lm:
        logits, labels = logits[..., :-1, :], _next_tokens(labels, causal_lm)
    counted = labels != IGNORE_INDEX
    correct = (logits.argmax(dim=-1) == labels) & counted
    return _rows(correct), _rows(counted)


def choose_metric(outputs: Any, targets: Any, *, default_loss: bool) -> MetricChoice:
    """What ``metric="auto"`` guards, from one batch's outputs and targets: accuracy for
    (batch, classes) logits against (batch,) integer labels (a classifier, whatever computes
    its loss: the tolerance then reads as accuracy points); otherwise the model's own loss
    where it computes one (and ``loss_fn`` is autotune's default, which uses it), as
    Hugging Face's Trainer evaluates; the loss otherwise."""
    logits = logits_of(outputs)
    if (
        logits.dim() == 2
        and logits.shape[1] >= 2
        and isinstance(targets, torch.Tensor)
        and not targets.is_floating_point()
        and targets.shape == logits.shape[:1]
    ):
        return MetricChoice(metric="accuracy", higher_is_better=True, reason=CLASSES)
    if default_loss and own_loss(outputs) is not None:
        return MetricChoice(metric="loss", higher_is_better=False, reason=OWN_LOSS)
    if not default_loss:
        why = "the loss (your loss_fn): the outputs are not (batch, classes) logits against "
        why += "(batch,) labels"
    elif isinstance(targets, torch.Tensor) and targets.is_floating_point():
        why = "the loss (MSE): the targets are floats"
    else:
        shape = (
            tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
        )
        why = (
            f"the loss (cross-entropy): logits {tuple(logits.shape)} against labels {shape} "
            "are not one class per item"
        )
    return MetricChoice(metric="loss", higher_is_better=False, reason=why)

"""The validation metric: what metric="auto" chooses and says, and builtin metrics as sums over
the items they count (Hugging Face models: tests/test_hf.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import autotune
from autotune._trial.metrics import MetricChoice
from autotune._trial.task import make_task, set_up_task
from autotune.examples import lm_data, lm_model, tiny_data, tiny_model

from conftest import find


def per_position_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs.flatten(0, -2), targets.flatten())


def _regression() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


@pytest.mark.parametrize(
    ("model", "data", "hooks", "expected"),
    [
        (
            tiny_model,
            tiny_data,
            autotune.Task(),
            MetricChoice(
                metric="accuracy",
                higher_is_better=True,
                reason="accuracy: logits (batch, classes) against (batch,) integer labels",
            ),
        ),
        (
            lambda: nn.Linear(8, 1),
            _regression,
            autotune.Task(),
            MetricChoice(
                metric="loss",
                higher_is_better=False,
                reason="the loss (MSE): the targets are floats",
            ),
        ),
        (
            lm_model,
            lambda: lm_data(64)[0],
            autotune.Task(),
            MetricChoice(
                metric="loss",
                higher_is_better=False,
                reason="the loss (cross-entropy): logits (2, 64, 64) against labels (2, 64) are "
                "not one class per item",
            ),
        ),
        (
            lm_model,
            lambda: lm_data(64)[0],
            autotune.Task(loss_fn=per_position_loss),
            MetricChoice(
                metric="loss",
                higher_is_better=False,
                reason="the loss (your loss_fn): the outputs are not (batch, classes) logits "
                "against (batch,) labels",
            ),
        ),
        (
            tiny_model,
            tiny_data,
            autotune.Task(metric="loss"),
            MetricChoice(metric="loss", higher_is_better=False, reason="given by you"),
        ),
    ],
    ids=["classifier", "regression", "language-model", "own-loss-fn", "given"],
)
def test_auto_chooses_from_what_the_model_returns_and_says_why(model, data, hooks, expected):
    setup = set_up_task(model(), data(), None, hooks)
    assert setup.choice == expected
    assert setup.resolved.metric == expected.metric == setup.task.metric
    assert setup.resolved.higher_is_better is expected.higher_is_better
    assert setup.task.references().metric == expected.metric  # what workers load


def test_train_reports_the_loss_of_a_regression_model_by_default() -> None:
    data = _regression()
    report = autotune.train(nn.Linear(8, 1), data, autotune.TrainingConfig(device="cpu"),
                            val_dataset=data)  # fmt: skip
    assert report.metric_name == "loss"
    x, y = data.tensors
    with torch.no_grad():
        mse = float(F.mse_loss(report.model(x), y))
    assert report.val_metric == pytest.approx(mse, rel=1e-5)


def test_a_direction_given_with_auto_must_agree_with_its_choice() -> None:
    """metric='auto' chooses accuracy for these logits: a task that says lower is better
    contradicts it, an error naming both before any trial."""
    with pytest.raises(
        autotune.ArgumentError,
        match=r"`higher_is_better` is False \(--lower-is-better on the command line\), but "
        r"metric='auto' chose accuracy from the model's outputs, which is better when higher",
    ):
        find(tiny_model(), tiny_data(), higher_is_better=False, n_trials=1)


def _mean_abs_error(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float((outputs.argmax(-1) - targets).abs().float().mean())


def test_the_metric_and_its_direction_may_be_given_in_two_places(fast_kwargs) -> None:
    """find_best(metric=fn, task=Task(higher_is_better=False)) was refused at Task(...): what is
    measured is said in one place and which way is better in another. It runs, lower is
    better; a builtin metric whose direction the task contradicts names both."""
    task = autotune.Task(higher_is_better=False)
    result = autotune.find_best(
        tiny_model(), tiny_data(), metric=_mean_abs_error, task=task,
        space={"knobs": {"batch_size": [32, 64]}}, device="cpu",
        options=autotune.SearchOptions(
            n_trials=1, budget=fast_kwargs["budget"], accuracy_samples=2048, isolation="none"
        ),
    )  # fmt: skip
    assert (
        result.higher_is_better is False
        and result.to_dict()["validation"]["higher_is_better"] is False
    )
    with pytest.raises(
        autotune.ArgumentError,
        match=r"metric='accuracy' is better when higher, but the task says "
        r"Task\(higher_is_better=False\)",
    ):
        autotune.find_best(tiny_model(), tiny_data(), metric="accuracy", task=task)


def _one_hot(predicted: list[list[int]], vocab: int = 4) -> torch.Tensor:
    """Logits whose argmax at each position is the given token."""
    return F.one_hot(torch.tensor(predicted), vocab).float()


def test_token_accuracy_skips_padding_and_compares_a_causal_lms_next_token() -> None:
    # Position t predicts: 1 2 3 0 | 2 2 0 0; labels: 0 1 2 3 | 1 2 -100 -100 (padding).
    logits = _one_hot([[1, 2, 3, 0], [2, 2, 0, 0]])
    labels = torch.tensor([[0, 1, 2, 3], [1, 2, -100, -100]])
    causal = make_task(autotune.Task(metric="token_accuracy"), causal_lm=True)
    # Shifted: predictions 1 2 3 | 2 2 0 against labels 1 2 3 | 2 -100 -100: 4 of 4 counted.
    assert causal.metric_sum(logits, labels) == (4.0, 4)
    assert causal.higher_is_better and causal.metric_name == "token_accuracy"
    # Unshifted (a model whose targets are already the next tokens): only position (1, 1)
    # matches among the 6 labels that are not -100.
    plain = dataclasses.replace(causal, causal_lm=False)
    assert plain.metric_sum(logits, labels) == (1.0, 6)


def test_accuracy_counts_items_and_skips_labels_of_minus_100() -> None:
    task = make_task(autotune.Task(metric="accuracy"))
    logits = _one_hot([[0, 1, 2, 3]])[0]  # four items predicting 0, 1, 2, 3
    assert task.metric_sum(logits, torch.tensor([0, 1, 0, -100])) == (2.0, 3)


def test_accuracy_of_float_targets_says_what_to_pass() -> None:
    with pytest.raises(
        autotune.ModelError,
        match=r"metric='accuracy' compares predicted classes with integer labels, but the "
        r"targets are float tensor\(2, 1\)\. Pass metric='loss'",
    ):
        set_up_task(nn.Linear(8, 1), _regression(), None, autotune.Task(metric="accuracy"))

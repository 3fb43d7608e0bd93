"""Hugging Face models with no glue: real ``transformers`` classes from tiny configs (no
download), dict batches of variable length with ``labels``, no forward/loss/metric hook."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch

import autotune
from autotune._cli import main
from autotune._trial.metrics import CLASSES, OWN_LOSS, MetricChoice, is_causal_lm
from autotune._trial.runner import evaluate
from autotune._trial.task import make_task, set_up_task
from autotune._trial.workload import prepare_workload
from autotune.examples import (
    CountingText,
    hf_collate,
    hf_data,
    hf_lm_collate,
    hf_lm_data,
    hf_lm_model,
    hf_model,
)

from conftest import FAST_BUDGET, find

transformers = pytest.importorskip("transformers")

# Knobs that leave the numerics alone too: a 256-sample check cannot confirm a change of them
# (the baseline barely learns), and a space of numerics knobs alone then has nothing to try.
SPACE = {
    "knobs": {
        "batch_size": [16, 32],
        "lr_schedule": ["constant", "cosine"],
        "num_workers": [0, 1],
        "intra_op_threads": [None, 1],
    }
}


def test_a_sequence_classifier_is_tuned_from_the_api_with_no_forward_hook() -> None:
    train, val = hf_data(256)
    lines: list[str] = []
    result = find(
        hf_model(),
        train,
        val_dataset=val,
        collate_fn=hf_collate,
        space=SPACE,
        n_trials=2,
        budget=FAST_BUDGET,
        accuracy_samples=256,
        device="cpu",
        isolation="none",
        progress=lines.append,
    )
    base = next(t for t in result.trials if t.role == "baseline")
    assert base.feasible and base.throughput > 0
    # A classifier (logits (batch, classes) against (batch,) labels) is guarded on its
    # accuracy, though it computes its own loss too: the tolerance reads as accuracy points.
    assert result.guard is None or result.guard.metric_name == "accuracy"
    assert result.to_dict()["validation"] == {
        "metric": "accuracy",
        "higher_is_better": True,
        "reason": CLASSES,
        "batch_size": 32,
    }
    assert (
        "  validation metric: accuracy, higher is better (accuracy: logits (batch, classes) "
        "against (batch,) integer labels); every config validated in batches of 32"
    ) in result.summary(detail=True).splitlines()
    # A candidate ran on the dict batches (loader workers: numerics-free, so no check needed).
    assert sum(1 for line in lines if re.match(r" *#\d+\*? ", line)) >= 1, lines
    assert not [t for t in result.trials if t.failure is not None], result.trials


@pytest.mark.slow
def test_a_sequence_classifier_is_tuned_from_the_cli_with_model_data_and_collate(
    tmp_path, capsys
) -> None:
    out = tmp_path / "best.json"
    code = main(
        [
            "search",
            "--model", "autotune.examples:hf_model",
            "--data", "autotune.examples:hf_data",
            "--collate", "autotune.examples:hf_collate",
            "--space", "quick", "--timed-seconds", "0.5", "--trials", "1",
            "--accuracy-samples", "128",
            "--storage", f"sqlite:///{tmp_path / 'hf.db'}", "--out", str(out),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    data = json.loads(out.read_text())
    assert data["search"]["trials"] == 2
    assert data["baseline"]["metrics"]["throughput"] > 0
    assert re.search(r"^ +#1\*? .* 1/1$", captured.err, re.M) and "failed" not in captured.err


def test_the_models_own_loss_is_used_where_the_batch_has_labels() -> None:
    """What Trainer does: model(**batch), its .loss; accuracy on .logits."""
    model = hf_model().eval()
    batch = hf_collate([hf_data(16)[0][i] for i in range(4)])
    task = make_task(autotune.Task(metric="accuracy"))
    with torch.no_grad():
        outputs, targets = task.forward(model, batch)
        own = model(**batch).loss
        assert torch.equal(task.loss_fn(outputs, targets), own)
        correct = int((outputs.logits.argmax(-1) == batch["labels"]).sum())
        assert task.metric_sum(outputs, targets) == (correct, 4)


def test_an_output_with_no_logits_is_a_clear_error_naming_the_hooks() -> None:
    """A base model (BertModel) returns hidden states, not logits."""
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = transformers.BertModel(config)

        def forward(self, input_ids, attention_mask, labels=None):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask)

    train, val = hf_data(64)
    with pytest.raises(
        autotune.ModelError,
        match=r"cannot interpret the model's output, a BaseModelOutputWithPoolingAndCrossAttentions"
        r" with keys \['last_hidden_state', 'pooler_output'\].*forward=.*--forward",
    ):
        find(Encoder(), train, val_dataset=val, collate_fn=hf_collate, n_trials=1, device="cpu")


# -- The metric chosen from what the model does ---------------------------------------------


def test_a_causal_lm_given_labels_guards_its_own_loss_which_falls_as_it_learns() -> None:
    """GPT-2 given `labels` shifts them itself: next-token accuracy computed on unshifted
    logits scored the untrained model best. The default guards the model's own loss, which
    the trained baseline clearly lowers from the untrained model's (about ln 16: uniform)."""
    train, val = hf_lm_data(256)
    result = find(
        hf_lm_model(),
        train,
        val_dataset=val,
        collate_fn=hf_lm_collate,
        space={"knobs": {"batch_size": [16, 32]}},  # the candidate changes the numerics
        n_trials=1,
        budget=FAST_BUDGET,
        accuracy_samples=512,
        device="cpu",
        isolation="none",
    )
    guard = result.to_dict()["accuracy_guard"]
    assert guard["metric"] == "loss" and guard["higher_is_better"] is False
    assert guard["initial_metric"] == pytest.approx(math.log(CountingText.vocab), abs=0.15)
    assert guard["baseline_metric"] < guard["initial_metric"] - 0.3
    assert guard["learned"] and not guard["wrong_way"]
    assert result.search["hooks"]["metric"] == "loss"  # what workers load: never "auto"
    assert result.to_dict()["validation"] == {
        "metric": "loss",
        "higher_is_better": False,
        "reason": OWN_LOSS,
        "batch_size": 32,
    }


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's imports (jit)
def test_a_causal_lm_is_told_from_its_class_and_baked_into_its_task() -> None:
    class MyGPT(transformers.GPT2LMHeadModel):
        pass

    gpt = hf_lm_model()
    assert is_causal_lm(gpt) and is_causal_lm(MyGPT(gpt.config))
    assert is_causal_lm(torch.compile(gpt))  # compiles lazily: nothing is compiled here
    assert not is_causal_lm(hf_model()) and not is_causal_lm(torch.nn.Linear(2, 2))
    train, _ = hf_lm_data(16)
    hooks = autotune.Task(metric="token_accuracy", collate_fn=hf_lm_collate)
    setup = set_up_task(gpt, train, None, hooks)
    assert setup.resolved.causal_lm and setup.resolved.metric == "token_accuracy"
    assert setup.choice == MetricChoice(
        metric="token_accuracy", higher_is_better=True, reason="given by you"
    )
    classifier = set_up_task(hf_model(), hf_data(16)[0], None, autotune.Task(collate_fn=hf_collate))
    assert not classifier.resolved.causal_lm
    assert classifier.choice == MetricChoice(
        metric="accuracy", higher_is_better=True, reason=CLASSES
    )


def test_the_model_own_loss_is_weighted_by_its_shifted_tokens() -> None:
    """Summed over the items (tokens), the loss of two half-batches is the loss of the whole."""
    model = hf_lm_model().eval()
    items = [hf_lm_data(16)[0][i] for i in range(6)]
    task = set_up_task(model, items, None, autotune.Task(collate_fn=hf_lm_collate)).resolved
    halves = [hf_lm_collate(items[:2]), hf_lm_collate(items[2:])]
    whole = hf_lm_collate(items)
    with torch.no_grad():
        parts = [task.metric_sum(model(**b), b["labels"]) for b in halves]
        total, tokens = task.metric_sum(model(**whole), whole["labels"])
    assert tokens == sum(int(item["input_ids"].shape[0]) - 1 for item in items)
    assert sum(n for _, n in parts) == tokens
    assert sum(s for s, _ in parts) == pytest.approx(total, rel=1e-5)


def mean_loss_of_the_batch(outputs, targets) -> float:
    """A metric of a user's: the model's loss, one value per batch."""
    return float(outputs.loss)


@pytest.mark.parametrize("metric", ["auto", "token_accuracy", mean_loss_of_the_batch])
def test_validation_does_not_depend_on_the_configs_batch_size(metric) -> None:
    """Padded per batch, a mean of per-batch means depends on how items are batched: every
    config validates in the search's batches, and builtin metrics count tokens, not batches."""
    train, val = hf_lm_data(64)
    hooks = autotune.Task(metric=metric, collate_fn=hf_lm_collate)
    small = autotune.TrainingConfig(device="cpu", batch_size=4)
    large = autotune.TrainingConfig(device="cpu", batch_size=64)
    # A model that has learned something: an untrained one scores every token alike.
    model = autotune.train(
        hf_lm_model(), train, small, task=autotune.Task(collate_fn=hf_lm_collate)
    ).model
    work = prepare_workload(
        model, train, val, hooks, val_fraction=0.1, seed=0, eval_batch_size=8
    ).workload
    assert evaluate(model, small, work) == evaluate(model, large, work)
    if metric is mean_loss_of_the_batch:
        return  # a value per batch: only the fixed batches make it the same
    in_threes = dataclasses.replace(work, eval_batch_size=3)
    assert evaluate(model, small, in_threes) == pytest.approx(
        evaluate(model, small, work), abs=1e-6
    )

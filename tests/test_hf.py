"""Hugging Face models with no glue: real ``transformers`` classes from tiny configs (no
download), dict batches of variable length with ``labels``, no forward/loss/metric hook."""

from __future__ import annotations

import json

import pytest
import torch

import autotune
from autotune._cli import main
from autotune._trial.task import make_task
from autotune.examples import hf_collate, hf_data, hf_model

from conftest import FAST_BUDGET

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
    result = autotune.find_best(
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
    assert result.guard is not None and result.guard.metric_name == "accuracy"
    # Accuracy on .logits against labels: a fraction, measured on the validation set.
    assert all(0.0 <= run <= 1.0 for run in result.guard.baseline_runs)
    # A candidate ran on the dict batches (loader workers: numerics-free, so no check needed).
    assert sum(1 for line in lines if line.startswith("trial ")) >= 1, lines
    assert not [t for t in result.trials if t.failure is not None], result.trials


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
            "--space", "quick", "--trials", "1", "--accuracy-samples", "128",
            "--storage", f"sqlite:///{tmp_path / 'hf.db'}", "--out", str(out),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    data = json.loads(out.read_text())
    assert data["search"]["trials"] == 2
    assert data["baseline"]["metrics"]["throughput"] > 0
    assert "trial 1/1" in captured.err and "failed" not in captured.err


def test_the_models_own_loss_is_used_where_the_batch_has_labels() -> None:
    """What Trainer does: model(**batch), its .loss; accuracy on .logits."""
    model = hf_model().eval()
    batch = hf_collate([hf_data(16)[0][i] for i in range(4)])
    task = make_task(
        forward=None, loss_fn=None, metric="accuracy", higher_is_better=None, collate_fn=None
    )
    with torch.no_grad():
        outputs, targets = task.forward(model, batch)
        own = model(**batch).loss
        assert torch.equal(task.loss_fn(outputs, targets), own)
        expected = (outputs.logits.argmax(-1) == batch["labels"]).float().mean()
        assert float(task.metric_fn(outputs, targets)) == pytest.approx(float(expected))


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
        autotune.find_best(
            Encoder(), train, val_dataset=val, collate_fn=hf_collate, n_trials=1, device="cpu"
        )

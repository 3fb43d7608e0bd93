"""The tuned config in a Hugging Face Trainer.

    python examples/hf_trainer.py [best.json]

cfg.to_transformers() gives TrainingArguments' batch size and gradient accumulation steps,
DataLoader settings, precision, torch.compile, checkpointing, learning rate and schedule (and
`optim="adamw_torch_fused"` for a fused optimizer). cuDNN benchmark and CPU threads are not
TrainingArguments: cfg.backends() sets them around train(). The search tuned the learning rate
for torch's AdamW (weight decay 0.01), so the optimizer is set to match.
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from autotune.examples import tiny_model

from _shared import EPOCHS, config_from_argv, datasets


class TinyClassifier(nn.Module):
    """The Trainer calls model(**batch) and reads the loss from the output."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_model()

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, Any]:
        logits = self.net(x)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class AsDicts(Dataset):
    """(inputs, label) items as the dicts the Trainer's collator expects."""

    def __init__(self, data: Dataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        x, y = self.data[index]
        return {"x": x, "labels": y}


def accuracy(prediction: Any) -> dict[str, float]:
    logits, labels = prediction.predictions, prediction.label_ids
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def main() -> None:
    cfg = config_from_argv()
    train, val = datasets()
    with tempfile.TemporaryDirectory() as out:
        # The optimizer the search tuned for; to_transformers() overrides `optim` where the
        # optimizer implementation maps ("adamw_torch_fused").
        tuned = {"optim": "adamw_torch", **cfg.to_transformers()}
        args = TrainingArguments(
            output_dir=out,
            num_train_epochs=EPOCHS,
            weight_decay=0.01,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            **tuned,
        )
        trainer = Trainer(
            model=TinyClassifier(),
            args=args,
            train_dataset=AsDicts(train),
            eval_dataset=AsDicts(val),
            compute_metrics=accuracy,
        )
        with cfg.backends():  # cuDNN benchmark, TF32, CPU threads; restored afterwards
            trainer.train()
        metrics = trainer.evaluate()
    print(f"val accuracy: {metrics['eval_accuracy']:.4f}")


if __name__ == "__main__":
    main()

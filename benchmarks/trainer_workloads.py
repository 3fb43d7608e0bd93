"""The trainers a user already has, on model code autotune did not write (``transformers``
classes from small configs) and the realistic pipelines of ``workloads.py``: importable, so
``autotune.tune`` runs their trials in isolated workers.

- ``lightning_resnet``: a ``LightningModule`` around transformers' ResNet, label-smoothed
  cross-entropy, SGD with momentum and a cosine schedule, on JPEG files decoded per item.
- ``hf_bert``: a Hugging Face ``Trainer`` of a BERT-style classifier on variable-length token
  sequences padded by a collator, with ``compute_metrics``.
"""

from __future__ import annotations

import tempfile
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import workloads as w

__all__ = ["ResNetModule", "hf_bert", "lightning_resnet", "resnet_loaders"]

LR = 0.05


class ResNetModule(pl.LightningModule):
    def __init__(self, lr: float = LR) -> None:
        super().__init__()
        self.net = w.resnet_model()
        self.lr = lr

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixels)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y, label_smoothing=0.1)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total))
        schedule = {"scheduler": scheduler, "interval": "step"}
        return {"optimizer": optimizer, "lr_scheduler": schedule}


def resnet_loaders(batch_size: int = 32) -> tuple[DataLoader[Any], DataLoader[Any]]:
    train, val = w.resnet_data()
    return (
        DataLoader(train, batch_size=batch_size, shuffle=True),
        DataLoader(val, batch_size=128),
    )


def lightning_trainer(**kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **kwargs,
    )  # fmt: skip


def lightning_resnet() -> tuple[pl.Trainer, pl.LightningModule, DataLoader[Any], DataLoader[Any]]:
    """What the user holds: trainer, module, training and validation loaders."""
    train, val = resnet_loaders()
    return lightning_trainer(max_epochs=10), ResNetModule(), train, val


def accuracy(prediction: Any) -> dict[str, float]:
    logits, labels = prediction.predictions, prediction.label_ids
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def hf_bert(**args: Any) -> Any:
    """A Hugging Face Trainer of the BERT classifier (batch 16, 3 epochs) with
    compute_metrics; ``args`` override its TrainingArguments."""
    from transformers import Trainer, TrainingArguments

    train, val = w.bert_data()
    arguments = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="bench-hf-"),
        **{
            "per_device_train_batch_size": 16,
            "per_device_eval_batch_size": 64,
            "num_train_epochs": 3,
            "learning_rate": 3e-4,
            "use_cpu": True,
            "report_to": "none",
            "save_strategy": "no",
            "disable_tqdm": True,
            "logging_strategy": "no",
            **args,
        },
    )
    return Trainer(
        model=w.bert_model(),
        args=arguments,
        train_dataset=train,
        eval_dataset=val,
        data_collator=w.bert_collate,
        compute_metrics=accuracy,
    )

"""Lightning and Hugging Face trainers for the tests of autotune.tune, importable by trial
workers: a LightningModule with its own loss (label smoothing), optimizer (SGD with momentum)
and schedule, a data module of noisy labels, and a Hugging Face Trainer with compute_metrics."""

from __future__ import annotations

import os
import time
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from autotune.examples import tiny_model

# What the module's own hooks saw (recorded where AUTOTUNE_TEST_RECORD=1, in-process trials):
# the losses its training_step computed, the learning rate its optimizer had at each fit's
# first step (with the batch size), and the optimizers configure_optimizers built.
SEEN_LOSSES: list[float] = []
SEEN_LRS: list[tuple[int, float]] = []
BUILT: list[str] = []


def noisy_data(n: int = 512, seed: int = 0, noise: float = 0.2) -> TensorDataset:
    """Three classes from 8 features, a share of labels flipped: a task no short run solves."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    flip = torch.rand(n, generator=g) < noise
    y[flip] = torch.randint(0, 3, (int(flip.sum()),), generator=g)
    return TensorDataset(x, y)


class SmoothedSGD(pl.LightningModule):
    """Cross-entropy with label smoothing, SGD with momentum and a step schedule: nothing of
    autotune's defaults. Optionally raises an out-of-memory error above a batch size, or hangs
    where the training loader has workers."""

    def __init__(self, oom_above: int | None = None, hang_with_workers: bool = False) -> None:
        super().__init__()
        self.net = tiny_model()
        self.oom_above, self.hang_with_workers = oom_above, hang_with_workers
        self.record = os.environ.get("AUTOTUNE_TEST_RECORD") == "1"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.oom_above is not None and len(x) > self.oom_above:
            raise torch.OutOfMemoryError(f"CUDA out of memory (faked above batch {self.oom_above})")
        if self.hang_with_workers and self.trainer.train_dataloader.num_workers > 0:
            time.sleep(3600)
        loss = F.cross_entropy(self(x), y, label_smoothing=0.2)
        if self.record:
            SEEN_LOSSES.append(float(loss.detach()))
            if batch_idx == 0 and self.trainer.global_step == 0:
                SEEN_LRS.append((len(x), self.trainer.optimizers[0].param_groups[0]["lr"]))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())
        self.log("val_loss", F.cross_entropy(logits, y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        if self.record:
            BUILT.append(type(optimizer).__name__)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
        schedule = {"scheduler": scheduler, "interval": "step"}
        return {"optimizer": optimizer, "lr_scheduler": schedule}


class NoisyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, n: int = 512) -> None:
        super().__init__()
        self.batch_size, self.n = batch_size, n

    def setup(self, stage: str) -> None:
        self.train_set = noisy_data(self.n, seed=0)
        self.val_set = noisy_data(256, seed=1)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=64)


def lightning_trainer(**kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        accelerator=kwargs.pop("accelerator", "cpu"),
        devices=kwargs.pop("devices", 1),
        max_epochs=kwargs.pop("max_epochs", 3),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **kwargs,
    )


def make_lightning() -> tuple[pl.Trainer, pl.LightningModule, pl.LightningDataModule]:
    """A --trainer factory: the trainer and what it fits."""
    return lightning_trainer(), SmoothedSGD(), NoisyData()


def accuracy(prediction: Any) -> dict[str, float]:
    logits, labels = prediction.predictions, prediction.label_ids
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def hf_trainer(output_dir: str, **args: Any) -> Any:
    """A Hugging Face Trainer of a tiny BERT classifier, with compute_metrics."""
    from transformers import Trainer, TrainingArguments

    from autotune.examples import hf_collate, hf_data, hf_model

    train, val = hf_data(256)
    arguments = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=args.pop("batch_size", 16),
        num_train_epochs=args.pop("epochs", 2),
        learning_rate=args.pop("learning_rate", 5e-4),
        use_cpu=args.pop("use_cpu", True),
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        **args,
    )
    return Trainer(
        model=hf_model(),
        args=arguments,
        train_dataset=train,
        eval_dataset=val,
        data_collator=hf_collate,
        compute_metrics=accuracy,
    )


def make_hf() -> Any:
    """A --trainer factory for the Hugging Face Trainer."""
    import tempfile

    return hf_trainer(tempfile.mkdtemp(prefix="autotune-test-hf-"))


class NanAbove(torch.nn.Module):
    """A Hugging Face classifier whose training loss turns NaN from the 3rd training batch
    larger than ``limit`` on (a learning rate too high for a bigger batch), and counts the
    training batches it ran."""

    def __init__(self, limit: int = 16) -> None:
        super().__init__()
        from autotune.examples import hf_model

        self.inner, self.limit, self.big_batches = hf_model(), limit, 0

    def forward(self, **batch: Any) -> Any:
        out = self.inner(**batch)
        if self.training and len(batch["input_ids"]) > self.limit:
            self.big_batches += 1
            if self.big_batches >= 3:
                out.loss = out.loss * float("nan")
        return out


class EvalHungry(torch.nn.Module):
    """A Hugging Face classifier whose evaluation runs out of memory after training batches
    larger than ``limit``: the memory training holds plus evaluation's does not fit, though
    training alone does (a faked GPU limit)."""

    def __init__(self, limit: int = 16) -> None:
        super().__init__()
        from autotune.examples import hf_model

        self.inner, self.limit, self.trained_batch = hf_model(), limit, 0

    def forward(self, **batch: Any) -> Any:
        if self.training:
            self.trained_batch = max(self.trained_batch, len(batch["input_ids"]))
        elif self.trained_batch > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory (faked: evaluation after training)")
        return self.inner(**batch)

"""The tuned config in a Lightning Trainer.

    python examples/lightning_trainer.py [best.json]

cfg.to_lightning() gives the Trainer's arguments (accelerator, devices, precision, cuDNN
benchmark, accumulate_grad_batches) and the DataLoader's (Lightning leaves the loader to you);
its notes say how to apply the rest: the model knobs through cfg.prepare, the optimizer
(foreach/fused) and LR schedule in configure_optimizers, TF32 and threads through
cfg.backends().
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import autotune
from autotune.examples import tiny_model

from _shared import EPOCHS, config_from_argv, datasets


class Classifier(pl.LightningModule):
    def __init__(self, cfg: autotune.TrainingConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.net = tiny_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = self.cfg.to_device(batch)  # channels_last for image batches, when tuned so
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_accuracy", (self(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        optimizer = self.cfg.optimizer(self.parameters())  # AdamW at the tuned peak LR
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = self.cfg.lr_scheduler(optimizer, total)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def main() -> None:
    cfg = config_from_argv()
    train, val = datasets()
    settings = cfg.to_lightning()
    for note in settings.notes:
        print(f"note: {note}")
    model = cfg.prepare(Classifier(cfg))  # device, channels_last, checkpointing, compile
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **settings.trainer,
    )
    train_loader = DataLoader(train, shuffle=True, **settings.dataloader)
    val_loader = DataLoader(val, batch_size=settings.dataloader["batch_size"])
    with cfg.backends():  # TF32 and CPU threads, restored afterwards
        trainer.fit(model, train_loader, val_loader)
    print(f"val accuracy: {float(trainer.callback_metrics['val_accuracy']):.4f}")


if __name__ == "__main__":
    main()

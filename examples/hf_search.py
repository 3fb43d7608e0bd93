"""A Hugging Face model tuned with no hooks, and a LightningDataModule as the data.

    python examples/hf_search.py [--timeout 60]

The model is ``transformers.BertForSequenceClassification`` built from a tiny config (no
download); its items are dicts ``{"input_ids": ..., "labels": ...}`` of varying length, padded per
batch by ``hf_collate``. autotune calls it as Hugging Face's ``Trainer`` does
(``model(**batch)``, the model's own loss) and guards that loss, as ``Trainer`` evaluates: no
forward, loss or metric hook. The same search runs from the shell:

    autotune search --model autotune.examples:hf_model --data autotune.examples:hf_data \\
                    --collate autotune.examples:hf_collate --timeout 60 --out best.json

and with the data module (its datasets and collate function are used; its DataLoader settings
are what autotune tunes):

    autotune search --model autotune.examples:hf_model \\
                    --data examples/hf_search.py:token_datamodule --timeout 60 --out best.json
"""

from __future__ import annotations

import argparse
from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader

import autotune
from autotune.examples import TokenSequences, hf_collate, hf_data, hf_model


class TokenData(pl.LightningDataModule):
    """A data module as a Lightning user already has one: datasets made in setup(), loaders
    with their own batch size and collate function."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.train: TokenSequences | None = None
        self.val: TokenSequences | None = None

    def setup(self, stage: str) -> None:
        self.train, self.val = hf_data()

    def train_dataloader(self) -> DataLoader[Any]:
        assert self.train is not None
        return DataLoader(self.train, self.batch_size, shuffle=True, collate_fn=hf_collate)

    def val_dataloader(self) -> DataLoader[Any]:
        assert self.val is not None
        return DataLoader(self.val, self.batch_size, collate_fn=hf_collate)


def token_datamodule() -> TokenData:
    """A ``--data`` factory: the data module itself."""
    return TokenData()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    train, val = hf_data()
    # No forward=, loss_fn= or metric=: a Hugging Face model on dict batches needs none.
    result = autotune.find_best(
        hf_model(), train, val_dataset=val, task=autotune.Task(collate_fn=hf_collate),
        timeout=args.timeout,
        progress=True,
    )  # fmt: skip
    print(result)
    # A LightningDataModule as the data: its datasets and collate function are used.
    result = autotune.find_best(hf_model(), TokenData(), timeout=args.timeout, progress=True)
    print(result)


if __name__ == "__main__":
    main()

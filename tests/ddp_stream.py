"""Run by torchrun in tests/test_stream_trainers.py: which items of a Hugging Face stream (the
JSON files named by argv[2:]) each of 2 gloo ranks reads through a trial's loaders, the
throughput loader (cfg.dataloader) and an accuracy run's item loader, each with 2 workers.
Rank 0 writes {loader: [rank 0's ids, rank 1's ids]} to argv[1]."""

from __future__ import annotations

import json
import sys

import datasets
import torch.distributed as dist

import autotune
from autotune._knobs import apply
from autotune._stream import Stream


def main() -> None:
    out, files = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo")
    stream = datasets.load_dataset("json", data_files=files, split="train", streaming=True)
    stream = stream.with_format("torch")
    cfg = autotune.TrainingConfig(ranks=dist.get_world_size(), batch_size=4, num_workers=2)
    wrapped = Stream(stream, samples=len(files) * 40, length=None)
    read = {
        "throughput": [int(i) for b in cfg.dataloader(wrapped) for i in b["id"]],
        "accuracy": [int(item["id"]) for item in apply.make_item_loader(cfg, wrapped)],
    }
    gathered: list[dict[str, list[int]] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, read)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({k: [g[k] for g in gathered if g] for k in read}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

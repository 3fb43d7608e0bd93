"""WebDataset tar shards of JPEG files, written in a test, and the stream and model that read them
(tests/test_streaming.py on the CPU, tests/test_gpu.py on a GPU). Needs ``webdataset`` and
``pillow`` (test extras): import it after ``pytest.importorskip`` of both."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from torch import nn

COLORS = ((200, 40, 40), (40, 200, 40), (40, 40, 200))  # a class per dominant colour


def write_shards(folder: Path, shards: int, per_shard: int, seed: int = 0) -> list[str]:
    """Tar shards of 16x16 JPEG images (a noisy dominant colour per class) with their class."""
    rng = np.random.default_rng(seed)
    urls = []
    for s in range(shards):
        path = folder / f"shard-{s:03d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for i in range(per_shard):
                label = int(rng.integers(0, 3))
                pixels = np.clip(rng.normal(COLORS[label], 60, (16, 16, 3)), 0, 255)
                buffer = io.BytesIO()
                Image.fromarray(pixels.astype("uint8")).save(buffer, format="JPEG")
                writer.write({"__key__": f"{s}_{i}", "jpg": buffer.getvalue(), "cls": label})
        urls.append(str(path))
    return urls


def to_tensor(image: Any) -> torch.Tensor:
    """A decoded PIL image as a float tensor, flipped at random (the per-item augmentation)."""
    x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255).permute(2, 0, 1)
    return x.flip(2) if torch.rand(()) < 0.5 else x


def jpeg_stream(urls: list[str]) -> Any:
    """The stream as WebDataset's docs build one: shards split across workers, JPEGs decoded
    and augmented per item, (image, label) pairs."""
    return (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(to_tensor, int)
    )


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(128, 3),
    )

"""A streaming workload: WebDataset tar shards of JPEG files, decoded and augmented per item in
the loader's workers, and a small CNN (issue 39).

- ``write_shards``: 96x96 JPEG images (a class-coloured square or disc of varying size, place
  and shade on a noisy background; one label in twenty wrong, as real labels are) written into
  tar shards with WebDataset's ``TarWriter``.
- ``image_stream``: the stream as WebDataset's docs build one: shards split across DataLoader
  workers, a seeded shuffle buffer, JPEG decoded by PIL per item, then a random-resized crop and
  a flip (torchvision's ``RandomResizedCrop`` / ``RandomHorizontalFlip``, written with PIL and
  torch's RNG as torchvision draws them; torchvision itself is not installed on a CPU machine
  without pulling a CUDA build of torch). Validation: a centre crop, no shuffle.
- ``stream_data`` / ``stream_model``: the factories ``--data`` / ``--model`` take, so the CLI
  searches the same workload::

      autotune search --model benchmarks/stream_workload.py:stream_model \\
          --data benchmarks/stream_workload.py:stream_data --planned-samples 6144 --timeout 180

The shards are written once under ``AUTOTUNE_BENCH_DATA`` (default ``benchmarks/.data``) and
reused. ``webdataset`` and ``pillow`` are test extras, not runtime dependencies of autotune.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "CLASSES",
    "PER_SHARD",
    "SHARDS",
    "image_stream",
    "shard_urls",
    "stream_data",
    "stream_model",
    "write_shards",
]

DATA_DIR = Path(os.environ.get("AUTOTUNE_BENCH_DATA", Path(__file__).parent / ".data"))

IMAGE_SIZE = 96  # stored
CROP = 64  # trained
CLASSES = 10
SHARDS = 8
PER_SHARD = 768  # 8 x 768 = 6,144 training images
VAL_SHARDS = 2
VAL_PER_SHARD = 256
SHUFFLE_BUFFER = 256
MEAN, STD = 0.5, 0.25
HUES = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
        (145, 30, 180), (70, 240, 240), (240, 50, 230), (128, 128, 0), (0, 0, 128))  # fmt: skip


def _image(rng: np.random.Generator, label: int) -> Any:
    from PIL import Image, ImageDraw

    noise = rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    image = Image.fromarray(noise, "RGB")
    draw = ImageDraw.Draw(image)
    size = int(rng.integers(24, 56))
    x, y = (int(v) for v in rng.integers(0, IMAGE_SIZE - size, 2))
    shade = float(rng.uniform(0.5, 1.0))
    colour = tuple(int(c * shade) for c in HUES[label])
    shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
    shape([x, y, x + size, y + size], fill=colour)
    return image


def write_shards(folder: Path, shards: int, per_shard: int, *, seed: int) -> list[str]:
    """``shards`` tar files of ``per_shard`` JPEG images each (``jpg``) with their class
    (``cls``); one label in twenty is another class's."""
    import webdataset as wds

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    urls = []
    for s in range(shards):
        path = folder / f"shard-{s:03d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for i in range(per_shard):
                label = int(rng.integers(0, CLASSES))
                shown = label if rng.random() >= 0.05 else int(rng.integers(0, CLASSES))
                buffer = io.BytesIO()
                _image(rng, shown).save(buffer, format="JPEG", quality=90)
                key = f"{s:03d}_{i:05d}"
                writer.write({"__key__": key, "jpg": buffer.getvalue(), "cls": label})
        urls.append(str(path))
    return urls


def shard_urls(name: str, shards: int, per_shard: int, *, seed: int) -> list[str]:
    """The shards of one split, written on first use and reused after (a marker file says they
    are complete)."""
    folder = DATA_DIR / f"jpeg-shards-v1-{name}-{shards}x{per_shard}-{seed}"
    done = folder / ".complete"
    if not done.exists():
        write_shards(folder, shards, per_shard, seed=seed)
        done.write_text("ok")
    return [str(folder / f"shard-{s:03d}.tar") for s in range(shards)]


def _to_tensor(image: Any) -> torch.Tensor:
    pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())
    return (pixels.permute(2, 0, 1).float().div_(255) - MEAN) / STD


def augment(image: Any) -> torch.Tensor:
    """torchvision's RandomResizedCrop(64, scale=(0.35, 1), ratio=(3/4, 4/3)) and
    RandomHorizontalFlip, drawn from torch's RNG as torchvision draws them (each DataLoader
    worker's RNG is seeded by PyTorch), with PIL's bilinear resize."""
    from PIL import Image

    image = image.convert("RGB")
    width, height = image.size
    box = (0, 0, width, height)
    for _ in range(10):
        area = width * height * float(torch.empty(1).uniform_(0.35, 1.0))
        ratio = math.exp(float(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3))))
        w = round(math.sqrt(area * ratio))
        h = round(math.sqrt(area / ratio))
        if 0 < w <= width and 0 < h <= height:
            x = int(torch.randint(0, width - w + 1, (1,)))
            y = int(torch.randint(0, height - h + 1, (1,)))
            box = (x, y, x + w, y + h)
            break
    image = image.resize((CROP, CROP), Image.Resampling.BILINEAR, box=box)
    if float(torch.rand(1)) < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return _to_tensor(image)


def centre(image: Any) -> torch.Tensor:
    """Validation: the centre 75% of the image, resized to the training size."""
    from PIL import Image

    image = image.convert("RGB")
    margin = IMAGE_SIZE // 8
    box = (margin, margin, IMAGE_SIZE - margin, IMAGE_SIZE - margin)
    return _to_tensor(image.resize((CROP, CROP), Image.Resampling.BILINEAR, box=box))


def image_stream(urls: list[str], *, train: bool = True, epoch: int | None = None) -> Any:
    """(image, label) pairs as WebDataset's docs build them: the shards split across DataLoader
    workers (its default ``split_by_worker``), a shuffle buffer seeded so that two reads give the
    same order, PIL decoding and the augmentation per item. With ``epoch``: shards drawn at
    random with replacement, ``epoch`` items an epoch (``resampled=True`` with
    ``with_epoch``, as WebDataset's docs recommend for multi-epoch training)."""
    import webdataset as wds

    if epoch is not None:
        stream = wds.WebDataset(urls, resampled=True, shardshuffle=False, empty_check=False)
        stream = stream.with_epoch(epoch)
    else:
        stream = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
    if train:
        stream = stream.shuffle(SHUFFLE_BUFFER, seed=0)
    return stream.decode("pil").to_tuple("jpg", "cls").map_tuple(augment if train else centre, int)


def stream_data(per_shard: int = PER_SHARD) -> tuple[Any, Any]:
    """(the training stream: 8 shards, 6,144 images, or ``per_shard`` images a shard; the
    validation stream: 2 shards, 512 images). The training stream has no length: give
    ``planned_samples`` (``--planned-samples``), as for a Hugging Face stream."""
    train = shard_urls("train", SHARDS, per_shard, seed=0)
    val = shard_urls("val", VAL_SHARDS, VAL_PER_SHARD, seed=1)
    return image_stream(train), image_stream(val, train=False)


class SmallCNN(nn.Module):
    """A strided 3x3 stem (16 channels, 32x32), three 3x3 convolution blocks (32-64-64
    channels, batch norm, ReLU, pooling), global average pooling and a linear classifier: about
    0.07 M parameters, 64x64 inputs; on a CPU core a training step costs about what the loader
    spends decoding and augmenting the batch, so the loader's settings matter."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        blocks: list[nn.Module] = [
            nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
        ]
        channels = 16
        for out in (32, 64, 64):
            blocks += [
                nn.Conv2d(channels, out, 3, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = out
        self.features = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def stream_model() -> nn.Module:
    torch.manual_seed(0)
    return SmallCNN()

"""Workloads built on model code autotune did not write: ``transformers`` classes from small
configs (no download), with realistic input pipelines.

- ``bert``: a BERT-style sequence classifier (4 layers, hidden 128) on 4,000 token sequences of
  8-128 tokens, padded per batch by a collate function; dict batches with ``labels``.
- ``resnet``: a ResNet image classifier reading JPEG files from a folder, decoded by PIL per item
  with a random crop and a flip.
- ``jpeg``: the same ResNet on JPEG bytes held in memory and decoded by PIL in ``__getitem__``
  (a random crop and a flip), as a dataset of encoded images in one file or array is read:
  decoding dominates, and no file cache is involved.
- ``gpt2``: a GPT-2 causal LM (4 layers, hidden 128) whose metric is its loss, through hooks
  (``gpt2_forward``, ``gpt2_loss``, ``gpt2_metric``) defined here, as a user's module would.
- ``gpt2_own``: the same model and sequences with ``labels`` in every item and no hooks, as a
  Hugging Face user hands them over: the guard picks the metric itself.
- ``digits``: a ViT (2 layers, hidden 64, 2x2 patches) on scikit-learn's handwritten digits
  (1,797 real 8x8 scans, 1,297 to train and 500 to validate), with a random shift when training.

Every factory is importable (``--model workloads:bert_model --data workloads:bert_data``) so
trial workers and ``autotune worker`` processes load the same code. ``transformers`` and
``pillow`` are test extras, not runtime dependencies of autotune.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

__all__ = [
    "bert_collate",
    "bert_data",
    "bert_model",
    "digits_data",
    "digits_model",
    "gpt2_data",
    "gpt2_forward",
    "gpt2_loss",
    "gpt2_metric",
    "gpt2_model",
    "gpt2_own_data",
    "gpt2_own_model",
    "jpeg_data",
    "resnet_data",
    "resnet_model",
]

DATA_DIR = Path(os.environ.get("AUTOTUNE_BENCH_DATA", Path(__file__).parent / ".data"))

# -- BERT: variable-length sequences, padded per batch -------------------------------------------

VOCAB = 1000
PAD, CLS = 0, 1  # as a BERT tokenizer writes them: [CLS] first, the classifier reads it


class TokenSequences(Dataset[dict[str, Any]]):
    """``[CLS]`` and 7-127 tokens, in two classes: class 1 draws about one token in seven from
    a small "signal" vocabulary, class 0 none (so short sequences carry little signal); one
    label in ten is flipped. Items are ``{"input_ids": LongTensor[L], "labels": int}``."""

    def __init__(self, n: int, *, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.items: list[dict[str, Any]] = []
        signal = torch.arange(2, 42)
        for _ in range(n):
            length = int(torch.randint(7, 128, (1,), generator=g))
            label = int(torch.randint(0, 2, (1,), generator=g))
            tokens = torch.randint(42, VOCAB, (length,), generator=g)
            if label:
                mask = torch.rand(length, generator=g) < 0.15
                picks = signal[torch.randint(0, len(signal), (length,), generator=g)]
                tokens = torch.where(mask, picks, tokens)
            if float(torch.rand((), generator=g)) < 0.1:
                label = 1 - label
            tokens = torch.cat([torch.tensor([CLS]), tokens])
            self.items.append({"input_ids": tokens, "labels": label})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.items[index]


def bert_collate(items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence of the batch, with an attention mask."""
    longest = max(int(item["input_ids"].shape[0]) for item in items)
    ids = torch.full((len(items), longest), PAD, dtype=torch.long)
    mask = torch.zeros((len(items), longest), dtype=torch.long)
    for i, item in enumerate(items):
        n = int(item["input_ids"].shape[0])
        ids[i, :n] = item["input_ids"]
        mask[i, :n] = 1
    labels = torch.tensor([int(item["labels"]) for item in items], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def bert_model() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=136,
        num_labels=2,
        pad_token_id=PAD,
    )
    return BertForSequenceClassification(config)


def bert_data() -> tuple[TokenSequences, TokenSequences]:
    return TokenSequences(4000, seed=0), TokenSequences(800, seed=1)


# -- ResNet: JPEG files from a folder, decoded per item ---------------------------------------

IMAGE_SIZE = 64
CROP = 56
CLASSES = 10


def _make_images(root: Path, n: int, seed: int) -> None:
    """A class-coloured square or disc (its size, place and shade vary) on a noisy background,
    saved as JPEG files in one folder per class; one image in twenty is in the wrong folder
    (as real datasets' labels are)."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    hues = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
            (145, 30, 180), (70, 240, 240), (240, 50, 230), (128, 128, 0), (0, 0, 128)]  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        label = i % CLASSES
        folder = root / f"class_{label if rng.random() >= 0.05 else rng.randrange(CLASSES)}"
        folder.mkdir(exist_ok=True)
        noise = bytes(rng.randrange(256) for _ in range(IMAGE_SIZE * IMAGE_SIZE * 3))
        image = Image.frombytes("RGB", (IMAGE_SIZE, IMAGE_SIZE), noise)
        draw = ImageDraw.Draw(image)
        size = rng.randrange(12, 28)
        x, y = rng.randrange(0, IMAGE_SIZE - size), rng.randrange(0, IMAGE_SIZE - size)
        shade = rng.uniform(0.5, 1.0)
        colour = tuple(int(c * shade) for c in hues[label])
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape([x, y, x + size, y + size], fill=colour)
        image.save(folder / f"{i:05d}.jpg", quality=90)


def _image_folder(name: str, n: int, seed: int) -> Path:
    root = DATA_DIR / f"images-v3-{name}-{n}"
    done = root / ".complete"
    if not done.exists():
        _make_images(root, n, seed)
        done.write_text("ok")
    return root


def _decode(source: Any, augment: bool) -> torch.Tensor:
    """A JPEG (a path or a file object) decoded by PIL: a random crop and a flip when
    augmenting, a centre crop otherwise (as torchvision's usual transforms), normalised."""
    from PIL import Image

    with Image.open(source) as image:
        image = image.convert("RGB")
        if augment:
            x, y = random.randrange(0, IMAGE_SIZE - CROP), random.randrange(0, IMAGE_SIZE - CROP)
        else:
            x = y = (IMAGE_SIZE - CROP) // 2
        image = image.crop((x, y, x + CROP, y + CROP))
        if augment and random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        data = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
    pixels = data.view(CROP, CROP, 3).permute(2, 0, 1).float().div_(255)
    return (pixels - 0.5) / 0.25


class ImageFolder(Dataset[tuple[torch.Tensor, int]]):
    """``root/class_k/*.jpg``, decoded by PIL per item; random crop and flip when augmenting,
    a centre crop otherwise (as torchvision's ImageFolder with its usual transforms)."""

    def __init__(self, root: Path, *, augment: bool) -> None:
        self.files = sorted(root.glob("class_*/*.jpg"))
        self.targets = [int(f.parent.name.removeprefix("class_")) for f in self.files]
        self.augment = augment

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return _decode(self.files[index], self.augment), self.targets[index]


class ResNetLogits(nn.Module):
    """transformers' ResNetForImageClassification, returning its logits: the (inputs, targets)
    convention needs no hooks."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import ResNetConfig, ResNetForImageClassification

        config = ResNetConfig(
            num_channels=3,
            embedding_size=32,
            hidden_sizes=[32, 64, 128, 256],
            depths=[1, 1, 1, 1],
            layer_type="basic",
            num_labels=CLASSES,
        )
        self.net = ResNetForImageClassification(config)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(pixel_values=pixels).logits
        return logits


def resnet_model() -> nn.Module:
    torch.manual_seed(0)
    return ResNetLogits()


def resnet_data() -> tuple[ImageFolder, ImageFolder]:
    return (
        ImageFolder(_image_folder("train", 3000, seed=0), augment=True),
        ImageFolder(_image_folder("val", 600, seed=1), augment=False),
    )


class JpegBytes(Dataset[tuple[torch.Tensor, int]]):
    """The JPEG files of an :class:`ImageFolder`, read once into memory as encoded bytes and
    decoded by PIL per item (a random crop and a flip when augmenting), as a dataset kept in
    one archive or array of encoded images is read: the decoding is the loader's work, and
    no file cache is between runs."""

    def __init__(self, root: Path, *, augment: bool) -> None:
        files = sorted(root.glob("class_*/*.jpg"))
        self.blobs = [f.read_bytes() for f in files]
        self.targets = [int(f.parent.name.removeprefix("class_")) for f in files]
        self.augment = augment

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import io

        return _decode(io.BytesIO(self.blobs[index]), self.augment), self.targets[index]


def jpeg_data() -> tuple[JpegBytes, JpegBytes]:
    """The ResNet's images as JPEG bytes in memory (``resnet_model`` is its model)."""
    return (
        JpegBytes(_image_folder("train", 3000, seed=0), augment=True),
        JpegBytes(_image_folder("val", 600, seed=1), augment=False),
    )


# -- GPT-2: a causal LM, its loss as the metric, through hooks ---------------------------------

LM_VOCAB = 64
LM_LENGTH = 64


class MarkovTokens(Dataset[dict[str, torch.Tensor]]):
    """Sequences from an order-2 Markov chain with a few likely next tokens per context."""

    def __init__(self, n: int, *, seed: int) -> None:
        rules = torch.Generator().manual_seed(99)
        choices = torch.randint(0, LM_VOCAB, (LM_VOCAB, LM_VOCAB, 3), generator=rules)
        g = torch.Generator().manual_seed(seed)
        tokens = torch.empty(n, LM_LENGTH, dtype=torch.long)
        tokens[:, :2] = torch.randint(0, LM_VOCAB, (n, 2), generator=g)
        weights = torch.tensor([0.7, 0.2, 0.1]).expand(n, 3)
        for t in range(2, LM_LENGTH):
            pick = torch.multinomial(weights, 1, generator=g).squeeze(1)
            tokens[:, t] = choices[tokens[:, t - 2], tokens[:, t - 1], pick]
        self.tokens = tokens

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index]}


def gpt2_model() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=LM_VOCAB, n_positions=LM_LENGTH, n_embd=128, n_layer=4, n_head=4)
    return GPT2LMHeadModel(config)


def gpt2_data() -> tuple[MarkovTokens, MarkovTokens]:
    return MarkovTokens(4000, seed=0), MarkovTokens(500, seed=1)


class LabelledTokens(Dataset[dict[str, torch.Tensor]]):
    """The same sequences as Hugging Face's causal-LM examples hand them over: ``labels`` are
    the ``input_ids`` (the model shifts them itself), so no hook is needed."""

    def __init__(self, tokens: MarkovTokens) -> None:
        self.tokens = tokens.tokens

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.tokens[index]
        return {"input_ids": ids, "labels": ids}


def gpt2_own_data() -> tuple[LabelledTokens, LabelledTokens]:
    """GPT-2 with its own loss: dict items with ``labels``, and no hooks at all."""
    train, val = gpt2_data()
    return LabelledTokens(train), LabelledTokens(val)


def gpt2_own_model() -> nn.Module:
    return gpt2_model()


def gpt2_forward(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[Any, torch.Tensor]:
    ids = batch["input_ids"]
    return model(input_ids=ids, labels=ids), ids


def gpt2_loss(outputs: Any, targets: torch.Tensor) -> torch.Tensor:
    loss: torch.Tensor = outputs.loss
    return loss


def gpt2_metric(outputs: Any, targets: torch.Tensor) -> float:
    """The next-token loss on the validation set (lower is better)."""
    logits = outputs.logits[:, :-1].float()
    return float(F.cross_entropy(logits.flatten(0, 1), targets[:, 1:].flatten()))


# -- ViT on real handwritten digits (scikit-learn's copy of the UCI scans) -----------------------

DIGIT_CLASSES = 10


class Digits(Dataset[tuple[torch.Tensor, int]]):
    """8x8 grey-level scans (0-16) as 1x8x8 tensors scaled to [-1, 1]; when ``augment``, each
    item moved by up to one pixel (zero padded), drawn per item from the loader's RNG."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, *, augment: bool) -> None:
        self.images, self.targets, self.augment = images, targets, augment

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        if self.augment:
            dx, dy = random.randint(-1, 1), random.randint(-1, 1)
            image = torch.roll(F.pad(image, (1, 1, 1, 1)), shifts=(dy, dx), dims=(1, 2))
            image = image[:, 1:-1, 1:-1]
        return image, int(self.targets[index])


class ViTLogits(nn.Module):
    """transformers' ViTForImageClassification, returning its logits."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import ViTConfig, ViTForImageClassification

        config = ViTConfig(
            image_size=8,
            patch_size=2,
            num_channels=1,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            num_labels=DIGIT_CLASSES,
        )
        self.net = ViTForImageClassification(config)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(pixel_values=pixels).logits
        return logits


def digits_model() -> nn.Module:
    torch.manual_seed(0)
    return ViTLogits()


def digits_data() -> tuple[Digits, Digits]:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).div_(8.0).sub_(1.0).unsqueeze(1)
    targets = torch.tensor(data.target)
    order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(0))
    train, val = order[:1297], order[1297:]
    return (
        Digits(images[train], targets[train], augment=True),
        Digits(images[val], targets[val], augment=False),
    )

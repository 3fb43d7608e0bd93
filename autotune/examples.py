"""Built-in example workloads that run offline: models and datasets as CLI factories.

``autotune search --model autotune.examples:cnn_model --data autotune.examples:cnn_data``

- ``cnn``: a small CNN on 32x32 synthetic images with CPU-side augmentation (random crop, flip,
  colour jitter, noise), the case where DataLoader workers, batch size and precision all matter.
- ``mlp``: an MLP on scikit-learn's bundled 8x8 digits.
- ``lm``: a small causal transformer language model on token sequences from a synthetic
  order-2 Markov "language" (its cross-entropy guarded by default; ``--metric accuracy`` for
  next-token accuracy), with repeated layers to checkpoint.
- ``tiny``: a very small MLP on separable synthetic data, for tests and quick demos.
- ``hf``: a Hugging Face ``BertForSequenceClassification`` built from a tiny config (no
  download; needs ``transformers``) on variable-length token sequences: dict items with
  ``labels``, padded per batch by ``hf_collate``. No forward hook, no loss: autotune calls the
  model as Hugging Face's ``Trainer`` does; the metric guarded is its own loss.
- ``hf_lm``: a Hugging Face ``GPT2LMHeadModel`` from a tiny config on counting sequences
  (``{"input_ids", "labels"}`` items, labels padded with -100 by ``hf_lm_collate``): the model
  computes its own, shifted loss, which is what is guarded with no hook.

``autotune search --model autotune.examples:hf_model --data autotune.examples:hf_data
--collate autotune.examples:hf_collate --out best.json``
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, TensorDataset

__all__ = [
    "AugmentedImages",
    "CountingText",
    "MarkovText",
    "SmallCNN",
    "TinyLM",
    "TokenSequences",
    "cnn_data",
    "cnn_model",
    "hf_collate",
    "hf_data",
    "hf_lm_collate",
    "hf_lm_data",
    "hf_lm_model",
    "hf_model",
    "lm_data",
    "lm_model",
    "mlp_data",
    "mlp_model",
    "tiny_data",
    "tiny_model",
]


class AugmentedImages(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic 10-class 3x32x32 images (class prototypes plus noise), stored as uint8 and
    augmented per item on the CPU, as a torchvision pipeline would."""

    def __init__(self, n: int = 4096, *, seed: int = 0, augment: bool = True) -> None:
        g = torch.Generator().manual_seed(seed)
        protos = torch.rand(10, 3, 6, 6, generator=torch.Generator().manual_seed(1234))
        base = F.interpolate(protos, size=32, mode="bilinear", align_corners=False)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        x = base[self.targets] + 0.65 * torch.randn(n, 3, 32, 32, generator=g)
        self.images = (x.clamp(0, 1) * 255).to(torch.uint8)
        self.augment = augment

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img = self.images[index].float().div_(255)
        if self.augment:
            img = F.pad(img.unsqueeze(0), (4, 4, 4, 4), mode="reflect").squeeze(0)
            dx, dy = torch.randint(0, 9, (2,)).tolist()
            img = img[:, dy : dy + 32, dx : dx + 32]
            if bool(torch.rand(()) < 0.5):
                img = img.flip(-1)
            brightness, contrast = (0.8 + 0.4 * torch.rand(2)).tolist()
            mean = img.mean()
            img = ((img - mean) * contrast + mean) * brightness
            img = img + 0.03 * torch.randn_like(img)
        img = (img - 0.5) / 0.25
        return img.contiguous(), int(self.targets[index])


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.pool(F.relu(self.bn(self.conv(x))))
        return out


class SmallCNN(nn.Module):
    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            ConvBlock(3, width), ConvBlock(width, 2 * width), ConvBlock(2 * width, 4 * width)
        )
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features: torch.Tensor = self.blocks(x)
        logits: torch.Tensor = self.head(torch.flatten(F.adaptive_avg_pool2d(features, 1), 1))
        return logits


def cnn_model() -> nn.Module:
    torch.manual_seed(0)
    return SmallCNN()


def cnn_data(
    n: int = 4096,
) -> tuple[Dataset[tuple[torch.Tensor, int]], Dataset[tuple[torch.Tensor, int]]]:
    """(augmented training set, plain validation set)."""
    return AugmentedImages(n, seed=0), AugmentedImages(max(256, n // 4), seed=1, augment=False)


class TinyLM(nn.Module):
    """A pre-norm causal transformer: embedding, ``layers`` encoder layers, a vocabulary head."""

    def __init__(
        self, vocab: int = 64, width: int = 128, heads: int = 4, layers: int = 4, seq: int = 64
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, width))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
            )
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        steps = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:steps]
        mask = nn.Transformer.generate_square_subsequent_mask(steps, device=tokens.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits  # (batch, steps, vocab): the default loss and accuracy take it per token


class MarkovText(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sequences from an order-2 Markov chain in which each context has a few likely next
    tokens: learnable, but never perfectly predictable. Items are (tokens, next tokens)."""

    def __init__(self, n: int = 4096, *, vocab: int = 64, seq: int = 64, seed: int = 0) -> None:
        rules = torch.Generator().manual_seed(4321)
        choices = torch.randint(0, vocab, (vocab, vocab, 3), generator=rules)
        g = torch.Generator().manual_seed(seed)
        tokens = torch.empty(n, seq + 1, dtype=torch.long)
        tokens[:, :2] = torch.randint(0, vocab, (n, 2), generator=g)
        for t in range(2, seq + 1):
            pick = torch.multinomial(
                torch.tensor([0.7, 0.2, 0.1]).expand(n, 3), 1, generator=g
            ).squeeze(1)
            tokens[:, t] = choices[tokens[:, t - 2], tokens[:, t - 1], pick]
        self.tokens = tokens

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[index]
        return row[:-1], row[1:]


def lm_model() -> nn.Module:
    torch.manual_seed(0)
    return TinyLM()


def lm_data(n: int = 4096) -> tuple[MarkovText, MarkovText]:
    """(training sequences, validation sequences)."""
    return MarkovText(n, seed=0), MarkovText(max(256, n // 8), seed=1)


def mlp_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 128),
        nn.ReLU(),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


def mlp_data() -> TensorDataset:
    """scikit-learn's bundled digits (1,797 8x8 images), scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    ds = TensorDataset(x, y)
    ds.targets = y  # type: ignore[attr-defined]  # lets the split stratify without iterating
    return ds


def tiny_model(features: int = 8, classes: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, classes))


def tiny_data(n: int = 2048, features: int = 8, classes: int = 3) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    centers = 3.0 * torch.randn(classes, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, features, generator=g)
    ds = TensorDataset(x, y)
    ds.targets = y  # type: ignore[attr-defined]
    return ds


class TokenSequences(Dataset[dict[str, Any]]):
    """Token sequences of 6-48 tokens after a ``[CLS]`` (id 1), in two classes: class 1 draws
    about one token in four from a small "signal" vocabulary, class 0 none. Items are dicts
    ``{"input_ids": 1-D tensor, "labels": int}``, as a tokenized Hugging Face dataset's are."""

    vocab = 100

    def __init__(self, n: int = 512, *, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 2, (n,), generator=g)
        self.items: list[torch.Tensor] = []
        for label in self.targets.tolist():
            length = int(torch.randint(6, 49, (), generator=g))
            tokens = torch.randint(2, 90, (length,), generator=g)
            if label:
                marked = torch.rand(length, generator=g) < 0.25
                signal = torch.randint(90, 100, (length,), generator=g)
                tokens = torch.where(marked, signal, tokens)
            self.items.append(torch.cat([torch.tensor([1]), tokens]))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"input_ids": self.items[index], "labels": int(self.targets[index])}


def hf_collate(items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest sequence (id 0), with the attention mask, as Hugging Face's
    ``DataCollatorWithPadding`` does."""
    longest = max(int(item["input_ids"].shape[0]) for item in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros(len(items), longest, dtype=torch.long)
    for row, item in enumerate(items):
        n = int(item["input_ids"].shape[0])
        ids[row, :n] = item["input_ids"]
        mask[row, :n] = 1
    labels = torch.tensor([int(item["labels"]) for item in items])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def hf_model() -> nn.Module:
    """``transformers.BertForSequenceClassification`` from a tiny config: no download."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=TokenSequences.vocab,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )  # two labels, the default
    model: nn.Module = BertForSequenceClassification(config)
    return model


def hf_data(n: int = 512) -> tuple[TokenSequences, TokenSequences]:
    """(training sequences, validation sequences)."""
    return TokenSequences(n, seed=0), TokenSequences(max(128, n // 4), seed=1)


class CountingText(Dataset[dict[str, torch.Tensor]]):
    """Token sequences of 8-24 tokens that count up from a random start, modulo the vocabulary
    (5 6 7 ... 15 0 1 ...): each next token follows from the current one, so a language model
    learns them in a few steps. Items are dicts ``{"input_ids", "labels"}`` with the labels
    equal to the inputs, as a causal LM's tokenized data goes to Hugging Face's ``Trainer``
    (the model shifts them itself)."""

    vocab = 16

    def __init__(self, n: int = 256, *, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, self.vocab, (n,), generator=g).tolist()
        lengths = torch.randint(8, 25, (n,), generator=g).tolist()
        pairs = zip(starts, lengths, strict=True)
        self.items = [(s + torch.arange(k)) % self.vocab for s, k in pairs]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.items[index], "labels": self.items[index].clone()}


def hf_lm_collate(items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest sequence: inputs with id 0 and an attention mask, labels with
    -100 (not counted), as Hugging Face's ``DataCollatorForLanguageModeling`` does."""
    longest = max(int(item["input_ids"].shape[0]) for item in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros(len(items), longest, dtype=torch.long)
    labels = torch.full((len(items), longest), -100, dtype=torch.long)
    for row, item in enumerate(items):
        n = int(item["input_ids"].shape[0])
        ids[row, :n] = item["input_ids"]
        mask[row, :n] = 1
        labels[row, :n] = item["labels"]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def hf_lm_model() -> nn.Module:
    """``transformers.GPT2LMHeadModel`` from a tiny config (one layer, width 32): no download."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=CountingText.vocab,
        n_positions=32,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=0,  # within the tiny vocabulary
        eos_token_id=0,
    )
    model: nn.Module = GPT2LMHeadModel(config)
    return model


def hf_lm_data(n: int = 256) -> tuple[CountingText, CountingText]:
    """(training sequences, validation sequences) for :func:`hf_lm_model`."""
    return CountingText(n, seed=0), CountingText(max(64, n // 4), seed=1)

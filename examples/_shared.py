"""What the three examples share: the config to apply, and the same tiny data split."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import Subset, random_split

import autotune
from autotune.examples import tiny_data

DEFAULT_CONFIG = Path(__file__).with_name("tuned.json")
EPOCHS = 3


def config_from_argv() -> autotune.TrainingConfig:
    """`python examples/<script>.py [best.json]`: a result written by `autotune search`, or a
    bare config such as examples/tuned.json."""
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_CONFIG
    cfg = autotune.load_config(path)
    print(f"config: {cfg.describe()}")
    return cfg


def datasets() -> tuple[Subset, Subset]:
    """512 training and 128 held-out items of autotune's tiny separable 3-class problem."""
    data = tiny_data(640)
    train, val = random_split(data, [512, 128], generator=torch.Generator().manual_seed(0))
    return train, val

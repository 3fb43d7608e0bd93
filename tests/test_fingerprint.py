"""The fingerprints of what a study measured: the model's structure (not its weights) and the
data's length, structure and first items, stable under random augmentation."""

from __future__ import annotations

import random
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset

from autotune._trial.fingerprint import (
    data_changes,
    data_fingerprint,
    model_changes,
    model_fingerprint,
    study_suffix,
)
from autotune.examples import tiny_data, tiny_model


def mlp(width: int = 32, depth: int = 1) -> nn.Module:
    hidden = [m for _ in range(depth - 1) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), *hidden, nn.Linear(width, 3))


def test_the_model_fingerprint_is_its_structure_not_its_weights() -> None:
    a, b = model_fingerprint(mlp()), model_fingerprint(mlp())  # other random weights
    assert a == b
    assert model_fingerprint(torch.compile(mlp()))["hash"] == a["hash"]  # compiling: same model


def test_a_wider_or_deeper_model_is_named_for_what_changed() -> None:
    before = model_fingerprint(mlp(32))
    wider = model_changes(before, model_fingerprint(mlp(2048)))
    assert wider == [
        "3 parameter shapes differ (0.weight 32x8 float32 -> 2048x8 float32; 0.bias 32 float32 "
        "-> 2048 float32; ...)"
    ]
    deeper = model_changes(before, model_fingerprint(mlp(32, depth=2)))
    assert deeper[0] == "layers added (2 modules: 3, 4)"
    assert "2 parameters added (4.weight, 4.bias)" in deeper
    halved = model_changes(before, model_fingerprint(mlp(32).to(torch.bfloat16)))
    assert halved == ["4 parameter dtypes differ (0.weight float32 -> bfloat16; ...)"]
    assert model_changes(before, None) == []  # a study stored before fingerprints: unknown


class Augmented(Dataset):
    """Random augmentation drawn from torch, random and numpy, as a vision pipeline does."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        noise = torch.randn(4) + random.random() + float(np.random.rand())
        return noise + i, i % 2


class Clocked(Dataset):
    """Items drawn from the clock: not the same under any seed."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        return torch.tensor([float(time.perf_counter_ns() % 9973)]), i


class Stream(IterableDataset):
    def __init__(self, n: int = 8, width: int = 4) -> None:
        self.n, self.width = n, width

    def __iter__(self):
        for i in range(self.n):
            yield torch.randn(self.width), i


def test_the_data_fingerprint_is_stable_under_random_augmentation() -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state(), random.getstate()
    assert data_fingerprint(Augmented())["train"]["items"] is not None  # read under a fixed seed
    assert data_fingerprint(Augmented()) == data_fingerprint(Augmented())
    assert data_fingerprint(Stream()) == data_fingerprint(Stream())
    assert torch.equal(torch.get_rng_state(), state[0]) and random.getstate() == state[1]
    clocked = data_fingerprint(Clocked())
    assert clocked["train"]["items"] is None  # unstable: the structure alone
    assert clocked["train"]["structure"] is not None
    assert clocked == data_fingerprint(Clocked())


def test_changed_data_is_named_for_what_changed() -> None:
    before = data_fingerprint(tiny_data())
    assert data_changes(before, data_fingerprint(tiny_data())) == []
    assert data_changes(before, data_fingerprint(tiny_data(1000)))[0] == (
        "training set: length 2,048 -> 1,000"
    )
    assert data_changes(before, data_fingerprint(tiny_data(features=16))) == [
        'training set: item structure differs: item 0 ["float32[8]", "int64[]"] -> '
        '["float32[16]", "int64[]"]'
    ]
    assert data_changes(before, data_fingerprint(tiny_data(), tiny_data(64))) == [
        "validation set: given"
    ]
    assert data_changes(data_fingerprint(Stream()), data_fingerprint(Stream(width=6))) == [
        'training set: item structure differs: item 0 ["float32[4]", "int"] -> '
        '["float32[6]", "int"]'
    ]


def test_the_default_study_name_follows_the_model_and_the_data() -> None:
    model, data = model_fingerprint(tiny_model()), data_fingerprint(tiny_data())
    assert study_suffix(model, data) == study_suffix(model_fingerprint(tiny_model()), data)
    assert study_suffix(model, data) != study_suffix(model_fingerprint(mlp(64)), data)
    assert study_suffix(model, data) != study_suffix(model, data_fingerprint(tiny_data(1000)))

"""Shared fixtures: tiny models and datasets live in autotune.examples and here."""

from __future__ import annotations

import os

# One intra-op thread per test process (and the trial workers it starts): on a busy 2-core
# machine OpenMP threads that spin-wait for each other make tiny steps 100x slower at random,
# which would turn timing-based assertions into coin flips.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

import autotune
from autotune.examples import tiny_data, tiny_model

torch.set_num_threads(1)

FAST_BUDGET = autotune.Budget(warmup_steps=1, timed_samples=64, min_timed_steps=3, chunks=3)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda.is_available() is False here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tiny() -> tuple[torch.nn.Module, torch.utils.data.Dataset]:
    return tiny_model(), tiny_data()


@pytest.fixture
def fast_kwargs() -> dict:
    """find_best options that keep a search to a few seconds on a CPU. Trials run in-process
    here so tests can watch them; tests/test_faults.py covers isolated workers."""
    return {"budget": FAST_BUDGET, "accuracy_samples": 2048, "device": "cpu", "isolation": "none"}

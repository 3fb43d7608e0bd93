"""Models, datasets, collate functions and factories whose first call hangs, for the tests of
the limits before the first trial (tests/test_bounded.py); importable by name from the CLI
(``hanging:hanging_model``) and by a subprocess.

Each waits on :data:`RELEASE` in its own frame (so that frame is the one an error names) for at
most an hour. A test that sets it sees the thread autotune abandoned wake and end at autotune's
next step; a test that does not leaves it waiting, a daemon thread that ends with the process
(each test waits on an event of its own: released, a thread would run the user's code on, and
one inside a torch op when the process exits aborts it).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

from autotune.examples import tiny_data, tiny_model

RELEASE = threading.Event()
HOUR = 3600.0
CALLS: list[str] = []  # what ran after a hang was released


class HangingForward(nn.Module):
    """The tiny classifier, whose forward waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        RELEASE.wait(HOUR)
        CALLS.append("forward returned")
        out: torch.Tensor = self.net(x)
        return out


class HangingItems(Dataset[Any]):
    """The tiny dataset, whose items wait until released (a network filesystem that never
    answers)."""

    def __init__(self) -> None:
        self.inner = tiny_data()

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> Any:
        RELEASE.wait(HOUR)
        return self.inner[i]


def hanging_collate(items: list[Any]) -> Any:
    RELEASE.wait(HOUR)
    return default_collate(items)


def counted_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    CALLS.append("loss")
    return nn.functional.cross_entropy(outputs, targets)


class BusyForward(HangingForward):
    """The tiny classifier, whose forward computes (torch ops, not a wait) until released: a
    forward that is only slow."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.randn(64, 64)
        while not RELEASE.is_set():
            a = torch.tanh(a @ a)
        out: torch.Tensor = self.net(x)
        return out


def hanging_model() -> nn.Module:
    return HangingForward()


def busy_model() -> nn.Module:
    return BusyForward()


def hanging_items() -> Dataset[Any]:
    return HangingItems()


def hanging_factory() -> Dataset[Any]:
    """A data factory that never returns (a download that stalls)."""
    RELEASE.wait(HOUR)
    return tiny_data()

"""A model whose step time does not depend on the machine's load, importable by CLI factories."""

from __future__ import annotations

import time

import torch
from torch import nn

from autotune.examples import tiny_model

STEP_COST = 0.002  # seconds per training step, whatever the batch size


class PerStepCost(nn.Module):
    """tiny_model plus a fixed cost per training step (as a Python-heavy step or a kernel
    launch has): a bigger batch is faster per sample on any machine, busy or not. Training
    batches above ``oom_above`` run out of memory, as on a smaller GPU."""

    def __init__(self, oom_above: int | None = None) -> None:
        super().__init__()
        self.net = tiny_model()
        self.oom_above = oom_above

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            if self.oom_above is not None and x.shape[0] > self.oom_above:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (faked)"
                )
            time.sleep(STEP_COST)
        out: torch.Tensor = self.net(x)
        return out


def per_step_model() -> nn.Module:
    return PerStepCost()


def agreement(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """A metric function whose name does not say which way it is better."""
    return float((outputs.argmax(-1) == targets).float().mean())


def offset_accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """A metric hook whose values say which metric a trial guarded: accuracy, plus 10."""
    return 10.0 + float((outputs.argmax(dim=-1) == targets).float().mean())


def sum_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A loss hook (cross-entropy, summed over the batch) importable by worker processes."""
    return torch.nn.functional.cross_entropy(outputs.float(), targets, reduction="sum")


def offset_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy plus 100: the same gradients, and a `metric="loss"` value that says which
    loss a trial guarded (the default loss stays below 100)."""
    return torch.nn.functional.cross_entropy(outputs.float(), targets) + 100.0

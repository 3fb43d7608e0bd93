"""CUDA-only paths, run where a GPU exists (skipped with the reason elsewhere, see conftest)."""

from __future__ import annotations

import gc

import pytest
import torch

import autotune
from autotune._trial.failures import FailureReason
from autotune._trial.runner import run_trial
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import SmallCNN, tiny_data

from conftest import FAST_BUDGET

pytestmark = pytest.mark.gpu


def test_cuda_oom_trials_give_the_allocator_back() -> None:
    class Hog(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 3)

        def forward(self, x):
            held = torch.empty(512 * 2**20, dtype=torch.uint8, device=x.device)  # 512 MiB
            held.fill_(1)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB")

    task = make_task(
        forward=None, loss_fn=None, metric="accuracy", higher_is_better=None, collate_fn=None
    )
    workload = Workload(model=Hog(), train=tiny_data(), val=tiny_data(), task=task)
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    for _ in range(10):
        outcome = run_trial(autotune.TrainingConfig(device="cuda:0"), workload, FAST_BUDGET)
        assert outcome.failure is FailureReason.OOM
    assert torch.cuda.memory_allocated() == before
    assert torch.cuda.memory_reserved() < 512 * 2**20  # the cache was emptied too


def test_fp16_uses_a_grad_scaler_and_autocasts_to_half() -> None:
    cfg = autotune.TrainingConfig(device="cuda:0", precision="fp16")
    assert cfg.grad_scaler().is_enabled()
    with cfg.autocast():
        out = torch.nn.Linear(4, 4).cuda()(torch.randn(2, 4, device="cuda"))
    assert out.dtype == torch.float16


def test_pinned_batches_and_cudnn_benchmark_are_applied() -> None:
    cfg = autotune.TrainingConfig(
        device="cuda:0",
        pin_memory=True,
        num_workers=1,
        persistent_workers=True,
        cudnn_benchmark=True,
    )
    batch = next(iter(cfg.dataloader(tiny_data())))
    assert batch[0].is_pinned()
    before = torch.backends.cudnn.benchmark
    with cfg.backends():
        assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cudnn.benchmark is before


def test_a_short_search_on_the_gpu_finds_a_feasible_winner() -> None:
    result = autotune.find_best(
        SmallCNN(width=8),
        autotune.examples.AugmentedImages(512),
        n_trials=4,
        space="quick",
        device="cuda",
        accuracy_samples=1024,
    )
    assert result.environment["device"] == "cuda:0"
    assert result.winner.feasible and result.speedup >= 1.0
    assert result.metrics["peak_memory_bytes"] > 0
    assert result.metrics["memory_kind"] == "cuda_allocator"

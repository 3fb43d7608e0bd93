"""Why a trial failed: out of memory (in every known form), divergence, worker crashes, errors.

A failed trial is information, not a crash: it is recorded with its reason, counted as
infeasible, and the search goes on.
"""

from __future__ import annotations

import enum
import gc

import torch

__all__ = ["Diverged", "FailureReason", "classify", "free_memory", "is_oom"]


class FailureReason(str, enum.Enum):
    OOM = "oom"
    DIVERGED = "diverged"  # NaN/inf loss, or a GradScaler that collapsed
    TIMEOUT = "timeout"
    CRASH = "crashed"  # the trial's worker process died (segfault, OOM-killer, os._exit)
    WORKER = "dataloader_worker"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Diverged(RuntimeError):
    """The loss became NaN/inf during a trial."""


# Out-of-memory in the forms PyTorch, cuDNN, cuBLAS and the CPU allocator report it
# (cf. Lightning utilities/memory.py, accelerate utils/memory.py).
_OOM_MESSAGES = (
    "out of memory",
    "CUDNN_STATUS_NOT_SUPPORTED",  # cuDNN's way of failing when its workspace does not fit
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory",
    "std::bad_alloc",
)
_WORKER_MESSAGES = ("DataLoader worker", "dataloader worker")
_SHM_MESSAGES = ("/dev/shm", "shared memory", "bus error")


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return any(m in text for m in _OOM_MESSAGES)
    return False


def classify(exc: BaseException) -> tuple[FailureReason, str]:
    """(reason, one-line message a user can act on) for an exception raised inside a trial."""
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0][:500] if text else type(exc).__name__
    if isinstance(exc, Diverged):
        return FailureReason.DIVERGED, str(exc)
    if is_oom(exc):
        return FailureReason.OOM, f"out of memory: {first}"
    lowered = text.lower()
    if any(m.lower() in lowered for m in _SHM_MESSAGES) and "worker" in lowered:
        return (
            FailureReason.WORKER,
            f"{first} (DataLoader workers ran out of shared memory: enlarge /dev/shm, e.g. "
            "docker --shm-size, or use fewer workers / a smaller prefetch_factor)",
        )
    if any(m in text for m in _WORKER_MESSAGES):
        # "Caught ValueError in DataLoader worker process 0. Original Traceback ...": the last
        # line is the dataset's own error, the part a user can act on.
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        origin = lines[-1] if len(lines) > 1 else ""
        detail = f"{first} -> {origin}" if origin and origin not in first else first
        return FailureReason.WORKER, f"DataLoader worker failed: {detail[:600]}"
    return FailureReason.ERROR, first


def free_memory(device: str) -> None:
    """Release what a finished trial held. Call it *outside* an ``except`` block: the exception's
    frames keep the trial's tensors alive until the block is left."""
    gc.collect()
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()

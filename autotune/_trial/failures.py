"""Why a trial failed: out of memory (in every known form), divergence, worker crashes, errors.

A failed trial is information, not a crash: it is recorded with its reason, counted as
infeasible, and the search goes on.
"""

from __future__ import annotations

import enum
import gc

import torch

__all__ = [
    "DEVICE_ERROR_ADVICE",
    "Diverged",
    "FailureReason",
    "classify",
    "free_memory",
    "is_oom",
    "memory_nearly_full",
    "poisons_process",
]


class FailureReason(str, enum.Enum):
    OOM = "oom"
    DIVERGED = "diverged"  # NaN/inf loss, or a GradScaler that collapsed
    TIMEOUT = "timeout"
    CRASH = "crashed"  # the trial's worker process died (segfault, OOM-killer, os._exit)
    # A CUDA error that leaves the process's CUDA context unusable (illegal address,
    # device-side assert): the process that ran the trial cannot run another.
    DEVICE = "device_error"
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
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory",
    "std::bad_alloc",
)
# cuDNN says this when its workspace does not fit, but also for a layout, dtype or shape it has
# no kernel for: memory only when the GPU's memory was nearly full.
_MAYBE_OOM = "CUDNN_STATUS_NOT_SUPPORTED"
NEARLY_FULL = 0.85  # of the GPU's memory, reserved at the trial's peak
_WORKER_MESSAGES = ("DataLoader worker", "dataloader worker")
# CUDA errors after which every later CUDA call in the process fails too ("sticky" errors),
# where they arrive as a plain RuntimeError rather than torch.AcceleratorError.
_POISON_MESSAGES = (
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "illegal instruction",
    "misaligned address",
    "CUDA error: an illegal",
)
DEVICE_ERROR_ADVICE = (
    "Rerun with CUDA_LAUNCH_BLOCKING=1 to see which operation raised it (CUDA reports errors "
    "asynchronously, at a later call)."
)
_SHM_MESSAGES = ("/dev/shm", "shared memory", "bus error")


def poisons_process(exc: BaseException) -> bool:
    """Whether ``exc`` leaves this process's CUDA context unusable: ``torch.AcceleratorError``
    (an error the CUDA runtime reported), or the messages of CUDA's sticky errors."""
    if is_oom(exc) or any(m in str(exc) for m in _WORKER_MESSAGES):
        return False  # a DataLoader worker's error, re-raised here: this process is fine
    if isinstance(exc, torch.AcceleratorError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _POISON_MESSAGES)


def memory_nearly_full() -> bool:
    """Whether the current GPU's memory was nearly full at this process's peak (since the last
    peak reset: the trial's start)."""
    if not torch.cuda.is_available():
        return False
    try:
        _, total = torch.cuda.mem_get_info()
        return torch.cuda.max_memory_reserved() >= NEARLY_FULL * total
    except Exception:  # the context is gone: no evidence of memory either way
        return False


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        if any(m in text for m in _OOM_MESSAGES):
            return True
        return _MAYBE_OOM in text and memory_nearly_full()
    return False


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def _first_device_error(exc: BaseException) -> BaseException:
    """The first of a chain of CUDA errors: after the real one, clean-up code (restoring the
    RNG state, say) raises again while it is handled, and the last error says nothing."""
    seen = {id(exc)}
    while exc.__context__ is not None and id(exc.__context__) not in seen:
        if not poisons_process(exc.__context__):
            break
        exc = exc.__context__
        seen.add(id(exc))
    return exc


def classify(exc: BaseException) -> tuple[FailureReason, str]:
    """(reason, one-line message a user can act on) for an exception raised inside a trial."""
    text = f"{type(exc).__name__}: {exc}".strip()
    first = _first_line(exc)
    if isinstance(exc, Diverged):
        return FailureReason.DIVERGED, str(exc)
    if is_oom(exc):
        return FailureReason.OOM, f"out of memory: {first}"
    if _MAYBE_OOM in text:
        return (
            FailureReason.ERROR,
            f"{first} (not counted as out of memory: the GPU's memory was not nearly full, so "
            "cuDNN has no kernel for this layout, dtype or shape)",
        )
    if poisons_process(exc):
        real = _first_line(_first_device_error(exc))
        return FailureReason.DEVICE, f"{real} ({DEVICE_ERROR_ADVICE})"
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


def free_memory(device: str, *, poisoned: bool = False) -> None:
    """Release what a finished trial held. Call it *outside* an ``except`` block: the exception's
    frames keep the trial's tensors alive until the block is left. After an error that
    ``poisoned`` the CUDA context, CUDA is not called again (it would only raise once more)."""
    gc.collect()
    if torch.device(device).type == "cuda" and torch.cuda.is_available() and not poisoned:
        torch.cuda.empty_cache()

"""Models and datasets that fail on purpose, importable by trial worker processes."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import torch
from torch import nn
from torch.utils.data import Dataset, get_worker_info

from autotune.examples import tiny_data, tiny_model

OOM_MESSAGES = {
    "cuda": "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)",
    "cudnn": "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
    "non-contiguous input.",
    "cublas": "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cpu": "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)",
}


ILLEGAL_ADDRESS = "CUDA error: an illegal memory access was encountered"
POISONED = False  # set in a process once a "poison" fault fired: CUDA errors are sticky


class FaultAbove(nn.Module):
    """A tiny classifier that misbehaves in training when the batch is larger than ``limit``."""

    def __init__(self, fault: str, limit: int = 32) -> None:
        super().__init__()
        self.net = tiny_model()
        self.fault = fault
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global POISONED
        if POISONED:  # like a real CUDA context after an illegal address: every call fails
            raise torch.AcceleratorError(f"{ILLEGAL_ADDRESS} (an earlier error, reported again)")
        self.calls = getattr(self, "calls", 0) + 1
        # Out of memory only after a few steps, as fragmentation does: the memory probe's short
        # runs pass, and the trial itself must recognise and record the failure.
        late = not self.fault.startswith(("oom", "poison")) or self.calls > 3
        if self.training and x.shape[0] > self.limit and late:
            if self.fault == "hang":
                time.sleep(3600)
            elif self.fault == "segfault":
                ctypes.string_at(0)
            elif self.fault == "exit":
                os._exit(3)
            elif self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.fault == "oom-type":
                raise torch.OutOfMemoryError(OOM_MESSAGES["cuda"])
            elif self.fault.startswith("oom-"):
                raise RuntimeError(OOM_MESSAGES[self.fault.removeprefix("oom-")])
            elif self.fault == "poison":
                POISONED = True
                raise torch.AcceleratorError(ILLEGAL_ADDRESS)
            elif self.fault == "nan":
                return self.net(x) * float("nan")
        out: torch.Tensor = self.net(x)
        return out


class OnRank(FaultAbove):
    """FaultAbove on one data-parallel rank only: the other ranks train on (and wait for it in
    the next all-reduce)."""

    def __init__(self, fault: str, rank: int = 1, limit: int = 32) -> None:
        super().__init__(fault, limit)
        self.rank = rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist = torch.distributed
        if dist.is_initialized() and dist.get_rank() != self.rank:
            out: torch.Tensor = self.net(x)
            return out
        return super().forward(x)


class UnreadableOnRank1(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """tiny_data, except that data-parallel rank 1 cannot load it (a shard it cannot open)."""

    def __init__(self) -> None:
        self.data = tiny_data()
        self.targets = self.data.targets

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        item: tuple[torch.Tensor, torch.Tensor] = self.data[index]
        return item

    def __setstate__(self, state: dict[str, object]) -> None:
        if os.environ.get("RANK") == "1":
            raise OSError("cannot open /data/shard-1.tar")
        self.__dict__.update(state)


class FaultyInWorkers(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """tiny_data, except that items read inside a DataLoader worker raise or kill the worker."""

    def __init__(self, fault: str) -> None:
        self.data = tiny_data()
        self.targets = self.data.targets
        self.fault = fault

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if get_worker_info() is not None:
            if self.fault == "raise":
                raise ValueError(f"corrupt record #{index}")
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        item: tuple[torch.Tensor, torch.Tensor] = self.data[index]
        return item


class Slow(nn.Module):
    """tiny_model, 30 ms per training step: slow enough to be interrupted mid-trial."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            time.sleep(0.03)
        out: torch.Tensor = self.net(x)
        return out


def slow_model() -> nn.Module:
    return Slow()


def data() -> Dataset[tuple[torch.Tensor, torch.Tensor]]:
    return tiny_data()


class DeviceAssert(nn.Module):
    """tiny_model, but a training batch larger than ``limit`` indexes out of range on the GPU:
    a real device-side assert, which leaves the process's CUDA context unusable."""

    def __init__(self, limit: int = 32) -> None:
        super().__init__()
        self.net = tiny_model()
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > self.limit:
            index = torch.full((1,), 10**9, device=x.device)
            x = x[index]  # out of bounds: a device-side assert, reported asynchronously
        out: torch.Tensor = self.net(x)
        return out


def device_assert_model() -> nn.Module:
    return DeviceAssert()


class SpawnsBusyChild(nn.Module):
    """The tiny classifier whose first forward starts a process of its own that spins on a
    core (as torch.compile's compile workers and autotuning benchmarks do), writes that
    process's id to ``pid_file``, then hangs until its trial is stopped."""

    def __init__(self, pid_file: str) -> None:
        super().__init__()
        self.net, self.pid_file = tiny_model(), pid_file

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import subprocess
        import sys

        child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        with open(self.pid_file, "w") as f:
            f.write(str(child.pid))
        time.sleep(3600)
        out: torch.Tensor = self.net(x)
        return out

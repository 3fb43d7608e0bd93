"""The machine's state while something is measured: how much of it other processes used.

A ratio of two throughputs is only true of one machine state. A baseline measured while
another process still loads the machine reads slow, and every ratio against it reads fast.
So each measurement records the CPU time that processes outside this one's tree used meanwhile
(psutil: the machine's busy time less this process's and its descendants'), in cores, and on a
GPU how many compute processes of others it saw (NVML). The search compares like with like by
it, and the result names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import psutil

__all__ = ["BUSY", "DIFFERS", "Load", "LoadMeter", "Meter", "cpu_reading", "meter", "nvml_others"]

# Other processes' use, in cores, from which a machine counts as busy: one core of two taken
# by another process reads ~1.0; background daemons read a few hundredths.
BUSY = 0.5
# Two measurements whose other processes' use differs by this many cores were taken in
# different states of the machine: their throughputs do not compare.
DIFFERS = 0.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class Load:
    """What other processes used of the machine during one measurement."""

    others: float  # cores other processes kept busy, on average (0.0: none)
    cores: int  # the machine's logical CPUs
    seconds: float = 0.0  # how long the reading spanned
    gpu_others: int = 0  # compute processes of others on the GPU (NVML), where one is used

    @property
    def busy(self) -> bool:
        """Whether other processes used enough of the machine to change a measurement."""
        return self.others >= BUSY or self.gpu_others > 0

    def differs(self, other: Load | None) -> bool:
        """Whether this and ``other`` are different states of the machine (None: unknown,
        taken as the same)."""
        if other is None:
            return False
        return abs(self.others - other.others) >= DIFFERS or (self.gpu_others > 0) != (
            other.gpu_others > 0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "others": round(self.others, 3),
            "cores": self.cores,
            "seconds": round(self.seconds, 3),
            "gpu_others": self.gpu_others,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Load | None:
        if not isinstance(data, dict):
            return None
        return cls(
            others=float(data.get("others", 0.0)),
            cores=int(data.get("cores", 0)),
            seconds=float(data.get("seconds", 0.0)),
            gpu_others=int(data.get("gpu_others", 0)),
        )


@dataclasses.dataclass(frozen=True)
class CpuReading:
    """One reading: wall clock, the machine's busy CPU seconds, this process tree's."""

    wall: float
    busy: float
    own: float


def _tree_seconds() -> float:
    """CPU seconds of this process and every descendant alive now, each with its children
    that ended and were waited for (a DataLoader worker that ended is in its parent's)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _busy_seconds() -> float:
    """The machine's busy CPU seconds since boot (every CPU; idle and I/O wait left out)."""
    t = psutil.cpu_times()
    fields = ("user", "nice", "system", "irq", "softirq", "steal")
    return float(sum(getattr(t, f, 0.0) for f in fields))


def cpu_reading() -> CpuReading:
    return CpuReading(wall=time.monotonic(), busy=_busy_seconds(), own=_tree_seconds())


Reader = Callable[[], CpuReading]


class Meter(Protocol):
    """Reads the machine's state between :meth:`start` and :meth:`stop`."""

    def start(self) -> None: ...

    def stop(self) -> Load | None: ...


class LoadMeter:
    """Reads the other processes' use of the machine between :meth:`start` and :meth:`stop`.
    ``reader`` is injectable (tests fake a busy machine); ``gpu_others`` counts the GPU's
    compute processes that are not this tree's (None: no GPU to watch)."""

    def __init__(
        self,
        reader: Reader = cpu_reading,
        *,
        cores: int | None = None,
        gpu_others: Callable[[], int] | None = None,
    ) -> None:
        self.reader = reader
        self.cores = cores or os.cpu_count() or 1
        self.gpu_others = gpu_others
        self._start: CpuReading | None = None
        self._gpu = 0

    def start(self) -> None:
        self._start = self.reader()
        self._gpu = 0
        self._sample_gpu()

    def _sample_gpu(self) -> None:
        if self.gpu_others is not None:
            with contextlib.suppress(Exception):  # NVML may vanish; the CPU reading stands
                self._gpu = max(self._gpu, int(self.gpu_others()))

    def stop(self) -> Load | None:
        """The load since :meth:`start` (None where it was not started or no time passed)."""
        first, self._start = self._start, None
        if first is None:
            return None
        self._sample_gpu()
        last = self.reader()
        wall = last.wall - first.wall
        if wall <= 0:
            return None
        others = (last.busy - first.busy) - (last.own - first.own)
        cores = max(0.0, min(float(self.cores), others / wall))
        return Load(others=cores, cores=self.cores, seconds=wall, gpu_others=self._gpu)


@contextlib.contextmanager
def meter(load_meter: Meter | None) -> Iterator[list[Load]]:
    """``with meter(m) as seen:`` ... ``seen`` holds the load once the block ends (nothing
    where ``m`` is None)."""
    seen: list[Load] = []
    if load_meter is None:
        yield seen
        return
    load_meter.start()
    try:
        yield seen
    finally:
        load = load_meter.stop()
        if load is not None:
            seen.append(load)


def nvml_others(nvml: Any, handle: Any) -> Callable[[], int]:
    """A counter of the compute processes on the GPU of NVML ``handle`` that are not this
    process tree's (a trial worker is this process's child)."""

    def count() -> int:
        me = psutil.Process()
        ours = {me.pid, *(p.pid for p in me.children(recursive=True))}
        running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return sum(1 for p in running if p.pid not in ours)

    return count

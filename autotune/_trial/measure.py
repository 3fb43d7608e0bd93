"""Measurements: raw synchronised timings and what is derived from them.

A :class:`Measurement` keeps the raw chunk timings; medians, spreads, throughput, projected
training time and warnings are derived properties (``torch.utils.benchmark``'s idea).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import statistics
import threading
from collections.abc import Callable, Mapping
from typing import Any

import psutil
import torch

from autotune._load import LoadMeter, nvml_others

__all__ = ["Measurement", "MemoryTracker", "UtilizationSampler", "machine_meter", "nvml_handle"]

NOISY_SPREAD = 0.10  # relative spread above which a measurement is flagged as noisy


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """Steady-state timing of one config, plus its one-time costs.

    ``chunk_times`` are wall-clock seconds of consecutive chunks of ``chunk_steps`` training
    steps each, synchronised with the device at each chunk boundary, data loading included.
    ``data_wait`` is the time the loop waited for the next batch, measured on the CPU side: on
    a GPU, work already queued on the device may run during that wait.
    """

    batch_size: int
    chunk_steps: int
    chunk_times: tuple[float, ...]
    data_wait: float
    warmup_steps: int
    warmup_time: float
    first_batch_time: float  # the first batch of the trial's process: cold (kept as measured)
    epoch_restart: bool = False  # workers are started again each epoch (not persistent)
    # What an epoch's restart costs, measured warm after the timed region: a fresh iterator's
    # first batch (its workers started again) beyond the steady state's wait for a batch.
    # None in records written before it was measured: their cold first batch stands in.
    restart_seconds: float | None = None
    peak_memory_bytes: int | None = None
    # "process_rss_rise": on a CPU, the rise of the process's resident memory over its level
    # when the trial started (what earlier trials of a reused worker hold is not charged).
    memory_kind: str = "process_rss_rise"
    # On a GPU: the allocator's reserved peak (fragmentation and CUDA-graph pools included), and
    # the memory this process could use when the trial started, read in the process that ran it
    # (its own CUDA context already subtracted).
    peak_reserved_bytes: int | None = None
    device_free_bytes: int | None = None
    gpu_utilization: float | None = None
    gpu_utilization_note: str | None = None  # why it is None on a GPU ("not available: MIG")
    recompiles: int = 0  # graphs torch.compile compiled again as batch shapes changed
    # A compiled config's first step beyond a steady one: its cold compile, paid once per run.
    compile_seconds: float | None = None

    @property
    def timed_steps(self) -> int:
        return self.chunk_steps * len(self.chunk_times)

    @property
    def step_times(self) -> list[float]:
        return [t / self.chunk_steps for t in self.chunk_times]

    @property
    def step_time(self) -> float:
        """Median seconds per training step."""
        return statistics.median(self.step_times)

    @property
    def throughput(self) -> float:
        """Samples per second in steady state (median over chunks), data loading included."""
        return self.batch_size / self.step_time

    @property
    def spread(self) -> float:
        """Relative spread of the per-chunk step time: (max - min) / median."""
        times = self.step_times
        return (max(times) - min(times)) / self.step_time if len(times) > 1 else 0.0

    @property
    def data_wait_fraction(self) -> float:
        total = sum(self.chunk_times)
        return self.data_wait / total if total > 0 else 0.0

    @property
    def one_time_cost(self) -> float:
        """Seconds the warm-up took beyond what the same steps cost in steady state
        (compilation, cuDNN autotuning, worker start-up)."""
        return max(0.0, self.warmup_time - self.warmup_steps * self.step_time)

    @property
    def restart_cost(self) -> float:
        """Seconds each epoch after the first pays to start its workers again: zero where
        they persist (or where there are none)."""
        if not self.epoch_restart:
            return 0.0
        return self.first_batch_time if self.restart_seconds is None else self.restart_seconds

    def projected_time(self, planned_samples: int, epochs: float) -> float:
        """Seconds to train ``planned_samples`` samples over ``epochs`` epochs, one-time costs
        amortised in: a 60-second compile does not win a 2-minute job."""
        restarts = max(0.0, epochs - 1) * self.restart_cost
        return planned_samples / self.throughput + self.one_time_cost + restarts

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.spread > NOISY_SPREAD:
            out.append(
                f"noisy: step times spread {self.spread:.0%} of the median across "
                f"{len(self.chunk_times)} chunks"
            )
        if self.data_wait_fraction > 0.3:
            out.append(
                f"data-bound: {self.data_wait_fraction:.0%} of the time waits for data "
                "(CPU side: queued GPU work may overlap it)"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        raw = dataclasses.asdict(self)
        raw["chunk_times"] = list(self.chunk_times)
        return raw

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        values = dict(data)
        values["chunk_times"] = tuple(values["chunk_times"])
        return cls(**values)

    def summary(self) -> dict[str, Any]:
        """Derived figures, for JSON export and display."""
        return {
            "throughput": self.throughput,
            "throughput_spread": self.spread,
            "step_time": self.step_time,
            "data_wait_fraction": self.data_wait_fraction,
            "one_time_cost": self.one_time_cost,
            "restart_cost": self.restart_cost,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "memory_kind": self.memory_kind,
            "gpu_utilization": self.gpu_utilization,
            "gpu_utilization_note": self.gpu_utilization_note,
            "timed_steps": self.timed_steps,
            "recompiles": self.recompiles,
            "compile_seconds": self.compile_seconds,
        }

    def __repr__(self) -> str:
        return (
            f"Measurement({self.throughput:,.0f} samples/s ±{self.spread / 2:.0%}, "
            f"step {self.step_time * 1e3:.1f} ms, data wait {self.data_wait_fraction:.0%}, "
            f"one-time {self.one_time_cost:.2f} s, {self.timed_steps} timed steps)"
        )


class _Poller:
    """A daemon thread calling ``fn`` every ``interval`` seconds until stopped (the samplers
    that read memory and GPU utilisation outside the timed steps)."""

    def __init__(self, fn: Callable[[], bool | None], interval: float) -> None:
        self._fn, self._interval = fn, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self._fn() is False:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


class MemoryTracker:
    """Peak memory during a trial: the CUDA caching allocator's peak on a GPU (reset at the
    start); on a CPU, the rise of the process's resident set size over its level at the start,
    read by a background thread (as :class:`UtilizationSampler` reads the GPU), so the timed
    steps carry no memory reads. Use as a context manager around the trial's steps."""

    def __init__(self, device: str, interval: float = 0.02) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.device = device
        self.interval = interval
        self._process = psutil.Process()
        self._start_rss = 0
        self.peak = 0
        self.free_at_start: int | None = None
        self._poller: _Poller | None = None

    @property
    def kind(self) -> str:
        return "cuda_allocator" if self.cuda else "process_rss_rise"

    def __enter__(self) -> MemoryTracker:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            free, _ = torch.cuda.mem_get_info(self.device)
            self.free_at_start = int(free + torch.cuda.memory_reserved(self.device))
            return self
        _release_freed_memory()
        self._start_rss = self._process.memory_info().rss
        self.peak = self._start_rss
        self._poller = _Poller(self.sample, self.interval)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._poller is not None:
            self._poller.stop()
            self._poller = None
        self.sample()

    def sample(self) -> None:
        """Read the resident set size now (on a CPU; between the timed chunks too)."""
        if not self.cuda:
            self.peak = max(self.peak, self._process.memory_info().rss)

    def result(self) -> int:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated(self.device))
        self.sample()
        return max(0, self.peak - self._start_rss)

    def reserved(self) -> int | None:
        """The caching allocator's reserved peak on a GPU (what the process held from it)."""
        return int(torch.cuda.max_memory_reserved(self.device)) if self.cuda else None


def _release_freed_memory() -> None:
    """Hand what earlier trials freed back to the OS (glibc keeps small freed blocks in its
    arenas), so the rise of the resident set over this level is what this trial allocates,
    not only what it allocates beyond the blocks an earlier trial left for reuse."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # Linux (glibc); elsewhere there is nothing to trim


def nvml_handle(nvml: Any, device: torch.device) -> tuple[Any, str | None]:
    """(NVML handle, None) for the GPU behind torch's ``device``, or (None, why not).

    NVML numbers GPUs in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, torch numbers the
    visible ones (fastest first, by default): the two meet only through the GPU's UUID. NVML
    has no utilisation counter for a MIG instance."""
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    bare = uuid.removeprefix("GPU-").removeprefix("MIG-")
    for prefix in ("GPU-", "MIG-"):
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(f"{prefix}{bare}")
        except Exception:  # not this kind of device
            continue
        mig = prefix == "MIG-"
        with contextlib.suppress(Exception):
            mig = mig or bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))
        if mig:
            return None, "not available: NVML reports no utilisation for a MIG instance"
        return handle, None
    return None, f"not available: NVML knows no GPU with this device's UUID ({bare})"


def machine_meter(device: str) -> LoadMeter:
    """What the search reads of the machine's state around each run: other processes' CPU
    time, and on a GPU the compute processes of others on it (NVML, where it can be read)."""
    gpu = None
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        with contextlib.suppress(Exception):  # no NVML: the CPU reading alone
            import pynvml

            pynvml.nvmlInit()
            handle, _ = nvml_handle(pynvml, torch.device(device))
            if handle is not None:
                gpu = nvml_others(pynvml, handle)
    return LoadMeter(gpu_others=gpu)


class UtilizationSampler:
    """Mean GPU utilisation over a timed region, read through NVML in a background thread,
    from the GPU that torch's ``device`` is (mapped through its UUID, so right under
    ``CUDA_VISIBLE_DEVICES`` too).

    On a CPU it reports None, normal and unremarked; on a GPU where it cannot be read (no
    NVML, a MIG instance) ``note`` says why.
    """

    def __init__(self, device: str, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self.note: str | None = None
        self._poller: _Poller | None = None
        self._handle: Any = None
        self._nvml: Any = None
        dev = torch.device(device)
        if dev.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # NVML missing or unusable: utilisation is not reported
            self.note = f"not available: NVML cannot be used ({type(exc).__name__})"
            return
        self._nvml = pynvml
        try:
            self._handle, self.note = nvml_handle(pynvml, dev)
        except Exception as exc:
            self.note = f"not available: {type(exc).__name__}: {exc}"

    def __enter__(self) -> UtilizationSampler:
        if self._handle is not None:
            self._poller = _Poller(self._read, self.interval)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._poller is not None:
            self._poller.stop()
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def _read(self) -> bool:
        """One reading; False (stop reading) once NVML fails."""
        try:
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.samples.append(float(rates.gpu))
        except Exception as exc:
            self.note = f"not available: {type(exc).__name__}"
            return False
        return True

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None

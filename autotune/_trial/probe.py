"""The memory probe: the largest batch size that fits, per precision and checkpointing setting,
found before the search so the sampler never wastes trials on batch sizes that cannot fit.

Peak memory (the CUDA caching allocator's reserved peak on a GPU, fragmentation and CUDA-graph
pools included; the process's RSS on a CPU; a validation batch included) is measured at the
smallest batch sizes (three where the third is predicted to fit) and fitted linearly (least
squares); on a GPU the batch one size above the largest predicted to fit in the usable memory
(free memory, read in the trial worker after its CUDA context exists, less a safety margin) is
then tried, and on out-of-memory the probe steps down. Where even the hungriest setting fits the
largest batch with 2x headroom, nothing more is tried.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil
import torch

from autotune._knobs.config import TrainingConfig
from autotune._space import Choice, SearchSpace
from autotune._trial.isolation import TrialExecutor
from autotune._trial.outcome import Budget

__all__ = ["MemoryLimits", "probe_memory", "usable_memory"]

SAFETY = 0.85  # use at most this share of the free memory: real training fragments more
# One step and a validation batch, on the dataset's longest items.
PROBE_BUDGET = Budget(
    warmup_steps=1, timed_samples=1, min_timed_steps=1, chunks=1, min_timed_seconds=0, longest=True
)


def usable_memory(device: str) -> int:
    """Bytes a training run may use on ``device``: free memory less the safety margin."""
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free * SAFETY)
    return int(psutil.virtual_memory().available * SAFETY)


def _key(precision: str, checkpointing: int) -> str:
    return f"{precision}/ckpt{checkpointing}"


@dataclasses.dataclass(frozen=True)
class MemoryLimits:
    """Largest batch size that fits, by precision and checkpointing ("bf16/ckpt0")."""

    capacity: int
    # The largest batch size that fits: a listed one, or the largest predicted to fit between
    # the largest listed one that fits and the next (a candidate too).
    limits: dict[str, int]
    points: dict[str, list[tuple[int, int]]]  # measured (batch size, peak bytes)
    largest: dict[str, int] = dataclasses.field(default_factory=dict)  # fitted, listed or not
    notes: tuple[str, ...] = ()

    def limit(self, cfg: TrainingConfig) -> int | None:
        return self.limits.get(_key(cfg.precision.value, cfg.checkpointing))

    def allows(self, cfg: TrainingConfig) -> bool:
        limit = self.limit(cfg)
        return limit is None or cfg.batch_size <= limit

    def predicted_peak(self, cfg: TrainingConfig) -> int | None:
        points = self.points.get(_key(cfg.precision.value, cfg.checkpointing))
        if not points or len(points) < 2:
            return None
        slope, intercept = _fit(points)
        return int(intercept + slope * cfg.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "capacity_bytes": self.capacity,
            "limits": dict(self.limits),
            "points": {k: [list(p) for p in v] for k, v in self.points.items()},
            "largest": dict(self.largest),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryLimits:
        return cls(
            capacity=int(data["capacity_bytes"]),
            limits={k: int(v) for k, v in data["limits"].items()},
            points={k: [(int(a), int(b)) for a, b in v] for k, v in data["points"].items()},
            largest={k: int(v) for k, v in (data.get("largest") or {}).items()},
            notes=tuple(data.get("notes", ())),
        )


def _fit(points: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """(slope, intercept) of peak memory against batch size, least squares."""
    slope, intercept = statistics.linear_regression(
        [float(b) for b, _ in points], [float(p) for _, p in points]
    )
    return max(0.0, slope), intercept


def probe_memory(
    executor: TrialExecutor,
    baseline: TrainingConfig,
    space: SearchSpace,
    *,
    capacity: int | None,
    report: Callable[[str], None],
    time_limit: float | None = 120.0,
    seconds: float | None = None,
    verify: bool = True,
) -> MemoryLimits | None:
    """Probe every (precision, checkpointing) setting of the space, hungriest first, within
    ``seconds`` (a setting left unprobed is held to the hungriest one's limit, which needs more
    memory than it). ``verify``: train at the predicted limit to check it (on a GPU, where a
    step is fast); on a CPU the process's memory already shows what fits, so the fitted line is
    trusted, with the safety margin already taken from ``capacity``. ``capacity`` None: read
    the free memory in the trial worker (on a GPU: the parent's reading would miss the worker's
    own CUDA context, and reading it would create one in the parent)."""
    batches = space.knobs.get("batch_size")
    if not isinstance(batches, Choice) or len(batches.values) < 2:
        return None
    sizes = sorted(int(b) for b in batches.values)  # type: ignore[arg-type]
    precisions = _values(space, "precision", baseline.precision.value)
    ckpts = _values(space, "checkpointing", baseline.checkpointing)
    # fp32 without checkpointing stores the most activations: probe it first.
    order = sorted(
        ((str(p), int(c)) for p in precisions for c in ckpts),
        key=lambda pc: (pc[0] not in ("fp32", "fp32_strict", "tf32"), pc[1]),
    )
    # One micro-batch at a time: accumulation keeps the gradients a plain step keeps, so the
    # limit found is the micro-batch's (the global batch may be larger).
    plain = baseline.replace(
        num_workers=0,
        persistent_workers=False,
        prefetch_factor=None,
        compile_mode="none",
        gradient_accumulation_steps=1,
    )
    stop = None if seconds is None else time.monotonic() + seconds
    if capacity is None:
        capacity = _worker_capacity(executor, plain.replace(batch_size=sizes[0]), time_limit)
    if capacity is None:
        capacity = usable_memory(baseline.device)
    found = _Found(capacity=capacity)
    for i, (precision, ckpt) in enumerate(order):
        key = _key(precision, ckpt)
        if stop is not None and time.monotonic() > stop and found.limits:
            hungriest = found.limits[_key(*order[0])]
            for p, c in order[i:]:
                found.limits[_key(p, c)] = hungriest
            found.notes.append(
                f"{', '.join(_key(p, c) for p, c in order[i:])}: not probed (the probe's time "
                f"share is spent); held to {_key(*order[0])}'s limit, batch {hungriest}"
            )
            break
        cfg = plain.replace(precision=precision, checkpointing=ckpt)
        try:
            headroom = _probe_setting(executor, cfg, key, sizes, found, time_limit, verify)
        except _ProbeFailed as exc:
            found.notes.append(f"{key}: not probed ({exc})")
            continue
        if headroom and i == 0:
            # The hungriest setting fits the largest batch twice over: so do the rest.
            for p, c in order[1:]:
                found.limits[_key(p, c)] = found.limits[key]
            break
    result = found.result()
    for note in result.notes:
        report(f"memory probe: {note}")
    return result


@dataclasses.dataclass
class _Found:
    """What the probe found so far."""

    capacity: int
    limits: dict[str, int] = dataclasses.field(default_factory=dict)
    points: dict[str, list[tuple[int, int]]] = dataclasses.field(default_factory=dict)
    largest: dict[str, int] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def result(self) -> MemoryLimits:
        return MemoryLimits(
            capacity=self.capacity,
            limits=self.limits,
            points=self.points,
            largest=self.largest,
            notes=tuple(self.notes),
        )


def _probe_setting(
    executor: TrialExecutor,
    cfg: TrainingConfig,
    key: str,
    sizes: list[int],
    found: _Found,
    time_limit: float | None,
    verify: bool,
) -> bool:
    """Probe one setting: peaks at the smallest sizes (a third where the line through the first
    two says it fits), a line through them, the largest listed size predicted to fit (where
    ``verify``: trained from one size above it, stepping down). Returns True when even the
    largest size fits with 2x headroom."""
    capacity = found.capacity
    measured: list[tuple[int, int]] = []
    # A third point on a GPU (the line through two small batches can be off); on a CPU the
    # process's memory already shows what fits, and no larger batch is trained to prove it.
    for i, size in enumerate(sizes[: 3 if verify else 2]):
        if i == 2:
            slope, intercept = _fit(measured)
            if intercept + slope * size > capacity:
                break  # a third point only where it is predicted to fit
        peak = _peak(executor, cfg.replace(batch_size=size), time_limit)
        if peak is None:
            fitting = [s for s in sizes if s < size]
            found.limits[key] = fitting[-1] if fitting else 0
            found.points[key] = measured
            found.notes.append(f"{key}: out of memory already at batch {size}")
            return False
        measured.append((size, peak))
    found.points[key] = measured
    slope, intercept = _fit(measured)
    if slope > 0:
        # The largest batch predicted to fit, listed or not (a multiple of 8).
        found.largest[key] = max(1, int((capacity - intercept) / slope) // 8 * 8)
    predicted = [s for s in sizes if intercept + slope * s <= capacity]
    limit = predicted[-1] if predicted else sizes[0]
    between = _between(found.largest.get(key), limit, sizes)
    if limit == sizes[-1] and intercept + slope * sizes[-1] <= capacity / 2:
        found.limits[key] = limit
        found.notes.append(
            f"{key}: fits the largest batch ({limit}) with 2x headroom (predicted "
            f"{(intercept + slope * limit) / 2**30:.2f} GiB of {capacity / 2**30:.2f} GiB usable)"
        )
        return True
    if not verify:
        found.limits[key] = between or limit
        found.notes.append(f"{key}: largest batch predicted to fit is {between or limit}")
        return False
    # Verify the prediction from one size above it (a line through small batches can be
    # pessimistic), stepping down on out-of-memory.
    verified = measured[-1][0]
    above = [s for s in sizes if s > limit][:1]
    tries = [s for s in sizes if measured[-1][0] < s <= limit] + ([between] if between else [])
    for size in reversed(tries + above):
        try:
            peak = _peak(executor, cfg.replace(batch_size=size), time_limit)
        except _ProbeFailed:
            peak = None
        if peak is not None:
            found.points[key].append((size, peak))
            verified = size
            break
    found.limits[key] = verified
    found.notes.append(f"{key}: largest batch that fits is {verified}")
    return False


def _between(largest: int | None, limit: int, sizes: list[int]) -> int | None:
    """``largest`` where it lies between the listed ``limit`` and the next listed size (it is
    then a candidate too); None otherwise."""
    above = [s for s in sizes if s > limit]
    if largest is None or not above or not limit < largest < above[0]:
        return None
    return largest


def _values(space: SearchSpace, name: str, default: Any) -> list[Any]:
    knob = space.knobs.get(name)
    return list(knob.values) if isinstance(knob, Choice) else [default]


class _ProbeFailed(Exception):
    """A probe run failed for a reason other than memory."""


def _peak(executor: TrialExecutor, cfg: TrainingConfig, time_limit: float | None) -> int | None:
    """Peak memory of a few steps and a validation batch at ``cfg``; None when out of memory.
    On a GPU, the allocator's reserved peak: what the process really took from the device."""
    outcome = executor.run(cfg, PROBE_BUDGET, time_limit=time_limit)
    if outcome.failure is not None and outcome.failure.value == "oom":
        return None
    m = outcome.measurement
    if outcome.failure is not None or m is None or m.peak_memory_bytes is None:
        raise _ProbeFailed(outcome.message or "no memory reading")
    return max(int(m.peak_memory_bytes), int(m.peak_reserved_bytes or 0))


def _worker_capacity(
    executor: TrialExecutor, cfg: TrainingConfig, time_limit: float | None
) -> int | None:
    """Usable device memory as the trial worker sees it (its CUDA context already made), or
    None without a reading."""
    outcome = executor.run(cfg, PROBE_BUDGET, time_limit=time_limit)
    m = outcome.measurement
    if m is None or m.device_free_bytes is None:
        return None
    return int(m.device_free_bytes * SAFETY)

"""A loader's batches pass after pass, and how many a timed phase may take from one pass.

Starting a pass costs more than a batch where a stream opens itself again (its shards, its shuffle
buffer, a connection) and where the loader's workers start again. A stream's planned run pays it
once per pass after the first, and workers that do not persist once per epoch, which a measurement
counts apart (``restart_seconds``, see :func:`pays_restarts`). A timed phase that crossed a
pass's end would count it among the steady steps, as often as the pass fitted in it (a fast model
over a short pass, several times), and read the stream slow and its rounds spread wide. So a
measurement times the steps of one pass (:func:`pass_steps`), starting a new one before its timed
phase where the rest of the current one would not hold it; a trainer's own loop (Lightning,
Hugging Face), which begins a new pass only at the end of one, has its timed steps fitted into the
first (``StepClock.fit_to_pass``).
Persistent workers over a map-style dataset only refill their queue at an epoch's start, which the
planned run pays too: their epochs are timed as they come.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, Dataset

from autotune._knobs import apply
from autotune._knobs.config import TrainingConfig
from autotune._stream import Stream

__all__ = ["Passes", "pass_steps", "pays_restarts", "queue_batches"]


class Passes(Iterator[Any]):
    """The loader's batches, one pass after another (an epoch of a dataset, a read of a stream
    from its start), counting the passes begun and the batches taken from the current one."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        self.loader = loader
        self.passes = 0  # passes begun
        self.position = 0  # batches taken from the current pass
        self._batches: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        while True:
            if self._batches is None:
                apply.set_epoch(self.loader, self.passes)  # a DistributedSampler reshuffles
                self.passes += 1
                self.position = 0
                self._batches = iter(self.loader)
            try:
                batch = next(self._batches)
            except StopIteration:
                self._batches = None
                if self.position == 0:
                    raise RuntimeError(
                        "The DataLoader produced no batches (is the batch size larger "
                        "than the dataset with drop_last=True?)"
                    ) from None
                continue
            self.position += 1
            return batch

    def close(self) -> None:
        """Leave the current pass (a loader whose workers do not persist shuts them down): the
        next batch, if any is asked for, begins a new one."""
        self._batches = None


def pays_restarts(cfg: TrainingConfig, data: Dataset[Any]) -> bool:
    """Whether each pass after the first pays a restart the planned run counts (see
    ``Measurement.restart_cost``): loader workers that do not persist start again; a stream
    read over several passes opens itself again (its shards, its shuffle buffer)."""
    several = isinstance(data, Stream) and data.passes > 1
    return several or (cfg.num_workers > 0 and not cfg.persistent_workers)


def queue_batches(cfg: TrainingConfig) -> int:
    """Batches a loader's workers may queue ahead of the training steps."""
    return cfg.num_workers * (cfg.prefetch_factor or 2)


def pass_steps(cfg: TrainingConfig, data: Dataset[Any]) -> int | None:
    """Micro-batches one pass of a measurement's loader holds (each rank's, at the least), where
    a timed phase must stay within one: a stream's, and a map-style dataset's whose workers start
    again each epoch. None otherwise: a new epoch in the training process is a new order of
    indices, and persistent workers' refill is paid by the planned run's epochs alike.

    A stream's pass holds its items where known, else at least the planned run's samples
    (``Stream.pass_samples``), split over the ranks; each worker reads its own part and drops
    its own last incomplete batch, so a pass may hold a batch fewer per worker. A dataset's
    pass: its whole batches, each rank's."""
    if isinstance(data, Stream):
        return max(0, data.pass_samples // cfg.ranks // cfg.batch_size - cfg.num_workers)
    if cfg.num_workers == 0 or cfg.persistent_workers:
        return None
    return len(data) // cfg.ranks // cfg.batch_size  # type: ignore[arg-type]

"""Data that streams: the user's ``IterableDataset`` as every trial reads it.

A :class:`Stream` wraps the user's stream with what autotune learned of it before the first
trial (:mod:`autotune._trial.streaming`): the samples its planned run reads, the items of one
pass where known (its ``len()``, or its first whole read), the most DataLoader workers it can
feed, and whether it replays identically. Each trial's loader reads the user's stream itself from
its start (:func:`source_of`), with that trial's loader settings, so the decoding and augmentation
in its workers are measured as the user's run pays for them. A planned run longer than a pass
reads the stream again from its start, as the trainers do: ``len()`` of a Stream is one pass of
the planned run (the training set's size to every reader that plans by samples: the guard, the
ranking, the batch-size rule), and its :attr:`~Stream.passes` are the run's epochs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, TypeGuard

from torch.utils.data import Dataset, IterableDataset

from autotune._errors import DataError

__all__ = [
    "PASS_STRIDE",
    "LengthRead",
    "Stream",
    "StreamEnded",
    "epoch_of",
    "is_stream",
    "source_of",
]

# A pass's data-order value: its seed plus the pass times this (seeds stay far below it), so
# that each (seed, pass) has its own and a first pass's is its seed.
PASS_STRIDE = 1 << 20


def epoch_of(seed: int, pass_: int = 0) -> int:
    """The value a stream's ``set_epoch`` is told for data-order ``seed``'s pass ``pass_`` (0:
    the first): its own for each (seed, pass), so that seed 1's first pass is not seed 0's
    second (a Hugging Face stream reshuffles from its seed plus this value)."""
    return seed + pass_ * PASS_STRIDE


@dataclasses.dataclass(frozen=True)
class LengthRead:
    """A stream's first whole read before the first trial, where it has no ``len()``: the
    items it gave, whether it ended (else the read stopped at its cap: the planned run's
    samples, or its time), and how long it took."""

    items: int
    ended: bool
    seconds: float


class StreamEnded(DataError):
    """A stream gave fewer items than a run reads from it (its name is in the trial's failure
    message, which says why an accuracy run failed: see ``record.NoCheck``)."""


class Stream(IterableDataset[Any]):
    """The user's stream, with the facts read from it before the first trial."""

    def __init__(
        self,
        source: IterableDataset[Any],
        *,
        samples: int,
        length: int | None,
        workers: int | None = None,
        workers_why: str = "",
        replays: bool = True,
        seeded: bool = True,
        read: LengthRead | None = None,
    ) -> None:
        self.source = source
        self.samples = samples  # the planned run's samples, over all its passes
        # The items of one pass, where known: len(source), or its first whole read.
        self.length = length
        self.workers = workers  # the most workers it can feed (None: no limit known)
        self.workers_why = workers_why
        self.replays = replays  # two reads with the same seed give the same first items
        self.seeded = seeded  # reads at two seeds give different first items
        self.read = read  # its first whole read, where it had no len()

    @property
    def pass_samples(self) -> int:
        """The samples of the planned run's one pass: the stream's items where it holds fewer
        than the run, else the run's (a run within one pass, or a pass of unknown length)."""
        return self.samples if self.length is None else max(1, min(self.samples, self.length))

    @property
    def passes(self) -> float:
        """The planned run's passes over the stream (its epochs): 1 where one pass holds it."""
        return self.samples / self.pass_samples

    def __len__(self) -> int:
        return self.pass_samples

    def __iter__(self) -> Iterator[Any]:
        return iter(self.source)

    def at_epoch(self, seed: int, pass_: int = 0) -> None:
        """Start pass ``pass_`` of data-order ``seed``: a stream with ``set_epoch`` (a Hugging
        Face stream reshuffles its shards and buffer from its seed plus the epoch) is told the
        (seed, pass)'s own value (:func:`epoch_of`); any other reads from its start as it
        always does."""
        set_epoch = getattr(self.source, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch_of(seed, pass_))

    def __repr__(self) -> str:
        passes = f", {self.passes:g} passes" if self.passes > 1 else ""
        return f"Stream({type(self.source).__name__}, {self.samples} samples{passes})"


def is_stream(data: Any) -> TypeGuard[IterableDataset[Any]]:
    """Whether ``data`` is read by iterating it (a torch ``IterableDataset``: a Hugging Face
    streaming dataset, a WebDataset pipeline, a stream of your own)."""
    return isinstance(data, IterableDataset)


def source_of(dataset: Dataset[Any]) -> Dataset[Any]:
    """What a DataLoader reads: a Stream's user stream, any other dataset as it is."""
    return dataset.source if isinstance(dataset, Stream) else dataset

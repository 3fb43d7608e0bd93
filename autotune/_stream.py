"""Data that streams: the user's ``IterableDataset`` as every trial reads it.

A :class:`Stream` wraps the user's stream with what autotune learned of it before the first
trial (:mod:`autotune._trial.streaming`): the samples its planned run reads, its own length where
it has one, the most DataLoader workers it can feed, and whether it replays identically. Each
trial's loader reads the user's stream itself from its start (:func:`source_of`), with that
trial's loader settings, so the decoding and augmentation in its workers are measured as the
user's run pays for them. ``len()`` of a Stream is the planned run's samples: the training set's
size to every reader that plans by samples (the guard, the ranking, the batch-size rule).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeGuard

from torch.utils.data import Dataset, IterableDataset

from autotune._errors import DataError

__all__ = ["Stream", "StreamEnded", "is_stream", "source_of"]


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
    ) -> None:
        self.source = source
        self.samples = samples  # the planned run's samples: one pass holds at least these
        self.length = length  # len(source), where the stream has one
        self.workers = workers  # the most workers it can feed (None: no limit known)
        self.workers_why = workers_why
        self.replays = replays  # two reads with the same seed give the same first items
        self.seeded = seeded  # reads at two seeds give different first items

    def __len__(self) -> int:
        return self.samples

    def __iter__(self) -> Iterator[Any]:
        return iter(self.source)

    def at_epoch(self, epoch: int) -> None:
        """Start the pass of data-order seed ``epoch``: a stream with ``set_epoch`` (a Hugging
        Face stream reshuffles its shards and buffer from its seed plus the epoch) is told it;
        any other reads from its start as it always does."""
        set_epoch = getattr(self.source, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __repr__(self) -> str:
        return f"Stream({type(self.source).__name__}, {self.samples} samples)"


def is_stream(data: Any) -> TypeGuard[IterableDataset[Any]]:
    """Whether ``data`` is read by iterating it (a torch ``IterableDataset``: a Hugging Face
    streaming dataset, a WebDataset pipeline, a stream of your own)."""
    return isinstance(data, IterableDataset)


def source_of(dataset: Dataset[Any]) -> Dataset[Any]:
    """What a DataLoader reads: a Stream's user stream, any other dataset as it is."""
    return dataset.source if isinstance(dataset, Stream) else dataset

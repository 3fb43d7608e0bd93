"""A stream read before the first trial: its first items, its planned length, the workers it can
feed, whether it replays, and its first items as a validation set.

Every call into the stream is a :func:`~autotune._trial.bounded.step` of the bounded set-up, so
a stream whose first read hangs (a remote shard behind a dead mount) ends the command at its
limit, naming the read.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset

from autotune._errors import ArgumentError, DataError
from autotune._knobs.apply import split_by_node
from autotune._stream import LengthRead, Stream, is_stream
from autotune._trial.bounded import ITEM_HINT, step

__all__ = [
    "LENGTH_SECONDS",
    "LOOKAHEAD_SECONDS",
    "REPLAY_ITEMS",
    "Items",
    "check_rank_parts",
    "check_second_pass",
    "first_items",
    "make_stream",
    "order_facts",
    "planned_length",
    "read_length",
    "stream_length",
    "validation_items",
    "worker_limit",
]

REPLAY_ITEMS = 4  # items read to see whether the stream replays its order and follows the seed


class Items(Dataset[Any]):
    """Items read from a stream, kept in memory in the order it gave them (a validation set
    taken from a stream's first items: every config is scored on exactly these)."""

    def __init__(self, items: Sequence[Any], *, source: str) -> None:
        self.items, self.source = list(items), source

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]


def _name(stream: Any) -> str:
    return type(stream).__qualname__


def stream_length(stream: IterableDataset[Any]) -> int | None:
    """``len(stream)`` where the stream has one (WebDataset's ``with_length``, a stream of your
    own with ``__len__``); None for one that does not say."""
    try:
        n = len(stream)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError, AttributeError):
        return None
    return int(n) if isinstance(n, int) and n >= 0 else None


def first_items(stream: IterableDataset[Any], n: int, *, argument: str = "dataset") -> list[Any]:
    """The stream's first ``n`` items (fewer if it ends first), read in this process as an
    iteration with no DataLoader worker reads it: the whole stream, in its own order."""
    step(f"iter(`{argument}`) ({_name(stream)}.__iter__), the stream opened", ITEM_HINT)
    iterator = iter(stream)
    items = []
    for i in range(n):
        step(f"item {i} of the stream `{argument}` ({_name(stream)})", ITEM_HINT)
        try:
            items.append(next(iterator))
        except StopIteration:
            break
    return items


LENGTH_SECONDS = 60.0  # the most a stream's first whole read may take where the run needs it
# ... and where it only tells whether the planned samples outrun one pass: past this, the trials
# still read it again from its start where a run outruns it, its passes only not known before.
LOOKAHEAD_SECONDS = 10.0
LENGTH_STEP = 256  # items between two of that read's steps (the bounded set-up's checks)


def read_length(
    stream: IterableDataset[Any],
    cap: int | None,
    *,
    seconds: float = LENGTH_SECONDS,
    argument: str = "dataset",
) -> LengthRead:
    """Read the stream from its start to its end, in this process, counting its items: at most
    ``cap`` of them (None: no cap but the time's) for at most ``seconds``; its price is said
    in the search's notes (the budget pays it, as it pays every trial)."""
    start = time.perf_counter()
    doing = f"the stream `{argument}` ({_name(stream)}) read whole, to learn its length"
    step(doing, ITEM_HINT)
    items = 0
    for _ in stream:
        items += 1
        if (cap is not None and items >= cap) or time.perf_counter() - start > seconds:
            break
        if items % LENGTH_STEP == 0:
            step(f"{doing}: item {items:,}", ITEM_HINT)
    else:
        return LengthRead(items, True, time.perf_counter() - start)
    return LengthRead(items, False, time.perf_counter() - start)


def planned_length(
    stream: IterableDataset[Any],
    planned_samples: int | None,
    *,
    passes: float | None = None,
    argument: str = "dataset",
) -> tuple[int, int | None, LengthRead | None]:
    """(the samples the planned run reads from the stream, the items of one pass where known,
    the read that learned them where the stream has no ``len()``). The run is
    ``planned_samples``, or ``passes`` passes of the stream, else one pass: a run longer than
    the stream reads it again from its start, as a trainer does. Where the stream has no
    ``len()`` and the run needs it (``passes``), or may be longer than a pass
    (``planned_samples``), the stream is read whole once, capped (see :func:`read_length`).
    An endless stream with ``passes`` or with neither, an empty one, and both given, are errors
    naming them."""
    if passes is not None and planned_samples is not None:
        raise ArgumentError(
            f"planned_epochs={passes:g} and planned_samples={planned_samples:,} with a stream: "
            "give one (the passes over the stream, or the samples its run reads)."
        )
    length = stream_length(stream)
    read = None
    if length is None and (passes is not None or planned_samples is not None):
        cut = LENGTH_SECONDS if passes is not None else LOOKAHEAD_SECONDS
        read = read_length(stream, planned_samples, seconds=cut, argument=argument)
        if read.ended:
            length = read.items
        elif passes is not None:
            raise DataError(
                f"planned_epochs={passes:g} with `{argument}`, a stream ({_name(stream)}) with no "
                f"length: read whole to learn it, it gave {read.items:,} items in "
                f"{read.seconds:.0f} s without an end (an endless stream, or one too long to read "
                "before the search). Give planned_samples= (the samples your run reads) instead, "
                "or the stream a length (WebDataset's .with_length(n), .with_epoch(n))."
            )
    if length == 0:
        raise DataError(f"`{argument}` is an empty stream (it gave no items).")
    if passes is not None:
        assert length is not None
        return max(1, round(passes * length)), length, read
    if planned_samples is None:
        if length is None:
            raise DataError(
                f"`{argument}` is a stream ({_name(stream)}) with no length: say how many "
                "samples your real run reads from it with planned_samples= "
                "(SearchOptions(planned_samples=N), --planned-samples N; a Hugging Face "
                "Trainer's max_steps says it), or its passes with planned_epochs=, or give the "
                "stream a length (WebDataset's .with_length(n))."
            )
        return length, length, read
    return planned_samples, length, read


def check_second_pass(
    stream: IterableDataset[Any], samples: int, length: int | None, *, argument: str = "dataset"
) -> None:
    """Where the planned run reads the stream more than once: an error where a second read
    from its start gives nothing (an ``__iter__`` that returns one generator object, read once
    and then empty)."""
    if length is None or samples <= length or first_items(stream, 1, argument=argument):
        return
    raise DataError(
        f"`{argument}` ({_name(stream)}) gave no items when read again from its start: the "
        f"planned run reads {samples:,} samples, {samples / length:.3g} passes of its "
        f"{length:,} items, so each pass reads it again, as a trainer does. An __iter__ that "
        "returns one generator object gives its items once: make it start a new one."
    )


def _same(a: Any, b: Any) -> bool:
    """Whether two items read from a stream are the same item (tensors equal, element by
    element; containers alike; anything else by ``==``)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        equal = a == b
        return bool(equal.all()) if hasattr(equal, "all") else bool(equal)
    except Exception:
        return False


def order_facts(stream: IterableDataset[Any], *, argument: str = "dataset") -> tuple[bool, bool]:
    """(whether it replays, whether it follows the seed), from three reads of the stream's
    first items. It replays where two reads at one data-order seed give the same items: what
    the accuracy guard's pairs need (both arms train on the same samples in the same order; a
    stream that shuffles from a clock or an unseeded generator does not). It follows the seed
    where a read at another seed gives other items (a ``set_epoch``, a shuffle or an
    augmentation drawn from the seeded generators): one that does not gives the accuracy runs
    of every seed the same data, so they differ only where training itself draws randomness
    (dropout), and the spread between the baseline's seeds shows no data order's effect."""
    first = _read_at(stream, 0, argument)
    replays = _same_reads(first, _read_at(stream, 0, argument))
    return replays, not _same_reads(first, _read_at(stream, 1, argument))


@contextlib.contextmanager
def seeded(data: Any, seed: int) -> Iterator[None]:
    """Inside: torch, ``random`` and numpy seeded with ``seed`` (data that augments from
    Python's or numpy's generator replays too) and a stream's ``set_epoch`` told it; the
    caller's generators given back after."""
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            set_epoch = getattr(data, "set_epoch", None)
            if is_stream(data) and callable(set_epoch):
                set_epoch(seed)
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _read_at(stream: IterableDataset[Any], seed: int, argument: str) -> list[Any]:
    """The stream's first items as an accuracy run of data-order ``seed`` reads them."""
    with seeded(stream, seed):
        return first_items(stream, REPLAY_ITEMS, argument=argument)


def _same_reads(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))


def _shards(stream: Any) -> int | None:
    """The shards a stream says it has: a Hugging Face stream's ``n_shards``; a WebDataset
    pipeline's shard list (its first stage's ``urls``)."""
    n = getattr(stream, "n_shards", None)
    if isinstance(n, int) and n > 0:
        return n
    stages = getattr(stream, "pipeline", None)
    if isinstance(stages, list) and stages:
        urls = getattr(stages[0], "urls", None)
        if isinstance(urls, list | tuple) and urls:
            return len(urls)
    return None


def _duplicated(stream: IterableDataset[Any], *, argument: str) -> bool:
    """Whether two DataLoader workers read the same stream whole: each yields the same first
    item (a stream that does not split itself with ``get_worker_info()`` gives every worker
    all of it, so each item is trained once per worker)."""
    step(
        f"the stream `{argument}` ({_name(stream)}) read by two DataLoader workers (does each "
        "worker get its own part?)",
        ITEM_HINT,
    )
    loader = DataLoader(stream, batch_size=None, num_workers=2, timeout=60)
    try:
        items = list(itertools.islice(iter(loader), 2))
    except Exception:
        # Workers that cannot start here (a stream that cannot be pickled for this start
        # method): the workers rule of the search says why and searches workers=0 only.
        return False
    return len(items) == 2 and _same(items[0], items[1])


def worker_limit(
    stream: IterableDataset[Any], *, argument: str = "dataset"
) -> tuple[int | None, str]:
    """(the most DataLoader workers the stream can feed, why): its shard count where it says
    one (more workers than shards idle: Hugging Face only warns); 1 where two workers each
    read the whole stream; None (no limit known) otherwise."""
    shards = _shards(stream)
    if shards is not None:
        return shards, (
            f"the stream {_name(stream)} has {shards} shard{'s' if shards != 1 else ''}: a "
            "worker beyond them would idle"
        )
    if _duplicated(stream, argument=argument):
        return 1, (
            f"the stream {_name(stream)} gives every DataLoader worker all of itself (split it "
            "with torch.utils.data.get_worker_info() to search more workers): two workers would "
            "train each item twice"
        )
    return None, ""


def make_stream(
    stream: IterableDataset[Any],
    planned_samples: int | None,
    *,
    passes: float | None = None,
    workers: bool = True,
    argument: str = "dataset",
) -> Stream:
    """The user's training stream with what its trials need to know of it: its planned run
    (``planned_samples``, or ``passes`` over it, see :func:`planned_length`). ``workers``: find
    the most DataLoader workers it can feed (a search over them)."""
    samples, length, read = planned_length(
        stream, planned_samples, passes=passes, argument=argument
    )
    check_second_pass(stream, samples, length, argument=argument)
    limit, why = worker_limit(stream, argument=argument) if workers else (None, "")
    replays, seeded = order_facts(stream, argument=argument)
    return Stream(
        stream,
        samples=samples,
        length=length,
        workers=limit,
        workers_why=why,
        replays=replays,
        seeded=seeded,
        read=read,
    )


def check_rank_parts(stream: Stream, group: Any = None) -> None:
    """Under data parallelism (a process group up), that each rank reads its own part of the
    stream (:func:`~autotune._knobs.apply.split_by_node`): an error naming the stream where
    every rank's part starts with the same item, as a stream that does not split itself by
    rank gives each rank all of itself (each sample trained once per rank, and the global
    samples per second counting it as many times). Every rank calls it, before any trial."""
    world = dist.get_world_size(group)
    first = first_items(split_by_node(stream.source), 1)  # type: ignore[arg-type]
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, first, group=group)
    if all(len(g) == 1 for g in gathered) and all(_same(g[0], gathered[0][0]) for g in gathered):
        raise DataError(
            f"The stream ({_name(stream.source)}) gives every one of the {world} data-parallel "
            "ranks all of itself (each rank's first item is the same): each sample would be "
            "trained once per rank. Split it by rank: a Hugging Face stream, WebDataset's "
            "split_by_node, or torch.distributed.get_rank() in its __iter__."
        )


def validation_items(
    stream: IterableDataset[Any], n: int, *, argument: str = "val_dataset"
) -> Items:
    """The stream's first ``n`` items as the validation set (every config scored on exactly
    these, in this order); an error where the stream gives none."""
    items = first_items(stream, n, argument=argument)
    if not items:
        raise DataError(f"`{argument}` is a stream that gave no items.")
    shown = f"{len(items):,}" if len(items) < n else f"the first {n:,}"
    return Items(items, source=f"{shown} items of the stream `{argument}` ({_name(stream)})")

"""What every trial trains: a pristine copy of the user's model, the data, and the task."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from autotune._errors import DataError
from autotune._stream import Stream, is_stream
from autotune._task import OptimizerFactory, Task, TaskRefs
from autotune._trial.bounded import ITEM_HINT, step
from autotune._trial.data import DataModuleLike, unpack_data
from autotune._trial.fingerprint import data_fingerprint
from autotune._trial.metrics import AUTO, MetricChoice
from autotune._trial.streaming import Items, first_items, make_stream, validation_items
from autotune._trial.task import (
    ResolvedTask,
    cpu_copy,
    default_optimizer,
    logged_task,
    set_up_task,
    split_dataset,
)

if TYPE_CHECKING:
    from autotune._knobs.config import TrainingConfig
    from autotune._space import SearchSpace
    from autotune._trial.measure import Measurement
    from autotune._trial.outcome import AccuracyRun, Budget

__all__ = [
    "Prepared",
    "SearchStart",
    "TrainerLoop",
    "Workload",
    "check_workload",
    "prepare_workload",
    "stream_note",
    "trainer_data",
    "validation_set",
]

MAX_VAL_ITEMS = 2048  # a larger validation set is evaluated on a fixed subset of this size
SIZED_ITEMS = 2048  # items whose size is read to find the longest ones (all, if fewer)
SIZING_SECONDS = 5.0  # at most this long
LONGEST = 1024  # longest items kept: the largest batch the memory probe builds from them
EVAL_BATCH_SIZE = 32  # validation batches of a workload made without one (TrainingConfig's)


class TrainerLoop(Protocol):
    """The user's own trainer as the loop a trial runs (a Lightning ``Trainer``, a Hugging
    Face ``Trainer``): it measures a config's throughput, makes its accuracy runs and scores
    the untrained model, each by that trainer's own ``fit``/``train`` and validation."""

    @property
    def kind(self) -> str:
        """``lightning`` or ``transformers``: what the result exports to."""
        ...

    def restrict(self, space: SearchSpace) -> SearchSpace:
        """``space`` without the knobs this trainer cannot apply, saying why."""
        ...

    def measure(self, cfg: TrainingConfig, workload: Workload, budget: Budget) -> Measurement: ...

    def initial_metric(self, cfg: TrainingConfig, workload: Workload) -> float: ...

    def accuracy_run(
        self, cfg: TrainingConfig, workload: Workload, samples: int, seed: int
    ) -> AccuracyRun: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """What every trial trains: a pristine copy of the model and the data, and the loop that
    trains it (None: autotune's own, over the task's hooks; else the user's trainer)."""

    model: nn.Module
    train: Dataset[Any]
    val: Dataset[Any]
    task: ResolvedTask
    optimizer: OptimizerFactory = default_optimizer
    # Indices of the training set's largest items (by elements), largest first: the memory
    # probe's batches are made of them, so a config that fits only short batches never wins.
    longest: tuple[int, ...] = ()
    # Every config validates in batches of this size (a search's: its baseline's batch size),
    # so a metric that depends on how items are batched still scores identical models alike.
    eval_batch_size: int = EVAL_BATCH_SIZE
    loop: TrainerLoop | None = None

    @property
    def trainer_kind(self) -> str | None:
        """The kind of the user's trainer that runs the trials (None: autotune's own loop)."""
        return None if self.loop is None else self.loop.kind

    def __post_init__(self) -> None:
        if self.task.metric == AUTO:
            raise ValueError("A workload's task guards a chosen metric: use set_up_task().")
        if self.eval_batch_size < 1:
            raise ValueError(f"`eval_batch_size` must be >= 1, but got {self.eval_batch_size}.")


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The workload, whether the validation split kept the label proportions, and what was
    taken from a data module (None for plain datasets); the task by reference with the metric
    chosen (what other processes load) and why it was."""

    workload: Workload
    stratified: bool
    refs: TaskRefs
    metric: MetricChoice
    note: str | None = None
    # The data's fingerprint as the user gave it (see fingerprint.py), which the study keeps.
    data_fingerprint: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class SearchStart:
    """What a search starts from: the prepared workload, the baseline, and the length of the
    run the user's trainer is set up for (None: not said; the options' or the default)."""

    prepared: Prepared
    baseline: TrainingConfig
    planned_epochs: float | None = None


def check_workload(model: nn.Module, train: Any, val: Any, loop: TrainerLoop) -> Workload:
    """The first two items of each set, trained by ``loop``: the check a trainer's search
    makes through the user's code before any trial."""
    return Workload(
        model=model,
        train=_first_two(train, "train"),
        val=_first_two(val, "validation"),
        task=logged_task("check", True),
        loop=loop,
    )


def _first_two(data: Any, which: str) -> Dataset[Any]:
    """A data set's first two items (a stream's as it gives them, kept in memory)."""
    if is_stream(data):
        return Items(first_items(data, 2, argument=which), source=f"the {which} stream")
    return Subset(data, range(min(2, len(data))))


def prepare_workload(
    model: nn.Module,
    dataset: Dataset[Any] | DataModuleLike,
    val_dataset: Dataset[Any] | None,
    task: Task,
    *,
    val_fraction: float,
    seed: int,
    eval_batch_size: int = EVAL_BATCH_SIZE,
    planned_samples: int | None = None,
    planned_epochs: float | None = None,
    search_workers: bool = True,
) -> Prepared:
    """The task resolved, the datasets checked (and split, without a validation set),
    the model checked against a batch (which chooses ``metric="auto"``) and copied once: the
    caller's is never touched again. ``dataset`` may be a LightningDataModule: its datasets and
    collate function are used. Every config validates in batches of ``eval_batch_size`` (a
    search's baseline's batch size; the default baseline's where no search says).

    ``dataset`` may stream (an ``IterableDataset``): each trial then reads it from its start
    with its own loader settings; its planned run is ``planned_samples``, or
    ``planned_epochs`` passes over it, else one pass (a map-style dataset's run is counted in
    epochs, and ignores ``planned_samples``), and
    it needs a ``val_dataset``, map-style or a stream whose first :data:`MAX_VAL_ITEMS` items
    are kept as the validation set. ``search_workers``: find how many DataLoader workers the
    stream can feed (a search over them)."""
    data = unpack_data(dataset, val_dataset, task.collate_fn)
    given: Dataset[Any] = data.train
    given_val: Dataset[Any] | None = data.val
    notes = [data.note] if data.note else []
    if is_stream(given) and given_val is None:
        raise DataError(
            "`dataset` is a stream (an IterableDataset): give val_dataset= too (map-style, or "
            f"a stream whose first {MAX_VAL_ITEMS:,} items are kept as the validation set). A "
            "stream cannot hold out a random split: every trial reads it from its start."
        )
    if given_val is not None and is_stream(given_val):
        given_val, note = validation_set(given_val, seed=seed)
        notes.append(note)
    setup = set_up_task(model, given, given_val, task.replace(collate_fn=data.collate_fn))
    resolved = setup.resolved
    fingerprint = data_fingerprint(dataset, val_dataset)  # checked: as the user gave them
    if is_stream(given):
        given = make_stream(given, planned_samples, passes=planned_epochs, workers=search_workers)
        notes.append(stream_note(given))
    if given_val is not None:
        train, val, stratified = given, given_val, False
    else:
        train, val, stratified = split_dataset(
            given, resolved, val_fraction=val_fraction, seed=seed
        )
    template = cpu_copy(model)  # a model on the GPU is not copied there first
    val, _ = validation_set(val, seed=seed)
    workload = Workload(
        model=template,
        train=train,
        val=val,
        task=resolved,
        optimizer=setup.task.optimizer or default_optimizer,
        longest=longest_items(train, seed=seed),
        eval_batch_size=eval_batch_size,
    )
    return Prepared(
        workload=workload,
        stratified=stratified,
        refs=setup.task.references(),
        metric=setup.choice,
        note="; ".join(notes) or None,
        data_fingerprint=fingerprint,
    )


def validation_set(
    val: Dataset[Any], *, seed: int, argument: str = "val_dataset"
) -> tuple[Dataset[Any], str]:
    """(the validation set every config is scored on, a note on it where it was cut): a
    stream's first :data:`MAX_VAL_ITEMS` items, kept in memory; a fixed random subset of
    that many items of a larger map-style set (paired accuracy checks compare configs on the
    same items: a fixed subset suffices); else the set itself."""
    if is_stream(val):
        items = validation_items(val, MAX_VAL_ITEMS, argument=argument)
        return items, f"validation: {items.source}, kept in memory"
    n = len(val)  # type: ignore[arg-type]
    if n <= MAX_VAL_ITEMS:
        return val, ""
    picks = random.Random(seed).sample(range(n), MAX_VAL_ITEMS)
    return Subset(val, sorted(picks)), ""


def trainer_data(
    train: Dataset[Any],
    val: Dataset[Any],
    *,
    planned_samples: int | None,
    seed: int,
    names: tuple[str, str],
    passes: float | None = None,
) -> tuple[Dataset[Any], Dataset[Any], list[str]]:
    """(training set, validation set, notes) of a trainer's search (``names``: how the user
    gave them): a training stream with its planned run (``planned_samples``, or ``passes``
    over it, else one pass) and the workers it can feed; the validation set as
    :func:`validation_set` keeps it."""
    val, note = validation_set(val, seed=seed, argument=names[1])
    notes = [note] if note else []
    if is_stream(train):
        train = make_stream(train, planned_samples, passes=passes, argument=names[0])
        notes.append(stream_note(train))
    return train, val, notes


def stream_note(stream: Stream) -> str:
    """What a search says of the stream it trains on."""
    length = "" if stream.length is None else f" of {stream.length:,} items"
    read = stream.read
    if read is not None:
        if read.ended:
            length += f", read whole to learn it ({read.seconds:.1f} s)"
        elif read.items >= stream.samples:
            length += f", read as far as the run ({read.seconds:.1f} s)"
        else:
            length += (
                f", read for {read.seconds:.0f} s ({read.items:,} items) without an end: how many "
                "passes the run takes is not known before, each read again from its start"
            )
    passes = ""
    if stream.passes > 1:
        passes = f", {stream.passes:.3g} passes, each read again from the stream's start"
    out = (
        f"data: a stream ({type(stream.source).__name__}){length}; each trial reads it from "
        f"its start with its own loader settings; the planned run reads {stream.samples:,} "
        f"samples{passes}"
    )
    if not stream.replays:
        out += (
            "; it does not replay its order (two reads from its start at one seed gave different "
            "first items), so the accuracy guard's pairs cannot see the same samples in the same "
            "order: their differences carry the data order's noise too, and a check needs more "
            "seeds to decide"
        )
    elif not stream.seeded:
        out += (
            "; it gives the same items in the same order at every data-order seed (nothing in "
            "it follows the seed: no shuffle that set_epoch reseeds, no shuffle or augmentation "
            "drawn from torch, random or numpy), so the accuracy runs of different seeds "
            "train on the same data and differ only where training draws randomness itself: "
            "the spread between the baseline's seeds shows no effect of the data order (your "
            "own runs over this stream see one order too)"
        )
    return out


def _elements(item: Any) -> int:
    if isinstance(item, torch.Tensor):
        return item.numel()
    if isinstance(item, Mapping):
        return sum(_elements(v) for v in item.values())
    if isinstance(item, list | tuple):
        return sum(_elements(v) for v in item)
    return 1


def longest_items(dataset: Dataset[Any], *, seed: int) -> tuple[int, ...]:
    """Indices of the largest items among up to :data:`SIZED_ITEMS` of them (read for at most
    :data:`SIZING_SECONDS`), largest first; empty when every item read has the same size."""
    if is_stream(dataset):
        return ()  # a stream's items are read in its order only: its batches are its own
    n = len(dataset)  # type: ignore[arg-type]
    order = list(range(n))
    if n > SIZED_ITEMS:
        order = random.Random(seed).sample(order, SIZED_ITEMS)
    sizes: dict[int, int] = {}
    stop = time.monotonic() + SIZING_SECONDS
    for i in order:
        step(f"`dataset[{i}]`, read for its size (finding the longest items)", ITEM_HINT)
        sizes[i] = _elements(dataset[i])
        if time.monotonic() > stop:
            break
    if len(set(sizes.values())) <= 1:
        return ()
    ranked = sorted(sizes, key=lambda i: (-sizes[i], i))
    return tuple(ranked[:LONGEST])

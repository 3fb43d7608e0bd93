"""What a search is: its settings, published to the study once the baseline is measured.

Workers joining the study (``autotune worker``), ``autotune.verify`` (through the exported JSON)
and reports rebuilt from the storage read them back through :meth:`SearchSettings.from_dict`,
so every process of a search guards the same metric, with the same hooks and tolerance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune._knobs.config import TrainingConfig
from autotune._search.warm import WarmStart
from autotune._space import SearchSpace, parse_space
from autotune._task import TaskRefs
from autotune._trial.fingerprint import data_changes, described, model_changes
from autotune._trial.measure import Measurement
from autotune._trial.outcome import Budget

__all__ = ["SearchSettings", "differences", "measured_changes"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """Everything a process needs to take part in (or report on) a search, besides the model
    and the data. Times are wall-clock (``time.time()``), shared across hosts."""

    tolerance: float
    metric_name: str
    higher_is_better: bool
    hooks: TaskRefs
    seed: int
    val_fraction: float
    stratified: bool  # the validation split kept the label proportions
    space: SearchSpace  # restricted to the device and model (its notes say how)
    baseline: TrainingConfig
    budget: Budget
    calibrate: bool  # set the measurement budget from the baseline's speed (no budget= given)
    accuracy_repeats: int
    accuracy_samples: int | None  # fixed by the user; None: planned from the time budget
    n_train: int  # training samples
    planned_epochs: float  # the length of the user's real run, which candidates are ranked for
    n_trials: int | None
    timeout: float | None
    started: float
    trial_timeout: float | None = None
    isolation: str = "auto"  # as asked: auto, process or none
    isolated: bool = True  # whether the coordinator's trials ran in a worker process
    guided: bool = True
    # The model has no batch-norm layer: how the global batch is split leaves the numerics alone.
    split_free: bool = False
    # Why the guarded metric is the one it is ("given by you", or what metric="auto" saw).
    metric_reason: str = ""
    # Every config validates in batches of this size (the baseline's as the user gave it); None
    # in a study written before it was fixed, whose configs validated in their own batches.
    eval_batch_size: int | None = None
    environment: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The space as the search was asked for it (restricted to the device and model, before
    # the memory probe and the calibration narrowed it): what a resumed search is compared to.
    # None in a study written before it was stored.
    space_asked: SearchSpace | None = None
    # The baseline as the search was asked for it (before a split of its batch that fits in
    # memory): what a resumed search is compared to. None in a study written before it was
    # stored.
    baseline_asked: TrainingConfig | None = None
    # The kind of the user's trainer whose loop ran the trials ("lightning", "transformers");
    # None: autotune's own loop over the task's hooks.
    trainer: str | None = None
    # Seconds each measurement times, as the user asked (None: from the timeout).
    timed_seconds: float | None = None
    # Paired seeds a change of the numerics needs before it is confirmed (0: no minimum).
    min_pairs: int = 0
    # What the data is, where the search said (a data module's parts, a stream and the
    # validation items taken from one); None: plain datasets.
    data_note: str | None = None
    # The training set streams: its run is one pass of planned_samples, which a trainer's
    # export counts in optimizer steps (max_steps) rather than epochs.
    streams: bool = False
    # What was measured (autotune._trial.fingerprint): the model's module types and tensor shapes,
    # the data's length, first items' structure and hash. None in a study stored before them.
    model_fingerprint: Mapping[str, Any] | None = None
    data_fingerprint: Mapping[str, Any] | None = None
    # What the search carried over from an earlier result (warm_start=): the configs measured
    # first, the values not searched; None: started cold.
    warm_start: WarmStart | None = None

    @property
    def carried(self) -> tuple[TrainingConfig, ...]:
        """A warm start's configs, measured first (none for a cold start)."""
        return () if self.warm_start is None else self.warm_start.configs

    @property
    def knob_order(self) -> tuple[str, ...]:
        """A warm start's knobs, the most important there first (none for a cold start)."""
        return () if self.warm_start is None else self.warm_start.order

    @property
    def planned_samples(self) -> int:
        return round(self.planned_epochs * self.n_train)

    def projected_time(self, measurement: Measurement, config: TrainingConfig) -> float:
        """Seconds ``config``'s run would take at ``measurement``'s speed, one-time costs
        included: the planned epochs, or the share of them ``config`` trains (its
        ``train_fraction``). The time every config is ranked by: time to the accuracy the
        guard holds it to, not only samples per second."""
        epochs = config.epochs(self.planned_epochs)
        return measurement.projected_time(round(epochs * self.n_train), epochs)

    @property
    def validation_batch_size(self) -> int:
        """The batch size every process of this search validates in."""
        return self.eval_batch_size or self.baseline.batch_size

    @property
    def deadline(self) -> float | None:
        return None if self.timeout is None else self.started + self.timeout

    def described(self) -> dict[str, Any]:
        """The settings as a result's ``search`` section shows them."""
        return {
            "space": self.space.name,
            "space_notes": list(self.space.notes),
            "stratified_split": self.stratified,
            # What the data is where a search said (a stream; validation from its first items).
            "data": self.data_note,
            "streams": self.streams,
            "seed": self.seed,
            "val_fraction": self.val_fraction,
            "n_trials": self.n_trials,
            "timeout": self.timeout,
            "planned_epochs": self.planned_epochs,
            "accuracy_repeats": self.accuracy_repeats,
            "isolation": "process" if self.isolated else "in-process",
            # The user's limit per run; without one, 5x what a run is expected to take.
            "trial_limit": self.trial_timeout,
            "guided": self.guided,
            "hooks": self.hooks.to_dict(),
            # What the trials measured: the model's and the data's fingerprints.
            **described(self.model_fingerprint, self.data_fingerprint),
            "warm_start": None if self.warm_start is None else self.warm_start.described(),
        }

    def replace(self, **changes: Any) -> SearchSettings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, SearchSpace):
                value = {**value.to_dict(), "notes": list(value.notes)}
            elif isinstance(value, TaskRefs | TrainingConfig | WarmStart):
                value = value.to_dict()
            elif isinstance(value, Budget):
                value = dataclasses.asdict(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSettings:
        values = dict(data)
        values["hooks"] = TaskRefs.from_dict(values["hooks"])
        values["space"] = _space_from(values["space"])
        if values.get("space_asked") is not None:
            values["space_asked"] = _space_from(values["space_asked"])
        values["baseline"] = TrainingConfig.from_dict(values["baseline"])
        if values.get("baseline_asked") is not None:
            values["baseline_asked"] = TrainingConfig.from_dict(values["baseline_asked"])
        values["budget"] = Budget(**values["budget"])
        if values.get("warm_start") is not None:
            values["warm_start"] = WarmStart.from_dict(values["warm_start"])
        return cls(**values)


def _space_from(data: Mapping[str, Any]) -> SearchSpace:
    """A space as ``to_dict`` wrote it, with its notes."""
    space = dict(data)
    notes = tuple(space.pop("notes", ()))
    parsed = parse_space(space, name=str(space.get("name", "space")))
    return dataclasses.replace(parsed, notes=notes)


def measured_changes(stored: SearchSettings, asked: SearchSettings) -> list[str]:
    """What differs between the model and data a study measured and those a search (or a
    worker) now has: "the model: 2 parameter shapes differ (...)", "the data: training set:
    length 1,797 -> 1,500". Empty where either fingerprint is unknown (a study stored before
    they were)."""
    out = [
        f"the model: {c}" for c in model_changes(stored.model_fingerprint, asked.model_fingerprint)
    ]
    out += [f"the data: {c}" for c in data_changes(stored.data_fingerprint, asked.data_fingerprint)]
    return out


def differences(stored: SearchSettings, asked: SearchSettings) -> list[str]:
    """The settings that change what a study's stored facts mean, where a resumed search asks
    for other values than the study was measured under: "planned epochs: 10 stored, 100
    asked". Projected times are ranked for the planned run, accuracy runs are of one metric in
    one direction, verdicts are judged at one tolerance against one baseline, the global batch
    is kept or not, and the space says what was searched: mixing them would rank and judge
    trials under different rules. A study's trials measured one model on one data set: another
    (see :func:`measured_changes`) leads the list."""
    pairs = {
        "trainer (tune / find_best)": (stored.trainer, asked.trainer),
        "planned epochs (--planned-epochs)": (stored.planned_epochs, asked.planned_epochs),
        "planned samples (--planned-samples, or the training set's size)": (
            stored.planned_samples,
            asked.planned_samples,
        ),
        "tolerance (--tolerance)": (stored.tolerance, asked.tolerance),
        "metric (--metric)": (stored.metric_name, asked.metric_name),
        "direction (--lower-is-better)": (
            "higher is better" if stored.higher_is_better else "lower is better",
            "higher is better" if asked.higher_is_better else "lower is better",
        ),
        "data-parallel ranks (--nproc-per-node)": (stored.baseline.ranks, asked.baseline.ranks),
        "keep the global batch (--keep-global-batch)": (
            stored.space.global_batch_size is not None,
            asked.space.global_batch_size is not None,
        ),
    }
    out = measured_changes(stored, asked)
    out += [f"{name}: {a!r} stored, {b!r} asked" for name, (a, b) in pairs.items() if a != b]
    if stored.baseline_asked is not None and asked.baseline_asked is not None:
        before, now = stored.baseline_asked.to_dict(), asked.baseline_asked.to_dict()
        changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
        out += [
            f"baseline (--baseline; with tune, your trainer's settings), {k}: "
            f"{before.get(k)!r} stored, {now.get(k)!r} asked"
            for k in changed
        ]
    if stored.space_asked is not None:
        before = stored.space_asked.to_dict()["knobs"]
        now = (asked.space_asked or asked.space).to_dict()["knobs"]
        changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
        out += [
            f"space (--space), {k}: {before.get(k)!r} stored, {now.get(k)!r} asked" for k in changed
        ]
    return out

"""The options of a search that most users never set, in one object, and the defaults of the
few they do. The CLI reads its defaults from here, so no default is written twice.

::

    options = autotune.SearchOptions(n_trials=40, storage="sqlite:///autotune.db")
    result = autotune.find_best(model, train_set, timeout=900, options=options)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune._checks import check_choice, check_flag, check_int, check_number
from autotune._errors import ArgumentError
from autotune._knobs.config import TrainingConfig
from autotune._trial.isolation import ISOLATION_MODES
from autotune._trial.outcome import Budget

__all__ = [
    "PLANNED_EPOCHS",
    "TIMEOUT",
    "TOLERANCE",
    "VERIFY_ROUNDS",
    "SearchOptions",
    "as_options",
]

TOLERANCE = 0.01  # the metric's allowed drop, in its own units (0.01: one point of accuracy)
TIMEOUT = 600.0  # seconds a search runs when neither a timeout nor a trial count is given
VERIFY_ROUNDS = 6  # paired rounds of `verify`
PLANNED_EPOCHS = 10.0  # the real run's length where neither you nor your trainer says


def _cli(default: Any, option: str, help: str, **argparse: Any) -> Any:
    """An option the command line takes too: its flag, help and argparse settings."""
    meta = {"cli": option, "help": help, "argparse": argparse}
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """How a search runs, beyond the model, the data and the handful of common keywords.

    - ``n_trials``: stop after this many candidates (with ``timeout``: whichever comes first);
      a proposal of a config measured already counts, though it runs nothing.
    - ``planned_epochs``: the length of your real run; candidates are ranked by the projected
      time to train it, one-time costs (compilation) amortised over it. None: your trainer's
      ``max_epochs`` / ``num_train_epochs`` with ``tune``, else 10. With a stream: its passes
      (a stream with no ``len()`` is read whole once to learn its length; an endless one is
      an error).
    - ``planned_samples``: with a dataset that streams (an ``IterableDataset``), the samples
      your real run reads from it, from its start and again from its start past its end, as
      trainers read a finite stream (None: one pass, its ``len()``; a stream with neither is
      an error).
    - ``baseline``: your current settings (a :class:`TrainingConfig` or a dict of its fields),
      measured first; PyTorch's defaults when None.
    - ``storage``, ``study_name``: the Optuna storage (a URL: ``sqlite:///autotune.db``,
      ``postgresql://...``, ``journal:///path``) and study; the same ones resume a search.
    - ``seed``: the sampler's seed and the validation split's.
    - ``val_fraction``: the share of the data held out for validation when no validation set
      is given.
    - ``accuracy_samples``, ``accuracy_repeats``: samples per accuracy run (None: planned from
      the time budget) and the baseline's data-order seeds.
    - ``min_pairs``: the paired seeds a change of the numerics needs before it can be
      confirmed (None: no floor; a check's first look takes the baseline's seeds after its
      screening run, or two where the baseline's runs say two would settle). A failure mode
      of 1 run in 10 goes unseen in 3 pairs 73% of the time, in 20 pairs 12%: more pairs buy
      that assurance with time.
    - ``budget``: the throughput measurement of every trial (None: calibrated from the
      baseline's speed, to time ``timed_seconds``: by default 1% of the timeout, within 1 to
      10 s, or 3 s without a timeout).
    - ``sampler``: an Optuna sampler in place of the default multivariate TPE (the accuracy
      guard and failures reach any sampler as Optuna constraints).
    - ``isolation``: ``"auto"`` runs trials in a worker process wherever the model and data can
      be pickled; ``"process"`` insists; ``"none"`` runs them in this process.
    - ``trial_timeout``: seconds before a trial is stopped (None: 5x what it is expected to
      take, at least a minute).
    - ``launcher(study)``: runs the candidates elsewhere (the CLI's ``--processes``); it
      returns when its processes are done.
    - ``guided=False``: every candidate is what the sampler proposes, measured in full (no
      first guess, no late variants, no pruning): for exhaustive grids and comparisons.
    - ``keep_global_batch=True``: candidates keep the baseline's global batch (batch size x
      accumulation steps), split differently, so need no accuracy runs (except with batch norm).
    - ``warm_start``: the result JSON of an earlier search on this machine (e.g. of the
      model before an edit): its answer and best few configs are measured first (each on this
      model, a change of the numerics checked for accuracy as any candidate is), and a knob's
      value every trial of which failed there for a reason of the machine (an error, a
      crashed or broken device) is not searched; the safe knobs are tried in the order of
      their importance there. From other hardware or software, only that order is carried
      (and it is said); from another torch major version, an error. ``"study:NAME"``
      starts from a study in ``storage`` instead (the CLI does this itself where the same
      command's model or data changed since its last study).
    - ``ranks``: data-parallel processes per trial (the CLI's ``--nproc-per-node``). With more
      than one, every trial, the baseline's too, is a DistributedDataParallel job of that many
      ranks started by ``torchrun`` (gloo on the CPU, NCCL on GPUs: rank i on GPU i), each
      loading its share of the data; the batch size is per rank, the global batch (what the
      guard and the LR scaling see) is ``batch x accumulation x ranks``; the throughput is all
      ranks' samples per second and the memory the largest rank's; DDP's knobs are searched.
    """

    n_trials: int | None = _cli(None, "--trials", "candidate trials in the study", type=int)
    planned_epochs: float | None = _cli(
        None,
        "--planned-epochs",
        f"length of the real training run, for ranking (default: {PLANNED_EPOCHS:g}; with "
        "--trainer: its max_epochs / num_train_epochs)",
        type=float,
    )
    planned_samples: int | None = _cli(
        None,
        "--planned-samples",
        "samples the real run reads from a streaming dataset (an IterableDataset), several "
        "passes where it holds fewer (default: its length, or --planned-epochs passes)",
        type=int,
    )
    baseline: TrainingConfig | Mapping[str, Any] | None = None
    storage: str | optuna.storages.BaseStorage | None = None
    study_name: str | None = None
    seed: int = _cli(0, "--seed", "the sampler's and the validation split's seed", type=int)
    val_fraction: float = 0.1
    accuracy_samples: int | None = _cli(
        None,
        "--accuracy-samples",
        "samples per accuracy-check run (default: from the time budget)",
        type=int,
    )
    accuracy_repeats: int = _cli(
        3,
        "--accuracy-repeats",
        "the baseline's accuracy runs, one per data-order seed: the pairs of a check's first look",
        type=int,
    )
    min_pairs: int | None = _cli(
        None,
        "--min-pairs",
        "paired seeds a change of the numerics needs before it is confirmed (default: no "
        "floor; a first look takes the baseline's seeds, or 2 where its runs say two "
        "settle); more pairs make a rare failure mode likelier to show",
        type=int,
    )
    budget: Budget | None = None
    timed_seconds: float | None = _cli(
        None,
        "--timed-seconds",
        "seconds of steady-state steps each measurement times (default: 1%% of the timeout, "
        "1-10 s; 3 s without one)",
        type=float,
    )
    sampler: optuna.samplers.BaseSampler | None = None
    isolation: str = _cli(
        "auto",
        "--isolation",
        "where each trial runs: auto, in a child process wherever the model and data can be "
        "pickled; process, always in one; none, in this process",
        choices=ISOLATION_MODES,
    )
    trial_timeout: float | None = _cli(
        None,
        "--trial-timeout",
        "seconds before a trial is stopped (default: 5x the baseline's trial)",
        type=float,
    )
    launcher: Callable[[optuna.Study], None] | None = None
    guided: bool = True
    keep_global_batch: bool = _cli(
        False,
        "--keep-global-batch",
        "candidates keep the baseline's global batch (batch size x accumulation steps) and "
        "only split it differently: no accuracy runs (except with batch norm)",
        action="store_true",
    )

    warm_start: str | Path | None = _cli(
        None,
        "--warm-start",
        "an earlier result JSON on this machine (e.g. best.json), or study:NAME in --storage: "
        "its answer and best few configs are measured first, and values that failed here are "
        "not searched again (default: the same command's last study, where the model or data "
        "changed since)",
    )
    ranks: int = _cli(
        1,
        "--nproc-per-node",
        "data-parallel processes per trial (DDP, started as torchrun starts them)",
        type=int,
    )

    def __post_init__(self) -> None:
        check_int("ranks", self.ranks, rule=">= 1", ok=lambda v: v >= 1)
        if self.ranks > 1 and self.isolation == "none":
            raise ArgumentError(
                f"ranks={self.ranks} runs each trial as {self.ranks} processes: "
                "isolation='none' cannot. Leave isolation at 'auto'."
            )
        check_int("n_trials", self.n_trials, rule=">= 1", ok=lambda v: v >= 1, optional=True)
        check_number(
            "planned_epochs", self.planned_epochs, rule="> 0", ok=lambda v: v > 0, optional=True
        )
        check_int(
            "planned_samples", self.planned_samples, rule=">= 1", ok=lambda v: v >= 1,
            optional=True,
        )  # fmt: skip
        check_number("val_fraction", self.val_fraction, rule="in (0, 1)", ok=lambda v: 0 < v < 1)
        check_int(
            "accuracy_samples", self.accuracy_samples, rule=">= 1", ok=lambda v: v >= 1,
            optional=True,
        )  # fmt: skip
        check_int("accuracy_repeats", self.accuracy_repeats, rule=">= 1", ok=lambda v: v >= 1)
        check_int("min_pairs", self.min_pairs, rule=">= 2", ok=lambda v: v >= 2, optional=True)
        check_int("seed", self.seed, rule="an int", ok=lambda v: True)
        check_flag("guided", self.guided)
        check_flag("keep_global_batch", self.keep_global_batch)
        check_choice("isolation", self.isolation, ISOLATION_MODES)
        check_number(
            "trial_timeout", self.trial_timeout, rule="> 0 seconds or None",
            ok=lambda v: v > 0, optional=True,
        )  # fmt: skip
        check_number(
            "timed_seconds", self.timed_seconds, rule="> 0 seconds or None",
            ok=lambda v: v > 0, optional=True,
        )  # fmt: skip
        if self.budget is not None and self.timed_seconds is not None:
            raise ArgumentError(
                "`budget` fixes every measurement and `timed_seconds` calibrates them: give "
                "one of the two."
            )
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise TypeError(
                f"`budget` must be an autotune.Budget or None, but got {self.budget!r}."
            )
        if self.warm_start is not None and not isinstance(self.warm_start, str | Path):
            raise TypeError(
                f"`warm_start` must be the path of a result JSON or None, but got "
                f"{type(self.warm_start).__name__}."
            )
        if self.launcher is not None and not callable(self.launcher):
            raise TypeError(f"`launcher` must be callable or None, but got {self.launcher!r}.")

    def replace(self, **changes: Any) -> SearchOptions:
        return dataclasses.replace(self, **changes)

    @classmethod
    def command_line(cls) -> tuple[dataclasses.Field[Any], ...]:
        """The options ``autotune search`` takes as flags (their metadata: flag, help, and
        argparse settings; the default is the field's)."""
        return tuple(f for f in dataclasses.fields(cls) if "cli" in f.metadata)


def as_options(options: SearchOptions | None) -> SearchOptions:
    """``options`` as given (the defaults for None)."""
    if options is None:
        return SearchOptions()
    if not isinstance(options, SearchOptions):
        raise TypeError(
            f"`options` must be an autotune.SearchOptions or None, but got "
            f"{type(options).__name__}."
        )
    return options

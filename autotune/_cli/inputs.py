"""What the command line is given: its factories loaded and called within the set-up limit, the
study's name and the baseline it names, and the error a bad one raises."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any

from torch import nn

import autotune
from autotune import _refs
from autotune._errors import AutotuneError
from autotune._options import PLANNED_EPOCHS
from autotune._stream import is_stream
from autotune._trial.bounded import SetUpLimit, bounded
from autotune._trial.data import is_datamodule
from autotune._trial.direction import DIRECTION_FLAGS
from autotune._trial.fingerprint import (
    study_suffix,
)
from autotune._trial.task import METRIC_CHOICES

__all__ = [
    "DEFAULT_STORAGE",
    "EXIT_USAGE",
    "CLIError",
    "baseline_config",
    "call_factory",
    "command_study",
    "default_study",
    "load_factory",
    "model_and_data",
    "task_of",
]


EXIT_USAGE = 2
DEFAULT_STORAGE = "sqlite:///autotune.db"


class CLIError(Exception):
    """A problem with what was typed; printed without a traceback."""


def load_factory(spec: str, option: str) -> Callable[..., Any]:
    """``module:function`` or ``path/to/file.py:function`` -> the function."""
    try:
        return _refs.load(spec)
    except _refs.UnresolvedReference as exc:
        raise CLIError(f"{option}: {exc}") from exc


def task_of(args: argparse.Namespace) -> autotune.Task:
    """The task from the hook options (--forward, --loss, --metric, ...), each a reference
    loaded here; the options are the fields of :class:`autotune.Task`."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(autotune.Task):
        option, given = f.metadata["cli"], getattr(args, f.name)
        if f.metadata["hook"]:
            values[f.name] = None if given is None else load_factory(given, option)
        elif f.name == "metric" and given not in METRIC_CHOICES:
            if ":" not in given:
                raise CLIError(
                    f"--metric: must be {', '.join(METRIC_CHOICES)}, or MODULE:FUNCTION / "
                    f"file.py:FUNCTION naming a metric(outputs, targets) -> float, but got "
                    f"{given!r}."
                )
            values[f.name] = load_factory(given, option)
        elif f.name == "higher_is_better":
            values[f.name] = given  # None, or the flag given (--higher- / --lower-is-better)
        else:
            values[f.name] = given
    try:
        return autotune.Task(**values)
    except autotune.ArgumentError as exc:
        flag = DIRECTION_FLAGS.get(args.higher_is_better)
        raise CLIError(f"{flag}: {exc}" if flag else str(exc)) from None


def call_factory(spec: str, option: str, limit: SetUpLimit) -> Any:
    """What the factory ``spec`` returns, its module imported and the factory called within
    ``limit`` (a download or a lock that never returns ends the command, naming it)."""

    def call() -> Any:
        fn = load_factory(spec, option)
        try:
            return fn()
        except Exception as exc:
            raise CLIError(f"{option}: calling {spec} raised {type(exc).__name__}: {exc}") from exc

    return bounded(
        call,
        limit,
        doing=f"the {option} factory {spec}",
        hint="Call it alone to see it return; one that downloads or builds a cache can be run "
        "once first, so that it is quick here.",
    )


def model_and_data(args: argparse.Namespace, limit: SetUpLimit) -> tuple[Any, Any, Any]:
    model = call_factory(args.model, "--model", limit)
    if not isinstance(model, nn.Module):
        raise CLIError(
            f"--model: {args.model} must return a torch.nn.Module, but returned "
            f"{type(model).__name__}."
        )
    data = call_factory(args.data, "--data", limit)
    train, val = data, None
    if isinstance(data, tuple | list):
        if len(data) != 2:
            raise CLIError(
                f"--data: {args.data} must return a dataset or a (train, val) pair, but returned "
                f"a {type(data).__name__} of length {len(data)}."
            )
        train, val = data
    if is_datamodule(train):
        return model, train, val  # its datasets and collate function are read by find_best
    for what, ds in (("dataset", train), ("validation dataset", val)):
        map_style = hasattr(ds, "__getitem__") and hasattr(ds, "__len__")
        if ds is not None and not (map_style or is_stream(ds)):
            raise CLIError(
                f"--data: {args.data} must return a dataset (map-style or an IterableDataset), "
                f"a (train, val) pair or a LightningDataModule; its {what} is a "
                f"{type(ds).__name__}."
            )
    return model, train, val


def default_study(args: argparse.Namespace) -> str:
    """Same command on the same model and data, same study: running it again continues the
    search. Another model or data (the fingerprints the search read them for) is another
    study, in the same storage, beside the command's earlier ones."""
    command = command_study(args)
    fingerprints = getattr(args, "fingerprints", None)
    if fingerprints is None:
        return command
    return f"{command}-{study_suffix(*fingerprints)}"


def command_study(args: argparse.Namespace) -> str:
    """The part of the default study name the command makes (its factories and settings)."""
    sources = [args.model, args.data] if not args.trainer else [f"trainer={args.trainer}"]
    parts = [*sources, str(args.space), str(args.device), str(args.tolerance)]
    # Hooks join the key only where given, so that earlier commands keep their studies
    # (accuracy was the default metric before "auto": a study of another metric is another).
    given = (args.collate_fn, args.forward, args.loss_fn, args.metric_name)
    lower = args.higher_is_better is False  # --lower-is-better's part, as before the other
    if any(given) or args.metric != "accuracy" or lower:
        # --higher-is-better says what a metric function without it was taken as: the same
        # study, so that a command that now needs the flag resumes what it started.
        parts += [*map(str, given), args.metric, str(lower)]
    if args.optimizer:
        parts.append(f"optimizer={args.optimizer}")
    if args.ranks > 1:
        parts.append(f"ranks={args.ranks}")  # per-rank batches: another study
    # So do the planned run's length and a kept global batch (where not the defaults): a study
    # ranks and judges its trials under them, and refuses to resume under others.
    epochs = args.planned_epochs or PLANNED_EPOCHS
    if epochs != PLANNED_EPOCHS or args.keep_global_batch:
        parts += [f"epochs={epochs:g}", f"keep_global_batch={args.keep_global_batch}"]
    if args.planned_samples is not None:
        parts.append(f"samples={args.planned_samples}")  # a stream's run: another study
    if args.baseline is not None:  # another baseline: another study (parsed by cmd_search)
        parts.append(f"baseline={json.dumps(args.baseline.to_dict(), sort_keys=True)}")
    key = "|".join(parts)
    short = hashlib.sha1(key.encode()).hexdigest()[:8]
    if args.trainer:
        return f"{args.trainer.rpartition(':')[2]}-{short}"
    model_name = args.model.rpartition(":")[2]
    data_name = args.data.rpartition(":")[2]
    return f"{model_name}-{data_name}-{short}"


def baseline_config(text: str | None) -> autotune.TrainingConfig | None:
    """--baseline: a config JSON file (a result ``--out`` wrote, or a bare config), or a JSON
    object of the config's fields given inline (the rest PyTorch's defaults)."""
    if text is None:
        return None
    try:
        if text.lstrip().startswith("{"):
            return autotune.TrainingConfig.from_json(text)
        return autotune.load_config(text)
    except AutotuneError as exc:
        raise CLIError(f"--baseline: {exc}") from None

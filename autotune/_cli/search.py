"""``autotune search`` and ``autotune worker``: a search (or a worker of one) from the
command line's arguments, delegated to the library."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from torch import nn

import autotune
from autotune._cli.inputs import (
    DEFAULT_STORAGE,
    CLIError,
    baseline_config,
    call_factory,
    command_study,
    default_study,
    model_and_data,
    task_of,
)
from autotune._display import console_progress, print_summary
from autotune._progress import Lines, Progress
from autotune._run import setup_limit
from autotune._search.distributed import (
    cpu_shares,
    gpu_shares,
    join_search,
    launch_local_workers,
    pin_from_env,
    restricted_to,
    visible_devices,
)
from autotune._search.lineage import changed_since
from autotune._search.storage import redact
from autotune._search.warm import STUDY
from autotune._search.words import fit
from autotune._trial.bounded import bounded
from autotune._trial.fingerprint import (
    data_fingerprint,
    fit_data_fingerprint,
    model_fingerprint,
)
from autotune._trial.metrics import AUTO
from autotune._tune import trainer_kind

__all__ = ["cmd_search", "cmd_worker", "trainer_arguments"]


def cmd_search(args: argparse.Namespace) -> int:
    if args.processes < 1:
        raise CLIError(f"--processes must be >= 1, but got {args.processes}.")
    args.baseline = baseline_config(args.baseline)  # a clear error before anything is loaded
    args.fingerprints = None  # of the model and data, once they are loaded
    run = _trainer_search(args) if args.trainer else _model_search(args)
    storage = args.storage or DEFAULT_STORAGE
    study = args.study or default_study(args)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet = args.quiet
    # A live panel on a terminal; each line once where stderr is a pipe or a log.
    progress: Progress = Lines(lambda line: None) if quiet else console_progress(sys.stderr)
    if not args.study and args.fingerprints is not None:
        warm = args.warm_start is None  # an explicit --warm-start is the user's choice
        changed = changed_since(storage, command_study(args), study, *args.fingerprints, warm=warm)
        if changed is not None:
            # Within the width on a person's display (what changed is at its end): the
            # fingerprints it compares are in both studies' results (autotune show names them).
            progress(fit(changed.line))
            if warm:  # the edited model's search starts from what the last one learned
                args.warm_start = f"{STUDY}{changed.earlier}"
    try:
        return _search(args, run, storage, study, progress)
    finally:
        progress.close()


# find_best or tune with what the command line named, given the keywords they share
# (tolerance, timeout, space, progress, options).
Run = Callable[..., autotune.SearchResult]


def _model_search(args: argparse.Namespace) -> Run:
    """``find_best`` on the model and data the factories return, with the hooks given."""
    if not args.model or not args.data:
        raise CLIError(
            "--model and --data name the model and data factories (or --trainer names a "
            "factory of the trainer you already have)."
        )
    devices = _devices(args)
    if devices:
        # Through what a scheduler made visible, not over it.
        devices = visible_devices(devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
        # Before anything touches CUDA: the coordinator measures the baseline on the first
        # device, as worker 1 will.
        os.environ["CUDA_VISIBLE_DEVICES"] = devices[0]
        args.device = "cuda:0"
    limit = setup_limit(args.timeout, args.n_trials)
    model, train, val = model_and_data(args, limit)
    task = task_of(args)
    args.fingerprints = bounded(
        lambda: (model_fingerprint(model), data_fingerprint(train, val)),
        limit,
        doing="reading the first items of the data for its fingerprint",
    )
    return functools.partial(
        autotune.find_best, model, train, val_dataset=val, task=task, device=args.device
    )


def _trainer_search(args: argparse.Namespace) -> Run:
    """``tune`` on what the --trainer factory returns: a Hugging Face Trainer; or a Lightning
    Trainer with its module and data, as a (trainer, module, datamodule) or (trainer, module,
    train_loader, val_loader) tuple, or a dict of tune's arguments."""
    given = [
        option for option, value in (("--model", args.model), ("--data", args.data),
        ("--device", args.device), ("--devices", args.devices), ("--baseline", args.baseline))
        if value
    ]  # fmt: skip
    given += [
        f.metadata["cli"]
        for f in dataclasses.fields(autotune.Task)
        if f.metadata["hook"] and getattr(args, f.name)
    ]
    if args.processes > 1:
        given.append("--processes")
    if given:
        raise CLIError(
            f"--trainer: {', '.join(given)} do not apply; the trainer holds its model, data, "
            "device and training step (--metric names a metric its evaluation logs)."
        )
    limit = setup_limit(args.timeout, args.n_trials)
    made = call_factory(args.trainer, "--trainer", limit)
    arguments = trainer_arguments(made, args.trainer)
    args.fingerprints = bounded(
        lambda: _trainer_fingerprints(arguments),
        limit,
        doing="reading the first items of the trainer's data for its fingerprint",
    )
    return functools.partial(
        autotune.tune,
        **arguments,
        metric=None if args.metric == AUTO else args.metric,
        higher_is_better=args.higher_is_better,
    )


def _trainer_fingerprints(given: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """The fingerprints of a trainer's model and data as ``tune`` will read them (None where
    the trainer is not one ``tune`` takes: it says so)."""
    trainer: Any = given.get("trainer")
    kind = trainer_kind(trainer)
    if kind == "transformers" and isinstance(getattr(trainer, "model", None), nn.Module):
        hf_data = data_fingerprint(trainer.train_dataset, trainer.eval_dataset)
        return model_fingerprint(trainer.model), hf_data
    model = given.get("model")
    if kind == "lightning" and isinstance(model, nn.Module):
        fit_data = fit_data_fingerprint(
            given.get("datamodule"), given.get("train_dataloaders"), given.get("val_dataloaders")
        )
        return model_fingerprint(model), fit_data
    return None


def trainer_arguments(made: Any, spec: str) -> dict[str, Any]:
    if isinstance(made, Mapping):
        return dict(made)
    if not isinstance(made, tuple | list):
        return {"trainer": made}
    if len(made) == 3:
        return {"trainer": made[0], "model": made[1], "datamodule": made[2]}
    if len(made) == 4:
        return {
            "trainer": made[0],
            "model": made[1],
            "train_dataloaders": made[2],
            "val_dataloaders": made[3],
        }
    raise CLIError(
        f"--trainer: {spec} must return a Hugging Face Trainer, a (trainer, module, "
        "datamodule) or (trainer, module, train_loader, val_loader) tuple, or a dict of "
        f"autotune.tune's arguments, but returned a {type(made).__name__} of {len(made)}."
    )


def _devices(args: argparse.Namespace) -> list[str] | None:
    return [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None


def _search(
    args: argparse.Namespace,
    run: Run,
    storage: str,
    study: str,
    progress: Progress,
) -> int:
    devices = _devices(args)
    quiet = args.quiet
    progress(f"study {study!r} in {redact(storage)}; results to {args.out}")
    launcher = None
    pinned: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if args.processes > 1 or devices:
        n = len(devices) if devices else args.processes
        # Each process loads its batches on its own share of the cores (on GPUs too).
        shares = gpu_shares(n) if devices else cpu_shares(n)
        if shares:
            pinned = restricted_to(shares[0])  # baseline timed on one share, like the others
            progress(
                f"{n} search processes split this machine's CPU cores ({len(shares[0])} each): "
                "every trial, the baseline's too, is timed on one share"
            )
        launcher = launch_local_workers(
            n=n,
            storage=storage,
            model_spec=args.model,
            data_spec=args.data,
            devices=devices,
            shares=shares,
            report=progress,
            extra_args=["--quiet"] if quiet else ["--plain"],
        )
    try:
        with pinned:
            result = run(
                tolerance=args.tolerance,
                timeout=args.timeout,
                space=args.space,
                progress=progress,
                options=_options(args, storage=storage, study=study, launcher=launcher),
            )
    except KeyboardInterrupt:
        print(
            "Interrupted before the baseline was measured: nothing to write. Run the same "
            "command again to start over.",
            file=sys.stderr,
        )
        return 130
    result.save(args.out)
    progress.close()  # the live panel goes before the summary
    # The last progress line, so that the summary on stdout is the short story alone.
    if not args.quiet:
        print(f"wrote {args.out}", file=sys.stderr, flush=True)
    print_summary(result.to_dict(), sys.stdout)
    if result.interrupted:
        print(
            "Interrupted. Run the same command again to resume the study "
            f"({study!r} in {redact(storage)}).",
            file=sys.stderr,
        )
        return 130
    return 0


def _options(
    args: argparse.Namespace, *, storage: str, study: str, launcher: Any = None
) -> autotune.SearchOptions:
    """The search's options: those given as flags, the storage, the study, the launcher."""
    given = {f.name: getattr(args, f.name) for f in autotune.SearchOptions.command_line()}
    return autotune.SearchOptions(
        **given, baseline=args.baseline, storage=storage, study_name=study, launcher=launcher
    )


def cmd_worker(args: argparse.Namespace) -> int:
    pin_from_env()  # the CPU share a local coordinator gave this worker
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # The study's budget is not read yet: the limit of a search without one.
    model, train, val = model_and_data(args, setup_limit(None))
    prefix = f"[worker {os.getpid()}] "
    progress: Progress
    if args.quiet:
        progress = Lines(lambda line: None)
    elif args.plain:
        progress = Lines(lambda line: print(f"{prefix}{line}", file=sys.stderr, flush=True))
    else:
        progress = console_progress(sys.stderr, prefix=prefix)
    try:
        return _work(args, model, train, val, progress)
    finally:
        progress.close()


def _work(
    args: argparse.Namespace, model: nn.Module, train: Any, val: Any, progress: Progress
) -> int:
    ran = join_search(
        model,
        train,
        val_dataset=val,
        storage=args.storage,
        study_name=args.study,
        device=args.device,
        isolation=args.isolation,
        seed_offset=args.seed_offset,
        progress=progress,
    )
    progress(f"done: {ran} trials")
    return 0

"""The ``autotune`` command line: parses arguments and delegates; nothing else lives here."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import optuna
import torch
from torch import nn

import autotune
from autotune import _refs
from autotune._cli_help import DeprecatedAlias, HelpFormatter, examples_epilog, wrap
from autotune._device import environment, resolve_device
from autotune._display import console_progress, print_summary
from autotune._errors import AutotuneError
from autotune._options import PLANNED_EPOCHS, TIMEOUT, TOLERANCE
from autotune._progress import Lines, Progress
from autotune._result.paste import KINDS, snippet
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
from autotune._space import builtin_spaces, load_space
from autotune._stream import is_stream
from autotune._trial.bounded import SetUpLimit, bounded, left_running
from autotune._trial.data import is_datamodule
from autotune._trial.direction import DIRECTION_FLAGS
from autotune._trial.fingerprint import (
    data_fingerprint,
    fit_data_fingerprint,
    model_fingerprint,
    study_suffix,
)
from autotune._trial.isolation import ISOLATION_MODES
from autotune._trial.metrics import AUTO
from autotune._trial.task import METRIC_CHOICES
from autotune._tune import trainer_kind
from autotune._verify import DEFAULT_BUDGET, LIMIT_FACTOR, RUN_LIMIT, START_UP
from autotune._verify import setup_limit as verify_setup_limit

__all__ = ["main"]

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


def _task(args: argparse.Namespace) -> autotune.Task:
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


def _call_factory(spec: str, option: str, limit: SetUpLimit) -> Any:
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


def _model_and_data(args: argparse.Namespace, limit: SetUpLimit) -> tuple[Any, Any, Any]:
    model = _call_factory(args.model, "--model", limit)
    if not isinstance(model, nn.Module):
        raise CLIError(
            f"--model: {args.model} must return a torch.nn.Module, but returned "
            f"{type(model).__name__}."
        )
    data = _call_factory(args.data, "--data", limit)
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


def _default_study(args: argparse.Namespace) -> str:
    """Same command on the same model and data, same study: running it again continues the
    search. Another model or data (the fingerprints the search read them for) is another
    study, in the same storage, beside the command's earlier ones."""
    command = _command_study(args)
    fingerprints = getattr(args, "fingerprints", None)
    if fingerprints is None:
        return command
    return f"{command}-{study_suffix(*fingerprints)}"


def _command_study(args: argparse.Namespace) -> str:
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


def _baseline(text: str | None) -> autotune.TrainingConfig | None:
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


def cmd_search(args: argparse.Namespace) -> int:
    if args.processes < 1:
        raise CLIError(f"--processes must be >= 1, but got {args.processes}.")
    args.baseline = _baseline(args.baseline)  # a clear error before anything is loaded
    args.fingerprints = None  # of the model and data, once they are loaded
    run = _trainer_search(args) if args.trainer else _model_search(args)
    storage = args.storage or DEFAULT_STORAGE
    study = args.study or _default_study(args)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet = args.quiet
    # A live panel on a terminal; each line once where stderr is a pipe or a log.
    progress: Progress = Lines(lambda line: None) if quiet else console_progress(sys.stderr)
    if not args.study and args.fingerprints is not None:
        warm = args.warm_start is None  # an explicit --warm-start is the user's choice
        changed = changed_since(storage, _command_study(args), study, *args.fingerprints, warm=warm)
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
    model, train, val = _model_and_data(args, limit)
    task = _task(args)
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
    made = _call_factory(args.trainer, "--trainer", limit)
    arguments = _trainer_arguments(made, args.trainer)
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


def _trainer_arguments(made: Any, spec: str) -> dict[str, Any]:
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
    model, train, val = _model_and_data(args, setup_limit(None))
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


def cmd_show(args: argparse.Namespace) -> int:
    path = Path(args.path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CLIError(f"cannot read {args.path!r}: {exc.strerror}.") from None
    except json.JSONDecodeError as exc:
        raise CLIError(f"{args.path!r} is not valid JSON: {exc}.") from None
    if not isinstance(data, dict) or "config" not in data or "metrics" not in data:
        raise CLIError(f"{args.path!r} is not an autotune result (no `config`/`metrics`).")
    if args.paste:
        print(snippet(data, args.paste, args.path))
        return 0
    if args.json:
        print(json.dumps(data["config"], indent=2))
    else:
        print_summary(data, sys.stdout, detail=args.detail)
    if args.detail:
        notes = (data.get("search") or {}).get("notes") or []
        print("\nThe search's reasoning, each line whole:" if notes else "\nNo line was shortened.")
        for note in notes:
            print(f"  {note}")
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    if args.name:
        print(load_space(args.name).describe())
        return 0
    for name in builtin_spaces():
        space = load_space(name)
        print(f"{name:12} {space.description}")
    print("\n`autotune spaces NAME` lists a space's knobs; --space PATH uses your own file.")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    env = environment(device)
    packages: dict[str, str | None] = {}
    for dist in (
        "autotune",
        "torch",
        "optuna",
        "nvidia-ml-py",
        "psutil",
        "scikit-learn",
        "numpy",
        "PyYAML",
    ):
        try:
            packages[dist] = version(dist)
        except PackageNotFoundError:
            packages[dist] = None
    env["packages"] = packages
    env["cuda_available"] = torch.cuda.is_available()
    env["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env["torch_threads"] = torch.get_num_threads()
    if args.json:
        print(json.dumps(env, indent=2))
    else:
        width = max(len(k) for k in env)
        for key, value in env.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in value.items())
            print(f"{key:{width}}  {value}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    trainer = None
    budget = None  # verify's own, as where --timed-samples is its default
    if args.timed_samples != DEFAULT_BUDGET.timed_samples:
        budget = dataclasses.replace(DEFAULT_BUDGET, timed_samples=args.timed_samples)
    if args.trainer and (args.model or args.data):
        raise CLIError("--trainer: the trainer holds its model and data; leave out "
                       "--model and --data.")  # fmt: skip
    if not args.trainer and not (args.model and args.data):
        raise CLIError("verify: give --model and --data (or --trainer for a result of tune).")
    task = None if args.trainer else _task(args)  # the flags' errors before the file's
    # The factories get the limit verify derives from the study for its set-up.
    limit = verify_setup_limit(
        args.path, time_limit=args.trial_timeout, device=args.device, budget=budget
    )
    if args.trainer:
        made = _call_factory(args.trainer, "--trainer", limit)
        given = _trainer_arguments(made, args.trainer)
        trainer, model = given["trainer"], given.get("model")
        train = given.get("datamodule") or given.get("train_dataloaders")
        val = given.get("val_dataloaders")
    else:
        model, train, val = _model_and_data(args, limit)
    quiet = args.quiet or args.json

    def progress(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    report = autotune.verify(
        args.path,
        model,
        train,
        trainer=trainer,
        val_dataset=val,
        task=task,
        rounds=args.rounds,
        budget=budget,
        device=args.device,
        accuracy_seeds=args.accuracy_seeds,
        progress=progress,
        time_limit=args.trial_timeout,
        full=args.full,
        full_seeds=args.full_seeds,
        resume=(args.resume or f"{args.path}.full.json") if args.full else None,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    return 0 if report.faster_here else 1


def cmd_report(args: argparse.Namespace) -> int:
    result = autotune.SearchResult.from_study(
        args.storage,
        args.study,
        tolerance=args.tolerance,
        metric_name=args.metric,
        higher_is_better=False if args.lower_is_better else None,
    )
    path = result.report(args.out)
    print(
        f"wrote {path} ({len(result.trials)} trials; winner #{result.winner.number}, "
        f"{result.speedup:.2f}x)"
    )
    return 0


REF = "MODULE:FN"  # a factory or hook, as module:function or path/to/file.py:function

# What a value of a library option stands for in the usage line, where its field's name would
# read as an internal one (--trials N_TRIALS, --nproc-per-node RANKS).
OPTION_METAVARS = {
    "n_trials": "N",
    "planned_epochs": "EPOCHS",
    "planned_samples": "N",
    "accuracy_samples": "N",
    "accuracy_repeats": "N",
    "min_pairs": "N",
    "timed_seconds": "SECONDS",
    "trial_timeout": "SECONDS",
    "warm_start": "FILE",
    "ranks": "N",
}


def _search_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--model", metavar=REF, help="the factory of your model: a function returning an nn.Module"
    )
    s.add_argument(
        "--data",
        metavar=REF,
        help="the factory of your data: a function returning a dataset, a (train, val) pair of "
        "datasets or a LightningDataModule",
    )
    s.add_argument(
        "--trainer",
        metavar=REF,
        help="the factory of the trainer you already have, measured by its own loop (instead "
        "of --model/--data): a Hugging Face Trainer, or a Lightning (trainer, module, "
        "datamodule) / (trainer, module, train_loader, val_loader)",
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"how long the search may run (default: {TIMEOUT:g} where --trials is not given "
        "either; with --trials alone, until they are done)",
    )
    s.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        metavar="DROP",
        help="the validation metric's allowed drop, in its own units: 0.01 is one point of "
        "accuracy",
    )
    s.add_argument(
        "--space",
        default="default",
        metavar="NAME|FILE",
        help="a built-in search space (`autotune spaces` lists them) or your own space file",
    )
    s.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: the best available)"
    )
    s.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        metavar="URL",
        help="the Optuna storage the study is kept in (sqlite:///FILE, postgresql://..., "
        "journal:///FILE); the same storage and study resume a search",
    )
    s.add_argument(
        "--study",
        default=None,
        metavar="NAME",
        help="the study's name (default: derived from the command, the model and the data, so "
        "that the same command continues its study)",
    )
    s.add_argument(
        "--baseline",
        default=None,
        metavar="CONFIG",
        help="your current training settings, measured first and guarded against: a config "
        "JSON file (a result --out wrote, or a bare config), or its fields as inline JSON, "
        'e.g. \'{"lr_schedule": {"kind": "cosine"}}\' (default: PyTorch\'s defaults, a '
        "constant learning rate)",
    )
    for f in autotune.SearchOptions.command_line():
        meta = f.metadata
        shown: dict[str, Any] = {}  # a store_true flag takes no metavar
        if f.name in OPTION_METAVARS:
            shown["metavar"] = OPTION_METAVARS[f.name]
        s.add_argument(meta["cli"], dest=f.name, default=f.default, help=meta["help"],
                       **shown, **meta["argparse"])  # fmt: skip
    _process_arguments(s)
    s.add_argument(
        "--out",
        default="best.json",
        metavar="PATH",
        help="where to write the result JSON (`autotune show` reads it)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress display or lines")
    _hook_arguments(s)


def _process_arguments(s: argparse.ArgumentParser) -> None:
    """--processes, its old spelling --workers, and --devices: the processes a search runs
    on this machine. "Workers" also named the DataLoader workers the search tries, in every
    progress line: the flag says processes, and --workers still works, saying so."""
    s.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="search processes on this machine, each running trials of one shared study; not "
        "DataLoader workers (those are searched). On a CPU they split its cores",
    )
    s.add_argument(
        "--workers",
        dest="processes",
        type=int,
        action=DeprecatedAlias,
        replacement="--processes",
        reason="search processes, not DataLoader workers",
    )
    s.add_argument(
        "--devices",
        default=None,
        metavar="GPUS",
        help="GPU indices, one search process on each, e.g. 0,1,2,3 (in place of --processes)",
    )


def _hook_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per field of :class:`autotune.Task`, as the Task declares it."""
    g = parser.add_argument_group(
        "hooks",
        wrap(
            "How a batch becomes a loss and a metric, each MODULE:NAME or file.py:NAME. By "
            "default a batch is (inputs, targets), or a dict given to the model as "
            "model(**batch) with its targets under `labels` (Hugging Face models need no "
            "hook); the loss is the model's own or cross-entropy (MSE for float targets); the "
            "metric is chosen from a batch (--metric auto). Every process of a search "
            "(--processes, `autotune worker`) loads the same hooks from its study."
        ),
    )
    for f in dataclasses.fields(autotune.Task):
        option, help_text = f.metadata["cli"], f.metadata["help"]
        if f.name == "higher_is_better":
            either = g.add_mutually_exclusive_group()
            for value, flag in DIRECTION_FLAGS.items():
                better = "higher" if value else "lower"
                either.add_argument(
                    flag, dest=f.name, action="store_const", const=value, default=None,
                    help=f"the metric is better when {better}; {help_text}",
                )  # fmt: skip
        else:
            metavar = REF if f.metadata["hook"] else f.name.rpartition("_")[2].upper()
            g.add_argument(option, dest=f.name, default=f.default, metavar=metavar,
                           help=help_text)  # fmt: skip


def _worker_arguments(w: argparse.ArgumentParser) -> None:
    w.add_argument(
        "--storage",
        required=True,
        metavar="URL",
        help="the running search's storage, reachable from here (postgresql://...)",
    )
    w.add_argument(
        "--study", required=True, metavar="NAME", help="the study's name, as the search printed it"
    )
    w.add_argument(
        "--model", required=True, metavar=REF, help="the model factory the search was given"
    )
    w.add_argument(
        "--data", required=True, metavar=REF, help="the data factory the search was given"
    )
    w.add_argument(
        "--device",
        default=None,
        help="where this process trains its trials: cpu, cuda, cuda:1, ... (default: the best "
        "available)",
    )
    w.add_argument(
        "--isolation",
        default=None,
        choices=ISOLATION_MODES,
        help="whether each trial runs in a child process of this one (default: as the search "
        "was told)",
    )
    w.add_argument(
        "--seed-offset",
        type=int,
        default=1,
        metavar="N",
        help="added to the study's seed for this process's sampler: give each process that "
        "joins one study its own",
    )
    w.add_argument("--quiet", action="store_true", help="no progress display or lines")
    w.add_argument("--plain", action="store_true", help="plain progress lines, even on a terminal")


def _verify_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("path", help="a result JSON written by `autotune search` or result.save()")
    v.add_argument("--model", metavar=REF, help="the model factory the search used")
    v.add_argument("--data", metavar=REF, help="the data factory the search used")
    v.add_argument(
        "--trainer",
        metavar=REF,
        help="for a result of tune: the trainer factory the search used (instead of "
        "--model/--data); both configs are measured through it",
    )
    # Each default is verify's own (its signature, its budget, its run limit).
    defaults = inspect.signature(autotune.verify).parameters
    rounds, seeds = defaults["rounds"].default, defaults["accuracy_seeds"].default
    full_seeds = defaults["full_seeds"].default
    for flag, kind, default, metavar, text in (
        ("--rounds", int, rounds, "N", "paired rounds"),
        (
            "--timed-samples", int, DEFAULT_BUDGET.timed_samples, "N",
            "samples timed per measurement",
        ),
        (
            "--accuracy-seeds", int, seeds, "N",
            "also train both on the search's accuracy budget over this many seeds",
        ),
        (
            "--trial-timeout", float, None, "SECONDS",
            f"seconds before a run is stopped (default: the search's trial limit, else "
            f"{LIMIT_FACTOR:g}x the longest run the study measured of that config, plus "
            f"{START_UP:g} s where each run starts a process; {RUN_LIMIT:g} where it measured "
            "none)",
        ),
        ("--full-seeds", int, full_seeds, "N", "with --full: paired seeds of the whole run"),
    ):  # fmt: skip
        v.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)
    v.add_argument(
        "--full",
        action="store_true",
        help="also train both for the whole planned run (the winner its share of the epochs) "
        "over paired seeds: end-to-end time and final metric of each, time to accuracy "
        "measured",
    )
    v.add_argument(
        "--resume",
        default=None,
        metavar="FILE",
        help="with --full: the file each finished whole run is kept in, and a stopped "
        "verification goes on from (default: PATH.full.json)",
    )
    v.add_argument(
        "--device",
        default=None,
        help="measure here instead of on the result's device: cpu, cuda, cuda:1, ...",
    )
    v.add_argument("--json", action="store_true", help="print the comparison as JSON")
    v.add_argument("--quiet", action="store_true", help="no progress lines")
    _hook_arguments(v)


def _report_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--storage", default=DEFAULT_STORAGE, metavar="URL", help="the search's Optuna storage"
    )
    r.add_argument(
        "--study",
        default=None,
        metavar="NAME",
        help="the study's name (may be left out where the storage holds one study)",
    )
    r.add_argument("--out", default="report.html", metavar="PATH", help="where to write the HTML")
    r.add_argument(
        "--tolerance",
        type=float,
        default=None,
        metavar="DROP",
        help="judge the trials against this tolerance (default: the search's own)",
    )
    r.add_argument(
        "--metric",
        default=None,
        metavar="NAME",
        help="the metric's name to show (default: the search's own)",
    )
    r.add_argument(
        "--lower-is-better", action="store_true", help="the metric is a loss (lower is better)"
    )


def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a result JSON written by `autotune search` or result.save()")
    p.add_argument("--json", action="store_true", help="print only the config as JSON")
    p.add_argument(
        "--detail",
        action="store_true",
        help="also print the whole text of every progress line the search shortened",
    )
    p.add_argument(
        "--as",
        dest="paste",
        choices=KINDS,
        default=None,
        metavar="KIND",
        help="print the lines to paste to train with it: loop, lightning or transformers",
    )


def _spaces_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        nargs="?",
        default=None,
        help="a built-in space whose knobs to list (default: list the spaces)",
    )


def _env_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default=None,
        help="the device to describe: cpu, cuda, cuda:1, ... (default: the best available)",
    )
    p.add_argument("--json", action="store_true", help="print it as JSON")


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its function, the function that adds its arguments, its line in
    ``autotune --help``, and its own help's description and examples (commands a reader can
    copy: the tests parse every one and load the factories they name)."""

    name: str
    func: Callable[[argparse.Namespace], int]
    add_arguments: Callable[[argparse.ArgumentParser], None]
    summary: str
    description: str
    examples: tuple[str, ...]


CNN = "--model autotune.examples:cnn_model --data autotune.examples:cnn_data"
SHARED = "--storage postgresql://db.example/autotune --study cnn"

COMMANDS = (
    Command(
        "search", cmd_search, _search_arguments,
        "search for the fastest config and write it as JSON",
        "Find the fastest way to train your model on this machine without losing validation "
        "accuracy. Your current settings (--baseline, else PyTorch's defaults) are measured "
        "first; candidates from the search space are then timed, and any that changes the "
        "numerics is trained to check its metric stays within --tolerance. The fastest safe "
        "config is written to --out.\n\n"
        "The study is kept in --storage: the same command run again continues it.",
        (
            f"autotune search {CNN} --timeout 300",
            "autotune search --model train.py:build_model --data train.py:build_data "
            "--trials 30 --out tuned.json",
            "# a Hugging Face model (transformers installed), its batches padded by a hook:",
            "autotune search --model autotune.examples:hf_model --data autotune.examples:hf_data "
            "--collate autotune.examples:hf_collate --timeout 300",
            "# two search processes sharing this machine's CPU cores, or one per GPU:",
            f"autotune search {CNN} --timeout 600 --processes 2",
            f"autotune search {CNN} --timeout 600 --devices 0,1,2,3",
        ),
    ),
    Command(
        "worker", cmd_worker, _worker_arguments,
        "join a running search from another process or host and run its trials",
        "Join a search already running on a storage this process reaches (e.g. PostgreSQL) "
        "and run its candidate trials until the study's budget is spent. Each such process is "
        "one more search process, like those `autotune search --processes N` starts on its own "
        "machine; it has nothing to do with DataLoader workers (their count is one of the "
        "knobs searched).\n\n"
        "The search measures the baseline first; a process that joins waits for it, and loads "
        "the same hooks from the study.",
        (
            "# on the first host:",
            f"autotune search {CNN} {SHARED} --timeout 1800",
            "# on each other host, with the same factories:",
            f"autotune worker {CNN} {SHARED} --device cuda",
        ),
    ),
    Command(
        "show", cmd_show, _show_arguments,
        "print a readable summary of a result JSON",
        "Print what a search found, from the result JSON it wrote: the winner beside your "
        "baseline, its figures, and the config to train with.",
        (
            "autotune show best.json",
            "autotune show best.json --detail",
            "autotune show best.json --as lightning",
            "autotune show best.json --json > config.json",
        ),
    ),
    Command(
        "spaces", cmd_spaces, _spaces_arguments,
        "list the built-in search spaces",
        "List the search spaces autotune ships (for --space), or one space's knobs and the "
        "values it tries.",
        ("autotune spaces", "autotune spaces quick"),
    ),
    Command(
        "verify", cmd_verify, _verify_arguments,
        "re-measure a result's winner against its baseline on this machine",
        "Measure the winner and its baseline side by side in paired rounds and compare "
        "with what the result recorded; warns where this machine differs from the one the "
        "result was measured on. Exit status 1 when the winner is not faster here.",
        (
            f"autotune verify best.json {CNN}",
            f"autotune verify best.json {CNN} --full",
        ),
    ),
    Command(
        "report", cmd_report, _report_arguments,
        "write a self-contained HTML report of a study",
        "Read a search's study from its Optuna storage and write one HTML file that opens "
        "offline.",
        (
            "autotune report",
            f"autotune report {SHARED} --out cnn.html",
        ),
    ),
    Command(
        "env", cmd_env, _env_arguments,
        "print the environment, for bug reports",
        "Print what autotune sees of this machine: the device, the CPU, and the versions of "
        "Python, torch and the packages autotune uses. Paste it into a bug report.",
        ("autotune env", "autotune env --device cuda --json"),
    ),
)  # fmt: skip


def _version() -> str:
    """The version of the package that runs (its ``__version__``, which the tests hold equal
    to pyproject's), not of whatever distribution metadata an older install left."""
    return f"autotune {autotune.__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune",
        description=wrap(
            "Find the fastest way to train a PyTorch model on this machine without losing "
            "validation accuracy."
        ),
        epilog="`autotune COMMAND --help` describes a command, with examples.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for c in COMMANDS:
        command = sub.add_parser(
            c.name,
            help=c.summary,
            description=wrap(c.description),
            epilog=examples_epilog(c.examples),
            formatter_class=HelpFormatter,
        )
        c.add_arguments(command)
        command.set_defaults(func=c.func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``autotune`` program on ``argv`` (None: this process's command line, which makes
    this call the program: it may then end the process itself, see below)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        code = int(args.func(args))
    except (CLIError, AutotuneError) as exc:
        # autotune's own verdicts on the input; anything else is a bug or an error raised
        # inside torch or the user's code, and keeps its traceback.
        print(f"autotune {args.command}: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    if argv is None and left_running():
        # A call into the user's code past its limit still runs in a thread. Python's exit
        # would stop it mid-call, and inside a torch op that aborts the process ("terminate
        # called without an active exception", SIGABRT) after the error was said: leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())

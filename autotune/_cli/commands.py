"""The commands that read a search or its result: ``show``, ``spaces``, ``env``, ``verify`` and
``report``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

import autotune
from autotune._cli.inputs import CLIError, call_factory, model_and_data, task_of
from autotune._cli.search import trainer_arguments
from autotune._device import environment, resolve_device
from autotune._display import print_summary
from autotune._result.paste import snippet
from autotune._space import builtin_spaces, load_space
from autotune._verify import DEFAULT_BUDGET
from autotune._verify import setup_limit as verify_setup_limit

__all__ = ["cmd_env", "cmd_report", "cmd_show", "cmd_spaces", "cmd_verify"]


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
    task = None if args.trainer else task_of(args)  # the flags' errors before the file's
    # The factories get the limit verify derives from the study for its set-up.
    limit = verify_setup_limit(
        args.path, time_limit=args.trial_timeout, device=args.device, budget=budget
    )
    if args.trainer:
        made = call_factory(args.trainer, "--trainer", limit)
        given = trainer_arguments(made, args.trainer)
        trainer, model = given["trainer"], given.get("model")
        train = given.get("datamodule") or given.get("train_dataloaders")
        val = given.get("val_dataloaders")
    else:
        model, train, val = model_and_data(args, limit)
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

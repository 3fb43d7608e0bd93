"""Every command's arguments, each named once with its help and metavar."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any

import autotune
from autotune._cli.help import DeprecatedAlias, wrap
from autotune._cli.inputs import DEFAULT_STORAGE
from autotune._options import TIMEOUT, TOLERANCE
from autotune._result.paste import KINDS
from autotune._trial.direction import DIRECTION_FLAGS
from autotune._trial.isolation import ISOLATION_MODES
from autotune._verify import DEFAULT_BUDGET, LIMIT_FACTOR, RUN_LIMIT, START_UP

__all__ = [
    "env_arguments",
    "report_arguments",
    "search_arguments",
    "show_arguments",
    "spaces_arguments",
    "verify_arguments",
    "worker_arguments",
]


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


def search_arguments(s: argparse.ArgumentParser) -> None:
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


def worker_arguments(w: argparse.ArgumentParser) -> None:
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


def verify_arguments(v: argparse.ArgumentParser) -> None:
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


def report_arguments(r: argparse.ArgumentParser) -> None:
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


def show_arguments(p: argparse.ArgumentParser) -> None:
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


def spaces_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        nargs="?",
        default=None,
        help="a built-in space whose knobs to list (default: list the spaces)",
    )


def env_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default=None,
        help="the device to describe: cpu, cuda, cuda:1, ... (default: the best available)",
    )
    p.add_argument("--json", action="store_true", help="print it as JSON")

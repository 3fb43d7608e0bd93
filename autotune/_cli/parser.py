"""The parser: its commands with their examples, and ``main``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence

import autotune
from autotune._cli.arguments import (
    env_arguments,
    report_arguments,
    search_arguments,
    show_arguments,
    spaces_arguments,
    verify_arguments,
    worker_arguments,
)
from autotune._cli.commands import cmd_env, cmd_report, cmd_show, cmd_spaces, cmd_verify
from autotune._cli.help import HelpFormatter, examples_epilog, wrap
from autotune._cli.inputs import EXIT_USAGE, CLIError
from autotune._cli.search import cmd_search, cmd_worker
from autotune._errors import AutotuneError
from autotune._trial.bounded import left_running

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


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
        "search", cmd_search, search_arguments,
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
        "worker", cmd_worker, worker_arguments,
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
        "show", cmd_show, show_arguments,
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
        "spaces", cmd_spaces, spaces_arguments,
        "list the built-in search spaces",
        "List the search spaces autotune ships (for --space), or one space's knobs and the "
        "values it tries.",
        ("autotune spaces", "autotune spaces quick"),
    ),
    Command(
        "verify", cmd_verify, verify_arguments,
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
        "report", cmd_report, report_arguments,
        "write a self-contained HTML report of a study",
        "Read a search's study from its Optuna storage and write one HTML file that opens "
        "offline.",
        (
            "autotune report",
            f"autotune report {SHARED} --out cnn.html",
        ),
    ),
    Command(
        "env", cmd_env, env_arguments,
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

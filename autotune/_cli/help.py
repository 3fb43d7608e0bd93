"""How ``autotune``'s help reads: defaults shown by argparse, examples kept as written, and
old spellings of options that still work but say so.

The command line itself lives in the rest of :mod:`autotune._cli`; this module holds only what
shapes its ``--help`` and its deprecated flags, so that the commands' code does not mix with
wording.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

__all__ = ["DeprecatedAlias", "HelpFormatter", "examples_epilog", "wrap"]

WIDTH = 78  # columns of a description: argparse fills options to the terminal, not raw text


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default written by argparse from the value the parser really uses (a
    default stated by hand goes stale), except where there is none to show: None and False
    mean "not given" (the help says what then happens), and "(default: None)" would only
    mislead. Descriptions and epilogs keep their line breaks, so examples stay one per line."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def wrap(text: str) -> str:
    """``text``'s paragraphs (split at blank lines) filled to :data:`WIDTH`: the raw
    formatter that keeps the examples' lines would otherwise print each paragraph as one."""
    return "\n\n".join(textwrap.fill(" ".join(p.split()), WIDTH) for p in text.split("\n\n"))


def examples_epilog(examples: Sequence[str]) -> str:
    """An "examples:" section, one command (or ``#`` comment) a line, as a reader copies it."""
    return "examples:\n" + "\n".join(f"  {line}" for line in examples)


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: it stores into the new option's destination, so both
    mean the same and scripts written for it keep working, and says on stderr, in one line
    worded as argparse words its own messages, that it is deprecated and why (``reason``).
    It is left out of ``--help``: the new spelling is the one to learn."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        replacement: str,
        reason: str,
        **kwargs: Any,
    ) -> None:
        self.replacement, self.reason = replacement, reason
        kwargs.setdefault("default", argparse.SUPPRESS)  # the new option's default stands
        kwargs.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement} "
            f"(the same: {self.reason})",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)

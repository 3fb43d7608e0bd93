"""The ``autotune`` command line: parses arguments and delegates; nothing else lives here.

:mod:`~autotune._cli.inputs` loads what it is given, :mod:`~autotune._cli.search` runs a search
or a worker, :mod:`~autotune._cli.commands` the commands that read one, and
:mod:`~autotune._cli.arguments`, :mod:`~autotune._cli.help` and :mod:`~autotune._cli.parser`
make the parser."""

from __future__ import annotations

from autotune._cli.inputs import default_study
from autotune._cli.parser import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "default_study", "main"]

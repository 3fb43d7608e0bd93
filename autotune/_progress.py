"""Where progress lines go: a callable of the user's, stdout, or the ``autotune`` logger."""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Report", "reporter"]

log = logging.getLogger("autotune")

Report = Callable[[str], None]


def reporter(progress: bool | Report) -> Report:
    """``progress`` itself when it is callable; printing to stdout when True; otherwise the
    ``autotune`` logger at INFO level (silent unless logging is configured)."""
    if callable(progress):
        return progress
    if progress:
        return lambda line: print(line, flush=True)
    return lambda line: log.info("%s", line)

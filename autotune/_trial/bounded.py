"""The user's code before the first trial, each call under a limit.

Trials are bounded where they run (:mod:`autotune._trial.isolation`: a worker is killed at its
limit). What comes before them (the CLI's factories, a data module's ``setup``, the first item,
the first batch through ``collate_fn``, the first forward, the metric chosen from it) must run
in the command's own process: the search needs what it returns (the model, the data, the
metric chosen) before a worker can be given its workload, and ``find_best`` has the model
object only there. So each such call runs in a daemon thread that the command stops waiting for
at its limit (:func:`bounded`): the command then ends with a :class:`~autotune.SetUpTimeout`
that names what was running (the step autotune was at, :func:`step`, and the innermost frame of
the user's code in the stuck thread), the limit and why it was that long. Python cannot stop a
thread: it is abandoned, and ends with the process (the CLI's ends with the command); where the
stuck call returns after all, the thread stops at its next step instead of running more of the
user's code.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

import torch

from autotune._errors import SetUpTimeout

__all__ = ["ITEM_HINT", "RUN_HINT", "SetUpLimit", "bounded", "left_running", "step"]

_T = TypeVar("_T")
_local = threading.local()
_abandoned: list[threading.Event] = []  # each abandoned call's "done"

ITEM_HINT = (
    "Read it alone to see it return: an item read from a network filesystem, a remote "
    "bucket or behind a lock can wait for ever."
)
RUN_HINT = (
    "Run it alone on that batch to see it return: a collective with no peers, a blocked read "
    "or a lock waits for ever."
)


@dataclasses.dataclass(frozen=True)
class SetUpLimit:
    """How long one call into the user's code before the first trial may take, why that long,
    and what gives it longer (said in the error when it takes longer)."""

    seconds: float
    why: str
    longer: str = "a longer timeout (timeout=, --timeout)"


class _Abandoned(BaseException):
    """Ends a thread whose call returned after the command stopped waiting for it. A
    BaseException, so that the user's own ``except Exception`` does not swallow it."""


@dataclasses.dataclass
class _Steps:
    """Where a bounded call is: what autotune is doing in it, and what to try if it hangs."""

    doing: str
    hint: str
    abandoned: bool = False


def step(doing: str, hint: str = "") -> None:
    """Say which call into the user's code the bounded call makes next (``doing``: what it is,
    naming the function and the item or batch; ``hint``: what to try where it hangs). Outside a
    bounded call, nothing; in an abandoned one, the thread ends here."""
    steps: _Steps | None = getattr(_local, "steps", None)
    if steps is None:
        return
    if steps.abandoned:
        raise _Abandoned()
    steps.doing, steps.hint = doing, hint


def bounded(fn: Callable[[], _T], limit: SetUpLimit, *, doing: str, hint: str = "") -> _T:
    """``fn()``, in a daemon thread that is abandoned after ``limit.seconds``: its value, or
    the exception it raised; a :class:`SetUpTimeout` where it ran past the limit. ``doing``
    (and ``hint``) describe it until its own :func:`step` calls say more."""
    steps = _Steps(doing, hint)
    box: dict[str, object] = {}
    # Set by the call itself: a join interrupted by Ctrl-C can leave is_alive() False for a
    # thread that still runs (Python 3.11).
    done = threading.Event()

    def run() -> None:
        _local.steps = steps
        try:
            box["value"] = fn()
        except _Abandoned:
            pass
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=run, name=f"autotune set-up: {doing}", daemon=True)
    thread.start()
    try:
        done.wait(limit.seconds)
    finally:
        # Past the limit, or Ctrl-C while waiting: the call stops at its next step.
        steps.abandoned = not done.is_set()
    if steps.abandoned:
        _abandoned.append(done)
        raise SetUpTimeout(
            _message(steps, limit, _users_frame(thread)),
            doing=steps.doing,
            seconds=limit.seconds,
        )
    if "error" in box:
        error = box.pop("error")
        assert isinstance(error, BaseException)
        raise error
    return box["value"]  # type: ignore[return-value]


def left_running() -> bool:
    """Whether a call this process abandoned still runs the user's code."""
    return any(not done.is_set() for done in _abandoned)


def _message(steps: _Steps, limit: SetUpLimit, where: str | None) -> str:
    doing = steps.doing[0].upper() + steps.doing[1:]
    said = [f"{doing} did not return within {limit.seconds:.3g} s, the limit: {limit.why}."]
    if where:
        said.append(f"It was in {where}.")
    if steps.hint:
        said.append(steps.hint)
    said.append(f"If it is only slow, {limit.longer} gives it more.")
    said.append(
        "Nothing was measured or stored. The call was left running in a daemon thread of this "
        "process (Python cannot stop a thread); it ends when the process does."
    )
    return " ".join(said)


# Code that is not the user's: autotune's own, torch's and the standard library's (not what is
# installed beside it). The frame named is the innermost one outside them (a user's
# `time.sleep` has no frame of its own, a collective's wait is torch's, an Event's is the
# standard library's).
def _folder(path: str) -> str:
    return os.path.join(os.path.realpath(path), "")


_PATHS = sysconfig.get_paths()
_NOT_USERS = tuple(
    _folder(p)
    for p in (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))
)
_STDLIB = tuple(_folder(_PATHS[k]) for k in ("stdlib", "platstdlib"))
_INSTALLED = tuple(_folder(_PATHS[k]) for k in ("purelib", "platlib"))


def _users(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen ...>, <string>
        return False
    path = os.path.realpath(filename)
    if path.startswith(_NOT_USERS):
        return False
    return path.startswith(_INSTALLED) or not path.startswith(_STDLIB)


def _users_frame(thread: threading.Thread) -> str | None:
    """The innermost frame of the user's code in ``thread``'s stack, as "function (file:line)"."""
    frame: FrameType | None = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if _users(code.co_filename):
            name = getattr(code, "co_qualname", code.co_name)
            return f"{name} ({code.co_filename}:{frame.f_lineno})"
        frame = frame.f_back
    return None

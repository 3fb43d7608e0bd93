"""Every call into the user's code before the first trial has a limit: a model whose first
forward hangs, a dataset whose first item hangs, a collate function or a factory that hangs end
the command at the limit with a SetUpTimeout that names the call, where it was stuck, the limit
and why it was that long (autotune/_trial/bounded.py and its callers)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import autotune
from autotune._trial.bounded import SetUpLimit, bounded, step

import hanging
from hanging import RELEASE

SLACK = 5.0  # seconds past a limit a busy 2-core machine may take to say so


@pytest.fixture(autouse=True)
def _released():
    """Each test hangs until it ends; then the threads it abandoned wake and end."""
    RELEASE.clear()
    hanging.CALLS.clear()
    yield
    RELEASE.set()


# -- bounded ---------------------------------------------------------------------------------


def test_a_call_within_its_limit_gives_its_value_or_its_own_error() -> None:
    limit = SetUpLimit(5.0, "a test's")
    assert bounded(lambda: 42, limit, doing="the answer") == 42
    error = ValueError("the user's own")

    def fail() -> None:
        raise error

    with pytest.raises(ValueError) as raised:
        bounded(fail, limit, doing="a failing call")
    assert raised.value is error


def _stuck_in_users_code() -> None:
    step("the second step, `dataset[7]`", "Read it alone.")
    RELEASE.wait(hanging.HOUR)
    hanging.CALLS.append("returned")
    step("the third step")
    hanging.CALLS.append("ran on")


def test_a_call_past_its_limit_is_named_by_its_step_and_frame_and_runs_no_further() -> None:
    start = time.monotonic()
    with pytest.raises(autotune.SetUpTimeout) as raised:
        bounded(_stuck_in_users_code, SetUpLimit(0.5, "a test's half second"), doing="the first")
    assert time.monotonic() - start < 0.5 + SLACK
    error = raised.value
    assert (error.doing, error.seconds) == ("the second step, `dataset[7]`", 0.5)
    line = _stuck_in_users_code.__code__.co_firstlineno + 2
    assert str(error) == (
        "The second step, `dataset[7]` did not return within 0.5 s, the limit: a test's half "
        f"second. It was in _stuck_in_users_code ({__file__}:{line}). Read it alone. If it is "
        "only slow, a longer timeout (timeout=, --timeout) gives it more. Nothing was measured "
        "or stored. The call was left running in a daemon thread of this process (Python "
        "cannot stop a thread); it ends when the process does."
    )
    assert isinstance(error, autotune.AutotuneError)
    # Released, the abandoned call returns from the user's code and stops at its next step.
    stuck = [t for t in threading.enumerate() if t.name == "autotune set-up: the first"]
    assert len(stuck) == 1 and stuck[0].daemon
    RELEASE.set()
    stuck[0].join(5)
    assert not stuck[0].is_alive()
    assert hanging.CALLS == ["returned"]


def test_ctrl_c_while_waiting_abandons_the_call_too() -> None:
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    def when_stuck() -> None:  # Ctrl-C once the call waits in the user's code
        while not any(t.name == "autotune set-up: interrupted" for t in threading.enumerate()):
            time.sleep(0.01)
        time.sleep(0.2)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    threading.Thread(target=when_stuck, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bounded(_stuck_in_users_code, SetUpLimit(30.0, "a test's"), doing="interrupted")
    finally:
        signal.signal(signal.SIGALRM, previous)
    RELEASE.set()
    _wait_for(lambda: hanging.CALLS == ["returned"])
    time.sleep(0.2)
    assert hanging.CALLS == ["returned"]  # not "ran on": it stopped at its next step


def _wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)

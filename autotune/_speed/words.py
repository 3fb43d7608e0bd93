"""The rounds' words: every sentence about a speedup measured side by side, written from the
figures of :mod:`autotune._speed.stats`."""

from __future__ import annotations

import math

from autotune._speed.stats import EQUIVALENT, Decision, Interval

__all__ = [
    "as_fast",
    "decision",
    "fastest",
    "interval",
    "kept",
    "no_faster",
    "noise",
    "none_faster",
    "runner_up",
    "speed_line",
]


def noise(spread: float | None) -> str:
    """The machine's noise as the rounds saw it: one round's ratio varies by about ±N%."""
    return "n/a" if spread is None else f"±{100 * (math.exp(spread) - 1):.0f}%"


def interval(figure: Interval, *, short: bool = False) -> str:
    """``1.31x (95% interval 1.22-1.40x, 6 paired rounds)`` (``short``: ``1.31x (95%
    1.22-1.40x, 6 rounds)``, for a progress line)."""
    if short:
        return (
            f"{figure.estimate:.2f}x (95% {figure.low:.2f}-{figure.high:.2f}x, "
            f"{figure.rounds} rounds)"
        )
    return (
        f"{figure.estimate:.2f}x (95% interval {figure.low:.2f}-{figure.high:.2f}x, "
        f"{figure.rounds} paired rounds)"
    )


def runner_up(number: int | None, baseline: int | None) -> str | None:
    """How the runner-up (its trial number) is named: ``the baseline`` or ``trial #N``."""
    if number is None:
        return None
    return "the baseline" if number == baseline else f"trial #{number}"


def decision(kind: Decision, runner_up: str | None, *, unproven: bool = False) -> str:
    """What the rounds showed between the answer's leader and the runner-up (``runner_up``:
    how it is named, e.g. ``trial #12``; ``unproven``: the runner-up, simpler than the answer,
    was not shown faster than the baseline beyond the noise, so the answer is not the
    simpler)."""
    other = runner_up or "the rest"
    if kind is Decision.SEPARATED:
        return f"faster than {other} beyond the noise"
    then = (
        ", which was not shown faster than your settings beyond the noise"
        if unproven
        else ": the simpler is answered"
    )
    if kind is Decision.EQUIVALENT:
        return f"as fast as {other} within ±{100 * EQUIVALENT:.0f}%{then}"
    return f"not separated from {other}{then}"


def no_faster(spread: float | None) -> str:
    """The answer is the user's own settings: nothing beat them beyond the noise."""
    return (
        "nothing here trained faster than your settings beyond this machine's noise of "
        f"{noise(spread)}: the answer is your own settings"
    )


def as_fast(spread: float | None) -> str:
    """The answer is the user's own settings: the fastest was shown as fast as them."""
    return (
        f"the fastest config was shown as fast as your settings within ±{100 * EQUIVALENT:.0f}% "
        f"(this machine's noise: {noise(spread)}): the answer is your own settings"
    )


def kept(spread: float | None) -> str:
    """The headline where the rounds kept the user's settings."""
    return (
        "autotune result: nothing here trained faster than your settings beyond this "
        f"machine's noise of {noise(spread)} a round: keep your settings (the baseline's)"
    )


def fastest(name: str, figure: Interval) -> str:
    """The fastest config the rounds measured, where it did not beat the baseline beyond the
    noise: what more rounds (a longer --timeout) could still show."""
    return f"  fastest measured: {name} {interval(figure)}: not shown faster beyond the noise"


def speed_line(
    estimate: float,
    low: float,
    high: float,
    rounds: int,
    kind: Decision | None,
    runner_up: str | None,
    spread: float | None,
    *,
    unproven: bool = False,
) -> str:
    """The summary's speed-up: its interval, over how many paired rounds, what the rounds
    decided against the runner-up, and the machine's noise as they saw it."""
    figure = Interval(estimate, low, high, rounds, spread or 0.0)
    line = f"  speed-up: {interval(figure)}"
    if kind is not None:
        line += f"; {decision(kind, runner_up, unproven=unproven)}"
    if spread is not None:
        line += f"; this machine's noise: {noise(spread)} a round"
    return line


def none_faster(spread: float | None) -> str:
    """The answer is the user's own settings: they led the rounds."""
    return (
        "no config the rounds measured ran faster than your settings (this machine's noise: "
        f"{noise(spread)} a round): the answer is your own settings"
    )

"""Argument checks, in one style: a ``TypeError`` for the wrong type, an
:class:`~autotune.ArgumentError` (a ``ValueError``) for a value that breaks its rule; both name
the argument, the rule and what was given."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from autotune._errors import ArgumentError

__all__ = ["check_choice", "check_flag", "check_int", "check_number"]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_number(
    name: str, value: Any, *, rule: str, ok: Callable[[float], bool], optional: bool = False
) -> None:
    """``value`` is a number (int or float) for which ``ok`` holds (or None if ``optional``)."""
    if value is None and optional:
        return
    if not _is_number(value):
        kind = "a number or None" if optional else "a number"
        raise TypeError(f"`{name}` must be {kind}, but got {value!r}.")
    if not ok(float(value)):
        raise ArgumentError(f"`{name}` must be {rule}, but got {value!r}.")


def check_int(
    name: str, value: Any, *, rule: str, ok: Callable[[int], bool], optional: bool = False
) -> None:
    """``value`` is an int (not a bool) for which ``ok`` holds (or None if ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if optional else "an int"
        raise TypeError(f"`{name}` must be {kind}, but got {value!r}.")
    if not ok(value):
        raise ArgumentError(f"`{name}` must be {rule}, but got {value!r}.")


def check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False, but got {value!r}.")


def check_choice(name: str, value: Any, choices: Collection[str]) -> None:
    if value not in choices:
        raise ArgumentError(f"`{name}` must be one of {', '.join(choices)}, but got {value!r}.")

"""A result's guard facts read back from its JSON and said whole: what would settle a pending
check, the guard's advice, the accuracy runs' horizon. The JSON holds codes and figures (a
file written before holds sentences, shown as stored); these turn them into the guard's own
types and render them through ``_guard/words.py``, for the detail, the story and the report."""

from __future__ import annotations

from typing import Any

from autotune._guard import words as guard_words
from autotune._guard.confirmation import Confirmation, Reason, RunFailed, Settle
from autotune._guard.guard import AccuracyGuard
from autotune._guard.plan import AccuracyPlan, HorizonPlan, LongerMiss
from autotune._result import story

__all__ = ["accuracy_note", "advice_reason", "advice_text", "failure_text", "settle_text"]


def failure_text(c: dict[str, Any]) -> str | None:
    """Why a check's runs made no test, whole (None: they made one): from its code and the
    run's message, or as a record written before the code stored it."""
    if not c.get("failed") and not c.get("failure"):
        return None
    try:
        failed = RunFailed(c["failed"]) if c.get("failed") else None
    except ValueError:  # a code this version does not know
        failed = None
    return guard_words.run_failed(failed, c.get("failure"))


def settle_text(data: dict[str, Any], c: dict[str, Any]) -> str | None:
    """What would settle a pending check, whole: rendered from its reason and figures (the
    guard's words), or as a record written before them stored it; the short story's words
    where the guard's cannot be rendered (a reason this version does not know)."""
    guard, reason = data.get("accuracy_guard"), c.get("settle_reason")
    if not reason:
        return c.get("settle")
    try:
        check = Confirmation.from_dict(c)
        if guard:
            return guard_words.confirmation_settle(check, AccuracyGuard.from_dict(guard))
    except (KeyError, TypeError, ValueError):
        pass
    name = data["metrics"].get("metric_name", "metric")
    words = story.what_settles(str(reason), c.get("need"), name)
    return f"its check did not settle ({reason})" if words is None else words.rstrip(".")


def advice_text(guard: dict[str, Any]) -> str | None:
    """The guard's advice, whole: rendered from its reason and figures, or as a result written
    before them stored it."""
    reason = guard.get("advice_reason")
    if not reason:
        return guard.get("advice")
    try:
        settle = Settle(reason=Reason(reason), **(guard.get("advice_facts") or {}))
    except (TypeError, ValueError):
        return None
    return guard_words.advice(settle, AccuracyGuard.from_dict(guard))


def advice_reason(guard: dict[str, Any]) -> str | None:
    """The reason code of the guard's advice (what keeps every change of the numerics from
    being confirmed); for a result written before the code was stored, read from the facts
    its sentence was written from."""
    if "advice_reason" in guard:
        return None if guard["advice_reason"] is None else str(guard["advice_reason"])
    if not guard.get("advice"):
        return None
    if guard.get("wrong_way"):
        return "wrong_way"
    return "not_learned" if guard.get("learned") is False else "small_validation"


def accuracy_note(data: dict[str, Any]) -> str | None:
    """What the baseline's accuracy record says of its horizon, in sentences, from the facts
    a result holds (``search.accuracy_plan``), or as a file written before them stored it."""
    search = data.get("search") or {}
    facts, guard = search.get("accuracy_plan"), data.get("accuracy_guard")
    if facts is None or guard is None:
        note = search.get("accuracy_note")
        return None if note is None else str(note)
    plan, horizon, longer = facts.get("plan"), facts.get("horizon"), facts.get("longer")
    said = guard_words.accuracy_note(
        plan=None if plan is None else AccuracyPlan.from_dict(plan),
        horizon=None if horizon is None else HorizonPlan.from_dict(horizon),
        budget=facts.get("budget"),
        longer=None if longer is None else LongerMiss.from_dict(longer),
        guard=AccuracyGuard.from_dict(guard),
    )
    return guard_words.sentences(facts.get("note"), said) or None

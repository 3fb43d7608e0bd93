"""The study a search follows: where a command's default study name changed because its model
or data did, the earlier study of the same command, and what changed since it.

The CLI names a study after its command and the fingerprints of its model and data
(:mod:`autotune._trial.fingerprint`): the same command on the same model resumes its study, and on
an edited model starts a study of its own beside the old one, in the same storage. This module
finds that old one and says, in one line, what changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune._search.storage import read_settings, resolve
from autotune._trial.fingerprint import data_changes, model_changes

__all__ = ["Lineage", "changed_since"]


def _studies(storage: str) -> list[Any]:
    """The storage's studies (none where it cannot be read, or is an SQLite file not yet made:
    the search that follows says why it cannot open it, or makes it)."""
    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
        return []
    if storage.startswith("journal://") and not Path(storage.removeprefix("journal://")).is_file():
        return []
    with contextlib.suppress(Exception):
        return optuna.get_all_study_summaries(resolve(storage), include_best_trial=False)
    return []


@dataclasses.dataclass(frozen=True)
class Lineage:
    """The earlier study of a command whose model or data changed, and the line saying what
    changed (and, with a warm start, that the new study starts from what it learned)."""

    earlier: str
    line: str


def changed_since(
    storage: str,
    command: str,
    study: str,
    model: Mapping[str, Any] | None,
    data: Mapping[str, Any] | None,
    *,
    warm: bool = False,
) -> Lineage | None:
    """Where ``study`` (the name the command ``command`` makes for this model and data) is not
    yet in ``storage`` but an earlier study of the same command is (named ``command``, or
    ``command-`` and another model's and data's part), the latest of them and what changed
    since; None otherwise (a resumed study, or a command's first). ``warm``: the new study
    starts from what the earlier one learned."""
    studies = _studies(storage)
    if any(s.study_name == study for s in studies):
        return None  # resumed
    earlier = []
    for s in studies:
        if s.study_name != command and not s.study_name.startswith(f"{command}-"):
            continue
        with contextlib.suppress(Exception):
            settings = read_settings(s)
            if settings is not None:
                earlier.append((settings.started, s.study_name, settings))
    if not earlier:
        return None
    _, name, settings = max(earlier, key=lambda e: e[0])
    start = ", from what it learned" if warm else ""
    if settings.model_fingerprint is None:
        return Lineage(
            name,
            f"study {name!r} of this command recorded no fingerprint of its model and data "
            f"(an earlier autotune made it): measuring them afresh in study {study!r}"
            + (", starting from what it learned" if warm else ""),
        )
    changes = {
        "model": model_changes(settings.model_fingerprint, model),
        "data": data_changes(settings.data_fingerprint, data),
    }
    changed = [k for k, v in changes.items() if v]
    what = " and ".join(changed) or "model or data"
    words = "; ".join(c for v in changes.values() for c in v) or "their fingerprints differ"
    # The decision first, what changed after it: a display cuts the line at its width.
    return Lineage(
        name,
        f"the {what} changed since study {name!r}: measured afresh{start}; {words}",
    )

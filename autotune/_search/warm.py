"""A warm start: a search that begins from what an earlier one learned on this machine.

An earlier result (the JSON a search wrote) holds its answer, every config it measured and how
each ended. A new search of an edited model (or the same one, with a new budget) measures the
earlier answer and the earlier search's best few configs first, each on this model as any
candidate is (its throughput measured, a change of the numerics checked for accuracy), and
does not search again a knob's value every trial of which failed for a reason of the machine
(an error, a crashed worker, a device error: a compile mode that does not build, a precision
the device lacks), which are not the model's doing as running out of memory, diverging or
taking too long can be.

What an earlier search learned on another machine or software (the environment's
fingerprint differs) is carried over only as the order of its knobs (the one that moved its
training time most first), and said so; a file from another torch major
version is an error; a config that names a setting this autotune no longer has, or a value
this search's space does not hold, is left out, and said so.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import torch

from autotune._errors import ArgumentError, ConfigError
from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._space import Choice, FloatRange, SearchSpace

__all__ = [
    "CARRIED",
    "MACHINE_FAILURES",
    "STUDY",
    "WarmStart",
    "carried",
    "importance_order",
    "inside",
    "load_warm_start",
    "warm_line",
]

CARRIED = 4  # configs measured first: the earlier answer and the best few after it
MIN_ORDERED = 4  # measured trials an order of the knobs is read from
MACHINE_FAILURES = frozenset({"error", "crashed", "device_error"})


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """What a search carries over from an earlier result: the configs it measures first (in
    this search's space, on its baseline), the values it does not search (knob -> values that
    failed for a reason of the machine), and what was left out and why."""

    source: str
    configs: tuple[TrainingConfig, ...] = ()
    failed: Mapping[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # The earlier search's knobs, the one that moved its training time most first (Optuna's
    # fANOVA over its measured trials): the safe stage tries them in this order.
    order: tuple[str, ...] = ()

    def line(self) -> str:
        """The progress line that says what was carried over and from where."""
        return warm_line(self.described())

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "configs": [c.to_dict() for c in self.configs],
            "failed": {k: list(v) for k, v in self.failed.items()},
            "notes": list(self.notes),
            "order": list(self.order),
        }

    def described(self) -> dict[str, Any]:
        """What a result's ``search`` section says of it: from where, how many configs, the
        values not searched, what was left out."""
        return {
            **self.to_dict(),
            "configs": len(self.configs),
            "carried": [c.to_dict() for c in self.configs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WarmStart:
        return cls(
            source=str(data["from"]),
            configs=tuple(TrainingConfig.from_dict(c) for c in data.get("configs", ())),
            failed={k: tuple(v) for k, v in (data.get("failed") or {}).items()},
            notes=tuple(data.get("notes", ())),
            order=tuple(data.get("order", ())),
        )

    def narrowed(self, space: SearchSpace) -> SearchSpace:
        """``space`` without the values that failed for a reason of the machine, each said."""
        for knob, values in self.failed.items():
            choice = space.knobs.get(knob)
            if not isinstance(choice, Choice):
                continue
            kept = tuple(v for v in choice.values if v not in values)
            if kept and len(kept) < len(choice.values):
                shown = ", ".join(map(str, values))
                space = space.with_choice(
                    knob,
                    kept,
                    f"{knob}: {shown} not searched (warm start from {self.source}: every trial "
                    "with it failed on this machine)",
                )
        return space


def warm_line(described: Mapping[str, Any]) -> str:
    """What a warm start carried over and from where, from :meth:`WarmStart.described` (a
    result's ``search.warm_start``)."""
    n = int(described.get("configs") or 0)
    what = f"{n} config{'s' if n != 1 else ''} measured first" if n else "no config carried"
    failed = "; ".join(
        f"{knob}={', '.join(map(str, values))} not searched (every trial with it failed on "
        "this machine)"
        for knob, values in (described.get("failed") or {}).items()
    )
    order = described.get("order") or ()
    ordered = f"knobs tried in its order of importance ({', '.join(order)})" if order else ""
    notes = described.get("notes") or ()
    words = "; ".join(x for x in (what, failed, ordered, *notes) if x)
    return f"warm start from {described.get('from')}: {words}"


def _major(version: Any) -> str | None:
    return str(version).split(".", 1)[0] if version else None


def _read(path: str | Path) -> dict[str, Any]:
    """The result JSON at ``path``, or an error that names what is wrong with it."""
    shown = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ArgumentError(f"warm_start: cannot read {shown!r}: {exc.strerror}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArgumentError(
            f"warm_start: {shown!r} is not JSON ({exc}): give the result JSON a search wrote "
            "(--out, result.save())."
        ) from None
    keys = ("config", "baseline", "trials", "environment")
    if not isinstance(data, dict) or not all(k in data for k in keys):
        raise ArgumentError(
            f"warm_start: {shown!r} is not an autotune result (it has no "
            f"{'/'.join(f'`{k}`' for k in keys)}): give the result JSON a search wrote "
            "(--out, result.save())."
        )
    return data


def _outside(space: SearchSpace, values: Mapping[str, Any]) -> str | None:
    """The first knob value ``values`` holds that ``space`` does not, in words."""
    for name, value in values.items():
        knob = space.knobs.get(name)
        if isinstance(knob, Choice) and value not in knob.values:
            return f"{name}={value!r} is not in this search's space"
        if isinstance(knob, FloatRange) and not knob.low <= float(value) <= knob.high:
            return f"{name}={value!r} is outside this search's space"
    return None


def inside(space: SearchSpace, cfg: TrainingConfig, baseline: TrainingConfig) -> bool:
    """Whether every knob value of ``cfg`` is one ``space`` holds (a space narrowed since the
    warm start was read, by the memory probe or the calibration, may have lost some)."""
    return _outside(space, registry.values_of(cfg, baseline)) is None


def _machine_failures(
    trials: list[dict[str, Any]], old_baseline: TrainingConfig
) -> dict[str, tuple[Any, ...]]:
    """Knob -> the values that failed for a reason of the machine: a trial failed so where it
    differed from a config that ran (the baseline's included) in that one knob, and no trial
    with that value ran."""
    ran: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for trial in trials:
        try:
            cfg = TrainingConfig.from_dict(trial["config"])
        except (ConfigError, KeyError, TypeError):
            continue
        values = {k: _hashable(v) for k, v in registry.values_of(cfg, old_baseline).items()}
        failure = trial.get("failure")
        if failure is None:
            ran.append(values)
        elif failure in MACHINE_FAILURES:
            failed.append(values)
    worked = {(k, v) for values in ran for k, v in values.items()}
    out: dict[str, list[Any]] = {}
    for values in failed:
        for other in ran:
            # Knobs that exist only with another (compile's own, with compile) do not count.
            changed = [k for k in values.keys() & other.keys() if values[k] != other[k]]
            if len(changed) != 1:
                continue
            name = changed[0]
            value = values[name]
            if (name, value) not in worked and value not in out.get(name, []):
                out.setdefault(name, []).append(value)
    return {k: tuple(v) for k, v in sorted(out.items())}


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def _ranked(data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what it was, config dict) of the earlier answer, then its other answers, then its
    measured configs, fastest first."""
    out: list[tuple[str, dict[str, Any]]] = [("its answer", data["config"])]
    answers = data.get("answers") or {}
    for key in ("safe", "fast", "pending"):
        answer = answers.get(key)
        if isinstance(answer, dict) and isinstance(answer.get("config"), dict):
            out.append((f"its {key} answer", answer["config"]))
    measured = [
        t
        for t in data.get("trials") or []
        if isinstance(t, dict)
        and t.get("failure") is None
        and t.get("role") != "baseline"
        and t.get("feasible") is not False
        and isinstance(t.get("projected_training_time"), int | float)
    ]
    measured.sort(key=lambda t: t["projected_training_time"])
    out += [(f"its trial #{t.get('number')}", t["config"]) for t in measured]
    return out


STUDY = "study:"  # a warm start from a study in the search's storage: ``study:NAME``


def load_warm_start(
    path: str | Path,
    *,
    space: SearchSpace,
    baseline: TrainingConfig,
    environment: Mapping[str, Any],
) -> WarmStart:
    """What a search on ``space`` from ``baseline``, in ``environment``, carries over from the
    result at ``path`` (see :func:`carried`)."""
    return carried(_read(path), Path(path).name, space, baseline, environment)


def carried(
    data: Mapping[str, Any],
    source: str,
    space: SearchSpace,
    baseline: TrainingConfig,
    environment: Mapping[str, Any],
) -> WarmStart:
    """What a search carries over from the earlier result ``data`` (from ``source``: a file's
    name, a study's): an error for one from another torch major version; nothing (and why)
    from another machine or software; else the earlier answer and the best few configs in
    this space, and the values that failed here."""
    env = data.get("environment") or {}
    theirs, mine = _major(env.get("torch")), _major(torch.__version__)
    if theirs is not None and theirs != mine:
        raise ArgumentError(
            f"warm_start: {source} was measured with torch {env.get('torch')}, and this is "
            f"torch {torch.__version__}: another major version's speeds and failures say "
            "little of this one's. Leave the warm start out, or give a result measured here."
        )
    try:
        old_baseline = TrainingConfig.from_dict(data["baseline"]["config"])
    except (ConfigError, KeyError, TypeError) as exc:
        raise ArgumentError(f"warm_start: {source}'s baseline is not a config: {exc}") from None
    order = importance_order(data, old_baseline, space)
    if env.get("fingerprint") != environment.get("fingerprint"):
        return WarmStart(
            source,
            notes=(
                f"no config carried over: {source} was measured on other hardware or software "
                f"(fingerprint {env.get('fingerprint')}, this machine's "
                f"{environment.get('fingerprint')}), whose speeds and failures are not this "
                "machine's" + ("; only the order of its knobs is" if order else ""),
            ),
            order=order,
        )
    failed = _machine_failures(list(data.get("trials") or []), old_baseline)
    narrowed = WarmStart(source, failed=failed).narrowed(space)
    configs: list[TrainingConfig] = []
    notes: list[str] = []
    for what, config in _ranked(data):
        if len(configs) >= CARRIED:
            break
        try:
            cfg = TrainingConfig.from_dict(config)
        except (ConfigError, TypeError) as exc:
            notes.append(f"{what} left out: {exc}")
            continue
        values = registry.values_of(cfg, old_baseline)
        outside = _outside(narrowed, values)
        if outside is not None:
            notes.append(f"{what} left out: {outside}")
            continue
        params = {k: v for k, v in values.items() if k in narrowed.knobs}
        try:
            carried = narrowed.build(params, baseline)
        except ConfigError as exc:
            notes.append(f"{what} left out: {exc}")
            continue
        if carried != baseline and carried not in configs:
            configs.append(carried)
    return WarmStart(source, tuple(configs), failed, tuple(dict.fromkeys(notes)), order)


def importance_order(
    data: Mapping[str, Any], old_baseline: TrainingConfig, space: SearchSpace
) -> tuple[str, ...]:
    """The knobs of ``space`` the earlier result measured with more than one value, the most
    important for its training time first: Optuna's fANOVA importance over its measured
    trials (the baseline's included), each trial's knob values as categories. Empty where
    fewer than :data:`MIN_ORDERED` trials ran, or nothing varied."""
    rows: list[tuple[dict[str, Any], float]] = []
    for t in data.get("trials") or []:
        if not isinstance(t, dict) or t.get("failure") is not None:
            continue
        time = t.get("projected_training_time")
        if not isinstance(time, int | float) or time <= 0:
            continue
        try:
            cfg = TrainingConfig.from_dict(t["config"])
        except (ConfigError, KeyError, TypeError):
            continue
        values = registry.values_of(cfg, old_baseline)
        rows.append(({k: str(_hashable(v)) for k, v in values.items() if k in space.knobs}, time))
    if len(rows) < MIN_ORDERED:
        return ()
    # Only knobs every trial has (a loader's prefetch exists with workers alone) that varied.
    names = sorted(set.intersection(*(set(values) for values, _ in rows)))
    seen = {n: sorted({values[n] for values, _ in rows}) for n in names}
    varied: dict[str, optuna.distributions.BaseDistribution] = {
        n: optuna.distributions.CategoricalDistribution(v) for n, v in seen.items() if len(v) > 1
    }
    if not varied:
        return ()
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created"
    try:
        study = optuna.create_study(direction="minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    for values, time in rows:
        study.add_trial(
            optuna.trial.create_trial(
                params={n: values[n] for n in varied},
                distributions=varied,
                value=math.log(time),  # a ratio of speeds, whichever the model's scale
            )
        )
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError):  # an order is a hint: without one, the default order
        return ()
    return tuple(sorted(importances, key=lambda n: -importances[n]))

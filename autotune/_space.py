"""Search spaces: data files of knob choices, validated, restricted to the device, and sampled.

A space file is YAML (or JSON) with a ``knobs`` mapping. Each knob is a list of choices, or for
numeric knobs a range ``{low, high[, log]}``. A knob the file leaves out keeps the baseline's
value. Built-in spaces live in the top-level ``search_spaces/`` folder and ship with the package.
What each knob may hold, and when it cannot matter, is the knob registry's to say
(:mod:`autotune._knobs`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune._errors import SearchSpaceError
from autotune._knobs import registry
from autotune._knobs.registry import KNOB_NAMES, Facts, ValueKind

if TYPE_CHECKING:
    import optuna

    from autotune._knobs.config import TrainingConfig

__all__ = ["Choice", "FloatRange", "SearchSpace", "builtin_spaces", "load_space", "parse_space"]

Scalar = bool | int | float | str | None


@dataclasses.dataclass(frozen=True)
class Choice:
    """A categorical knob: one of ``values``."""

    values: tuple[Scalar, ...]


@dataclasses.dataclass(frozen=True)
class FloatRange:
    """A continuous knob in ``[low, high]``, sampled on a log scale when ``log``."""

    low: float
    high: float
    log: bool = False


Knob = Choice | FloatRange


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A validated set of knobs. ``notes`` says what was dropped or narrowed, and why.

    ``global_batch_size``: every config keeps this global batch (``keep_global_batch``), so
    ``batch_size`` (the micro-batch) is the only split knob sampled and
    ``gradient_accumulation_steps`` follows from it."""

    name: str
    knobs: Mapping[str, Knob]
    description: str = ""
    notes: tuple[str, ...] = ()
    global_batch_size: int | None = None

    @property
    def searches_length(self) -> bool:
        """Whether configs may train a share of the planned epochs (``train_fraction`` < 1
        among its values)."""
        knob = self.knobs.get("train_fraction")
        if isinstance(knob, Choice):
            return any(float(v) < 1.0 for v in knob.values)  # type: ignore[arg-type]
        return knob is not None and knob.low < 1.0

    def restrict(self, facts: Facts) -> SearchSpace:
        """Drop knobs and values that cannot matter (or cannot run) on this device and model,
        by each knob's device rule."""
        notes = list(self.notes)
        knobs: dict[str, Knob] = dict(self.knobs)
        for spec in registry.KNOBS:
            knob = knobs.get(spec.name)
            if spec.restrict is None or not isinstance(knob, Choice):
                continue
            kept, why = spec.restrict(knob.values, facts)
            if kept is None:
                del knobs[spec.name]
                notes.append(f"{spec.name}: not searched ({why})")
                continue
            dropped = [v for v in knob.values if v not in kept]
            if dropped:
                notes.append(f"{spec.name}: dropped {', '.join(map(str, dropped))} ({why})")
            if kept:
                knobs[spec.name] = Choice(kept)
            else:
                del knobs[spec.name]
        return dataclasses.replace(self, knobs=knobs, notes=tuple(notes))

    def keeping_global_batch(self, baseline: TrainingConfig) -> SearchSpace:
        """The space whose configs all keep ``baseline``'s global batch: ``batch_size`` is a
        rank's share of it (the whole of it on one process) over each listed
        ``gradient_accumulation_steps`` that divides that share (1, 2, 4 and 8 where the space
        lists none); the batch sizes the space listed give way."""
        total, share = baseline.global_batch_size, baseline.rank_batch_size
        listed = self.knobs.get(ACCUMULATION)
        steps = listed.values if isinstance(listed, Choice) else DEFAULT_SPLITS
        splits = sorted(
            {int(k) for k in steps if share % int(k) == 0}  # type: ignore[arg-type]
            | {baseline.gradient_accumulation_steps}
        )
        knobs: dict[str, Knob] = dict(self.knobs)
        knobs["batch_size"] = Choice(tuple(share // k for k in splits))
        knobs[ACCUMULATION] = Choice(tuple(splits))
        ranks = f" on each of {baseline.ranks} ranks" if baseline.ranks > 1 else ""
        note = (
            f"keep_global_batch: every config trains the baseline's global batch of {total} "
            f"samples; batch_size (the micro-batch) is {share} / gradient_accumulation_steps"
            f"{ranks} for steps {', '.join(map(str, splits))}"
        )
        return dataclasses.replace(
            self, knobs=knobs, global_batch_size=total, notes=(*self.notes, note)
        )

    def with_note(self, note: str) -> SearchSpace:
        return dataclasses.replace(self, notes=(*self.notes, note))

    def with_choice(
        self, name: str, values: tuple[Scalar, ...], note: str | None = None
    ) -> SearchSpace:
        """The space with knob ``name`` narrowed to ``values`` (and ``note`` said about it)."""
        knobs = dict(self.knobs)
        knobs[name] = Choice(values)
        notes = (*self.notes, note) if note else self.notes
        return dataclasses.replace(self, knobs=knobs, notes=notes)

    # -- Sampling ----------------------------------------------------------------------------

    def suggest(self, trial: optuna.Trial, baseline: TrainingConfig) -> TrainingConfig:
        """Sample a config; knobs not in the space keep the baseline's values."""
        params = {
            name: _suggest(trial, name, knob)
            for name, knob in self.knobs.items()
            if not _conditional(name)  # sampled only where they exist, in build
            and not self._derived(name)
        }
        return self.build(params, baseline, trial=trial)

    def build(
        self,
        params: Mapping[str, Any],
        baseline: TrainingConfig,
        *,
        trial: optuna.Trial | None = None,
    ) -> TrainingConfig:
        """The config that ``params`` (knob name -> value) describe, on top of ``baseline``.
        Knobs that exist only in some configs (with DataLoader workers, with compile, with or
        without accumulation) are sampled, or take their first value, only where they exist."""
        p = dict(params)
        if self.global_batch_size is not None:
            micro = int(p.get("batch_size", baseline.batch_size))
            p[ACCUMULATION] = max(1, self.global_batch_size // (micro * baseline.ranks))
        # The config the other knobs make says where the conditional ones exist.
        shaped = registry.config_from({k: v for k, v in p.items() if not _conditional(k)}, baseline)
        for name, knob in self.knobs.items():
            if name in p or not _conditional(name) or not registry.BY_NAME[name].present(shaped):
                continue
            p[name] = _suggest(trial, name, knob) if trial is not None else _first(knob)
        return registry.config_from(p, baseline)

    def _derived(self, name: str) -> bool:
        """Whether knob ``name`` follows from the others (the accumulation steps, when the
        global batch is kept), rather than being a parameter of its own."""
        return name == ACCUMULATION and self.global_batch_size is not None

    def without(self, names: AbstractSet[str]) -> SearchSpace:
        """The space with ``names`` left at the baseline's values."""
        return dataclasses.replace(
            self, knobs={k: v for k, v in self.knobs.items() if k not in names}
        )

    def not_searching(self, why: Mapping[str, str]) -> SearchSpace:
        """The space without the knobs ``why`` names, each said in a note with its reason (a
        trainer that cannot apply them)."""
        present = [name for name in why if name in self.knobs]
        notes = tuple(f"{name}: not searched ({why[name]})" for name in present)
        return dataclasses.replace(self.without(set(present)), notes=(*self.notes, *notes))

    def including(self, cfg: TrainingConfig, baseline: TrainingConfig) -> SearchSpace:
        """The space widened, where needed, so that ``cfg`` (the baseline) is one of its points:
        then every trial, the baseline's too, is a point any Optuna sampler understands."""
        knobs: dict[str, Knob] = dict(self.knobs)
        for name, value in registry.values_of(cfg, baseline).items():
            knob = knobs.get(name)
            if isinstance(knob, Choice) and value not in knob.values:
                knobs[name] = Choice((value, *knob.values))
            elif isinstance(knob, FloatRange) and not knob.low <= value <= knob.high:
                low, high = min(knob.low, float(value)), max(knob.high, float(value))
                knobs[name] = FloatRange(low, high, knob.log)
        return dataclasses.replace(self, knobs=knobs)

    def params_of(self, cfg: TrainingConfig, baseline: TrainingConfig) -> dict[str, Any]:
        """The knob values (as :meth:`build` takes them) that describe ``cfg``, for enqueueing
        variants of a measured config."""
        values = registry.values_of(cfg, baseline)
        out = {}
        for name, knob in self.knobs.items():
            if name not in values or self._derived(name):
                continue  # conditional on workers, or following from the batch size
            if isinstance(knob, Choice) and len(knob.values) == 1:
                continue  # fixed, not a parameter of the trial
            value = values[name]
            if isinstance(knob, FloatRange):
                value = min(max(float(value), knob.low), knob.high)
            out[name] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        """The space as a space file holds it (parse_space reads it back)."""
        knobs: dict[str, Any] = {}
        for name, knob in self.knobs.items():
            if isinstance(knob, Choice):
                knobs[name] = list(knob.values)
            else:
                knobs[name] = {"low": knob.low, "high": knob.high, "log": knob.log}
        out: dict[str, Any] = {"name": self.name, "description": self.description, "knobs": knobs}
        if self.global_batch_size is not None:
            out["global_batch_size"] = self.global_batch_size
        return out

    def searched(self) -> list[str]:
        """Names of the knobs with more than one possible value (and not derived)."""
        return [
            n
            for n, k in self.knobs.items()
            if not (isinstance(k, Choice) and len(k.values) == 1) and not self._derived(n)
        ]

    def numerics_knobs(self, *, split_free: bool) -> list[str]:
        """The searched knobs that change the numerics, by the registry; except that with the
        global batch kept on a ``split_free`` model (no batch norm), splitting it (the batch
        size) changes nothing."""
        kept = self.global_batch_size is not None and split_free
        return [
            n
            for n in self.searched()
            if registry.BY_NAME[n].numerics and not (kept and n in ("batch_size", ACCUMULATION))
        ]

    def describe(self) -> str:
        lines = [f"{self.name}: {self.description}".rstrip(": ")]
        if self.global_batch_size is not None:
            lines.append(f"  global batch kept: {self.global_batch_size}")
        for name, knob in self.knobs.items():
            if isinstance(knob, Choice):
                shown = ", ".join("null" if v is None else str(v) for v in knob.values)
                lines.append(f"  {name}: {shown}")
            else:
                scale = " (log)" if knob.log else ""
                lines.append(f"  {name}: {knob.low} .. {knob.high}{scale}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


ACCUMULATION = "gradient_accumulation_steps"
DEFAULT_SPLITS = (1, 2, 4, 8)  # accumulation steps tried to keep the global batch, unless listed


def _conditional(name: str) -> bool:
    """Whether knob ``name`` exists only in some configs (sampled in ``build`` where it does)."""
    return registry.BY_NAME[name].exists is not None


def _first(knob: Knob) -> Any:
    return knob.values[0] if isinstance(knob, Choice) else knob.low


def _suggest(trial: optuna.Trial | None, name: str, knob: Knob) -> Any:
    if isinstance(knob, Choice):
        if len(knob.values) == 1 or trial is None:
            return knob.values[0]
        return trial.suggest_categorical(name, list(knob.values))
    if trial is None:
        return knob.low
    return trial.suggest_float(name, knob.low, knob.high, log=knob.log)


# -- Loading and validation -------------------------------------------------------------------


def _spaces_dir() -> Path:
    try:  # installed: the top-level search_spaces/ ships as autotune.search_spaces
        return Path(str(importlib.resources.files("autotune.search_spaces")))
    except ModuleNotFoundError:  # running from a source checkout
        return Path(__file__).resolve().parent.parent / "search_spaces"


def builtin_spaces() -> dict[str, Path]:
    """Built-in space name -> file."""
    files = sorted(_spaces_dir().glob("*.yaml"))
    return {f.stem: f for f in files}


def load_space(space: str | Path | SearchSpace | Mapping[str, Any]) -> SearchSpace:
    """A built-in space by name, a space file by path, or a mapping with a ``knobs`` key."""
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, Mapping):
        return parse_space(space, name="<dict>")
    if not isinstance(space, str | Path):
        raise TypeError(
            f"`space` must be a built-in name, a path to a space file, or a mapping, "
            f"but got {space!r} ({type(space).__name__})."
        )
    builtins = builtin_spaces()
    text = str(space)
    if isinstance(space, str) and text in builtins:
        path = builtins[text]
    else:
        path = Path(space)
        looks_like_path = isinstance(space, Path) or path.suffix or "/" in text
        if not looks_like_path:
            close = difflib.get_close_matches(text, list(builtins), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise SearchSpaceError(
                f"Unknown search space {text!r}.{hint} Built-in spaces are: "
                f"{', '.join(builtins)}. Pass a path to use your own file."
            )
        if not path.is_file():
            raise SearchSpaceError(
                f"Search space file {text!r} does not exist. Built-in spaces are: "
                f"{', '.join(builtins)}."
            )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SearchSpaceError(
            f"Search space file {str(path)!r} is not valid YAML: {exc}"
        ) from None
    return parse_space(data, name=path.stem, where=str(path))


def parse_space(data: Any, *, name: str, where: str | None = None) -> SearchSpace:
    where = where or name
    if not isinstance(data, Mapping) or "knobs" not in data:
        raise SearchSpaceError(
            f"Search space {where!r} must be a mapping with a `knobs` key, but got {data!r}."
        )
    unknown_top = sorted(set(data) - {"knobs", "description", "name", "global_batch_size"})
    if unknown_top:
        raise SearchSpaceError(
            f"Search space {where!r} has unknown top-level key(s) {', '.join(unknown_top)}; "
            "allowed are: knobs, description, name, global_batch_size."
        )
    total = data.get("global_batch_size")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 1):
        raise SearchSpaceError(
            f"`global_batch_size` in search space {where!r} must be an int >= 1, but got {total!r}."
        )
    raw = data["knobs"]
    if not isinstance(raw, Mapping) or not raw:
        raise SearchSpaceError(
            f"`knobs` in search space {where!r} must be a non-empty mapping, but got {raw!r}."
        )
    knobs: dict[str, Knob] = {}
    for knob_name, spec in raw.items():
        if knob_name not in registry.BY_NAME:
            close = difflib.get_close_matches(str(knob_name), KNOB_NAMES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise SearchSpaceError(
                f"Unknown knob {knob_name!r} in search space {where!r}.{hint} "
                f"Known knobs are: {', '.join(KNOB_NAMES)}."
            )
        knobs[knob_name] = _parse_knob(knob_name, spec, where)
    return SearchSpace(
        name=str(data.get("name", name)),
        knobs=knobs,
        description=str(data.get("description", "")).strip(),
        global_batch_size=total,
    )


def _parse_knob(name: str, spec: Any, where: str) -> Knob:
    rule = registry.BY_NAME[name]
    at = f"knob {name!r} in search space {where!r}"
    if isinstance(spec, Mapping) and set(spec) == {"values"}:
        spec = spec["values"]
    if isinstance(spec, Mapping):
        return _parse_range(name, spec, rule, at)
    if not isinstance(spec, Sequence) or isinstance(spec, str):
        spec = [spec]
    if not spec:
        raise SearchSpaceError(f"The {at} has no values; give at least one.")
    values = tuple(_check_value(name, v, rule, at) for v in spec)
    return Choice(tuple(dict.fromkeys(values)))


def _parse_range(name: str, spec: Mapping[str, Any], rule: registry.Knob, at: str) -> Knob:
    extra = sorted(set(spec) - {"low", "high", "log"})
    if extra or "low" not in spec or "high" not in spec:
        raise SearchSpaceError(
            f"The {at} must be a list of values or a range {{low, high[, log]}}, "
            f"but got {dict(spec)!r}."
        )
    if rule.kind not in (ValueKind.INT, ValueKind.FLOAT):
        raise SearchSpaceError(f"The {at} takes a list of values, not a range.")
    low_value = _check_value(name, spec["low"], rule, at)
    high_value = _check_value(name, spec["high"], rule, at)
    if not isinstance(low_value, int | float) or not isinstance(high_value, int | float):
        raise SearchSpaceError(f"The {at} needs numeric low and high, got {dict(spec)!r}.")
    low, high = low_value, high_value
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise SearchSpaceError(f"`log` of the {at} must be true or false, but got {log!r}.")
    if low > high:
        raise SearchSpaceError(
            f"The {at} has an empty range: low={low!r} must be <= high={high!r}."
        )
    if log and low <= 0:
        raise SearchSpaceError(f"The {at} is log-scaled, so low must be > 0, but got {low!r}.")
    if rule.kind is ValueKind.FLOAT:
        return FloatRange(float(low), float(high), log)
    if rule.powers_of_two:
        first = 1 << max(0, math.ceil(math.log2(low)))
        values: list[int] = []
        v = first
        while v <= high:
            values.append(v)
            v *= 2
        if not values:
            raise SearchSpaceError(f"The {at} holds no power of two in [{low}, {high}].")
        return Choice(tuple(values))
    return Choice(tuple(range(int(low), int(high) + 1)))


def _check_value(name: str, value: Any, rule: registry.Knob, at: str) -> Scalar:
    if value is None and rule.nullable:
        return None
    if rule.kind is ValueKind.ENUM:
        assert rule.enum is not None
        allowed = [str(m.value) for m in rule.enum]
        if str(value) not in allowed or isinstance(value, bool):
            raise SearchSpaceError(
                f"The {at} has value {value!r}; allowed values are: {', '.join(allowed)}."
            )
        return str(value)
    if rule.kind is ValueKind.BOOL:
        if not isinstance(value, bool):
            raise SearchSpaceError(
                f"The {at} must hold true/false values, but got {value!r} ({type(value).__name__})."
            )
        return value
    if rule.kind is ValueKind.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SearchSpaceError(
                f"The {at} must hold integers, but got {value!r} ({type(value).__name__})."
            )
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise SearchSpaceError(
            f"The {at} must hold numbers, but got {value!r} ({type(value).__name__})."
        )
    if not rule.check(value):
        raise SearchSpaceError(f"The {at} has value {value!r}; every value must be {rule.rule}.")
    return value  # type: ignore[no-any-return]

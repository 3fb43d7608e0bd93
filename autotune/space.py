"""Search spaces: data files of knob choices, validated, restricted to the device, and sampled.

A space file is YAML (or JSON) with a ``knobs`` mapping. Each knob is a list of choices, or for
numeric knobs a range ``{low, high[, log]}``. A knob the file leaves out keeps the baseline's
value. Built-in spaces live in the top-level ``search_spaces/`` folder and ship with the package.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune.config import (
    BatchScaling,
    CompileMode,
    LRSchedule,
    Precision,
    ScheduleKind,
    TrainingConfig,
)
from autotune.errors import SearchSpaceError

if TYPE_CHECKING:
    import optuna

    from autotune.device import DeviceInfo

__all__ = ["Choice", "FloatRange", "SearchSpace", "builtin_spaces", "load_space"]

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
class _KnobRule:
    kind: str  # "int", "bool", "float", or "enum"
    check: Callable[[Any], bool]
    rule: str
    enum: type | None = None
    power_of_two_range: bool = False
    nullable: bool = False


def _enum_values(cls: type) -> list[str]:
    return [m.value for m in cls]  # type: ignore[attr-defined]


_RULES: dict[str, _KnobRule] = {
    "batch_size": _KnobRule("int", lambda v: v >= 1, ">= 1", power_of_two_range=True),
    "num_workers": _KnobRule("int", lambda v: v >= 0, ">= 0"),
    "persistent_workers": _KnobRule("bool", lambda v: True, "true or false"),
    "prefetch_factor": _KnobRule("int", lambda v: v >= 1, ">= 1"),
    "pin_memory": _KnobRule("bool", lambda v: True, "true or false"),
    "precision": _KnobRule("enum", lambda v: True, "", enum=Precision),
    "compile_mode": _KnobRule("enum", lambda v: True, "", enum=CompileMode),
    "cudnn_benchmark": _KnobRule("bool", lambda v: True, "true or false"),
    "checkpointing": _KnobRule("int", lambda v: v >= 0, ">= 0 (0 means none)"),
    "channels_last": _KnobRule("bool", lambda v: True, "true or false"),
    "intra_op_threads": _KnobRule("int", lambda v: v >= 1, ">= 1 or null", nullable=True),
    "lr_schedule": _KnobRule("enum", lambda v: True, "", enum=ScheduleKind),
    "lr_multiplier": _KnobRule("float", lambda v: v > 0, "> 0"),
    "warmup_fraction": _KnobRule("float", lambda v: 0 <= v < 1, "in [0, 1)"),
    "lr_batch_scaling": _KnobRule("enum", lambda v: True, "", enum=BatchScaling),
}

KNOB_NAMES: tuple[str, ...] = tuple(_RULES)
# Knobs whose value changes the optimisation maths (and so must pay for the accuracy check).
NUMERIC_KNOBS = frozenset(
    {
        "batch_size",
        "precision",
        "lr_schedule",
        "lr_multiplier",
        "warmup_fraction",
        "lr_batch_scaling",
    }
)


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A validated set of knobs. ``notes`` says what was dropped or narrowed, and why."""

    name: str
    knobs: Mapping[str, Knob]
    description: str = ""
    notes: tuple[str, ...] = ()

    # -- Device-aware restriction ------------------------------------------------------------

    def restrict(
        self,
        info: DeviceInfo,
        *,
        has_conv: bool,
        n_blocks: int,
        max_batch_size: int,
        current_threads: int,
    ) -> SearchSpace:
        """Drop knobs and values that cannot matter (or cannot run) on this device and model."""
        notes = list(self.notes)
        knobs: dict[str, Knob] = {}
        cpu = info.type == "cpu"

        def keep(name: str, pred: Callable[[Any], bool], why: str) -> None:
            knob = knobs.get(name)
            if not isinstance(knob, Choice):
                return
            kept = tuple(v for v in knob.values if pred(v))
            dropped = [v for v in knob.values if v not in kept]
            if dropped:
                notes.append(f"{name}: dropped {', '.join(map(str, dropped))} ({why})")
            if kept:
                knobs[name] = Choice(kept)
            else:
                del knobs[name]

        def drop(name: str, why: str) -> None:
            if name in knobs:
                del knobs[name]
                notes.append(f"{name}: not searched ({why})")

        knobs.update(self.knobs)
        if cpu:
            drop("pin_memory", "pinned memory only speeds up copies to an accelerator")
        if not info.has_cudnn:
            drop("cudnn_benchmark", "no cuDNN on this device")
        if not has_conv:
            drop("channels_last", "the model has no convolutions")
        if n_blocks == 0:
            drop("checkpointing", "the model has no repeated blocks to checkpoint")
        else:
            keep("checkpointing", lambda v: v <= n_blocks, f"the model has {n_blocks} blocks")
        supported = {
            Precision.FP32.value: True,
            Precision.TF32.value: info.supports_tf32,
            Precision.BF16.value: info.supports_bf16,
            Precision.FP16.value: info.supports_fp16,
        }
        keep("precision", lambda v: supported[v], f"not supported natively by {info.name}")
        if not info.supports_compile:
            keep(
                "compile_mode",
                lambda v: v == CompileMode.NONE.value,
                "torch.compile needs a C/C++ compiler and the Python headers",
            )
        elif not info.supports_cuda_graphs:
            compile_knob = knobs.get("compile_mode")
            if isinstance(compile_knob, Choice):
                # CUDA graphs do not exist on this device: use the CPU-safe variant.
                swap = {
                    CompileMode.MAX_AUTOTUNE.value: CompileMode.MAX_AUTOTUNE_NO_CUDAGRAPHS.value
                }
                values = tuple(dict.fromkeys(swap.get(str(v), v) for v in compile_knob.values))
                knobs["compile_mode"] = Choice(values)
            keep(
                "compile_mode",
                lambda v: v != CompileMode.REDUCE_OVERHEAD.value,
                "reduce-overhead uses CUDA graphs",
            )
        keep("num_workers", lambda v: v <= info.cpu_count, f"{info.cpu_count} CPU cores")
        if cpu:
            keep(
                "intra_op_threads",
                lambda v: v is None or (v <= info.cpu_count and v != current_threads),
                f"{info.cpu_count} CPU cores; torch already uses {current_threads} threads",
            )
        else:
            drop("intra_op_threads", "CPU threads barely matter when an accelerator computes")
        keep(
            "batch_size",
            lambda v: v <= max_batch_size,
            f"the training set has {max_batch_size} samples",
        )
        # A choice of one value is not a search dimension; it is fixed.
        return dataclasses.replace(self, knobs=knobs, notes=tuple(notes))

    # -- Sampling ----------------------------------------------------------------------------

    def suggest(self, trial: optuna.Trial, baseline: TrainingConfig) -> TrainingConfig:
        """Sample a config; knobs not in the space keep the baseline's values."""
        params: dict[str, Any] = {}
        for name, knob in self.knobs.items():
            if name in ("persistent_workers", "prefetch_factor"):
                continue  # conditional on num_workers, below
            params[name] = _suggest(trial, name, knob)
        return self.build(params, baseline, trial=trial)

    def build(
        self,
        params: Mapping[str, Any],
        baseline: TrainingConfig,
        *,
        trial: optuna.Trial | None = None,
    ) -> TrainingConfig:
        """The config that ``params`` (knob name -> value) describe, on top of ``baseline``."""
        p = dict(params)
        workers = int(p.get("num_workers", baseline.num_workers))
        persistent, prefetch = False, None
        if workers > 0:
            for name in ("persistent_workers", "prefetch_factor"):
                knob = self.knobs.get(name)
                if name not in p and knob is not None:
                    p[name] = _suggest(trial, name, knob) if trial is not None else _first(knob)
            persistent = bool(p.get("persistent_workers", True))
            prefetch = p.get("prefetch_factor", baseline.prefetch_factor)
        batch_size = int(p.get("batch_size", baseline.batch_size))
        base = baseline.lr_schedule
        scaling = BatchScaling(p.get("lr_batch_scaling", base.batch_scaling))
        peak = (
            base.peak_lr
            * scaling.factor(batch_size, baseline.batch_size)
            * float(p.get("lr_multiplier", 1.0))
        )
        schedule = LRSchedule(
            kind=p.get("lr_schedule", base.kind),
            peak_lr=peak,
            warmup_fraction=float(p.get("warmup_fraction", base.warmup_fraction)),
            batch_scaling=scaling,
            reference_batch_size=baseline.batch_size,
        )
        if schedule == dataclasses.replace(base, reference_batch_size=baseline.batch_size):
            schedule = base  # unchanged numerics compare equal to the baseline's
        simple = {
            k: p[k]
            for k in (
                "pin_memory",
                "precision",
                "compile_mode",
                "cudnn_benchmark",
                "checkpointing",
                "channels_last",
                "intra_op_threads",
            )
            if k in p
        }
        return baseline.replace(
            batch_size=batch_size,
            num_workers=workers,
            persistent_workers=persistent,
            prefetch_factor=prefetch,
            lr_schedule=schedule,
            **simple,
        )

    def without(self, names: AbstractSet[str]) -> SearchSpace:
        """The space with ``names`` left at the baseline's values."""
        return dataclasses.replace(
            self, knobs={k: v for k, v in self.knobs.items() if k not in names}
        )

    def including(self, cfg: TrainingConfig, baseline: TrainingConfig) -> SearchSpace:
        """The space widened, where needed, so that ``cfg`` (the baseline) is one of its points:
        then every trial, the baseline's too, is a point any Optuna sampler understands."""
        knobs: dict[str, Knob] = dict(self.knobs)
        for name, value in self._values_of(cfg, baseline).items():
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
        values = self._values_of(cfg, baseline)
        out = {}
        for name, knob in self.knobs.items():
            if name not in values:
                continue  # conditional on workers
            if isinstance(knob, Choice) and len(knob.values) == 1:
                continue  # fixed, not a parameter of the trial
            value = values[name]
            if isinstance(knob, FloatRange):
                value = min(max(float(value), knob.low), knob.high)
            out[name] = value
        return out

    @staticmethod
    def _values_of(cfg: TrainingConfig, baseline: TrainingConfig) -> dict[str, Any]:
        schedule = cfg.lr_schedule
        scale = schedule.batch_scaling.factor(cfg.batch_size, baseline.batch_size)
        values: dict[str, Any] = {
            "batch_size": cfg.batch_size,
            "num_workers": cfg.num_workers,
            "persistent_workers": cfg.persistent_workers,
            "prefetch_factor": cfg.prefetch_factor,
            "pin_memory": cfg.pin_memory,
            "precision": cfg.precision.value,
            "compile_mode": cfg.compile_mode.value,
            "cudnn_benchmark": cfg.cudnn_benchmark,
            "checkpointing": cfg.checkpointing,
            "channels_last": cfg.channels_last,
            "intra_op_threads": cfg.intra_op_threads,
            "lr_schedule": schedule.kind.value,
            "lr_multiplier": schedule.peak_lr / (baseline.lr_schedule.peak_lr * scale),
            "warmup_fraction": schedule.warmup_fraction,
            "lr_batch_scaling": schedule.batch_scaling.value,
        }
        if not cfg.num_workers:
            del values["persistent_workers"], values["prefetch_factor"]
        return values

    def to_dict(self) -> dict[str, Any]:
        """The space as a space file holds it (parse_space reads it back)."""
        knobs: dict[str, Any] = {}
        for name, knob in self.knobs.items():
            if isinstance(knob, Choice):
                knobs[name] = list(knob.values)
            else:
                knobs[name] = {"low": knob.low, "high": knob.high, "log": knob.log}
        return {"name": self.name, "description": self.description, "knobs": knobs}

    def searched(self) -> list[str]:
        """Names of the knobs with more than one possible value."""
        return [
            n for n, k in self.knobs.items() if not (isinstance(k, Choice) and len(k.values) == 1)
        ]

    def describe(self) -> str:
        lines = [f"{self.name}: {self.description}".rstrip(": ")]
        for name, knob in self.knobs.items():
            if isinstance(knob, Choice):
                shown = ", ".join("null" if v is None else str(v) for v in knob.values)
                lines.append(f"  {name}: {shown}")
            else:
                scale = " (log)" if knob.log else ""
                lines.append(f"  {name}: {knob.low} .. {knob.high}{scale}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


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
    unknown_top = sorted(set(data) - {"knobs", "description", "name"})
    if unknown_top:
        raise SearchSpaceError(
            f"Search space {where!r} has unknown top-level key(s) {', '.join(unknown_top)}; "
            "allowed are: knobs, description, name."
        )
    raw = data["knobs"]
    if not isinstance(raw, Mapping) or not raw:
        raise SearchSpaceError(
            f"`knobs` in search space {where!r} must be a non-empty mapping, but got {raw!r}."
        )
    knobs: dict[str, Knob] = {}
    for knob_name, spec in raw.items():
        if knob_name not in _RULES:
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
    )


def _parse_knob(name: str, spec: Any, where: str) -> Knob:
    rule = _RULES[name]
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


def _parse_range(name: str, spec: Mapping[str, Any], rule: _KnobRule, at: str) -> Knob:
    extra = sorted(set(spec) - {"low", "high", "log"})
    if extra or "low" not in spec or "high" not in spec:
        raise SearchSpaceError(
            f"The {at} must be a list of values or a range {{low, high[, log]}}, "
            f"but got {dict(spec)!r}."
        )
    if rule.kind not in ("int", "float"):
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
    if rule.kind == "float":
        return FloatRange(float(low), float(high), log)
    if rule.power_of_two_range:
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


def _check_value(name: str, value: Any, rule: _KnobRule, at: str) -> Scalar:
    if value is None and rule.nullable:
        return None
    if rule.kind == "enum":
        allowed = _enum_values(rule.enum)  # type: ignore[arg-type]
        if str(value) not in allowed or isinstance(value, bool):
            raise SearchSpaceError(
                f"The {at} has value {value!r}; allowed values are: {', '.join(allowed)}."
            )
        return str(value)
    if rule.kind == "bool":
        if not isinstance(value, bool):
            raise SearchSpaceError(
                f"The {at} must hold true/false values, but got {value!r} ({type(value).__name__})."
            )
        return value
    if rule.kind == "int":
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

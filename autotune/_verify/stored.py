"""A result as a verify run reads it: its JSON, its configs moved to the device they are measured
on here, and its stored figures read defensively."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune._device import resolve_device
from autotune._errors import ArgumentError, ConfigError
from autotune._knobs.config import TrainingConfig
from autotune._result.result import SearchResult

__all__ = ["configs_here", "load_result", "stored_number", "stored_pair"]


def load_result(
    result: SearchResult | Mapping[str, Any] | str | os.PathLike[str],
) -> dict[str, Any]:
    if isinstance(result, SearchResult):
        return result.to_dict()
    if isinstance(result, Mapping):
        data: Any = dict(result)
    elif isinstance(result, str | os.PathLike):
        try:
            data = json.loads(Path(result).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"Cannot read result file {str(result)!r}: {exc.strerror}.") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"Result file {str(result)!r} is not valid JSON: {exc}.") from None
    else:
        raise TypeError(
            "`result` must be a SearchResult, its JSON as a dict, or the path of a result JSON "
            f"file, but got {type(result).__name__}."
        )
    if not isinstance(data, dict) or "config" not in data or "baseline" not in data:
        raise ConfigError(
            "`result` is not an autotune result: it needs `config` and `baseline` (as "
            "result.save() writes them). A bare config has no baseline to compare against."
        )
    return data


def configs_here(
    data: Mapping[str, Any], device: str | None
) -> tuple[TrainingConfig, TrainingConfig, str]:
    """The winner and the baseline, moved to the device they are measured on here."""
    winner = TrainingConfig.from_dict(data["config"])
    baseline = TrainingConfig.from_dict(data["baseline"]["config"])
    if device is None:
        try:
            here = resolve_device(winner.device)
        except ArgumentError as exc:
            raise ArgumentError(
                f"{exc} The result was measured on {winner.device!r}; pass device='cpu' "
                "(--device cpu) to re-measure it on this machine's CPU."
            ) from None
    else:
        here = resolve_device(device)
    return winner.replace(device=here), baseline.replace(device=here), here


def stored_pair(value: Any) -> tuple[float, float] | None:
    """A stored interval ``[low, high]`` (None: absent, or not two numbers)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    low, high = stored_number(value[0]), stored_number(value[1])
    return None if low is None or high is None else (low, high)


def stored_number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None

"""The search result: the winner, the baseline, every trial, and the exported JSON."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from autotune.config import SCHEMA_VERSION, TrainingConfig
from autotune.errors import ConfigError
from autotune.guard import AccuracyGuard
from autotune.measure import Measurement

__all__ = ["SearchResult", "TrialRecord", "load_config", "render_summary", "write_json_atomic"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as the study stored it."""

    number: int
    role: str  # "baseline" or "candidate"
    config: TrainingConfig
    measurement: Measurement | None
    metric: float | None
    accuracy_checked: bool
    projected_time: float | None
    feasible: bool
    failure: str | None = None
    message: str | None = None
    seconds: float = 0.0
    reused: bool = False
    fingerprint: str | None = None  # of the machine that measured it (see device.fingerprint)
    # The winner's accuracy re-checked over as many seeds as the baseline (see AccuracyGuard).
    confirmation: dict[str, Any] | None = None

    @property
    def confirmed(self) -> bool | None:
        """True/False once confirmed/rejected; None when there was nothing (or no time) to
        confirm."""
        return None if self.confirmation is None else bool(self.confirmation["passed"])

    @property
    def throughput(self) -> float | None:
        return self.measurement.throughput if self.measurement is not None else None

    def metrics(self, metric_name: str, planned_samples: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.measurement is not None:
            out.update(self.measurement.summary())
        runs = (self.confirmation or {}).get("runs") or []
        out["validation_metric"] = sum(runs) / len(runs) if runs else self.metric
        out["validation_metric_runs"] = len(runs) if runs else (1 if self.metric is not None else 0)
        out["metric_name"] = metric_name
        out["accuracy_checked"] = self.accuracy_checked
        out["accuracy_confirmed"] = self.confirmed
        out["projected_training_time"] = self.projected_time
        out["planned_samples"] = planned_samples
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "role": self.role,
            "config": self.config.to_dict(),
            "throughput": self.throughput,
            "validation_metric": self.metric,
            "accuracy_checked": self.accuracy_checked,
            "projected_training_time": self.projected_time,
            "feasible": self.feasible,
            "failure": self.failure,
            "message": self.message,
            "seconds": self.seconds,
            "reused": self.reused,
            "fingerprint": self.fingerprint,
            "confirmation": self.confirmation,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    """What :func:`autotune.find_best` found.

    ``config`` is the fastest config whose metric stayed within tolerance of the baseline's
    (the baseline itself when nothing beat it); ``speedup`` is the baseline's projected training
    time over the winner's.
    """

    winner: TrialRecord
    baseline_trial: TrialRecord
    trials: tuple[TrialRecord, ...]
    guard: AccuracyGuard
    environment: dict[str, Any]
    search: dict[str, Any]
    planned_samples: int
    interrupted: bool = False

    @property
    def config(self) -> TrainingConfig:
        return self.winner.config

    @property
    def baseline(self) -> TrainingConfig:
        return self.baseline_trial.config

    @property
    def tolerance(self) -> float:
        return self.guard.tolerance

    @property
    def metrics(self) -> dict[str, Any]:
        return self.winner.metrics(self.guard.metric_name, self.planned_samples)

    @property
    def baseline_metrics(self) -> dict[str, Any]:
        return self.baseline_trial.metrics(self.guard.metric_name, self.planned_samples)

    @property
    def speedup(self) -> float:
        base, best = self.baseline_trial.projected_time, self.winner.projected_time
        return base / best if base and best else 1.0

    @property
    def throughput_ratio(self) -> float:
        base, best = self.baseline_trial.throughput, self.winner.throughput
        return best / base if base and best else 1.0

    @property
    def failures(self) -> dict[str, int]:
        return dict(Counter(t.failure for t in self.trials if t.failure is not None))

    def to_dict(self) -> dict[str, Any]:
        search = dict(self.search)
        search["trials"] = len(self.trials)
        search["failures"] = self.failures
        search["interrupted"] = self.interrupted
        return {
            "schema_version": SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "metrics": self.metrics,
            "baseline": {"config": self.baseline.to_dict(), "metrics": self.baseline_metrics},
            "speedup": self.speedup,
            "throughput_ratio": self.throughput_ratio,
            "tolerance": self.tolerance,
            "accuracy_guard": self.guard.to_dict(),
            "environment": self.environment,
            "search": search,
            "trials": [t.to_dict() for t in self.trials],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False, default=_json_default)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the result as JSON, atomically: a reader never sees half a file, and a failed
        write leaves any previous file intact."""
        return write_json_atomic(path, self.to_json())

    def summary(self) -> str:
        return render_summary(self.to_dict())

    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a self-contained HTML report (opens offline): winner against baseline,
        throughput against the validation metric with the tolerance, optimisation history,
        which knobs mattered, where the time goes, and every trial with its failure reason."""
        from autotune.report import write_report

        return write_report(self, path)

    @classmethod
    def from_study(
        cls,
        storage: str | Any,
        study_name: str | None = None,
        *,
        tolerance: float | None = None,
        metric_name: str | None = None,
        higher_is_better: bool | None = None,
    ) -> SearchResult:
        """The result of the search stored as ``study_name`` in ``storage`` (an Optuna storage
        URL or object; the name may be left out when the storage holds one study), without the
        model or the data. The tolerance is read from the study where it can be; pass it where
        it cannot."""
        from autotune.stored import load_study, result_from_study

        return result_from_study(
            load_study(storage, study_name),
            tolerance=tolerance,
            metric_name=metric_name,
            higher_is_better=higher_is_better,
        )

    def __repr__(self) -> str:
        return self.summary()


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_json_atomic(path: str | os.PathLike[str], text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file owner-only; give it the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def load_config(path: str | os.PathLike[str]) -> TrainingConfig:
    """The config in a saved result (``best.json``) or in a bare config JSON file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {str(path)!r}: {exc.strerror}.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid JSON: {exc}.") from None
    if isinstance(data, dict) and "schema_version" in data:
        version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise ConfigError(
                f"Config file {str(path)!r} has schema_version {version!r}; this autotune reads "
                f"version {SCHEMA_VERSION}. Upgrade autotune or re-export the result."
            )
        data = data.get("config")
    return TrainingConfig.from_dict(data)


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.0f} MiB"


def _fmt_metric(value: float | None) -> str:
    return "not checked" if value is None else f"{value:.4f}"


def render_summary(data: dict[str, Any]) -> str:
    """A readable summary of an exported result (what ``autotune show`` prints)."""
    m, b = data["metrics"], data["baseline"]["metrics"]
    guard = data.get("accuracy_guard", {})
    search = data.get("search", {})
    env = data.get("environment", {})
    kept = data["config"] == data["baseline"]["config"]
    headline = (
        "autotune result: no config was measured faster than the baseline within the tolerance; "
        "keep the baseline's settings"
        if kept
        else f"autotune result: {data['speedup']:.2f}x faster than the baseline "
        f"(projected for {m.get('planned_samples', 0):,} training samples)"
    )
    lines = [
        headline,
        "",
        f"  winner:   {_describe(data['config'])}",
        f"  baseline: {_describe(data['baseline']['config'])}",
        "",
        f"  {'':22}{'winner':>16}{'baseline':>16}",
    ]
    rows = [
        ("throughput (samples/s)", m.get("throughput"), b.get("throughput"), "{:,.0f}"),
        ("spread", m.get("throughput_spread"), b.get("throughput_spread"), "{:.1%}"),
        ("step time (ms)", _ms(m.get("step_time")), _ms(b.get("step_time")), "{:.2f}"),
        ("data wait", m.get("data_wait_fraction"), b.get("data_wait_fraction"), "{:.0%}"),
        ("one-time cost (s)", m.get("one_time_cost"), b.get("one_time_cost"), "{:.2f}"),
        (
            "projected time (s)",
            m.get("projected_training_time"),
            b.get("projected_training_time"),
            "{:.1f}",
        ),
    ]
    for label, w, base, fmt in rows:
        lines.append(f"  {label:22}{_cell(w, fmt):>16}{_cell(base, fmt):>16}")
    lines.append(
        f"  {'peak memory':22}{_fmt_bytes(m.get('peak_memory_bytes')):>16}"
        f"{_fmt_bytes(b.get('peak_memory_bytes')):>16}"
    )
    name = m.get("metric_name", "metric")
    lines.append(
        f"  {'val ' + name:22}{_fmt_metric(m.get('validation_metric')):>16}"
        f"{_fmt_metric(b.get('validation_metric')):>16}"
    )
    lines.append("")
    if guard:
        lines.append(
            f"  accuracy guard: tolerance {guard['tolerance']:g}; baseline {name} "
            f"{guard['baseline_metric']:.4f} ± {guard['baseline_spread']:.4f} over "
            f"{len(guard['baseline_runs'])} seeds; "
            f"{'reliable' if guard['reliable'] else 'NOT reliable at this tolerance'}"
        )
        if m.get("accuracy_confirmed") and guard["reliable"]:
            lines.append(
                f"  winner's {name} confirmed over {m['validation_metric_runs']} seeds "
                "(mean within tolerance of the baseline's)"
            )
        elif m.get("accuracy_confirmed"):
            resolution = guard.get("confirmation_resolution")
            within = f"±{resolution:.4f}" if resolution is not None else "its noise"
            lines.append(
                f"  ! winner's {name} passed confirmation over {m['validation_metric_runs']} "
                f"seeds only within the noise ({within}), not within the tolerance "
                f"{guard['tolerance']:g}"
            )
        elif m.get("accuracy_checked") and m.get("accuracy_confirmed") is None and not kept:
            lines.append(
                f"  ! winner's {name} was screened with one run only (no time was left to "
                "confirm it over several seeds)"
            )
        if guard.get("advice"):
            lines.append(f"  ! {guard['advice']}")
    failures = search.get("failures") or {}
    failed = ", ".join(f"{k}: {v}" for k, v in sorted(failures.items())) or "none"
    lines.append(
        f"  search: {search.get('trials', 0)} trials in {search.get('seconds', 0):.0f} s, "
        f"failures: {failed}; study {search.get('study_name')!r}"
    )
    if search.get("interrupted"):
        lines.append("  (interrupted: this is the best config found before the stop)")
    if env:
        lines.append(
            f"  measured on: {env.get('device_name')} ({env.get('device')}), "
            f"torch {env.get('torch')}, {env.get('cpu_count')} CPUs"
        )
    return "\n".join(lines)


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def _cell(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def _describe(cfg: dict[str, Any]) -> str:
    try:
        return TrainingConfig.from_dict(cfg).describe()
    except ConfigError:
        return json.dumps(cfg)

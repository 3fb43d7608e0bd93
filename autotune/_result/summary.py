"""The readable summary of a result: what ``print(result)`` and ``autotune show`` print."""

from __future__ import annotations

import json
from typing import Any

from autotune._config import TrainingConfig
from autotune._errors import ConfigError

__all__ = ["render_summary"]


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

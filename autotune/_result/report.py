"""One self-contained HTML report of a search: ``SearchResult.report(path)`` and
``autotune report``.

The file opens offline: plotly.js is embedded once, inline, and every figure draws from data in
the page. Where Optuna's own plots fit (optimisation history, parameter importances) they are
used, on a study rebuilt from the result's trials, so a result from ``find_best`` and one read
back from a storage give the same report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import html
import logging
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from autotune._guard import words as guard_words
from autotune._knobs import registry
from autotune._result.facts import accuracy_note
from autotune._result.files import write_text_atomic
from autotune._result.summary import no_check_words
from autotune._search.derived import accuracy_verdict, format_speedup
from autotune._search.ranking import rank_time
from autotune._speed import words as speed_words
from autotune._trial.fingerprint import measured_on

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from autotune._knobs.config import TrainingConfig
    from autotune._result.result import SearchResult
    from autotune._search.ledger import TrialRecord

__all__ = ["render_report", "write_report"]

MIN_TRIALS_FOR_IMPORTANCE = 4  # completed trials with varying knobs
FEASIBLE_CONSTRAINT = "within_tolerance"
_COLORS = {
    "baseline": "#636efa",
    "winner": "#00a86b",
    "feasible": "#7fc97f",
    "infeasible": "#e45756",
    "unchecked": "#9e9e9e",
}


def write_report(result: SearchResult, path: str | os.PathLike[str]) -> Path:
    """Write the HTML report of ``result`` to ``path`` (atomically) and return the path."""
    target = write_text_atomic(path, render_report(result))
    target.chmod(0o644)  # a report is for sharing, whatever the umask
    return target


@dataclasses.dataclass(frozen=True)
class _Section:
    key: str
    title: str
    figure: go.Figure | None = None
    caption: str = ""
    before: str = ""  # HTML between the title and the figure
    after: str = ""  # HTML after the figure


def render_report(result: SearchResult) -> str:
    """The report as one HTML document (a few MB: plotly.js is inside)."""
    study = _analysis_study(result)
    importance, importance_caption = _importance_figure(study)
    sections = [
        _Section(
            "winner",
            "The answer against the baseline",
            _headline_figure(result),
            before=_headline_html(result),
        ),
        _Section(
            "tradeoff",
            "Throughput against validation metric",
            _tradeoff_figure(result),
            _tradeoff_caption(result),
        ),
        _Section(
            "history",
            "Optimisation history",
            _history_figure(study),
            "Projected training time of each trial (lower is better); infeasible trials "
            "(failed, or outside the accuracy tolerance) are marked, the line is the best "
            "feasible so far.",
        ),
        _Section(
            "importance",
            "Which knobs mattered",
            importance,
            importance_caption,
        ),
        _Section(
            "time",
            "Where the time goes",
            _time_split_figure(result),
            "Projected training time of each completed trial, split into one-time cost "
            "(warm-up: compilation, cuDNN autotuning, worker start-up) and steady state, the "
            "latter split by the measured fraction spent waiting for data.",
        ),
        _Section("trials", "Every trial", after=_trial_table(result)),
    ]
    parts = []
    first = True
    for sec in sections:
        body = ""
        if sec.figure is not None:
            body = sec.figure.to_html(
                include_plotlyjs=first,  # the whole plotly.js bundle, inline, once
                full_html=False,
                div_id=f"fig-{sec.key}",
                config={"displaylogo": False, "responsive": True},
            )
            first = False
        caption = f'<p class="caption">{html.escape(sec.caption)}</p>' if sec.caption else ""
        parts.append(
            f'<section id="{sec.key}"><h2>{html.escape(sec.title)}</h2>'
            f"{sec.before}{caption}{body}{sec.after}</section>"
        )
    name = result.search.get("study_name") or "autotune search"
    generated = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return _PAGE.format(
        title=html.escape(f"autotune report: {name}"),
        heading=html.escape(f"autotune report — {name}"),
        meta=_meta_html(result, generated),
        sections="\n".join(parts),
    )


# -- Pieces of the page ---------------------------------------------------------------------


def _fmt(value: float | None, fmt: str, missing: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return fmt.format(value)


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def _status(result: SearchResult, t: TrialRecord) -> str:
    if t.failure is not None:
        return f"failed: {t.failure}"
    if t.number == result.winner.number:
        return f"winner ({result.chosen} answer)"
    if t.role == "baseline":
        return "baseline"
    if result.safe is not None and t.number == result.safe.number:
        return "safe answer"
    verdict = accuracy_verdict(t.confirmation, t.screened)
    if verdict is not None:
        return verdict
    if t.safe:
        return "safe (same numerics as the baseline)"
    return "not checked" if not t.accuracy_checked else "checked"


def _meta_html(result: SearchResult, generated: str) -> str:
    s = result.search
    env = result.environment
    failures = ", ".join(f"{k}: {v}" for k, v in sorted(result.failures.items())) or "none"
    items = [
        f"{len(result.trials)} trials in {s.get('seconds', 0):.0f} s; failures: {failures}",
        f"storage: {s.get('storage') or 'not recorded'}; study: {s.get('study_name')}",
    ]
    if env:
        items.append(
            f"measured on {env.get('device_name')} ({env.get('device')}), "
            f"{env.get('cpu_count')} CPUs, torch {env.get('torch')}, optuna {env.get('optuna')}, "
            f"Python {env.get('python')}; fingerprint {env.get('fingerprint')}"
        )
    else:
        items.append("environment: not recorded in the study")
    named = measured_on(s)  # the model and data it measured (issue 58)
    if named:
        items.append(named)
    if result.interrupted:
        items.append("the search was interrupted: this is the best found before the stop")
    items.append(f"report generated {generated}")
    return "<ul class=meta>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def _lead(result: SearchResult) -> str:
    w, b = result.winner, result.baseline_trial
    rounds = result.rounds
    if w.number == b.number:
        if rounds is not None and rounds.fell_back:
            return speed_words.kept(rounds.noise).removeprefix("autotune result: ") + "."
        return "No candidate beat the baseline: keep your current settings."
    span, ci = result.speedup_range, result.speedup_interval
    how = "from the trials' own measurements"
    if span:
        how = (
            f"side by side over {len(result.round_speedups)} rounds, range "
            f"{span[0]:.2f}-{span[1]:.2f}x"
        )
    if ci:
        how = (
            f"95% interval {ci[0]:.2f}-{ci[1]:.2f}x over {len(result.round_speedups)} paired "
            f"side-by-side rounds"
        )
        if rounds is not None and rounds.noise is not None:
            how += f"; this machine's noise: {speed_words.noise(rounds.noise)} a round"
    kind = (
        "the fast answer (its accuracy confirmed)"
        if result.chosen == "fast"
        else "the safe answer (the baseline's numerics)"
    )
    return (
        f"{result.speedup:.2f}x faster than the baseline ({how}; projected training time for "
        f"{result.planned_samples:,} samples, one-time costs included): {kind}."
    )


def _headline_html(result: SearchResult) -> str:
    w, b = result.winner, result.baseline_trial
    wm, bm = result.metrics, result.baseline_metrics
    name = result.metric_name
    rows = [
        ("config", w.config.describe(), b.config.describe()),
        # Throughput and projected time: from the side-by-side rounds where they measured it.
        ("measured", w.measured_as, b.measured_as),
        ("throughput (samples/s)", _fmt(w.throughput, "{:,.0f}"), _fmt(b.throughput, "{:,.0f}")),
        (
            "step time (ms)",
            _fmt(_ms(wm.get("step_time")), "{:.2f}"),
            _fmt(_ms(bm.get("step_time")), "{:.2f}"),
        ),
        (
            "projected time (s)",
            _fmt(w.projected_time, "{:.1f}"),
            _fmt(b.projected_time, "{:.1f}"),
        ),
        (
            "one-time cost (s)",
            _fmt(wm.get("one_time_cost"), "{:.2f}"),
            _fmt(bm.get("one_time_cost"), "{:.2f}"),
        ),
        (
            "data wait",
            _fmt(wm.get("data_wait_fraction"), "{:.0%}"),
            _fmt(bm.get("data_wait_fraction"), "{:.0%}"),
        ),
        (
            f"peak memory ({wm.get('memory_kind', 'n/a')})",
            _mib(wm.get("peak_memory_bytes")),
            _mib(bm.get("peak_memory_bytes")),
        ),
        (
            f"val {name}",
            _fmt(wm.get("validation_metric"), "{:.4f}", "not checked"),
            _fmt(bm.get("validation_metric"), "{:.4f}", "not checked"),
        ),
    ]
    table = "".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(a)}</td><td>{html.escape(c)}</td></tr>"
        for label, a, c in rows
    )
    notes = [_answers_line(result), _guard_line(result)]
    if result.pending is not None and result.pending.confirmation is not None:
        guard = result.guard
        confirmation = result.pending.confirmation
        settle = confirmation.stored_settle
        if guard is not None:
            settle = guard_words.confirmation_settle(confirmation, guard)
        if settle:
            notes.append(f"Trial #{result.pending.number} would be faster; to settle it: {settle}.")
    return (
        f'<p class="lead">{html.escape(_lead(result))}</p>'
        f'<table class="headline"><tr><th></th><th>winner (#{w.number})</th>'
        f"<th>baseline (#{b.number})</th></tr>{table}</table>"
        + "".join(f"<p>{html.escape(n)}</p>" for n in notes if n)
    )


def _answers_line(result: SearchResult) -> str:
    safe = result.safe
    safe_text = (
        f"safe answer #{safe.number} ({format_speedup(result.speedup_of(safe))})"
        if safe is not None
        else "no safe answer"
    )
    fast = result.fast
    fast_text = (
        f"fast answer #{fast.number} ({format_speedup(result.speedup_of(fast))}, accuracy "
        "confirmed)"
        if fast is not None
        else "no fast answer confirmed"
    )
    return f"Answers: {safe_text}; {fast_text}; chosen: the {result.chosen} one."


def _guard_line(result: SearchResult) -> str:
    guard = result.guard
    if guard is None:
        words = no_check_words(result.to_dict()["search"])
        return f"{words[0].upper()}{words[1:]}."
    line = (
        f"Accuracy guard: tolerance {guard.tolerance:g}, paired with the baseline's runs; "
        f"baseline {guard.metric_name} {guard.baseline_metric:.4f} ± {guard.spread:.4f} over "
        f"{guard.repeats} seeds of {guard.accuracy_samples:,} samples."
    )
    if result.search.get("no_accuracy_check"):  # a longer horizon's runs failed: no check
        words = no_check_words(result.to_dict()["search"])
        return f"{line} {words[0].upper()}{words[1:]}."
    advice = guard_words.advice(guard.advice(), guard)
    if advice:
        line = f"{line} {advice}"
    note = accuracy_note(result.to_dict())  # the plan's, with any budget it would take
    return f"{line} {note}" if note else line


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def _trial_table(result: SearchResult) -> str:
    head = [
        "#",
        "role",
        "status",
        "config",
        "samples/s",
        f"val {result.metric_name}",
        "projected (s)",
        "speedup",
        "one-time (s)",
        "data wait",
        "peak memory",
        "trial (s)",
        "reason / message",
    ]
    rows = []
    for t in sorted(result.trials, key=lambda t: t.number):
        m = t.measurement
        status = _status(result, t)
        message = t.message or ""
        if t.reused:
            message = "same config as an earlier trial: measurement reused"
        cells = [
            str(t.number),
            t.role,
            status,
            t.config.describe(),
            _fmt(t.throughput, "{:,.0f}"),
            _fmt(t.metric, "{:.4f}", "—"),
            _fmt(t.projected_time, "{:.2f}"),
            format_speedup(result.speedup_of(t)),
            _fmt(m.one_time_cost if m else None, "{:.2f}"),
            _fmt(m.data_wait_fraction if m else None, "{:.0%}"),
            _mib(m.peak_memory_bytes if m else None),
            f"{t.seconds:.1f}",
            message,
        ]
        css = status.split(":")[0].split(" ")[0]
        rows.append(
            f'<tr class="{html.escape(css)}">'
            + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
            + "</tr>"
        )
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(rows)
    return f'<table class="trials"><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>'


# -- Figures ----------------------------------------------------------------------------------


def _headline_figure(result: SearchResult) -> go.Figure:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    w, b = result.winner, result.baseline_trial
    wm, bm = result.metrics, result.baseline_metrics
    name = result.metric_name
    panels = [
        ("projected training time (s)", b.projected_time, w.projected_time),
        ("throughput (samples/s)", b.throughput, w.throughput),
        (f"val {name}", bm.get("validation_metric"), wm.get("validation_metric")),
        (
            "peak memory (MiB)",
            _to_mib(bm.get("peak_memory_bytes")),
            _to_mib(wm.get("peak_memory_bytes")),
        ),
    ]
    # A panel neither config has a figure for would be an empty chart: left out.
    panels = [p for p in panels if p[1] is not None or p[2] is not None]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels])
    for i, (_, base, best) in enumerate(panels, start=1):
        fig.add_trace(
            go.Bar(
                x=["baseline", "winner"],
                y=[base if base is not None else 0, best if best is not None else 0],
                marker_color=[_COLORS["baseline"], _COLORS["winner"]],
                text=[_plain(base), _plain(best)],
                textposition="auto",
                showlegend=False,
            ),
            row=1,
            col=i,
        )
    fig.update_layout(height=340, margin={"t": 60, "b": 30, "l": 40, "r": 20})
    return fig


def _plain(value: float | None) -> str:
    """A figure as a person reads it: ``36,430``, ``61.2``, ``4.25``, ``0.9886`` (never
    ``3.643e+04``, which a reader must decode)."""
    if value is None:
        return "n/a"
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}" if size >= 1 else f"{value:.4f}"


def _to_mib(n: int | None) -> float | None:
    return None if n is None else n / 2**20


def _tradeoff_caption(result: SearchResult) -> str:
    g = result.guard
    if g is None:
        return "No accuracy check was made, so there is no metric to draw against."
    side = "above" if g.higher_is_better else "below"
    text = (
        f"Every measured trial. The shaded band is the feasible region: {g.metric_name} no worse "
        f"than the baseline's mean by more than the tolerance ({g.tolerance:g}), the dashed line "
        f"(feasible {side} it)."
    )
    if g.screening_margin > g.tolerance:
        text += (
            f" The dotted line is the screening margin ({g.screening_margin:.4f}): the baseline's "
            "own noise is wider than the tolerance, so one run cannot reject a smaller drop (a "
            "run that changes many validation examples has a wider margin of its own)."
        )
    text += (
        " Trials that train the baseline's model (the same precision, LR schedule and batch: "
        "batch size and accumulation steps, or on a model without batch-norm layers only "
        "their product, the global batch) make no accuracy runs of their own: they, like every "
        "trial without a metric of its own, are drawn at the baseline's metric. The line joins "
        "the Pareto front: no other config is both faster and as accurate."
    )
    failed = sum(1 for t in result.trials if t.throughput is None)
    if failed:
        text += (
            f" {failed} trial(s) that failed before a measurement are not drawn (see the table)."
        )
    return text


def _tradeoff_figure(result: SearchResult) -> go.Figure | None:
    import plotly.graph_objects as go

    g = result.guard
    if g is None:
        return None
    base_metric = g.baseline_metric
    groups: dict[str, list[TrialRecord]] = {
        "may win (safe, or confirmed)": [],
        "outside tolerance / failed": [],
        "not checked or not settled": [],
    }
    for t in result.trials:
        if t.throughput is None or t.role == "baseline" or t.number == result.winner.number:
            continue
        if t.feasible:
            groups["may win (safe, or confirmed)"].append(t)
        elif t.failure is not None or t.screened is False or (t.confirmed is False):
            groups["outside tolerance / failed"].append(t)
        else:
            groups["not checked or not settled"].append(t)
    fig = go.Figure()
    styles = {
        "may win (safe, or confirmed)": {"color": _COLORS["feasible"], "symbol": "circle"},
        "outside tolerance / failed": {"color": _COLORS["infeasible"], "symbol": "x"},
        "not checked or not settled": {"color": _COLORS["unchecked"], "symbol": "circle-open"},
    }
    for label, trials in groups.items():
        if not trials:
            continue
        fig.add_trace(
            go.Scatter(
                x=[t.throughput for t in trials],
                y=[t.metric if t.metric is not None else base_metric for t in trials],
                mode="markers",
                name=label,
                marker={**styles[label], "size": 10, "line": {"width": 1}},
                text=[_hover(result, t) for t in trials],
                hoverinfo="text",
            )
        )
    b, w = result.baseline_trial, result.winner
    fig.add_trace(
        go.Scatter(
            x=[b.throughput],
            y=[base_metric],
            error_y={"type": "data", "array": [g.spread], "visible": True},
            mode="markers",
            name="baseline (mean ± std over seeds)",
            marker={"color": _COLORS["baseline"], "symbol": "square", "size": 13},
            text=[_hover(result, b)],
            hoverinfo="text",
        )
    )
    front = [t for t in result.trials if t.number in result.pareto and t.throughput]
    if len(front) > 1:
        metrics_of = [result.metrics_of(t)["validation_metric"] for t in front]
        fig.add_trace(
            go.Scatter(
                x=[t.throughput for t in front],
                y=[m if m is not None else base_metric for m in metrics_of],
                mode="lines",
                name="Pareto front",
                line={"color": "#555", "width": 1, "dash": "dot"},
                hoverinfo="skip",
            )
        )
    if w.number != b.number:
        w_metric = result.metrics.get("validation_metric")
        fig.add_trace(
            go.Scatter(
                x=[w.throughput],
                y=[w_metric if w_metric is not None else base_metric],
                mode="markers",
                name="winner",
                marker={"color": _COLORS["winner"], "symbol": "star", "size": 20},
                text=[_hover(result, w)],
                hoverinfo="text",
            )
        )
    sign = -1.0 if g.higher_is_better else 1.0
    limit = base_metric + sign * g.tolerance
    metrics = [t.metric for t in result.trials if t.metric is not None] + [base_metric, limit]
    lo, hi = min(metrics), max(metrics)
    pad = max(0.08 * (hi - lo), 1e-3, 0.5 * g.tolerance)  # room for the markers
    if g.higher_is_better:
        fig.add_hrect(
            y0=limit, y1=hi + pad, fillcolor=_COLORS["feasible"], opacity=0.12, line_width=0
        )
    else:
        fig.add_hrect(
            y0=lo - pad, y1=limit, fillcolor=_COLORS["feasible"], opacity=0.12, line_width=0
        )
    fig.add_hline(
        y=limit,
        line_dash="dash",
        line_color="#555",
        annotation_text=f"tolerance ({g.tolerance:g})",
        annotation_position="bottom right",
    )
    if g.screening_margin > g.tolerance:
        fig.add_hline(
            y=base_metric + sign * g.screening_margin,
            line_dash="dot",
            line_color="#999",
            annotation_text="screening margin (noise)",
            annotation_position="bottom left",
        )
    fig.update_layout(
        xaxis_title="throughput (samples/s, steady state, data loading included)",
        yaxis_title=f"validation {g.metric_name}",
        yaxis_range=[lo - pad, hi + pad],
        height=460,
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 30},
    )
    return fig


def _hover(result: SearchResult, t: TrialRecord) -> str:
    parts = [
        f"#{t.number} {t.role}: {_status(result, t)}",
        t.config.describe(),
        f"{_fmt(t.throughput, '{:,.0f}')} samples/s, "
        f"projected {_fmt(t.projected_time, '{:.2f}')} s",
    ]
    if t.metric is not None:
        parts.append(f"val {result.metric_name} {t.metric:.4f}")
    return "<br>".join(html.escape(p) for p in parts)


def _time_split_figure(result: SearchResult) -> go.Figure | None:
    import plotly.graph_objects as go

    done = [t for t in result.trials if t.measurement is not None and t.projected_time is not None]
    if not done:
        return None
    done.sort(key=lambda t: rank_time(t.projected_time))
    done = done[:30]
    labels, one_time, compute, waiting, hover = [], [], [], [], []
    for t in done:
        m = t.measurement
        assert m is not None and t.projected_time is not None
        total = float(t.projected_time)
        steady = max(0.0, total - m.one_time_cost)
        # Whatever is not steady state (one-time cost, worker restarts between epochs).
        fixed = total - steady
        labels.append(f"#{t.number} {'★ ' if t.number == result.winner.number else ''}{t.role}")
        one_time.append(fixed)
        waiting.append(steady * m.data_wait_fraction)
        compute.append(steady * (1 - m.data_wait_fraction))
        hover.append(html.escape(t.config.describe()))
    fig = go.Figure()
    for name, values, color in (
        ("one-time (warm-up, compile)", one_time, "#f58518"),
        ("steady state: compute", compute, "#4c78a8"),
        ("steady state: waiting for data (CPU side)", waiting, "#b279a2"),
    ):
        fig.add_trace(
            go.Bar(
                y=labels,
                x=values,
                name=name,
                orientation="h",
                marker_color=color,
                customdata=hover,
                hovertemplate="%{customdata}<br>%{x:.2f} s<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        xaxis_title=f"projected training time (s) for {result.planned_samples:,} samples",
        yaxis={"autorange": "reversed", "type": "category"},
        height=max(260, 26 * len(done) + 160),
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        margin={"t": 60},
    )
    return fig


# -- Optuna's plots, on a study rebuilt from the result's trials ----------------------------


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(level)


def _knob_values(t: TrialRecord, baseline: TrainingConfig) -> dict[str, Any]:
    """The config as knob values, as a space file writes them (None spelled out: Optuna's
    plots need a label)."""
    values = registry.values_of(t.config, baseline)
    return {k: ("default" if v is None else v) for k, v in values.items()}


def _distributions(values: list[dict[str, Any]]) -> dict[str, BaseDistribution]:
    """Each knob's distribution over the configs it exists in: a knob that exists only in some
    (with loader workers, without accumulation: ``Knob.exists``) has no value in the others,
    so one config's knobs are not every config's."""
    out: dict[str, BaseDistribution] = {}
    for key in [k for k in registry.KNOB_NAMES if any(k in v for v in values)]:
        seen = [v[key] for v in values if key in v]
        unique = sorted(set(seen), key=lambda x: (str(type(x)), x))
        if len(unique) < 2:
            continue  # a knob that never changed cannot have mattered
        if all(isinstance(x, float) for x in seen):
            low, high = min(seen), max(seen)
            out[key] = FloatDistribution(low, high, log=low > 0 and key == "lr_multiplier")
        else:
            out[key] = CategoricalDistribution(unique)
    return out


def _analysis_study(result: SearchResult) -> optuna.Study:
    """An in-memory study of the result's trials with the config's knobs as parameters, the
    projected time as the value and autotune's feasibility as the constraint."""
    by_number = {t.number: t for t in result.trials}
    base = result.baseline
    values = [_knob_values(t, base) for t in result.trials if not t.reused]
    dists = _distributions(values)
    with _quiet_optuna():
        study = optuna.create_study(direction="minimize")
        for number in range(max(by_number) + 1 if by_number else 0):
            t = by_number.get(number)
            if t is None:  # a trial the search stored without a record (a rejected config)
                study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL))
                continue
            params = {k: v for k, v in _knob_values(t, base).items() if k in dists}
            complete = t.projected_time is not None and t.failure is None
            study.add_trial(
                optuna.trial.create_trial(
                    state=TrialState.COMPLETE if complete else TrialState.FAIL,
                    value=float(t.projected_time) if complete else None,  # type: ignore[arg-type]
                    params=params,
                    distributions={k: dists[k] for k in params},
                    user_attrs={"role": t.role, "reused": t.reused},
                    constraints={FEASIBLE_CONSTRAINT: 0.0 if t.feasible else 1.0},
                )
            )
    return study


def _history_figure(study: optuna.Study) -> go.Figure | None:
    if not any(t.state is TrialState.COMPLETE for t in study.trials):
        return None
    with _quiet_optuna():
        fig = optuna.visualization.plot_optimization_history(
            study, target_name="projected training time (s)"
        )
    fig.update_layout(title=None, height=420, margin={"t": 30}, yaxis_type="log")
    return fig


def _importance_figure(study: optuna.Study) -> tuple[go.Figure | None, str]:
    """The importance figure (None where it cannot be made) and its caption."""
    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        if not t.user_attrs.get("reused") and t.params
    ]
    varied = [k for k in registry.KNOB_NAMES if any(k in t.params for t in trials)]
    # fANOVA needs every trial's value of every knob it ranks. A knob that exists only in some
    # configs (loader knobs with workers, DDP's static graph without accumulation) is left
    # out, not its trials: ranking it over the trials it exists in would leave every other
    # knob ranked over a part of the search, and those parts differ per knob.
    params = [k for k in varied if all(k in t.params for t in trials)]
    if len(trials) < MIN_TRIALS_FOR_IMPORTANCE or not params:
        return None, (
            f"Not enough trials to tell which knobs mattered: {len(trials)} distinct completed "
            f"trial(s) with varying knobs, and importance needs at least "
            f"{MIN_TRIALS_FOR_IMPORTANCE}. Run the search longer (the same command continues "
            "the study)."
        )
    try:
        with _quiet_optuna():
            fig = optuna.visualization.plot_param_importances(
                study,
                evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0),
                params=params,
                target=lambda t: math.log(t.value) if t.value and t.value > 0 else 0.0,
                target_name="log projected time",
            )
    except (ValueError, RuntimeError) as exc:
        return None, f"Knob importances could not be computed for this study: {exc}"
    fig.update_layout(title=None, height=max(260, 40 * len(params) + 120), margin={"t": 30})
    caption = (
        "Importance of each knob for the (log) projected training time, by Optuna's fANOVA "
        "evaluator over the completed trials."
    )
    partial = [k for k in varied if k not in params]
    if partial:
        caption += (
            f" Not ranked: {', '.join(partial)}: each exists in only some of the trials (a "
            "loader knob with workers, DDP's static graph without accumulation), and the "
            "ranking needs a value in every trial."
        )
    return fig, caption


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; }}
h1 {{ font-size: 1.6rem; }} h2 {{ font-size: 1.25rem; margin-top: 2.2rem;
       border-bottom: 1px solid #ddd; padding-bottom: .2rem; }}
.meta {{ color: #555; font-size: .9rem; }} .caption {{ color: #555; font-size: .9rem; }}
.lead {{ font-size: 1.15rem; font-weight: 600; }} .warn {{ color: #a15c00; }}
table {{ border-collapse: collapse; font-size: .85rem; }}
th, td {{ border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }}
th {{ background: #f5f5f5; }}
table.trials tr.winner td {{ background: #e3f6ec; font-weight: 600; }}
table.trials tr.baseline td {{ background: #e8eafe; }}
table.trials tr.failed td {{ color: #b00020; }}
table.trials tr.outside td, table.trials tr.rejected td {{ color: #8a4b00; }}
</style>
</head>
<body>
<h1>{heading}</h1>
{meta}
{sections}
</body>
</html>
"""

"""The readable summary of a result: what ``print(result)`` and ``autotune show`` print.

By default the short story (:func:`story_lines`): at most :data:`~autotune._result.story.
STORY_LINES` lines, none over :data:`WIDTH` characters and none cut, that say what to change,
how much faster and how that was measured, whether it is safe, how to apply it, the three
warnings that matter most (:mod:`autotune._result.story` writes them from the result's facts)
and where it was measured. With ``detail`` everything, each line whole (:func:`summary_parts`).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from autotune._errors import ConfigError
from autotune._guard.plan import whole_run_timeout
from autotune._guard.words import answer_claim, lag_words, unseen_note
from autotune._knobs.config import TrainingConfig
from autotune._knobs.registry import changes
from autotune._progress import WIDTH
from autotune._result import story
from autotune._result.facts import (
    accuracy_note,
    advice_reason,
    advice_text,
    failure_text,
    settle_text,
)
from autotune._result.story import STORY_LINES, Note, choose, fit_first
from autotune._search.derived import format_speedup
from autotune._search.record import GuardFailure, NoRun
from autotune._search.warm import warm_line
from autotune._search.words import change_words, unmeasured_words, wrap_clauses
from autotune._speed import words as speed_words
from autotune._speed.stats import Decision, Interval
from autotune._trial.fingerprint import measured_on

__all__ = ["render_summary", "story_lines", "summary_parts"]

CHANGE = "  change: "  # the summary's second line: what to change of your settings


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.0f} MiB"


def _fmt_metric(value: float | None) -> str:
    return "not checked" if value is None else f"{value:.4f}"


def render_summary(data: dict[str, Any], *, detail: bool = False) -> str:
    """A readable summary of an exported result (what ``autotune show`` prints): the short
    story (:func:`story_lines`), or with ``detail`` everything, each line whole (``autotune
    show --detail``)."""
    if not detail:
        return "\n".join(story_lines(data))
    head, rows, tail = summary_parts(data)
    lines = [*head, "", f"  {'':22}{'winner':>16}{'baseline':>16}"]
    lines += [f"  {label:22}{w:>16}{b:>16}" for label, w, b in rows]
    return "\n".join([*lines, "", *tail])


def story_lines(data: dict[str, Any]) -> list[str]:
    """The short story: what to change, the speed-up and how it was measured, the accuracy
    verdict with its horizon, how to apply it, the warnings that matter most (three at most,
    chosen by rank, each whole) and where it was measured; at most :data:`STORY_LINES` lines,
    each within :data:`WIDTH` characters. What it leaves out is in the detail."""
    head = [*_first_lines(data, short=True)]
    apply, more = _apply_lines(data)
    end = [_measured_line(data)] if data.get("environment") else []
    room = STORY_LINES - len(head) - 1 - len(end)
    chosen = choose(_notes(data), room)
    warned = [line for note in chosen for line in note.lines()]
    keep = [more] if len(warned) < room else []  # the first to go where warnings need it
    return [*head, apply, *keep, *warned, *end]


def _notes(data: dict[str, Any]) -> list[Note]:
    """Every warning the result's facts call for, each a short sentence of
    :mod:`autotune._result.story` (the story keeps the most important; the detail says each
    whole, with its reasoning)."""
    answers, search = data.get("answers") or {}, data.get("search") or {}
    guard = data.get("accuracy_guard")
    name = data["metrics"].get("metric_name", "metric")
    notes = []
    pending = answers.get("pending")
    if pending is not None:
        c, speed = pending.get("confirmation") or {}, format_speedup(pending.get("speedup"))
        if not c or failure_text(c):
            notes.append(story.unchecked(pending["trial"], speed, failure_text(c)))
        else:
            reason, need = c.get("settle_reason"), c.get("need")
            notes.append(
                story.unsettled(pending["trial"], speed, reason=reason, need=need, metric=name)
            )
    lag = (guard or {}).get("lagging_run")
    if lag:
        schedule = (data["baseline"]["config"].get("lr_schedule") or {}).get("kind")
        seeds, metrics = lag.get("seeds") or [lag["seed"]], lag.get("metrics") or [lag["metric"]]
        notes.append(
            story.lagging(seeds, metrics, lag["others"], name, constant=schedule == "constant")
        )
    machine = search.get("machine") or {}
    if machine.get("shared"):
        notes.append(
            story.shared(
                int(machine["shared"]),
                int(machine.get("readings") or 0),
                cores=machine.get("cores"),
                others_max=float(machine.get("others_max") or 0.0),
                gpu=int(machine.get("gpu_others") or 0),
            )
        )
    if search.get("interrupted"):
        notes.append(story.interrupted())
    notes += _check_notes(data, guard, search, name)
    missing = search.get("unmeasured") or []
    if missing:
        knobs = list(dict.fromkeys(str(u["knob"]) for u in missing))
        notes.append(story.unmeasured(knobs, len(missing)))
    return notes


def _check_notes(
    data: dict[str, Any], guard: dict[str, Any] | None, search: dict[str, Any], name: str
) -> list[Note]:
    """The warnings of the accuracy checks: none possible, a horizon short of the run, faster
    candidates rejected, no change of the numerics confirmed, the guard's advice, a plan
    shorter than the budget meant."""
    answers = data.get("answers") or {}
    notes = []
    failed = search.get("no_accuracy_check")
    if guard is None or failed:
        how = GuardFailure.from_dict(failed) if failed else None
        notes.append(
            story.no_check(
                needed=search.get("numerics_searched") is not False,
                failed=None if how is None else how.why,
                failure=None if how is None or how.failure is None else how.failure.value,
                interrupted=bool(search.get("interrupted")),
            )
        )
    fast = answers.get("fast")
    judged = _judged(data, fast) if fast is not None and answers.get("chosen") == "fast" else None
    if judged is not None and judged[1] < judged[2]:
        notes.append(story.short_horizon(judged[1], judged[2]))
    rejected = [
        (int(r["trial"]), format_speedup(r.get("speedup")))
        for r in answers.get("rejected") or []
        if (r.get("confirmation") or {}).get("lower") is not None
    ]
    if rejected:
        notes.append(story.rejected(rejected))
    counts = _unconfirmed_counts(data)
    if fast is None and guard is not None and any(counts):
        notes.append(story.unconfirmed(*counts))
    if guard is None:
        return notes
    reason = advice_reason(guard)
    if reason is not None and not failed:
        notes.append(story.guard_advice(reason, metric=name))
    planned = data["metrics"].get("planned_samples")
    samples = guard.get("accuracy_samples")
    # A plan shorter than meant weakens the checks of a change of the numerics, where one is
    # the answer or would be faster than it.
    weighs = answers.get("chosen") == "fast" or answers.get("pending") is not None
    if weighs and accuracy_note(data) and samples and planned and samples < planned:
        notes.append(story.plan_note(int(samples), int(planned)))
    return notes


def summary_parts(
    data: dict[str, Any],
) -> tuple[list[str], list[tuple[str, str, str]], list[str]]:
    """The detail's headline and configs, its table (label, winner, baseline) and the lines
    after it (the answers, the guard, the search, the fingerprints), for a plain or a terminal
    rendering, each line whole."""
    m, b = data["metrics"], data["baseline"]["metrics"]
    head = [
        *_first_lines(data),
        *_apply_lines(data),
        "",
        f"  winner:   {_describe(data['config'])}",
        f"  baseline: {_describe(data['baseline']['config'])}",
    ]
    # Throughput and projected time come from the side-by-side rounds where they measured
    # both (the headline's rounds); the rest of the table is the trials' screening measurement.
    side = "side by side" in str(m.get("measured_as")) and "side by side" in str(
        b.get("measured_as")
    )
    rows = [
        ("throughput (samples/s)", m.get("throughput"), b.get("throughput"), "{:,.0f}"),
        ("spread", m.get("throughput_spread"), b.get("throughput_spread"), "{:.1%}"),
        ("step time (ms)", _ms(m.get("step_time")), _ms(b.get("step_time")), "{:.2f}"),
        # Time the loop waited for the next batch: on a GPU, queued GPU work may overlap it.
        (
            "data wait (CPU side)",
            m.get("data_wait_fraction"),
            b.get("data_wait_fraction"),
            "{:.0%}",
        ),
        ("one-time cost (s)", m.get("one_time_cost"), b.get("one_time_cost"), "{:.2f}"),
        (
            "projected time (s)",
            m.get("projected_training_time"),
            b.get("projected_training_time"),
            "{:.1f}",
        ),
    ]
    if m.get("compile_seconds") is not None or b.get("compile_seconds") is not None:
        rows.insert(
            5, ("compile (s)", m.get("compile_seconds"), b.get("compile_seconds"), "{:.2f}")
        )
    table = [(label, _cell(w, fmt), _cell(base, fmt)) for label, w, base, fmt in rows]
    table.append(
        (
            "peak memory",
            _fmt_bytes(m.get("peak_memory_bytes")),
            _fmt_bytes(b.get("peak_memory_bytes")),
        )
    )
    name = m.get("metric_name", "metric")
    table.append(
        (
            "val " + name,
            _fmt_metric(m.get("validation_metric")),
            _fmt_metric(b.get("validation_metric")),
        )
    )
    if side:
        where = m["measured_as"]
        if b["measured_as"] != where:  # the baseline is in every round, so often in more
            where += f" (the baseline's {b['measured_as'].removeprefix('side by side ')})"
        source = (
            f"  rows: throughput, step and projected time {where}, as the headline; the rest "
            f"each config's screening measurement; {_val_source(name)}"
        )
    else:
        source = f"  rows: each config's screening measurement (one draw); {_val_source(name)}"
    tail = [source, *_answers(data, name), *_validation_lines(data), *_search_lines(data)]
    return head, table, tail


def no_check_words(search: dict[str, Any]) -> str:
    """Why a result has no accuracy guard, from its ``search`` section."""
    if search.get("numerics_searched") is False:
        return "no accuracy check was needed: no knob searched changes the numerics"
    failed = search.get("no_accuracy_check")
    if failed:
        return (
            f"no accuracy check was possible: {GuardFailure.from_dict(failed).describe()}; "
            "only knobs that leave the numerics alone could win"
        )
    why = (
        "the search was interrupted before the baseline's accuracy runs"
        if search.get("interrupted")
        else "the search ended before the baseline's accuracy runs; its progress lines say why"
    )
    return f"no accuracy check was made ({why}): only knobs that leave the numerics alone could win"


def _unconfirmed(data: dict[str, Any]) -> str | None:
    """Why the changes of the numerics a search tried made no fast answer, counted from its
    trials' reasons (their progress lines say them one by one); None where none was tried."""
    could_not, failed, no_time = _unconfirmed_counts(data)
    parts = [
        (could_not, "could not beat the answer (screened slower, or trained an answer's steps)"),
        (failed, "failed screening (outside the tolerance)"),
        (no_time, "had no time left for their accuracy runs"),
    ]
    said = [f"{n} {words}" for n, words in parts if n]
    return "; ".join(said) if said else None


def _unconfirmed_counts(data: dict[str, Any]) -> tuple[int, int, int]:
    """The changes of the numerics tried that made no fast answer: how many could not win,
    failed screening, had no time for their accuracy runs."""
    could_not, failed, no_time = 0, 0, 0
    for t in data.get("trials") or []:
        if t.get("role") != "candidate" or t.get("safe") or t.get("reused") or t.get("failure"):
            continue
        no_run = t.get("no_accuracy_run")
        if t.get("screened") is False:
            failed += 1
        elif no_run == NoRun.COULD_NOT_WIN.value:
            could_not += 1
        elif no_run == NoRun.NO_TIME.value:
            no_time += 1
    return could_not, failed, no_time


def _val_source(name: str) -> str:
    """Where the table's validation row comes from: accuracy runs, not the measurement."""
    return (
        f"val {name}: the mean of the config's accuracy runs (its check's, or its screening "
        "run; for a config that leaves the numerics alone, those of the baseline model)"
    )


def _changes(data: dict[str, Any]) -> str:
    """What the answer changes of the baseline, knob by knob, with the values before and after."""
    try:
        cfg = TrainingConfig.from_dict(data["config"])
        base = TrainingConfig.from_dict(data["baseline"]["config"])
    except ConfigError:
        return "see the winner's config below"
    return change_words(changes(cfg, base), width=WIDTH - len(CHANGE))


def _first_lines(data: dict[str, Any], *, short: bool = False) -> list[str]:
    """The summary's answer first: what to change (with the headline), how much faster and
    how that was measured, and whether it is safe. ``short``: the story's, each line within
    :data:`WIDTH` characters, written short where the whole one is longer (never cut)."""
    lines = [_headline(data, short=short)]
    if data["config"] != data["baseline"]["config"]:
        change = f"{CHANGE}{_changes(data)}"
        # A long answer's change (five knobs) wraps at its clauses rather than run past the width.
        lines += wrap_clauses(change) if short else [change]
    speed = [*_speed_line(data, short=short), *_fastest_line(data)]
    return [*lines, *speed, _accuracy_line(data, short=short)]


def _fastest_line(data: dict[str, Any]) -> list[str]:
    """Where the rounds kept your settings because nothing beat them beyond the noise: the
    fastest they measured, with its interval."""
    rounds = data.get("rounds") or {}
    lead, figure = rounds.get("leader"), rounds.get("leader_speedup")
    if not rounds.get("fell_back") or lead is None or not figure:
        return []
    count = int(rounds.get("leader_rounds") or rounds.get("count") or 0)
    shown = Interval(figure[0], figure[1], figure[2], count, rounds.get("noise") or 0.0)
    return [speed_words.fastest(f"trial #{lead}", shown)]


def _speed_line(data: dict[str, Any], *, short: bool = False) -> list[str]:
    """How much faster, with its 95% interval, what the rounds decided and the machine's noise
    as they saw it; beside the detail's table, the table's ratio where it differs (a ratio of
    the rounds' medians, not the rounds' mean log-ratio). The short story shows no table, so
    no ratio of it. A result written before intervals says its range."""
    span = data.get("speedup_range")
    if data["config"] == data["baseline"]["config"] or not span:
        return []
    table = data.get("throughput_ratio")
    beside = ""
    if table and abs(table / data["speedup"] - 1) > 0.01 and not short:
        beside = f" (the table's ratio of medians: {table:.2f}x)"
    ci = data.get("speedup_interval")
    if not ci:
        return [
            f"  speed-up: {data['speedup']:.2f}x, range {span[0]:.2f}-{span[1]:.2f}x: the "
            f"median of {data.get('speedup_rounds')} side-by-side rounds' ratios{beside}"
        ]
    rounds = data.get("rounds") or {}
    kind = rounds.get("decision")
    named = speed_words.runner_up(rounds.get("runner_up"), _baseline_number(data))
    doubt = bool(rounds.get("runner_up_unproven"))
    whole = speed_words.speed_line(
        data["speedup"],
        ci[0],
        ci[1],
        int(data.get("speedup_rounds") or 0),
        Decision(kind) if kind else None,
        named,
        rounds.get("noise"),
        unproven=doubt,
    )
    if short:
        count, noise = int(data.get("speedup_rounds") or 0), rounds.get("noise")
        decided = Decision(kind) if kind else None

        def line(decision: Decision | None, noise: float | None) -> str:
            name = named if decision is not None else None
            return speed_words.speed_line(
                data["speedup"], ci[0], ci[1], count, decision, name, noise, unproven=doubt
            )

        return [fit_first(whole, line(decided, None), line(None, noise), line(None, None))]
    return [whole + beside]


def _baseline_number(data: dict[str, Any]) -> int | None:
    """The baseline's trial number in the result's trial table."""
    rows = data.get("trials") or []
    return next((t.get("number") for t in rows if t.get("role") == "baseline"), None)


def _accuracy_line(data: dict[str, Any], *, short: bool = False) -> str:
    """The accuracy verdict of the chosen answer, in one sentence with its horizon (``short``:
    without its bound where the whole line is longer than :data:`WIDTH`)."""
    answers = data.get("answers") or {}
    if data["config"] == data["baseline"]["config"]:
        return "  accuracy: your settings, unchanged"
    if answers.get("chosen") != "fast":
        return "  accuracy: unchanged: the change leaves the numerics alone (no accuracy risk)"
    c = (answers.get("fast") or {}).get("confirmation") or {}
    horizon = (data.get("accuracy_guard") or {}).get("accuracy_samples")
    planned = data["metrics"].get("planned_samples")
    where = ""
    if horizon and planned:
        where = f" at {horizon:,} samples ({min(1.0, horizon / planned):.0%} of the run)"
    whole = (
        f"  accuracy: confirmed within tolerance {data.get('tolerance'):g} (upper bound "
        f"{c.get('bound') or 0:+.4f}, {len(c.get('runs', []))} paired seeds){where}"
    )
    if not short:
        return whole
    return fit_first(
        whole, f"  accuracy: confirmed within tolerance {data.get('tolerance'):g}{where}"
    )


def _apply_lines(data: dict[str, Any]) -> tuple[str, str]:
    """How to use it: the config from the JSON, and the trainer's settings where a trainer
    ran the trials; then where to read it back."""
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and trainer.get("kind"):
        return (
            '  apply: autotune.load_config("best.json"), or result.trainer_settings() for your '
            f"{trainer['kind']} trainer",
            "  (`autotune show best.json` reads it back; the reasoning: the report and the JSON)",
        )
    return (
        '  apply: cfg = autotune.load_config("best.json"); loader = cfg.dataloader(dataset); '
        "model = cfg.prepare(model)",
        "  or paste: autotune show best.json --as loop|lightning|transformers; the reasoning: "
        "--detail",
    )


def _headline(data: dict[str, Any], *, short: bool = False) -> str:
    """The answer in a line: how much faster, for what (the story's written short where the
    whole one is longer than :data:`WIDTH`)."""
    m = data["metrics"]
    if data["config"] == data["baseline"]["config"]:
        rounds = data.get("rounds") or {}
        if rounds.get("fell_back"):
            return speed_words.kept(rounds.get("noise"))
        return (
            "autotune result: no config trained faster than yours here: keep your settings "
            "(the baseline's)"
        )
    span = data.get("speedup_range")
    if not span:
        why = (
            "the search was interrupted before its rounds"
            if (data.get("search") or {}).get("interrupted")
            else "no side-by-side round measured it with the baseline"
        )
        whole = (
            f"autotune result: NOT measured side by side ({why}): "
            f"{data['speedup']:.2f}x the baseline's steady-state throughput, from the trials' "
            "own measurements, one-time costs left out"
        )
        if not short:
            return whole
        return fit_first(  # why is the detail's (and an interruption, a warning's)
            whole,
            f"autotune result: {data['speedup']:.2f}x the baseline's throughput in the trials' "
            "own measurements (NOT measured side by side)",
        )
    head = (
        f"autotune result: {data['speedup']:.2f}x faster than the baseline (training time "
        f"for {m.get('planned_samples', 0):,} samples)"
    )
    if not short:
        return head + _length(data)
    fraction = float(data["config"].get("train_fraction", 1.0))
    return fit_first(
        head + _length(data),
        head + (f"; it trains {fraction:.0%} of the planned epochs" if fraction != 1.0 else ""),
        head,
    )


def _judged(data: dict[str, Any], answer: dict[str, Any]) -> tuple[float, int, int] | None:
    """(its share of the epochs, the guard's horizon, the planned run's samples) of
    ``answer``; None where the result does not say."""
    trials = {t.get("number"): t for t in data.get("trials") or []}
    config = (trials.get(answer.get("trial")) or {}).get("config") or {}
    fraction = float(config.get("train_fraction", 1.0))
    horizon = (data.get("accuracy_guard") or {}).get("accuracy_samples")
    planned = data["metrics"].get("planned_samples")
    if not horizon or not planned:
        return None
    return fraction, int(horizon), int(planned)


def _horizon(data: dict[str, Any], fast: dict[str, Any]) -> str | None:
    """Where the fast answer's accuracy was judged: on the whole planned run, or at a horizon
    short of it (how short, and what that cannot see)."""
    judged = _judged(data, fast)
    if judged is None:
        return None
    fraction, horizon, planned = judged
    if fraction == 1.0:
        if horizon >= planned:
            return None
        return (
            f"  judged after {horizon:,} samples of training, {horizon / planned:.0%} of the "
            f"planned run's {planned:,}: a drop that grows later in training (a change that "
            "slows learning shows its cost late) is not measured there; `autotune verify "
            "--full` trains both for the whole run and measures the accuracy each reaches"
        )
    if horizon >= planned:
        return (
            f"  its {fraction:.0%}-length run was judged on the whole planned run "
            f"({planned:,} samples against the baseline's)"
        )
    return (
        f"  its {fraction:.0%}-length run was judged at a horizon of {horizon:,} samples "
        f"({horizon / planned:.0%} of the planned run's {planned:,}), not on the whole run: "
        "`autotune verify --full` trains both for the whole run and measures the accuracy "
        "each reaches"
    )


def _whole_run_timeout(data: dict[str, Any], answer: dict[str, Any]) -> float | None:
    """Where ``answer`` trains a share of the epochs and was judged at a horizon short of the
    planned run: the timeout whose accuracy share holds the baseline's runs of the whole run
    (at its measured throughput), where the guard judges a shorter run against the whole one;
    None otherwise."""
    judged = _judged(data, answer)
    throughput = data["baseline"]["metrics"].get("throughput")
    if judged is None or judged[0] == 1.0 or judged[1] >= judged[2] or not throughput:
        return None
    repeats = int((data.get("search") or {}).get("accuracy_repeats") or 3)
    return whole_run_timeout(repeats=repeats, planned_samples=judged[2], throughput=throughput)


def _length(data: dict[str, Any]) -> str:
    """Where the winner trains a share of the planned epochs: how many, and how much of the
    speedup is its throughput and how much its length."""
    fraction = float(data["config"].get("train_fraction", 1.0))
    if fraction == 1.0:
        return ""
    planned = float((data.get("search") or {}).get("planned_epochs") or 0.0)
    ratio = data.get("throughput_ratio")
    parts = f"; it trains {fraction:.0%} of the planned epochs"
    if planned:
        parts += f" ({planned * fraction:g} of {planned:g})"
    if ratio:
        parts += f": {ratio:.2f}x from throughput, {1 / fraction:.2f}x from the shorter run"
    return parts


def _answers(data: dict[str, Any], name: str) -> list[str]:
    """The two answers, the accuracy check behind the fast one, and what would settle a
    faster candidate left unsettled."""
    answers = data.get("answers") or {}
    guard = data.get("accuracy_guard")
    lines = []
    safe, fast, pending = answers.get("safe"), answers.get("fast"), answers.get("pending")
    if safe is not None:
        lines.append(
            f"  safe answer (numerics unchanged, no accuracy risk): trial #{safe['trial']}, "
            f"{format_speedup(safe.get('speedup'))}"
        )
    if fast is not None:
        c = fast.get("confirmation") or {}
        lines.append(
            f"  fast answer (numerics changed): trial #{fast['trial']}, "
            f"{format_speedup(fast.get('speedup'))}; {name} confirmed over "
            f"{len(c.get('runs', []))} paired seeds: mean drop {c.get('drop', 0):+.4f}, upper "
            f"bound {c.get('bound') or 0:+.4f} "
            f"<= tolerance {data.get('tolerance'):g} ({c.get('looks', 1)} look(s), "
            f"sequential): {answer_claim()}; {unseen_note(len(c.get('runs', [])))}"
        )
        horizon = _horizon(data, fast)
        if horizon:
            lines.append(horizon)
    lines.append(f"  chosen: the {answers.get('chosen', 'safe')} answer")
    tally = _unconfirmed(data) if fast is None and guard is not None else None
    if tally:
        lines.append(f"  no change of the numerics was confirmed: of those tried, {tally}")
    if pending is not None:
        c = pending.get("confirmation") or {}
        # With no check made, say only that: the time left at the end is one reason, a
        # candidate no faster than the answer while checks were weighed (the rounds then
        # measuring the answer slower) another, and the result does not know which.
        failure = failure_text(c)
        why = settle_text(data, c) or (
            f"its check was stopped: {failure}"
            if failure
            else "no check of it was made before the search ended"
        )
        whole = _whole_run_timeout(data, pending)
        if whole is not None:
            why += (
                f"; a timeout of ~{whole:.0f} s would make the accuracy runs the whole planned "
                "run, where a shorter run is judged against the whole one"
            )
        bound = ""
        if c.get("bound") is not None:
            bound = (
                f" (mean drop {c['drop']:+.4f}, upper bound {c['bound']:+.4f} over "
                f"{len(c.get('runs', []))} seeds, tolerance {data.get('tolerance'):g})"
            )
        trials = {t.get("number"): t for t in data.get("trials") or []}
        then = (trials.get(pending["trial"]) or {}).get("screened_then")
        rejudged = (
            " (judged against all the baseline's seeds; its progress row, against the first "
            "ones, said outside the tolerance)"
            if then is False
            else ""
        )
        lines.append(
            f"  ! trial #{pending['trial']} ({format_speedup(pending.get('speedup'))}) changes "
            f"the numerics and passed screening{rejudged}, but its accuracy is not "
            f"settled{bound}: {why}"
        )
    for r in answers.get("rejected") or []:
        c = r.get("confirmation") or {}
        if c.get("lower") is not None:
            lines.append(
                f"  trial #{r['trial']} ({format_speedup(r.get('speedup'))}) was faster but "
                f"rejected: its {name} drop's one-sided lower confidence bound over "
                f"{len(c.get('runs', []))} paired seeds, {c['lower']:+.4f}, is beyond the "
                f"tolerance {data.get('tolerance'):g}"
            )
    if guard is None:
        lines.append(f"  ! {no_check_words(data.get('search') or {})}")
    else:
        lines.append(
            f"  accuracy guard: tolerance {guard['tolerance']:g}, paired runs; baseline {name} "
            f"{guard['baseline_metric']:.4f} ± {guard['baseline_spread']:.4f} over "
            f"{len(guard['baseline_runs'])} seeds of {guard['accuracy_samples']:,} samples"
            + _first_seeds(guard, data)
        )
        if (data.get("search") or {}).get("no_accuracy_check"):
            lines.append(f"  ! {no_check_words(data['search'])}")
        elif advice_text(guard):
            lines.append(f"  ! {advice_text(guard)}")
        lag = guard.get("lagging_run")
        if lag:
            schedule = (data["baseline"]["config"].get("lr_schedule") or {}).get("kind")
            hint = (
                " (a constant learning rate ends on a noisy last iterate: if your run anneals "
                "its rate, give that schedule as the baseline, --baseline or "
                "SearchOptions(baseline=...))"
                if schedule == "constant"
                else ""
            )
            lines.append(f"  ! {lag_words(lag, name)}{hint}")
    note = accuracy_note(data)
    if note:
        lines.append(f"  ! {note}")
    return lines


def _first_seeds(guard: dict[str, Any], data: dict[str, Any]) -> str:
    """Where checks bought the baseline more seeds than its first runs: what the first ones
    read (the progress line said that figure), and the seed furthest from the rest."""
    runs = [float(r) for r in guard.get("baseline_runs") or []]
    first = int((data.get("search") or {}).get("accuracy_repeats") or 0)
    if not first or len(runs) <= first or first < 2:
        return ""
    head = runs[:first]
    mean = statistics.fmean(runs)
    far = max(range(len(runs)), key=lambda i: abs(runs[i] - mean))
    return (
        f" (its first {first} seeds: {statistics.fmean(head):.4f} ± "
        f"{statistics.stdev(head):.4f}; seed {far} is furthest from the mean, at "
        f"{runs[far]:.4f})"
    )


def _validation_lines(data: dict[str, Any]) -> list[str]:
    """The metric the guard held and why it was that one (results that say so)."""
    v = data.get("validation")
    if not v:
        return []
    better = "higher" if v.get("higher_is_better") else "lower"
    why = f" ({v['reason']})" if v.get("reason") else ""
    batches = (
        f"; every config validated in batches of {v['batch_size']}" if v.get("batch_size") else ""
    )
    lines = [f"  validation metric: {v.get('metric')}, {better} is better{why}{batches}"]
    data_note = (data.get("search") or {}).get("data")
    if data_note:
        lines.append(f"  {data_note}")
    return lines


def _search_lines(data: dict[str, Any]) -> list[str]:
    search = data.get("search", {})
    env = data.get("environment", {})
    failures = search.get("failures") or {}
    failed = ", ".join(f"{k}: {v}" for k, v in sorted(failures.items())) or "none"
    first = search.get("first_win_seconds")
    if search.get("first_win_earlier"):
        win = "in an earlier run of this study"
    else:
        win = "none" if first is None else f"after {first:.0f} s"
    measured = search.get("configs_measured", 0)
    repeats = int(search.get("proposals_repeated") or 0)
    again = ""
    if repeats > 0:
        again = (
            f" (and {repeats} proposal{'s' if repeats > 1 else ''} of a config measured already)"
        )
    lines = [
        f"  search: {measured} configs measured{again} "
        f"in {search.get('seconds', 0):.0f} s of {_budget(search)}; first verified win "
        f"{win}; failures: {failed}",
        _study_line(str(search.get("study_name"))),
    ]
    missing = search.get("unmeasured") or []
    if missing:
        values = unmeasured_words([(u["knob"], u["value"], u["why"]) for u in missing])
        lines.append(f"  not measured: {values}")
    shared = _shared_words(search.get("machine") or {})
    if shared:
        lines.append(shared)
    if search.get("interrupted"):
        lines.append("  (interrupted: this is the best answer found before the stop)")
    if env:
        lines.append(f"  measured on: {_machine(env)}")
    fingerprints, warm = measured_on(search), search.get("warm_start")
    lines += [f"  {line}" for line in (fingerprints, warm and warm_line(warm)) if line]
    return lines


def _machine(env: dict[str, Any]) -> str:
    """The device, torch and the CPUs, as the environment names them (what it has)."""
    name, device = env.get("device_name"), env.get("device")
    parts = [f"{name} ({device})" if name else str(device)]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("cpu_count"):
        parts.append(f"{env['cpu_count']} CPUs")
    return ", ".join(parts)


def _measured_line(data: dict[str, Any]) -> str:
    """The story's last line: the machine, with the model's and the training set's types
    where the result holds their fingerprints (the hashes are the detail's)."""
    search = data.get("search") or {}
    model = (search.get("model_fingerprint") or {}).get("type")
    train = (search.get("data_fingerprint") or {}).get("train") or {}
    data_words = None
    if train.get("type"):
        n = train.get("length")
        size = "" if n is None else f" of {n:,} items"
        data_words = (
            f"a stream ({train['type']}){size}"
            if train.get("kind") == "stream"
            else f"{train['type']}{size}"
        )
    return story.measured_on(_machine(data.get("environment") or {}), model, data_words)


def _study_line(name: str) -> str:
    """The study, and that running the same command again resumes it where Optuna named it
    for one run only (``no-name-...``: a ``find_best`` without ``study_name``), not."""
    if name.startswith("no-name-"):
        return f"  study: {name!r} (unnamed; to resume one: SearchOptions(storage=, study_name=))"
    return f"  study: {name!r} (the same command resumes it)"


def _shared_words(machine: dict[str, Any]) -> str | None:
    """Where other processes used the machine while the search measured: how much, how
    often, and what that means for its figures (None: it was never seen shared)."""
    shared, readings = int(machine.get("shared") or 0), int(machine.get("readings") or 0)
    if not shared:
        return None
    cores = machine.get("cores")
    use = f"~{machine.get('others_max', 0):.1f} of {cores} cores" if cores else "the CPUs"
    gpu = int(machine.get("gpu_others") or 0)
    if gpu:
        use += f" and the GPU ({gpu} process{'es' if gpu > 1 else ''})"
    return (
        f"  ! machine shared: other processes used up to {use} in {shared} of {readings} "
        "measurements; ratios are of their state (against the baseline measured in it), not "
        "of training alone on this machine"
    )


def _budget(search: dict[str, Any]) -> str:
    timeout = search.get("timeout")
    if timeout:
        return f"{timeout:.0f} s"
    return f"{search.get('n_trials')} trials"


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def _cell(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def _describe(cfg: dict[str, Any]) -> str:
    try:
        return TrainingConfig.from_dict(cfg).describe()
    except ConfigError:
        return json.dumps(cfg)

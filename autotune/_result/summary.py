"""The readable summary of a result: what ``print(result)`` and ``autotune show`` print."""

from __future__ import annotations

import json
import statistics
import textwrap
from typing import Any

from autotune._errors import ConfigError
from autotune._knobs.config import TrainingConfig
from autotune._knobs.registry import changes
from autotune._progress import WIDTH, brief
from autotune._search.derived import format_speedup
from autotune._search.guard import ACCURACY_SHARE, answer_claim, lag_words, unseen_note
from autotune._search.record import GuardFailure, NoRun
from autotune._search.words import change_words, unmeasured_words, wrap_clauses

__all__ = ["render_summary", "summary_parts"]

CHANGE = "  change: "  # the summary's second line: what to change of your settings


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.0f} MiB"


def _fmt_metric(value: float | None) -> str:
    return "not checked" if value is None else f"{value:.4f}"


def render_summary(data: dict[str, Any], *, detail: bool = False) -> str:
    """A readable summary of an exported result (what ``autotune show`` prints): each line
    within :data:`WIDTH` characters, or with ``detail`` each whole (``autotune show
    --detail``)."""
    head, rows, tail = summary_parts(data, detail=detail)
    lines = [*head, "", f"  {'':22}{'winner':>16}{'baseline':>16}"]
    lines += [f"  {label:22}{w:>16}{b:>16}" for label, w, b in rows]
    return "\n".join([*lines, "", *tail])


def summary_parts(
    data: dict[str, Any], *, detail: bool = False
) -> tuple[list[str], list[tuple[str, str, str]], list[str]]:
    """The summary's headline and configs, its table (label, winner, baseline) and the lines
    after it (the answers, the guard, the search), for a plain or a terminal rendering. Each
    line within :data:`WIDTH` characters (a config wrapped, a note cut at a clause, see
    :func:`brief`); with ``detail``, each whole."""
    m, b = data["metrics"], data["baseline"]["metrics"]
    head = [
        *_first_lines(data, detail),
        "",
        *_config_lines("winner:  ", _describe(data["config"]), detail),
        *_config_lines("baseline:", _describe(data["baseline"]["config"]), detail),
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
    return head, table, tail if detail else [brief(line) for line in tail]


def _config_lines(label: str, described: str, detail: bool) -> list[str]:
    """A config after its label, wrapped within :data:`WIDTH` characters (whole with
    ``detail``)."""
    first = f"  {label} "
    if detail:
        return [first + described]
    return textwrap.wrap(described, WIDTH, initial_indent=first, subsequent_indent=" " * len(first))


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
    parts = [
        (could_not, "could not beat the answer (screened slower, or trained an answer's steps)"),
        (failed, "failed screening (outside the tolerance)"),
        (no_time, "had no time left for their accuracy runs"),
    ]
    said = [f"{n} {words}" for n, words in parts if n]
    return "; ".join(said) if said else None


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


def _first_lines(data: dict[str, Any], detail: bool = False) -> list[str]:
    """The summary's answer first, in five lines: what to change (with the headline), how much
    faster and how that was measured, whether it is safe, and how to apply it."""
    same = data["config"] == data["baseline"]["config"]
    head = _headline(data)
    if not same:
        head += f"\n{CHANGE}{_changes(data)}"
    lines = [*head.split("\n"), *_speed_line(data), _accuracy_line(data), *_apply_lines(data)]
    # A long answer's change (five knobs) wraps at its clauses rather than run past the width.
    return lines if detail else [part for line in lines for part in wrap_clauses(line)]


def _speed_line(data: dict[str, Any]) -> list[str]:
    """How much faster, with its range and how it was measured; the table's ratio beside it
    where it differs (a ratio of the rounds' medians, not the median of their ratios)."""
    span = data.get("speedup_range")
    if data["config"] == data["baseline"]["config"] or not span:
        return []
    table = data.get("throughput_ratio")
    beside = ""
    if table and abs(table / data["speedup"] - 1) > 0.01:
        beside = f" (the table's ratio of medians: {table:.2f}x)"
    return [
        f"  speed-up: {data['speedup']:.2f}x, range {span[0]:.2f}-{span[1]:.2f}x: the median of "
        f"{data.get('speedup_rounds')} side-by-side rounds' ratios{beside}"
    ]


def _accuracy_line(data: dict[str, Any]) -> str:
    """The accuracy verdict of the chosen answer, in one sentence with its horizon."""
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
    return (
        f"  accuracy: confirmed within tolerance {data.get('tolerance'):g} (upper bound "
        f"{c.get('bound') or 0:+.4f}, {len(c.get('runs', []))} paired seeds){where}"
    )


def _apply_lines(data: dict[str, Any]) -> list[str]:
    """How to use it: the config from the JSON, and the trainer's settings where a trainer
    ran the trials."""
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and trainer.get("kind"):
        return [
            '  apply: autotune.load_config("best.json"), or result.trainer_settings() for your '
            f"{trainer['kind']} trainer",
            "  (`autotune show best.json` reads it back; the reasoning: the report and the JSON)",
        ]
    return [
        '  apply: cfg = autotune.load_config("best.json"); loader = cfg.dataloader(dataset); '
        "model = cfg.prepare(model)",
        "  or paste: autotune show best.json --as loop|lightning|transformers; the reasoning: "
        "--detail",
    ]


def _headline(data: dict[str, Any]) -> str:
    m = data["metrics"]
    if data["config"] == data["baseline"]["config"]:
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
        return (
            f"autotune result: NOT measured side by side ({why}): "
            f"{data['speedup']:.2f}x the baseline's steady-state throughput, from the trials' "
            "own measurements, one-time costs left out"
        )
    return (
        f"autotune result: {data['speedup']:.2f}x faster than the baseline (training time "
        f"for {m.get('planned_samples', 0):,} samples)" + _length(data)
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
    return float(repeats * judged[2] / throughput / ACCURACY_SHARE)


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
        why = c.get("settle") or (
            f"its check was stopped: {c['failure']}"
            if c.get("failure")
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
        elif guard.get("advice"):
            lines.append(f"  ! {guard['advice']}")
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
    note = (data.get("search") or {}).get("accuracy_note")
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
        lines.append(
            f"  measured on: {env.get('device_name')} ({env.get('device')}), "
            f"torch {env.get('torch')}, {env.get('cpu_count')} CPUs"
        )
    return lines


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

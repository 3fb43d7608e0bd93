"""The answer at a glance (issue 57): rows in columns within 120 characters, long event lines
shortened with their whole text kept as the result's detail, and a summary whose first lines
say what to change, how much faster, whether it is safe and how to apply it."""

from __future__ import annotations

import dataclasses
import json
import math
import re

from sim import Model, noise, result_of, search
from test_rebase import SAFE, _speed

from autotune import TrainingConfig
from autotune._cli import main
from autotune._knobs.registry import changes
from autotune._progress import WIDTH, Briefed, Lines, brief
from autotune._result.summary import render_summary
from autotune._search.words import Accuracy, TrialFacts, change_words, trial_header, trial_row


def test_a_row_names_only_what_changed_and_fits_the_width() -> None:
    base = TrainingConfig()
    cfg = base.replace(
        num_workers=2, persistent_workers=True, prefetch_factor=4, channels_last=True,
        optimizer_impl="fused", intra_op_threads=1, precision="bf16", batch_size=256,
    )  # fmt: skip
    facts = TrialFacts(
        number=123, stage="explore", changes=changes(cfg, base), throughput=36412.0,
        ratio=1.834, accuracy=Accuracy.UNRESOLVED, left=1234.0, best=True,
    )  # fmt: skip
    row = trial_row(facts)
    assert len(row) <= 120 and len(trial_header()) <= 120
    assert row.lstrip().startswith("#123* explore ")
    assert "batch=256" in row and "36,412" in row and "1.83x" in row and "unresolved" in row
    assert "lr=" not in row  # unchanged knobs are not named
    assert change_words(changes(base.replace(precision="bf16", channels_last=True), base)) == (
        "precision fp32 → bf16, channels_last off → on"
    )
    failed = trial_row(
        TrialFacts(number=4, stage="fast", changes=(), failure="oom", accuracy=Accuracy.NOT_RUN)
    )
    assert "your settings" in failed and "failed: oom" in failed


def test_a_long_event_line_is_cut_at_a_clause_and_kept_whole() -> None:
    long = "accuracy guard: " + "; ".join(
        f"clause {i} says something long enough" for i in range(9)
    )
    kept: list[str] = []
    shown: list[str] = []
    Briefed(Lines(shown.append), kept.append)(long)
    assert kept == [long] and len(shown[0]) <= WIDTH
    assert shown[0].startswith("accuracy guard: clause 0") and "autotune show --detail" in shown[0]
    assert brief("short line") == "short line"


def test_a_search_story_and_summary_read_as_a_person_needs(tmp_path) -> None:
    """A simulated search's story: every row and note within 120 characters, none of the
    long reasoning lost (the result's detail holds it); its summary's first five lines hold
    the change, the speed-up with its range, the accuracy verdict and how to apply it, and
    the summary is the short story: at most 12 lines, none cut (issue 68)."""
    model = Model(speed=_speed)
    knobs = {**SAFE, "precision": ["fp32", "bf16"]}
    run, _, _ = search(model, knobs=knobs, timeout=240.0)
    data = result_of(run).to_dict()
    first = render_summary(data).splitlines()[:6]
    assert re.match(r"autotune result: \d\.\d\dx faster than the baseline", first[0]), first
    assert first[1].startswith("  change: ") and "workers 0 → 2" in first[1]
    interval = r"  speed-up: \d\.\d\dx \(95% interval \d\.\d\d-\d\.\d\dx, \d+ paired rounds\)"
    assert re.match(interval, first[2]), first[2]
    assert first[3].startswith("  accuracy: ")
    assert 'autotune.load_config("best.json")' in first[4]
    # Every line of the summary fits, none of them cut; `autotune show --detail`
    # (detail=True) has everything, each line whole.
    assert all(len(line) <= 120 for line in render_summary(data).splitlines())
    data["search"]["unmeasured"] = [
        {"knob": "compile_mode", "value": v, "why": "not tried: the search ended first"}
        for v in ("default", "reduce-overhead", "max-autotune")
    ] + [{"knob": "batch_size", "value": 128, "why": "trial #5: out of memory"}]
    whole = render_summary(data, detail=True)
    assert (
        "  not measured: compile_mode=default, compile_mode=reduce-overhead, "
        "compile_mode=max-autotune (not tried: the search ended first); batch_size=128 "
        "(trial #5: out of memory)"
    ) in whole.splitlines()
    assert max(len(line) for line in whole.splitlines()) > 120
    brief = render_summary(data)
    assert all(len(line) <= 120 for line in brief.splitlines())
    assert len([line for line in brief.splitlines() if line.strip()]) <= 12
    assert "(more:" not in brief and not any(line.endswith("…") for line in brief.splitlines())
    # The unmeasured values are a warning of the lowest rank: with no other, the story has
    # room for it, said short from its facts, and names where the reasons are.
    assert (
        "  ! 4 values of compile_mode, batch_size not measured; `autotune show --detail` says why."
    ) in brief.splitlines()
    # `autotune show --detail` prints the whole of each shortened line.
    notes = data["search"]["notes"]
    assert notes and any(len(note) > 120 for note in notes)
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    assert main(["show", str(path), "--detail"]) == 0


def test_show_detail_prints_the_notes(tmp_path, capsys) -> None:
    model = Model(speed=_speed)
    run, _, _ = search(model, knobs={**SAFE, "precision": ["fp32", "bf16"]}, timeout=240.0)
    data = result_of(run).to_dict()
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    assert main(["show", str(path), "--detail"]) == 0
    out = capsys.readouterr().out
    assert "The search's reasoning, each line whole:" in out
    assert all(note in out for note in data["search"]["notes"])


def test_advice_names_options_that_exist_on_the_command_line_and_in_search_options() -> None:
    """Every option advice names (the guard's words and the short story's, through option)
    is a flag of `autotune search` and a field of SearchOptions: "accuracy_repeats=34" named
    no flag the CLI had."""
    import dataclasses
    from pathlib import Path

    import autotune
    from autotune._cli import build_parser
    from autotune._guard import words as guard_words
    from autotune._result import story

    source = "".join(Path(m.__file__).read_text(encoding="utf-8") for m in (guard_words, story))
    named = set(re.findall(r"\boption\('(\w+)'", source))
    assert named >= {"accuracy_repeats", "accuracy_samples"}
    parser = build_parser()
    search = next(
        a.choices["search"] for a in parser._actions if getattr(a, "choices", None)
    )  # the subcommand's parser
    flags = {flag for action in search._actions for flag in action.option_strings}
    fields = {f.name for f in dataclasses.fields(autotune.SearchOptions)}
    for name in named:
        text = guard_words.option(name, 13)
        flag, field = re.match(r"(--[\w-]+) 13 / SearchOptions\((\w+)=13\)", text).groups()
        assert flag in flags and field in fields, text


def _sim_result() -> dict:
    run, _, _ = search(Model(speed=_speed), knobs={**SAFE, "precision": ["fp32", "bf16"]})
    return result_of(run).to_dict()


def test_no_two_lines_of_one_output_disagree() -> None:
    """The contradictions a newcomer found: a trial whose row said "outside tol." called
    "passed screening" by the summary with no word that it was judged again; the baseline's
    accuracy over its first seeds (the progress line) and over all of them (the summary);
    the table's throughput ratio beside a different headline, unexplained."""
    data = _sim_result()
    number = data["trials"][-1]["number"]
    data["trials"][-1]["screened_then"] = False
    data["answers"]["pending"] = {"trial": number, "speedup": 1.5, "confirmation": None}
    text = render_summary(data, detail=True)
    assert "passed screening (judged against all the baseline's seeds; its progress row" in text
    data["accuracy_guard"]["baseline_runs"] = [0.99, 0.985, 0.995, 0.99, 0.73, 0.78]
    data["search"]["accuracy_repeats"] = 3
    text = render_summary(data, detail=True)
    assert "(its first 3 seeds: 0.9900 ± 0.0050; seed 4 is furthest from the mean, at 0.7300)" in (
        text
    )
    data["throughput_ratio"] = data["speedup"] * 0.95
    first = render_summary(data, detail=True).splitlines()[2]
    assert f"(the table's ratio of medians: {data['throughput_ratio']:.2f}x)" in first
    # The short story shows no table, so no ratio of one beside its speed-up.
    short = render_summary(data).splitlines()[2]
    assert short.startswith("  speed-up: ") and "the table's ratio" not in short


def test_nothing_true_is_lost_between_the_story_and_the_detail(tmp_path, capsys) -> None:
    """The short story cuts the reasoning; the detail (``autotune show --detail``: the whole
    summary and every note) and the JSON still hold each kind of fact the long lines carried:
    every check's verdict with its bound and look, the seeds that would settle an unresolved
    look, the horizon and its reason, the baseline's spread and its lagging seed, the
    trials not started for time."""
    from test_anytime import KNOBS

    run, _, lines = search(_looks_twice(), knobs=KNOBS, timeout=240.0, accuracy_samples=1200)
    data = result_of(run).to_dict()
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["show", str(path), "--detail"]) == 0
    detail = capsys.readouterr().out
    story = "\n".join(lines)
    checked = [t for t in data["trials"] if t.get("confirmation")]
    assert checked
    for t in checked:  # each check's verdict, bound and looks: the JSON and the detail
        c = t["confirmation"]
        assert c["verdict"] and c["bound"] is not None and c["looks"] >= 1
        assert f"trial #{t['number']}" in detail and f"upper bound {c['bound']:+.4f}" in detail
        assert f"({c['looks']} look(s)" in detail
    assert re.search(r"trial #\d+: unresolved over 3 seeds; running \d+ more", story)
    assert "accuracy guard: horizon: runs of 1,200 samples vary by" in detail
    runs = data["accuracy_guard"]["baseline_runs"]
    assert f"over {len(runs)} seeds" in detail and "is furthest from the mean, at" in detail
    assert "skipped batch=" in detail and "expected to take" in detail
    # The story says a skip for time once; the others are the detail's.
    assert len(re.findall(r"skipped .*: expected to take", story)) == 1, story
    assert len(re.findall(r"skipped .*: expected to take", detail)) > 1, detail


_ROW = re.compile(r"^ +#\d+[* ] ")  # a trial's row in the story


def _story_fits(story: list[str]) -> list[str]:
    """The story's lines other than the trial rows; asserts each line fits in 120 and at most
    15 others come before the summary (the issue's bound)."""
    assert all(len(line) <= 120 for line in story), "\n".join(story)
    others = [line for line in story if not _ROW.match(line)]
    assert len(others) <= 15, "\n".join(others)
    return others


def _notes(run) -> str:
    from autotune._search.storage import read_notes

    return "\n".join(read_notes(run.bench.study))


def test_the_story_says_each_horizon_and_each_check_in_one_line(tmp_path) -> None:
    """A guard that lengthened its horizon and a check that took several looks: before, each
    horizon printed 4 lines (the pair's settings, the result, the plan, the advice) and each
    look one more; a busy README run printed 29 lines beside its rows. Now the story has one
    line per horizon tried (and the reason for the next), one per check; the rest is the
    detail's, whole."""
    from test_anytime import KNOBS
    from test_horizon import DIGITS, _took_off, digits

    def metric_at(cfg, seed: int, samples: int) -> float:
        base = 0.97 if _took_off(cfg, seed, samples) else 0.70
        own = 0.001 * math.sin(2.3 * seed + 1.0) if cfg.batch_size == 64 else 0.0
        return base + noise(seed, 0.003) - own

    story: list[str] = []
    run, _, _ = search(digits(metric_at=metric_at), knobs=DIGITS, timeout=60.0, n_train=400,
                       story=story)  # fmt: skip
    others = _story_fits(story)
    guard = [line for line in others if line.startswith("accuracy guard: baseline accuracy")]
    assert len(guard) == 2, "\n".join(story)  # two horizons, one line each
    assert any("trying 4,000" in line for line in others), "\n".join(story)
    assert not any("horizon:" in line for line in story)
    assert "accuracy guard: horizon: runs of 2,048 samples" in _notes(run)

    story = []
    run, _, _ = search(_looks_twice(), knobs=KNOBS, timeout=240.0, accuracy_samples=1200,
                       story=story)  # fmt: skip
    others = _story_fits(story)
    notes = _notes(run)
    assert re.search(r"trial #\d+: unresolved over 3 seeds; running \d+ more", notes), notes
    assert not any("running" in line and "more (" in line for line in story), "\n".join(story)
    checks = [line for line in others if line.startswith("accuracy check of trial #")]
    assert checks and all("paired seeds" in line for line in checks), "\n".join(story)


def test_a_busy_start_tells_its_story_within_the_bound() -> None:
    """A README run with a core taken for its first minute: the machine's state is said when
    it changes, in one line each, and the story stays within the bound."""

    def slowed(cfg, busy: float) -> float:
        return 1.0 if cfg.intra_op_threads == 1 or busy == 0 else 1.0 + 5.0 * busy

    story: list[str] = []
    model = Model(speed=_speed, busy=lambda t: 1.0 if t < 60 else 0.0, slowed=slowed)
    search(model, knobs=SAFE, timeout=240.0, story=story)
    others = _story_fits(story)
    machine = [line for line in others if line.startswith("machine:")]
    assert machine and any("free" in line for line in machine), "\n".join(story)


def test_a_long_change_wraps_at_its_clauses_within_the_width() -> None:
    """A busy README run's answer changed five knobs: its "change:" line read 132 characters
    and its accuracy line 131."""
    from autotune._search.words import wrap_clauses

    line = (
        "  change: batch 32 → 128, precision fp32 → bf16, lr constant@0.001 → cosine@0.002, "
        "channels_last off → on, optimizer default → fused"
    )
    wrapped = wrap_clauses(line)
    assert len(wrapped) == 2 and all(len(part) <= 120 for part in wrapped), wrapped
    assert wrapped[0].endswith(",") and wrapped[1].startswith("    ")
    assert ", ".join(p.strip().rstrip(",") for p in wrapped) == line.strip()
    assert wrap_clauses("short") == ["short"]
    # The summary's change line names the new values alone where both would not fit.
    base = TrainingConfig()
    cfg = base.replace(num_workers=1, persistent_workers=True, prefetch_factor=2,
                       precision="bf16", channels_last=True, optimizer_impl="foreach")  # fmt: skip
    both = change_words(changes(cfg, base))
    assert len("  change: " + both) > 120
    short = change_words(changes(cfg, base), width=110)
    assert short == (
        "workers → 1, prefetch → 2, precision → bf16, channels_last → on, optimizer → foreach"
    )


def _looks_twice() -> Model:
    """A BERT-like model on the simulated machine whose bf16 check is unresolved at its first
    look, then confirmed."""
    from test_anytime import bert_like

    base = bert_like()

    def metric(cfg, seed: int) -> float:
        value = base.metric(cfg, seed)
        if cfg.precision.value == "bf16":
            value += 0.001 * (seed % 2) - (0.0039 if seed % 2 == 1 else -0.0039)
        return value

    return dataclasses.replace(base, metric=metric)

"""The short story a newcomer reads whole (issue 68): after the trial table at most 12 lines,
none cut and none over 120 characters, its warnings chosen by importance from the result's
facts; everything else, each line whole, in ``--detail``."""

from __future__ import annotations

import copy
import dataclasses
import io
import re

import pytest

import autotune
from autotune import _run as api
from autotune._cli import build_parser
from autotune._device import describe_device
from autotune._display import print_summary
from autotune._progress import WIDTH
from autotune._result import story
from autotune._result.summary import render_summary
from autotune._search.record import NoCheck
from autotune.examples import tiny_data, tiny_model

from conftest import find

BASE = autotune.TrainingConfig(device="cpu")
WINNER = BASE.replace(channels_last=True, optimizer_impl="fused")
OPTIONS = {f.name for f in dataclasses.fields(autotune.SearchOptions)}
SETTLE = (
    "the paired differences vary by ±0.1200 (mean paired drop +0.0767): 75 seeds would confirm "
    "a harmless change at this spread 80% of the time (--accuracy-repeats 75 / "
    "SearchOptions(accuracy_repeats=75)), or a longer accuracy budget would settle it against "
    "the tolerance 0.01"
)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _warnings(lines: list[str]) -> list[str]:
    """The story's warnings, each sentence joined from its lines."""
    out: list[str] = []
    for line in lines:
        if line.startswith(story.MARK):
            out.append(line[len(story.MARK) :])
        elif line.startswith(story.INDENT) and out:
            out[-1] += " " + line.strip()
    return out


def _assert_a_story(text: str) -> None:
    lines = _lines(text)
    assert len(lines) <= story.STORY_LINES, text
    assert all(len(line) <= WIDTH for line in lines), text
    assert not any("(more:" in line or line.endswith("…") for line in lines), text


def _metrics(throughput: float) -> dict:
    return {
        "throughput": throughput,
        "throughput_spread": 0.02,
        "step_time": 32 / throughput,
        "one_time_cost": 0.1,
        "projected_training_time": 40960 / throughput,
        "peak_memory_bytes": 35 * 2**20,
        "validation_metric": 0.98,
        "metric_name": "accuracy",
        "planned_samples": 40960,
        "measured_as": "side by side over 3 rounds",
    }


def every_warning() -> dict:
    """A README-shaped result with every warning there is: a faster change of the numerics
    left unsettled, a baseline seed that lagged, a shared machine, faster candidates rejected,
    values of the space not measured, the guard's advice and a shorter accuracy plan."""
    pending = {
        "trial": 32,
        "speedup": 1.57,
        "confirmation": {
            "runs": [0.9] * 48,
            "verdict": "unresolved",
            "looks": 3,
            "drop": 0.0767,
            "bound": 0.1578,
            "lower": -0.0044,
            "tolerance": 0.01,
            "need": 75,
            "settle_reason": "confirm",
            "settle_facts": {"need": 75, "spread": 0.12, "mean": 0.0767},
        },
    }
    rejected = {
        "trial": 29,
        "speedup": 1.41,
        "confirmation": {"runs": [0.7, 0.71], "verdict": "rejected", "lower": 0.2},
    }
    return {
        "config": WINNER.to_dict(),
        "metrics": _metrics(1300.0),
        "baseline": {"config": BASE.to_dict(), "metrics": _metrics(1000.0)},
        "speedup": 1.30,
        "speedup_range": [1.18, 1.36],
        "speedup_rounds": 3,
        "throughput_ratio": 1.35,
        "tolerance": 0.01,
        "validation": {"metric": "accuracy", "higher_is_better": True},
        "accuracy_guard": {
            "metric": "accuracy",
            "higher_is_better": True,
            "tolerance": 0.01,
            "baseline_runs": [0.9844, 0.9951, 0.9902, 0.7627],
            "baseline_metric": 0.9331,
            "baseline_spread": 0.11,
            "initial_metric": 0.1,
            "learned": True,
            "wrong_way": False,
            "accuracy_samples": 3332,
            "lagging_run": {
                "seed": 3,
                "metric": 0.7627,
                "seeds": [3],
                "metrics": [0.7627],
                "others": [0.9844, 0.9951],
            },
            "advice_reason": "small_validation",
            "advice_facts": {"floor": 0.012, "need": 1200, "examples": 1000},
        },
        "answers": {
            "chosen": "safe",
            "safe": {"trial": 25, "speedup": 1.30},
            "fast": None,
            "pending": pending,
            "rejected": [rejected],
        },
        "environment": {
            "device": "cpu",
            "device_name": "Intel(R) Xeon(R) Processor",
            "torch": "2.13.0+cpu",
            "cpu_count": 2,
        },
        "search": {
            "study_name": "cnn_model-cnn_data-580347ba",
            "seconds": 296.0,
            "timeout": 300.0,
            "configs_measured": 22,
            "accuracy_repeats": 3,
            "accuracy_note": "the accuracy check trains on 3332 samples per run (81% of an epoch)",
            "machine": {"readings": 36, "shared": 12, "cores": 2, "others_max": 1.0},
            "unmeasured": [
                {"knob": "batch_size", "value": 16, "why": "the search ended before it came up"},
                {"knob": "batch_size", "value": 64, "why": "the search ended before it came up"},
            ],
            "model_fingerprint": {"hash": "db4dbccfd6ae", "type": "SmallCNN", "modules": 15},
            "data_fingerprint": {
                "hash": "e20fca143f4a",
                "train": {"type": "TensorDataset", "kind": "map", "length": 4096},
            },
            "warm_start": {"from": "best.json", "configs": 3},
        },
        "trials": [{"number": 32, "role": "candidate", "config": WINNER.to_dict()}],
    }


UNSETTLED = (
    "trial #32 (1.57x) changes the numerics and its accuracy is not settled: 75 paired seeds "
    "would settle it (--accuracy-repeats 75 / SearchOptions(accuracy_repeats=75)), or a longer "
    "--timeout."
)
LAGGING = (
    "the baseline's seed 3 reached accuracy 0.7627 where its others reached 0.9844-0.9951; if "
    "your run anneals its learning rate, give that schedule as --baseline."
)
SHARED = (
    "machine shared: other processes used up to ~1.0 of 2 cores in 12 of 36 measurements; "
    "ratios are of that state."
)


def test_the_story_keeps_the_three_warnings_that_matter_whole_and_the_detail_every_one() -> None:
    data = every_warning()
    text = render_summary(data)
    _assert_a_story(text)
    lines = _lines(text)
    assert lines[:4] == [
        "autotune result: 1.30x faster than the baseline (training time for 40,960 samples)",
        "  change: channels_last off → on, optimizer default → fused",
        "  speed-up: 1.30x, range 1.18-1.36x: the median of 3 side-by-side rounds' ratios",
        "  accuracy: unchanged: the change leaves the numerics alone (no accuracy risk)",
    ]
    # Chosen by rank, each whole: the unsettled answer, the lagging seed, the shared machine.
    assert _warnings(lines) == [UNSETTLED, LAGGING, SHARED]
    assert lines[-1] == (
        "  measured on: Intel(R) Xeon(R) Processor (cpu), torch 2.13.0+cpu, 2 CPUs; SmallCNN on "
        "TensorDataset of 4,096 items"
    )
    # The rest is the detail's: no table, no rejected trial, no unmeasured value, no advice.
    for gone in ("throughput (samples/s)", "#29", "batch_size", "validation set", "winner:"):
        assert gone not in text, gone
    detail = render_summary(data, detail=True)
    whole = detail.splitlines()
    assert f"  {'throughput (samples/s)':22}{'1,300':>16}{'1,000':>16}" in whole
    assert (
        "  ! trial #32 (1.57x) changes the numerics and passed screening, but its accuracy is not "
        "settled (mean drop +0.0767, upper bound +0.1578 over 48 seeds, tolerance 0.01): "
        + SETTLE
        + " (the baseline's run of seed 3 reached accuracy 0.7627 where its others reached "
        "0.9844-0.9951: the baseline's own training varies that much from one data order to "
        "the next, and a check's pair of that seed carries it)"
    ) in whole
    assert any(
        line.startswith("  ! the baseline's run of seed 3 reached accuracy 0.7627")
        for line in whole
    )
    assert any(
        line.startswith(
            "  ! machine shared: other processes used up to ~1.0 of 2 cores in 12 of 36"
        )
        for line in whole
    )
    assert "  trial #29 (1.41x) was faster but rejected" in detail
    assert (
        "  not measured: batch_size=16, batch_size=64 (the search ended before it came up)" in whole
    )
    assert "  ! the validation set's 1000 examples are too few for the tolerance 0.01" in detail
    assert "  ! the accuracy check trains on 3332 samples per run (81% of an epoch)" in whole
    assert "  fingerprints: model db4dbccfd6ae (SmallCNN: 15 modules" in detail
    assert "  warm start from best.json: 3 configs measured first" in whole
    assert "(the table's ratio of medians: 1.35x)" in whole[2] and "table" not in lines[2]


def test_a_result_written_before_settle_reasons_gets_a_whole_sentence() -> None:
    data = every_warning()
    c = data["answers"]["pending"]["confirmation"]
    for key in ("settle_reason", "settle_facts", "need"):
        del c[key]
    c["settle"] = SETTLE  # as a file written before the reason codes stored it
    lines = _lines(render_summary(data))
    assert _warnings(lines)[0] == (
        "trial #32 (1.57x) changes the numerics and its accuracy is not settled; `autotune show "
        "--detail` says what would settle it."
    )
    assert (
        f"but its accuracy is not settled (mean drop +0.0767, upper bound +0.1578 over 48 "
        f"seeds, tolerance 0.01): {SETTLE}" in render_summary(data, detail=True)
    )


def test_a_settle_reason_of_a_later_version_is_said_as_unknown_not_as_no_check() -> None:
    data = every_warning()
    data["answers"]["pending"]["confirmation"]["settle_reason"] = "a_later_reason"
    assert _warnings(_lines(render_summary(data)))[0] == (
        "trial #32 (1.57x) changes the numerics and its accuracy is not settled; `autotune show "
        "--detail` says what would settle it."
    )
    detail = render_summary(data, detail=True)
    assert "tolerance 0.01): its check did not settle (a_later_reason)" in detail
    assert "no check of it was made" not in detail


def test_a_lower_warning_never_takes_the_place_of_a_more_important_one() -> None:
    """With room for fewer lines than the warnings need, the choice stops at the first that
    does not fit: the unsettled answer (two lines) is kept before a one-line warning."""
    notes = [
        story.unmeasured(["batch_size"], 2),
        story.unsettled(32, "1.57x", reason="confirm", need=75, metric="accuracy"),
        story.shared(12, 36, cores=2, others_max=1.0, gpu=0),
    ]
    assert [n.rank for n in story.choose(notes, room=3)] == [
        story.Rank.UNSETTLED,
        story.Rank.SHARED,
    ]
    assert [n.rank for n in story.choose(notes, room=2)] == [story.Rank.UNSETTLED]
    assert story.choose(notes, room=1) == []
    assert len(story.choose(notes, room=10)) == story.MOST


def test_the_story_makes_room_for_a_long_change_and_two_line_warnings() -> None:
    data = every_warning()
    data["config"] = WINNER.replace(
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
        intra_op_threads=1,
        pin_memory=True,
        cudnn_benchmark=True,
    ).to_dict()
    data["search"]["machine"].update(gpu_others=3)  # the shared machine's sentence: two lines
    text = render_summary(data)
    _assert_a_story(text)
    assert _warnings(_lines(text))[:2] == [UNSETTLED, LAGGING]


def test_a_line_too_long_for_the_story_is_written_short_and_whole_in_the_detail() -> None:
    data = every_warning()
    data["speedup_range"] = None  # no side-by-side round: the headline's whole is 202 characters
    data["answers"].update(chosen="fast", fast={"trial": 31, "speedup": 1.67, "confirmation": {
        "runs": [0.9] * 12, "verdict": "confirmed", "drop": -0.002, "bound": 0.0067}})  # fmt: skip
    data["trials"].append({"number": 31, "config": WINNER.to_dict()})
    lines = _lines(render_summary(data))
    assert lines[0] == (
        "autotune result: 1.30x the baseline's throughput in the trials' own measurements (NOT "
        "measured side by side)"
    )
    assert lines[2] == (
        "  accuracy: confirmed within tolerance 0.01 (upper bound +0.0067, 12 paired seeds) at "
        "3,332 samples (8% of the run)"
    )
    # The rest of the story is the same warnings; the horizon's is the fourth, left out.
    assert _warnings(lines) == [UNSETTLED, LAGGING, SHARED]
    detail = render_summary(data, detail=True).splitlines()
    assert detail[0] == (
        "autotune result: NOT measured side by side (no side-by-side round measured it with the "
        "baseline): 1.30x the baseline's steady-state throughput, from the trials' own "
        "measurements, one-time costs left out"
    )
    assert any(x.startswith("  judged after 3,332 samples of training, 8% of the") for x in detail)


@pytest.mark.parametrize(
    ("reason", "need", "named"),
    [
        ("confirm", 75, "--accuracy-repeats 75 / SearchOptions(accuracy_repeats=75)"),
        ("reject", 9, "--accuracy-repeats 9 / SearchOptions(accuracy_repeats=9)"),
        ("min_pairs", 6, "--accuracy-repeats 6 / SearchOptions(accuracy_repeats=6)"),
        ("confirm", None, "--accuracy-repeats / SearchOptions(accuracy_repeats=...)"),
        ("one_seed", None, "--accuracy-repeats 2 / SearchOptions(accuracy_repeats=2)"),
        ("no_units", None, "autotune's own loop (find_best) records them"),
        ("not_learned", None, "--accuracy-samples / SearchOptions(accuracy_samples=...)"),
        ("spread_too_wide", None, "--accuracy-samples / SearchOptions(accuracy_samples=...)"),
        ("wrong_way", None, "--metric loss (metric='loss')"),
        ("sample_as_wide", None, "SearchOptions(val_fraction=...)"),
        ("sample_too_wide", None, "SearchOptions(val_fraction=...)"),
        ("a_reason_of_a_later_version", None, "`autotune show --detail` says what would"),
    ],
)
def test_each_settle_reason_names_what_would_settle_it_in_a_whole_short_sentence(
    reason: str, need: int | None, named: str
) -> None:
    note = story.unsettled(1234, "12.34x", reason=reason, need=need, metric="accuracy")
    assert note.text.startswith("trial #1234 (12.34x) changes the numerics and its accuracy is")
    assert named in note.text and note.text.endswith(".")
    lines = note.lines()
    assert len(lines) <= 2 and all(len(line) <= WIDTH for line in lines)
    assert " ".join(line.strip() for line in lines) == "! " + note.text


def test_every_other_warning_is_a_whole_sentence_of_at_most_two_lines() -> None:
    notes = [
        story.unchecked(1234, "12.34x"),
        story.unchecked(1234, "12.34x", "its accuracy runs were stopped"),
        story.unchecked(1234, "12.34x", "x" * 300),
        story.lagging(
            [3, 4, 5], [0.7627, 0.8535, 0.7], [0.9844, 0.9951], "accuracy", constant=True
        ),
        story.shared(1200, 3600, cores=128, others_max=100.5, gpu=12),
        story.shared(1, 2, cores=None, others_max=0.0, gpu=0),
        story.interrupted(),
        story.no_check(needed=False),
        story.no_check(needed=True, interrupted=True),
        story.no_check(needed=True, failed=NoCheck.STREAM_ENDED, failure="timeout"),
        story.short_horizon(3332, 40960),
        story.rejected([(n, "12.34x") for n in range(100, 110)]),
        story.unconfirmed(53, 12, 4),
        *(
            story.guard_advice(r, metric="accuracy")
            for r in (
                "wrong_way",
                "not_learned",
                "small_validation",
                "zero_tolerance",
                "baseline_one_seed",
            )
        ),
        story.plan_note(3332, 40960),
        story.unmeasured(["compile_mode", "batch_size", "gradient_accumulation_steps"] * 4, 30),
    ]
    for note in notes:
        lines = note.lines()
        assert note.text.endswith("."), note.text
        assert len(lines) <= 2 and all(len(line) <= WIDTH for line in lines), lines
    assert story.unchecked(7, "2.00x", "x" * 300).text == (
        "trial #7 (2.00x) changes the numerics and passed screening, but its check was stopped; "
        "`autotune show --detail` says why."
    )


def test_every_option_the_story_names_exists_as_a_flag_and_a_field() -> None:
    """A sentence names options a user can pass: each --flag one of `autotune search`, each
    SearchOptions(field=) one of SearchOptions."""
    search = next(
        a.choices["search"] for a in build_parser()._actions if getattr(a, "choices", None)
    )
    flags = {flag for action in search._actions for flag in action.option_strings}
    texts = [
        *(
            story.unsettled(1, "2.00x", reason=r, need=n, metric="accuracy").text
            for r in ("confirm", "one_seed", "not_learned", "wrong_way", "sample_as_wide")
            for n in (None, 5)
        ),
        *(
            story.guard_advice(r, metric="accuracy").text
            for r in ("wrong_way", "not_learned", "zero_tolerance", "baseline_one_seed")
        ),
        story.lagging([3], [0.7], [0.9, 0.95], "accuracy", constant=True).text,
        story.plan_note(1, 2).text,
    ]
    named_flags = {f for text in texts for f in re.findall(r"(--[a-z][\w-]*)", text)}
    named_fields = {f for text in texts for f in re.findall(r"SearchOptions\((\w+)=", text)}
    assert named_flags == {
        "--accuracy-repeats",
        "--accuracy-samples",
        "--timeout",
        "--metric",
        "--tolerance",
        "--baseline",
    }
    assert named_flags <= flags and named_fields <= OPTIONS
    assert named_fields == {"accuracy_repeats", "accuracy_samples", "val_fraction"}


def test_a_real_search_prints_a_short_story_and_its_detail_whole(fast_kwargs, monkeypatch) -> None:
    """A tiny real search that weighs a change of the numerics: what ``find_best``'s result
    and `autotune search` print is the short story; `--detail` has the table and the rest."""
    info = dataclasses.replace(describe_device("cpu"), supports_bf16=True)
    monkeypatch.setattr(api, "describe_device", lambda device: info)
    space = {"knobs": {"precision": ["fp32", "bf16"], "num_workers": [0, 1]}}
    result = find(
        tiny_model(),
        tiny_data(),
        n_trials=3,
        space=space,
        tolerance=0.05,
        **(fast_kwargs | {"accuracy_samples": 512}),
    )
    data = result.to_dict()
    assert data["accuracy_guard"] is not None  # a change of the numerics was weighed
    text = render_summary(data)
    _assert_a_story(text)
    assert str(result) == text == result.summary()
    assert text.startswith("autotune result: ")
    assert "  apply: " in text and text.splitlines()[-1].startswith("  measured on: ")
    printed = io.StringIO()
    print_summary(data, printed)
    assert printed.getvalue() == text + "\n"
    detail = render_summary(data, detail=True)
    assert "throughput (samples/s)" not in text and "throughput (samples/s)" in detail
    for line in ("  winner:   ", "  accuracy guard: tolerance 0.05", "  fingerprints: model "):
        assert line in detail and line not in text, line
    # Nothing of the story is lost in the detail: each of its lines (a warning's facts: the
    # detail words them whole) is there, but the machine line, which the detail splits.
    kept = [x for x in _lines(text) if not x.startswith(("  !", "    ", "  measured on"))]
    assert all(line in detail.splitlines() for line in kept), (kept, detail)


def test_a_pipe_prints_the_story_and_detail_prints_everything(tmp_path) -> None:
    data = every_warning()
    out = io.StringIO()
    print_summary(copy.deepcopy(data), out)
    assert out.getvalue() == render_summary(data) + "\n"
    out = io.StringIO()
    print_summary(data, out, detail=True)
    assert out.getvalue() == render_summary(data, detail=True) + "\n"

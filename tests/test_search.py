"""find_best end to end on tiny models: fakes for what cannot happen on this CPU."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import statistics
import time
import weakref
from typing import ClassVar

import optuna
import pytest
import torch
from torch import nn

import autotune
from autotune import _run as api
from autotune._device import describe_device
from autotune._guard.plan import AccuracyPlan, PlanNote
from autotune._result.summary import render_summary
from autotune._search import baseline as baseline_module
from autotune._search.storage import read_settings
from autotune._trial.failures import FailureReason
from autotune._trial.runner import run_trial
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET, find


class Recorder(nn.Module):
    """A tiny classifier that records the training batch sizes it sees and can fake failures."""

    seen: ClassVar[list[int]] = []  # shared by every deep copy a trial makes

    def __init__(
        self,
        *,
        oom_above: int | None = None,
        nan_in_autocast: bool = False,
        garbage_eval_in_autocast: bool = False,
        garbage_unless_seed0: bool = False,
        garbage_on_odd_seeds: bool = False,
        slow_fp32: bool = False,
    ) -> None:
        super().__init__()
        self.net = tiny_model()
        self.oom_above = oom_above
        self.nan_in_autocast = nan_in_autocast
        self.garbage_eval_in_autocast = garbage_eval_in_autocast
        self.garbage_unless_seed0 = garbage_unless_seed0
        self.garbage_on_odd_seeds = garbage_on_odd_seeds
        self.slow_fp32 = slow_fp32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        autocast = torch.is_autocast_enabled("cpu")
        if self.training:
            Recorder.seen.append(x.shape[0])
            if self.slow_fp32 and not autocast:
                time.sleep(0.01)  # makes bf16 the faster config, whatever this CPU does
            if self.oom_above is not None and x.shape[0] > self.oom_above:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (faked)"
                )
        out = self.net(x)
        if self.nan_in_autocast and autocast:
            return out * float("nan")
        lucky = self.garbage_unless_seed0 and torch.initial_seed() == 0
        if self.garbage_eval_in_autocast and autocast and not self.training and not lucky:
            return torch.zeros_like(out)  # always predicts class 0: accuracy collapses
        odd = torch.initial_seed() % 2 == 1
        if self.garbage_on_odd_seeds and autocast and not self.training and odd:
            return torch.zeros_like(out)  # one seed in two collapses: a noisy candidate
        return out


WARM_BUDGET = dataclasses.replace(FAST_BUDGET, warmup_steps=3, timed_samples=192)


@pytest.fixture(autouse=True)
def _clear_recorder():
    Recorder.seen = []
    yield
    Recorder.seen = []


@pytest.fixture
def bf16_capable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend this CPU has native bf16, so the precision knob is searched everywhere."""
    info = dataclasses.replace(describe_device("cpu"), supports_bf16=True)
    monkeypatch.setattr(api, "describe_device", lambda device: info)


def test_faked_oom_above_a_batch_size(fast_kwargs) -> None:
    model = Recorder(oom_above=48)
    result = find(
        model,
        tiny_data(),
        space={"knobs": {"batch_size": [16, 32, 64, 128]}},
        n_trials=4,
        sampler=optuna.samplers.BruteForceSampler(seed=0),
        **fast_kwargs,
    )
    sizes = [t.config.batch_size for t in result.trials]
    # The baseline (32) first, then the first guess (largest <= 4x the baseline), then the rest
    # of the grid; the baseline is a grid point, so the grid is exhausted after 3 candidates.
    assert sizes[:2] == [32, 128]
    assert sorted(sizes) == [16, 32, 64, 128]
    failed = {t.config.batch_size: t.failure for t in result.trials if t.failure}
    assert failed == {64: "oom", 128: "oom"}
    assert result.failures == {"oom": 2}
    assert result.config.batch_size in (16, 32)
    # Trials that ran out of memory were recorded, never trained further, never win.
    assert set(Recorder.seen) == {16, 32, 64, 128}
    assert all(not t.feasible for t in result.trials if t.failure)
    data = result.to_dict()
    assert data["search"]["failures"] == {"oom": 2}


def test_oom_trial_releases_its_memory() -> None:
    refs: list[weakref.ref] = []

    class Hog(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            activations = torch.ones(4_000_000)  # 16 MB held by this frame when it raises
            refs.append(weakref.ref(activations))
            refs.append(weakref.ref(self))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 MiB")

    task = make_task(autotune.Task(metric="accuracy"))
    data = tiny_data()
    workload = Workload(model=Hog(), train=data, val=data, task=task)
    outcome = run_trial(autotune.TrainingConfig(), workload, FAST_BUDGET)
    assert outcome.failure is FailureReason.OOM
    assert "out of memory" in outcome.message
    assert refs and all(r() is None for r in refs)  # the trial's model and tensors are gone


def test_nan_under_reduced_precision_keeps_fp32(fast_kwargs, bf16_capable) -> None:
    result = find(
        Recorder(nan_in_autocast=True),
        tiny_data(),
        space={"knobs": {"precision": ["fp32", "bf16"], "batch_size": [32, 64]}},
        n_trials=4,
        sampler=optuna.samplers.BruteForceSampler(seed=0),
        **fast_kwargs,
    )
    bf16 = [t for t in result.trials if t.config.precision.value == "bf16"]
    assert bf16 and all(t.failure == "diverged" for t in bf16)
    assert all("loss became nan" in t.message for t in bf16)
    assert result.config.precision.value == "fp32"
    assert result.failures == {"diverged": len(bf16)}


def test_accuracy_constraint_rejects_a_candidate_that_drops_too_much(
    fast_kwargs, bf16_capable
) -> None:
    storage = optuna.storages.InMemoryStorage()
    result = find(
        Recorder(garbage_eval_in_autocast=True, slow_fp32=True),
        tiny_data(),
        space={"knobs": {"precision": ["fp32", "bf16"]}},
        n_trials=2,
        storage=storage,
        study_name="guard",
        tolerance=0.05,
        **fast_kwargs,
    )
    bf16 = next(t for t in result.trials if t.config.precision.value == "bf16")
    assert bf16.failure is None and bf16.accuracy_checked
    assert bf16.metric < result.guard.baseline_metric - 0.05
    assert bf16.screened is False and bf16.confirmation is None  # not worth confirming
    assert not bf16.feasible
    assert result.config.precision.value == "fp32"
    # The guard reaches the sampler as an Optuna constraint on the trial.
    study = optuna.load_study(study_name="guard", storage=storage)
    frozen = study.trials[bf16.number]
    assert frozen.constraints["accuracy"] > 0
    assert frozen.constraints["failed"] == 0


@pytest.mark.slow
def test_winner_must_pass_confirmation_over_several_seeds(fast_kwargs, bf16_capable) -> None:
    """Screening sees one lucky seed; the confirmation over the seeds after it rejects it."""
    result = find(
        Recorder(garbage_eval_in_autocast=True, garbage_unless_seed0=True, slow_fp32=True),
        tiny_data(),
        space={"knobs": {"precision": ["fp32", "bf16"]}},
        n_trials=1,
        tolerance=0.05,
        # Trained enough to be accurate; warm-up long enough for bf16's first-use kernel set-up.
        **(fast_kwargs | {"accuracy_samples": 2048, "budget": WARM_BUDGET}),
    )
    assert result.guard.baseline_metric > 0.9
    bf16 = next(t for t in result.trials if t.config.precision.value == "bf16")
    assert bf16.metric > result.guard.baseline_metric - 0.05  # passed screening with seed 0
    assert bf16.confirmed is False and not bf16.feasible, [t.to_dict() for t in result.trials]
    # The lucky screening run chose the candidate and is no pair: the check's fresh seeds (1
    # and 2: the baseline's runs agree nearly example by example, so its first look takes the
    # two pairs it has) show the drop at its first look. (Counting the screening run as a
    # pair, the seeds could not tell the lucky seed from a real effect, and the search bought
    # more until they did.)
    c = bf16.confirmation
    assert c.verdict.value == "rejected" and c.first_seed == 1 and len(c.runs) == 2
    assert c.looks == 1 and c.lower > 0.05
    assert result.config.precision.value == "fp32"
    assert "was faster but rejected" in result.summary(detail=True)
    assert result.to_dict()["trials"][bf16.number]["confirmation"]["passed"] is False


@pytest.mark.slow
def test_confirmed_winner_reports_the_mean_over_seeds(fast_kwargs, bf16_capable) -> None:
    result = find(
        Recorder(slow_fp32=True),
        tiny_data(),
        space={"knobs": {"precision": ["bf16"]}},
        n_trials=1,
        tolerance=1.0,
        **(fast_kwargs | {"budget": WARM_BUDGET}),
    )
    assert result.config.precision.value == "bf16"
    assert result.winner.confirmed is True
    runs = result.winner.confirmation.runs
    # Two pairs: the tiny task's baseline runs agree nearly example by example (first_pairs).
    assert len(runs) == 2 and runs[0] == result.winner.metric
    assert result.metrics["validation_metric"] == pytest.approx(sum(runs) / 2)
    assert result.metrics["accuracy_confirmed"] is True
    assert result.chosen == "fast" and result.fast.number == result.winner.number
    assert "confirmed over 2 paired seeds" in result.summary(detail=True)
    # What 2 pairs cannot rule out is said beside the confirmation: 0.9^2 = 81%.
    assert "a failure mode of 1 run in 10 would go unseen in 2 pairs 81% of the time" in (
        result.summary(detail=True)
    )
    assert "chosen: the fast answer" in result.summary(detail=True)


def test_n_trials_counts_the_candidates(fast_kwargs) -> None:
    result = find(tiny_model(), tiny_data(), n_trials=7, space="quick", **fast_kwargs)
    assert [t.role for t in result.trials].count("candidate") == 7


def test_baseline_is_measured_first_and_reported(fast_kwargs) -> None:
    result = find(tiny_model(), tiny_data(), n_trials=1, space="quick", **fast_kwargs)
    first = result.trials[0]
    assert first.role == "baseline" and first.number == 0
    assert result.baseline == autotune.TrainingConfig(device="cpu")
    assert result.baseline_metrics["throughput"] > 0
    # One candidate: a knob that leaves the numerics alone, so no accuracy check was needed.
    assert result.trials[1].safe and result.guard is None
    assert "no accuracy check was made" in repr(result)
    if result.round_speedups:
        logs = [math.log(s) for s in result.round_speedups]
        assert result.speedup == pytest.approx(math.exp(statistics.fmean(logs)))
    else:
        assert result.speedup == pytest.approx(
            result.baseline_trial.projected_time / result.winner.projected_time
        )


def test_a_baseline_that_stays_the_winner_is_said_plainly(fast_kwargs) -> None:
    """When nothing beat the baseline, the summary says to keep it."""
    result = find(tiny_model(), tiny_data(), n_trials=1, space="quick", **fast_kwargs)
    data = result.to_dict()
    data["config"] = data["baseline"]["config"]
    data["metrics"] = data["baseline"]["metrics"]
    text = render_summary(data, detail=True)
    assert text.startswith(
        "autotune result: no config trained faster than yours here: keep your settings "
        "(the baseline's)"
    )


def test_a_win_verified_by_an_earlier_run_of_the_study_is_not_a_negative_time(
    fast_kwargs,
) -> None:
    """A resumed study whose first win was verified by its earlier run: the summary says so
    (it printed "first verified win after -296 s"); a win in this run keeps its seconds."""
    result = find(tiny_model(), tiny_data(), n_trials=1, space="quick", **fast_kwargs)
    data = result.to_dict()
    data["search"].update(first_win_seconds=None, first_win_earlier=True)
    assert "first verified win in an earlier run of this study;" in render_summary(
        data, detail=True
    )
    data["search"].update(first_win_seconds=12.0, first_win_earlier=False)
    assert "first verified win after 12 s;" in render_summary(data, detail=True)


def test_a_pending_candidate_never_checked_is_said_to_be_unchecked_not_out_of_time(
    fast_kwargs,
) -> None:
    """The README run with a core busy: #21 passed screening at 3.67x, was not checked while
    it screened slower than the answer then leading (3.74x), and was listed after the rounds
    measured the answer at 3.17x with "its check could not be made in the time left", a
    reason the result does not know. It now says what it knows: no check was made."""
    result = find(tiny_model(), tiny_data(), n_trials=1, space="quick", **fast_kwargs)
    data = result.to_dict()
    data["answers"]["pending"] = {"trial": 21, "speedup": 3.67, "confirmation": None}
    text = render_summary(data, detail=True)
    assert "! trial #21 (3.67x) changes the numerics and passed screening, but its accuracy" in text
    assert "is not settled: no check of it was made before the search ended" in text
    assert "could not be made in the time left" not in text


def test_the_summary_says_what_it_knows_of_checks_rounds_and_repeats(fast_kwargs) -> None:
    """What a review found the summary saying beyond what the result knows: "no time was left"
    for rounds an interruption cut; "no time for the baseline's accuracy runs" for a space
    with nothing that changes the numerics; the baseline counted as a repeated proposal;
    "no check was made" of a check that was stopped; the validation row called a screening
    measurement."""
    space = {"knobs": {"num_workers": [0, 1], "channels_last": [False, True]}}
    result = find(tiny_model(), tiny_data(), n_trials=2, space=space, **fast_kwargs)
    data = result.to_dict()
    search = data["search"]
    # Loader and memory-format knobs only: nothing changes the numerics, nothing to check.
    assert search["numerics_searched"] is False and data.get("accuracy_guard") is None
    data["speedup_range"] = None
    data["config"] = {**data["config"], "batch_size": 2 * data["config"]["batch_size"]}
    text = render_summary(data, detail=True)
    assert "! no accuracy check was needed: no knob searched changes the numerics" in text
    assert "NOT measured side by side (no side-by-side round measured it with the baseline)" in text
    assert "val accuracy: the mean of the config's accuracy runs" in text
    search.update(interrupted=True, numerics_searched=True)
    text = render_summary(data, detail=True)
    assert "NOT measured side by side (the search was interrupted before its rounds)" in text
    assert "no accuracy check was made (the search was interrupted before the baseline's" in text
    search.update(interrupted=False, proposals_repeated=0, configs_measured=2)
    text = render_summary(data, detail=True)
    assert "ended before the baseline's accuracy runs; its progress lines say why" in text
    assert "search: 2 configs measured in" in text
    search.update(proposals_repeated=3)
    assert "2 configs measured (and 3 proposals of a config measured already)" in render_summary(
        data, detail=True
    )
    stopped = {"runs": [0.9], "verdict": "unresolved", "failure": "its accuracy runs were stopped"}
    data["answers"]["pending"] = {"trial": 7, "speedup": 2.0, "confirmation": stopped}
    assert "is not settled: its check was stopped: its accuracy runs were stopped" in (
        render_summary(data, detail=True)
    )


def test_a_summary_without_a_fast_answer_says_why_the_changes_of_the_numerics_made_none() -> None:
    """A README run beside a busy core tried 53 changes of the numerics and confirmed none; its
    summary said only "chosen: the safe answer". It now counts why, from the trials' own
    reasons (a rejected or unsettled one has its own line)."""
    from autotune._result.summary import _unconfirmed

    def trial(**kw):
        return {"role": "candidate", "safe": False, "reused": False, "failure": None,
                "screened": None, "message": None, **kw}  # fmt: skip

    trials = [
        {"role": "baseline", "safe": True},
        trial(safe=True),
        trial(no_accuracy_run="could not win"),  # slower than the best verified config
        trial(no_accuracy_run="could not win"),  # it trains as an answer already does
        trial(screened=False),
        trial(no_accuracy_run="no time"),  # ... and the check after it
        trial(no_accuracy_run="no time", message="reworded: the count reads the reason"),
        trial(reused=True, no_accuracy_run="could not win"),
        trial(failure="oom"),
        trial(no_accuracy_run="no guard"),  # said on its own line
    ]  # fmt: skip
    assert _unconfirmed({"trials": trials}) == (
        "2 could not beat the answer (screened slower, or trained an answer's steps); 1 failed "
        "screening (outside the tolerance); 2 had no time left for their accuracy runs"
    )
    assert _unconfirmed({"trials": trials[:2]}) is None


@pytest.mark.slow
def test_a_candidate_that_collapses_on_one_seed_in_two_is_rejected_once_seeds_show_it(
    fast_kwargs, bf16_capable
) -> None:
    """bf16 is faster and its seed-0 run is as good, but one seed in two collapses: three
    seeds cannot bound the drop, so the search buys more until the lower bound of the drop is
    beyond the tolerance. The safe answer is chosen, and the summary shows that bound."""
    result = find(
        Recorder(garbage_on_odd_seeds=True, slow_fp32=True),
        tiny_data(),
        space={"knobs": {"precision": ["fp32", "bf16"]}},
        n_trials=1,
        tolerance=0.05,
        **(fast_kwargs | {"budget": WARM_BUDGET}),
    )
    bf16 = next(t for t in result.trials if t.config.precision.value == "bf16")
    c = bf16.confirmation
    assert bf16.screened and c.verdict.value == "rejected" and len(c.runs) > 3
    assert result.chosen == "safe" and result.fast is None and result.pending is None
    text = result.summary(detail=True)
    assert f"trial #{bf16.number}" in text and "was faster but rejected" in text
    assert f"lower confidence bound over {len(c.runs)} paired seeds, {c.lower:+.4f}" in text
    answers = result.to_dict()["answers"]
    assert answers["chosen"] == "safe" and answers["rejected"][0]["trial"] == bf16.number


def test_user_baseline_dict_is_used(fast_kwargs) -> None:
    result = find(
        tiny_model(),
        tiny_data(),
        n_trials=1,
        space="quick",
        baseline={"batch_size": 16, "lr_schedule": {"peak_lr": 0.01}},
        **fast_kwargs,
    )
    assert result.baseline.batch_size == 16
    assert result.baseline.lr_schedule.peak_lr == 0.01


def test_callers_model_and_rng_are_unchanged(fast_kwargs) -> None:
    model = autotune.examples.SmallCNN(width=4)
    before = copy.deepcopy(model.state_dict())
    rng = torch.random.get_rng_state()
    data = autotune.examples.AugmentedImages(64)
    find(
        model,
        data,
        n_trials=2,
        space={"knobs": {"checkpointing": [0, 1], "channels_last": [False, True]}},
        **fast_kwargs,
    )
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not any(hasattr(m, "_autotune_checkpointed") for m in model.modules())
    assert not any("forward" in vars(m) for m in model.modules())
    assert model.blocks[0].conv.weight.is_contiguous()  # not switched to channels_last
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_a_baseline_that_did_not_learn_is_said_plainly(fast_kwargs) -> None:
    """256 samples do not move the tiny model off its untrained accuracy: no change of the
    numerics can be confirmed, the search says so, and goes on with the knobs that leave the
    numerics alone."""
    lines: list[str] = []
    result = find(
        tiny_model(),
        tiny_data(256),
        n_trials=3,
        space={"knobs": {"batch_size": [32, 64], "num_workers": [0, 1]}},
        progress=lines.append,
        **(fast_kwargs | {"accuracy_samples": 256}),
    )
    assert result.guard is not None and not result.guard.learned
    assert result.guard.accuracy_samples == 256
    assert any("did not learn measurably" in line for line in lines)
    assert "barely moved from the untrained model's" in result.summary(detail=True)
    assert result.fast is None and all(t.safe for t in result.trials if t.feasible)


def test_the_baseline_accuracy_plan_is_used_and_its_note_said(fast_kwargs, monkeypatch) -> None:
    plan = AccuracyPlan(
        samples=1536, note=PlanNote.EPOCH_SHARE, n_train=2048, repeats=3, epoch_timeout=90.0
    )
    monkeypatch.setattr(baseline_module, "plan_accuracy_budget", lambda **kw: plan)
    lines: list[str] = []
    result = find(
        tiny_model(),
        tiny_data(),
        n_trials=1,
        space={"knobs": {"batch_size": [32, 64]}},
        progress=lines.append,
        **(fast_kwargs | {"accuracy_samples": None}),
    )
    assert result.guard.accuracy_samples == 1536
    assert result.search["accuracy_samples"] == 1536
    assert any("trains on 1536 samples per run" in line for line in lines)
    assert "trains on 1536 samples per run" in result.summary(detail=True)


def test_unguided_search_measures_exactly_what_the_sampler_proposes(tmp_path, fast_kwargs) -> None:
    """guided=False (exhaustive grids, plain random search): no enqueued first guess, no
    pruning, every config's accuracy checked where its numerics differ from the baseline's."""
    storage = f"sqlite:///{tmp_path / 'grid.db'}"
    knobs = {"batch_size": [32, 64], "lr_schedule": ["constant", "cosine"]}
    result = find(
        tiny_model(),
        tiny_data(),
        n_trials=10,
        space={"knobs": knobs},
        sampler=optuna.samplers.BruteForceSampler(seed=0),
        guided=False,
        storage=storage,
        study_name="grid",
        **fast_kwargs,
    )
    candidates = [t for t in result.trials if t.role == "candidate"]
    # The grid counts the baseline (32, constant) as one of its points and measures the rest.
    measured = [(t.config.batch_size, t.config.lr_schedule.kind.value) for t in candidates]
    assert sorted(measured) == [(32, "cosine"), (64, "constant"), (64, "cosine")]
    base = result.baseline_trial.config.numerics_key()
    for t in candidates:
        assert t.failure is None
        assert t.accuracy_checked or t.config.numerics_key() == base
    study = optuna.load_study(study_name="grid", storage=storage)
    enqueued = [t.number for t in study.trials if "fixed_params" in t.system_attrs]
    assert enqueued == [result.baseline_trial.number]  # only the baseline was placed by hand
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]


def test_knobs_that_leave_the_numerics_alone_come_first(fast_kwargs) -> None:
    """The safe stage tries each numerics-free knob on the best safe config, as throughput-only
    trials; only then do candidates that change the numerics come, after the baseline's
    accuracy runs."""
    lines: list[str] = []
    # (torch runs 1 thread in tests, so threads=1 would be the baseline's own value.)
    knobs = {"batch_size": [32, 64], "num_workers": [0, 1], "intra_op_threads": [None, 2]}
    result = find(
        tiny_model(),
        tiny_data(),
        # Room for a third safe trial (a thread count that measures faster gets the workers
        # knob on top of it) and the fast stage after it.
        n_trials=6,
        space={"knobs": knobs},
        progress=lines.append,
        **fast_kwargs,
    )
    candidates = [t for t in result.trials if t.role == "candidate"]
    assert [t.safe for t in candidates[:2]] == [True, True]
    assert not any(t.accuracy_checked for t in candidates[:2])
    first = candidates[0].config  # the CPU thread count first: it sets every step's cost
    assert (first.num_workers, first.intra_op_threads) == (0, 2)
    second = candidates[1].config
    assert second.num_workers == 1  # on whichever thread count was faster
    rows = [line.split() for line in lines if re.match(r" *#\d+\*? ", line)]
    stages = [row[1] for row in rows]  # each row: the trial, its stage, ...
    assert stages[:2] == ["safe", "safe"] and "fast" in stages
    assert "safe" not in stages[stages.index("fast") :]  # every safe trial came first
    guard_at = next(i for i, line in enumerate(lines) if line.startswith("accuracy guard:"))
    first_fast = next(i for i, line in enumerate(lines) if re.match(r" *#\d+\*? +fast ", line))
    assert guard_at < first_fast


def test_guided_must_be_a_bool(fast_kwargs) -> None:
    with pytest.raises(TypeError, match="`guided` must be True or False"):
        find(tiny_model(), tiny_data(), guided="no", **fast_kwargs)  # type: ignore[arg-type]


def test_resume_continues_the_same_study(tmp_path, fast_kwargs) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    kwargs = dict(space="quick", storage=storage, study_name="s", **fast_kwargs)
    first = find(tiny_model(), tiny_data(), n_trials=2, **kwargs)
    assert len(first.trials) == 3
    second = find(tiny_model(), tiny_data(), n_trials=4, **kwargs)
    assert len(second.trials) == 5
    assert [t.role for t in second.trials].count("baseline") == 1
    assert second.trials[0].measurement == first.trials[0].measurement  # not re-measured
    assert {t.number for t in first.trials} <= {t.number for t in second.trials}


def test_save_writes_the_documented_json(tmp_path, fast_kwargs) -> None:
    result = find(tiny_model(), tiny_data(), n_trials=1, space="quick", **fast_kwargs)
    path = result.save(tmp_path / "out" / "best.json")
    data = json.loads(path.read_text())
    for key in (
        "schema_version",
        "config",
        "metrics",
        "baseline",
        "speedup",
        "tolerance",
        "environment",
        "search",
    ):
        assert key in data
    assert data["config"] == result.config.to_dict()
    assert autotune.load_config(path) == result.config
    assert data["metrics"]["throughput"] == pytest.approx(result.winner.throughput)
    assert data["environment"]["torch"] == torch.__version__
    assert data["search"]["trials"] == 2
    assert list(tmp_path.joinpath("out").iterdir()) == [path]  # no temp file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # readable like any written file


def test_failed_write_keeps_the_previous_file(tmp_path, fast_kwargs, monkeypatch) -> None:
    result = find(tiny_model(), tiny_data(), n_trials=1, space="quick", **fast_kwargs)
    path = tmp_path / "best.json"
    path.write_text("previous")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("autotune._result.files.os.replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        result.save(path)
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["best.json"]


@pytest.mark.parametrize(
    ("room", "asked", "limit"),
    [
        (10**6, [16, 32], 128),  # 2x headroom even at the largest batch: nothing more tried
        (100, [16, 32], 96),  # the fitted line predicts 100: 96 (a multiple of 8), not 64
        (60, [16, 32], 56),  # 1 GB + 60 MB: batch 64 would not fit, 56 does
    ],
)
def test_memory_probe_limits_the_batch_sizes_trials_try(
    fast_kwargs, monkeypatch, room: int, asked: list[int], limit: int
) -> None:
    """A fake device whose peak is 1 GB + 1 MB per sample. On a CPU the fitted line is trusted
    (the process's memory shows what fits): no run at a large batch to confirm it."""
    from autotune._search import loop
    from autotune._trial import probe

    peaks_asked: list[int] = []

    def fake_peak(executor, cfg, time_limit):
        peaks_asked.append(cfg.batch_size)
        return 10**9 + 10**6 * cfg.batch_size

    monkeypatch.setattr(probe, "_peak", fake_peak)
    monkeypatch.setattr(loop, "usable_memory", lambda device: 10**9 + 10**6 * room)
    result = find(
        Recorder(),
        tiny_data(),
        space={"knobs": {"batch_size": [16, 32, 64, 128]}},
        n_trials=3,
        **fast_kwargs,
    )
    assert peaks_asked == asked
    info = result.to_dict()["search"]["memory_probe"]
    assert info["limits"] == {"fp32/ckpt0": limit}
    assert all(t.config.batch_size <= limit for t in result.trials)
    assert max(Recorder.seen) <= limit  # no trial ever trained a batch that cannot fit
    # The largest batch that fits between two listed sizes is a candidate too: the first
    # guess (the largest batch that fits, up to 4x the baseline's) takes it.
    assert limit in {t.config.batch_size for t in result.trials}


# -- Gradient accumulation: keeping the global batch --------------------------------------------


def test_keep_global_batch_splits_a_baseline_batch_that_does_not_fit(fast_kwargs) -> None:
    """The baseline's batch of 64 runs out of memory (faked above 32): the search measures it
    as 2 micro-batches of 32, the same global batch, and tries the other splits as safe
    candidates: the baseline's model, so no accuracy runs at all."""
    lines: list[str] = []
    result = find(
        Recorder(oom_above=32),
        tiny_data(),
        baseline={"batch_size": 64},
        space={"knobs": {"gradient_accumulation_steps": [1, 2, 4]}},
        keep_global_batch=True,
        n_trials=4,
        progress=lines.append,
        **fast_kwargs,
    )
    assert any("batch 64 x 1 does not fit in memory; trying 32 x 2" in line for line in lines)
    base = result.baseline
    assert (base.batch_size, base.gradient_accumulation_steps) == (32, 2)
    assert all(t.config.global_batch_size == 64 for t in result.trials)
    splits = {
        (t.config.batch_size, t.config.gradient_accumulation_steps): t
        for t in result.trials
        if t.role == "candidate"
    }
    assert set(splits) == {(64, 1), (16, 4)}
    assert splits[64, 1].failure == "oom"
    assert splits[16, 4].safe and splits[16, 4].feasible and splits[16, 4].failure is None
    assert not any(t.accuracy_checked for t in result.trials)
    assert not any(line.startswith("accuracy guard:") for line in lines)  # no runs at all
    assert result.config.global_batch_size == 64 and result.config.batch_size <= 32
    notes = result.to_dict()["search"]["space_notes"]
    assert any("global batch of 64 samples" in n for n in notes)
    assert any("measured as 32 x 2, the same global batch" in n for n in notes)


def test_a_global_batch_larger_than_the_training_set_is_not_started(fast_kwargs) -> None:
    """1,843 training samples (2,048 less the validation split): batch 32 is kept by the
    space, but 32 x 64 accumulation steps is a global batch of 2,048, not one full batch to
    train on.
    It is failed before it runs, with the reason, instead of failing in the loader ("produced
    no batches") after a worker started; the search goes on."""
    lines: list[str] = []
    result = find(
        tiny_model(),
        tiny_data(),
        space={"knobs": {"gradient_accumulation_steps": [1, 64, 128]}},
        n_trials=3,
        progress=lines.append,
        **fast_kwargs,
    )
    assert any(
        "global batch of 2048 samples (batch 32 x 64 accumulation steps) is larger than the "
        "1,843 training samples" in line
        for line in lines
    ), "\n".join(lines)
    assert not any("produced no batches" in line for line in lines)
    skips = [line for line in lines if line.startswith("skipped ")]
    assert len(skips) == len(set(skips))  # each said once, however often the sampler asks
    assert {t.config.gradient_accumulation_steps for t in result.trials} == {1}
    assert not result.failures


class NormedRecorder(nn.Module):
    """A tiny classifier with a batch-norm layer (its statistics see each micro-batch), slow on
    batches above 32: a split of 64 is then the faster config, worth an accuracy run."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > 32:
            time.sleep(0.02)
        out: torch.Tensor = self.net(x)
        return out


def test_keep_global_batch_gives_a_batch_norm_model_the_accuracy_check(fast_kwargs) -> None:
    result = find(
        NormedRecorder(),
        tiny_data(),
        baseline={"batch_size": 64},
        space={"knobs": {"gradient_accumulation_steps": [1, 2]}},
        keep_global_batch=True,
        n_trials=1,
        sampler=optuna.samplers.BruteForceSampler(seed=0),
        **fast_kwargs,
    )
    (split,) = [t for t in result.trials if t.role == "candidate"]
    assert (split.config.batch_size, split.config.gradient_accumulation_steps) == (32, 2)
    assert not split.safe and split.accuracy_checked  # batch norm saw batches of 32
    notes = result.to_dict()["search"]["space_notes"]
    assert any("batch-norm layers" in n and "accuracy check" in n for n in notes)


# -- Every listed value is measured -------------------------------------------------------------


@pytest.fixture
def compile_capable(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Pretend this CPU can compile, and make torch.compile an instant no-op that records the
    modes asked for (a real inductor compile takes a minute here)."""
    info = dataclasses.replace(describe_device("cpu"), supports_compile=True)
    monkeypatch.setattr(api, "describe_device", lambda device: info)
    modes: list[str | None] = []

    def fake_compile(model, *, mode=None, dynamic=None):
        modes.append(mode)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    return modes


SMALL = {"batch_size": [32, 64], "compile_mode": ["none", "default"], "precision": ["fp32"]}


def test_a_small_space_measures_every_listed_value(fast_kwargs, compile_capable) -> None:
    """A new user's first space: once batch 64 is measured, the fast stage has nothing left
    and hands over to the late stage, which compiles the best config; then the search ends,
    every config measured, instead of proposing measured configs until it gives up."""
    lines: list[str] = []
    result = find(
        tiny_model(),
        tiny_data(),
        space={"knobs": SMALL},
        n_trials=10,
        progress=lines.append,
        **fast_kwargs,
    )
    measured = {
        (t.config.batch_size, t.config.compile_mode.value) for t in result.trials if not t.reused
    }
    assert {32, 64} <= {b for b, _ in measured}
    assert any(mode == "default" for _, mode in measured)  # compile was tried
    assert compile_capable and set(compile_capable) == {None}  # torch.compile's default mode
    assert not any(t.reused for t in result.trials)  # no measured config proposed again
    assert any(re.match(r" *#\d+\*? +late ", line) and "compile=default" in line for line in lines)
    assert "every listed value of the space has been measured: nothing left to try" in lines


def test_a_model_that_cannot_be_compiled_fails_that_trial_only(
    fast_kwargs, compile_capable, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Uncompilable(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self._orig_mod = model

        def forward(self, *args, **kwargs):
            raise RuntimeError("backend='inductor' raised: CompilationError (faked)")

    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: Uncompilable(model))
    result = find(tiny_model(), tiny_data(), space={"knobs": SMALL}, n_trials=10, **fast_kwargs)
    failed = [t for t in result.trials if t.failure]
    assert [t.config.compile_mode.value for t in failed] == ["default"]
    assert failed[0].failure == "error" and "CompilationError (faked)" in failed[0].message
    assert result.config.compile_mode.value == "none"
    assert result.failures == {"error": 1}


def test_timed_seconds_sets_how_long_each_measurement_times(tmp_path) -> None:
    """The calibrated budget times about timed_seconds of the baseline's steps (a CLI test
    uses it to measure in half a second what a search without a timeout measures in 3 s)."""
    storage = f"sqlite:///{tmp_path / 't.db'}"
    result = find(
        tiny_model(), tiny_data(), n_trials=1, space="quick", device="cpu", isolation="none",
        accuracy_samples=256, timed_seconds=0.25, storage=storage, study_name="t",
    )  # fmt: skip
    settings = read_settings(optuna.load_study(study_name="t", storage=storage))
    assert settings is not None and settings.timed_seconds == 0.25
    throughput = result.baseline_metrics["throughput"]
    seconds = settings.budget.timed_samples / throughput
    assert 0.05 < seconds < 1.25  # ~0.25 s at the calibrated speed, noise allowed
    with pytest.raises(ValueError, match=r"`budget` fixes every measurement"):
        autotune.SearchOptions(budget=FAST_BUDGET, timed_seconds=1.0)


def test_the_baseline_gets_the_time_its_calibration_took_however_short_the_budget() -> None:
    """A 30-s search on a busy machine: the calibration's run took most of the budget, and the
    baseline's measurement was given what was left (the deadline's last seconds), timed out,
    and the search failed with "The baseline config failed (timeout) ... fix the model/data".
    It now gets twice what its calibration took; the search answers with the baseline."""
    from sim import Model, search

    knobs = {"num_workers": [0, 1], "precision": ["fp32", "bf16"]}
    run, _, lines = search(Model(throughput=100.0, overhead=14.0), knobs=knobs, timeout=30.0)
    text = "\n".join(lines)
    ledger = run.ledger()
    assert ledger.baseline is not None and ledger.baseline.record.ok, text
    assert ledger.baseline.record.measurement is not None, text

"""Workers joining a study take the coordinator's settings: the same metric, hooks and split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import autotune
from autotune._search import storage
from autotune._search.distributed import gpu_shares, visible_devices
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET, find
from steady import offset_accuracy, sum_loss


def test_a_worker_guards_the_coordinators_metric_with_its_hooks(tmp_path) -> None:
    """The coordinator's metric and loss are hooks in an importable module; the worker (here
    in this process, as `autotune worker` would) loads them by reference: every candidate it
    checks reports the coordinator's metric, accuracy + 10 (a worker used to guard plain
    accuracy whatever the coordinator used)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    joined: list[int] = []

    def launcher(study) -> None:
        joined.append(
            autotune.join_search(
                tiny_model(),
                tiny_data(),
                storage=url,
                study_name=study.study_name,
                isolation="none",
                progress=lambda line: None,
            )
        )

    result = find(
        tiny_model(),
        tiny_data(),
        metric=offset_accuracy,
        metric_name="offset accuracy",
        loss_fn=sum_loss,
        space={"knobs": {"batch_size": [16, 32, 64], "lr_schedule": ["constant", "cosine"]}},
        n_trials=3,
        storage=url,
        study_name="metric",
        launcher=launcher,
        budget=FAST_BUDGET,
        accuracy_samples=2048,
        device="cpu",
        isolation="none",
        # Every candidate measured in full: guided, one measured slower than the baseline gets
        # no accuracy run, and on a busy machine that could be all three (seen in CI).
        guided=False,
    )
    assert joined and joined[0] >= 3  # the worker ran the candidates
    checked = [t for t in result.trials if t.role == "candidate" and t.accuracy_checked]
    assert checked and all(10.0 <= t.metric <= 11.0 for t in checked)  # accuracy + 10
    assert result.guard.metric_name == "offset accuracy" and result.guard.higher_is_better
    study = storage.load_study(url, "metric")
    settings = storage.read_settings(study)
    assert settings is not None
    assert settings.hooks.metric == "steady:offset_accuracy"
    assert settings.hooks.loss_fn == "steady:sum_loss"
    assert settings.hooks.metric_name == "offset accuracy"


@pytest.mark.slow
def test_two_worker_processes_guard_the_loss_with_the_coordinators_hooks(tmp_path) -> None:
    """`autotune search --processes 2 --metric loss --loss steady:offset_loss` on a journal file:
    two `autotune worker` processes run the candidates, and every accuracy run they make reports the
    coordinator's loss (cross-entropy + 100), not the default one."""
    space = tmp_path / "space.yaml"
    # Candidates at 2-4x the baseline's batch: screened (faster) even on a loaded machine, where
    # batch 16 and a same-speed schedule change had measured slower and got no accuracy run.
    # Measurements of 2 s: with 0.5 s, one worker ran all four candidates while the other was
    # still starting (the slow suite, beside a few seconds of other work).
    space.write_text("knobs:\n  batch_size: [64, 128]\n  lr_schedule: [constant, cosine]\n")
    # A journal file: the workers (`autotune worker`, started by --processes) open it with the
    # search's resolver; they used to hand the URL to Optuna as a database URL and fail.
    url = f"journal://{tmp_path / 'study.log'}"
    out = tmp_path / "best.json"
    tests = str(Path(__file__).parent)
    proc = subprocess.run(
        [
            sys.executable, "-m", "autotune", "search",
            "--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data",
            "--metric", "loss", "--loss", "steady:offset_loss",
            "--processes", "2", "--trials", "4", "--timed-seconds", "2", "--space", str(space),
            "--accuracy-samples", "512", "--storage", url, "--study", "loss", "--out", str(out),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path])},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = storage.load_study(url, "loss")
    records = storage.read_records(study)
    owner = {t.number: t.user_attrs["autotune_owner"]["pid"] for t, _ in records}
    baseline = next(t.number for t, r in records if r.role.value == "baseline")
    candidates = [(t.number, r) for t, r in records if r.role.value == "candidate"]
    workers = {owner[n] for n, _ in candidates}
    assert len(workers) == 2 and owner[baseline] not in workers  # two worker processes
    checked = [r.metric for _, r in candidates if r.metric is not None]
    assert checked and all(100.0 <= metric <= 102.0 for metric in checked), checked
    guard = storage.read_baseline_accuracy(study)
    assert guard is not None and all(100.0 <= r.metric <= 102.0 for r in guard.runs)
    saved = json.loads(out.read_text())
    assert saved["accuracy_guard"]["metric"] == "loss"
    assert saved["accuracy_guard"]["higher_is_better"] is False
    settings = storage.read_settings(study)
    assert settings is not None and settings.hooks.loss_fn == "steady:offset_loss"


def test_a_worker_refuses_hooks_it_cannot_load(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(autotune.ArgumentError, match=r"Workers cannot load the metric hook"):
        find(
            tiny_model(),
            tiny_data(),
            metric=lambda outputs, targets: 0.0,
            higher_is_better=True,
            storage=url,
            launcher=lambda study: None,
            n_trials=1,
            device="cpu",
            isolation="none",
        )


@pytest.mark.parametrize(
    ("requested", "inherited", "visible"),
    [
        (["0", "1"], None, ["0", "1"]),
        (["0", "1"], "4,5,6", ["4", "5"]),  # a scheduler gave this job GPUs 4-6
        (["1"], "GPU-aaaa,GPU-bbbb", ["GPU-bbbb"]),
    ],
)
def test_devices_count_within_what_a_scheduler_made_visible(requested, inherited, visible):
    assert visible_devices(requested, inherited) == visible


def test_devices_beyond_the_visible_ones_are_refused() -> None:
    with pytest.raises(autotune.ArgumentError, match=r"CUDA_VISIBLE_DEVICES='4,5' makes 2 GPU"):
        visible_devices(["2"], "4,5")


def test_gpu_workers_split_the_cpu_cores_when_there_are_enough() -> None:
    cores = len(os.sched_getaffinity(0))
    shares = gpu_shares(cores)
    assert shares is not None and all(len(s) == 1 for s in shares)
    assert gpu_shares(cores + 1) is None  # too few cores: GPU workers share them all


def test_the_coordinator_closes_its_trial_worker_before_launching_workers(tmp_path) -> None:
    """Its idle trial worker would hold a CUDA context on the first GPU, worker 1's."""
    alive: list[int] = []

    def launcher(study) -> None:
        alive.extend(
            child.pid
            for child in psutil.Process().children(recursive=True)
            if "autotune._trial.worker" in " ".join(child.cmdline())
        )

    find(
        tiny_model(),
        tiny_data(),
        space={"knobs": {"batch_size": [16, 32]}},
        n_trials=1,
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        launcher=launcher,
        budget=FAST_BUDGET,
        accuracy_samples=2048,
        device="cpu",
        isolation="process",
    )
    assert alive == []

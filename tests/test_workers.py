"""Workers joining a study take the coordinator's settings: the same metric, hooks and split."""

from __future__ import annotations

import pytest

import autotune
from autotune._search import storage
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET
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

    result = autotune.find_best(
        tiny_model(),
        tiny_data(),
        metric=offset_accuracy,
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
    )
    assert joined and joined[0] >= 3  # the worker ran the candidates
    checked = [t for t in result.trials if t.role == "candidate" and t.accuracy_checked]
    assert checked and all(10.0 <= t.metric <= 11.0 for t in checked)  # accuracy + 10
    assert result.guard.metric_name == "offset_accuracy" and result.guard.higher_is_better
    study = storage.load_study(url, "metric")
    settings = storage.read_settings(study)
    assert settings is not None
    assert settings.hooks.metric == "steady:offset_accuracy"
    assert settings.hooks.loss_fn == "steady:sum_loss"


def test_a_worker_refuses_hooks_it_cannot_load(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(autotune.ArgumentError, match=r"Workers cannot load the metric hook"):
        autotune.find_best(
            tiny_model(),
            tiny_data(),
            metric=lambda outputs, targets: 0.0,
            storage=url,
            launcher=lambda study: None,
            n_trials=1,
            device="cpu",
            isolation="none",
        )

"""A warm start: the earlier answer and its best few configs measured first, values that failed
for a reason of the machine not searched again, and a bad warm-start file a clear error or a
stated partial carry-over, never a crash."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from autotune import TrainingConfig
from autotune._cli import main
from autotune._errors import ArgumentError
from autotune._search.warm import load_warm_start
from autotune._space import Choice, load_space
from autotune.examples import tiny_data, tiny_model

from conftest import find

BASE = TrainingConfig(device="cpu")
HERE = {"torch": torch.__version__, "fingerprint": "here"}
SPACE = load_space("quick")


def _trial(n: int, cfg: TrainingConfig, failure: str | None = None, time: float = 10.0) -> dict:
    return {
        "number": n,
        "role": "baseline" if n == 0 else "candidate",
        "config": cfg.to_dict(),
        "failure": failure,
        "feasible": failure is None,
        "projected_training_time": None if failure else time,
    }


def _result(tmp_path: Path, trials: list[dict], answer: dict | None = None, **env) -> Path:
    data = {
        "schema_version": 1,
        "config": answer or trials[-1]["config"],
        "baseline": {"config": BASE.to_dict()},
        "trials": trials,
        "answers": {},
        "environment": {**HERE, **env},
    }
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    return path


def _load(path: Path):
    return load_warm_start(path, space=SPACE, baseline=BASE, environment=HERE)


def test_the_answer_then_the_fastest_configs_are_carried(tmp_path) -> None:
    workers = BASE.replace(num_workers=2, persistent_workers=True)
    bigger = BASE.replace(batch_size=128)
    bf16 = workers.replace(precision="bf16")
    trials = [_trial(0, BASE, time=50), _trial(1, bigger, time=30), _trial(2, bf16, time=20),
              _trial(3, workers, time=40)]  # fmt: skip
    warm = _load(_result(tmp_path, trials, answer=workers.to_dict()))
    assert warm.configs == (workers, bf16, bigger)  # the answer, then the fastest; no baseline
    assert warm.line() == (
        "warm start from best.json: 3 configs measured first; knobs tried in its order of "
        "importance (precision, num_workers, batch_size)"
    )


def test_a_value_that_failed_for_a_reason_of_the_machine_is_not_searched_again(
    tmp_path,
) -> None:
    workers = BASE.replace(num_workers=2, persistent_workers=True)
    trials = [
        _trial(0, BASE),
        _trial(1, workers, time=5),
        _trial(2, workers.replace(precision="bf16"), failure="error"),  # the machine's
        _trial(3, workers.replace(batch_size=512), failure="oom"),  # the model's: retried
        _trial(4, workers.replace(precision="tf32", batch_size=64), failure="error"),  # 2 knobs
    ]
    warm = _load(_result(tmp_path, trials, answer=workers.to_dict()))
    assert dict(warm.failed) == {"precision": ("bf16",)}
    narrowed = warm.narrowed(SPACE)
    precision = narrowed.knobs["precision"]
    assert isinstance(precision, Choice) and precision.values == ("fp32", "tf32")
    assert "precision: bf16 not searched (warm start from best.json" in narrowed.notes[-1]
    assert "precision=bf16 not searched (every trial with it failed on this machine)" in (
        warm.line()
    )
    assert warm.configs == (workers,)


@pytest.mark.parametrize(
    ("write", "says"),
    [
        (None, "warm_start: cannot read"),
        ("not json", "is not JSON"),
        ('{"config": {}}', "is not an autotune result (it has no `config`/`baseline`/"),
    ],
)
def test_a_file_that_is_not_a_result_is_a_clear_error(tmp_path, write, says) -> None:
    path = tmp_path / "best.json"
    if write is not None:
        path.write_text(write)
    with pytest.raises(ArgumentError, match=re.escape(says)):
        _load(path)


def test_another_torch_major_version_is_an_error_and_another_machine_carries_nothing(
    tmp_path,
) -> None:
    trials = [_trial(0, BASE), _trial(1, BASE.replace(batch_size=64))]
    with pytest.raises(ArgumentError, match=r"measured with torch 1\.13\.1.*another major"):
        _load(_result(tmp_path, trials, torch="1.13.1"))
    warm = _load(_result(tmp_path, trials, fingerprint="elsewhere"))
    assert warm.configs == ()
    assert "no config carried over: best.json was measured on other hardware" in warm.line()


def test_configs_of_knobs_or_values_this_search_lacks_are_left_out_and_said(tmp_path) -> None:
    gone = {**BASE.replace(batch_size=64).to_dict(), "warp_drive": True}  # a setting no more
    outside = BASE.replace(batch_size=48)  # not a batch size the space lists
    kept = BASE.replace(batch_size=128)
    trials = [_trial(0, BASE), {**_trial(1, BASE, time=1), "config": gone},
              _trial(2, outside, time=2), _trial(3, kept, time=3)]  # fmt: skip
    warm = _load(_result(tmp_path, trials, answer=gone))
    assert warm.configs == (kept,)  # a partial carry-over, stated
    line = warm.line()
    assert "its answer left out:" in line and "warp_drive" in line
    assert "its trial #2 left out: batch_size=48 is not in this search's space" in line


def test_a_warm_started_search_measures_the_carried_configs_first(tmp_path, fast_kwargs) -> None:
    first = find(tiny_model(), tiny_data(), n_trials=4, space="quick", **fast_kwargs)
    path = tmp_path / "a.json"
    first.save(path)
    second = find(
        tiny_model(), tiny_data(), n_trials=4, space="quick", warm_start=path, **fast_kwargs
    )
    warm = second.to_dict()["search"]["warm_start"]
    assert warm["from"] == "a.json" and warm["configs"] >= 1
    carried = {json.dumps(c, sort_keys=True) for c in warm["carried"]}
    measured = [json.dumps(t.config.to_dict(), sort_keys=True) for t in second.trials[1:]]
    assert set(measured[: len(carried)]) == carried  # before any config of its own


def test_the_cli_takes_a_warm_start_and_names_a_bad_one(tmp_path, capsys) -> None:
    code = main(
        ["search", "--model", "autotune.examples:tiny_model", "--data",
         "autotune.examples:tiny_data", "--trials", "1", "--storage",
         f"sqlite:///{tmp_path / 'a.db'}", "--warm-start", str(tmp_path / "none.json"),
         "--out", str(tmp_path / "b.json")]
    )  # fmt: skip
    assert code == 2
    assert "warm_start: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()


def test_a_study_in_the_storage_is_a_warm_start(tmp_path, fast_kwargs) -> None:
    """``warm_start="study:NAME"`` (what the CLI passes itself where the same command's model
    changed) starts from a study in the search's storage; a study that is not there is an
    error before any trial, naming the studies that are."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    first = find(tiny_model(), tiny_data(), n_trials=4, space="quick", storage=db,
                 study_name="a", **fast_kwargs)  # fmt: skip
    with pytest.raises(ArgumentError, match=r"warm_start: No study 'nope' .* Studies there: a\."):
        find(tiny_model(), tiny_data(), n_trials=1, space="quick", storage=db, study_name="b",
             warm_start="study:nope", **fast_kwargs)  # fmt: skip
    second = find(tiny_model(), tiny_data(), n_trials=2, space="quick", storage=db,
                  study_name="b", warm_start="study:a", **fast_kwargs)  # fmt: skip
    warm = second.to_dict()["search"]["warm_start"]
    assert warm["from"] == "study 'a'" and warm["configs"] >= 1
    if first.config != first.baseline:  # its answer, measured first on this search
        assert first.config.to_dict() in warm["carried"]
        assert second.trials[1].config == first.config


def _grid(workers_gain: float, cl_gain: float) -> list[dict]:
    """Every mix of workers 0/2 and channels_last off/on, one measured trial each: workers
    divide the training time by ``workers_gain``, channels_last by ``cl_gain``."""
    trials = []
    for n, (w, cl) in enumerate([(0, False), (2, False), (0, True), (2, True)] * 2):
        cfg = BASE.replace(num_workers=w, persistent_workers=w > 0, channels_last=cl)
        time = 100.0 / (workers_gain if w else 1.0) / (cl_gain if cl else 1.0) * (1 + 0.01 * n)
        trials.append(_trial(n, cfg, time=time))
    return trials


def test_the_knobs_are_ordered_by_their_importance_there_even_from_another_machine(
    tmp_path,
) -> None:
    """Issue 58: the earlier study's importance orders the knobs (Optuna's fANOVA over its
    measured trials), so the safe stage tries first what moved the training time most; from
    another machine only that order is carried, and it is said."""
    from autotune._search.policy import StagePolicy
    from autotune._search.warm import importance_order

    space = load_space({"knobs": {"num_workers": [0, 2], "channels_last": [False, True]}})
    workers_first = importance_order({"trials": _grid(3.0, 1.05)}, BASE, space)
    cl_first = importance_order({"trials": _grid(1.05, 3.0)}, BASE, space)
    assert workers_first[0] == "num_workers" and cl_first[0] == "channels_last"
    assert importance_order({"trials": _grid(3.0, 1.05)[:3]}, BASE, space) == ()  # too few
    warm = _load(_result(tmp_path, _grid(1.05, 3.0), fingerprint="elsewhere"))
    assert warm.configs == () and warm.order[0] == "channels_last"
    assert "knobs tried in its order of importance (channels_last" in warm.line()
    policy = StagePolicy(SPACE, BASE, guided=True, cpus=2, order=warm.order)
    plain = StagePolicy(SPACE, BASE, guided=True, cpus=2)

    def first_knob(p: StagePolicy) -> str:
        from autotune._knobs.registry import changes
        from autotune._search.ledger import Entry
        from autotune._search.record import Record, Role

        entry = Entry(0, Record(config=BASE, role=Role.BASELINE))
        variants = [v for v in p._safe_variants(entry) if v]
        return changes(variants[0][0], BASE)[0].label

    assert first_knob(policy) == "channels_last" and first_knob(plain) != "channels_last"

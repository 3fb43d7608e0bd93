"""A study knows what it measured: the same command on an edited model measures it afresh in a
study of its own (and says what changed), a study name the user gave is refused another model
before any trial, a worker with another model is refused, and an unchanged model's killed
search resumes its own study."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from torch import nn

import autotune
from autotune._cli import main
from autotune._errors import OtherModelError
from autotune._search import storage
from autotune._trial.fingerprint import data_fingerprint, model_fingerprint, study_suffix
from autotune.examples import tiny_data

from conftest import find

WIDTH = "AUTOTUNE_TEST_WIDTH"  # the factory's hidden width: "editing the model"
FACTORY = f"""
import os
from torch import nn
from autotune.examples import tiny_data

def model():
    width = int(os.environ.get({WIDTH!r}, "32"))
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 3))

def data():
    return tiny_data()
"""


def mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 3))


def _command(tmp_path: Path, *extra: str) -> list[str]:
    factory = tmp_path / "job.py"
    factory.write_text(FACTORY)
    return [
        "search", "--model", f"{factory}:model", "--data", f"{factory}:data",
        "--space", "quick", "--timed-seconds", "0.5", "--accuracy-samples", "256",
        "--device", "cpu", "--isolation", "none",
        "--storage", f"sqlite:///{tmp_path / 'autotune.db'}", "--out", str(tmp_path / "a.json"),
        *extra,
    ]  # fmt: skip


def _result(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "a.json").read_text())


def test_the_same_command_on_a_wider_model_measures_it_afresh_and_says_so(
    tmp_path, monkeypatch, capsys
) -> None:
    """Tried as a new user would: the same command after widening the model resumed the old
    study, its baseline read the narrow model's speed to the sample, and nothing was said."""
    command = _command(tmp_path, "--trials", "1")
    monkeypatch.setenv(WIDTH, "32")
    assert main(command) == 0
    first = _result(tmp_path)
    capsys.readouterr()
    monkeypatch.setenv(WIDTH, "256")
    assert main(command) == 0
    err = capsys.readouterr().err
    second = _result(tmp_path)
    old, new = first["search"]["study_name"], second["search"]["study_name"]
    assert new != old  # a study of its own, in the same storage
    said = next(line for line in err.splitlines() if "changed since" in line)
    assert said.startswith(
        f"the model changed since study {old!r}: measured afresh, from what it learned; 3 "
        "parameter shapes"
    ), said
    assert len(said) <= 120  # a person's display: the rest of what changed is cut
    assert f"study {new!r} in sqlite:///" in err  # the new study is named on the next line
    # The rerun starts from the narrow model's study: its answer is measured first, on the
    # wider model, and the result says from where.
    warm = second["search"]["warm_start"]
    assert warm["from"] == f"study {old!r}", warm
    measured = [t["config"] for t in first["trials"] if t["role"] != "baseline"]
    assert warm["carried"] and all(c in measured for c in warm["carried"]), (warm, measured)
    assert f"warm start from study {old!r}: " in err
    # Its baseline was measured on the wider model, not read back from the narrow one's study.
    assert "baseline: reusing trial" not in err
    assert second["search"]["model_fingerprint"]["hash"] == model_fingerprint(mlp(256))["hash"]
    assert first["search"]["model_fingerprint"]["hash"] == model_fingerprint(mlp(32))["hash"]
    assert second["baseline"]["metrics"]["throughput"] != first["baseline"]["metrics"]["throughput"]
    assert main(["show", str(tmp_path / "a.json"), "--detail"]) == 0
    shown = capsys.readouterr().out
    assert f"fingerprints: model {model_fingerprint(mlp(256))['hash']}" in shown
    names = optuna.get_all_study_names(storage=f"sqlite:///{tmp_path / 'autotune.db'}")
    assert sorted(names) == sorted([old, new])  # the narrow model's study is kept


def test_a_study_name_given_is_refused_another_model_before_any_trial(
    tmp_path, monkeypatch, capsys
) -> None:
    command = _command(tmp_path, "--trials", "1", "--study", "mine")
    monkeypatch.setenv(WIDTH, "32")
    assert main(command) == 0
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    before = len(storage.load_study(db, "mine").trials)
    capsys.readouterr()
    monkeypatch.setenv(WIDTH, "256")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert (
        "error: The model changed since study 'mine' measured its trials (the model: 3 "
        "parameter shapes differ (0.weight 32x8 float32 -> 256x8 float32;" in err
    )
    assert "give another study name (--study / study_name)" in err
    assert len(storage.load_study(db, "mine").trials) == before  # nothing ran


def test_find_best_and_a_worker_are_refused_another_model_or_data(tmp_path, fast_kwargs) -> None:
    kwargs = dict(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s", space="quick")
    find(mlp(32), tiny_data(), n_trials=1, **kwargs, **fast_kwargs)
    before = len(storage.load_study(kwargs["storage"], "s").trials)
    with pytest.raises(OtherModelError, match=r"the data: training set: length 2,048 -> 1,000"):
        find(mlp(32), tiny_data(1000), n_trials=2, **kwargs, **fast_kwargs)
    with pytest.raises(OtherModelError, match=r"This worker's model changed since study 's'"):
        autotune.join_search(
            mlp(64), tiny_data(), storage=kwargs["storage"], study_name="s", isolation="none",
            wait_for_baseline=5.0, progress=lambda line: None,
        )  # fmt: skip
    assert len(storage.load_study(kwargs["storage"], "s").trials) == before  # nothing ran


def test_a_killed_search_of_an_unchanged_model_resumes_its_own_study(
    tmp_path, monkeypatch, capsys
) -> None:
    """kill -9 once the baseline is measured; the same command resumes the study its model
    and data name, reusing the baseline, and says nothing changed."""
    command = _command(tmp_path)
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    env = {**os.environ, WIDTH: "48"}
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune", *command, "--timeout", "300", "--quiet"],
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        published = None
        while published is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            names = []
            # The search may be creating the file's tables this moment: a reader that opens
            # it then can race it (optuna's RDBStorage writes the schema version); try again.
            with contextlib.suppress(Exception):
                if (tmp_path / "autotune.db").exists():
                    names = optuna.get_all_study_names(storage=db)
            if names:
                published = storage.read_settings(storage.load_study(db, names[0])) and names[0]
        assert published, "the search never published its settings"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    monkeypatch.setenv(WIDTH, "48")
    assert main([*command, "--trials", "1"]) == 0
    err = capsys.readouterr().err
    result = _result(tmp_path)["search"]
    assert result["study_name"] == published
    # The study is the one this model and data name, and the result says what it measured.
    model = model_fingerprint(mlp(48))
    assert published.endswith(f"-{study_suffix(model, data_fingerprint(tiny_data()))}")
    assert result["model_fingerprint"]["hash"] == model["hash"]
    assert "baseline: reusing trial 0" in err
    assert "changed since" not in err
    assert optuna.get_all_study_names(storage=db) == [published]

"""The study as stored facts: resumed only under the settings its facts were measured under,
re-judged (not re-read) under a report's tolerance, opened by one resolver (journal files too),
its password never shown."""

from __future__ import annotations

import subprocess
import sys
import time

import optuna
import pytest
import torch
from sim import per_example
from test_guard import check
from test_ledger import _base, _candidate, _study_with, settings

import autotune
from autotune._errors import StorageError
from autotune._guard.confirmation import Verdict
from autotune._search import storage
from autotune._search.ledger import Ledger
from autotune._search.record import BaselineAccuracy
from autotune._trial.outcome import AccuracyRun
from autotune.examples import tiny_data, tiny_model

from conftest import find


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"planned_epochs": 100.0}, "planned epochs (--planned-epochs): 10.0 stored, 100.0 asked"),
        ({"tolerance": 0.05}, "tolerance (--tolerance): 0.01 stored, 0.05 asked"),
        ({"metric": "loss"}, "metric (--metric): 'accuracy' stored, 'loss' asked"),
        ({"space": "default"}, "space (--space), "),
        (
            {"baseline": {"lr_schedule": {"kind": "cosine"}}},
            "baseline (--baseline; with tune, your trainer's settings), lr_schedule: {'kind'",
        ),
    ],
)
def test_a_study_is_not_resumed_under_settings_that_change_its_facts(
    tmp_path, fast_kwargs, change, named
) -> None:
    """`--planned-epochs 10` then `--planned-epochs 100` on one study ranked trials projected
    for 14,389 and 144,850 samples together (new candidates showed 0.14x-0.17x): refused now,
    before anything runs, with the setting and the two ways out."""
    kwargs = dict(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    first = {"space": "quick", **fast_kwargs}
    find(tiny_model(), tiny_data(), n_trials=1, **kwargs, **first)
    before = len(storage.load_study(kwargs["storage"], "s").trials)
    with pytest.raises(StorageError) as err:
        find(tiny_model(), tiny_data(), n_trials=2, **kwargs, **{**first, **change})
    message = str(err.value)
    assert named in message
    assert "Resume it with the stored settings, or start a new study" in message
    assert len(storage.load_study(kwargs["storage"], "s").trials) == before  # nothing ran


def test_keep_global_batch_is_a_setting_of_the_study(tmp_path, fast_kwargs) -> None:
    kwargs = dict(space="quick", storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    find(tiny_model(), tiny_data(), n_trials=1, **kwargs, **fast_kwargs)
    with pytest.raises(StorageError, match=r"keep the global batch .*False stored, True asked"):
        find(tiny_model(), tiny_data(), n_trials=2, keep_global_batch=True, **kwargs, **fast_kwargs)


def test_the_cli_default_study_name_includes_the_planned_run_and_the_kept_global_batch() -> None:
    from autotune._cli import build_parser, default_study

    def name(*extra: str) -> str:
        args = build_parser().parse_args(
            ["search", "--model", "m:f", "--data", "d:g", "--out", "o.json", *extra]
        )
        return default_study(args)

    assert name() == name("--planned-epochs", "10")  # earlier studies keep their names
    assert name("--planned-epochs", "100") not in (name(), name("--keep-global-batch"))


def _confirmed_study():
    """A bf16 candidate confirmed at tolerance 0.01: paired drops 0.004-0.006 over 4 seeds."""
    from autotune import TrainingConfig

    study = _study_with([_base(), _candidate(TrainingConfig(precision="bf16"), 100.0)])
    base = (0.90, 0.91, 0.89, 0.90)
    runs = tuple(
        AccuracyRun(seed=i, metric=m, final_loss=0.5, samples=256, seconds=1.0,
                    units=per_example(i, m))
        for i, m in enumerate(base)
    )  # fmt: skip
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs, samples=256, seconds=4.0, initial_metric=0.5)
    )
    ledger = Ledger.read(study, settings())
    entry = ledger.entries[1]
    c = check(ledger.guard, [0.895, 0.905, 0.885, 0.894], looks=1, trial=1)
    storage.file_confirmation(study, ledger.numerics_id(entry.config), c)
    return study, entry


def test_a_confirmation_is_judged_again_under_another_tolerance_not_read_back() -> None:
    study, entry = _confirmed_study()
    at_01 = Ledger.read(study, settings())
    assert at_01.confirmation(entry).verdict is Verdict.CONFIRMED
    stored = at_01.confirmation(entry)
    strict = Ledger.read(study, settings(tolerance=0.001)).confirmation(entry)
    assert strict.verdict is not Verdict.CONFIRMED  # its bound is above 0.001
    assert strict.tolerance == 0.001 and strict.bound == pytest.approx(stored.bound)
    assert Ledger.read(study, settings(tolerance=0.001)).best().number == 0


def test_one_resolver_opens_journal_files_for_the_search_and_the_report(
    tmp_path, fast_kwargs
) -> None:
    journal = f"journal://{tmp_path / 'study.log'}"
    result = find(
        tiny_model(), tiny_data(), n_trials=1, space="quick", storage=journal, study_name="j",
        **fast_kwargs,
    )  # fmt: skip
    again = autotune.SearchResult.from_study(journal, "j")
    assert again.config == result.config
    out = tmp_path / "report.html"
    report = subprocess.run(
        [sys.executable, "-m", "autotune", "report", "--storage", journal, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert out.stat().st_size > 0 and "<html" in out.read_text()[:2000].lower()
    with pytest.raises(StorageError, match="No journal file at"):
        storage.load_study(f"journal://{tmp_path / 'missing.log'}", None)


def test_a_password_in_a_storage_url_is_never_shown(tmp_path) -> None:
    url = "postgresql://autotune:s3cret-pw@127.0.0.1:1/nowhere"
    with pytest.raises(StorageError) as err:
        storage.load_study(url, None)
    assert "s3cret-pw" not in str(err.value) and "autotune:***@127.0.0.1" in str(err.value)
    with pytest.raises(StorageError) as err:
        storage.open_study(url, "s", seed=0)
    assert "s3cret-pw" not in str(err.value) and "***" in str(err.value)
    report = subprocess.run(
        [sys.executable, "-m", "autotune", "report", "--storage", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode != 0
    assert "s3cret-pw" not in report.stdout + report.stderr
    assert "***" in report.stderr


def test_an_in_memory_study_cannot_be_resumed_and_nothing_breaks() -> None:
    assert storage.resolve(None) is None
    memory = optuna.storages.InMemoryStorage()
    assert storage.resolve(memory) is memory


def _beating_study(tmp_path):  # type: ignore[no-untyped-def]
    beats = optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path / 'beats.db'}", heartbeat_interval=1, grace_period=1,
        heartbeat_stale_trial_callback=storage.retry_once,
    )  # fmt: skip
    study = optuna.create_study(storage=beats)
    study.enqueue_trial({"batch_size": 64})  # chosen for it, not yet asked for by the trial
    return study


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_process_killed_right_after_naming_its_trial_has_it_failed_and_retried(
    tmp_path,
) -> None:
    study = _beating_study(tmp_path)
    trial = study.ask()
    storage.mark_owner(study, trial)  # then killed, before its beat thread ever ran
    time.sleep(2.1)  # the grace period, at the database clock's one-second resolution
    storage.reconcile_stale_trials(study)  # as any other process's search loop does
    died, retry = study.get_trials(deepcopy=False)
    assert died.state is optuna.trial.TrialState.FAIL  # stale: it had a beat to go stale
    assert retry.state is optuna.trial.TrialState.WAITING
    assert retry.system_attrs["fixed_params"] == {"batch_size": 64}
    assert retry.user_attrs[storage.RETRY_OF] == died.number


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_trial_whose_process_died_while_asking_for_it_is_failed_and_retried(
    tmp_path, monkeypatch
) -> None:
    study = _beating_study(tmp_path)
    study.ask()  # killed inside ``ask``: no beat, no owner
    storage.reconcile_stale_trials(study)
    assert study.get_trials(deepcopy=False)[0].state is optuna.trial.TrialState.RUNNING
    monkeypatch.setattr(storage, "ORPHAN_SECONDS", 0.0)  # as if long after
    assert storage.reconcile_stale_trials(study) == [0]
    died, retry = study.get_trials(deepcopy=False)
    assert died.state is optuna.trial.TrialState.FAIL
    assert retry.system_attrs["fixed_params"] == {"batch_size": 64}


class Unpicklable(torch.utils.data.Dataset):
    """A dataset holding a lambda (as a transform often is): it cannot be pickled."""

    def __init__(self) -> None:
        self.data, self.transform = tiny_data(), lambda x: x

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        x, y = self.data[i]
        return self.transform(x), y


@pytest.mark.parametrize(
    ("chosen", "methods", "pickled"),
    [
        (None, ["fork", "spawn", "forkserver"], False),  # Linux, Python <= 3.13
        (None, ["forkserver", "fork", "spawn"], True),  # Linux from Python 3.14: not fork
        (None, ["spawn", "fork", "forkserver"], True),  # macOS
        ("spawn", ["fork", "spawn", "forkserver"], True),  # set by the user
    ],
)
def test_dataloader_workers_follow_the_start_method_really_in_force(
    monkeypatch, chosen, methods, pickled
) -> None:
    """An unset start method was taken for fork: on Python 3.14 Linux starts DataLoader workers
    with forkserver, which pickles the dataset; one that cannot be pickled then fails every
    trial with workers. The method in force (set, else the platform's default) decides."""
    import multiprocessing

    from autotune import _run as _api
    from autotune._space import load_space

    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: chosen)
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: methods)
    assert _api.start_method() == (chosen or methods[0])
    space = load_space({"knobs": {"num_workers": [0, 1, 2]}})
    workload = _workload(Unpicklable())
    restricted = _api._restrict_workers(space, workload)
    values = restricted.knobs["num_workers"].values
    assert values == ((0,) if pickled else (0, 1, 2))
    if pickled:
        assert "DataLoader workers need to pickle dataset" in restricted.notes[-1]


def test_a_search_runs_with_forkserver_dataloader_workers(tmp_path) -> None:
    """A real search whose DataLoader workers start by forkserver (Python 3.14's default on
    Linux): trials with workers run, none fails."""
    script = tmp_path / "search.py"
    script.write_text(
        "import multiprocessing, autotune\n"
        "from autotune.examples import tiny_model, tiny_data\n"
        "from conftest import FAST_BUDGET, find\n"
        "if __name__ == '__main__':\n"
        "    multiprocessing.set_start_method('forkserver')\n"
        "    r = find(tiny_model(), tiny_data(), n_trials=2, device='cpu',\n"
        "        space={'knobs': {'num_workers': [0, 1]}}, budget=FAST_BUDGET,\n"
        "        isolation='none', accuracy_samples=512)\n"
        "    workers = [t for t in r.trials if t.config.num_workers]\n"
        "    assert workers and all(t.failure is None for t in workers), r.trials\n"
        "    print('ok')\n"
    )
    import os
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def _workload(data):  # type: ignore[no-untyped-def]
    from autotune._trial.task import make_task
    from autotune._trial.workload import Workload

    task = make_task(autotune.Task(metric="accuracy"))
    return Workload(model=tiny_model(), train=data, val=tiny_data(64), task=task)

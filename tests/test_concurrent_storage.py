"""Several processes on one SQLite file at once (issue 61): searches started together in one
folder on the default storage, and the workers of one study, all open, create and write it
without "table ... already exists" or "database is locked"."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune._errors import StorageError
from autotune._search import storage

TINY = ["--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data"]
# As short as a search gets: the quick space, one trial run in the search's own process, a
# half-second timed phase, a small accuracy run.
SHORT = ["--space", "quick", "--trials", "1", "--timed-seconds", "0.5",
         "--accuracy-samples", "256", "--isolation", "none", "--quiet"]  # fmt: skip
NEVER = ("locked", "already exists", "Traceback")


def _open(url: str, name: str, start: Any, done: Any) -> None:
    start.wait()  # every process opens the new file at the same moment
    try:
        storage.open_study(url, name, seed=0)
        done.put((name, None))
    except Exception as exc:
        done.put((name, f"{type(exc).__name__}: {exc}"))


def test_processes_opening_one_new_sqlite_file_at_once_each_get_their_study(tmp_path) -> None:
    # Imported and warmed up before the race, so that the processes reach the file together.
    storage.open_study(f"sqlite:///{tmp_path / 'warm.db'}", "warm", seed=0)
    ctx = multiprocessing.get_context("fork")
    names = ["a", "b", "c", "c"]  # three searches, and two processes of one study
    for round_ in range(3):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        url = f"sqlite:///{folder / 'autotune.db'}"
        start, done = ctx.Barrier(len(names)), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(url, n, start, done)) for n in names]
        for p in procs:
            p.start()
        results = [done.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        failed = [f"{name}: {error}" for name, error in results if error]
        assert not failed, f"round {round_}: " + "; ".join(failed)
        assert sorted(optuna.get_all_study_names(storage=url)) == ["a", "b", "c"]


def test_a_lock_held_too_long_names_its_file_and_what_to_use_instead(tmp_path, monkeypatch):
    db = tmp_path / "autotune.db"
    monkeypatch.setattr(storage, "CREATION_WAIT", 0.2)
    with open(f"{db}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process creating the study, stuck
        with pytest.raises(StorageError) as caught:
            storage.open_study(f"sqlite:///{db}", "a", seed=0)
    text = str(caught.value)
    assert f"{db}.lock" in text and f"sqlite:///{db}" in text
    assert "--storage journal:///" in text and "--storage postgresql://" in text
    storage.open_study(f"sqlite:///{db}", "a", seed=0)  # the lock given back: it opens


# -- The command line, as people start it -------------------------------------------------------


def _env() -> dict[str, str]:
    here = str(Path(__file__).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, *sys.path])}


def _autotune(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *args], cwd=cwd, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _finished(procs: dict[str, subprocess.Popen[str]], round_: int) -> None:
    for what, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"round {round_}, {what} exited {proc.returncode}:\n{out}"
        shown = [word for word in NEVER if word in out]
        assert not shown, f"round {round_}, {what} shows {shown}:\n{out}"


@pytest.mark.slow
def test_four_searches_started_at_once_on_the_default_storage_all_finish(tmp_path) -> None:
    studies = ("one", "two", "three", "four")
    for round_ in range(20):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        procs = {  # no --storage: the default, sqlite:///autotune.db in the folder
            s: _autotune("search", *TINY, *SHORT, "--study", s, "--out", f"{s}.json", cwd=folder)
            for s in studies
        }
        _finished(procs, round_)
        assert all((folder / f"{s}.json").is_file() for s in studies)
        stored = optuna.get_all_study_names(f"sqlite:///{folder / 'autotune.db'}")
        assert sorted(stored) == sorted(studies)


@pytest.mark.slow
def test_two_workers_joining_one_study_in_a_new_sqlite_file_both_finish(tmp_path) -> None:
    at = ["--storage", "sqlite:///autotune.db", "--study", "shared"]
    search = ["search", *TINY, *SHORT, "--trials", "2", *at, "--out", "best.json"]
    worker = ["worker", *TINY, *at, "--isolation", "none", "--plain"]
    for round_ in range(10):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        procs = {  # the search and its two workers, started together on a file not yet there
            "search": _autotune(*search, cwd=folder),
            "worker 1": _autotune(*worker, "--seed-offset", "1", cwd=folder),
            "worker 2": _autotune(*worker, "--seed-offset", "2", cwd=folder),
        }
        _finished(procs, round_)
        assert (folder / "best.json").is_file()

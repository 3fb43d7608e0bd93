"""Many workers, one study, on a real PostgreSQL server on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

import pg

pytestmark = pytest.mark.slow
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)  # pruned: measured, skipped accuracy runs


@pytest.fixture(scope="module")
def postgres():
    try:
        with pg.server() as url:
            yield url
    except RuntimeError as exc:
        pytest.skip(f"PostgreSQL cannot be had here: {exc}")


def _env(**extra: str) -> dict[str, str]:
    here = str(Path(__file__).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, *sys.path]), **extra}


def _search(storage: str, study: str, out: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "autotune", "search",
        "--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data",
        "--space", "quick", "--timed-seconds", "0.5", "--accuracy-samples", "2048",
        "--storage", storage,
        "--study", study, "--out", str(out), *args,
    ]  # fmt: skip


def _trials(storage: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=storage).trials


def test_workers_share_one_study_without_duplicates_or_losses(postgres, tmp_path) -> None:
    out = tmp_path / "best.json"
    proc = subprocess.run(
        _search(postgres, "shared", out, "--processes", "2", "--trials", "8"),
        env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = _trials(postgres, "shared")
    complete = [t for t in trials if t.state in FINISHED]
    candidates = [t for t in complete if t.user_attrs["autotune_role"] == "candidate"]
    assert len(candidates) >= 8  # two workers may each start one last trial together
    owners = {t.user_attrs["autotune_owner"]["pid"] for t in candidates}
    assert len(owners) == 2  # both workers ran trials; the coordinator only the baseline
    baseline = next(t for t in complete if t.user_attrs["autotune_role"] == "baseline")
    assert baseline.user_attrs["autotune_owner"]["pid"] not in owners
    done = [
        int(line.rsplit(" ", 2)[-2])
        for line in proc.stderr.splitlines()
        if line.endswith(" trials") and "done:" in line
    ]
    assert sum(done) == len(candidates)  # every trial a worker finished is in the study
    assert not [t for t in trials if t.state is TrialState.RUNNING]
    saved = json.loads(out.read_text())
    assert saved["search"]["trials"] == len(complete)
    assert {t["number"] for t in saved["trials"]} == {t.number for t in complete}


def test_a_killed_worker_has_its_trial_failed_by_heartbeat_and_retried(postgres, tmp_path):
    fast_beats = {"AUTOTUNE_HEARTBEAT_INTERVAL": "1", "AUTOTUNE_GRACE_PERIOD": "3"}
    out = tmp_path / "best.json"
    coordinator = subprocess.Popen(
        [*_search(postgres, "beats", out, "--trials", "12"), "--model", "faulty:slow_model"],
        env=_env(**fast_beats, AUTOTUNE_HOST="host-a"), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = None
    try:
        deadline = time.time() + 300
        while time.time() < deadline:  # wait for the baseline, then add a worker on "host-b"
            try:
                if any(t.state is TrialState.COMPLETE for t in _trials(postgres, "beats")):
                    break
            except KeyError:
                pass
            time.sleep(0.5)
        worker = subprocess.Popen(
            [sys.executable, "-m", "autotune", "worker", "--storage", postgres, "--study",
             "beats", "--model", "faulty:slow_model", "--data", "autotune.examples:tiny_data"],
            env=_env(**fast_beats, AUTOTUNE_HOST="host-b"), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

        def running() -> list[int]:
            return [
                t.number
                for t in _trials(postgres, "beats")
                if t.state is TrialState.RUNNING
                and t.user_attrs.get("autotune_owner", {}).get("pid") == worker.pid
            ]

        while time.time() < deadline and not running():
            time.sleep(0.1)
        children = psutil.Process(worker.pid).children(recursive=True)
        worker.send_signal(signal.SIGKILL)  # host-a cannot see host-b's pids: only heartbeats
        worker.wait()
        # The trial it was running when it died: still RUNNING until its heartbeat goes stale.
        killed = running()
        assert len(killed) == 1, f"the worker was running {killed} when killed"
        victim = killed[0]
        psutil.wait_procs(children, timeout=10)
        _, err = coordinator.communicate(timeout=600)
        assert coordinator.returncode == 0, err[-3000:]
    finally:
        for process in (coordinator, worker):
            if process is not None and process.poll() is None:
                process.kill()
    trials = {t.number: t for t in _trials(postgres, "beats")}
    assert trials[victim].state is TrialState.FAIL
    retries = [t for t in trials.values() if t.user_attrs.get("autotune_retry_of") == victim]
    assert len(retries) == 1 and retries[0].state in FINISHED
    # The retry runs every parameter the killed trial had chosen (a kill that lands while the
    # trial is still choosing leaves the rest to the sampler, as for a new trial).
    assert retries[0].params.items() >= trials[victim].params.items()
    saved = json.loads(out.read_text())
    assert saved["search"]["trials"] == sum(1 for t in trials.values() if t.state in FINISHED)


def test_a_worker_on_other_hardware_is_refused(postgres, tmp_path) -> None:
    out = tmp_path / "best.json"
    proc = subprocess.run(
        _search(postgres, "mismatch", out, "--trials", "1"),
        env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    study = optuna.load_study(study_name="mismatch", storage=postgres)
    baseline = next(t for t in study.trials if t.user_attrs.get("autotune_role") == "baseline")
    assert baseline.user_attrs["autotune"]["fingerprint"]
    # A worker pinned to one core measures on a different CPU share: not comparable.
    worker = subprocess.run(
        [sys.executable, "-m", "autotune", "worker", "--storage", postgres, "--study",
         "mismatch", "--model", "autotune.examples:tiny_model", "--data",
         "autotune.examples:tiny_data"],
        env=_env(AUTOTUNE_CPU_SET="0"), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert worker.returncode == 2
    assert "differ from those the study's baseline was measured on" in worker.stderr

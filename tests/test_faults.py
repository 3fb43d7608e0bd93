"""Fault injection: whatever a trial does, the search survives, records why, and loses nothing."""

from __future__ import annotations

import gc
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
import torch
from optuna.trial import TrialState

import autotune
from autotune._trial import failures
from autotune._trial.failures import FailureReason
from autotune._trial.isolation import ProcessExecutor, worker_env
from autotune._trial.runner import run_trial
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import tiny_data, tiny_model

import faulty
from conftest import FAST_BUDGET, find
from faulty import FaultAbove, FaultyInWorkers

ONLY_64 = {"knobs": {"batch_size": [64]}}


def search(model, data=None, **overrides):
    options = {
        "space": ONLY_64,
        "n_trials": 1,
        "budget": FAST_BUDGET,
        "accuracy_samples": 2048,
        "device": "cpu",
        "isolation": "process",
    } | overrides
    return find(model, tiny_data() if data is None else data, **options)


def only_failure(result):
    failed = [t for t in result.trials if t.failure]
    assert len(failed) == 1, [t.to_dict() for t in result.trials]
    saved = json.loads(result.to_json())
    assert saved["search"]["failures"] == {failed[0].failure: 1}
    assert saved["config"] == result.baseline.to_dict()  # the failure never wins
    return failed[0]


@pytest.mark.slow
def test_a_hang_in_a_worker_is_stopped_at_the_trial_limit() -> None:
    # 20 s: a fresh worker's start-up (importing torch) counts against the limit too; it
    # took more than 5 s on a loaded 2-core machine, and the baseline's start ran past 10 s
    # there with two test files running beside it (the twelfth session's slow suite).
    start = time.monotonic()
    result = search(FaultAbove("hang"), trial_timeout=20)
    failed = only_failure(result)
    assert failed.failure == "timeout" and failed.config.batch_size == 64
    assert "ran past its 20 s limit" in failed.message
    assert result.to_dict()["search"]["isolation"] == "process"
    assert time.monotonic() - start < 180  # bounded: 58 s idle


@pytest.mark.slow
def test_a_python_hang_in_process_is_interrupted_too() -> None:
    result = search(FaultAbove("hang"), trial_timeout=5, isolation="none")
    assert only_failure(result).failure == "timeout"


@pytest.mark.parametrize(
    ("fault", "says"),
    [("segfault", "killed by SIGSEGV"), ("exit", "exited with code 3")],
)
@pytest.mark.slow
def test_a_dying_worker_ends_only_its_trial(fault: str, says: str) -> None:
    result = search(FaultAbove(fault))
    failed = only_failure(result)
    assert failed.failure == "crashed" and says in failed.message


@pytest.mark.slow
def test_the_search_goes_on_after_a_crash_in_a_fresh_worker() -> None:
    result = search(
        FaultAbove("segfault"),
        space={"knobs": {"batch_size": [64, 16]}},
        n_trials=2,
        sampler=optuna.samplers.BruteForceSampler(seed=0),
    )
    by_size = {t.config.batch_size: t for t in result.trials}
    assert by_size[64].failure == "crashed"
    assert by_size[16].failure is None and by_size[16].throughput > 0


@pytest.mark.parametrize(
    ("fault", "isolation"),
    [
        ("oom-type", "process"),
        ("oom-cuda", "none"),
        ("oom-cublas", "none"),
        ("oom-cpu", "none"),
    ],
)
def test_every_out_of_memory_form_is_an_oom_failure(fault: str, isolation: str) -> None:
    failed = only_failure(search(FaultAbove(fault), isolation=isolation))
    assert failed.failure == "oom" and "out of memory" in failed.message


def test_cudnn_not_supported_is_memory_only_when_memory_was_nearly_full(monkeypatch) -> None:
    """CUDNN_STATUS_NOT_SUPPORTED also means "no kernel for this layout": counted as out of
    memory (which cuts batch sizes) only where the GPU's memory was nearly full."""
    failed = only_failure(search(FaultAbove("oom-cudnn"), isolation="none"))
    assert failed.failure == "error"
    assert "CUDNN_STATUS_NOT_SUPPORTED" in failed.message
    assert "not counted as out of memory" in failed.message
    monkeypatch.setattr(failures, "memory_nearly_full", lambda: True)
    failed = only_failure(search(FaultAbove("oom-cudnn"), isolation="none"))
    assert failed.failure == "oom" and "out of memory" in failed.message


def _poison_workload() -> Workload:
    task = make_task(autotune.Task(metric="accuracy"))
    return Workload(model=FaultAbove("poison"), train=tiny_data(), val=tiny_data(), task=task)


def test_a_cuda_error_that_poisons_the_worker_is_recorded_and_the_worker_replaced() -> None:
    """An illegal address (torch.AcceleratorError) breaks every later CUDA call in that
    process: the trial is recorded with the real message, and the next trial runs in a new
    worker (in the old one it would fail again: the fake error is sticky, as CUDA's is)."""
    executor = ProcessExecutor(_poison_workload(), env=worker_env())
    try:
        poisoned = executor.run(autotune.TrainingConfig(batch_size=64), FAST_BUDGET)
        assert poisoned.failure is FailureReason.DEVICE
        assert "AcceleratorError: CUDA error: an illegal memory access" in poisoned.message
        assert "CUDA_LAUNCH_BLOCKING=1" in poisoned.message
        after = executor.run(autotune.TrainingConfig(batch_size=16), FAST_BUDGET)
        assert after.ok, after.message
        assert executor.started == 2
    finally:
        executor.close()


def test_a_poisoning_cuda_error_in_process_stops_the_search_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(faulty, "POISONED", False)  # restored after the test
    url = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(autotune.DeviceError) as raised:
        search(FaultAbove("poison"), isolation="none", storage=url, study_name="poisoned")
    message = str(raised.value)
    assert "an illegal memory access was encountered" in message
    assert "CUDA_LAUNCH_BLOCKING=1" in message and "isolation='process'" in message
    trials = optuna.load_study(study_name="poisoned", storage=url).trials
    assert not [t for t in trials if t.state is TrialState.RUNNING]  # not left to be retried
    failed = [t for t in trials if t.state is TrialState.FAIL]
    assert len(failed) == 1 and "illegal memory access" in failed[0].user_attrs["message"]


def test_nan_loss_is_divergence() -> None:
    failed = only_failure(search(FaultAbove("nan")))
    assert failed.failure == "diverged" and "loss became nan" in failed.message


@pytest.mark.slow
def test_a_dataset_item_that_raises_in_a_loader_worker() -> None:
    result = search(tiny_model(), FaultyInWorkers("raise"), space={"knobs": {"num_workers": [1]}})
    failed = only_failure(result)
    assert failed.failure == "dataloader_worker"
    assert "corrupt record #" in failed.message


def test_a_loader_worker_killed_by_a_signal() -> None:
    result = search(tiny_model(), FaultyInWorkers("kill"), space={"knobs": {"num_workers": [1]}})
    failed = only_failure(result)
    assert failed.failure == "dataloader_worker"
    assert "killed by signal" in failed.message or "exited unexpectedly" in failed.message


def test_unpicklable_hooks_fall_back_to_in_process_trials_and_say_so() -> None:
    lines: list[str] = []
    result = search(
        tiny_model(),
        loss_fn=lambda out, y: torch.nn.functional.cross_entropy(out, y),
        progress=lines.append,
        isolation="auto",
    )
    note = next(line for line in lines if "trials run in this process" in line)
    assert "loss_fn" in note and "cannot be pickled" in note
    assert result.to_dict()["search"]["isolation"] == "in-process"
    with pytest.raises(ValueError, match=r"`isolation='process'` is impossible: .*loss_fn"):
        search(tiny_model(), loss_fn=lambda out, y: out.sum(), isolation="process")


@pytest.mark.slow
def test_in_process_oom_trials_give_their_memory_back() -> None:
    class Hog(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 3)

        def forward(self, x):
            held = torch.ones(25_000_000)  # 100 MB alive in this frame when it raises
            held.add_(1)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 100.00 MiB")

    task = make_task(autotune.Task(metric="accuracy"))
    workload = Workload(model=Hog(), train=tiny_data(), val=tiny_data(), task=task)
    process = psutil.Process()
    run_trial(autotune.TrainingConfig(), workload, FAST_BUDGET)  # warm the allocator up
    gc.collect()
    before = process.memory_info().rss
    for _ in range(20):
        outcome = run_trial(autotune.TrainingConfig(), workload, FAST_BUDGET)
        assert outcome.failure is FailureReason.OOM
    after = process.memory_info().rss
    assert after - before < 50 * 2**20, f"RSS grew by {(after - before) / 2**20:.0f} MiB"


# -- The search process itself dies or is interrupted -------------------------------------------


def _cli(tmp_path: Path, study: str, trials: int, space: str = "quick") -> list[str]:
    return [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--model",
        "faulty:slow_model",
        "--data",
        "faulty:data",
        "--space",
        space,
        "--trials",
        str(trials),
        "--accuracy-samples",
        "64",
        "--storage",
        f"sqlite:///{tmp_path / 'study.db'}",
        "--study",
        study,
        "--out",
        str(tmp_path / "best.json"),
    ]


def _env() -> dict[str, str]:
    here = str(Path(__file__).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, *sys.path])}


def _wait_for(predicate, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting for the search to get there")


def _trials(tmp_path: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(
            study_name=study, storage=f"sqlite:///{tmp_path / 'study.db'}"
        ).trials
    except Exception:
        return []


def _mid_candidate(tmp_path: Path, study: str) -> bool:
    trials = _trials(tmp_path, study)
    done = [t for t in trials if t.state is TrialState.COMPLETE]
    running = [t for t in trials if t.state is TrialState.RUNNING]
    return len(done) >= 2 and bool(running)


@pytest.mark.slow
def test_kill_9_then_the_same_command_resumes_and_loses_nothing(tmp_path: Path) -> None:
    cmd = _cli(tmp_path, "killed", trials=4)
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(lambda: _mid_candidate(tmp_path, "killed"))
    workers = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    psutil.wait_procs(workers, timeout=10)  # orphaned trial workers stop by themselves
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    before = {t.number: t for t in _trials(tmp_path, "killed") if t.state is TrialState.COMPLETE}
    running = [t.number for t in _trials(tmp_path, "killed") if t.state is TrialState.RUNNING]
    assert len(running) == 1

    again = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "left running by a process that is gone" in again.stderr
    after = {t.number: t for t in _trials(tmp_path, "killed")}
    for number, trial in before.items():  # every finished trial is still there, unchanged
        assert after[number].state is TrialState.COMPLETE
        assert after[number].value == trial.value
    assert after[running[0]].state is TrialState.FAIL
    retries = [t for t in after.values() if t.user_attrs.get("autotune_retry_of") == running[0]]
    # The retry runs the killed trial's config: every parameter it had chosen (a kill that lands
    # while the trial is still choosing leaves the rest to the sampler, as for a new trial).
    assert len(retries) == 1
    assert retries[0].params.items() >= after[running[0]].params.items()
    assert retries[0].state in (TrialState.COMPLETE, TrialState.PRUNED)
    saved = json.loads((tmp_path / "best.json").read_text())
    finished = (TrialState.COMPLETE, TrialState.PRUNED)
    assert saved["search"]["trials"] == len([t for t in after.values() if t.state in finished])


@pytest.mark.slow
def test_ctrl_c_writes_the_best_so_far_and_says_how_to_resume(tmp_path: Path) -> None:
    # Numerics-free knobs enough for many trials (the quick space has two on a 2-core CPU).
    space = tmp_path / "many.yaml"
    space.write_text(
        "name: many\nknobs:\n  num_workers: [0, 1, 2]\n"
        "  optimizer_impl: [default, foreach, fused]\n  intra_op_threads: [null, 1, 2]\n"
    )
    cmd = _cli(tmp_path, "interrupted", trials=20, space=str(space))
    # The search must take Ctrl-C as a user's terminal sends it, even where these tests run in
    # a background job (`nohup ... &` ignores SIGINT, and the child would inherit that).
    proc = subprocess.Popen(
        cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    _wait_for(lambda: _mid_candidate(tmp_path, "interrupted"))
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Run the same command again to resume" in err
    saved = json.loads((tmp_path / "best.json").read_text())
    assert saved["search"]["interrupted"] is True
    trials = _trials(tmp_path, "interrupted")
    assert not [t for t in trials if t.state is TrialState.RUNNING]
    # The trial that was running (if the signal did not fall between two trials) ended cleanly
    # as failed, with a retry waiting for the resumed search.
    failed = [t for t in trials if t.state is TrialState.FAIL]
    assert len(failed) <= 1, (err, [(t.number, t.state) for t in trials])
    for trial in failed:
        assert any(t.user_attrs.get("autotune_retry_of") == trial.number for t in trials)


def test_the_first_cuda_error_is_not_hidden_by_restoring_the_rng(monkeypatch) -> None:
    """After an illegal address every CUDA call raises, restoring the RNG state too: the error
    that ends the trial must be the first one, not the restore's."""
    from autotune._trial.runner import preserved_rng

    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda index=0: torch.zeros(8))

    def broken(state, index=0):
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "set_rng_state", broken)
    first = pytest.raises(torch.AcceleratorError, match=r"device-side assert triggered$")
    with first, preserved_rng("cuda:0"):
        raise torch.AcceleratorError("CUDA error: device-side assert triggered")
    # Nothing in flight: the restore's own error is not swallowed.
    with pytest.raises(torch.AcceleratorError, match="illegal memory"), preserved_rng("cuda:0"):
        pass

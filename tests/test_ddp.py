"""Data-parallel trials: each a job of ranks started by PyTorch's elastic launcher (gloo here)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
import torch

import autotune
from autotune._device import describe_device
from autotune._errors import ArgumentError, ConfigError
from autotune._knobs import registry
from autotune._search.settings import differences
from autotune._trial.ddp import DDPExecutor, describe_launcher_failure, root_failure
from autotune._trial.executors import make_executor
from autotune._trial.failures import FailureReason
from autotune._trial.isolation import worker_env
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET, find
from faulty import OnRank, UnreadableOnRank1
from steady import PerStepCost

TESTS = Path(__file__).parent


def _workload(model: torch.nn.Module) -> Workload:
    task = make_task(autotune.Task(metric="accuracy"))
    return Workload(model=model, train=tiny_data(), val=tiny_data(), task=task)


def _ours() -> list[psutil.Process]:
    """This test process's descendants: the launcher and its ranks while a job lives."""
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def _gone(timeout: float = 5.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while _ours() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _ours()


# -- The config and the space --------------------------------------------------------------------


def test_the_global_batch_counts_every_rank_and_the_config_says_so() -> None:
    cfg = autotune.TrainingConfig(
        ranks=4, batch_size=16, gradient_accumulation_steps=2, ddp_bucket_cap_mb=50,
        ddp_no_sync=True,
    )  # fmt: skip
    assert (cfg.rank_batch_size, cfg.global_batch_size) == (32, 128)
    assert "4 ranks (global batch 128) bucket_cap_mb=50 no_sync" in cfg.describe()
    assert autotune.TrainingConfig.from_json(cfg.to_json()) == cfg
    # A config saved before DDP existed reads as one process with DDP's defaults.
    old = {k: v for k, v in autotune.TrainingConfig().to_dict().items() if "ddp" not in k}
    old.pop("ranks")
    assert autotune.TrainingConfig.from_dict(old) == autotune.TrainingConfig()
    with pytest.raises(ConfigError, match=r"`ranks` must be >= 1, but got 0"):
        autotune.TrainingConfig(ranks=0)
    with pytest.raises(ConfigError, match="ddp_bucket_cap_mb"):
        autotune.TrainingConfig(ddp_bucket_cap_mb=0)


def test_the_lr_scales_with_the_global_batch_of_every_rank() -> None:
    base = autotune.TrainingConfig(ranks=2, batch_size=32)
    cfg = registry.config_from({"batch_size": 64, "lr_batch_scaling": "linear"}, base)
    assert cfg.lr_schedule.reference_batch_size == 64  # 32 x 2 ranks
    assert cfg.lr_schedule.peak_lr == pytest.approx(2 * base.lr_schedule.peak_lr)


def test_keep_global_batch_splits_a_ranks_share_so_every_config_keeps_the_global_batch() -> None:
    """The split was of the global batch, ranks included, so every candidate trained `ranks`
    times the baseline's global batch, and on a model without batch norm passed as
    numerics-free, with no accuracy check."""
    from autotune._search.baseline import smaller_split

    base = autotune.TrainingConfig(ranks=2, batch_size=32, gradient_accumulation_steps=2)
    space = autotune.load_space("quick").restrict(_facts(2)).keeping_global_batch(base)
    assert space.knobs["batch_size"].values == (64, 32, 16, 8)  # a rank's 64 over 1, 2, 4, 8
    built = [space.build({"batch_size": b}, base) for b in space.knobs["batch_size"].values]
    assert {c.global_batch_size for c in built} == {128}
    assert [c.gradient_accumulation_steps for c in built] == [1, 2, 4, 8]
    assert {c.numerics_key(split_free=True) for c in built} == {base.numerics_key(split_free=True)}
    split = smaller_split(space, base)
    assert split is not None and (split.batch_size, split.global_batch_size) == (16, 128)
    # Split into accumulation, a static graph (which would assert under no_sync) is dropped.
    static = autotune.TrainingConfig(ranks=2, batch_size=64, ddp_static_graph=True)
    split = smaller_split(space, static)
    assert split is not None and split.gradient_accumulation_steps == 2
    assert split.ddp_static_graph is False


def test_a_static_graph_is_never_built_with_accumulation_nor_no_sync_without_it() -> None:
    """DDP's static graph asserts in an iteration under no_sync, which Hugging Face's and
    Lightning's accumulation use: such a winner crashed the user's first step. no_sync with one
    micro-batch per step skips nothing: a config of it measured noise under another name."""
    base = autotune.TrainingConfig(ranks=2, batch_size=32)
    both = {"ddp_static_graph": True, "ddp_no_sync": True}
    accumulated = registry.config_from({**both, "gradient_accumulation_steps": 2}, base)
    assert (accumulated.ddp_static_graph, accumulated.ddp_no_sync) == (False, True)
    single = registry.config_from({**both, "gradient_accumulation_steps": 1}, base)
    assert (single.ddp_static_graph, single.ddp_no_sync) == (True, False)


def test_a_ranks_measurement_is_priced_at_its_share_of_the_throughput() -> None:
    """Each rank runs the budget's steps of its own batch, and the throughput counts every
    rank's samples: a 2-rank measurement was priced at half its time (and the calibration gave
    each rank the whole job's samples to time, doubling it)."""
    from autotune._search.baseline import measurement_seconds
    from autotune._trial.outcome import Budget

    budget = Budget(warmup_steps=2, timed_samples=320, min_timed_steps=3, chunks=1)
    assert budget.steps(32) == (2, 10)  # a rank's micro-batches
    # 12 micro-batches of 32 on each of 2 ranks: 768 samples at 640 samples/s.
    assert measurement_seconds(32, budget, 640.0, 0.0, ranks=2) == pytest.approx(1.2)
    assert measurement_seconds(32, budget, 640.0, 0.0) == pytest.approx(0.6)


def _facts(ranks: int, cores: int = 8) -> registry.Facts:
    device = describe_device("cpu")
    return registry.Facts(
        device=type(device)(**{**device.__dict__, "cpu_count": cores}),
        has_conv=False,
        n_blocks=0,
        n_train=1000,
        current_threads=cores,
        ranks=ranks,
    )


def test_ddp_knobs_are_searched_only_with_ranks_and_workers_share_the_cores() -> None:
    space = autotune.load_space("default")
    one = space.restrict(_facts(1))
    assert not [k for k in one.knobs if k.startswith("ddp_")]
    assert any("DDP knobs need SearchOptions(ranks=) > 1" in n for n in one.notes)
    four = space.restrict(_facts(4))
    assert {k for k in four.knobs if k.startswith("ddp_")} == {
        "ddp_bucket_cap_mb", "ddp_gradient_as_bucket_view", "ddp_static_graph",
        "ddp_broadcast_buffers", "ddp_no_sync",
    }  # fmt: skip
    assert four.knobs["num_workers"].values == (0, 1, 2)  # 8 cores, 4 ranks: 2 each
    assert max(four.knobs["batch_size"].values) == 128  # 1,000 samples: 250 per rank
    assert any("1000 samples, 250 per rank" in n for n in four.notes)
    assert any("8 CPU cores shared by 4 ranks: 2 each" in n for n in four.notes)


def test_exports_carry_the_per_rank_batch_and_the_ddp_knobs() -> None:
    cfg = autotune.TrainingConfig(
        ranks=2, batch_size=16, ddp_bucket_cap_mb=50, ddp_static_graph=True,
        ddp_broadcast_buffers=False, ddp_gradient_as_bucket_view=True,
    )  # fmt: skip
    hf = cfg.to_transformers()
    assert hf["per_device_train_batch_size"] == 16
    assert (hf["ddp_bucket_cap_mb"], hf["ddp_static_graph"], hf["ddp_broadcast_buffers"]) == (
        50, True, False,
    )  # fmt: skip
    pl = cfg.to_lightning()
    assert (pl.trainer["strategy"], pl.trainer["devices"]) == ("ddp", 2)
    assert any(
        "DDPStrategy(bucket_cap_mb=50, gradient_as_bucket_view=True, static_graph=True, "
        "broadcast_buffers=False)" in n
        for n in pl.notes
    )
    # The trials ran DDP's default; the Trainer would look for unused parameters every step.
    assert hf["ddp_find_unused_parameters"] is False
    single = autotune.TrainingConfig().to_transformers()
    assert not [k for k in single if k.startswith("ddp_")]


def test_bad_rank_settings_are_refused_before_any_trial() -> None:
    with pytest.raises(ArgumentError, match="ranks=2 runs each trial as 2 processes"):
        autotune.SearchOptions(ranks=2, isolation="none")
    with pytest.raises(ArgumentError, match="ranks"):
        autotune.SearchOptions(ranks=0)
    task = make_task(autotune.Task(metric="accuracy", forward=lambda m, b: (m(b[0]), b[1])))
    lambdas = Workload(model=tiny_model(), train=tiny_data(), val=tiny_data(), task=task)
    with pytest.raises(ValueError, match=r"2 data-parallel ranks are impossible: .*forward"):
        make_executor(lambdas, "auto", ranks=2)


def test_a_study_of_other_ranks_is_not_resumed() -> None:
    from autotune._search.settings import SearchSettings

    fields = {f: None for f in SearchSettings.__dataclass_fields__}
    fields.update(n_train=1000, planned_epochs=10.0)  # the planned run, the same in both
    space = autotune.load_space("quick")
    one = SearchSettings(**{**fields, "space": space, "space_asked": None,  # type: ignore[arg-type]
                            "baseline": autotune.TrainingConfig()})  # fmt: skip
    two = SearchSettings(**{**fields, "space": space, "space_asked": None,  # type: ignore[arg-type]
                            "baseline": autotune.TrainingConfig(ranks=2)})  # fmt: skip
    assert differences(one, two) == ["data-parallel ranks (--nproc-per-node): 1 stored, 2 asked"]


def test_launcher_root_cause_names_the_rank_and_its_signal() -> None:
    log = (
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-25_16:00:00\n"
        "  host      : here\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 4242)\n"
    )
    said = describe_launcher_failure(log, 2)
    assert said.startswith("rank 1 of 2: the trial's rank process was killed by SIGKILL")
    assert describe_launcher_failure("", 2) == "the launcher ended"


def test_a_rank_that_only_saw_its_peer_go_is_not_blamed(tmp_path: Path) -> None:
    """Rank 1 was killed; rank 0's all-reduce then failed ("connection closed by peer") and it
    recorded that: the trial names rank 1, with its exit as the launcher saw it."""
    (tmp_path / "pid-rank0").write_text("1")
    (tmp_path / "pid-rank1").write_text("2")
    (tmp_path / "failure-rank0.json").write_text(json.dumps({
        "rank": 0, "ranks": 2, "time": 1.0, "reason": "error", "peer": True,
        "message": "DistBackendError: Connection closed by peer [127.0.0.1]:4242",
    }))  # fmt: skip
    (tmp_path / "launcher.log").write_text(
        "Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 1)\n"
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : 1 (pid: 1)\n[1]:\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 2)\n"
    )
    reason, message = root_failure(str(tmp_path), 2)
    assert reason is FailureReason.CRASH
    assert message.startswith(
        "crashed: rank 1 of 2: the trial's rank process was killed by SIGKILL"
    )
    # A failure of its own, recorded later, still comes first.
    (tmp_path / "failure-rank1.json").write_text(json.dumps({
        "rank": 1, "ranks": 2, "time": 2.0, "reason": "oom", "peer": False,
        "message": "out of memory: CUDA out of memory",
    }))  # fmt: skip
    assert root_failure(str(tmp_path), 2) == (
        FailureReason.OOM, "rank 1 of 2: out of memory: CUDA out of memory",
    )  # fmt: skip


# -- Real jobs (gloo, 2 ranks) --------------------------------------------------------------------


def test_accumulation_under_ddp_all_reduces_once_per_optimizer_step(tmp_path: Path) -> None:
    out = tmp_path / "counts.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(TESTS / "ddp_count.py"), str(out)],
        env=env, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    counts = json.loads(out.read_text())
    # 8 micro-batches, 4 per optimizer step: 2 steps, one all-reduce each with no_sync (one
    # bucket: a tiny model); one per micro-batch without it.
    assert counts["no_sync"] == {"allreduce": 2, "optimizer_steps": 2}
    assert counts["sync"] == {"allreduce": 8, "optimizer_steps": 2}
    assert counts["sampler"] == "DistributedSampler"
    assert counts["reshuffled"] is True
    # An epoch's last, incomplete window ran under no_sync: its step averages the gradients
    # over the ranks first (it stepped on each rank's own, and the replicas drifted apart).
    assert counts["apart"] == 0.0


def test_an_oom_on_one_rank_fails_the_trial_on_every_rank_within_seconds() -> None:
    executor = DDPExecutor(_workload(OnRank("oom-type", rank=1)), 2, "cpu", env=worker_env())
    try:
        executor.ensure_started()
        start = time.monotonic()
        failed = executor.run(
            autotune.TrainingConfig(ranks=2, batch_size=64), FAST_BUDGET, time_limit=60
        )
        seconds = time.monotonic() - start
        assert failed.failure is FailureReason.OOM
        assert failed.message.startswith("rank 1 of 2: out of memory")
        assert seconds < 10, seconds
        assert _gone() == []  # rank 0, waiting in an all-reduce, was stopped with it
        ok = executor.run(autotune.TrainingConfig(ranks=2, batch_size=16), FAST_BUDGET)
        assert ok.ok and ok.measurement is not None
        assert ok.measurement.batch_size == 32  # both ranks' samples per step
        assert executor.started == 2  # a fresh job after the failure
    finally:
        executor.close()
    assert _gone() == []


def test_a_rank_killed_by_sigkill_is_named_and_leaves_no_process() -> None:
    executor = DDPExecutor(_workload(OnRank("kill", rank=1)), 2, "cpu", env=worker_env())
    try:
        failed = executor.run(
            autotune.TrainingConfig(ranks=2, batch_size=64), FAST_BUDGET, time_limit=60
        )
        assert failed.failure is FailureReason.CRASH
        assert "rank 1 of 2" in failed.message and "SIGKILL" in failed.message
        assert _gone() == []
    finally:
        executor.close()


_SEARCH = """
import autotune
from autotune._trial.ddp import DDPExecutor
from autotune._trial.isolation import worker_env
from faulty import OnRank
from test_ddp import _workload
from conftest import FAST_BUDGET

executor = DDPExecutor(_workload(OnRank("hang", rank=1)), 2, "cpu", env=worker_env())
executor.ensure_started()
print("started", flush=True)
executor.run(autotune.TrainingConfig(ranks=2, batch_size=64), FAST_BUDGET, time_limit=600)
"""


@pytest.mark.slow
def test_a_search_killed_by_sigkill_leaves_no_rank_training() -> None:
    """The launcher runs in a session of its own: after the search was killed it trained on
    (a rank hanging, the other waiting on it) until the trial's limit, ten minutes here."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    search = subprocess.Popen(
        [sys.executable, "-c", _SEARCH], env=env, stdout=subprocess.PIPE, text=True
    )
    job: list[psutil.Process] = []
    try:
        assert search.stdout is not None and search.stdout.readline().strip() == "started"
        time.sleep(2.0)  # the trial is under way: rank 1 hangs, rank 0 waits in an all-reduce
        job = psutil.Process(search.pid).children(recursive=True)
        assert len(job) >= 3  # the launcher and its two ranks
        search.kill()
        search.wait()
        start = time.monotonic()
        _, alive = psutil.wait_procs(job, timeout=30)
        assert [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
        assert time.monotonic() - start < 15
    finally:
        search.kill()
        for p in job:  # what this test would otherwise leave running, if it failed
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def test_a_rank_that_cannot_load_the_workload_is_named_before_any_trial() -> None:
    task = make_task(autotune.Task(metric="accuracy"))
    work = Workload(model=tiny_model(), train=UnreadableOnRank1(), val=tiny_data(), task=task)
    with pytest.raises(ValueError, match=r"2 data-parallel ranks are impossible: .*rank 1 of 2: "
                       r"OSError: cannot open /data/shard-1.tar"):  # fmt: skip
        make_executor(work, "auto", env=worker_env(), ranks=2)
    assert _gone() == []


@pytest.mark.slow
def test_a_hang_on_one_rank_is_stopped_at_the_limit_with_every_rank() -> None:
    executor = DDPExecutor(_workload(OnRank("hang", rank=1)), 2, "cpu", env=worker_env())
    try:
        executor.ensure_started()
        failed = executor.run(
            autotune.TrainingConfig(ranks=2, batch_size=64), FAST_BUDGET, time_limit=8
        )
        assert failed.failure is FailureReason.TIMEOUT
        assert _gone() == []
    finally:
        executor.close()


def test_a_two_rank_search_measures_ddp_knobs_and_goes_on_after_a_rank_fails() -> None:
    result = find(
        OnRank("oom-type", rank=1),
        tiny_data(),
        space={"knobs": {"batch_size": [64, 16], "ddp_gradient_as_bucket_view": [False, True]}},
        n_trials=4,
        sampler=optuna.samplers.BruteForceSampler(seed=0),
        guided=False,
        budget=FAST_BUDGET,
        accuracy_samples=512,
        device="cpu",
        ranks=2,
    )
    failed = [t for t in result.trials if t.failure]
    assert failed and {t.config.batch_size for t in failed} == {64}
    assert all(t.failure == "oom" and t.message.startswith("rank 1 of 2") for t in failed)
    # Trials after the failure were measured (the search went on), DDP's knob among them.
    after = result.trials[result.trials.index(failed[0]) + 1 :]
    assert any(not t.failure and t.throughput > 0 for t in after)
    assert any(not t.failure and t.config.ddp_gradient_as_bucket_view for t in result.trials)
    assert result.baseline.ranks == 2 and result.config.ranks == 2
    saved = json.loads(result.to_json())
    assert saved["config"]["ranks"] == 2


@pytest.mark.slow
def test_verify_re_measures_a_two_rank_result_with_two_ranks(tmp_path: Path) -> None:
    result = find(
        PerStepCost(),
        tiny_data(1024),
        n_trials=1,
        space={"knobs": {"batch_size": [32, 128]}},
        tolerance=1.0,
        budget=FAST_BUDGET,
        accuracy_samples=1024,
        device="cpu",
        ranks=2,
    )
    assert result.config.batch_size == 128 and result.config.ranks == 2
    path = tmp_path / "best.json"
    result.save(path)
    lines: list[str] = []
    report = autotune.verify(
        str(path), PerStepCost(), tiny_data(1024), rounds=2, budget=FAST_BUDGET,
        accuracy_seeds=0, progress=lines.append,
    )  # fmt: skip
    assert report.winner.ranks == 2 and report.baseline.ranks == 2
    # A fixed cost per step on each rank: 4x the batch per step is faster on any machine.
    assert min(report.throughput_ratios) > 1.5
    assert _gone() == []

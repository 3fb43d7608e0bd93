"""CUDA-only paths, run where a GPU exists (skipped with the reason elsewhere, see conftest).

`pytest -m gpu` runs them all; `benchmarks/gpu_check.py` runs them with a short GPU search and
the speedup benchmark, and records what it found in benchmarks/RESULTS.md. Each test names the
issue-14 item it checks on real hardware (its CPU counterpart fakes what it can).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import autotune
from autotune._trial.failures import FailureReason
from autotune._trial.isolation import ProcessExecutor, worker_env
from autotune._trial.outcome import AccuracyCheck, Budget
from autotune._trial.probe import PROBE_BUDGET, probe_memory
from autotune._trial.runner import run_trial
from autotune._trial.task import make_task
from autotune._trial.workload import Workload, prepare_workload
from autotune.examples import SmallCNN, tiny_data, tiny_model

from conftest import FAST_BUDGET, find
from faulty import DeviceAssert

pytestmark = pytest.mark.gpu

CUDA = "cuda:0"
TESTS = Path(__file__).parent


def task():
    return make_task(autotune.Task(metric="accuracy"))


def workload(model: nn.Module, data=None, **kw) -> Workload:
    data = data if data is not None else tiny_data()
    return Workload(model=model, train=data, val=data, task=task(), **kw)


def images(n: int = 512) -> autotune.examples.AugmentedImages:
    return autotune.examples.AugmentedImages(n)


def free_bytes() -> int:
    gc.collect()
    torch.cuda.empty_cache()
    return int(torch.cuda.mem_get_info()[0])


# -- Out of memory, for real ---------------------------------------------------------------------


class HugeForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            torch.empty(2 * torch.cuda.mem_get_info()[1], dtype=torch.uint8, device=x.device)
        return self.lin(x)


class _HugeGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        torch.empty(2 * torch.cuda.mem_get_info()[1], dtype=torch.uint8, device=grad.device)
        return grad


class HugeBackward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _HugeGrad.apply(self.lin(x))  # type: ignore[no-any-return]


class HungryAdam(torch.optim.AdamW):
    """AdamW whose step needs more memory than the GPU has (optimizer state of a huge model)."""

    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        device = self.param_groups[0]["params"][0].device
        torch.empty(2 * torch.cuda.mem_get_info()[1], dtype=torch.uint8, device=device)
        return super().step(closure)


def hungry_adam(params, lr):  # type: ignore[no-untyped-def]
    return HungryAdam(params, lr=lr)


@pytest.mark.parametrize("where", ["forward", "backward", "step"])
def test_real_oom_in_forward_backward_and_step_is_recorded_and_memory_given_back(where) -> None:
    model = {"forward": HugeForward(), "backward": HugeBackward(), "step": tiny_model()}[where]
    extra = {"optimizer": hungry_adam} if where == "step" else {}
    load = workload(model, **extra)
    run_trial(autotune.TrainingConfig(device=CUDA), workload(tiny_model()), FAST_BUDGET)
    before = free_bytes()
    for _ in range(3):
        outcome = run_trial(autotune.TrainingConfig(device=CUDA), load, FAST_BUDGET)
        assert outcome.failure is FailureReason.OOM, outcome.message
        assert "out of memory" in outcome.message
    assert free_bytes() >= before - 64 * 2**20


def test_cuda_oom_trials_give_the_allocator_back() -> None:
    class Hog(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 3)

        def forward(self, x):
            held = torch.empty(512 * 2**20, dtype=torch.uint8, device=x.device)  # 512 MiB
            held.fill_(1)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB")

    load = workload(Hog())
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    for _ in range(10):
        outcome = run_trial(autotune.TrainingConfig(device=CUDA), load, FAST_BUDGET)
        assert outcome.failure is FailureReason.OOM
    assert torch.cuda.memory_allocated() == before
    assert torch.cuda.memory_reserved() < 512 * 2**20  # the cache was emptied too


# -- Item 1: a CUDA error that poisons the process ---------------------------------------------


def test_a_device_side_assert_in_a_worker_is_recorded_and_the_worker_replaced() -> None:
    executor = ProcessExecutor(workload(DeviceAssert()), env=worker_env())
    try:
        bad = executor.run(autotune.TrainingConfig(device=CUDA, batch_size=64), FAST_BUDGET)
        assert bad.failure is FailureReason.DEVICE, bad.message
        assert "device-side assert" in bad.message and "CUDA_LAUNCH_BLOCKING=1" in bad.message
        good = executor.run(autotune.TrainingConfig(device=CUDA, batch_size=16), FAST_BUDGET)
        assert good.ok, good.message
        assert executor.started == 2
    finally:
        executor.close()


def test_a_device_side_assert_in_process_stops_with_advice() -> None:
    """In a subprocess: the assert leaves that process's CUDA context unusable."""
    code = (
        "import autotune, faulty\n"
        "from autotune.examples import tiny_data\n"
        "try:\n"
        "    autotune.find_best(faulty.DeviceAssert(), tiny_data(), device='cuda',\n"
        "        space={'knobs': {'batch_size': [64]}}, options=autotune.SearchOptions(\n"
        "        n_trials=1, isolation='none', accuracy_samples=2048,\n"
        "        budget=autotune.Budget(warmup_steps=1, timed_samples=64, min_timed_steps=3,\n"
        "        chunks=3)))\n"
        "except autotune.DeviceError as exc:\n"
        "    print('DEVICE-ERROR', exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert "DEVICE-ERROR" in done.stdout, done.stderr[-3000:]
    assert "device-side assert" in done.stdout and "CUDA_LAUNCH_BLOCKING=1" in done.stdout


# -- Item 2: state carried from trial to trial -------------------------------------------------


def test_cudnn_benchmark_is_applied_and_its_trials_get_fresh_workers() -> None:
    seen: list[bool] = []

    class Watch(SmallCNN):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.backends.cudnn.benchmark)
            return super().forward(x)

    cfg = autotune.TrainingConfig(device=CUDA, cudnn_benchmark=True)
    assert run_trial(cfg, workload(Watch(width=8), images()), FAST_BUDGET).ok
    assert seen and all(seen)
    executor = ProcessExecutor(workload(SmallCNN(width=8), images()), env=worker_env())
    try:
        for benchmark in (False, True, False):
            outcome = executor.run(cfg.replace(cudnn_benchmark=benchmark), FAST_BUDGET)
            assert outcome.ok, outcome.message
        # The benchmark trial and the one after it each started from a clean process.
        assert executor.started == 3
    finally:
        executor.close()


@pytest.mark.parametrize(
    ("mode", "precision"),
    [
        ("default", "bf16"),
        ("default", "fp16"),
        ("reduce-overhead", "bf16"),
        ("reduce-overhead", "fp16"),
        # max-autotune compiles for minutes: one autocast dtype each.
        ("max-autotune", "bf16"),
        ("max-autotune-no-cudagraphs", "fp16"),
    ],
)
def test_each_compile_mode_trains_under_autocast(mode: str, precision: str) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("no native bf16 on this GPU")
    cfg = autotune.TrainingConfig(device=CUDA, compile_mode=mode, precision=precision)
    outcome = run_trial(cfg, workload(SmallCNN(width=8), images()), FAST_BUDGET)
    assert outcome.ok, outcome.message
    m = outcome.measurement
    assert m is not None and m.recompiles == 0
    assert m.compile_seconds is not None and m.compile_seconds > 0


class LossInside(nn.Module):
    """A model that computes its loss itself (Hugging Face style): under reduce-overhead its
    outputs live in CUDA-graph memory that the next replay overwrites."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_model()

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def _dict_batch(model: nn.Module, batch):  # type: ignore[no-untyped-def]
    x, y = batch
    return model(x, y), y


def _inner_loss(outputs, targets):  # type: ignore[no-untyped-def]
    return outputs["loss"]


def test_reduce_overhead_with_a_loss_computed_inside_the_model() -> None:
    t = make_task(autotune.Task(forward=_dict_batch, loss_fn=_inner_loss, metric="loss"))
    load = Workload(model=LossInside(), train=tiny_data(), val=tiny_data(), task=t)
    cfg = autotune.TrainingConfig(device=CUDA, compile_mode="reduce-overhead")
    check = AccuracyCheck(samples=512, seeds=(0,))
    outcome = run_trial(cfg, load, FAST_BUDGET, accuracy=check)
    assert outcome.ok, outcome.message
    assert outcome.accuracy and outcome.accuracy[0].final_loss == outcome.accuracy[0].final_loss


def test_dynamo_is_reset_after_a_compiled_trial() -> None:
    cfg = autotune.TrainingConfig(device=CUDA, compile_mode="reduce-overhead")
    assert run_trial(cfg, workload(tiny_model()), FAST_BUDGET).ok
    assert not torch._dynamo.convert_frame.input_codes.seen  # nothing compiled is kept


# -- Item 3: a model already on the GPU, data on the GPU --------------------------------------


def test_a_model_already_on_the_gpu_is_accepted_without_a_second_gpu_copy() -> None:
    model = nn.Sequential(nn.Linear(8, 4096), nn.ReLU(), nn.Linear(4096, 3)).to(CUDA)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    prepared = prepare_workload(model, tiny_data(), None, autotune.Task(), val_fraction=0.1, seed=0)
    assert torch.cuda.max_memory_allocated() - base < size // 2  # no GPU copy was made
    assert next(prepared.workload.model.parameters()).device.type == "cpu"
    result = find(
        model, tiny_data(), device="cuda", space="quick", n_trials=2, accuracy_samples=1024
    )
    assert result.environment["device"] == CUDA


def test_a_dataset_on_the_gpu_is_searched_without_pinning_or_workers() -> None:
    data = tiny_data()
    on_gpu = TensorDataset(data.tensors[0].to(CUDA), data.tensors[1].to(CUDA))
    result = find(
        tiny_model(), on_gpu, device="cuda", n_trials=3, accuracy_samples=1024,
        space={"knobs": {"pin_memory": [False, True], "num_workers": [0, 2],
                         "batch_size": [32, 64]}},
    )  # fmt: skip
    assert all(not t.config.pin_memory and t.config.num_workers == 0 for t in result.trials)
    assert not [t for t in result.trials if t.failure]


# -- Item 4: NVML under CUDA_VISIBLE_DEVICES ---------------------------------------------------


def test_nvml_reads_the_gpu_torch_uses_under_cuda_visible_devices() -> None:
    pynvml = pytest.importorskip("pynvml")
    last = torch.cuda.device_count() - 1
    code = (
        "import torch, pynvml\n"
        "from autotune._trial.measure import nvml_handle\n"
        "pynvml.nvmlInit()\n"
        "handle, note = nvml_handle(pynvml, torch.device('cuda:0'))\n"
        "uuid = pynvml.nvmlDeviceGetUUID(handle) if handle is not None else note\n"
        "print('UUID', uuid.decode() if isinstance(uuid, bytes) else uuid)\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(last), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pynvml.nvmlInit()
    expected = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(last))
    expected = expected.decode() if isinstance(expected, bytes) else expected
    line = next(x for x in done.stdout.splitlines() if x.startswith("UUID "))
    mig = "not available" in line
    assert mig or line == f"UUID {expected}"
    # Long enough for the sampler's 0.1 s readings.
    budget = Budget(min_timed_seconds=1.0, max_timed_seconds=5.0)
    cnn = workload(SmallCNN(), images())
    outcome = run_trial(autotune.TrainingConfig(device=CUDA), cnn, budget)
    m = outcome.measurement
    assert m is not None
    assert m.gpu_utilization is not None or (m.gpu_utilization_note or "").startswith(
        "not available"
    )


# -- Items 7 and 8: memory -----------------------------------------------------------------


def test_the_memory_probe_reads_free_memory_in_the_worker_and_fits_reserved_peaks() -> None:
    executor = ProcessExecutor(workload(SmallCNN(width=8), images()), env=worker_env())
    try:
        space = autotune.load_space({"knobs": {"batch_size": [16, 32, 64, 128]}})
        limits = probe_memory(
            executor, autotune.TrainingConfig(device=CUDA), space, capacity=None,
            report=print,
        )  # fmt: skip
    finally:
        executor.close()
    assert limits is not None
    assert 0 < limits.capacity < torch.cuda.get_device_properties(0).total_memory
    points = limits.points["fp32/ckpt0"]
    assert len(points) >= 2 and all(peak > 0 for _, peak in points)
    outcome = run_trial(autotune.TrainingConfig(device=CUDA), workload(tiny_model()), FAST_BUDGET)
    m = outcome.measurement
    assert m is not None and m.peak_reserved_bytes is not None and m.peak_memory_bytes
    assert m.peak_reserved_bytes >= m.peak_memory_bytes and m.device_free_bytes


def test_an_fp16_probe_run_ends_with_the_optimizer_state_allocated() -> None:
    outcome = run_trial(
        autotune.TrainingConfig(device=CUDA, precision="fp16"),
        workload(SmallCNN(width=8), images()),
        PROBE_BUDGET,
    )
    assert outcome.ok, outcome.message


# -- Item 5: the fp32 baseline is what a plain script runs -------------------------------------


def test_fp32_convolutions_use_tf32_as_pytorch_does_and_strict_does_not() -> None:
    if torch.cuda.get_device_properties(0).major < 8:
        pytest.skip("TF32 needs an Ampere or newer GPU")
    g = torch.Generator(device=CUDA).manual_seed(0)
    x = torch.randn(8, 64, 32, 32, device=CUDA, generator=g)
    w = torch.randn(64, 64, 3, 3, device=CUDA, generator=g)
    exact = nn.functional.conv2d(x.double(), w.double())
    errors = {}
    for precision in ("fp32", "fp32_strict"):
        with autotune.TrainingConfig(device=CUDA, precision=precision).backends():
            errors[precision] = float((nn.functional.conv2d(x, w).double() - exact).abs().max())
    assert errors["fp32"] > 10 * errors["fp32_strict"]  # TF32 rounds to 10 mantissa bits
    assert torch.get_float32_matmul_precision() == "highest"  # legacy readers still work


# -- bf16/fp16 steps, pinned copies ------------------------------------------------------------


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_steps_run_in_their_dtype(precision: str) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("no native bf16 on this GPU")
    dtypes: list[torch.dtype] = []

    class Watch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny_model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.net(x)
            dtypes.append(out.dtype)
            return out

    cfg = autotune.TrainingConfig(device=CUDA, precision=precision)
    outcome = run_trial(cfg, workload(Watch()), FAST_BUDGET)
    assert outcome.ok, outcome.message
    assert set(dtypes) >= {torch.bfloat16 if precision == "bf16" else torch.float16}
    assert cfg.grad_scaler().is_enabled() == (precision == "fp16")


def test_pinned_batches_from_workers_and_cudnn_benchmark_are_applied() -> None:
    cfg = autotune.TrainingConfig(
        device=CUDA,
        pin_memory=True,
        num_workers=2,
        persistent_workers=True,
        cudnn_benchmark=True,
    )
    batch = next(iter(cfg.dataloader(tiny_data())))
    assert batch[0].is_pinned()
    assert run_trial(cfg, workload(tiny_model()), FAST_BUDGET).ok
    before = torch.backends.cudnn.benchmark
    with cfg.backends():
        assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cudnn.benchmark is before


# -- Item 9: cuda:1 ----------------------------------------------------------------------------


def test_a_trial_on_cuda_1_runs_there_with_it_current() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    current: list[int] = []

    class Watch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny_model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            current.append(torch.cuda.current_device())
            out: torch.Tensor = self.net(x)
            return out

    on_0 = torch.cuda.memory_allocated(0)
    cfg = autotune.TrainingConfig(device="cuda:1", pin_memory=True, num_workers=1)
    outcome = run_trial(cfg, workload(Watch()), FAST_BUDGET)
    assert outcome.ok, outcome.message
    assert set(current) == {1}
    assert outcome.measurement is not None and outcome.measurement.peak_memory_bytes
    assert torch.cuda.memory_allocated(0) == on_0
    assert torch.cuda.current_device() == 0  # restored


# -- Searches and verify on the GPU ------------------------------------------------------------


def test_a_short_search_on_the_gpu_finds_a_feasible_winner() -> None:
    result = find(
        SmallCNN(width=8),
        images(),
        n_trials=4,
        space="quick",
        device="cuda",
        accuracy_samples=1024,
    )
    assert result.environment["device"] == CUDA
    assert result.winner.feasible and result.speedup >= 1.0
    assert result.metrics["peak_memory_bytes"] > 0
    assert result.metrics["memory_kind"] == "cuda_allocator"


def test_verify_on_the_gpu_measures_both_side_by_side() -> None:
    model, data = SmallCNN(width=8), images()
    result = find(
        model, data, n_trials=3, device="cuda", accuracy_samples=1024,
        space={"knobs": {"batch_size": [32, 128], "cudnn_benchmark": [False, True]}},
    )  # fmt: skip
    report = autotune.verify(result, model, data, rounds=2)
    assert not report.failures, report.failures
    if not report.same_config:
        assert len(report.speedups) == 2 and all(s > 0 for s in report.speedups)


# -- Data that streams, on a GPU (issue 39) ---------------------------------------------------


def test_a_stream_of_jpeg_shards_is_searched_on_the_gpu_and_its_loader_pins_batches(
    tmp_path,
) -> None:
    """WebDataset shards decoded in loader workers, pinned and copied to the GPU in trials
    (separate processes), a numerics change checked on pairs that re-read the stream; the
    exported loader keeps the tuned settings and gives pinned batches."""
    pytest.importorskip("webdataset")
    pytest.importorskip("PIL.Image")
    from jpeg_shards import jpeg_stream, small_cnn, write_shards

    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    train = write_shards(tmp_path / "train", 4, 256, seed=0)
    val = write_shards(tmp_path / "val", 1, 256, seed=1)
    result = find(
        small_cnn(), jpeg_stream(train), val_dataset=jpeg_stream(val), planned_samples=1024,
        timeout=60, device="cuda",
        space={"knobs": {"batch_size": [32, 64], "num_workers": [2, 4], "pin_memory": [True],
                         "precision": ["fp32", "bf16"]}},
    )  # fmt: skip
    assert result.environment["device"] == CUDA
    assert not [t.message for t in result.trials if t.failure]
    # The space is widened to hold the baseline (no workers, no pinning): some trials pin.
    assert any(t.config.pin_memory and t.config.num_workers for t in result.trials)
    assert "a stream (WebDataset)" in result.to_dict()["search"]["data"]
    cfg = autotune.load_config(result.save(tmp_path / "best.json"))
    assert cfg == result.config
    pinned = cfg.replace(pin_memory=True, num_workers=2, prefetch_factor=2)
    batches = list(pinned.dataloader(jpeg_stream(train), collate_fn=None))
    assert sum(len(b[1]) for b in batches) == 1024
    assert all(b[0].is_pinned() for b in batches)


# -- The trainer you already have, on a GPU (issue 21) -------------------------------------------


def test_a_lightning_trainer_on_the_gpu_is_tuned_with_its_mixed_precisions(tmp_path) -> None:
    """Trials of a GPU Trainer run fit on the GPU with the candidate's precision
    ('bf16-mixed' / '16-mixed'), pinned loaders and cuDNN benchmark; the export says so."""
    import lightning_tasks as lt

    trainer = lt.lightning_trainer(accelerator="gpu", devices=1)
    result = autotune.tune(
        trainer,
        lt.SmoothedSGD(),
        datamodule=lt.NoisyData(),
        metric="val_acc",
        space={"knobs": {"precision": ["fp32", "bf16", "fp16"], "pin_memory": [False, True]}},
        tolerance=0.05,
        options=autotune.SearchOptions(n_trials=4, accuracy_samples=512, budget=FAST_BUDGET),
    )
    assert result.baseline.device == CUDA
    ran = {t.config.precision.value for t in result.trials if t.failure is None}
    assert {"bf16", "fp16"} & ran, [t.to_dict() for t in result.trials]
    settings = result.trainer_settings()
    assert settings["trainer"]["accelerator"] == "cuda"
    assert settings["trainer"]["precision"] in {"32-true", "bf16-mixed", "16-mixed"}


def test_a_hugging_face_trainer_on_the_gpu_is_tuned_with_bf16_and_fp16(tmp_path) -> None:
    import lightning_tasks as lt

    trainer = lt.hf_trainer(str(tmp_path), use_cpu=False)
    # 2,048 samples: in 512 the tiny BERT does not learn (0.4453, the untrained model's), the
    # guard then rules out every change of the numerics, and only the baseline ran (the H100,
    # 2026-11-26); in 2,048 it reaches 0.99 (on the CPU) and the reduced precisions are tried.
    result = autotune.tune(
        trainer,
        metric="eval_accuracy",
        space={"knobs": {"precision": ["fp32", "bf16", "fp16"], "batch_size": [16, 32]}},
        tolerance=0.2,
        options=autotune.SearchOptions(n_trials=4, accuracy_samples=2048, budget=FAST_BUDGET),
    )
    assert result.baseline.device == CUDA
    ran = {t.config.precision.value for t in result.trials if t.failure is None}
    assert {"bf16", "fp16"} & ran, [t.to_dict() for t in result.trials]
    assert "use_cpu" not in result.trainer_settings()["training_arguments"]


# -- Issue 30: data-parallel trials with NCCL ----------------------------------------------------


def _two_gpus() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (DDP with NCCL: one rank per GPU)")


def test_ddp_trials_with_nccl_measure_every_rank_and_fail_together() -> None:
    from autotune._trial.ddp import DDPExecutor

    from faulty import OnRank

    _two_gpus()
    executor = DDPExecutor(workload(OnRank("oom-type", rank=1)), 2, "cuda", env=worker_env())
    try:
        ok = executor.run(
            autotune.TrainingConfig(device="cuda", ranks=2, batch_size=16), FAST_BUDGET
        )
        assert ok.ok, ok.message
        assert ok.measurement is not None and ok.measurement.batch_size == 32
        assert ok.measurement.peak_memory_bytes
        failed = executor.run(
            autotune.TrainingConfig(device="cuda", ranks=2, batch_size=64), FAST_BUDGET,
            time_limit=120,
        )  # fmt: skip
        assert failed.failure is FailureReason.OOM
        assert failed.message.startswith("rank 1 of 2")
    finally:
        executor.close()


def test_a_two_gpu_search_with_nccl_finishes_and_measures_ddp_knobs() -> None:
    _two_gpus()
    result = find(
        tiny_model(),
        tiny_data(),
        space={
            "knobs": {"ddp_gradient_as_bucket_view": [False, True], "ddp_bucket_cap_mb": [None, 1]}
        },
        n_trials=3,
        budget=FAST_BUDGET,
        device="cuda",
        ranks=2,
    )
    assert result.config.ranks == 2
    assert not [t for t in result.trials if t.failure]

"""Each knob is really applied by the same functions the trial runner trains through
(autotune._trial.apply)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autotune import LRSchedule, TrainingConfig
from autotune._trial import apply as knobs
from autotune.examples import SmallCNN, tiny_data, tiny_model


def test_dataloader_really_has_the_workers_and_settings() -> None:
    cfg = TrainingConfig(batch_size=64, num_workers=2, persistent_workers=True, prefetch_factor=4)
    loader = cfg.dataloader(tiny_data())
    assert loader.batch_size == 64
    assert loader.num_workers == 2
    assert loader.persistent_workers is True
    assert loader.prefetch_factor == 4
    batch = next(iter(loader))  # the workers really produce batches
    assert batch[0].shape == (64, 8)


def test_pin_memory_only_pins_for_an_accelerator() -> None:
    assert TrainingConfig(pin_memory=True).dataloader(tiny_data()).pin_memory is False
    cuda_cfg = TrainingConfig(device="cuda:0", pin_memory=True)
    assert cuda_cfg.dataloader(tiny_data()).pin_memory is True


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16", torch.bfloat16), ("fp32", torch.float32)]
)
def test_autocast_really_runs_in_the_chosen_dtype(precision: str, dtype: torch.dtype) -> None:
    cfg = TrainingConfig(precision=precision)
    layer = nn.Linear(4, 4)
    with cfg.autocast():
        out = layer(torch.randn(2, 4))
    assert out.dtype == dtype


def test_grad_scaler_only_for_fp16() -> None:
    assert TrainingConfig(precision="fp16").grad_scaler().is_enabled()
    assert not TrainingConfig(precision="bf16").grad_scaler().is_enabled()


def test_checkpointing_really_wraps_every_kth_block(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = torch.utils.checkpoint.checkpoint

    def counting(fn, *args, **kwargs):
        calls.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(knobs.torch_checkpoint, "checkpoint", counting)
    model = SmallCNN(width=4)
    assert len(knobs.find_repeated_blocks(model)) == 3
    every_two = TrainingConfig(checkpointing=2).prepare(model)
    assert [type(b).__name__ for b in knobs.checkpointed_blocks(every_two)] == ["ConvBlock"] * 2
    assert knobs.checkpointed_blocks(every_two)[0] is every_two.blocks[0]
    assert knobs.checkpointed_blocks(every_two)[1] is every_two.blocks[2]
    every_two(torch.randn(2, 3, 32, 32)).sum().backward()
    assert len(calls) == 2  # blocks 0 and 2 recompute in backward
    # No checkpointing (and no recompute) under no_grad, as in validation.
    calls.clear()
    with torch.no_grad():
        every_two(torch.randn(2, 3, 32, 32))
    assert calls == []
    # state_dict keys are unchanged, so a user's saved weights still load.
    assert set(every_two.state_dict()) == set(model.state_dict())


def test_checkpointed_model_computes_the_same_gradients() -> None:
    model = SmallCNN(width=4).eval()  # eval: BatchNorm statistics do not change between calls
    x = torch.randn(2, 3, 32, 32)
    plain = TrainingConfig().prepare(model)
    ckpt = TrainingConfig(checkpointing=1).prepare(model)
    plain(x).sum().backward()
    ckpt(x).sum().backward()
    for a, b in zip(plain.parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_prepare_copies_by_default_and_applies_channels_last() -> None:
    model = SmallCNN(width=4)
    prepared = TrainingConfig(channels_last=True).prepare(model)
    assert prepared is not model
    conv = prepared.blocks[0].conv.weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert not model.blocks[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    batch = TrainingConfig(channels_last=True).to_device((torch.randn(2, 3, 8, 8), torch.zeros(2)))
    assert batch[0].is_contiguous(memory_format=torch.channels_last)


def test_compile_mode_is_passed_to_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def fake_compile(model, mode=None, dynamic=None):
        seen.append((mode, dynamic))
        return model

    monkeypatch.setattr(knobs.torch, "compile", fake_compile)
    TrainingConfig(compile_mode="max-autotune-no-cudagraphs").prepare(tiny_model())
    TrainingConfig(compile_mode="default", compile_dynamic=True).prepare(tiny_model())
    TrainingConfig(compile_mode="none").prepare(tiny_model())
    # dynamic=None is torch's own default: static shapes until one changes.
    assert seen == [("max-autotune-no-cudagraphs", None), (None, True)]


def test_backend_flags_are_set_and_restored() -> None:
    before = (
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
    )
    cfg = TrainingConfig(cudnn_benchmark=True, precision="tf32", intra_op_threads=1)
    with cfg.backends():
        assert torch.backends.cudnn.benchmark is True
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_num_threads() == 1
    after = (
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
    )
    assert after == before


def test_backend_flags_restored_after_an_exception() -> None:
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), TrainingConfig(intra_op_threads=1).backends():
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def _lrs(cfg: TrainingConfig, steps: int) -> list[float]:
    opt = cfg.optimizer(nn.Linear(2, 2).parameters())
    sched = cfg.lr_scheduler(opt, total_steps=steps)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_cosine_schedule_warms_up_then_anneals_to_zero() -> None:
    cfg = TrainingConfig(lr_schedule=LRSchedule(kind="cosine", peak_lr=0.1, warmup_fraction=0.1))
    lrs = _lrs(cfg, 100)
    assert lrs[0] == pytest.approx(0.01)  # first of 10 warm-up steps
    assert lrs[9] == pytest.approx(0.1)
    assert max(lrs) == pytest.approx(0.1)
    assert lrs[-1] < 0.001


def test_one_cycle_peaks_at_peak_lr() -> None:
    cfg = TrainingConfig(
        lr_schedule=LRSchedule(kind="one_cycle", peak_lr=0.05, warmup_fraction=0.2)
    )
    lrs = _lrs(cfg, 50)
    assert max(lrs) == pytest.approx(0.05, rel=1e-3)
    assert lrs.index(max(lrs)) == 10 - 1 or lrs.index(max(lrs)) == 10
    assert lrs[-1] < 0.001


def test_constant_schedule_is_constant() -> None:
    lrs = _lrs(TrainingConfig(lr_schedule=LRSchedule(peak_lr=0.003)), 10)
    assert all(math.isclose(v, 0.003) for v in lrs)

"""autotune.train: a plain training loop that applies every knob of a config."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, get_worker_info

import autotune
from autotune import TrainingConfig
from autotune._knobs.apply import checkpointed_blocks
from autotune.examples import AugmentedImages, cnn_model, tiny_data, tiny_model


class WorkerTagged(Dataset):
    """tiny_data items plus the id of the DataLoader worker that produced them (-1: main)."""

    def __init__(self, n: int = 128) -> None:
        self.base = tiny_data(n)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        x, y = self.base[index]
        info = get_worker_info()
        return x, y, -1 if info is None else info.id


class Seen:
    """What the training forward pass saw (the forward hook runs in this process)."""

    def __init__(self) -> None:
        self.workers: set[int] = set()
        self.dtypes: set[torch.dtype] = set()

    def forward(self, model: torch.nn.Module, batch):
        x, y, worker = batch
        out = model(x)
        if model.training:
            self.workers.update(int(w) for w in worker)
            self.dtypes.add(out.dtype)
        return out, y


@pytest.mark.parametrize(
    ("workers", "precision", "expected_workers", "dtype"),
    [
        (0, "fp32", {-1}, torch.float32),
        (2, "bf16", {0, 1}, torch.bfloat16),
    ],
)
def test_loader_workers_and_precision_are_applied(workers, precision, expected_workers, dtype):
    seen = Seen()
    cfg = TrainingConfig(
        batch_size=16,
        num_workers=workers,
        persistent_workers=workers > 0,
        precision=precision,
    )
    report = autotune.train(
        tiny_model(), WorkerTagged(), cfg, epochs=2, task=autotune.Task(forward=seen.forward)
    )
    assert seen.workers == expected_workers  # batches really came from the loader's workers
    assert seen.dtypes == {dtype}  # the forward pass really ran under autocast
    assert [e.steps for e in report.epochs] == [8, 8]
    assert all(e.samples == 128 for e in report.epochs)


def test_lr_schedule_spans_every_epoch() -> None:
    cfg = TrainingConfig(batch_size=32, lr_schedule={"kind": "cosine", "peak_lr": 0.01})
    report = autotune.train(tiny_model(), tiny_data(128), cfg, epochs=3)
    # Cosine over 3 x 4 steps: 3/4 of the peak after epoch 1, 1/4 after epoch 2, 0 at the end.
    lrs = [e.lr for e in report.epochs]
    assert lrs == pytest.approx([0.0075, 0.0025, 0.0], abs=1e-9)


def test_callers_model_is_untouched_and_the_trained_copy_is_returned() -> None:
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainingConfig(batch_size=32, lr_schedule={"kind": "cosine", "peak_lr": 0.01})
    report = autotune.train(model, tiny_data(), cfg, epochs=4, val_dataset=tiny_data(96))
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), f"{key} of the caller's model changed"
    assert report.model is not model
    assert not torch.equal(report.model.state_dict()["0.weight"], before["0.weight"])
    assert report.losses[-1] < report.losses[0] / 2
    assert report.val_metric is not None and report.val_metric > 0.9
    assert report.metric_name == "accuracy" and report.samples_per_second > 0
    # The returned model is usable as is: it predicts the validation set as well as reported.
    x, y = tiny_data(96)[:]
    with torch.no_grad():
        acc = (report.model(x).argmax(-1) == y).float().mean().item()
    assert acc == pytest.approx(report.val_metric)


def test_model_knobs_are_applied_to_the_trained_model() -> None:
    cfg = TrainingConfig(batch_size=16, channels_last=True, checkpointing=1)
    report = autotune.train(cnn_model(), AugmentedImages(64), cfg, epochs=1)
    assert len(checkpointed_blocks(report.model)) == 3  # every conv block recomputed
    conv = report.model.blocks[0].conv.weight
    assert conv.is_contiguous(memory_format=torch.channels_last)


def test_same_seed_same_run_and_the_callers_rng_is_kept() -> None:
    cfg = TrainingConfig(batch_size=16)
    model, data = tiny_model(), tiny_data(64)  # (these seed torch themselves)
    state = torch.get_rng_state()
    a = autotune.train(model, data, cfg, epochs=2, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    b = autotune.train(tiny_model(), tiny_data(64), cfg, epochs=2, seed=3)
    c = autotune.train(tiny_model(), tiny_data(64), cfg, epochs=2, seed=4)
    assert a.losses == b.losses
    assert a.losses != c.losses  # another data order


def test_config_from_a_result_file(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(TrainingConfig(batch_size=64).to_json())
    report = autotune.train(tiny_model(), tiny_data(128), str(path))
    assert report.config.batch_size == 64 and report.epochs[0].steps == 2
    assert "epoch 1: loss" in report.summary()


def test_divergence_is_an_error_that_says_so() -> None:
    def nan_loss(outputs, targets):
        return F.cross_entropy(outputs, targets) * math.nan

    with pytest.raises(RuntimeError, match="diverged: loss became nan"):
        autotune.train(
            tiny_model(), tiny_data(64), TrainingConfig(), task=autotune.Task(loss_fn=nan_loss)
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"config": {"batch_size": 8}}, TypeError, "`config` must be a TrainingConfig"),
        ({"epochs": 0}, ValueError, "`epochs` must be >= 1, but got 0"),
        ({"epochs": 1.5}, TypeError, "`epochs` must be an int"),
        ({"model": "tiny"}, TypeError, "`model` must be a torch.nn.Module"),
        (
            {"config": TrainingConfig(device="cuda:0")},
            ValueError,
            "CUDA is not available",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message) -> None:
    if "cuda" in message and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    args = {"model": tiny_model(), "dataset": tiny_data(32), "config": TrainingConfig()}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        autotune.train(args.pop("model"), args.pop("dataset"), args.pop("config"), **args)


def _plain_sgd(params, lr):
    return torch.optim.SGD(params, lr=lr)


def test_train_accumulates_and_the_schedule_counts_optimizer_steps() -> None:
    cfg = autotune.TrainingConfig(
        batch_size=16,
        gradient_accumulation_steps=4,
        lr_schedule=autotune.LRSchedule(kind="cosine", peak_lr=0.05),
    )
    report = autotune.train(tiny_model(), tiny_data(256), cfg, epochs=2)
    assert [e.steps for e in report.epochs] == [16, 16]  # micro-batches of 16
    # 2 epochs of 4 optimizer steps: the cosine reaches zero at the 8th (counted in
    # micro-batches it would still be at 85% of its peak).
    assert report.epochs[-1].lr == pytest.approx(0.0, abs=1e-9)
    assert report.epochs[0].lr == pytest.approx(0.025)  # halfway
    with pytest.raises(autotune.AutotuneError, match=r"does not take `fused=True`"):
        autotune.train(
            tiny_model(),
            tiny_data(),
            cfg.replace(optimizer_impl="fused"),
            task=autotune.Task(optimizer=_plain_sgd),
        )


@pytest.mark.parametrize(
    ("compile_mode", "dynamic", "samples"),
    [("none", False, 100), ("default", False, 96), ("default", True, 100)],
)
def test_a_compiled_config_drops_the_last_partial_batch_as_measured(
    monkeypatch, compile_mode: str, dynamic: bool, samples: int
) -> None:
    """The search measured compiled configs with drop_last (a last, smaller batch compiles
    again, and with CUDA graphs records a new graph): train() does the same by default.
    (torch.compile is replaced by the identity here: what is tested is the loop.)"""
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)
    cfg = TrainingConfig(compile_mode=compile_mode, compile_dynamic=dynamic)
    report = autotune.train(tiny_model(), tiny_data(100), cfg, epochs=1)
    assert report.epochs[0].samples == samples
    kept = autotune.train(tiny_model(), tiny_data(100), cfg, epochs=1, drop_last=False)
    assert kept.epochs[0].samples == 100

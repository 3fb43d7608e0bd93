"""Bad input gets a clear error naming the problem, before any trial runs."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

import autotune
from autotune import _run
from autotune.examples import tiny_data, tiny_model

from conftest import split_keywords


@pytest.fixture(autouse=True)
def no_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("a trial ran before the input was validated")

    monkeypatch.setattr(_run, "make_executor", forbidden)


class Items(torch.utils.data.Dataset):
    def __init__(self, item, n=8):
        self.item, self.n = item, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.item


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"model": tiny_model}, TypeError, r"`model` must be a torch.nn.Module, but got function"),
        (
            {"dataset": TensorDataset(torch.zeros(0, 8), torch.zeros(0))},
            autotune.DataError,
            r"`dataset` is empty \(len 0\)",
        ),
        (
            {"dataset": Items({"x": torch.zeros(8), "y": 1})},
            autotune.DataError,
            r"`dataset\[0\]` is a dict with keys \['x', 'y'\] but no `labels`.*model\(\*\*batch\)"
            r".*forward=",
        ),
        (
            {"dataset": Items((torch.zeros(5), 1))},
            autotune.ModelError,
            r"cannot consume the dataset's batches: on a batch of 2 items "
            r"\(tensor\(2, 5\) float32, tensor\(2,\) int64\).*mat1 and mat2",
        ),
        ({"space": "visoin"}, autotune.SearchSpaceError, r"Unknown search space 'visoin'"),
        ({"tolerance": -0.1}, ValueError, r"`tolerance` must be >= 0, but got -0.1"),
        ({"timeout": 0}, ValueError, r"`timeout` must be > 0 seconds, but got 0"),
        ({"n_trials": 0}, ValueError, r"`n_trials` must be >= 1, but got 0"),
        (
            {"device": "cuda:7"} if not torch.cuda.is_available() else {"device": "cuda:99"},
            ValueError,
            r"`device` is 'cuda:(7|99)', but",
        ),
        ({"device": "tpu"}, ValueError, r"`device` must be a device such as 'cpu'"),
        ({"storage": "sqlite:/bad"}, autotune.StorageError, r"`storage` must be a database URL"),
        ({"storage": "nosuchdb://x/y"}, autotune.StorageError, r"Cannot open the study"),
        (
            {"metric": "f1"},
            ValueError,
            r"`metric` must be 'auto', 'accuracy', 'loss', 'token_accuracy' or a callable "
            r"\(outputs, targets\) -> float, but got 'f1'\.",
        ),
        ({"isolation": "thread"}, ValueError, r"`isolation` must be one of auto, process, none"),
        ({"trial_timeout": -1}, ValueError, r"`trial_timeout` must be > 0 seconds or None"),
        (
            {"baseline": {"batch_size": 0}},
            autotune.ConfigError,
            r"Invalid `baseline`: `batch_size` must be >= 1, but got 0",
        ),
        (
            {"baseline": {"batch_size": 64, "gradient_accumulation_steps": 32}},
            autotune.ConfigError,
            r"The baseline's batch cannot train: its global batch of 2048 samples \(batch 64 x "
            r"32 accumulation steps\) is larger than the 1,843 training samples",
        ),
    ],
)
def test_bad_input(kwargs, error, message) -> None:
    args = {"model": tiny_model(), "dataset": tiny_data(), "n_trials": 1} | kwargs
    model, dataset = args.pop("model"), args.pop("dataset")
    with pytest.raises(error, match=message):
        autotune.find_best(model, dataset, **split_keywords(args))


def test_custom_batch_structure_through_a_forward_hook(monkeypatch) -> None:
    """Dict batches (as Hugging Face models take) validate through the forward hook."""
    data = [{"x": torch.randn(8), "y": i % 3} for i in range(64)]

    def forward(model, batch):
        return model(batch["x"]), batch["y"]

    # Validation passes, so the (forbidden) trial runner is reached.
    with pytest.raises(AssertionError, match="a trial ran"):
        autotune.find_best(
            tiny_model(),
            data,
            task=autotune.Task(forward=forward),
            options=autotune.SearchOptions(n_trials=1),
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"task": {"metric": "loss"}}, TypeError, r"`task` must be an autotune.Task or None"),
        ({"options": {"n_trials": 1}}, TypeError, r"`options` must be an autotune.SearchOptions"),
        (
            {"task": autotune.Task(metric="loss"), "metric": "accuracy"},
            ValueError,
            r"`metric` is 'accuracy', but the task already says metric='loss'\. Give the metric "
            r"once",
        ),
    ],
)
def test_the_task_and_options_objects_are_checked(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        autotune.find_best(tiny_model(), tiny_data(), **kwargs)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: autotune.SearchOptions(n_trials=0), ValueError, r"`n_trials` must be >= 1"),
        (
            lambda: autotune.SearchOptions(isolation="thread"),
            ValueError,
            r"`isolation` must be one of auto, process, none, but got 'thread'",
        ),
        (
            lambda: autotune.Task(metric="accuracy", higher_is_better=False),
            ValueError,
            r"`higher_is_better` is False, but accuracy is better when higher",
        ),
        (lambda: autotune.Task(loss_fn="ce"), TypeError, r"`loss_fn` must be callable or None"),
    ],
)
def test_options_and_tasks_are_checked_when_made(build, error, message) -> None:
    with pytest.raises(error, match=message):
        build()


def test_a_lightning_module_is_sent_to_tune_not_trained_as_a_plain_module() -> None:
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny_model()

    with pytest.raises(TypeError, match=r"is a LightningModule \(Module\).*autotune\.tune\("):
        autotune.find_best(Module(), tiny_data())

"""``autotune show best.json --as loop|lightning|transformers``: the lines to paste, run as
printed (the names a user's script has, ``model``, ``train_dataset``, ``epochs``, ``loss_fn``,
defined around them)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune import TrainingConfig
from autotune._errors import ConfigError
from autotune._result.paste import KINDS, snippet
from autotune._result.result import SCHEMA_VERSION

TUNED = TrainingConfig().replace(batch_size=16, gradient_accumulation_steps=2, channels_last=True)


def _result(tmp_path, cfg: TrainingConfig = TUNED) -> tuple[dict, str]:
    data = {
        "schema_version": SCHEMA_VERSION,
        "config": cfg.to_dict(),
        "baseline": {"config": TrainingConfig().to_dict()},
    }
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    return data, str(path)


def _images() -> TensorDataset:
    torch.manual_seed(0)
    return TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 4, (64,)))


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(4))


def test_the_loop_snippet_trains_as_printed(tmp_path) -> None:
    data, path = _result(tmp_path)
    text = snippet(data, "loop", path)
    assert 'cfg = autotune.load_config("' in text and "if i % 2 == 0:" in text
    assert "scaler.scale(loss / 2).backward()" in text
    model = _net()
    model(torch.randn(1, 3, 8, 8))  # the lazy layer's shape
    names = {
        "model": model,
        "train_dataset": _images(),
        "epochs": 1,
        "loss_fn": nn.functional.cross_entropy,
    }
    exec(compile(text, "snippet", "exec"), names)
    assert names["scheduler"].last_epoch == names["steps"] == 2  # 4 batches, 2 per step


def test_the_lightning_snippet_fits_as_printed(tmp_path, monkeypatch) -> None:
    lightning = pytest.importorskip("lightning")

    class Module(lightning.pytorch.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 4))

        def training_step(self, batch, _):
            inputs, targets = batch
            return nn.functional.cross_entropy(self.net(inputs), targets)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data, path = _result(tmp_path, TUNED.replace(gradient_accumulation_steps=1))
    text = snippet(data, "lightning", path)
    assert "# Trainer: " in text and "# DataLoader: batch_size=16" in text
    monkeypatch.chdir(tmp_path)  # the Trainer's logs go to the working folder
    names = {"model": Module(), "train_dataset": _images(), "epochs": 1}
    exec(compile(text, "snippet", "exec"), names)
    assert names["trainer"].current_epoch == 1


def test_the_transformers_snippet_makes_its_training_arguments(tmp_path) -> None:
    pytest.importorskip("transformers")
    data, path = _result(tmp_path)
    text = snippet(data, "transformers", path)
    assert "per_device_train_batch_size=16" in text and "gradient_accumulation_steps=2" in text
    # Up to the Trainer, which needs a model of the user's: the arguments are built as printed.
    head = text.split("trainer = Trainer(")[0].replace(
        'output_dir="out"', f'output_dir="{tmp_path}"'
    )
    names: dict = {}
    exec(compile(head, "snippet", "exec"), names)
    assert names["args"].per_device_train_batch_size == 16


def test_an_unknown_kind_is_refused_naming_the_kinds(tmp_path) -> None:
    data, _ = _result(tmp_path)
    with pytest.raises(ConfigError, match="--as must be one of loop, lightning, transformers"):
        snippet(data, "keras")
    assert KINDS == ("loop", "lightning", "transformers")


def test_show_as_prints_the_snippet(tmp_path, capsys) -> None:
    from autotune._cli import main

    data, path = _result(tmp_path)
    (tmp_path / "best.json").write_text(json.dumps({**data, "metrics": {}}))
    assert main(["show", path, "--as", "loop"]) == 0
    assert capsys.readouterr().out.strip() == snippet(data, "loop", path)

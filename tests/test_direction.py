"""Which way the guarded metric is better: one reading for find_best, Task, tune and the CLI.
A direction given twice must agree (both places named), and one nothing says is asked for: a
guard that reads a metric the wrong way round accepts exactly the changes that hurt it."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

import autotune
from autotune._cli import main
from autotune._trial.direction import Said, choose_direction
from autotune.examples import tiny_data, tiny_model

import lightning_tasks as lt
from conftest import find


def _mse(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float(((outputs.argmax(-1) - targets).float() ** 2).mean())


def _agreement(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float((outputs.argmax(-1) == targets).float().mean())


def test_a_logged_metric_is_read_from_its_name_from_what_another_setting_says_or_asked_for():
    assert choose_direction("val_loss", None).higher_is_better is False
    assert choose_direction("eval_accuracy", None).higher_is_better is True
    assert choose_direction("val/f1_macro", None).higher_is_better is True
    assert choose_direction("bleu_or_loss", True).higher_is_better is True  # given: taken
    minimised = Said(higher_is_better=False, where="your EarlyStopping(mode='min')")
    choice = choose_direction("val_acc", None, said=minimised)
    assert choice.higher_is_better is False
    assert choice.reason == "your EarlyStopping(mode='min') says lower is better"
    with pytest.raises(ValueError, match=r"'val_thing' better\? Its name does not say"):
        choose_direction("val_thing", None)
    with pytest.raises(
        autotune.ArgumentError,
        match=r"Which way is 'val_acc' better\? You gave higher_is_better=True \(higher is "
        r"better\), but your EarlyStopping\(mode='min'\) says lower is better",
    ):
        choose_direction("val_acc", True, said=minimised)


def test_a_metric_function_whose_name_does_not_say_is_asked_about_before_any_trial() -> None:
    """It was taken as higher-is-better: a mean-error function called `my_metric` would have
    been guarded upside down."""
    with pytest.raises(
        autotune.ArgumentError,
        match=r"Which way is your metric '<lambda>' better\? Its name does not say.*"
        r"--higher-is-better / --lower-is-better",
    ):
        autotune.Task(metric=lambda outputs, targets: 0.0)
    with pytest.raises(autotune.ArgumentError, match=r"your metric '_agreement'"):
        find(tiny_model(), tiny_data(), metric=_agreement, n_trials=1)
    # Given, or said by the name (a partial's function's name counts), nothing is asked.
    assert autotune.Task(metric=_agreement, higher_is_better=True).higher_is_better is True
    autotune.Task(metric=functools.partial(_mse))


def test_a_metric_function_named_for_an_error_is_guarded_lower_is_better(fast_kwargs) -> None:
    result = find(
        tiny_model(), tiny_data(), metric=_mse, n_trials=1,
        space={"knobs": {"batch_size": [32, 64]}}, **fast_kwargs,
    )  # fmt: skip
    validation = result.to_dict()["validation"]
    assert result.higher_is_better is False and validation["higher_is_better"] is False
    assert validation["reason"] == "its name says lower is better"


def test_the_command_line_says_either_direction_and_asks_where_nothing_does(
    tmp_path: Path, capsys
) -> None:
    hooks = tmp_path / "hooks.py"
    hooks.write_text(
        "def agreement(outputs, targets):\n"
        "    return float((outputs.argmax(-1) == targets).float().mean())\n"
    )
    base = [
        "search", "--model", "autotune.examples:tiny_model", "--data",
        "autotune.examples:tiny_data", "--storage", f"sqlite:///{tmp_path / 'a.db'}",
        "--trials", "1", "--space", "quick", "--timed-seconds", "0.5",
        "--accuracy-samples", "256", "--quiet", "--metric", f"{hooks}:agreement",
    ]  # fmt: skip
    out = tmp_path / "best.json"
    assert main([*base, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Which way is your metric 'agreement' better?" in err
    assert "--higher-is-better / --lower-is-better" in err and not out.exists()
    assert main([*base, "--out", str(out), "--higher-is-better"]) == 0
    assert json.loads(out.read_text())["validation"]["higher_is_better"] is True
    with pytest.raises(SystemExit):  # argparse: not allowed with the other
        main([*base, "--out", str(out), "--higher-is-better", "--lower-is-better"])
    assert "not allowed with argument" in capsys.readouterr().err
    builtin = [*base[:-2], "--metric", "loss", "--higher-is-better", "--out", str(out)]
    assert main(builtin) == 2
    assert (
        "--higher-is-better: `higher_is_better` is True, but loss is better when lower"
        in capsys.readouterr().err
    )


def test_a_lightning_callbacks_mode_speaks_for_the_metric_it_watches() -> None:
    """Its mode was read only where metric= was left out; now it is read for the metric it
    watches however that was named, and a direction given against it is refused."""
    trainer = lt.lightning_trainer(callbacks=[EarlyStopping(monitor="val_acc", mode="max")])
    with pytest.raises(
        autotune.ArgumentError,
        match=r"Which way is 'val_acc' better\? You gave higher_is_better=False \(lower is "
        r"better\), but your EarlyStopping\(monitor='val_acc', mode='max'\) says higher",
    ):
        autotune.tune(
            trainer, lt.SmoothedSGD(), datamodule=lt.NoisyData(), metric="val_acc",
            higher_is_better=False,
        )  # fmt: skip


def test_hugging_faces_greater_is_better_speaks_for_its_metric_for_best_model(tmp_path) -> None:
    trainer = lt.hf_trainer(
        str(tmp_path), metric_for_best_model="accuracy", greater_is_better=True,
        eval_strategy="epoch",
    )  # fmt: skip
    with pytest.raises(
        autotune.ArgumentError,
        match=r"Which way is 'eval_accuracy' better\? You gave higher_is_better=False .* but "
        r"your TrainingArguments\(metric_for_best_model='accuracy', greater_is_better=True\) "
        r"says higher is better",
    ):
        autotune.tune(trainer, metric="eval_accuracy", higher_is_better=False)

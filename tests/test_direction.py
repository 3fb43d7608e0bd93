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
from autotune._task import TaskRefs
from autotune._trial.direction import Said, choose_direction
from autotune._trial.hf_setup import prepare_hf
from autotune._trial.lightning_setup import prepare_lightning
from autotune._trial.metrics import MetricChoice
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
        # Trials in this process: the flags are what is tested (test_cli runs the CLI's worker).
        "--isolation", "none",
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
    """Only where the user set it: TrainingArguments fills greater_is_better in by itself (not
    for a name ending in "loss"), which says nothing of eval_wer (lower is better)."""
    said = prepare_hf(
        lt.hf_trainer(str(tmp_path), metric_for_best_model="accuracy", greater_is_better=False),
        metric="eval_accuracy", higher_is_better=None,
    ).prepared.metric  # fmt: skip
    assert said.higher_is_better is False
    assert "greater_is_better=False" in said.reason
    trainer = lt.hf_trainer(str(tmp_path), metric_for_best_model="accuracy")
    assert trainer.args.greater_is_better is True  # filled in: not the user's word
    assert prepare_hf(trainer, metric="eval_accuracy", higher_is_better=None).prepared.metric == (
        MetricChoice(
            metric="eval_accuracy", higher_is_better=True,
            reason="its name says higher is better",
        )
    )  # fmt: skip
    with pytest.raises(
        autotune.ArgumentError,
        match=r"Which way is 'eval_accuracy' better\? You gave higher_is_better=True .* but "
        r"your TrainingArguments\(metric_for_best_model='accuracy', greater_is_better=False\) "
        r"says lower is better",
    ):
        autotune.tune(
            lt.hf_trainer(str(tmp_path), metric_for_best_model="accuracy", greater_is_better=False),
            metric="eval_accuracy", higher_is_better=True,
        )  # fmt: skip


def test_a_lightning_callbacks_default_mode_does_not_turn_an_accuracy_round() -> None:
    """ModelCheckpoint and EarlyStopping minimise unless told: monitoring val_acc without a
    mode guarded it as lower-is-better, upside down. The name is read, and the callback named."""
    start = prepare_lightning(
        lt.lightning_trainer(callbacks=[EarlyStopping(monitor="val_acc")]), lt.SmoothedSGD(),
        datamodule=lt.NoisyData(), metric="val_acc",
    )  # fmt: skip
    assert start.prepared.metric.higher_is_better is True
    assert "EarlyStopping(monitor='val_acc', mode='min') minimises val_acc" in str(
        start.prepared.note
    )


def test_words_that_may_turn_a_name_round_make_it_ask() -> None:
    for name in ("neg_mean_squared_error", "neg_log_loss", "accuracy_drop", "acc_gap"):
        with pytest.raises(autotune.ArgumentError, match="Its name does not say"):
            choose_direction(name, None)
    assert choose_direction("error_rate", None).higher_is_better is False


def test_a_worker_loads_a_study_stored_before_the_direction_was_asked_for() -> None:
    """A stored metric function with no direction: the search's resolved one is used."""
    refs = TaskRefs.from_dict({"metric": "steady:agreement", "higher_is_better": None})
    with pytest.raises(autotune.ArgumentError, match=r"your metric 'agreement'"):
        refs.load()  # what a worker did with such a study: refused, naming a flag it lacks
    assert refs.load(higher_is_better=True).higher_is_better is True


def test_higher_is_better_on_the_command_line_keeps_the_study_a_command_had() -> None:
    """A command with a metric function that ran without a flag now needs --higher-is-better
    (what it was taken as): it must resume the same study, not start another."""
    from autotune._cli import build_parser, default_study

    base = ["search", "--model", "m:f", "--data", "m:d", "--out", "x", "--metric", "m:score"]
    study = [default_study(build_parser().parse_args([*base, *flag])) for flag in (
        [], ["--higher-is-better"], ["--lower-is-better"],
    )]  # fmt: skip
    assert study[0] == study[1] != study[2]

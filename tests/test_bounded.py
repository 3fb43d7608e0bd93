"""Every call into the user's code before the first trial has a limit: a model whose first
forward hangs, a dataset whose first item hangs, a collate function or a factory that hangs end
the command at the limit with a SetUpTimeout that names the call, where it was stuck, the limit
and why it was that long (autotune/_trial/bounded.py and its callers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
import torch

import autotune
from autotune import _run
from autotune._cli import main
from autotune._trial.bounded import SetUpLimit, bounded, step
from autotune._verify import limits as verify_limits
from autotune.examples import tiny_data, tiny_model

import hanging
from hanging import HangingForward, HangingItems, counted_loss, hanging_collate

TESTS = Path(__file__).parent
SLACK = 5.0  # seconds past a limit a busy 2-core machine may take to say so


@pytest.fixture(autouse=True)
def _release(monkeypatch):
    """Each test's hangs wait on an event of its own, which only the test may set."""
    monkeypatch.setattr(hanging, "RELEASE", threading.Event())
    monkeypatch.setattr(hanging, "CALLS", [])


@pytest.fixture
def short(monkeypatch):
    """A search's set-up limit of 1 s: half of `timeout=2`, the floor out of the way."""
    monkeypatch.setattr(_run, "SETUP_FLOOR", 0.1)
    return 2.0


# -- bounded ---------------------------------------------------------------------------------


def test_a_call_within_its_limit_gives_its_value_or_its_own_error() -> None:
    limit = SetUpLimit(5.0, "a test's")
    assert bounded(lambda: 42, limit, doing="the answer") == 42
    error = ValueError("the user's own")

    def fail() -> None:
        raise error

    with pytest.raises(ValueError) as raised:
        bounded(fail, limit, doing="a failing call")
    assert raised.value is error


def _stuck_in_users_code() -> None:
    step("the second step, `dataset[7]`", "Read it alone.")
    hanging.RELEASE.wait(hanging.HOUR)
    hanging.CALLS.append("returned")
    step("the third step")
    hanging.CALLS.append("ran on")


def test_a_call_past_its_limit_is_named_by_its_step_and_frame_and_runs_no_further() -> None:
    start = time.monotonic()
    with pytest.raises(autotune.SetUpTimeout) as raised:
        bounded(_stuck_in_users_code, SetUpLimit(0.5, "a test's half second"), doing="the first")
    assert time.monotonic() - start < 0.5 + SLACK
    error = raised.value
    assert (error.doing, error.seconds) == ("the second step, `dataset[7]`", 0.5)
    line = _stuck_in_users_code.__code__.co_firstlineno + 2
    assert str(error) == (
        "The second step, `dataset[7]` did not return within 0.5 s, the limit: a test's half "
        f"second. It was in _stuck_in_users_code ({__file__}:{line}). Read it alone. If it is "
        "only slow, a longer timeout (timeout=, --timeout) gives it more. Nothing was measured "
        "or stored. The call was left running in a daemon thread of this process (Python "
        "cannot stop a thread); it ends when the process does."
    )
    assert isinstance(error, autotune.AutotuneError)
    # Released, the abandoned call returns from the user's code and stops at its next step.
    stuck = [t for t in threading.enumerate() if t.name == "autotune set-up: the first"]
    assert len(stuck) == 1 and stuck[0].daemon
    hanging.RELEASE.set()
    stuck[0].join(5)
    assert not stuck[0].is_alive()
    assert hanging.CALLS == ["returned"]


def test_ctrl_c_while_waiting_abandons_the_call_too() -> None:
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    def when_stuck() -> None:  # Ctrl-C once the call waits in the user's code
        while not any(t.name == "autotune set-up: interrupted" for t in threading.enumerate()):
            time.sleep(0.01)
        time.sleep(0.2)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    threading.Thread(target=when_stuck, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bounded(_stuck_in_users_code, SetUpLimit(30.0, "a test's"), doing="interrupted")
    finally:
        signal.signal(signal.SIGALRM, previous)
    hanging.RELEASE.set()
    _wait_for(lambda: hanging.CALLS == ["returned"])
    time.sleep(0.2)
    assert hanging.CALLS == ["returned"]  # not "ran on": it stopped at its next step


def _wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)


def test_the_search_limit_is_a_share_of_the_budget_with_a_floor() -> None:
    assert _run.setup_limit(600.0) == SetUpLimit(300.0, "50% of the search's 600 s budget")
    assert _run.setup_limit(None) == SetUpLimit(300.0, "50% of the default 600 s budget")
    assert _run.setup_limit(None, n_trials=5).why == (
        "50% of the default 600 s budget (the search has no timeout)"
    )
    assert _run.setup_limit(30.0) == SetUpLimit(
        30.0, "the least any call before the first trial gets (50% of the search's 30 s "
        "budget is 15 s)"
    )  # fmt: skip


# -- find_best --------------------------------------------------------------------------------


CULPRITS = {
    "forward": (
        lambda: (HangingForward(), tiny_data(), None),
        "the model's first forward (default_forward with HangingForward, on the first batch: "
        "items 0 and 1, on the CPU)",
        "HangingForward.forward",
    ),
    "item": (
        lambda: (tiny_model(), HangingItems(), None),
        "the first item, `dataset[0]` (HangingItems.__getitem__)",
        "HangingItems.__getitem__",
    ),
    "collate": (
        lambda: (tiny_model(), tiny_data(), autotune.Task(collate_fn=hanging_collate)),
        "the collate function hanging_collate on the first batch (items 0 and 1)",
        "hanging_collate",
    ),
}


@pytest.mark.parametrize("culprit", sorted(CULPRITS))
def test_find_best_ends_at_its_limit_naming_what_hung(culprit, short, tmp_path) -> None:
    make, doing, frame = CULPRITS[culprit]
    model, data, task = make()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    start = time.monotonic()
    with pytest.raises(autotune.SetUpTimeout) as raised:
        autotune.find_best(
            model, data, task=task, timeout=short, device="cpu",
            options=autotune.SearchOptions(storage=storage, study_name="hung"),
        )  # fmt: skip
    assert time.monotonic() - start < 1.0 + SLACK
    error = raised.value
    assert (error.doing, error.seconds) == (doing, 1.0)
    message = str(error)
    assert message.startswith(f"{doing[0].upper()}{doing[1:]} did not return within 1 s, the "
                              "limit: 50% of the search's 2 s budget. It was in ")  # fmt: skip
    assert f"It was in {frame} ({hanging.__file__}:" in message
    assert "left running in a daemon thread of this process" in message
    assert optuna.get_all_study_names(storage) == []  # nothing stored


def test_a_released_forward_runs_none_of_the_rest(short) -> None:
    task = autotune.Task(loss_fn=counted_loss)
    with pytest.raises(autotune.SetUpTimeout, match="first forward"):
        autotune.find_best(HangingForward(), tiny_data(), task=task, timeout=short, device="cpu")
    hanging.RELEASE.set()
    _wait_for(lambda: hanging.CALLS == ["forward returned"])
    time.sleep(0.5)
    assert hanging.CALLS == ["forward returned"]  # the loss, the split, the search: none ran


# -- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "data", "says"),
    [
        ("hanging:hanging_model", "autotune.examples:tiny_data",
         "The model's first forward (default_forward with HangingForward"),
        ("autotune.examples:tiny_model", "hanging:hanging_items",
         "The first item, `dataset[0]` (HangingItems.__getitem__)"),
        ("autotune.examples:tiny_model", "hanging:hanging_factory",
         "The --data factory hanging:hanging_factory did not return"),
    ],
)  # fmt: skip
def test_search_ends_at_its_limit_with_a_usage_error(model, data, says, short, tmp_path, capsys):
    out = tmp_path / "best.json"
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    args = ["search", "--model", model, "--data", data, "--timeout", str(short),
            "--storage", storage, "--out", str(out), "--quiet"]  # fmt: skip
    start = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - start < 1.0 + SLACK
    err = capsys.readouterr().err
    assert err.startswith(f"autotune search: error: {says}")
    assert "did not return within 1 s, the limit: 50% of the search's 2 s budget" in err
    assert not out.exists()


def _result(tmp_path: Path, seconds: float) -> Path:
    """A result whose study measured each of its two configs in ``seconds``."""
    winner = autotune.TrainingConfig(batch_size=64)
    baseline = autotune.TrainingConfig()
    trials = [{"config": c.to_dict(), "seconds": seconds} for c in (baseline, winner)]
    path = tmp_path / "best.json"
    path.write_text(json.dumps({
        "config": winner.to_dict(), "baseline": {"config": baseline.to_dict()}, "trials": trials,
    }))  # fmt: skip
    return path


def test_verify_ends_at_its_limit_derived_from_the_study(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(verify_limits, "MIN_LIMIT", 0.1)
    path = _result(tmp_path, seconds=0.4)  # 3x: 1.2 s
    start = time.monotonic()
    with pytest.raises(autotune.SetUpTimeout) as raised:
        autotune.verify(path, HangingForward(), tiny_data())
    assert time.monotonic() - start < 1.2 + SLACK
    assert raised.value.seconds == pytest.approx(1.2)
    assert str(raised.value).startswith(
        "The model's first forward (default_forward with HangingForward, on the first batch: "
        "items 0 and 1, on the CPU) did not return within 1.2 s, the limit: the baseline's "
        "limit of one verify run, the longer of the two: 3x the longest run the study measured "
        "of it (0.4 s). It was in HangingForward.forward"
    )
    assert "a longer run limit (time_limit=, --trial-timeout) gives it more" in str(raised.value)


def test_verify_on_the_command_line_bounds_its_factories_by_the_limit_given(tmp_path, capsys):
    path = _result(tmp_path, seconds=0.4)
    args = ["verify", str(path), "--model", "hanging:hanging_model", "--data",
            "autotune.examples:tiny_data", "--trial-timeout", "1", "--device", "cpu"]  # fmt: skip
    start = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - start < 1.0 + SLACK
    err = capsys.readouterr().err.splitlines()[-1]  # after the warning of no environment
    assert err.startswith("autotune verify: error: The model's first forward")
    assert (
        "did not return within 1 s, the limit: the baseline's limit of one verify run, the "
        "longer of the two: the limit given (time_limit= / --trial-timeout)"
    ) in err
    args[2:6] = ["--model", "autotune.examples:tiny_model", "--data", "hanging:hanging_factory"]
    assert main(args) == 2
    assert "The --data factory hanging:hanging_factory did not return within 1 s" in (
        capsys.readouterr().err
    )


@pytest.mark.slow
@pytest.mark.parametrize("model", ["hanging_model", "busy_model"])
def test_the_command_exits_at_its_limit_and_leaves_no_process(model, tmp_path) -> None:
    """As a user runs it: its own process, exit code 2, nothing left running. A forward that
    is only slow is still inside a torch op when the command ends: Python's exit would stop
    that thread mid-op and abort (SIGABRT, "terminate called without an active exception")."""
    argv = ["autotune", "search", "--model", f"hanging:{model}", "--data",
            "autotune.examples:tiny_data", "--timeout", "4", "--out", str(tmp_path / "best.json"),
            "--storage", f"sqlite:///{tmp_path / 'study.db'}"]  # fmt: skip
    code = (
        "import sys; import autotune._run as r; r.SETUP_FLOOR = 0.1\n"
        f"from autotune._cli import main; sys.argv = {argv!r}; sys.exit(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(TESTS), str(TESTS.parent)))}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert time.monotonic() - start < 60  # importing torch, then the 2 s
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("study ")  # the study's line, then the error alone
    assert done.stderr.splitlines()[-1].startswith(
        "autotune search: error: The model's first forward (default_forward with "
    )
    assert "did not return within 2 s" in done.stderr
    assert not (tmp_path / "best.json").exists()
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(
        p.info["cmdline"] or [])]  # fmt: skip
    assert left == []


# -- tune ---------------------------------------------------------------------------------------


def test_tune_ends_at_its_limit_where_a_datamodule_or_a_training_step_hangs(short) -> None:
    lt = pytest.importorskip("lightning_tasks")

    class StalledData(lt.NoisyData):
        def setup(self, stage: str) -> None:
            hanging.RELEASE.wait(hanging.HOUR)
            super().setup(stage)

    class StalledStep(lt.SmoothedSGD):
        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            hanging.RELEASE.wait(hanging.HOUR)
            return super().training_step(batch, batch_idx)

    cases = [
        (lt.SmoothedSGD(), StalledData(),
         "your StalledData's prepare_data(), setup('fit') and dataloaders", "StalledData.setup"),
        (StalledStep(), lt.NoisyData(),
         "one training step of your StalledStep (trainer.fit on its first batch: 2 training "
         "items, on the CPU)", "StalledStep.training_step"),
    ]  # fmt: skip
    for module, datamodule, doing, frame in cases:
        start = time.monotonic()
        with pytest.raises(autotune.SetUpTimeout) as raised:
            autotune.tune(
                lt.lightning_trainer(), module, datamodule=datamodule, metric="val_acc",
                timeout=short,
            )  # fmt: skip
        assert time.monotonic() - start < 1.0 + SLACK
        assert raised.value.doing == doing
        assert (
            f"It was in test_tune_ends_at_its_limit_where_a_datamodule_or_a_training_step_"
            f"hangs.<locals>.{frame} ({__file__}:" in str(raised.value)
        )


class StalledTraining(torch.nn.Module):
    """A Hugging Face model whose training forward waits until released."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: Any, attention_mask: Any = None, labels: Any = None) -> Any:
        if self.training:
            hanging.RELEASE.wait(hanging.HOUR)
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


def test_tune_ends_at_its_limit_where_a_hugging_face_training_step_hangs(short, tmp_path) -> None:
    lt = pytest.importorskip("lightning_tasks")
    trainer = lt.hf_trainer(str(tmp_path))
    trainer.model = StalledTraining(trainer.model)
    start = time.monotonic()
    with pytest.raises(autotune.SetUpTimeout) as raised:
        autotune.tune(trainer, metric="eval_accuracy", timeout=short)
    assert time.monotonic() - start < 1.0 + SLACK
    assert raised.value.doing == (
        "one training step of your Trainer (train() on its first batch: 2 training items, on "
        "the CPU)"
    )
    assert f"It was in StalledTraining.forward ({__file__}:" in str(raised.value)

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune._cli import build_parser, main

TINY = ["--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data"]


def test_search_show_round_trip(tmp_path, capsys) -> None:
    out = tmp_path / "best.json"
    storage = f"sqlite:///{tmp_path / 'a.db'}"
    code = main(
        [
            "search",
            *TINY,
            "--trials",
            "2",
            "--space",
            "quick",
            "--timed-seconds",
            "0.5",
            "--storage",
            storage,
            "--accuracy-samples",
            "256",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    # Progress while running: a row per trial under the story's header.
    assert "change from your settings" in captured.err
    assert re.search(r"^ +#1\*? .* 1/2$", captured.err, re.M), captured.err
    assert re.search(r"^ +#2\*? .* 2/2$", captured.err, re.M), captured.err
    # The answer, or the baseline's own settings said plainly (a loaded machine may give it).
    answer = (
        r"autotune result: (\d+\.\d+x faster than the baseline|no config trained faster"
        r"|nothing here trained faster than your settings beyond)"
    )
    assert re.search(answer, captured.out), captured.out
    data = json.loads(out.read_text())
    assert data["schema_version"] == 1 and data["search"]["trials"] == 3

    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out  # the short story: the answer, then how to apply it
    assert shown.startswith("autotune result:") and "  apply: " in shown
    assert len([line for line in shown.splitlines() if line.strip()]) <= 12
    assert "winner:" not in shown and "safe answer" not in shown
    assert main(["show", str(out), "--detail"]) == 0
    shown = capsys.readouterr().out  # everything, each line whole
    assert "winner:" in shown and "baseline:" in shown and "safe answer" in shown
    assert main(["show", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == data["config"]


@pytest.mark.slow
def test_search_again_continues_the_study(tmp_path, capsys) -> None:
    storage = f"sqlite:///{tmp_path / 'a.db'}"
    args = [
        "search",
        *TINY,
        "--space",
        "quick",
        "--timed-seconds",
        "0.5",
        "--storage",
        storage,
        "--accuracy-samples",
        "256",
        "--out",
        str(tmp_path / "best.json"),
    ]
    assert main([*args, "--trials", "1"]) == 0
    assert main([*args, "--trials", "2"]) == 0
    err = capsys.readouterr().err
    assert "baseline: reusing trial 0" in err
    assert json.loads((tmp_path / "best.json").read_text())["search"]["trials"] == 3


def test_model_factory_from_a_file(tmp_path, capsys) -> None:
    factory = tmp_path / "mine.py"
    factory.write_text(
        "from autotune.examples import tiny_model, tiny_data\n"
        "def model():\n    return tiny_model()\n"
        "def data():\n    d = tiny_data()\n    return d, d\n"
        "def not_a_model():\n    return 42\n"
    )
    out = tmp_path / "best.json"
    base = [
        "search",
        "--data",
        f"{factory}:data",
        "--trials",
        "1",
        "--space",
        "quick",
        "--timed-seconds",
        "0.5",
        "--storage",
        f"sqlite:///{tmp_path / 'a.db'}",
        "--accuracy-samples",
        "256",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main([*base, "--model", f"{factory}:model"]) == 0
    assert capsys.readouterr().err == ""  # --quiet
    assert out.exists()
    assert main([*base, "--model", f"{factory}:not_a_model"]) == 2
    assert "must return a torch.nn.Module, but returned int" in capsys.readouterr().err
    assert main([*base, "--model", f"{factory}:missing"]) == 2
    err = capsys.readouterr().err
    assert "has no attribute 'missing'" in err and "model" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nocolon"], "must be MODULE:FUNCTION or path/to/file.py:FUNCTION"),
        (["--model", "no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
        (["--model", "missing_file.py:f"], "file 'missing_file.py' does not exist"),
        (
            ["--model", "autotune.examples:tiny_model", "--space", "visoin"],
            "Unknown search space 'visoin'",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--tolerance", "-0.1"],
            "`tolerance` must be >= 0, but got -0.1",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--storage", "not-a-url"],
            "`storage` must be a database URL",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--metric", "f1"],
            "--metric: must be auto, accuracy, loss, token_accuracy, or MODULE:FUNCTION / "
            "file.py:FUNCTION naming a metric(outputs, targets) -> float, but got 'f1'.",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--collate", "no_such_module_xyz:pad"],
            "--collate: cannot import module 'no_such_module_xyz'",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--loss", "autotune.examples:nothing"],
            "--loss: 'autotune.examples' has no attribute 'nothing'. Callables there:",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--forward", "autotune.examples:__doc__"],
            "--forward: 'autotune.examples:__doc__' is a str, not a function.",
        ),
        (
            ["--model", "autotune.examples:tiny_model", "--lower-is-better"],
            "`higher_is_better` is False (--lower-is-better on the command line), but "
            "metric='auto' chose accuracy from the model's outputs, which is better when higher",
        ),
        (
            [
                "--model",
                "autotune.examples:tiny_model",
                "--metric",
                "token_accuracy",
                "--lower-is-better",
            ],
            "--lower-is-better: `higher_is_better` is False, but token_accuracy is better "
            "when higher",
        ),
        (
            ["--model", "autotune.examples:hf_model", "--data", "autotune.examples:hf_data"],
            "cannot be collated into a batch",  # variable-length items need a collate function
        ),
        (
            ["--model", "autotune.examples:hf_model", "--data", "autotune.examples:hf_data"],
            "Pass collate_fn= (--collate on the command line)",
        ),
    ],
)
def test_bad_cli_input_is_a_clear_error(tmp_path, capsys, argv, message) -> None:
    full = [
        "search",
        "--data",
        "autotune.examples:tiny_data",
        "--out",
        str(tmp_path / "x.json"),
        "--storage",
        f"sqlite:///{tmp_path / 'a.db'}",
        *argv,
    ]
    assert main(full) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_spaces_and_env(capsys) -> None:
    assert main(["spaces"]) == 0
    out = capsys.readouterr().out
    assert "default" in out and "quick" in out and "throughput" in out
    assert main(["spaces", "default"]) == 0
    listed = capsys.readouterr().out
    assert "batch_size: 16, 32, 64" in listed
    assert "gradient_accumulation_steps: 1, 2, 4, 8" in listed
    assert "optimizer_impl: default, foreach, fused" in listed
    assert main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["device"] == "cpu" and env["packages"]["optuna"].startswith("5.")
    assert env["cpu_count"] >= 1 and "torch" in env


def test_console_script_is_installed() -> None:
    """The `autotune` command pip installed next to this interpreter, not `python -m`."""
    script = Path(sys.executable).with_name("autotune")
    assert script.is_file(), f"no console script at {script}: is the package pip-installed?"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    assert "search" in proc.stdout and "show" in proc.stdout and "verify" in proc.stdout


def searched_with(monkeypatch) -> dict:
    """The keywords ``autotune.find_best`` is called with, filled in as the CLI calls it; the
    call stops there (KeyboardInterrupt: exit 130) before any trial: only the arguments
    matter."""
    import autotune

    seen: dict = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(autotune, "find_best", record)
    return seen


def test_keep_global_batch_reaches_the_search(tmp_path, monkeypatch) -> None:
    seen = searched_with(monkeypatch)
    argv = ["search", *TINY, "--out", str(tmp_path / "x.json"), "--storage", "sqlite:///:memory:"]
    assert main([*argv, "--keep-global-batch"]) == 130
    assert seen["options"].keep_global_batch is True
    assert main(argv) == 130
    assert seen["options"].keep_global_batch is False


def test_nproc_per_node_makes_data_parallel_trials_in_a_study_of_their_own(
    tmp_path, monkeypatch
) -> None:
    seen = searched_with(monkeypatch)
    argv = ["search", *TINY, "--out", str(tmp_path / "x.json"), "--storage", "sqlite:///:memory:"]
    assert main([*argv, "--nproc-per-node", "2"]) == 130
    assert seen["options"].ranks == 2
    two = seen["options"].study_name
    assert main(argv) == 130
    assert seen["options"].ranks == 1
    assert seen["options"].study_name != two  # per-rank batches: another study


def test_the_baseline_is_given_inline_or_as_a_config_file_and_makes_its_own_study(
    tmp_path, monkeypatch
) -> None:
    """--baseline states the user's recipe (a cosine schedule at a higher rate), inline or as
    the JSON a search wrote; the search measures it first, in a study of its own."""
    seen = searched_with(monkeypatch)
    argv = ["search", *TINY, "--out", str(tmp_path / "x.json"), "--storage", "sqlite:///:memory:"]
    assert main(argv) == 130
    default_study = seen["options"].study_name
    assert seen["options"].baseline is None
    inline = '{"lr_schedule": {"kind": "cosine", "peak_lr": 0.003}, "batch_size": 64}'
    assert main([*argv, "--baseline", inline]) == 130
    given = seen["options"].baseline
    assert (given.lr_schedule.kind.value, given.lr_schedule.peak_lr, given.batch_size) == (
        "cosine",
        0.003,
        64,
    )
    assert seen["options"].study_name != default_study
    saved = tmp_path / "mine.json"
    saved.write_text(json.dumps({"schema_version": 1, "config": given.to_dict()}))
    assert main([*argv, "--baseline", str(saved)]) == 130
    assert seen["options"].baseline == given


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"lr_schedul": {"kind": "cosine"}}', "--baseline: Unknown key(s) 'lr_schedul' in"),
        ('{"batch_size": 64', "--baseline: The config is not valid JSON:"),
        ("no_such_file.json", "--baseline: Cannot read config file 'no_such_file.json'"),
        ('{"lr_schedule": {"kind": "linear"}}', "--baseline: "),
    ],
)
def test_a_bad_baseline_is_a_clear_error_before_anything_loads(
    tmp_path, capsys, monkeypatch, value, message
) -> None:
    import autotune

    monkeypatch.setattr(autotune, "find_best", lambda *a, **k: pytest.fail("searched"))
    out = tmp_path / "x.json"
    argv = ["search", *TINY, "--out", str(out), "--storage", "sqlite:///:memory:"]
    assert main([*argv, "--baseline", value]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_trainers_baseline_is_its_own_settings(tmp_path, capsys) -> None:
    """With --trainer the baseline is the trainer's: --baseline is refused before its factory
    is called."""
    argv = ["search", "--trainer", "no_such_module_xyz:make", "--out", str(tmp_path / "x.json")]
    assert main([*argv, "--baseline", '{"batch_size": 64}']) == 2
    assert "--trainer: --baseline do not apply" in capsys.readouterr().err


def test_the_cli_states_no_default_of_its_own(tmp_path, monkeypatch) -> None:
    """Left out, every option is the library's default: the options object's, find_best's
    tolerance and verify's rounds (the CLI reads them instead of restating them)."""
    import inspect

    import autotune

    signature = inspect.signature(autotune.find_best).parameters
    seen = searched_with(monkeypatch)
    storage = f"sqlite:///{tmp_path / 'd.db'}"
    assert main(["search", *TINY, "--out", str(tmp_path / "x.json"), "--storage", storage]) == 130
    options = seen["options"]
    assert options == autotune.SearchOptions(storage=storage, study_name=options.study_name)
    assert seen["tolerance"] == signature["tolerance"].default
    assert seen["task"] == autotune.Task()
    rounds = build_parser().parse_args(["verify", "r.json", *TINY]).rounds
    assert rounds == inspect.signature(autotune.verify).parameters["rounds"].default


def test_an_error_that_is_not_about_the_input_keeps_its_traceback(
    tmp_path, capsys, monkeypatch
) -> None:
    """A ValueError raised deep inside torch (or a bug) is not a usage error: it propagates,
    so the traceback shows where it came from."""
    import autotune

    def broken(*args, **kwargs):
        raise ValueError("Expected input batch_size (3) to match target batch_size (2).")

    monkeypatch.setattr(autotune, "find_best", broken)
    argv = ["search", *TINY, "--out", str(tmp_path / "x.json"), "--storage", "sqlite:///:memory:"]
    with pytest.raises(ValueError, match="Expected input batch_size"):
        main(argv)
    assert "usage" not in capsys.readouterr().err


def test_verify_takes_the_same_hook_flags(tmp_path, capsys) -> None:
    argv = ["verify", str(tmp_path / "best.json"), *TINY, "--metric", "f1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "autotune verify: error: --metric: must be auto, accuracy, loss, token_accuracy" in err

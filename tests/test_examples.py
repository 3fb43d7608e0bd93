"""The examples/ scripts run as a user would run them, and apply the same config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = ["plain_loop.py", "lightning_trainer.py", "hf_trainer.py"]


def _run(script: str, cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,  # whatever a trainer writes lands here, not in the repository
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_the_three_examples_train_the_same_config_to_the_same_place(tmp_path) -> None:
    configs, accuracies = set(), {}
    for script in SCRIPTS:
        out = _run(script, tmp_path)
        configs.update(re.findall(r"^config: (.+)$", out, flags=re.MULTILINE))
        found = re.findall(r"^val accuracy: ([0-9.]+)$", out, flags=re.MULTILINE)
        assert found, f"{script} printed no final accuracy:\n{out}"
        accuracies[script] = float(found[-1])
    # 2 micro-batches of 32 per optimizer step (Lightning's accumulate_grad_batches, Hugging
    # Face's gradient_accumulation_steps), the foreach optimizer where the trainer takes it.
    assert configs == {
        "batch=32x2 workers=1 persistent precision=fp32 compile=none lr=cosine@0.01 "
        "foreach optimizer"
    }
    # A separable problem: each trainer, applying the same knobs, learns it.
    assert all(acc >= 0.95 for acc in accuracies.values()), accuracies
    assert list(tmp_path.iterdir()) == []  # no stray logs or checkpoints


@pytest.mark.slow
def test_an_example_takes_a_result_file(tmp_path) -> None:
    config = tmp_path / "best.json"
    config.write_text(
        (EXAMPLES / "tuned.json").read_text().replace('"batch_size": 32', '"batch_size": 16')
    )
    out = _run("plain_loop.py", tmp_path, str(config))
    assert "config: batch=16x2 workers=1" in out and "val accuracy: " in out

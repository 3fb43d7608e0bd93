"""The README's "you have a Lightning Trainer", "you have a Hugging Face Trainer" and "data that
streams" sections run as written (with a shorter timeout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def section_code(heading: str) -> str:
    """The first Python block after ``heading`` in the README."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    begin = text.index("```python\n", start) + len("```python\n")
    return text[begin : text.index("```", begin)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "heading", ["### You have a Lightning Trainer", "### You have a Hugging Face Trainer"]
)
def test_a_readme_trainer_section_runs_as_written(tmp_path: Path, heading: str) -> None:
    code = section_code(heading)
    assert "timeout=120" in code
    script = tmp_path / "section.py"
    script.write_text(code.replace("timeout=120", "timeout=20"))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "autotune result:" in done.stdout
    assert "{" in done.stdout.splitlines()[-1]  # the trainer's settings, printed last


@pytest.mark.slow
def test_the_readme_streaming_section_runs_as_written(tmp_path: Path) -> None:
    """'Data that streams': WebDataset shards of JPEG files written, searched with
    planned_samples, and the answer applied with cfg.dataloader(stream)."""
    pytest.importorskip("webdataset")
    pytest.importorskip("PIL")
    code = section_code("## Data that streams")
    assert "timeout=120" in code and "planned_samples=1536" in code
    script = tmp_path / "section.py"
    script.write_text(code.replace("timeout=120", "timeout=20"))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "autotune result:" in done.stdout
    assert "a stream (WebDataset)" in done.stdout and "1,536 samples" in done.stdout
    batch, workers, _ = done.stdout.splitlines()[-1].split()
    assert int(batch) >= 1 and 0 <= int(workers) <= 3  # workers capped at the 3 shards

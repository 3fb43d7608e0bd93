"""Progress as a user sees it: a live panel in a terminal (checked in a pseudo-terminal), plain
lines through a pipe, each line exactly once either way."""

from __future__ import annotations

import collections
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import pytest

ROWS, COLUMNS = 40, 160


def _search(tmp_path: Path) -> list[str]:
    return [
        sys.executable, "-m", "autotune", "search",
        "--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data",
        "--space", "quick", "--trials", "2", "--accuracy-samples", "256",
        "--storage", f"sqlite:///{tmp_path / 'a.db'}", "--out", str(tmp_path / "best.json"),
    ]  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def _in_pty(argv: list[str]) -> str:
    """Everything a terminal of ROWS x COLUMNS would receive (stdout and stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=_env(TERM="xterm-256color")
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_gets_a_live_panel_and_a_summary_table(tmp_path) -> None:
    out = _in_pty(_search(tmp_path))
    assert "\x1b[" in out  # cursor movement: the panel is redrawn in place
    assert "╭─ autotune" in out  # the panel, with what runs and how far it got
    assert "throughput of batch=" in out and " steps" in out
    assert "trials 1/2 | best " in out and "failures: none" in out
    # Event lines scroll above the panel, each once.
    for line in ("trial 1/2 [", "trial 2/2 [", "baseline: batch=32"):
        assert out.count(line) == 1, line
    # The summary's figures as a table, with its header row.
    summary = out[out.index("autotune result:") :]
    assert summary.count("throughput (samples/s)") == 1
    assert "winner" in summary and "baseline" in summary and "───" in summary


def test_a_pipe_gets_plain_lines_each_once(tmp_path) -> None:
    proc = subprocess.run(
        _search(tmp_path), env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b" not in proc.stderr + proc.stdout and "╭" not in proc.stderr
    lines = proc.stderr.splitlines()
    twice = [line for line, n in collections.Counter(lines).items() if n > 1]
    assert not twice
    assert sum(line.startswith("trial 1/2 [") for line in lines) == 1
    assert sum(line.startswith("trial 2/2 [") for line in lines) == 1
    assert "throughput (samples/s)" in proc.stdout  # the plain summary


@pytest.mark.skipif(not hasattr(os, "fork"), reason="DataLoader workers fork only where fork is")
def test_forked_loader_workers_do_not_print_a_line_again(tmp_path) -> None:
    """Trials in this process with DataLoader workers, and progress printed without a flush into
    a pipe (block-buffered): a forked worker inherits the unwritten lines and, flushing its
    copy when it exits, used to print them a second time (trial lines seen twice at the end
    of a search)."""
    script = textwrap.dedent(
        """
        import autotune
        from autotune.examples import tiny_data, tiny_model

        autotune.find_best(
            tiny_model(), tiny_data(), n_trials=3, device="cpu", isolation="none",
            space={"knobs": {"num_workers": [1, 2], "batch_size": [16, 32]}},
            baseline={"num_workers": 1}, accuracy_samples=256,
            budget=autotune.Budget(warmup_steps=1, timed_samples=64, min_timed_steps=3),
            progress=lambda line: print(line),  # no flush: the pipe's buffer keeps it
        )
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert sum(line.startswith("trial ") for line in lines) == 3
    twice = [line for line, n in collections.Counter(lines).items() if n > 1]
    assert not twice

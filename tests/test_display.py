"""Progress as a user sees it: a live panel in a terminal (checked in a pseudo-terminal), plain
lines through a pipe, each line exactly once either way."""

from __future__ import annotations

import collections
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

ROWS, COLUMNS = 40, 160


def _search(tmp_path: Path) -> list[str]:
    return [
        sys.executable, "-m", "autotune", "search",
        "--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data",
        "--space", "quick", "--timed-seconds", "0.5", "--trials", "2",
        "--accuracy-samples", "256",
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


def _show_detail(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "autotune", "show", str(tmp_path / "best.json"), "--detail"]


@pytest.mark.slow
def test_a_terminal_gets_a_live_panel_and_a_summary_table(tmp_path) -> None:
    out = _in_pty(_search(tmp_path))
    assert "\x1b[" in out  # cursor movement: the panel is redrawn in place
    assert "╭─ autotune" in out  # the panel, with what runs and how far it got
    assert "throughput of batch=" in out  # the run in progress, with its elapsed time
    assert "trials 1/2 | best " in out and "failures: none" in out
    # Event lines scroll above the panel, each once.
    events, summary = out.split("autotune result:")
    for line in ("change from your settings", "baseline: batch=32"):
        assert events.count(line) == 1, line
    for row in (r" #1\*? +\w+ .* 1/2\r?$", r" #2\*? +\w+ .* 2/2\r?$"):  # the terminal's \r\n
        assert len(re.findall(row, events, re.M)) == 1, (row, events[-3000:])
    # The summary is the short story; `autotune show --detail` has its figures as a table,
    # with its header row.
    assert "throughput (samples/s)" not in summary and "  apply: " in summary
    detail = _in_pty(_show_detail(tmp_path))
    assert detail.count("throughput (samples/s)") == 1
    assert "winner" in detail and "baseline" in detail and "───" in detail


@pytest.mark.slow
def test_a_pipe_gets_plain_lines_each_once(tmp_path) -> None:
    proc = subprocess.run(
        _search(tmp_path), env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b" not in proc.stderr + proc.stdout and "╭" not in proc.stderr
    lines = proc.stderr.splitlines()
    twice = [line for line, n in collections.Counter(lines).items() if n > 1]
    assert not twice
    assert sum(bool(re.match(r" +#1\*? .* 1/2$", line)) for line in lines) == 1
    assert sum(bool(re.match(r" +#2\*? .* 2/2$", line)) for line in lines) == 1
    assert "throughput (samples/s)" not in proc.stdout  # the short story has no table
    assert "autotune result:" in proc.stdout and "  apply: " in proc.stdout
    shown = subprocess.run(
        _show_detail(tmp_path), env=_env(), capture_output=True, text=True, timeout=60
    )
    assert "throughput (samples/s)" in shown.stdout and "───" not in shown.stdout  # plain

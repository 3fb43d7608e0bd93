"""The ```python blocks of the README and the docs pages, and how a test runs one.

A block runs alone, as a reader pastes it, in a fresh folder that holds a ``best.json`` (a copy
of ``examples/tuned.json``), as the README's run command leaves one. A block that searches or
trains is slow: it runs in a process of its own with its budget cut to ``SHORT`` seconds and
its run to one epoch. The others run in the test's process. A block preceded by a line
``<!-- run with: torchrun --nproc-per-node N -->`` runs under PyTorch's launcher, its
``best.json`` a config of N ranks. A block preceded by ``<!-- not run: why -->`` is not run;
a test counts such blocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
TUNED = ROOT / "examples" / "tuned.json"
PAGES = (README, *sorted(DOCS.glob("*.md")))

NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")
LAUNCHER = re.compile(r"^<!-- run with: (torchrun .+) -->$")
# What makes a block slow: a search, or training (a trainer's or a loop's).
SEARCHES = re.compile(r"\b(find_best|tune|verify|join_search)\(")
TRAINS = re.compile(rf"{SEARCHES.pattern}|\.fit\(|\.train\(|\.backward\(")
SHORT = 20  # seconds: a slow block's budget in the test


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int  # its opening fence's line, from 1
    heading: str  # the nearest heading above it
    code: str
    not_run: str | None  # why it is not run, from the line above it
    launcher: str | None  # ``torchrun --nproc-per-node N``, from the line above it

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def slow(self) -> bool:
        return self.launcher is not None or TRAINS.search(self.code) is not None


def blocks(path: Path) -> list[Block]:
    """The ```python blocks of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    heading, fence, start, body, above = "", None, 0, [], ""
    for number, line in enumerate(lines, 1):
        if fence is not None:
            if line.strip() == "```":
                if fence == "python":
                    why, launcher = NOT_RUN.match(above), LAUNCHER.match(above)
                    found.append(
                        Block(
                            path,
                            start,
                            heading,
                            "\n".join(body) + "\n",
                            why.group(1) if why else None,
                            launcher.group(1) if launcher else None,
                        )
                    )
                fence, above = None, ""
            else:
                body.append(line)
            continue
        if line.startswith("```"):
            fence, start, body = line[3:].strip(), number, []
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.strip() and not line.startswith("```"):
            above = line.strip()
    return found


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def shortened(code: str) -> str:
    """A slow block as the test runs it: a search's budget ``SHORT`` seconds; where it trains
    without a search, one epoch (a search's own runs are bounded by its budget)."""
    code = re.sub(r"(?<![\w.])timeout=\d+", f"timeout={SHORT}", code)
    if SEARCHES.search(code):
        return code
    return re.sub(
        r"(?<![\w.])(planned_epochs|epochs|max_epochs|num_train_epochs)(\s*=\s*)\d+",
        r"\g<1>\g<2>1",
        code,
    )


def prepare(folder: Path, ranks: int = 1) -> None:
    """What a reader's folder holds after the README's run command: a ``best.json`` (of
    ``ranks`` data-parallel processes)."""
    config = json.loads(TUNED.read_text(encoding="utf-8"))
    if ranks > 1:
        config["ranks"] = ranks
    (folder / "best.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


def run_in_process(block: Block, folder: Path) -> str:
    """A fast block, run in this process in ``folder``: what it printed."""
    prepare(folder)
    out = io.StringIO()
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.name, "exec"), {"__name__": "__main__"})
    finally:
        os.chdir(cwd)
    return out.getvalue()


def run_in_subprocess(block: Block, folder: Path, timeout: float = 600) -> str:
    """A slow block, shortened, run as a script in ``folder`` (under its launcher): what it
    printed (stdout)."""
    script = folder / "snippet.py"
    script.write_text(shortened(block.code), encoding="utf-8")
    argv, ranks = [sys.executable, str(script)], 1
    if block.launcher is not None:  # torchrun's own module, with this interpreter
        words = shlex.split(block.launcher)[1:]
        ranks = int(words[words.index("--nproc-per-node") + 1])
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", *words, str(script)]
    prepare(folder, ranks)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        argv,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr[-3000:]}"
    return done.stdout

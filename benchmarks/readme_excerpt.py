"""Make the README's excerpt of what a run prints, from a real run of its "Run it" command.

    python benchmarks/readme_excerpt.py           # run it (about 6 minutes on 2 cores), rewrite
    python benchmarks/readme_excerpt.py --print   # run it, print the excerpt, leave the README
    python benchmarks/readme_excerpt.py --from-run err.txt out.txt  # from a run made already

The command is read from the README's "Run it" block (its ``autotune search ...`` part, after
the install) and run in a temporary folder, with its own SQLite study, as a user types it. Its
stderr is not a terminal, so the progress is plain lines, each written once. The block between
``<!-- excerpt:start -->`` and ``<!-- excerpt:end -->`` becomes: the trial table's header and
its first ``--rows`` rows, a line ``...``, and the summary (stdout), whole: it is the short
story of at most 12 lines. ``--from-run`` takes a run's stderr and stdout saved already (the
README's command typed in a fresh clone: ``2> err.txt > out.txt``). ``tests/test_readme.py``
checks, without a run, that the excerpt still has the form the command line prints.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from autotune._search.words import trial_header

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- excerpt:start -->", "<!-- excerpt:end -->"
ROW = re.compile(r"^\s*#\d+\*?\s")  # a trial's row: "    #6* safe    channels_last ..."
ELLIPSIS = "..."


def run_command(readme: str) -> list[str]:
    """The README's ``autotune search ...`` command, from the first bash block of "Run it"."""
    section = readme.index("## Run it")
    begin = readme.index("```bash\n", section) + len("```bash\n")
    block = readme[begin : readme.index("```", begin)]
    for part in block.replace("\\\n", " ").split("&&"):
        words = shlex.split(part)
        if words[:2] == ["autotune", "search"]:
            return words
    raise SystemExit("README.md: no `autotune search` command in the first block of 'Run it'")


def excerpt_lines(readme: str) -> list[str]:
    """The lines of the excerpt now in the README (inside its ```text fence)."""
    block = readme[readme.index(START) + len(START) : readme.index(END)]
    lines = block.strip().splitlines()
    if not lines or not lines[0].startswith("```") or lines[-1] != "```":
        raise ValueError("the excerpt between the markers is not one fenced block")
    return lines[1:-1]


def make_excerpt(progress: str, summary: str, *, rows: int = 8, head: int = 12) -> list[str]:
    """The header of the trial table and its first ``rows`` rows (the event lines between them
    left out), ``...``, then the summary's first ``head`` lines."""
    lines = progress.splitlines()
    header = trial_header().rstrip()
    at = next((i for i, line in enumerate(lines) if line.rstrip() == header), None)
    if at is None:
        raise SystemExit(f"the run printed no trial table:\n{progress[-3000:]}")
    table = [line for line in lines[at + 1 :] if ROW.match(line)][:rows]
    summary_lines = summary.strip("\n").splitlines()
    start = next(i for i, line in enumerate(summary_lines) if line.startswith("autotune result"))
    return [lines[at], *table, ELLIPSIS, *summary_lines[start : start + head]]


def with_excerpt(readme: str, excerpt: list[str]) -> str:
    """``readme`` with the block between the markers replaced by ``excerpt``."""
    before = readme[: readme.index(START) + len(START)]
    after = readme[readme.index(END) :]
    return before + "\n```text\n" + "\n".join(excerpt) + "\n```\n" + after


def run(command: list[str], folder: Path) -> tuple[str, str]:
    """``command`` in ``folder`` with this checkout's autotune: (stderr, stdout)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "autotune", *command[1:]]  # `autotune` from this checkout
    print(f"running in {folder}: {shlex.join(command)}", flush=True)
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"the README's command failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stderr, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print", action="store_true", help="print it; leave README.md alone")
    parser.add_argument("--rows", type=int, default=8, help="trial rows to keep (8)")
    parser.add_argument("--summary", type=int, default=12, help="summary lines to keep (12)")
    parser.add_argument("--keep", type=Path, help="also write the whole output to this file")
    parser.add_argument(
        "--from-run", nargs=2, type=Path, metavar=("STDERR", "STDOUT"), help="a run's output"
    )
    args = parser.parse_args()
    readme = README.read_text(encoding="utf-8")
    if args.from_run is not None:
        progress, summary = (p.read_text(encoding="utf-8") for p in args.from_run)
    else:
        with tempfile.TemporaryDirectory(prefix="readme-excerpt-") as folder:
            progress, summary = run(run_command(readme), Path(folder))
    if args.keep is not None:
        args.keep.write_text(progress + summary, encoding="utf-8")
    excerpt = make_excerpt(progress, summary, rows=args.rows, head=args.summary)
    print("\n".join(excerpt))
    if not args.print:
        README.write_text(with_excerpt(readme, excerpt), encoding="utf-8")
        print(f"rewrote the excerpt in {README}")


if __name__ == "__main__":
    main()

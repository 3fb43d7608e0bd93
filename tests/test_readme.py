"""The README keeps its promises to a newcomer: it opens with the two commands (the run, and
the test command `.ci/run` runs), says how long the run takes, shows an excerpt in the form the
command line prints, is read in a few minutes, and its links lead somewhere. Its Python blocks
run in tests/test_docs.py, with the docs pages'."""

from __future__ import annotations

import re
import sys

import autotune
from autotune._result.summary import render_summary
from autotune._search.words import ROW_WIDTH, trial_header

from snippets import DOCS, README, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

from readme_excerpt import (
    ELLIPSIS,
    ROW,
    excerpt_lines,
    make_excerpt,
    run_command,
    with_excerpt,
)

TEXT = README.read_text(encoding="utf-8")


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_readme_opens_with_the_run_command_and_says_how_long_it_takes() -> None:
    first = _bash_blocks(TEXT)[0]
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install")
    assert run_command(TEXT) == [
        "autotune", "search", "--model", "autotune.examples:cnn_model",
        "--data", "autotune.examples:cnn_data", "--timeout", "300", "--out", "best.json",
    ]  # fmt: skip
    run_it = TEXT[TEXT.index("## Run it") : TEXT.index("## Test it")]
    assert "about 6 minutes" in run_it


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    verbatim = ci[ci.index("# --- the README's test command, verbatim ---") + 1]
    assert _bash_blocks(TEXT)[1] == verbatim + "\n"
    assert TEXT.index("## Test it") < TEXT.index("## In 30 seconds")


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(TEXT.splitlines()) <= 300
    prose = re.sub(r"^```.*?^```$", "", TEXT, flags=re.M | re.S)  # code is scanned, not read
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith("|"))
    assert len(prose.split()) <= 1000  # 4 minutes at 250 words a minute; the code is scanned


def test_every_relative_link_of_the_readme_and_the_docs_leads_to_a_file() -> None:
    for page in [README, ROOT / "CONTRIBUTING.md", *DOCS.glob("*.md")]:
        text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.name} links to {target}, which does not exist"
            if page.parent == DOCS:  # a docs page links only inside the site
                assert path.parent == DOCS, f"{page.name} links out of docs/: {target}"


def test_the_excerpt_has_the_form_the_command_line_prints() -> None:
    lines = excerpt_lines(TEXT)
    assert lines[0] == trial_header()
    gap = lines.index(ELLIPSIS)
    rows, summary = lines[1:gap], lines[gap + 1 :]
    assert 3 <= len(rows) <= 10 and all(ROW.match(row) for row in rows)
    assert all(len(line) <= ROW_WIDTH for line in [lines[0], *rows])
    assert summary[0].startswith("autotune result:")
    assert all(line.startswith("  ") or not line for line in summary[1:])  # as rendered


def test_the_summary_starts_as_the_excerpt_shows() -> None:
    """render_summary (what the command prints last) starts with the headline the excerpt's
    summary starts with: here a result that kept your settings."""
    config = autotune.TrainingConfig().to_dict()
    data = {
        "config": config,
        "baseline": {"config": config, "metrics": {}},
        "metrics": {},
        "speedup": 1.0,
        "tolerance": 0.01,
        "accuracy_guard": None,
        "answers": {},
        "validation": {},
        "search": {},
        "trials": [],
    }
    first = render_summary(data).splitlines()[0]
    excerpt = excerpt_lines(TEXT)
    headline = excerpt[excerpt.index(ELLIPSIS) + 1]
    assert first.split(":")[0] == headline.split(":")[0] == "autotune result"


def test_the_excerpt_script_keeps_the_header_the_rows_and_the_summary_head() -> None:
    header = trial_header()
    progress = "\n".join(
        [
            "study 'x' in sqlite:///autotune.db",
            header,
            *[f"    #{n}  safe    workers=1{'':40}400    1.10x   not needed     250 s" for n in
              range(1, 12)],
            "baseline measured again: 700 samples/s (was 690)",
        ]
    )  # fmt: skip
    summary = "autotune result: 1.10x faster\n" + "\n".join(f"  line {i}" for i in range(20))
    excerpt = make_excerpt(progress, summary, rows=8, head=8)
    assert excerpt[0] == header and excerpt[9] == ELLIPSIS
    assert [line.split()[0] for line in excerpt[1:9]] == [f"#{n}" for n in range(1, 9)]
    assert excerpt[10:] == ["autotune result: 1.10x faster", *[f"  line {i}" for i in range(7)]]
    rewritten = with_excerpt(TEXT, excerpt)
    assert excerpt_lines(rewritten) == excerpt
    assert rewritten.replace("\n".join(excerpt), "") == TEXT.replace(
        "\n".join(excerpt_lines(TEXT)), ""
    )

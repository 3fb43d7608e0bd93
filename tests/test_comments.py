"""Comments and docstrings in ``autotune/`` state rules, not the runs that showed them.

A comment states the rule and why; the run that showed it (which machine, which model, which
figure it printed) goes in its commit message or benchmarks/RESULTS.md. This test reads every
comment (``tokenize``) and every module, class and function docstring (``ast``) of the package
for the words that named such runs. Strings the code prints are not comments: never read.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autotune"

# Paths (a folder where it ends in "/") whose comments are not read.
NOT_YET: tuple[str, ...] = ()

_MODELS = "GPT-?2|BERT|ResNet|CNN|MLP|ViT"  # a model, where a comment says whose
_WORKLOADS = f"{_MODELS}|JPEG|WebDataset|streaming"  # ... or which search's

# Each names a particular run or machine; matched case-insensitively, across line breaks.
PATTERNS: tuple[str, ...] = (
    # the runs of the README's example, and the checkouts and machines they ran on
    r"\bREADME(?:'s)?[\s-]+(?:run|search|CNN|model|baseline)",
    r"\b(?:busy|idle|loaded) README\b",
    r"\bfresh clone\b",
    r"\b(?:EPYC|Xeon|Ryzen|Threadripper)\b",
    r"\b[ABHV]100\b",
    r"\bH200\b",
    r"\blent (?:GPU|machine|[A-Z]\d{2,3})\b",
    r"\b\d+-(?:core|vCPU|CPU)\b",
    # one run, one date, one work session
    r"\ba run on\b",
    r"\bin one run\b",
    r"\bmeasured on 20\d\d\b",
    r"\b20\d\d-\d\d-\d\d\b",
    r"\b(?:an? (?:earlier|later|previous|past|other) |last |previous |work(?:ing)? |agent |helper )"
    r"sessions?\b",
    r"\bsession \d+\b",
    # one model's, one data set's or one search's story
    rf"\b(?:{_MODELS})'s\b",
    rf"\b(?:a|an|one|the) (?:[\w-]+ ){{0,2}}(?:{_WORKLOADS}) (?:search|run|check|benchmark)",
    rf"\b(?:check|search|run)s? of (?:{_MODELS})\b",
    r"\b(?:a|an|one) (?:busy|idle|loaded) (?:run|search)\b",
    r"\b(?:newcomer|CI)(?:'s)? run\b",
    r"\b(?:run|search)(?:'s)? printed\b",
    r"\bprinted \d+ [\w ]{0,20}lines\b",
    r"\ba simulated search\b",
    r"\ba \d+-s (?:search|run) on\b",
    r"\b\d+ s into (?:a|the) (?:search|run)\b",
    # the figures one run printed
    r"\b(?:read|measured|screened|showed|reported)\b[^.;:]{0,40}?\b[\d,.]+ samples/s",
    r"\b\d+(?:\.\d+)?x (?:at screening|side by side|in a (?:plain )?loop)\b",
)
PATTERN = re.compile("|".join(f"(?:{p})" for p in PATTERNS), re.IGNORECASE)


def _texts(source: str) -> Iterator[tuple[int, str, list[int]]]:
    """Each comment block (consecutive comment lines, joined) and each docstring: its first
    line, its text with every line's indentation and break made one space, and the source
    line of each of its characters."""
    block: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if block and line != block[-1][0] + 1:
            yield _joined(block)
            block = []
        block.append((line, tok.string.lstrip("#").strip()))
    if block:
        yield _joined(block)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines = first.value.value.splitlines()
            yield _joined([(first.lineno + i, text.strip()) for i, text in enumerate(lines)])


def _joined(lines: Sequence[tuple[int, str]]) -> tuple[int, str, list[int]]:
    text, where = "", []
    for number, part in lines:
        if not part:
            continue
        if text:
            text += " "
            where.append(number)
        text += part
        where.extend([number] * len(part))
    return (lines[0][0] if lines else 0), text, where


def _excerpt(text: str, start: int, end: int) -> str:
    """The sentence (or clause) around text[start:end], at most ~160 characters."""
    left = max(text.rfind(". ", 0, start), text.rfind("; ", 0, start), text.rfind(": ", 0, start))
    left = 0 if left < 0 else left + 2
    right = min((i for i in (text.find(". ", end), text.find("; ", end)) if i >= 0), default=-1)
    right = len(text) if right < 0 else right + 1
    if left < start - 80:
        left = text.find(" ", start - 80) + 1
    if right > end + 80:
        right = text.rfind(" ", 0, end + 80)
    return text[left:right].strip()


def offenders_in(source: str, path: str) -> list[str]:
    """``path:line: text`` for each comment or docstring of ``source`` that names a run."""
    out: dict[int, str] = {}  # one per line, however many patterns it matches
    for first, text, where in _texts(source):
        for match in PATTERN.finditer(text):
            line = where[match.start()] if where else first
            out.setdefault(line, f"{path}:{line}: {_excerpt(text, match.start(), match.end())}")
    return [out[line] for line in sorted(out)]


def _skipped(path: str, skip: Sequence[str]) -> bool:
    return any(path.startswith(s) if s.endswith("/") else path == s for s in skip)


def offenders(skip: Sequence[str] = NOT_YET) -> list[str]:
    """Every offending comment or docstring in the package, but in ``skip``'s paths."""
    out = []
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        if not _skipped(path, skip):
            out += offenders_in(file.read_text(encoding="utf-8"), path)
    return out


def test_no_comment_or_docstring_tells_of_a_particular_run_or_machine() -> None:
    found = offenders()
    assert not found, "comments that tell of a run, not its rule:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "story",
    [
        "a README run's baseline read 134 samples/s busy and 941 idle",
        "the README's run on a 2-core EPYC screened every safe knob at 0.86-1.00x",
        "A fresh clone's README run left an 80% schedule unchecked",
        "an H100 ResNet check asked for 3,446",
        "On a lent H100 the search reported a WebDataset answer",
        "GPT-2's validation loss varied by ±0.0005 from seed to seed",
        "The tiny BERT's 128 examples",
        "the ResNet's baseline varied by ±0.043 halfway",
        "a check of GPT-2 holds 48 seeds",
        "a JPEG search screened the foreach optimizer once at 1.36x",
        "a busy run's 80% schedule screened 3.67x",
        "one loader worker at 1.14x (0.94x in a plain loop)",
        "measured the baseline's two threads at 37 samples/s",
        "a simulated search's trials at 130 s of 240",
        "found in an earlier session",
        "measured on 2024-05-01",
        "a 30-s search on a busy machine gave it the deadline's last second",
        "~40 s into a search, a stream that ended",
    ],
)
def test_a_story_is_caught(story: str) -> None:
    assert offenders_in(f"x = 1  # {story}\n", "c.py")
    assert offenders_in(f'def f() -> None:\n    """Why.\n\n    {story}."""\n', "d.py")


@pytest.mark.parametrize(
    "rule",
    [
        "One draw is noisy: one high draw would rule out every change of the numerics.",
        "In this session, not a new one: Linux shares CPU time between sessions (autogroup).",
        "the most parameters in non-leaf children (transformer layers, ResNet stages, the conv "
        "blocks of a CNN)",
        "a real model at 100 samples/s would spend 20 s on 2,048 samples",
        "See the README for the install.",
        "one core of two taken by another process reads ~1.0",
        "a 240-s search then measures ~2.4 s per config, a 1-hour one 10 s",
    ],
)
def test_a_rule_is_not(rule: str) -> None:
    assert offenders_in(f"x = 1  # {rule}\n", "c.py") == []


def test_a_story_across_lines_names_its_line() -> None:
    source = 'def f() -> None:\n    """Why.\n\n    It held: the README\'s\n    run showed it."""\n'
    assert offenders_in(source, "d.py") == ["d.py:4: the README's run showed it."]


def test_a_message_the_code_prints_is_not_read() -> None:
    source = 'def f() -> str:\n    """Why."""\n    return "a README run on a 2-core EPYC"\n'
    assert offenders_in(source, "m.py") == []

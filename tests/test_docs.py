"""The documentation: the API reference names every public name, every ```python block of the
README and the docs pages runs as written (see tests/snippets.py for how), and the exported
JSON's page lists what a result writes. `.ci/run` builds the site with warnings as errors."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable

import pytest

import autotune
from autotune._result.result import SearchResult
from autotune._search.ledger import TrialRecord
from autotune._trial.measure import Measurement

from snippets import DOCS, ROOT, Block, every_block, run_in_process, run_in_subprocess

API = DOCS / "api.rst"
DIRECTIVE = re.compile(r"^\.\. (?:auto)?(?:function|class|exception|data)::\s+(\S+)", re.M)


def test_the_api_reference_documents_every_public_name_once() -> None:
    documented = DIRECTIVE.findall(API.read_text(encoding="utf-8"))
    assert sorted(documented) == sorted(autotune.__all__)


# -- Every code block runs ---------------------------------------------------------------------

BLOCKS = every_block()
NOT_RUN = [b for b in BLOCKS if b.not_run]
# A block shown twice (the README's "In 30 seconds" opens the find_best page) runs once.
RUN = list({b.code: b for b in reversed(BLOCKS) if not b.not_run}.values())[::-1]
FAST = [b for b in RUN if not b.slow]
SLOW = [b for b in RUN if b.slow]


def _where(block: Block) -> tuple[str, str]:
    return str(block.path.relative_to(ROOT)), block.heading


def test_the_readme_and_every_page_with_code_have_their_blocks_found() -> None:
    pages = {b.path.name for b in BLOCKS}
    assert {"README.md", "find-best.md", "trainers.md", "streaming.md", "applying.md"} <= pages
    assert len([b for b in BLOCKS if b.path.name == "README.md"]) == 4


def test_blocks_that_are_not_run_are_counted() -> None:
    """A block marked ``<!-- not run: why -->`` is one a test cannot run: none today. Add one
    here, with its reason, only where no launcher or budget makes it runnable."""
    assert [(*_where(b), b.not_run) for b in NOT_RUN] == []


def test_the_ddp_page_runs_its_loop_under_torchrun() -> None:
    ddp = [b for b in RUN if b.launcher is not None]
    assert [_where(b) for b in ddp] == [("docs/ddp.md", "Applying the answer")]
    assert ddp[0].launcher == "torchrun --nproc-per-node 2" and ddp[0].slow


def test_a_block_that_searches_has_a_budget_the_test_can_cut() -> None:
    for block in SLOW:
        if re.search(r"\b(find_best|tune)\(", block.code):
            assert re.search(r"(?<![\w.])timeout=\d+", block.code), block.name


def _trainer_settings_last(out: str) -> None:
    assert "{" in out.splitlines()[-1]  # the trainer's settings, printed last


def _stream(out: str) -> None:
    # The summary's brief lines (each within 120 characters): the stream is named.
    assert "(WebDataset)" in out and "autotune result:" in out
    batch, workers, _ = out.splitlines()[-1].split()
    assert int(batch) >= 1 and 0 <= int(workers) <= 3  # workers capped at the 3 shards


# What a block prints beyond the rule that a printed result is a summary.
EXPECT: dict[tuple[str, str], Callable[[str], None]] = {
    ("docs/trainers.md", "You have a Lightning Trainer"): _trainer_settings_last,
    ("docs/trainers.md", "You have a Hugging Face Trainer"): _trainer_settings_last,
    ("docs/streaming.md", "Data that streams"): _stream,
}


def _check(block: Block, out: str) -> None:
    if "print(result)" in block.code:
        assert "autotune result:" in out, out[-2000:]
    expect = EXPECT.get(_where(block))
    if expect is not None:
        expect(out)


def test_every_expectation_names_a_block_that_runs() -> None:
    assert set(EXPECT) <= {_where(b) for b in RUN}


@pytest.mark.parametrize("block", FAST, ids=lambda b: b.name)
def test_a_block_runs_as_written(block: Block, tmp_path) -> None:
    _check(block, run_in_process(block, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("block", SLOW, ids=lambda b: b.name)
def test_a_block_that_searches_or_trains_runs_as_written(block: Block, tmp_path) -> None:
    if "webdataset" in block.code:
        pytest.importorskip("webdataset")
        pytest.importorskip("PIL")
    _check(block, run_in_subprocess(block, tmp_path))


# -- The exported JSON's page ------------------------------------------------------------------


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def _first_column(section: str) -> set[str]:
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row)}


def _keys(function: Callable[..., object], *, stored: bool = False) -> set[str]:
    """The keys of the dict literal ``function`` returns (its source read, nothing run), and
    with ``stored`` those it sets as ``out["key"] = ...``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif (
            stored
            and isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.slice, ast.Constant)
        ):
            keys.add(node.slice.value)
    return keys


def test_the_json_page_lists_every_top_level_field_a_result_writes() -> None:
    documented = _first_column(_section("json.md", "Top-level fields"))
    assert documented == _keys(SearchResult.to_dict)


def test_the_json_page_names_every_config_field() -> None:
    documented = _first_column(_section("json.md", "`config`"))
    assert {f.name for f in dataclasses.fields(autotune.TrainingConfig)} <= documented


def test_the_json_page_names_every_metric() -> None:
    words = set(re.findall(r"`(\w+)`", _section("json.md", "`metrics`")))
    assert _keys(Measurement.summary) | _keys(TrialRecord.metrics, stored=True) <= words

"""The HTML report: one self-contained file, drawn by a real headless browser offline."""

from __future__ import annotations

import dataclasses
import html.parser
import json
import os
import re
import shutil
import subprocess
import warnings

import optuna
import pytest

import autotune
from autotune import TrainingConfig
from autotune._cli import main
from autotune._result.report import render_report
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET, find
from steady import PerStepCost

SECTIONS = (
    "The answer against the baseline",
    "Throughput against validation metric",
    "Optimisation history",
    "Which knobs mattered",
    "Where the time goes",
    "Every trial",
)


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[autotune.SearchResult, str]:
    """A real search stored in SQLite, made deterministic: a grid walked by a brute-force
    sampler, a model with a fixed cost per step (batch 64 beats 32 on any machine) whose
    batches above 64 run out of memory (a failure the report must explain), and tolerance 1.0
    so accuracy does not decide."""
    db = tmp_path_factory.mktemp("report") / "study.db"
    storage = f"sqlite:///{db}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.BruteForceSampler(seed=0)
    result = find(
        PerStepCost(oom_above=64),
        tiny_data(),
        n_trials=8,
        space={"knobs": {"batch_size": [32, 64, 128], "lr_schedule": ["constant", "cosine"]}},
        sampler=sampler,
        tolerance=1.0,
        # One thread: a busy neighbour on a small machine cannot stall an OpenMP barrier.
        baseline={"intra_op_threads": 1},
        budget=FAST_BUDGET,
        accuracy_samples=2048,
        device="cpu",
        isolation="none",
        storage=storage,
        study_name="report-test",
    )
    assert result.failures.get("oom"), "the fixture needs a failed trial"
    assert result.config.batch_size == 64, "the fixture needs a winner that is not the baseline"
    return result, storage


def test_report_is_one_self_contained_file_with_every_section(searched, tmp_path) -> None:
    result, _ = searched
    path = result.report(tmp_path / "report.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert path.stat().st_mode & 0o044 == 0o044  # readable by others: it is meant to be shared
    # plotly.js is inside, once; nothing is fetched from anywhere.
    assert text.count("window.PlotlyConfig") == 1 and "plotly.js v" in text
    assert not re.search(r"<script[^>]*\bsrc=", text) and not re.search(r"<link\b", text)
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in text
    assert f"{result.speedup:.2f}x faster than the baseline" in text
    assert f"tolerance ({result.tolerance:g})" in text  # the tolerance line is labelled
    # The trial table: one row per trial, the failure's reason and message spelled out.
    assert text.count("<tr class=") == len(result.trials)
    assert "failed: oom" in text and "out of memory" in text
    # The model and data it measured are named (issue 58).
    model = result.search["model_fingerprint"]["hash"]
    assert f"fingerprints: model {model} (PerStepCost" in html.unescape(text)


def test_report_from_the_storage_matches_the_search(searched, tmp_path) -> None:
    result, storage = searched
    stored = autotune.SearchResult.from_study(storage, "report-test")
    assert stored.winner.number == result.winner.number
    assert stored.tolerance == result.tolerance  # read back from the trials' constraints
    assert stored.planned_samples == result.planned_samples
    assert [t.number for t in stored.trials] == [t.number for t in result.trials]
    assert [t.feasible for t in stored.trials] == [t.feasible for t in result.trials]
    assert stored.failures == result.failures
    assert stored.speedup == pytest.approx(result.speedup)


def test_cli_report(searched, tmp_path, capsys) -> None:
    _, storage = searched
    out = tmp_path / "r.html"
    assert main(["report", "--storage", storage, "--study", "report-test", "--out", str(out)]) == 0
    assert "<h2>Every trial</h2>" in out.read_text(encoding="utf-8")
    assert f"wrote {out}" in capsys.readouterr().out
    assert main(["report", "--storage", storage, "--study", "nope", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "No study 'nope'" in err and "Studies there: report-test" in err
    missing = tmp_path / "typo.db"
    assert main(["report", "--storage", f"sqlite:///{missing}", "--out", str(out)]) == 2
    assert "No SQLite database at" in capsys.readouterr().err
    assert not missing.exists()  # a mistyped path does not leave an empty database behind


def test_a_study_too_small_for_importance_says_so(searched) -> None:
    result, _ = searched
    small = dataclasses.replace(result, trials=(result.baseline_trial,))
    text = render_report(small)
    assert "Not enough trials to tell which knobs mattered" in text
    assert "<h2>Every trial</h2>" in text


# -- In a real browser --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; installed with apt where missing and this runs as root."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs a headless chromium: `apt-get install chromium` (not root here)")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            timeout=900,
        )
        if proc.returncode != 0:
            pytest.skip(f"could not install chromium ({' '.join(cmd)}): {proc.stderr[-300:]}")
    found = shutil.which("chromium")
    if not found:
        pytest.skip("apt-get installed chromium but no `chromium` is on PATH")
    return found


class _Figures(html.parser.HTMLParser):
    """Per plotly figure div: whether plotly rendered it and how many SVG layers it drew."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, dict[str, int | bool]] = {}
        self._stack: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        current = next((f for f in reversed(self._stack) if f), None)
        if tag == "div" and "plotly-graph-div" in classes:
            current = a.get("id") or f"figure-{len(self.figures)}"
            self.figures[current] = {"rendered": "js-plotly-plot" in classes, "svgs": 0}
            self._stack.append(current)
            return
        if tag == "svg" and "main-svg" in classes and current:
            self.figures[current]["svgs"] = int(self.figures[current]["svgs"]) + 1
        if tag not in ("br", "img", "input", "meta", "link", "path", "rect", "line", "circle"):
            self._stack.append(None)

    def handle_endtag(self, tag: str) -> None:
        if self._stack:
            self._stack.pop()


@pytest.mark.slow
def test_the_report_draws_offline_in_a_headless_browser(searched, tmp_path, chromium) -> None:
    result, _ = searched
    path = result.report(tmp_path / "report.html")
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            # No network at all: anything the page needed from outside would fail to load.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            "--virtual-time-budget=10000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    parser = _Figures()
    parser.feed(proc.stdout)
    expected = {"fig-winner", "fig-tradeoff", "fig-history", "fig-importance", "fig-time"}
    assert set(parser.figures) == expected
    for name, fig in parser.figures.items():
        assert fig["rendered"], f"plotly did not render {name}"
        assert int(fig["svgs"]) >= 1, f"{name} drew no SVG"


def test_what_a_study_says_about_itself_is_used(searched) -> None:
    """The settings a search publishes (tolerance, metric, environment) are read back: no
    flags needed; flags judge the trials otherwise."""
    result, storage = searched
    stored = autotune.SearchResult.from_study(storage)  # the only study there: no name needed
    assert stored.tolerance == 1.0 and stored.guard.metric_name == "accuracy"
    assert stored.environment == result.environment and stored.environment["device"] == "cpu"
    text = render_report(stored)
    assert f"measured on {result.environment['device_name']} (cpu)" in text
    assert "val accuracy" in text
    strict = autotune.SearchResult.from_study(storage, tolerance=0.0, metric_name="top1")
    assert strict.tolerance == 0.0 and strict.guard.metric_name == "top1"
    assert "val top1" in render_report(strict)


# -- Knobs that exist in some configs only --------------------------------------------------------

# Two ranks, static graph on, no workers: the DDP static graph exists (no accumulation), the
# loader knobs and DDP's no_sync do not.
DDP_BASE = TrainingConfig(ranks=2, ddp_static_graph=True)
# Each candidate lacks a knob another has (see Knob.exists).
ACCUMULATED = DDP_BASE.replace(
    batch_size=16, gradient_accumulation_steps=2, ddp_static_graph=False, ddp_no_sync=True
)
LOADER = DDP_BASE.replace(num_workers=2, persistent_workers=True, prefetch_factor=4)
BOTH = ACCUMULATED.replace(num_workers=2, persistent_workers=False, ddp_no_sync=False)
UNSTATIC = DDP_BASE.replace(ddp_static_graph=False)


def _knobs_differ(tmp_path) -> tuple[autotune.SearchResult, str]:
    """A journal study (as `--storage journal:///...` keeps one) whose trials differ in which
    knobs exist; on a model without batch norm, so 16 x 2 trains as 32 does (safe answers)."""
    from test_ledger import _base, _candidate, settings

    from autotune._search import storage as stored

    s = settings(
        baseline=DDP_BASE,
        split_free=True,
        space=autotune.load_space(
            {
                "knobs": {
                    "batch_size": [16, 32],
                    "gradient_accumulation_steps": [1, 2],
                    "num_workers": [0, 2],
                    "persistent_workers": [False, True],
                    "prefetch_factor": [None, 4],
                    "ddp_static_graph": [False, True],
                    "ddp_no_sync": [False, True],
                }
            }
        ),
    )
    url = f"journal:///{tmp_path / 'study.log'}"
    study = optuna.create_study(storage=stored.resolve(url), study_name="j")
    records = [
        dataclasses.replace(_base(), config=DDP_BASE),
        _candidate(ACCUMULATED, 150.0),
        _candidate(LOADER, 120.0),
        _candidate(BOTH, 100.0),
        _candidate(UNSTATIC, 180.0),
    ]
    for record in records:
        trial = study.ask()
        stored.store_record(trial, record)
        study.tell(trial, record.projected_time)
    stored.publish_settings(study, s)
    return autotune.SearchResult.from_study(url, "j"), url


def test_a_study_whose_configs_differ_in_which_knobs_exist(tmp_path, capsys) -> None:
    """`autotune report` failed with KeyError: 'ddp_static_graph' on a study where accumulation
    followed a config without it: the report took every config's knobs from the first one.
    An absent knob is no value of that config: the report, `show`, the trials' export and the
    winner's comparison with the baseline say what each config has."""
    result, url = _knobs_differ(tmp_path)
    assert result.winner.config == BOTH  # the fastest, and safe: the same global batch

    out = tmp_path / "r.html"
    assert main(["report", "--storage", url, "--study", "j", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in text
    assert text.count("<tr class=") == 5
    # fANOVA ranks the knobs every trial has; the others are named, not dropped unsaid.
    assert 'id="fig-importance"' in text
    assert (
        "Not ranked: persistent_workers, prefetch_factor, ddp_static_graph, ddp_no_sync: each "
        "exists in only some of the trials"
    ) in text

    path = result.save(tmp_path / "best.json")
    capsys.readouterr()
    assert main(["show", str(path), "--detail"]) == 0
    shown = capsys.readouterr().out
    assert f"winner:   {BOTH.describe()}" in shown
    assert f"baseline: {DDP_BASE.describe()}" in shown

    exported = json.loads(path.read_text(encoding="utf-8"))
    configs = [TrainingConfig.from_dict(t["config"]) for t in exported["trials"]]
    assert configs == [DDP_BASE, ACCUMULATED, LOADER, BOTH, UNSTATIC]

    # The winner against the baseline as a Hugging Face Trainer's arguments: the static graph
    # the winner cannot have (it accumulates) is switched off, not left as the baseline's.
    tuned = dataclasses.replace(result, trainer="transformers").trainer_settings()
    assert tuned["training_arguments"] == {
        "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 2,
        "dataloader_num_workers": 2,
        "ddp_static_graph": None,
    }


@pytest.mark.slow
def test_a_search_over_the_whole_default_space_reports(tmp_path, capsys) -> None:
    """Every knob of the default space, sampled as it comes (workers or none, accumulation or
    none, compile or none), then `autotune report`: the next knob whose presence depends on
    another cannot break the report unseen."""
    from autotune._knobs.registry import values_of

    url = f"sqlite:///{tmp_path / 'study.db'}"
    result = find(
        tiny_model(),
        tiny_data(1024),
        space="default",
        n_trials=10,
        timeout=45,
        trial_timeout=15,  # a compiled trial on a busy CPU: failed at its limit, reported
        guided=False,  # the sampler's configs as they come, each measured in full
        sampler=optuna.samplers.RandomSampler(seed=0),
        budget=FAST_BUDGET,
        accuracy_samples=256,
        device="cpu",
        isolation="none",
        storage=url,
        study_name="whole",
    )
    # The seeded sampler's first few configs have and lack each conditional knob: with and
    # without accumulation (DDP's static graph), loader workers and compile.
    knobs = [set(values_of(t.config, result.baseline)) for t in result.trials]
    for name in ("ddp_static_graph", "persistent_workers", "compile_dynamic"):
        assert any(name in k for k in knobs) and any(name not in k for k in knobs), name
    out = tmp_path / "r.html"
    assert main(["report", "--storage", url, "--study", "whole", "--out", str(out)]) == 0
    assert f"wrote {out} ({len(result.trials)} trials" in capsys.readouterr().out
    text = out.read_text(encoding="utf-8")
    assert text.count("<tr class=") == len(result.trials)


def test_the_headline_bars_label_figures_as_a_person_reads_them(searched) -> None:
    """A README run's report labelled a bar "3.643e+04"; every label reads as a number now,
    and a panel neither config has a figure for is left out, not drawn empty."""
    from autotune._result.report import _headline_figure, _plain

    assert [_plain(v) for v in (36430.0, 612.34, 61.23, 4.254, 0.98861, None)] == [
        "36,430", "612.3", "61.23", "4.25", "0.9886", "n/a",
    ]  # fmt: skip
    result, _ = searched
    labels = [text for trace in _headline_figure(result).data for text in trace.text]
    assert labels and not any("e+" in text or "e-" in text for text in labels), labels

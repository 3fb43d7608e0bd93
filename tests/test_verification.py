"""autotune.verify / `autotune verify`: the winner re-measured against its baseline here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import autotune
from autotune import ConfigError
from autotune._cli import main
from autotune._speed import stats
from autotune._verify import compare_environments
from autotune.examples import tiny_data, tiny_model

from conftest import FAST_BUDGET, find
from steady import PerStepCost

STEADY = ["--model", "steady:per_step_model", "--data", "autotune.examples:tiny_data"]


@pytest.fixture(scope="module")
def result_file(tmp_path_factory) -> str:
    """A real result from a fast search. The model costs a fixed time per step and tolerance 1.0
    takes accuracy out of it, so the winner is a bigger batch, never the baseline."""
    result = find(
        PerStepCost(),
        tiny_data(256),
        n_trials=1,
        space={"knobs": {"batch_size": [32, 128]}},
        tolerance=1.0,
        # One thread: a busy neighbour on a small machine cannot stall an OpenMP barrier.
        baseline={"intra_op_threads": 1},
        budget=FAST_BUDGET,
        accuracy_samples=2048,
        device="cpu",
        isolation="none",
    )
    assert result.config != result.baseline, "the fixture needs a winner that is not the baseline"
    path = tmp_path_factory.mktemp("verify") / "best.json"
    result.save(path)
    return str(path)


def _edited(result_file: str, tmp_path, **env_changes) -> str:
    data = json.loads(Path(result_file).read_text())
    data["environment"].update(env_changes)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_winner_and_baseline_are_measured_side_by_side_in_randomized_rounds(result_file):
    lines: list[str] = []
    report = autotune.verify(
        result_file, PerStepCost(), tiny_data(256), rounds=3, budget=FAST_BUDGET,
        progress=lines.append,
    )  # fmt: skip
    # The fingerprints the result was measured on are named; these are the same model and data.
    assert any(line.startswith("the result was measured on model ") for line in lines), lines
    order = [line.split()[2] for line in lines if line.startswith("round")]
    # Each round in an order drawn afresh, as the search's rounds draw theirs.
    seed = f"verify:{json.loads(Path(result_file).read_text())['search']['study_name']}"
    drawn = [stats.round_order(["baseline", "winner"], seed, r) for r in range(3)]
    assert order == [name for names in drawn for name in names]
    assert len(report.baseline_measurements) == len(report.winner_measurements) == 3
    ratios = report.throughput_ratios
    assert ratios == [
        w.throughput / b.throughput
        for b, w in zip(report.baseline_measurements, report.winner_measurements, strict=True)
    ]
    recorded = json.loads(Path(result_file).read_text())
    assert report.recorded_speedup == pytest.approx(recorded["speedup"])
    assert report.winner.to_dict() == recorded["config"]
    assert report.environment_warnings == ()  # measured on this very machine
    text = report.summary()
    assert "3 paired rounds" in text and "recorded" in text
    assert f"{recorded['speedup']:.2f}x" in text
    # Four times fewer 2 ms steps per sample: the winner wins here too, in every round.
    assert report.faster_here and min(ratios) > 1.5 and "verdict: the winner is faster" in text


def test_a_different_environment_is_flagged_field_by_field(result_file, tmp_path):
    path = _edited(
        result_file, tmp_path, torch="1.0.0", device_name="NVIDIA Z100", fingerprint="abc"
    )
    report = autotune.verify(path, PerStepCost(), tiny_data(), rounds=1, budget=FAST_BUDGET)
    warnings = "\n".join(report.warnings)
    assert "torch version differs: the result was measured with '1.0.0'" in warnings
    assert f"here it is {torch.__version__!r}" in warnings
    assert "device differs: the result was measured with 'NVIDIA Z100'" in warnings
    assert "! torch version differs" in report.summary()


def test_another_model_or_data_than_the_results_is_said(result_file) -> None:
    """Issue 58: verify on an edited model measured it silently, as if the result were its."""
    report = autotune.verify(result_file, PerStepCost(), tiny_data(512), rounds=1,
                             budget=FAST_BUDGET)  # fmt: skip
    warnings = "\n".join(report.warnings)
    assert "the model or data differ from those the result was measured on" in warnings
    assert "training set: length" in warnings and "-> 512" in warnings, warnings
    same = autotune.verify(result_file, PerStepCost(), tiny_data(256), rounds=1,
                           budget=FAST_BUDGET)  # fmt: skip
    assert not any("differ from those the result" in w for w in same.warnings)


def test_fingerprint_alone_and_a_missing_environment_are_flagged():
    env = {"device_name": "cpu x", "torch": "2.13.0", "fingerprint": "aaa"}
    assert compare_environments(env, dict(env)) == []
    assert "fingerprint differs" in compare_environments(env, {**env, "fingerprint": "bbb"})[0]
    assert "no `environment` record" in compare_environments(None, env)[0]


def test_cli_verify_prints_the_comparison_and_the_warnings(result_file, tmp_path, capsys):
    path = _edited(result_file, tmp_path, cpu_count=512)
    # Four rounds: "faster here" is an interval above 1, which two rounds (one degree of
    # freedom) rarely give on a loaded machine.
    code = main(["verify", path, *STEADY, "--rounds", "4", "--timed-samples", "64", "--quiet"])
    out = capsys.readouterr().out
    assert "autotune verify on cpu" in out and "4 paired rounds" in out
    assert "CPU count differs: the result was measured with 512" in out
    assert "verdict: the winner is faster here" in out and code == 0

    assert main(["verify", path, *STEADY, "--rounds", "1", "--timed-samples", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rounds"] == 1 and len(data["speedups"]) == 1
    assert any("CPU count differs" in w for w in data["warnings"])


def test_accuracy_seeds_train_both_on_the_searchs_budget(result_file):
    report = autotune.verify(
        result_file,
        PerStepCost(),
        tiny_data(),
        rounds=1,
        budget=FAST_BUDGET,
        accuracy_seeds=2,
    )
    assert report.accuracy is not None and report.accuracy["samples"] == 2048
    assert len(report.accuracy["baseline"]) == len(report.accuracy["winner"]) == 2
    assert "val accuracy on 2,048 samples over 2 seeds" in report.summary()


def test_a_winner_that_does_not_fit_here_is_reported_not_raised(result_file):
    winner = json.loads(Path(result_file).read_text())["config"]
    assert winner["batch_size"] > 64
    model = PerStepCost(oom_above=64)  # as on a machine with less memory
    report = autotune.verify(result_file, model, tiny_data(), rounds=2, budget=FAST_BUDGET)
    assert "winner" in report.failures and "out of memory" in report.failures["winner"]
    assert not report.faster_here
    assert any("the winner config failed here: oom" in w for w in report.warnings)


def test_bad_inputs(result_file, tmp_path):
    bare = tmp_path / "config.json"
    bare.write_text(autotune.TrainingConfig().to_json())
    with pytest.raises(ConfigError, match="needs `config` and `baseline`"):
        autotune.verify(str(bare), tiny_model(), tiny_data())
    with pytest.raises(ValueError, match="`rounds` must be an int >= 1, but got 0"):
        autotune.verify(result_file, tiny_model(), tiny_data(), rounds=0)
    if not torch.cuda.is_available():
        data = json.loads(Path(result_file).read_text())
        data["config"]["device"] = "cuda:0"
        gpu = tmp_path / "gpu.json"
        gpu.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="pass device='cpu'"):
            autotune.verify(str(gpu), tiny_model(), tiny_data())
        report = autotune.verify(
            str(gpu), PerStepCost(), tiny_data(), device="cpu", rounds=1, budget=FAST_BUDGET
        )
        assert report.device == "cpu" and len(report.speedups) == 1


def test_the_accuracy_check_validates_on_the_searchs_own_split(monkeypatch, tmp_path) -> None:
    """verify re-splits the data as the search did (its val_fraction and seed), not 10%."""
    from autotune._trial import workload as workload_module

    result = find(
        PerStepCost(),
        tiny_data(256),
        n_trials=1,
        space={"knobs": {"batch_size": [32, 64]}},
        tolerance=1.0,
        val_fraction=0.3,
        seed=5,
        budget=FAST_BUDGET,
        accuracy_samples=64,
        device="cpu",
        isolation="none",
    )
    path = result.save(tmp_path / "best.json")
    asked: list[tuple[float, int]] = []
    original = workload_module.split_dataset

    def spy(dataset, task, *, val_fraction, seed):
        asked.append((val_fraction, seed))
        return original(dataset, task, val_fraction=val_fraction, seed=seed)

    monkeypatch.setattr(workload_module, "split_dataset", spy)
    autotune.verify(str(path), PerStepCost(), tiny_data(), rounds=1, budget=FAST_BUDGET)
    assert asked == [(0.3, 5)]


class HangsAbove(torch.nn.Module):
    """The per-step model, whose forward hangs for batches larger than ``above`` (a deadlock in
    a user's layer, a stuck collective)."""

    def __init__(self, above: int) -> None:
        super().__init__()
        self.inner, self.above = PerStepCost(), above

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.above:
            import time

            time.sleep(3600)
        return self.inner(x)  # type: ignore[no-any-return]


def test_a_hanging_run_ends_at_a_limit_from_the_studys_own_run_times(result_file, monkeypatch):
    """verify on a model that hangs waited its default 600 s, though the study knew each run of
    that config took a second or two: the limit is 3x the longest run the study measured of the
    config (no floor here, to keep the test short), and the failure says why it was that long."""
    import time

    from autotune._verify import limits as _verify

    data = json.loads(Path(result_file).read_text())
    longest = max(t["seconds"] for t in data["trials"] if t["config"] == data["config"])
    # The floor at most the measured limit: a run of the fixture's winner can take under 0.17 s
    # (an idle machine), and a floor of 0.5 s then set the limit instead.
    monkeypatch.setattr(_verify, "MIN_LIMIT", min(0.5, 3 * longest))
    start = time.monotonic()
    report = autotune.verify(result_file, HangsAbove(64), tiny_data(), rounds=2, budget=FAST_BUDGET)
    assert time.monotonic() - start < 3 * longest + 20  # the baseline's rounds, the hang's limit
    failure = report.failures["winner"]
    assert f"batch={data['config']['batch_size']}" in failure
    assert f"ran past the {3 * longest:.0f} s limit of a verify run" in failure
    assert f"the limit was 3x the longest run the study measured of it ({longest:.1f} s)" in failure
    # Nothing measured of a config (a result edited by hand): the default, said as such.
    limits = _verify.run_limits({"trials": []}, {"winner": autotune.TrainingConfig()}, None)
    assert limits[autotune.TrainingConfig()].seconds == _verify.RUN_LIMIT


def test_a_hanging_run_ends_at_its_limit_with_the_config_named(result_file):
    """verify gave no answer in 400 s on a model whose forward hangs: every run has a limit."""
    import time

    start = time.monotonic()
    report = autotune.verify(
        result_file, HangsAbove(64), tiny_data(), rounds=2, budget=FAST_BUDGET, time_limit=3.0
    )
    assert time.monotonic() - start < 30
    winner = json.loads(Path(result_file).read_text())["config"]
    failure = report.failures["winner"]
    assert f"batch={winner['batch_size']}" in failure
    assert "ran past the 3 s limit of a verify run and was stopped" in failure
    assert not report.faster_here


def test_full_trains_both_for_the_whole_run_and_resumes(result_file, tmp_path):
    """verify --full: both configs train the planned run over paired seeds, end to end; every
    finished run is kept, and a second call takes them from the file instead of training
    again. A file of another verification is refused, not mixed in."""
    planned = json.loads(Path(result_file).read_text())["metrics"]["planned_samples"]
    state = tmp_path / "full.json"
    lines: list[str] = []
    kwargs = dict(rounds=1, budget=FAST_BUDGET, full=True, full_seeds=2, resume=state)
    report = autotune.verify(result_file, PerStepCost(), tiny_data(256), progress=lines.append,
                             **kwargs)  # fmt: skip
    full = report.full
    assert full is not None and len(full.pairs) == 2 and not full.failures
    # The whole planned run, in whole batches (32 and 128 both divide 2,304).
    assert planned == 2300 and {r.samples for r in full.runs} == {2304}
    # Alternating which goes first, seed by seed.
    order = [line.split()[2].rstrip(",") for line in lines if line.endswith("samples")]
    assert order == ["baseline", "winner", "winner", "baseline"]
    # A fixed cost per step: the winner's 4x batch takes a quarter of the steps.
    assert full.time_ratio is not None and full.time_ratio > 1.5
    assert "time to accuracy: the winner" in report.summary()
    assert report.to_dict()["full"]["verdict"] in ("within", "unclear", "beyond")
    assert len(json.loads(state.read_text())["runs"]) == 4

    again: list[str] = []
    resumed = autotune.verify(result_file, PerStepCost(), tiny_data(256), progress=again.append,
                              **kwargs)  # fmt: skip
    assert resumed.full is not None and resumed.full.resumed == 4
    assert not [line for line in again if line.startswith("whole run")]
    assert resumed.full.time_ratio == full.time_ratio

    data = json.loads(Path(result_file).read_text())
    data["config"]["batch_size"] = 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="is of another verification"):
        autotune.verify(str(other), PerStepCost(), tiny_data(256), **kwargs)


def test_full_trains_a_shorter_winner_for_its_share_of_the_run(result_file, tmp_path):
    data = json.loads(Path(result_file).read_text())
    data["config"]["train_fraction"] = 0.5
    data["config"]["lr_schedule"]["kind"] = "one_cycle"
    path = tmp_path / "short.json"
    path.write_text(json.dumps(data))
    planned = data["metrics"]["planned_samples"]
    code = main(["verify", str(path), *STEADY, "--rounds", "1", "--timed-samples", "64",
                 "--full", "--full-seeds", "2", "--json", "--quiet"])  # fmt: skip
    assert code == 0
    kept = json.loads((tmp_path / "short.json.full.json").read_text())["runs"]
    # 2,300 planned samples in batches of 32 (2,304); the winner half of them in 128s (1,152).
    assert planned == 2300
    assert sorted((r["arm"], r["samples"]) for r in kept) == [
        ("baseline", 2304), ("baseline", 2304), ("winner", 1152), ("winner", 1152),
    ]  # fmt: skip


def test_a_winner_that_is_the_baseline_is_not_called_faster() -> None:
    """A search that kept the baseline: verify has nothing to compare, and its verdict says so
    (it said "the winner is faster here" under "nothing to compare")."""
    from autotune._verify import VerifyReport

    cfg = autotune.TrainingConfig()
    report = VerifyReport(
        winner=cfg, baseline=cfg, device="cpu", baseline_measurements=(),
        winner_measurements=(), recorded_speedup=1.0, recorded_throughput_ratio=1.0,
        planned_samples=1000, planned_epochs=1.0, environment_warnings=(),
    )  # fmt: skip
    assert report.faster_here  # nothing failed: exit status 0
    assert "verdict: the winner is the baseline: keep the baseline's settings" in report.summary()
    assert "faster here" not in report.summary()

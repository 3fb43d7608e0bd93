"""The side-by-side rounds' statistics and their one rule, each shown on exact figures and on
simulated machines of known speeds with 10% log-normal noise per measurement."""

from __future__ import annotations

import math

import pytest
import rounds_sim

from autotune._speed import stats
from autotune._speed.stats import Decision, Interval

RANK = {"base": (0.0,), "a": (1.0,), "b": (2.0,), "c": (3.0,)}


def _rounds(times: dict[str, list[float]]) -> list[dict[str, float]]:
    n = len(next(iter(times.values())))
    return [{k: v[i] for k, v in times.items()} for i in range(n)]


def test_an_interval_is_a_t_interval_on_the_rounds_log_ratios() -> None:
    logs = [math.log(x) for x in (1.30, 1.25, 1.33, 1.28)]
    figure = stats.interval(logs, 0.05)
    assert figure is not None
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    half = 3.182446305284263 * sd / 2  # t(0.975, 3 dof)
    assert figure == Interval(
        pytest.approx(math.exp(mean)),
        pytest.approx(math.exp(mean - half)),
        pytest.approx(math.exp(mean + half)),
        4,
        pytest.approx(sd),
    )  # type: ignore[arg-type]
    assert stats.interval(logs[:1], 0.05) is None  # one round is one draw


def test_the_error_rate_is_shared_by_the_looks() -> None:
    """Each look's share as the accuracy guard shares its looks: half to the first (rounds
    end at the deadline after a few far more often than at a later look), and over every
    look the rounds could stop at, no more than the whole 5%."""
    assert [stats.round_alpha(n) for n in (2, 4, 5, 6, 9, 14, 20)] == pytest.approx(
        [0.025, 0.025, 0.0125, 0.0125, 0.05 / 12, 0.05 / 24, 0.05 / 40]
    )
    assert sum(stats.round_alpha(n) for n in stats.LOOKS) <= stats.ALPHA
    assert stats.round_alpha(6, looks=1) == 0.05  # fixed rounds (verify's): one look
    assert [n for n in range(1, 25) if stats.is_look(n)] == list(stats.LOOKS)


def test_each_round_draws_its_order_afresh_and_a_rerun_draws_the_same() -> None:
    items = ["base", "a", "b", "c"]
    orders = [stats.round_order(items, "study", i) for i in range(12)]
    assert all(sorted(o) == sorted(items) for o in orders)
    assert len({tuple(o) for o in orders}) > 4  # not a rotation of four
    assert orders == [stats.round_order(items, "study", i) for i in range(12)]
    assert stats.round_order(items, "other", 0) != orders[0] or orders[1] != stats.round_order(
        items, "other", 1
    )


def test_a_leader_separated_from_the_rest_is_the_answer() -> None:
    rounds = _rounds({"base": [100, 101, 99, 100], "a": [80, 81, 79, 80], "b": [60, 61, 60, 59]})
    decided = stats.race(rounds, "base", ["base", "a", "b"], RANK.__getitem__)
    assert decided is not None
    assert (decided.leader, decided.answer, decided.decision) == ("b", "b", Decision.SEPARATED)
    assert decided.versus_baseline["b"].above_one and decided.separated("a")


def test_configs_not_separated_answer_the_simpler() -> None:
    """b leads a by 3% on average, but one round in four reverses them: not separated."""
    rounds = _rounds({"base": [100, 100, 100, 100], "a": [62, 60, 61, 58], "b": [58, 59, 57, 61]})
    decided = stats.race(rounds, "base", ["base", "a", "b"], RANK.__getitem__)
    assert decided is not None
    assert decided.leader == "b" and decided.answer == "a"
    assert decided.decision is Decision.NOT_SEPARATED


def test_a_config_shown_within_three_percent_is_a_tie_and_the_simpler_wins() -> None:
    """b is 1% faster than a in every round: separated, but shown within ±3%: a tie."""
    rounds = _rounds(
        {"base": [100.0] * 4, "a": [60.0, 60.3, 59.8, 60.1], "b": [59.4, 59.7, 59.2, 59.5]}
    )
    decided = stats.race(rounds, "base", ["base", "a", "b"], RANK.__getitem__)
    assert decided is not None
    assert decided.leader == "b" and decided.answer == "a"
    assert decided.decision is Decision.EQUIVALENT


def test_an_answer_not_above_the_baseline_beyond_the_noise_is_the_baseline() -> None:
    rounds = _rounds({"base": [100, 100, 100, 100], "a": [70, 110, 80, 105]})
    decided = stats.race(rounds, "base", ["base", "a"], RANK.__getitem__)
    assert decided is not None
    assert decided.leader == "a" and decided.answer == "base" and decided.fell_back
    assert not decided.versus_baseline["a"].above_one


def test_one_shown_faster_than_the_leader_in_the_rounds_both_were_in_leads() -> None:
    """a ran 1.5x in three rounds of a fast machine; b ran 7% faster than a in the two rounds
    both were in: b leads, and the rounds both were in separate them."""
    rounds = [
        {"base": 200.0, "a": 150.0, "b": 140.0},
        {"base": 200.0, "a": 150.0, "b": 140.0},
        *({"base": 200.0, "a": 120.0} for _ in range(3)),
    ]
    decided = stats.race(rounds, "base", ["base", "a", "b"], RANK.__getitem__)
    assert decided is not None
    assert decided.versus_baseline["a"].estimate > decided.versus_baseline["b"].estimate
    assert (decided.leader, decided.answer) == ("b", "b")


def test_the_rounds_stop_at_a_look_once_decided_and_the_separated_leave() -> None:
    times = {"base": [100.0, 101, 99, 100], "a": [99.0, 100, 101, 98], "b": [50.0, 51, 49, 50]}
    rounds = _rounds(times)
    assert stats.after_round(rounds[:3], "base", ["base", "a", "b"], RANK.__getitem__) == (
        False,
        ["base", "a", "b"],
    )  # not a look
    stop, active = stats.after_round(rounds, "base", ["base", "a", "b"], RANK.__getitem__)
    assert stop and active == ["base", "a", "b"]  # b separated from both: decided
    # At a look undecided between a and b, the baseline (separated from them) stays.
    close = _rounds({"base": [100.0] * 4, "a": [62, 60, 61, 58], "b": [58, 59, 57, 61]})
    stop, active = stats.after_round(close, "base", ["base", "a", "b"], RANK.__getitem__)
    assert not stop and active == ["base", "a", "b"]


@pytest.mark.parametrize("drift", [0.0, 0.05])
def test_on_a_simulated_noisy_machine_the_rule_keeps_its_promises(drift: float) -> None:
    """200 simulated searches a scenario, 10% log-normal noise per measurement (and a shared
    drift per round): the answer's 95% interval covers its true speedup in at least 93%; of
    two configs 2% apart the simpler is answered in at least 80%; a config as fast as the
    baseline is answered in at most 5%; an answer is never one whose lower bound is not
    above 1 (benchmarks/race_sim.py --rule runs 1,000)."""
    n = 200
    for name, speeds in rounds_sim.SCENARIOS.items():
        raced = [rounds_sim.race(speeds, seed, drift=drift) for seed in range(n)]
        covered = sum(r.covered for r in raced)
        assert covered >= 0.93 * n, (name, covered)
        assert all(r.answer == "baseline" or r.low > 1.0 for r in raced), name
        if name == "two 2% apart":
            assert sum(r.answer == "simpler" for r in raced) >= 0.8 * n
        if name in ("one as fast", "six as fast"):
            assert sum(r.answer != "baseline" for r in raced) <= 0.05 * n, name

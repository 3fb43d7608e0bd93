"""The side-by-side rounds' statistics and their one rule, each shown on exact figures and on
simulated machines of known speeds with 10% log-normal noise per measurement."""

from __future__ import annotations

import math
import statistics

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


def test_the_noise_is_pooled_over_every_config_the_rounds_measured() -> None:
    """One contender beside the baseline: the noise is its own log-ratios' spread with n - 1
    degrees of freedom (the paired t interval). Two: a two-way fit of the log times (config
    plus round), N - rank degrees of freedom; a config whose rounds happened to agree is
    spread by the machine's noise, not its own."""
    one = _rounds({"base": [100.0, 104.0, 98.0, 101.0], "a": [80.0, 79.0, 81.0, 77.0]})
    logs = stats.log_ratios(one, "base", "a")
    pooled = stats.noise(one, "base")
    assert pooled is not None and pooled.dof == 3
    assert pooled.spread == pytest.approx(statistics.stdev(logs))
    own, shared = stats.interval(logs, 0.05), stats.interval(logs, 0.05, pooled)
    assert own is not None and shared is not None
    assert (shared.low, shared.high) == pytest.approx((own.low, own.high))
    two = _rounds(
        {
            "base": [100.0, 104.0, 98.0, 101.0],
            "a": [80.0, 79.0, 81.0, 77.0],
            "b": [70.0, 72.8, 68.6, 70.7],  # exactly 0.7 of the baseline's every round
        }
    )
    pooled = stats.noise(two, "base")
    assert pooled is not None and pooled.dof == 12 - (3 + 4 - 1)
    b = stats.interval(stats.log_ratios(two, "base", "b"), 0.05, pooled)
    assert b is not None and b.spread == pytest.approx(0.0, abs=1e-12)
    assert b.low < b.estimate < b.high  # spread by the pooled noise, not its own 0
    assert stats.noise(one[:1], "base") is None


def test_the_error_rate_is_shared_by_the_looks() -> None:
    """Each look's share as the accuracy guard shares its looks: half to the first (rounds
    end at the deadline after a few far more often than at a later look); rounds the deadline
    stops off a look spend what the looks before them left. Wherever the deadline falls, the
    intervals the rounds could have been reported at spend no more than the whole 5%."""
    assert [stats.round_alpha(n) for n in (2, 3, 4, 5, 6, 7, 9, 10, 14, 20)] == pytest.approx(
        [0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125, 0.05 / 12, 0.05 / 6, 0.05 / 24, 0.05 / 40]
    )
    for deadline in range(2, stats.LOOKS[-1] + 1):
        before = sum(stats.round_alpha(n) for n in stats.LOOKS if n < deadline)
        assert before + stats.round_alpha(deadline) <= stats.ALPHA + 1e-12, deadline
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
    """a ran 1.50x over twenty rounds; b ran 11% faster than a in the two rounds both were in
    (where a ran 1.33x): b leads, and the rounds both were in separate them, by the noise of
    all twenty (the spread of a's own rounds, pooled)."""
    rounds = [
        {"base": 200.0, "a": 150.0, "b": 135.0},
        {"base": 202.0, "a": 151.0, "b": 137.0},
        *({"base": 200.0 + (i % 3), "a": 133.0 - (i % 2)} for i in range(18)),
    ]
    decided = stats.race(rounds, "base", ["base", "a", "b"], RANK.__getitem__)
    assert decided is not None
    assert decided.versus_baseline["a"].estimate > decided.versus_baseline["b"].estimate
    assert (decided.leader, decided.answer) == ("b", "b")
    assert decided.noise is not None and decided.noise.dof == 20
    assert decided.versus_leader["a"].above_one


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


@pytest.mark.parametrize(("drift", "deadline"), [(0.0, None), (0.05, None), (0.0, 3), (0.0, 5)])
def test_on_a_simulated_noisy_machine_the_rule_keeps_its_promises(
    drift: float, deadline: int | None
) -> None:
    """200 simulated searches a scenario, 10% log-normal noise per measurement (and a shared
    drift per round; or 1,000 with a deadline after 3 or 5 rounds, off a look): the answer's
    95% interval covers its true speedup in at least 93%; of two configs 2% apart the simpler
    is answered in at least 80% (given time: a deadline's few rounds cannot separate them); a
    config as fast as the baseline is answered in at most 5%; an answer is never one whose
    lower bound is not above 1 (benchmarks/race_sim.py --rule runs 1,000)."""
    n = 200 if deadline is None else 1000  # a deadline's few rounds are cheap: a sharper count
    for name, speeds in rounds_sim.SCENARIOS.items():
        raced = [
            rounds_sim.race(speeds, seed, drift=drift, max_rounds=deadline) for seed in range(n)
        ]
        covered = sum(r.covered for r in raced)
        assert covered >= 0.93 * n, (name, covered)
        assert all(r.answer == "baseline" or r.low > 1.0 for r in raced), name
        if name == "two 2% apart" and deadline is None:
            assert sum(r.answer == "simpler" for r in raced) >= 0.8 * n
        if name in ("one as fast", "six as fast"):
            assert sum(r.answer != "baseline" for r in raced) <= 0.05 * n, name

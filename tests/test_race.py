"""Racing in the safe stage (issue 56): the best safe config is drawn a second time before the
search builds on it where another is within the screening noise of it, a config drawn twice
ranks by both draws, and the fastest single changes are combined in pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sim import Model, result_of, search

from autotune import TrainingConfig
from autotune._search.policy import AGAIN_ATTR, STAGE_ATTR

KNOBS = {
    "num_workers": [0, 1, 2],
    "channels_last": [False, True],
    "optimizer_impl": ["default", "foreach", "fused"],
}
IMPLS = ("default", "foreach", "fused")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import race_sim  # noqa: E402


def _jpeg_like(cfg: TrainingConfig) -> float:
    """The third JPEG run of the twenty-fifth session, as its plain loop measured it: the
    foreach optimizer 1.05x, fused 1.14x, channels_last 1.11x, channels_last + fused 1.33x
    (more than the product: their gains add up on this model); loader workers do nothing."""
    s = {"default": 1.0, "foreach": 1.05, "fused": 1.14}[cfg.optimizer_impl.value]
    s *= 1.11 if cfg.channels_last else 1.0
    return s * (1.05 if cfg.channels_last and cfg.optimizer_impl.value == "fused" else 1.0)


def _drawn(run, cfg: TrainingConfig) -> int:
    return sum(1 for e in run.ledger().entries if e.config == cfg and not e.record.reused)


def test_a_lucky_draw_is_drawn_again_and_the_pair_behind_it_is_built() -> None:
    """The foreach optimizer's first draw reads 1.3x its speed (1.37x the baseline; the
    search screened it at 1.36x and its rounds measured 1.05x). Before, the safe stage built
    its second pass on it and never built channels_last + fused, whose parts screened below
    it: only the sampler came upon it later, by chance (on the JPEG search, with precision
    and batch knobs beside these, it never did). Now foreach is drawn again (1.05x) before
    anything is built on it, the safe stage builds the pairs of the three fastest single
    changes, and the answer is channels_last + fused, 1.33x."""

    def draw(cfg: TrainingConfig, n: int) -> float:
        lucky = cfg.optimizer_impl.value == "foreach" and not cfg.channels_last
        return 1.3 if lucky and n == 0 else 1.0

    model = Model(speed=_jpeg_like, draw=draw)
    run, clock, lines = search(model, knobs=KNOBS, timeout=240.0, optimizer_impls=IMPLS)
    text = "\n".join(lines)
    assert clock.now - run.settings.started <= 1.05 * 240, text
    foreach = TrainingConfig(optimizer_impl="foreach")
    assert _drawn(run, foreach) == 2, text
    # Its second draw's row says what it is.
    again = [line for line in lines if " again " in line and "foreach optimizer" in line]
    assert len(again) == 1 and "1.05x" in again[0], text
    best = TrainingConfig(channels_last=True, optimizer_impl="fused")
    first = min(
        (t for t in run.bench.study.trials if t.params.get("channels_last") is True
         and t.params.get("optimizer_impl") == "fused"),
        key=lambda t: t.number,
    )  # fmt: skip
    assert first.user_attrs.get(STAGE_ATTR) == "safe", text
    result = result_of(run)
    assert result.winner.config == best, text
    assert abs(result.speedup - 1.33) < 0.01, text


def test_a_leader_beyond_the_noise_is_not_drawn_again() -> None:
    """channels_last trains 1.4x, nothing else helps: no other safe config is within the
    screening noise of it, a second draw would not change what is built on, and none is
    made (each draw costs a trial of the safe stage's time)."""
    model = Model(speed=lambda cfg: 1.4 if cfg.channels_last else 1.0)
    run, _, lines = search(model, knobs=KNOBS, timeout=240.0, optimizer_impls=IMPLS)
    raced = [t for t in run.bench.study.trials if t.user_attrs.get(AGAIN_ATTR)]
    assert not raced, "\n".join(lines)
    assert result_of(run).winner.config.channels_last


@pytest.mark.slow
def test_under_this_machines_noise_the_best_pair_is_built_and_no_answer_is_slower() -> None:
    """benchmarks/race_sim.py's JPEG-like task with the numerics knobs beside the safe ones
    (the space too large to measure whole), every measurement log-normal with this machine's
    spread (sd 0.098), 12 seeded searches: channels_last + fused (1.20x; channels_last alone
    is 1.13x) is built in 7 (before the race and the pairs: 2), no answer trains slower than
    the baseline, and a change is answered only where the side-by-side rounds showed it faster
    beyond the noise (issue 70): here channels_last in 2, the baseline in the other 10 (the
    pair's 1.20x, answered in 5 by the rounds' median before, is within the noise of the 3-4
    rounds a 240-s search leaves)."""
    knobs = {**race_sim.SAFE, **race_sim.NUMERICS}
    runs = [race_sim.one_search(seed, 0.098, knobs) for seed in range(12)]
    assert sum(r["built"] for r in runs) >= 6, runs
    assert all(r["true"] >= 0.97 for r in runs), runs
    changed = [r for r in runs if r["true"] != 1.0]
    assert changed and all(r["true"] > 1.05 for r in changed), runs

"""The guard decides as the code of d4d770e decided on the same inputs (``guard_record.py``):
every verdict, bound, seed count, screening value, diagnostic, reason and plan."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from guard_record import DATA, decisions


def _same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), where
    elif isinstance(want, dict) and isinstance(got, dict):
        assert sorted(got) == sorted(want), where
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list) and isinstance(got, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def today() -> dict[str, Any]:
    return json.loads(json.dumps(decisions()))


@pytest.mark.parametrize("part", ["cases", "plans", "horizons", "searches"])
def test_the_guard_decides_as_recorded(part: str, recorded, today) -> None:
    _same(today[part], recorded[part], part)


def test_the_record_holds_every_verdict_and_reason(recorded) -> None:
    """The recorded inputs reach each verdict and the reasons a check stays unresolved."""
    checks = [c for case in recorded["cases"] for c in case["checks"]]
    assert {c["verdict"] for c in checks} == {"confirmed", "rejected", "unresolved"}
    reasons = {c["settle"] for c in checks}
    assert {"confirm", "reject", "min_pairs", "no_units", "sample_as_wide", "one_seed"} <= reasons
    assert any(c["need"] for c in checks) and any(c["wide_sample"] for c in checks)
    assert any(c["counted"] for c in checks)

"""Re-measure a result on this machine: ``autotune.verify`` and ``autotune verify``.

The winner and its baseline are run once each and the runs discarded (warm-up), then measured
side by side in paired rounds, each in an order drawn afresh as the search's rounds draw theirs
(so drift in the machine's state hits both alike), each with a fixed timing budget
(:data:`DEFAULT_BUDGET` unless ``budget=`` is given), not the one the search calibrated from its
time budget. Each round's speedup is the baseline's projected training time over the winner's,
as the search ranks them; their figure with its 95% interval (the search's one function), and
whether that interval overlaps the one the result recorded, are reported. With
``accuracy_seeds``, both are also trained on the search's accuracy budget and validated. A
result measured on other hardware or software is flagged field by field.
"""

from __future__ import annotations

from autotune._verify.limits import DEFAULT_BUDGET, LIMIT_FACTOR, RUN_LIMIT, START_UP, setup_limit
from autotune._verify.report import VerifyReport, compare_environments
from autotune._verify.run import verify

__all__ = [
    "DEFAULT_BUDGET",
    "LIMIT_FACTOR",
    "RUN_LIMIT",
    "START_UP",
    "VerifyReport",
    "compare_environments",
    "setup_limit",
    "verify",
]

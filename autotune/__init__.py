"""autotune: find the fastest way to train your PyTorch model on this machine without losing
validation accuracy.

    import autotune
    result = autotune.find_best(model, train_dataset, tolerance=0.01, timeout=600)
    result.save("best.json")
    cfg = autotune.load_config("best.json")
    report = autotune.train(model, train_dataset, cfg, epochs=10, val_dataset=val_dataset)
"""

from __future__ import annotations

from autotune.api import find_best
from autotune.config import (
    BatchScaling,
    CompileMode,
    LRSchedule,
    Precision,
    ScheduleKind,
    TrainingConfig,
)
from autotune.errors import (
    AutotuneError,
    ConfigError,
    DataError,
    ModelError,
    SearchSpaceError,
    StorageError,
)
from autotune.guard import AccuracyGuard
from autotune.integrations import LightningSettings
from autotune.measure import Measurement
from autotune.result import SearchResult, TrialRecord, load_config
from autotune.runner import Budget
from autotune.space import SearchSpace, builtin_spaces, load_space
from autotune.training import EpochStats, TrainReport, train
from autotune.verification import VerifyReport, verify

__version__ = "0.1.0"

__all__ = [
    "AccuracyGuard",
    "AutotuneError",
    "BatchScaling",
    "Budget",
    "CompileMode",
    "ConfigError",
    "DataError",
    "EpochStats",
    "LRSchedule",
    "LightningSettings",
    "Measurement",
    "ModelError",
    "Precision",
    "ScheduleKind",
    "SearchResult",
    "SearchSpace",
    "SearchSpaceError",
    "StorageError",
    "TrainReport",
    "TrainingConfig",
    "TrialRecord",
    "VerifyReport",
    "__version__",
    "builtin_spaces",
    "find_best",
    "load_config",
    "load_space",
    "train",
    "verify",
]

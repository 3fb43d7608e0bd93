"""autotune: find the fastest way to train your PyTorch model on this machine without losing
validation accuracy.

    import autotune
    result = autotune.find_best(model, train_dataset, tolerance=0.01, timeout=600)
    result = autotune.tune(trainer, lightning_module, datamodule=dm)  # your Lightning Trainer
    result = autotune.tune(hf_trainer)  # your Hugging Face Trainer
    result.save("best.json")
    cfg = autotune.load_config("best.json")
    report = autotune.train(model, train_dataset, cfg, epochs=10, val_dataset=val_dataset)

Everything public is named here; the modules behind it are private (``autotune._*``), apart
from :mod:`autotune.examples`, the built-in workloads the CLI can name.
"""

from __future__ import annotations

from autotune._api import find_best
from autotune._choices import (
    BatchScaling,
    CompileMode,
    LRSchedule,
    OptimizerImpl,
    Precision,
    ScheduleKind,
)
from autotune._errors import (
    ArgumentError,
    AutotuneError,
    ConfigError,
    DataError,
    DeviceError,
    ModelError,
    OtherModelError,
    SearchSpaceError,
    SetUpTimeout,
    StorageError,
)
from autotune._guard.confirmation import Confirmation
from autotune._guard.guard import AccuracyGuard
from autotune._knobs.config import TrainingConfig
from autotune._knobs.trainer_args import LightningSettings
from autotune._options import SearchOptions
from autotune._result.result import SearchResult, load_config
from autotune._search.distributed import join_search
from autotune._search.ledger import TrialRecord
from autotune._space import SearchSpace, builtin_spaces, load_space
from autotune._task import Task
from autotune._train import EpochStats, TrainReport, train
from autotune._trial.measure import Measurement
from autotune._trial.outcome import Budget
from autotune._tune import tune
from autotune._verify import VerifyReport, verify

__version__ = "0.1.0"

__all__ = [
    "AccuracyGuard",
    "ArgumentError",
    "AutotuneError",
    "BatchScaling",
    "Budget",
    "CompileMode",
    "ConfigError",
    "Confirmation",
    "DataError",
    "DeviceError",
    "EpochStats",
    "LRSchedule",
    "LightningSettings",
    "Measurement",
    "ModelError",
    "OptimizerImpl",
    "OtherModelError",
    "Precision",
    "ScheduleKind",
    "SearchOptions",
    "SearchResult",
    "SearchSpace",
    "SearchSpaceError",
    "SetUpTimeout",
    "StorageError",
    "Task",
    "TrainReport",
    "TrainingConfig",
    "TrialRecord",
    "VerifyReport",
    "__version__",
    "builtin_spaces",
    "find_best",
    "join_search",
    "load_config",
    "load_space",
    "train",
    "tune",
    "verify",
]

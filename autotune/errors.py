"""The one exception tree of autotune.

Argument misuse raises plain ``TypeError``/``ValueError``; everything autotune itself decides is
wrong derives from :class:`AutotuneError`.
"""

from __future__ import annotations

__all__ = [
    "AutotuneError",
    "ConfigError",
    "DataError",
    "ModelError",
    "SearchSpaceError",
    "StorageError",
]


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""


class SearchSpaceError(AutotuneError, ValueError):
    """A search space (built-in name or user file) is unknown or invalid."""


class ConfigError(AutotuneError, ValueError):
    """A :class:`~autotune.TrainingConfig` or its JSON is invalid."""


class DataError(AutotuneError, ValueError):
    """The dataset cannot be used as given (empty, wrong item structure, ...)."""


class ModelError(AutotuneError, ValueError):
    """The model cannot consume the dataset's batches."""


class StorageError(AutotuneError, ValueError):
    """The Optuna storage URL or the study in it cannot be used."""

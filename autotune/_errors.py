"""The one exception tree of autotune.

Everything autotune itself decides is wrong derives from :class:`AutotuneError`; the subclasses
for bad input are also ``ValueError`` so that ``except ValueError`` keeps working. A ``TypeError``
is raised for an argument of the wrong type, as Python does. The CLI prints an
``AutotuneError`` as a one-line usage error and lets anything else (a bug, an error deep inside
torch) show its traceback.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "AutotuneError",
    "ConfigError",
    "DataError",
    "DeviceError",
    "ModelError",
    "OtherModelError",
    "SearchSpaceError",
    "SetUpTimeout",
    "StorageError",
]


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""


class ArgumentError(AutotuneError, ValueError):
    """An argument's value breaks its rule (``tolerance`` < 0, an unknown device, ...)."""


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


class OtherModelError(StorageError):
    """A study is resumed (or joined by a worker) with another model or other data than its
    trials measured: their speeds and accuracies are not this model's. The message names what
    changed and the way out."""


class DeviceError(AutotuneError):
    """A trial left this process's CUDA context unusable (an illegal memory access, a
    device-side assert): nothing more can run on the device in this process."""


class SetUpTimeout(AutotuneError):
    """A call into the user's code before the first trial (a factory, a data module's setup,
    the first item, the first batch, the first forward) ran past its limit. ``doing`` says
    which call, ``seconds`` the limit."""

    def __init__(self, message: str, *, doing: str, seconds: float) -> None:
        super().__init__(message)
        self.doing, self.seconds = doing, seconds

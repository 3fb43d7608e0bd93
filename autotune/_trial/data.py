"""The data as the user gives it: datasets (map-style or streams), or a Lightning
``LightningDataModule``.

A data module is read the way Lightning's ``Trainer`` reads it: ``prepare_data()`` and
``setup("fit")`` where its loaders are not ready yet, then the datasets behind its
``train_dataloader()`` and ``val_dataloader()`` and the collate function of the former. Its
DataLoader settings (batch size, workers, pinning, ...) are not used: they are what autotune
tunes, and the note says so, with the values it found.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from torch.utils.data import DataLoader, default_collate

from autotune._errors import DataError
from autotune._stream import is_stream
from autotune._trial.bounded import step

__all__ = ["DataModuleLike", "UserData", "is_datamodule", "unpack_data"]

_HINT = "Call it alone to see it return (a download, a lock or a network read can wait for ever)."
# The DataLoader settings a data module fixes and autotune tunes instead, as baseline= keys.
_LOADER_SETTINGS = ("batch_size", "num_workers", "pin_memory", "persistent_workers")


class DataModuleLike(Protocol):
    """What autotune uses of a ``LightningDataModule``."""

    def setup(self, stage: str) -> None: ...

    def train_dataloader(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class UserData:
    """Training and validation datasets, the collate function, and what was taken from where."""

    train: Any
    val: Any | None
    collate_fn: Any | None
    note: str | None = None


def is_datamodule(data: Any) -> bool:
    """A ``LightningDataModule`` (``lightning.pytorch`` or ``pytorch_lightning``), recognised
    by its class, so that Lightning is never imported for plain datasets."""
    return any(cls.__name__ == "LightningDataModule" for cls in type(data).__mro__)


def _loader(module: Any, which: str) -> DataLoader[Any] | None:
    """The module's ``{which}_dataloader()``, or None when it has none or is not set up."""
    try:
        loader = getattr(module, f"{which}_dataloader")()
    except Exception:
        return None
    dataset = getattr(loader, "dataset", None)
    if not (
        is_stream(dataset) or (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"))
    ):
        return None
    return loader  # type: ignore[no-any-return]


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def unpack_data(
    dataset: Any, val_dataset: Any | None, collate_fn: Any | None, *, argument: str = "dataset"
) -> UserData:
    """``dataset`` as it is, or a data module's datasets and collate function (an explicit
    ``val_dataset`` or ``collate_fn`` wins over the module's)."""
    if not is_datamodule(dataset):
        return UserData(dataset, val_dataset, collate_fn)
    module, name = dataset, type(dataset).__name__
    step(f"your {name}'s train_dataloader()", _HINT)
    train = _loader(module, "train")
    if train is None:
        try:
            step(f"your {name}'s prepare_data() and setup('fit')", _HINT)
            module.prepare_data()
            module.setup("fit")
        except Exception as exc:
            raise DataError(
                f"`{argument}` is a LightningDataModule ({name}) whose setup('fit') raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        step(f"your {name}'s train_dataloader()", _HINT)
        train = _loader(module, "train")
    if train is None:
        raise DataError(
            f"`{argument}` is a LightningDataModule ({name}), but its train_dataloader() gives "
            "no DataLoader over a torch dataset (map-style, with __len__ and __getitem__, or an "
            "IterableDataset), even after setup('fit')."
        )
    step(f"your {name}'s val_dataloader()", _HINT)
    val = _loader(module, "val")
    own_collate = None if train.collate_fn is default_collate else train.collate_fn
    settings = ", ".join(f"{k}={getattr(train, k)!r}" for k in _LOADER_SETTINGS)
    taken = ["its training dataset"]
    if val_dataset is None and val is not None:
        taken.append("its validation dataset")
    if collate_fn is None and own_collate is not None:
        taken.append("its collate function")
    verb = "is" if len(taken) == 1 else "are"
    note = (
        f"data: {name} (a LightningDataModule): {_listed(taken)} {verb} used; its own DataLoader "
        f"settings ({settings}) are not, they are what autotune tunes (pass them as baseline= "
        "to measure against them)"
    )
    return UserData(
        train=train.dataset,
        val=val_dataset if val_dataset is not None or val is None else val.dataset,
        collate_fn=collate_fn if collate_fn is not None else own_collate,
        note=note,
    )

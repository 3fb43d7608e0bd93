"""What a study measured: fingerprints of the model and of the data, not of their values.

A study's trials were measured on one model and one data set. A model whose layer was widened,
or data whose items changed shape, is another question: a search that resumed the old study
would rank the new model by the old one's speed. Each search stores these fingerprints with its
settings (:class:`autotune._search.settings.SearchSettings`), so a resumed search or a joining
worker can tell, and the CLI's default study name includes them.

- The model's: every module's type, every parameter's and buffer's shape and dtype, by name;
  never the weights (a freshly initialised copy is the same model).
- The data's: the type and length of the training and validation sets, the structure (types,
  shapes, dtypes) of their first items, and a hash of those items read under a fixed seed, so
  that random augmentation (torch, ``random`` or numpy drawn) and a stream's seeded shuffle give
  the same fingerprint on every run. Where two reads under that seed still differ (a stream
  shuffled from the clock), the structure alone; where even it differs, the type and length.
  A data module is fingerprinted by its class (its datasets are made by its ``setup``).

Each fingerprint is a plain JSON-ready dict with a ``hash``; :func:`model_changes` and
:func:`data_changes` say in words what differs between two.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from autotune._stream import is_stream
from autotune._trial.bounded import ITEM_HINT, step
from autotune._trial.data import is_datamodule
from autotune._trial.streaming import first_items, seeded, stream_length

__all__ = [
    "FINGERPRINT_ITEMS",
    "data_changes",
    "data_fingerprint",
    "described",
    "fit_data_fingerprint",
    "measured_on",
    "model_changes",
    "model_fingerprint",
    "study_suffix",
]

FINGERPRINT_ITEMS = 3  # items of each set read for the data's fingerprint
SEED = 0  # the seed they are read under
SHOWN = 2  # examples named per kind of change


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


# -- The model ------------------------------------------------------------------------------------


def _unwrapped(model: nn.Module) -> nn.Module:
    """The module a ``torch.compile`` wrapper holds: compiling is not another model."""
    while isinstance(getattr(model, "_orig_mod", None), nn.Module):
        model = model._orig_mod  # type: ignore[assignment]
    return model


def _tensor_fact(t: torch.Tensor) -> list[Any]:
    return [list(t.shape), str(t.dtype).removeprefix("torch.")]


def model_fingerprint(model: nn.Module) -> dict[str, Any]:
    """The model's module types and its parameters' and buffers' shapes and dtypes, by name,
    with their hash (the weights' values are not read)."""
    model = _unwrapped(model)
    facts = {
        "modules": {name: type(m).__qualname__ for name, m in model.named_modules()},
        "parameters": {name: _tensor_fact(p) for name, p in model.named_parameters()},
        "buffers": {name: _tensor_fact(b) for name, b in model.named_buffers()},
    }
    values = sum(p.numel() for p in model.parameters())
    return {"hash": _digest(facts), "type": type(model).__qualname__, "values": values, **facts}


def _shape(fact: Any) -> str:
    dims, dtype = fact
    return f"{'x'.join(map(str, dims)) or 'scalar'} {dtype}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (", ..." if len(names) > SHOWN else "")


def _tensor_changes(before: Mapping[str, Any], now: Mapping[str, Any], what: str) -> list[str]:
    out = []
    common = [k for k in now if k in before]
    shapes = [k for k in common if list(before[k][0]) != list(now[k][0])]
    dtypes = [k for k in common if k not in shapes and before[k][1] != now[k][1]]
    if shapes:
        shown = "; ".join(f"{k} {_shape(before[k])} -> {_shape(now[k])}" for k in shapes[:SHOWN])
        more = "; ..." if len(shapes) > SHOWN else ""
        out.append(f"{_count(len(shapes), what + ' shape')} differ ({shown}{more})")
    if dtypes:
        k = dtypes[0]
        out.append(
            f"{_count(len(dtypes), what + ' dtype')} differ ({k} {before[k][1]} -> {now[k][1]}"
            f"{'; ...' if len(dtypes) > 1 else ''})"
        )
    added = [k for k in now if k not in before]
    removed = [k for k in before if k not in now]
    if added:
        out.append(f"{_count(len(added), what)} added ({_named(added)})")
    if removed:
        out.append(f"{_count(len(removed), what)} removed ({_named(removed)})")
    return out


def model_changes(before: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[str]:
    """What differs from ``before`` to ``now`` ("2 parameter shapes differ (0.weight 64x8
    float32 -> 2048x8 float32; ...)", "layers added (3, 4)"); empty where they are the same
    model, or where either is unknown (a study stored before fingerprints were)."""
    if not before or not now or before.get("hash") == now.get("hash"):
        return []
    out = []
    was, new = before.get("modules", {}), now.get("modules", {})
    added = [k for k in new if k not in was]
    removed = [k for k in was if k not in new]
    retyped = [k for k in new if k in was and was[k] != new[k]]
    if added:
        out.append(f"layers added ({_count(len(added), 'module')}: {_named(added)})")
    if removed:
        out.append(f"layers removed ({_count(len(removed), 'module')}: {_named(removed)})")
    if retyped:
        k = retyped[0]
        name = k or "the model"
        out.append(
            f"{_count(len(retyped), 'layer type')} differ ({name}: {was[k]} -> {new[k]}"
            f"{'; ...' if len(retyped) > 1 else ''})"
        )
    out += _tensor_changes(before.get("parameters", {}), now.get("parameters", {}), "parameter")
    out += _tensor_changes(before.get("buffers", {}), now.get("buffers", {}), "buffer")
    return out or ["its structure differs"]


# -- The data -------------------------------------------------------------------------------------


def _structure(item: Any) -> Any:
    """An item's types, shapes and dtypes (a tensor ``float32[3, 32, 32]``), not its values."""
    if isinstance(item, torch.Tensor):
        return f"{str(item.dtype).removeprefix('torch.')}{list(item.shape)}"
    if isinstance(item, np.ndarray):
        return f"numpy {item.dtype}{list(item.shape)}"
    if isinstance(item, Mapping):
        return {str(k): _structure(v) for k, v in item.items()}
    if isinstance(item, list | tuple):
        if len(item) > 16 and all(isinstance(v, int | float) for v in item):
            return f"{type(item).__name__}[{len(item)}] of {type(item[0]).__name__}"
        return [_structure(v) for v in item]
    size = getattr(item, "size", None)  # a PIL image: mode and size
    mode = getattr(item, "mode", None)
    if isinstance(mode, str) and isinstance(size, tuple):
        return f"{type(item).__name__}({mode} {size})"
    return type(item).__name__


def _feed(h: Any, item: Any) -> None:
    """Add an item's values to the hash ``h``."""
    if isinstance(item, torch.Tensor):
        t = item.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{list(t.shape)}".encode())
        if t.layout == torch.strided and t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(item, np.ndarray):
        h.update(f"A{item.dtype}{item.shape}".encode())
        h.update(np.ascontiguousarray(item).tobytes())
    elif isinstance(item, Mapping):
        for k, v in item.items():
            h.update(f"K{k!r}".encode())
            _feed(h, v)
    elif isinstance(item, list | tuple):
        h.update(f"L{len(item)}".encode())
        for v in item:
            _feed(h, v)
    elif isinstance(item, str | bytes | int | float | bool | type(None)):
        h.update(repr(item).encode())
    elif callable(getattr(item, "tobytes", None)):  # a PIL image
        h.update(f"{_structure(item)}".encode())
        h.update(item.tobytes())
    else:
        h.update(type(item).__qualname__.encode())


def _read(data: Any, argument: str) -> list[Any]:
    """The first items of ``data`` under :data:`SEED` (torch, ``random`` and numpy seeded, a
    stream's ``set_epoch`` told it), the caller's generators given back."""
    with seeded(data, SEED):
        if is_stream(data):
            return first_items(data, FINGERPRINT_ITEMS, argument=argument)
        items = []
        for i in range(min(FINGERPRINT_ITEMS, len(data))):
            # Said as the search's own first read says it: a hang here is that read's.
            which = "the first item" if i == 0 else f"item {i}"
            step(f"{which}, `{argument}[{i}]` ({type(data).__qualname__}.__getitem__)", ITEM_HINT)
            items.append(data[i])
        return items


def _items_hash(items: list[Any]) -> str:
    h = hashlib.sha1()
    for item in items:
        _feed(h, item)
    return h.hexdigest()[:12]


def _part(data: Any, argument: str) -> dict[str, Any] | None:
    """One data set's fingerprint: its type, length, first items' structure and hash."""
    if data is None:
        return None
    kind = "datamodule" if is_datamodule(data) else "stream" if is_stream(data) else "map"
    out: dict[str, Any] = {"type": type(data).__qualname__, "kind": kind}
    if kind == "datamodule":
        return out  # its datasets are made by its setup, which the search calls once
    try:
        out["length"] = stream_length(data) if kind == "stream" else len(data)
        first, again = _read(data, argument), _read(data, argument)
    except Exception:
        # Data the search's own checks will refuse, each with its reason: type and length.
        out.setdefault("length", None)
        return {**out, "structure": None, "items": None}
    structure = [_structure(i) for i in first]
    stable = structure == [_structure(i) for i in again]
    out["structure"] = structure if stable else None
    items = _items_hash(first)
    out["items"] = items if stable and items == _items_hash(again) else None
    return out


def data_fingerprint(train: Any, val: Any = None) -> dict[str, Any]:
    """The fingerprint of the training set and the validation set as the user gave them (a
    stream, a map-style dataset, a data module), with its hash."""
    parts = {"train": _part(train, "dataset"), "val": _part(val, "val_dataset")}
    return {"hash": _digest(parts), **parts}


def fit_data_fingerprint(
    datamodule: Any, train_loader: Any, val_loader: Any
) -> dict[str, Any] | None:
    """The data's fingerprint as a Lightning ``trainer.fit`` is given it: a data module (by its
    class), or its loaders' datasets (None where no training loader is given)."""
    if datamodule is not None:
        return data_fingerprint(datamodule)
    train = getattr(train_loader, "dataset", None)
    if train is None:
        return None
    return data_fingerprint(train, getattr(val_loader, "dataset", None))


def _part_changes(before: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[str]:
    if before == now:
        return []
    if before is None or now is None:
        return ["given" if before is None else "no longer given"]
    out = []
    if before.get("type") != now.get("type"):
        out.append(f"type {before.get('type')} -> {now.get('type')}")
    if before.get("length") != now.get("length"):
        n0, n1 = before.get("length"), now.get("length")
        out.append(f"length {n0 if n0 is None else f'{n0:,}'} -> {n1 if n1 is None else f'{n1:,}'}")
    s0, s1 = before.get("structure"), now.get("structure")
    if s0 is not None and s1 is not None and s0 != s1:
        first = next((i for i, (a, b) in enumerate(zip(s0, s1, strict=False)) if a != b), None)
        shown = "" if first is None else f": item {first} {_flat(s0[first])} -> {_flat(s1[first])}"
        out.append(f"item structure differs{shown}")
    elif before.get("items") and now.get("items") and before["items"] != now["items"]:
        out.append("its first items' values differ")
    return out or ["its items differ"]


def _flat(structure: Any) -> str:
    text = json.dumps(structure, separators=(", ", ": "))
    return text if len(text) <= 80 else text[:77] + "..."


def data_changes(before: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[str]:
    """What differs from ``before`` to ``now`` ("training set: length 1,797 -> 1,500");
    empty where they are the same data, or either is unknown."""
    if not before or not now or before.get("hash") == now.get("hash"):
        return []
    out = []
    for key, name in (("train", "training set"), ("val", "validation set")):
        out += [f"{name}: {c}" for c in _part_changes(before.get(key), now.get(key))]
    return out or ["its items differ"]


# -- What results and names show ---------------------------------------------------------------


def described(model: Mapping[str, Any] | None, data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fingerprints as a result's ``search`` section names them: each hash and a few
    words (the full lists stay in the study)."""
    out: dict[str, Any] = {"model_fingerprint": None, "data_fingerprint": None}
    if model:
        out["model_fingerprint"] = {
            "hash": model["hash"],
            "type": model.get("type"),
            "modules": len(model.get("modules", {})),
            "parameters": len(model.get("parameters", {})),
            "values": model.get("values"),
        }
    if data:
        out["data_fingerprint"] = {
            "hash": data["hash"],
            **{
                key: None if part is None else {k: part.get(k) for k in ("type", "kind", "length")}
                for key in ("train", "val")
                for part in [data.get(key)]
            },
        }
    return out


def measured_on(search: Mapping[str, Any]) -> str | None:
    """The line a summary names the fingerprints in, from a result's ``search`` section (None
    for a result written before they were)."""
    model, data = search.get("model_fingerprint"), search.get("data_fingerprint")
    if not model and not data:
        return None
    words = []
    if model:
        words.append(
            f"model {model['hash']} ({model.get('type')}: {model.get('modules')} modules, "
            f"{model.get('parameters')} parameter tensors, {model.get('values') or 0:,} values)"
        )
    if data:
        sets = []
        for key, name in (("train", "training set"), ("val", "validation set")):
            part = data.get(key)
            if part:
                n = part.get("length")
                size = "" if n is None else f" of {n:,} items"
                sets.append(f"{name} {part.get('type')}{size}")
        words.append(f"data {data['hash']} ({', '.join(sets)})")
    return "fingerprints: " + "; ".join(words)


def study_suffix(model: Mapping[str, Any] | None, data: Mapping[str, Any] | None) -> str:
    """The part of a default study name that the model and data make: the same model and data
    resume their study, another model or data start their own."""
    key = f"{(model or {}).get('hash')}|{(data or {}).get('hash')}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]

"""Functions by reference: ``module:name`` or ``path/to/file.py:name``.

The CLI names the model and data factories and the hooks this way, and a search publishes its
hooks to the study this way, so every process of a search (trial workers, ``autotune worker``
on other hosts) loads the same functions.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["UnresolvedReference", "load", "reference_of"]

FILE_MODULE_PREFIX = "_autotune_user_"


class UnresolvedReference(Exception):
    """A reference that does not name a callable; the message says what was found."""


def _import_file(path: Path) -> ModuleType:
    name = f"{FILE_MODULE_PREFIX}{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UnresolvedReference(f"cannot import {str(path)!r} as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # lets pickling (DataLoader workers) find its classes
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise UnresolvedReference(
            f"importing {str(path)!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    return module


def load(spec: str) -> Callable[..., Any]:
    """The callable ``spec`` names (``module:name`` or ``file.py:name``, a dotted name for an
    attribute of an attribute)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise UnresolvedReference(
            f"must be MODULE:FUNCTION or path/to/file.py:FUNCTION, but got {spec!r}."
        )
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UnresolvedReference(f"file {target!r} does not exist.")
        module = _import_file(path)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise UnresolvedReference(f"cannot import module {target!r}: {exc}.") from None
    found: Any = module
    for part in name.split("."):
        found = getattr(found, part, None)
        if found is None:
            public = sorted(
                n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))
            )
            raise UnresolvedReference(
                f"{target!r} has no attribute {name!r}. Callables there: "
                f"{', '.join(public[:20]) or 'none'}."
            )
    if not callable(found):
        raise UnresolvedReference(f"{spec!r} is a {type(found).__name__}, not a function.")
    return found  # type: ignore[no-any-return]


def reference_of(fn: Any) -> str | None:
    """The reference that loads ``fn`` again in another process, or None when there is none
    (a lambda, a local function, something defined in ``__main__``)."""
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module_name or not qualname or "<" in qualname or module_name == "__main__":
        return None
    module = sys.modules.get(module_name)
    if module is None:
        return None
    target = module_name
    if module_name.startswith(FILE_MODULE_PREFIX):
        file = getattr(module, "__file__", None)
        if not file:
            return None
        target = str(Path(file).resolve())
    spec = f"{target}:{qualname}"
    try:
        return spec if load(spec) is fn else None
    except UnresolvedReference:
        return None

"""Every function by name, imported on first use (one process may host just one)."""

from __future__ import annotations

import importlib

from modelhooks.delivery.runtime import Function

__all__ = ["NAMES", "load"]

_MODULES = {
    "register": "modelhooks.handlers.register",
    "sign": "modelhooks.handlers.sign",
}
NAMES = tuple(sorted(_MODULES))


def load(name: str) -> Function:
    """The function called `name`; KeyError names the known ones."""
    if name not in _MODULES:
        raise KeyError(f"no function {name!r}; known: {', '.join(NAMES)}")
    fn: Function = importlib.import_module(_MODULES[name]).FUNCTION
    return fn

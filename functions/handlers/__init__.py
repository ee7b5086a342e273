"""The functions: one module per function, each exporting `FUNCTION` (a
`modelhooks.core.function.Function`). The catalog is derived from the modules in this package,
so adding a function is adding its module (and its Trigger in infra/knative/triggers.yaml).

Modules are imported on first use: a process that hosts one function imports only that one.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from modelhooks.core.function import Function

__all__ = ["NAMES", "load"]

NAMES: tuple[str, ...] = tuple(
    sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
)


@cache
def load(name: str) -> Function:
    """The function called `name` (unbound); KeyError names the known ones."""
    if name not in NAMES:
        raise KeyError(f"no function {name!r}; known: {', '.join(NAMES)}")
    fn = importlib.import_module(f"{__name__}.{name}").FUNCTION
    if not isinstance(fn, Function) or fn.name != name:
        raise TypeError(f"{__name__}.{name}.FUNCTION must be the Function named {name!r}")
    return fn

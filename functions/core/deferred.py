"""msgspec's `inspect` module, run when first used rather than when msgspec is imported.

msgspec's package imports `msgspec.inspect` (and `msgspec.json`'s schema module imports it
in turn), which makes some thirty dataclasses: ~1.8 ms of CPU at every start of a process
that imports msgspec, for a module nothing here uses but `make docs`' schemas. Importing this
module before msgspec puts that module in place unexecuted; its code runs, into the same
module object, the first time one of its names is read (PEP 562's module `__getattr__`:
`__spec__` and the other attributes the import system reads are set, so importing it by
name does not run it). A process that imported msgspec already is left as it is.

functions-framework's targets import it first (modelhooks.main): a cold start pays for no
part of msgspec that its deliveries do not use.
"""

from __future__ import annotations

import sys
import threading
from importlib.machinery import PathFinder
from importlib.util import find_spec, module_from_spec
from typing import Any

__all__ = ["NAME"]

NAME = "msgspec.inspect"


def _defer() -> None:
    if "msgspec" in sys.modules:
        return
    package = find_spec("msgspec")  # a top-level package: found, not imported
    if package is None or not package.submodule_search_locations:
        return
    spec = PathFinder.find_spec(NAME, list(package.submodule_search_locations))
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    module = module_from_spec(spec)
    lock = threading.Lock()

    def first_use(name: str) -> Any:
        with lock:
            if vars(module).pop("__getattr__", None) is not None:
                loader.exec_module(module)
        return getattr(module, name)

    module.__getattr__ = first_use  # type: ignore[method-assign]
    sys.modules[NAME] = module


_defer()

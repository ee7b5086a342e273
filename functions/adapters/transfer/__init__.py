"""`transfer`: copy a model between stores (S3, GCS, OCI, http(s) URIs, local/PVC),
streaming, then sign and register it: Kubeflow Model Registry's async-upload job, as a
drop-in (`modelhooks transfer`, its configuration in `modelhooks.adapters.transfer.config`).

>>> from modelhooks.adapters.transfer import resolve, transfer  # doctest: +SKIP
>>> transfer(resolve(sys.argv[1:], os.environ), progress, registry=registry)  # doctest: +SKIP

The names below are imported on first use (PEP 562): the `transfer` function's process
imports the package with `request` at start-up, and its first event is seldom a transfer
(config, with argparse, and run, with the copy's clients and ctypes: ~10 ms of CPU).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelhooks.adapters.transfer.config import TransferConfig, resolve
    from modelhooks.adapters.transfer.run import copy, transfer, write_termination_message

__all__ = ["TransferConfig", "copy", "resolve", "transfer", "write_termination_message"]

_WHERE = {"TransferConfig": "config", "resolve": "config", "copy": "run", "transfer": "run"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE.get(name, 'run')}"), name)

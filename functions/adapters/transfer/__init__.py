"""`transfer`: copy a model between stores (S3, GCS, OCI, http(s) URIs, local/PVC),
streaming, then sign and register it: Kubeflow Model Registry's async-upload job, as a
drop-in (`modelhooks transfer`, its configuration in `modelhooks.adapters.transfer.config`).

>>> from modelhooks.adapters.transfer import resolve, transfer  # doctest: +SKIP
>>> transfer(resolve(sys.argv[1:], os.environ), progress, registry=registry)  # doctest: +SKIP
"""

from __future__ import annotations

from modelhooks.adapters.transfer.config import TransferConfig, resolve
from modelhooks.adapters.transfer.run import copy, transfer, write_termination_message

__all__ = ["TransferConfig", "copy", "resolve", "transfer", "write_termination_message"]

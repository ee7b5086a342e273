"""Canonical requests, as examples loaded by name: commands a user or a platform sends
(`modelhooks replay FILE --to …`, a Pub/Sub publish), not notifications that something
happened.

They are kept apart from events/samples on purpose. Replaying the samples on embedded
defaults (`make run`) acts on every one of them; a request needs what its function is
configured with (a transfer: the credentials of its stores, `MODEL_SYNC_*`).

>>> load("transfer-requested")["type"]
'dev.modelhooks.transfer.requested'
"""

from __future__ import annotations

from modelhooks.events.samples import Folder

__all__ = ["body", "inbound", "load", "names"]

_requests = Folder(__package__)
names, body, load, inbound = _requests.names, _requests.body, _requests.load, _requests.inbound

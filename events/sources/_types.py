"""The CloudEvent types `translate` dispatches on by name, kept apart from their translators
so it tells them apart before importing one: each translator module is imported when a
delivery first needs it (a process fed GCS events never imports the OCI ones)."""

from __future__ import annotations

__all__ = [
    "APISERVER_TYPE_PREFIX",
    "CANONICAL_TYPE_PREFIX",
    "EVENTARC_TYPE_PREFIX",
    "PING_TYPE",
    "ZOT_TYPE_PREFIX",
]

CANONICAL_TYPE_PREFIX = "dev.modelhooks."
EVENTARC_TYPE_PREFIX = "google.cloud.storage.object.v1."
APISERVER_TYPE_PREFIX = "dev.knative.apiserver."
ZOT_TYPE_PREFIX = "zotregistry."
PING_TYPE = "dev.knative.sources.ping"

"""Recorded, real-shaped upstream deliveries, loaded by name.

Each `<source>-<case>.json` is an HTTP body as the upstream delivers it: a structured
CloudEvent for CloudEvent producers (Eventarc, ApiServerSource, zot, our own), a Pub/Sub
push envelope for Pub/Sub producers (Cloud Storage notifications, Artifact Registry
`gcr`), the raw body for native webhooks (S3/MinIO, distribution). Object-store samples
use bucket `models` and the default layout (`models/{name}/{version}/` + `_SUCCESS`);
most name model `sentiment`, version `1`.

>>> "s3-minio-put-marker" in names()
True
>>> load("oci-distribution-push")["events"][0]["target"]["tag"]
'1'
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from modelhooks.events.inbound import Inbound
from modelhooks.events.ingress import decode

__all__ = ["Folder", "body", "inbound", "load", "names"]

_SUFFIX = ".json"


class Folder:
    """The JSON documents of one package folder, by name."""

    def __init__(self, package: str) -> None:
        self.package = package

    def names(self) -> list[str]:
        """Every document's name (its file name without `.json`), sorted."""
        return sorted(
            entry.name.removesuffix(_SUFFIX)
            for entry in files(self.package).iterdir()
            if entry.name.endswith(_SUFFIX)
        )

    def body(self, name: str) -> bytes:
        """A document's bytes, exactly as they would arrive over HTTP."""
        entry = files(self.package).joinpath(name + _SUFFIX)
        if not entry.is_file():
            raise KeyError(f"no sample named {name!r}; known: {', '.join(self.names())}")
        return entry.read_bytes()

    def load(self, name: str) -> Any:
        """A document, parsed."""
        return json.loads(self.body(name))

    def inbound(self, name: str) -> Inbound:
        """The one `Inbound` ingress decodes a document to (structured CloudEvents are sent
        as `application/cloudevents+json`, everything else as `application/json`)."""
        raw = self.body(name)
        structured = isinstance(doc := json.loads(raw), dict) and "specversion" in doc
        ctype = "application/cloudevents+json" if structured else "application/json"
        (unit,) = decode({"content-type": ctype}, raw)
        return unit


_samples = Folder(__package__)
names, body, load, inbound = _samples.names, _samples.body, _samples.load, _samples.inbound

"""The content digest of an object-store model: what a version IS, whatever marks it ready.

    sha256 over the lines  "<relative path>\\t<size>\\t<checksum>\\n"  of every object under
    the version's prefix, sorted by path, except the ready marker and the signature;

where the checksum is the store's own content checksum (GCS md5 or crc32c, S3 ETag) and, on
the embedded local store (which keeps none), the file's modification time and size. So
re-marking unchanged content (a second `_SUCCESS`, a re-upload of the marker) gives the
same digest and registers nothing new, while changed content gives another digest (a
Conflict for a version already registered). It is computed once, at ingress, from one
listing, and carried by the event: every function sees the same value.

>>> from modelhooks.core.records import ObjectInfo
>>> content_digest([ObjectInfo("b", "m/1/w.bin", 3, "g1", checksum="md5:x")], "m/1/", set())
'content-sha256:...'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from itertools import islice

import msgspec

from modelhooks.core.errors import BadRequest, NotFound
from modelhooks.core.function import Skip
from modelhooks.core.records import ObjectInfo
from modelhooks.core.stores import Stores
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import ArtifactPushed, CanonicalEvent

__all__ = ["MARKER_LABEL", "MAX_OBJECTS", "PREFIX", "ContentResolver", "content_digest"]

PREFIX = "content-sha256:"
MARKER_LABEL = "modelhooks.dev/marker"  # the ready marker's own identity, kept for tracing
# Objects one model version may hold (admission reads no more of one): a push naming a whole
# bucket or a data lake's prefix had every object listed and held within one delivery
# (300,000: 2 s and 100 MB; ten million: minutes and gigabytes)
MAX_OBJECTS = 100_000


def content_digest(objects: Iterable[ObjectInfo], prefix: str, exclude: set[str]) -> str:
    """The digest of the objects under `prefix`, leaving out the names in `exclude`
    (relative to the prefix: the ready marker, the signature); "" when nothing is left, for
    nothing is not a model. The prefix is a folder, named with its slash or without: a
    listing of `m/1` holds `m/10/…` too, which is another version (sign, listing `m/1/`,
    found other content than the push named, a Conflict), and its names were `/w.bin`, so
    the signature was not left out."""
    folder = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    lines = []
    for info in objects:
        if info.key.startswith(folder):
            rel = info.key[len(folder) :]
        elif info.key == prefix:  # the prefix names one object
            rel = ""
        else:
            continue  # a sibling: `m/10/…` under `m/1`
        if rel in exclude:
            continue
        lines.append(f"{rel}\t{info.size}\t{info.checksum or info.generation}\n")
    if not lines:
        return ""
    h = hashlib.sha256("".join(sorted(lines)).encode("utf-8", "surrogateescape"))
    return PREFIX + h.hexdigest()


class ContentResolver(msgspec.Struct, frozen=True):
    """Gives an object-store push its content digest (an OCI push is named by its manifest
    digest already). `exclude`: the ready marker's and the signature's names. A push its
    tenant may not act on (`tenancy`) is Forbidden before the store is read: a tenant's
    route named a prefix in another tenant's bucket, it was listed, and the answer told what
    that bucket holds (skipped when empty, refused when not)."""

    stores: Stores
    exclude: frozenset[str]
    tenancy: Tenancy = Tenancy()

    def __call__(self, event: CanonicalEvent) -> CanonicalEvent:
        data = event.data
        if not isinstance(data, ArtifactPushed) or data.store == "oci":
            return event
        if data.digest.startswith(PREFIX):
            return event  # named by its content already (an event from the broker)
        self.tenancy.admit(event)  # checked only: each function admits it again, as ever
        digest = self._digest(data.uri)
        if not digest:
            raise Skip(
                f"nothing under {data.uri} but the ready marker, if that: not a model "
                "(an upload aborted and cleaned up, or a redelivery after deletion)"
            )
        labels = {**data.labels, MARKER_LABEL: data.digest}
        return event.replace(data=data.replace(digest=digest, labels=labels))

    def digest_of(self, uri: str) -> str:
        """The content digest of the version under the prefix `uri` names (one listing), as
        a push's would be; NotFound when nothing is there yet."""
        digest = self._digest(uri)
        if not digest:
            raise NotFound(f"nothing under {uri}: push the model first", uri=uri)
        return digest

    def _digest(self, uri: str) -> str:
        """content_digest of the listing under `uri`, read no further than MAX_OBJECTS:
        BadRequest past them."""
        store, bucket, prefix = self.stores.resolve(uri)
        listing = list(islice(store.list(bucket, prefix), MAX_OBJECTS + 1))
        if len(listing) > MAX_OBJECTS:
            raise BadRequest(
                f"{uri} holds more than {MAX_OBJECTS} objects: not one model version",
                uri=uri,
                limit=MAX_OBJECTS,
            )
        return content_digest(listing, prefix, set(self.exclude))

"""The binding statement: a model's signed manifest bound to the immutable identity of each of
its objects, so a verifier decides an object-store model with ONE listing, not by re-hashing.

`sign` hashes the model between two listings of its prefix (equal, or the model changed
while it was hashed: retried), then writes `<prefix>/<signature>.binding` (`model.sig.binding`
next to `model.sig`): an in-toto Statement whose subject is the manifest's root digest and
whose predicate lists every signed object with its size and generation (GCS generation, S3
versionId or ETag, the local store's modification time and size), signed by the same signer.
The binding's name is in the signature's ignore_paths, so `model_signing verify` (which
honours them) still accepts the signature.

A verifier checks both bundles with the same trust, that the binding is for the signature's
root digest and names exactly its files, and then one listing: an object added, removed,
resized or rewritten (new generation) since signing is named.

>>> binding_key("models/bert/1/model.sig")
'models/bert/1/model.sig.binding'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from modelhooks.adapters.signing import SUFFIX, binding_key
from modelhooks.adapters.signing.manifest import (
    STATEMENT_TYPE,
    Manifest,
    indented_json,
    is_ignored,
)
from modelhooks.core.errors import VerificationFailed

if TYPE_CHECKING:
    from modelhooks.core.records import ObjectInfo

__all__ = ["PREDICATE_TYPE", "SUFFIX", "Binding", "binding_key", "changes"]

PREDICATE_TYPE = "https://modelhooks.dev/binding/v1"


class Binding(msgspec.Struct, frozen=True):
    """The root digest of a signed manifest and (size, generation) of each of its objects."""

    root_digest: str
    objects: Mapping[str, tuple[int, str]]

    @classmethod
    def of(cls, manifest: Manifest, files: Sequence[tuple[str, ObjectInfo]]) -> Binding:
        return cls(manifest.root_digest, {name: (i.size, i.generation) for name, i in files})

    def statement(self, model_name: str) -> bytes:
        body = {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": model_name, "digest": {"sha256": self.root_digest}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "objects": [
                    {"name": name, "size": size, "generation": generation}
                    for name, (size, generation) in sorted(self.objects.items())
                ]
            },
        }
        return indented_json(body)

    @classmethod
    def from_statement(cls, payload: bytes) -> Binding:
        try:
            body = json.loads(payload)
            if body.get("predicateType") != PREDICATE_TYPE:
                raise VerificationFailed("not a modelhooks binding statement")
            (subject,) = body["subject"]
            objects = {
                str(o["name"]): (int(o["size"]), str(o["generation"]))
                for o in body["predicate"]["objects"]
            }
            return cls(str(subject["digest"]["sha256"]).lower(), objects)
        except VerificationFailed:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise VerificationFailed("malformed binding statement", reason=str(e)) from e


def changes(bound: Binding, listing: Mapping[str, ObjectInfo], ignored: Sequence[str]) -> list[str]:
    """What differs between the objects bound at signing and `listing` (model-relative
    names → what the store holds now), each named; empty when nothing changed."""
    found: list[str] = []
    for name, (size, generation) in sorted(bound.objects.items()):
        info = listing.get(name)
        if info is None:
            found.append(f"{name} was deleted")
        elif info.size != size or info.generation != generation:
            found.append(
                f"{name} was rewritten (size {size} → {info.size}, generation "
                f"{generation} → {info.generation})"
            )
    for name in sorted(set(listing) - set(bound.objects)):
        if not is_ignored(name, ignored) and not name.endswith("/"):
            found.append(f"{name} was added")
    return found

"""The models a workload uses, read from the object an AdmissionReview carries (pure).

A workload names a model by:
- an OCI image volume (KEP-4639): `volumes[].image.reference` of its pod spec;
- a KServe `storageUri` / `storageUris` anywhere in an InferenceService's spec
  (`oci://`, `gs://`, `s3://`), or its `storage` (a key and path in KServe's storage-config
  secret: `kserve-storage:<key>/<path>`, which cannot be verified at admission), and the
  `spec.model.storageUri` of a KServe TrainedModel (a model loaded into a running
  multi-model InferenceService);
- the annotation `modelhooks.dev/model: <name>[/<version>]` (a registered model), on the
  object or its pod template;
- a Model (modelhooks.dev) by its `spec.source` (oci reference, gcs or s3 uri): checked to
  exist when it is created (and its tag pinned), not verified: it is signed after.

Pods, and the pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and
CronJobs, are read; any other kind uses no model (it is out of scope). Each reference
carries the JSON pointer it was found at, so a mutating answer can pin it in place.

>>> pod = {"spec": {"volumes": [{"name": "m", "image": {"reference": "r.io/m/bert:v1"}}]}}
>>> [r.uri for r in model_references("Pod", pod)]
['oci://r.io/m/bert:v1']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import msgspec

from modelhooks.core.errors import BadRequest

__all__ = [
    "MODEL",
    "MODEL_ANNOTATION",
    "POD_SPECS",
    "Reference",
    "image_uri",
    "in_scope",
    "model_references",
]

MODEL_ANNOTATION = "modelhooks.dev/model"

# Where each workload kind keeps its pod spec (JSON pointer segments).
POD_SPECS: Mapping[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
INFERENCE_SERVICE = "InferenceService"
# a model KServe's agent loads into a running (multi-model) InferenceService: spec.model.storageUri
TRAINED_MODEL = "TrainedModel"
MODEL = "Model"
_MAX_DEPTH = 12  # how deep an InferenceService's spec is searched for storageUri
_MAX_REFERENCES = 64  # more distinct references in one object is refused, not verified
# more references in all (one model in many volumes) is refused too: each image volume a
# verifyOn: node policy covers gets an init container carrying the policies' trust (with a
# private Sigstore's trusted root, ~10 KB): a 2.7 MB Pod of 20,000 volumes was a 173 MB patch
_MAX_MENTIONS = 256

Source = Literal["image-volume", "storageUri", "annotation", "model-source"]


# frozen msgspec Structs, not dataclasses: making a Struct class costs ~2 % of a dataclass's
class Reference(msgspec.Struct, frozen=True):
    """One model reference: `uri` as verified (`oci://…`, `gs://…`, `s3://…`, or
    `model:<name>[/<version>]`), `pointer` where it sits in the object (RFC 6901), `raw` as
    written there."""

    uri: str
    source: Source
    pointer: str
    raw: str


def in_scope(kind: str) -> bool:
    return kind in POD_SPECS or kind in (INFERENCE_SERVICE, TRAINED_MODEL, MODEL)


def model_references(kind: str, obj: Mapping[str, Any]) -> list[Reference]:
    """Every model reference of `obj` (a `kind`), in document order; BadRequest naming the
    field when the object is not shaped as its kind says."""
    if not isinstance(obj, Mapping):
        raise BadRequest(f"the {kind} is not an object")
    refs = list(_annotation(obj, ()))
    if kind in POD_SPECS:
        path = POD_SPECS[kind]
        if len(path) > 2:
            refs += _annotation(_at(obj, path[:-1]) or {}, path[:-1])
        refs += _image_volumes(_at(obj, path) or {}, path)
    elif kind in (INFERENCE_SERVICE, TRAINED_MODEL):
        refs += _storage_uris(obj.get("spec") or {}, ("spec",), 0)
    elif kind == MODEL:
        refs = list(_model_source(_at(obj, ("spec", "source")) or {}))
    if len({r.uri for r in refs}) > _MAX_REFERENCES:
        raise BadRequest(f"the {kind} names more than {_MAX_REFERENCES} models")
    if len(refs) > _MAX_MENTIONS:
        raise BadRequest(
            f"the {kind} names models {len(refs)} times (volumes, storageUris, annotations): "
            f"more than {_MAX_MENTIONS}"
        )
    return refs


def image_uri(reference: str) -> str:
    """An image reference as an `oci://` URI; Docker Hub's short names get their host."""
    first, sep, _ = reference.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        reference = f"docker.io/{reference if sep else 'library/' + reference}"
    return f"oci://{reference}"


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            raise BadRequest(f"{'.'.join(path)}: expected an object", field=".".join(path))
        obj = obj.get(key)
        if obj is None:
            return None
    if not isinstance(obj, Mapping):
        raise BadRequest(f"{'.'.join(path)}: expected an object", field=".".join(path))
    return obj


def _pointer(path: tuple[str | int, ...]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _text(value: Any, where: tuple[str | int, ...]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{_pointer(where)}: expected a non-empty string", field=_pointer(where))
    return value.strip()


def _annotation(obj: Mapping[str, Any], base: tuple[str, ...]) -> Iterator[Reference]:
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping) or MODEL_ANNOTATION not in annotations:
        return
    where = (*base, "metadata", "annotations", MODEL_ANNOTATION)
    raw = _text(annotations[MODEL_ANNOTATION], where)
    name, _, version = raw.partition("/")
    if not name or "/" in version or any(c.isspace() for c in raw):
        raise BadRequest(
            f"annotation {MODEL_ANNOTATION}: {raw!r} is not <name>[/<version>]",
            field=MODEL_ANNOTATION,
        )
    yield Reference(f"model:{raw}", "annotation", _pointer(where), raw)


def _image_volumes(spec: Mapping[str, Any], base: tuple[str, ...]) -> Iterator[Reference]:
    volumes = spec.get("volumes") or []
    if not isinstance(volumes, list):
        raise BadRequest(f"{_pointer((*base, 'volumes'))}: expected a list")
    for i, volume in enumerate(volumes):
        image = volume.get("image") if isinstance(volume, Mapping) else None
        if image is None:
            continue
        where: tuple[str | int, ...] = (*base, "volumes", i, "image", "reference")
        if not isinstance(image, Mapping):
            raise BadRequest(f"{_pointer(where[:-1])}: expected an object")
        raw = _text(image.get("reference"), where)
        yield Reference(image_uri(raw), "image-volume", _pointer(where), raw)


def _storage_uris(node: Any, base: tuple[str | int, ...], depth: int) -> Iterator[Reference]:
    if depth > _MAX_DEPTH:
        return
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _storage_uris(item, (*base, i), depth + 1)
        return
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        where: tuple[str | int, ...] = (*base, str(key))
        if key == "storageUri":
            raw = _text(value, where)
            yield Reference(_storage(raw, where), "storageUri", _pointer(where), raw)
        elif (
            key == "storage" and isinstance(value, Mapping) and ("path" in value or "key" in value)
        ):
            # KServe's StorageSpec (ModelMesh's way): a path in a storage the storage-config
            # secret names, which admission cannot see; a reference all the same, so that it is
            # denied as one that cannot be verified (or warned of), never admitted unseen
            raw = f"{value.get('key') or ''}/{value.get('path') or ''}"
            uri = f"kserve-storage:{raw}"
            yield Reference(uri, "storageUri", _pointer(where), raw)
        elif key == "storageUris":
            if not isinstance(value, list):
                raise BadRequest(f"{_pointer(where)}: expected a list")
            for i, item in enumerate(value):
                at: tuple[str | int, ...] = (
                    (*where, i, "uri") if isinstance(item, Mapping) else (*where, i)
                )
                raw = _text(item.get("uri") if isinstance(item, Mapping) else item, at)
                yield Reference(_storage(raw, at), "storageUri", _pointer(at), raw)
        else:
            yield from _storage_uris(value, where, depth + 1)


def _model_source(source: Mapping[str, Any]) -> Iterator[Reference]:
    base = ("spec", "source")
    oci = source.get("oci")
    if isinstance(oci, Mapping):
        where: tuple[str | int, ...] = (*base, "oci", "reference")
        raw = _text(oci.get("reference"), where)
        uri = raw if raw.startswith("oci://") else image_uri(raw)
        yield Reference(uri, "model-source", _pointer(where), raw)
    for store in ("gcs", "s3"):
        found = source.get(store)
        if isinstance(found, Mapping):
            where = (*base, store, "uri")
            raw = _text(found.get("uri"), where)
            yield Reference(_storage(raw, where), "model-source", _pointer(where), raw)


def _storage(raw: str, where: tuple[str | int, ...]) -> str:
    scheme, sep, rest = raw.partition("://")
    if not sep or not rest:
        raise BadRequest(f"{_pointer(where)}: {raw!r} is not a URI", field=_pointer(where))
    return f"{scheme.lower()}://{rest}"

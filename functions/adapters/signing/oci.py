"""Models stored as OCI artifacts (ORAS-style: one layer per file, named by its
`org.opencontainers.image.title` annotation), signed where they lie.

The files are hashed through ranged blob GETs (the same streaming as buckets); the bundle is
pushed as a referrer: an artifact manifest (artifactType = the bundle media type) whose
`subject` is the model manifest. Registries without the referrers API (distribution 2.8)
get the fallback tag scheme: an image index tagged `sha256-<hex>` listing the referrers.

>>> client = DistributionRegistry("http://127.0.0.1:5000")  # doctest: +SKIP
>>> sign_oci(client, "models/bert", "v1", KeySigner.from_file(key))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from modelhooks.adapters.oci.distribution import (
    EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    TITLE,
    DistributionRegistry,
    digest_of,
)
from modelhooks.adapters.signing.bundle import MEDIA_TYPE, signer_of, unverified_payload
from modelhooks.adapters.signing.manifest import Manifest, Serialization
from modelhooks.adapters.signing.model import Signed, Verified, verify_bundle
from modelhooks.adapters.signing.streaming import HashOptions, hash_model
from modelhooks.core.errors import (
    BadRequest,
    NotFound,
    VerificationFailed,
)
from modelhooks.core.extras import require
from modelhooks.core.ports import Signer, Verifier
from modelhooks.core.records import ObjectInfo

__all__ = ["OciModelStore", "sign_oci", "unsign_oci", "verify_oci"]


class OciModelStore:
    """A read-only ObjectStore view of model manifests: bucket = `repo@digest` (immutable,
    so its layer list is fetched once), keys = layer titles, bytes = blob ranges."""

    def __init__(self, client: DistributionRegistry) -> None:
        self._client = client
        self._layers_of: dict[str, dict[str, ObjectInfo]] = {}

    def _layers(self, bucket: str) -> dict[str, ObjectInfo]:
        if bucket not in self._layers_of:
            repo, _, digest = bucket.partition("@")
            manifest, _, _ = self._client.manifest(repo, digest)
            self._layers_of[bucket] = {
                layer["annotations"][TITLE]: ObjectInfo(
                    bucket, layer["annotations"][TITLE], int(layer["size"]), str(layer["digest"])
                )
                for layer in manifest.get("layers", [])
                if layer.get("annotations", {}).get(TITLE)
            }
        return self._layers_of[bucket]

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        return self._layers(bucket).get(key)

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        for key, info in sorted(self._layers(bucket).items()):
            if key.startswith(prefix):
                yield info

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        info = self.stat(bucket, key)
        if info is None:
            raise NotFound(f"no layer titled {key!r} in {bucket}")
        return self._client.blob_range(bucket.partition("@")[0], info.generation, start, length)

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[bytes]:
        info = self.stat(bucket, key)
        if info is None:
            raise NotFound(f"no layer titled {key!r} in {bucket}")
        repo = bucket.partition("@")[0]
        yield from self._client.blob_chunks(repo, info.generation, start, length, chunk_size)

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        raise BadRequest("an OCI model is immutable: signatures are pushed as referrers")

    def delete(self, bucket: str, key: str) -> None:
        raise BadRequest("an OCI model is immutable")


def _hash(
    client: DistributionRegistry,
    repo: str,
    ref: str,
    serialization: Serialization,
    opts: HashOptions,
) -> tuple[Manifest, str, int]:
    _, digest, size = client.manifest(repo, ref)
    store = OciModelStore(client)
    manifest = hash_model(store, f"{repo}@{digest}", "", serialization, options=opts)
    return _rename(manifest, repo), digest, size


def _rename(manifest: Manifest, repo: str) -> Manifest:
    return Manifest(repo.rsplit("/", 1)[-1], manifest.serialization, manifest.resources)


def _bundles(client: DistributionRegistry, repo: str, digest: str) -> Iterator[tuple[str, bytes]]:
    """(referrer manifest digest, bundle) of every signature referring to `digest`."""
    for ref in client.referrers(repo, digest):
        if ref.get("artifactType") != MEDIA_TYPE:
            continue
        artifact, _, _ = client.manifest(repo, ref["digest"])
        for layer in artifact.get("layers", []):
            if layer.get("mediaType") == MEDIA_TYPE:
                yield ref["digest"], client.blob_range(repo, layer["digest"], 0, int(layer["size"]))


def sign_oci(
    client: DistributionRegistry,
    repo: str,
    ref: str,
    signer: Signer,
    *,
    options: HashOptions | None = None,
) -> Signed:
    """Sign the model at `repo:ref` (tag or digest) and push the bundle as its referrer.
    Idempotent: this signer's existing referrer bundle over the same root digest is kept
    (other signers' referrers are left alone: a model may carry several signatures)."""
    require("signing", "signing models")  # before hashing: the bundle needs its libraries
    opts = options or HashOptions()
    manifest, digest, size = _hash(client, repo, ref, opts.serialization(), opts)
    if not manifest.resources:  # a signature over nothing would "verify" forever
        raise BadRequest(f"{repo}:{ref} has no titled layers: nothing to sign", repo=repo)
    for referrer, old in _bundles(client, repo, digest):
        try:
            claimed = Manifest.from_statement(unverified_payload(old)[1]).root_digest
        except VerificationFailed:
            continue
        if claimed == manifest.root_digest and signer.signed(old):
            return Signed(repo, referrer, claimed, signer_of(old), False, manifest)
    bundle = signer.sign(manifest.statement())
    config = {**EMPTY, "digest": client.push_blob(repo, b"{}")}
    layer = {"mediaType": MEDIA_TYPE, "digest": client.push_blob(repo, bundle), "size": len(bundle)}
    subject = {"mediaType": OCI_MANIFEST, "digest": digest, "size": size}
    artifact = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": MEDIA_TYPE,
        "config": config,
        "layers": [layer],
        "subject": subject,
        "annotations": {"dev.modelhooks.root_digest": f"sha256:{manifest.root_digest}"},
    }
    api = client.has_referrers_api(repo, digest)
    pushed = client.push_manifest(
        repo, digest_of(json.dumps(artifact, separators=(",", ":")).encode()), artifact
    )
    if not api:
        _add_to_fallback_index(client, repo, digest, pushed, artifact)
    return Signed(repo, pushed, manifest.root_digest, signer.identity(), True, manifest)


def _add_to_fallback_index(
    client: DistributionRegistry, repo: str, subject: str, pushed: str, artifact: dict[str, Any]
) -> None:
    tag = subject.replace(":", "-")
    try:
        index, _, _ = client.manifest(repo, tag)
    except NotFound:
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    data = json.dumps(artifact, separators=(",", ":")).encode()
    entry = {
        "mediaType": OCI_MANIFEST,
        "digest": pushed,
        "size": len(data),
        "artifactType": MEDIA_TYPE,
        "annotations": artifact["annotations"],
    }
    if all(m.get("digest") != pushed for m in index["manifests"]):
        index["manifests"].append(entry)
        client.push_manifest(repo, tag, index)


def unsign_oci(client: DistributionRegistry, repo: str, subject: str, referrer: str) -> None:
    """Take back a signature `sign_oci` pushed (`referrer`, of the manifest `subject`): out
    of the fallback index first (a reader never finds an entry naming nothing), then the
    referrer manifest. What is gone already is fine."""
    tag = subject.replace(":", "-")
    try:
        index, _, _ = client.manifest(repo, tag)
    except NotFound:
        index = None
    if index is not None and any(m.get("digest") == referrer for m in index["manifests"]):
        left = [m for m in index["manifests"] if m.get("digest") != referrer]
        client.push_manifest(repo, tag, {**index, "manifests": left})
    client.delete_manifests(repo, [referrer])


def verify_oci(
    client: DistributionRegistry,
    repo: str,
    ref: str,
    verifier: Verifier,
    *,
    options: HashOptions | None = None,
    expected_digest: str | None = None,
) -> Verified:
    """Verify the model at `repo:ref` against its referrer bundles: the first bundle the
    verifier trusts must match the model's files."""
    opts = options or HashOptions()
    _, digest, _ = client.manifest(repo, ref)
    errors: list[str] = []
    for _, bundle in _bundles(client, repo, digest):
        try:
            expected = verify_bundle(bundle, verifier, expected_digest=expected_digest)
        except VerificationFailed as e:
            errors.append(f"{e.message}: {e.details.get('reason', '')}".rstrip(": "))
            continue
        actual, _, _ = _hash(client, repo, digest, expected.serialization, opts)
        diff = {k: v for k, v in expected.diff(actual).items() if v}
        if diff:
            names = ", ".join(sorted({n for v in diff.values() for n in v}))
            raise VerificationFailed(f"the model does not match its signature: {names}", **diff)
        return Verified(expected.root_digest, signer_of(bundle), expected)
    raise VerificationFailed(
        "no trusted signature among the model's referrers", manifest=digest, errors=errors
    )

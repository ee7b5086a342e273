"""The ModelVerifier port for admission: decide a model from its signature and the digests
its store already holds, never by re-hashing it (a webhook has seconds, not minutes).

OCI: the manifest is fetched by its digest (checked against the bytes), its signature
bundles are its referrers (pushed by `sign`, `modelhooks sign oci://…`), a bundle counts
when the policy trusts its signer AND the files it signs are exactly the manifest's layers:
each signed file digest is the layer's content address (sha256, `files` serialization). A
signature over another digest or another model is refused, naming what differs.

Object stores (gs://, s3://, file://): ONE listing of the prefix (it must hold objects: a
Model's check-if-exists); the signature (`model.sig`) and its binding statement
(`model.sig.binding`, modelhooks.adapters.signing.binding) verified with the same trust; the
bound objects must be exactly the signed files, and the listing must show each with the
size and generation it had when it was signed: anything added, deleted or rewritten since
is named.

>>> verifier = StoreModelVerifier(OciClients())  # doctest: +SKIP
>>> verifier.verify("oci://r.io/models/bert:v1", verifier.resolve(uri), policy)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import TITLE, DistributionRegistry
from modelhooks.adapters.signing.binding import Binding, binding_key, changes
from modelhooks.adapters.signing.bundle import MEDIA_TYPE, signer_of
from modelhooks.adapters.signing.manifest import DEFAULT_IGNORED, Manifest
from modelhooks.adapters.signing.model import verify_bundle
from modelhooks.adapters.signing.policy_trust import verifiers_for
from modelhooks.adapters.signing.streaming import read_object
from modelhooks.core.errors import NotFound, VerificationFailed
from modelhooks.core.ports import Verifier
from modelhooks.core.records import ObjectInfo
from modelhooks.core.stores import Stores
from modelhooks.core.verification import Policy
from modelhooks.events.model import is_pullable_digest

__all__ = ["StoreModelVerifier"]

_MAX_BUNDLES = 16  # signatures looked at per manifest
_MAX_BUNDLE_BYTES = 1 << 20
_MAX_OBJECTS = 100_000  # objects one listing of a model prefix may hold


class StoreModelVerifier:
    def __init__(
        self,
        oci: OciClients,
        stores: Stores | None = None,
        *,
        trust_config: str = "",
        signature_name: str = "model.sig",
    ) -> None:
        self._oci = oci
        self._stores = stores
        self._signature_name = signature_name
        self._listings: OrderedDict[tuple[str, str], dict[str, ObjectInfo]] = OrderedDict()
        self._trust_config = trust_config
        self._verifiers: OrderedDict[str, list[Verifier]] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, uri: str) -> str:
        if not uri.startswith("oci://"):
            return self._listing(uri)
        client, repo, ref = self._oci.for_uri(uri)
        if is_pullable_digest(ref):
            if ref.startswith("sha256:"):
                return ref
            # sha512: containerd pulls by it and checks it; what sha256 digest it names would
            # be the registry's word, which any registry may give for a signed model's
            raise VerificationFailed(
                f"{uri}: a {ref.partition(':')[0]} digest cannot be verified (signatures name "
                "sha256 digests); pin it by its sha256 digest"
            )
        digest = client.resolve(repo, ref)
        if digest is None:
            raise NotFound(f"{uri}: no such tag (push the model first)")
        return digest

    def _listing(self, uri: str) -> str:
        """An object-store model's identity now: ONE listing of its prefix (names, sizes,
        generations), kept for `verify`; NotFound when it holds nothing."""
        if self._stores is None:
            raise VerificationFailed(f"{uri}: no object stores configured")
        self._stores.check_host(uri)
        store, bucket, prefix = self._stores.resolve(uri)
        root = prefix.strip("/") + "/" if prefix.strip("/") else ""
        listing: dict[str, ObjectInfo] = {}
        digest = hashlib.sha256()
        for info in store.list(bucket, root):
            listing[info.key[len(root) :]] = info
            digest.update(f"{info.key}\0{info.size}\0{info.generation}\n".encode())
            if len(listing) > _MAX_OBJECTS:
                raise VerificationFailed(f"{uri} holds more than {_MAX_OBJECTS} objects")
        if not listing:
            raise NotFound(f"{uri} holds no objects (push the model first)")
        identity = f"listing:sha256:{digest.hexdigest()}"
        with self._lock:
            self._listings[(uri, identity)] = listing
            while len(self._listings) > 64:
                self._listings.popitem(last=False)
        return identity

    def verify(self, uri: str, digest: str, policy: Policy) -> str:
        if not uri.startswith("oci://"):
            return self._verify_objects(uri, digest, policy)
        client, repo, _ = self._oci.for_uri(uri)
        manifest, got, _ = client.manifest(repo, digest)
        if got != digest:
            raise VerificationFailed(f"the registry served {got} for {digest}")
        layers = {
            str(layer["annotations"][TITLE]): str(layer["digest"]).removeprefix("sha256:")
            for layer in manifest.get("layers", [])
            if isinstance(layer, dict) and (layer.get("annotations") or {}).get(TITLE)
        }
        pinned = f"oci://{uri.removeprefix('oci://').partition('/')[0]}/{repo}@{digest}"
        bundles = list(_bundles(client, repo, digest))
        if not bundles:
            raise VerificationFailed(
                f"no signature refers to {digest}: sign it (modelhooks sign {pinned} "
                "--signing-key KEY, or let the sign function sign it when it is pushed)"
            )
        untrusted: list[str] = []
        for bundle in bundles:
            for verifier in self._for(policy):
                try:
                    signed = verify_bundle(bundle, verifier)
                except VerificationFailed:
                    continue
                _covers(signed, layers, signer_of(bundle), pinned)
                return signer_of(bundle)
            untrusted.append(signer_of(bundle))
        raise VerificationFailed(
            f"none of its {len(bundles)} signature(s) is by a signer the policy trusts "
            f"(signed by: {', '.join(sorted(set(untrusted)))}); sign it with a trusted key "
            "or identity, or add the signer to the policy"
        )

    def _verify_objects(self, uri: str, digest: str, policy: Policy) -> str:
        """An object-store model: its signature and binding statement, trusted alike, and
        the listing `resolve` made (no other listing, no hashing)."""
        with self._lock:
            listing = self._listings.get((uri, digest))
        if listing is None or self._stores is None:
            self._listing(uri)  # expired: list again (resolve and verify came apart)
            with self._lock:
                listing = self._listings.get((uri, digest)) or {}
        assert self._stores is not None
        store, bucket, prefix = self._stores.resolve(uri)
        root = prefix.strip("/") + "/" if prefix.strip("/") else ""
        name = self._signature_name
        if name not in listing:
            raise VerificationFailed(
                f"no signature ({name}) under {uri}: sign it (modelhooks sign {uri} "
                "--signing-key KEY, or let the sign function sign it when it is pushed)"
            )
        if binding_key(name) not in listing:
            raise VerificationFailed(
                f"{uri} is signed without a binding of its objects ({binding_key(name)}: "
                "signed by another tool or an older sign), so it cannot be decided without "
                f"re-hashing; re-sign it: modelhooks sign {uri} --replace, or verify it on the node"
            )
        signature = read_object(store, bucket, root + name, limit=_MAX_BUNDLE_BYTES)
        binding = read_object(store, bucket, root + binding_key(name), limit=_MAX_BUNDLE_BYTES)
        for verifier in self._for(policy):
            try:
                signed = verify_bundle(signature, verifier)
            except VerificationFailed:
                continue
            bound = Binding.from_statement(verifier.verify(binding))
            signer = signer_of(signature)
            if bound.root_digest != signed.root_digest or set(bound.objects) != signed.paths:
                raise VerificationFailed(
                    f"the binding next to {name} under {uri} is not for its signature "
                    f"(by {signer}); re-sign it: modelhooks sign {uri} --replace"
                )
            ignored = (*signed.serialization.ignore_paths, *DEFAULT_IGNORED)
            changed = changes(bound, listing, ignored)
            if changed:
                raise VerificationFailed(
                    f"{uri} changed since it was signed by {signer}: {'; '.join(changed[:5])}; "
                    f"restore it, or sign the new content: modelhooks sign {uri} --replace"
                )
            return signer
        raise VerificationFailed(
            f"its signature is not by a signer the policy trusts (signed by: "
            f"{signer_of(signature)}); sign it with a trusted key or identity, or add the "
            "signer to the policy"
        )

    def _for(self, policy: Policy) -> list[Verifier]:
        """The verifiers of what `policy` trusts, built once per policy version."""
        with self._lock:
            if policy.version in self._verifiers:
                self._verifiers.move_to_end(policy.version)
                return self._verifiers[policy.version]
        built = verifiers_for(policy, self._trust_config)
        with self._lock:
            self._verifiers[policy.version] = built
            while len(self._verifiers) > 64:
                self._verifiers.popitem(last=False)
        return built


def _covers(signed: Manifest, layers: dict[str, str], signer: str, pinned: str) -> None:
    """The signed files must be exactly the manifest's layers (their content addresses)."""
    ser = signed.serialization
    if ser.method != "files" or ser.hash_type != "sha256":
        raise VerificationFailed(
            f"the signature by {signer} hashes {ser.method}/{ser.hash_type}: only files/sha256 "
            "digests are the layers' content addresses; re-sign with --hash sha256 (files), "
            "or verify on the node (init container)"
        )
    files = {r.name: r.digest for r in signed.resources}
    missing = sorted(set(files) - set(layers))
    extra = sorted(set(layers) - set(files))
    changed = sorted(n for n in set(files) & set(layers) if files[n] != layers[n])
    if missing or extra or changed:
        what = [
            f"{label}: {', '.join(names[:5])}"
            for label, names in (("changed", changed), ("missing", missing), ("unsigned", extra))
            if names
        ]
        raise VerificationFailed(
            f"the signature by {signer} is for another model than {pinned} ({'; '.join(what)}); "
            f"sign this one: modelhooks sign {pinned}"
        )


def _bundles(client: DistributionRegistry, repo: str, digest: str) -> Iterator[bytes]:
    """The signature bundles referring to `digest` (bounded in number and size)."""
    refs = [r for r in client.referrers(repo, digest) if r.get("artifactType") == MEDIA_TYPE]
    for ref in refs[:_MAX_BUNDLES]:
        artifact, _, _ = client.manifest(repo, ref["digest"])
        if (artifact.get("subject") or {}).get("digest") != digest:
            continue  # a referrer index entry that does not refer to this manifest
        for layer in artifact.get("layers", []):
            size = int(layer.get("size", 0))
            if layer.get("mediaType") == MEDIA_TYPE and 0 < size <= _MAX_BUNDLE_BYTES:
                yield client.blob_range(repo, layer["digest"], 0, size)

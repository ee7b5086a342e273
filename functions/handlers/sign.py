"""`sign`: sign a pushed model where it lies and record the signature in the registry.

On `artifact.pushed` for a model in a bucket (gs://, s3://, file://) or an OCI registry
(oci://): unless the registered version already records a signature for this artifact
digest (and, in a bucket, the binding next to it still names the model's objects as one
listing shows them), hash the model (streamed), write `<prefix>/model.sig` if absent (for
OCI: push the bundle as a referrer of the model manifest), record the signature on the
version (custom properties `signature.*`) and reply `model.signed`. A second delivery
answers the same reply without hashing again; the same bytes uploaded again (a retried
upload: the same content digest, new generations) or a signature removed since are signed
through again, so the binding admission decides by names the objects there now. What is
hashed must be the content the push names (its content digest): other bytes written since
are a Conflict, and nothing is written next to them.

The version must be registered first (events are unordered): until `register` has recorded
this push (its time on the version), this answers Unavailable so the platform redelivers.
Signing off (no signer) → no reply.

A push refused for good (its content written again since: ContentChanged; another signature
where model.sig goes: SignatureExists; the version registered with another digest; a
location its namespace's tenancy refuses; nothing to sign) is told, not only dead-lettered:
`refused` answers it with a `model.refused` (`function: sign`) that says why, so notify sets
Signed False on the Model of that name, version and location. What a retry may fix (a
backend down, credentials refused, throttled, the version not registered yet) stays a
5xx/429, redelivered, and tells nothing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing.streaming import HashOptions
from modelhooks.core.content import PREFIX as CONTENT
from modelhooks.core.content import content_digest
from modelhooks.core.errors import Conflict, ContentChanged, Permanent, Unavailable
from modelhooks.core.function import Function, Skip
from modelhooks.core.records import PUSHED_AT, ModelState, ModelVersion, stamp
from modelhooks.core.stores import Stores
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelRefused, ModelSigned

if TYPE_CHECKING:  # the ports' Protocols: type hints only (test_cold_start)
    from modelhooks.core.ports import ModelRegistry, Signer
    from modelhooks.core.records import ObjectInfo

__all__ = ["FUNCTION", "SIGNATURE_PROPERTIES", "refused", "sign_artifact"]

_log = logging.getLogger("modelhooks.sign")

SIGNATURE_PROPERTIES = (
    "signature.uri",
    "signature.root_digest",
    "signature.signer",
    "signature.artifact_digest",
)


def handle(
    event: CanonicalEvent,
    *,
    stores: Stores,
    oci: OciClients,
    registry: ModelRegistry,
    signer: Signer | None,
    hash_options: HashOptions | None,
) -> list[CanonicalEvent]:
    """`signer` is None when signing is off (see SigningConfig.enabled): then no reply."""
    if not isinstance(event.data, ArtifactPushed):
        return []
    if signer is None:
        raise Skip("signing is off (no key, certificate or Sigstore instance configured)")
    return sign_artifact(
        event,
        event.data,
        stores=stores,
        oci=oci,
        registry=registry,
        signer=signer,
        options=hash_options or HashOptions(),
    )


def sign_artifact(
    event: CanonicalEvent,
    pushed: ArtifactPushed,
    *,
    stores: Stores,
    oci: OciClients,
    registry: ModelRegistry,
    signer: Signer,
    options: HashOptions,
) -> list[CanonicalEvent]:
    if not pushed.uri.startswith(("gs://", "s3://", "file://", "oci://")):
        raise Skip(f"{pushed.uri} is not a model location this function signs")
    version = _registered_version(registry, pushed, stamp(event))
    if version.state != ModelState.LIVE:
        raise Skip("stale push: older than the model's deletion, the version is archived")
    props = version.custom_properties
    if props.get("signature.artifact_digest") == pushed.digest and _still_bound(
        pushed, stores, options
    ):
        return [_reply(event, pushed, props)]  # already signed: same answer, no re-hashing

    if pushed.uri.startswith("oci://"):
        from modelhooks.adapters.signing.oci import sign_oci  # each where it is signed

        stores.check_host(pushed.uri)
        client, repo, ref = oci.for_uri(pushed.uri)
        signed = sign_oci(client, repo, ref, signer, options=options)
        host = pushed.uri.removeprefix("oci://").partition("/")[0]
        location = f"oci://{host}/{repo}@{signed.key}"  # the referrer manifest
        taken_back = partial(_unsign_oci, client, repo, pushed.digest, signed.key)
        undo = [taken_back] if signed.created else []  # the referrer pushed, if archived
    else:
        from modelhooks.adapters.signing.model import sign_model

        store, bucket, prefix = stores.resolve(pushed.uri)
        check = _the_pushed_content(pushed, prefix, options)
        signed = sign_model(store, bucket, prefix, signer, options=options, check=check)
        location = pushed.uri.rstrip("/") + "/" + signed.key.removeprefix(prefix).lstrip("/")
        wrote = ((signed.key, signed.created), (_binding(signed.key), signed.bound))
        # what to remove, if archived: the binding first (it names the signature)
        undo = [partial(store.delete, bucket, key) for key, this in reversed(wrote) if this]
    signature = {
        "signature.uri": location,
        "signature.root_digest": f"sha256:{signed.root_digest}",
        "signature.signer": signed.signer,
        "signature.artifact_digest": pushed.digest,
    }
    # Hashing took a while: write only the signature properties onto the version as it is
    # now (a newer push meanwhile keeps its state), in one transaction.
    with registry.transaction():
        current = _registered_version(registry, pushed)
        if current.state == ModelState.LIVE:
            props = {**current.custom_properties, **signature}
            registry.update_version(msgspec.structs.replace(current, custom_properties=props))
            return [_reply(event, pushed, props)]
    # Archived meanwhile: the deletion counts as come first, as had it come before this push
    # was signed: no signature recorded (an archived version holds none) and none of what
    # this delivery wrote left next to the files (its cleanup may have listed them before it
    # was written; for OCI: the referrer it pushed); what another delivery wrote is that
    # one's to remove, or stays.
    for step in undo:
        step()
    raise Skip("the version was archived while it was signed: no signature is kept")


def _still_bound(pushed: ArtifactPushed, stores: Stores, options: HashOptions) -> bool:
    """Whether the model's objects are still those its binding names (one listing, no
    hashing): the same content written again (a retried upload: the same digest, new
    generations) is signed through again, so its binding is written anew (admission
    decides by it). An OCI model is named by its digest: nothing to look at."""
    if pushed.uri.startswith("oci://"):
        return True
    from modelhooks.adapters.signing.model import still_bound

    store, bucket, prefix = stores.resolve(pushed.uri)
    return still_bound(store, bucket, prefix, options=options)


def _the_pushed_content(
    pushed: ArtifactPushed, prefix: str, options: HashOptions
) -> Callable[[list[ObjectInfo]], None] | None:
    """What `sign_model` checks before it writes: the objects it hashed are the content the
    push names (its content digest, as ingress took it). Other bytes written since (the
    version uploaded again, other content: a Conflict in register) were signed and recorded
    as this digest's signature, and the signature next to them vouched for them (admission
    admitted them). None for a push not named by its content (nothing to compare)."""
    if not pushed.digest.startswith(CONTENT):
        return None
    name = options.signature_name
    exclude = {options.ready_marker, name, _binding(name)}

    def check(objects: list[ObjectInfo]) -> None:
        found = content_digest(objects, prefix, exclude)
        if found != pushed.digest:
            raise ContentChanged(
                f"the model under {pushed.uri} is no longer the content this push names: it "
                "was written again since (its own push names the new content)",
                pushed=pushed.digest,
                found=found,
            )

    return check


def _unsign_oci(client: Any, repo: str, subject: str, referrer: str) -> None:
    """The referrer this delivery pushed, taken back (the OCI signing module's, imported
    only then)."""
    from modelhooks.adapters.signing.oci import unsign_oci

    unsign_oci(client, repo, subject, referrer)


def _binding(signature: str) -> str:
    from modelhooks.adapters.signing.binding import binding_key

    return binding_key(signature)


def _registered_version(
    registry: ModelRegistry, pushed: ArtifactPushed, at: str | None = None
) -> ModelVersion:
    """The version `pushed` is of, Unavailable until register has recorded it, and with
    `at` (the push's time) until it has recorded this very push: the version of an earlier
    push of the same digest is not enough. A signature recorded on it then, a deletion older
    than this push but newer than that one archived the version (dropping the record), and
    this push's registration revived it LIVE and unsigned for good; as "stale" (its version
    archived) this push was skipped alike. Recorded, a deletion that archives the version
    is newer than this push: it is stale, rightly skipped. A version of another digest is
    a Conflict (as register answers it), or stale when archived."""
    model = registry.get_model(pushed.model)
    version = registry.get_version(model.id, pushed.version) if model else None
    if version is None:
        raise Unavailable(
            f"model {pushed.model!r} version {pushed.version!r} is not registered yet",
            model=pushed.model,
            version=pushed.version,
        )
    if version.custom_properties.get("digest", pushed.digest) != pushed.digest:
        # register records no push of another digest (a Conflict, or moot when older than
        # the model's deletion): waiting for it to be recorded would wait for ever
        if version.state != ModelState.LIVE:
            raise Skip("stale push: another digest, the version is archived")
        raise Conflict(
            f"model {pushed.model!r} version {pushed.version!r} is registered with another digest",
            registered=version.custom_properties.get("digest"),
            received=pushed.digest,
        )
    if at is not None and at > version.custom_properties.get(PUSHED_AT, ""):
        raise Unavailable(
            f"model {pushed.model!r} version {pushed.version!r} is not registered yet "
            "as of this push",
            model=pushed.model,
            version=pushed.version,
        )
    return version


def _reply(
    event: CanonicalEvent, pushed: ArtifactPushed, props: Mapping[str, str]
) -> CanonicalEvent:
    signed = ModelSigned(
        model=pushed.model,
        version=pushed.version,
        uri=pushed.uri,
        digest=pushed.digest,
        signature_uri=props.get("signature.uri", ""),
        root_digest=props.get("signature.root_digest", ""),
        signer=props.get("signature.signer", ""),
        namespace=pushed.namespace or "default",
    )
    return event.reply(signed, source="modelhooks/sign", name="signed")


def refused(event: CanonicalEvent, error: Permanent) -> list[CanonicalEvent]:
    """A push refused for good, told to the Model waiting on its signature: one
    `model.refused` (function sign) saying why, named after the event and the reason (a
    redelivery refused alike answers the same). notify tells it to the Model of the push's
    name, version and location, if there is one (a push no Model waits on: nothing)."""
    data = event.data
    if not isinstance(data, ArtifactPushed):
        return []
    reason = f"{error.code}: {error.message}"
    reply = ModelRefused(
        model=data.model,
        version=data.version,
        uri=data.uri,
        namespace=data.namespace or "default",
        refused=reason,
        function="sign",
    )
    name = "refused/" + hashlib.sha256(reason.encode()).hexdigest()[:16]
    return [event.reply(reply, source="modelhooks/sign", name=name)]


FUNCTION = Function(
    name="sign",
    accepts=frozenset({ArtifactPushed.TYPE}),
    handle=handle,
    extras=("gcp", "aws", "signing"),
    refused=refused,
)

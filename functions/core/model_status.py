"""The status notify applies to a `Model`, computed from the Model as read plus one event.

notify owns status.registeredModelId / modelVersionId / resolvedDigest / signatureRef /
observedGeneration and the conditions Registered, Signed, Ready and CleanupFailed (True:
reason CleanupFailed, something could not be deleted, or CleanupRefused, the deletion was
refused for good; gone once a cleanup succeeded). Each
apply carries every one of them that is already there (a server-side apply removes what its
manager leaves out) and sets what this event says, so the result is a function of the set of
events: registered-then-signed and signed-then-registered end alike.

    Ready = Registered and (Signed, or spec.signing.enabled is false)
"""

from __future__ import annotations

from typing import Any

from modelhooks.core.conditions import FINALIZER, Condition, merge
from modelhooks.events.model import ArtifactPurged, ModelRefused, ModelRegistered, ModelSigned

__all__ = [
    "OWNED",
    "REFUSALS",
    "SIGNING_REFUSALS",
    "cleaned_up",
    "cleanup_failed",
    "cleanup_report",
    "progress",
    "ready_stale",
    "refreshed",
    "refusal_reason",
    "registration_refused",
    "rollout_version",
    "signing_refused",
]

OWNED = ("Registered", "Signed", "Ready", "CleanupFailed")
_FIELDS = ("registeredModelId", "modelVersionId", "resolvedDigest", "signatureRef")


def progress(
    model: dict[str, Any], data: ModelRegistered | ModelSigned, now: str
) -> dict[str, Any]:
    """The status after `data` (a version registered, or signed)."""
    status, generation = _owned(model)
    kind = "Registered" if isinstance(data, ModelRegistered) else "Signed"
    resolved = status.get("resolvedDigest")
    if resolved and resolved != data.digest:
        new = Condition(
            kind,
            "False",
            "DigestMismatch",
            f"version {data.version} was {kind.lower()} with digest {data.digest}, but this "
            f"Model resolved {resolved}: another artifact under the same name and version; "
            "push it as a new version",
            generation,
        )
    elif isinstance(data, ModelRegistered):
        status.update(
            registeredModelId=data.registered_model_id,
            modelVersionId=data.model_version_id,
            resolvedDigest=data.digest,
        )
        new = Condition(
            kind,
            "True",
            "Registered",
            f"version {data.version} registered in {data.registry} (registered model "
            f"{data.registered_model_id}, version {data.model_version_id})",
            generation,
        )
    else:
        status.update(signatureRef=data.signature_uri, resolvedDigest=data.digest)
        new = Condition(
            kind, "True", "Signed", f"signed by {data.signer}: {data.signature_uri}", generation
        )
    conditions = merge(status.get("conditions", []), [new], now=now)
    status["conditions"] = merge(conditions, [_ready(model, conditions, generation)], now=now)
    return status


# A refusal's reason, by the code its `refused` begins with (`<code>: <message>`, as the
# refusal's 4xx said it), and what to do about it; any other code: RegistrationRefused.
_CAUSES = {
    "conflict": (
        "VersionConflict",
        "a registered version is immutable: set a new spec.version, or archive the registered "
        "one first (modelhooks registry archive)",
    ),
    "forbidden": (
        "SourceForbidden",
        "the namespace's tenancy does not allow spec.source: point it at a bucket or "
        "repository the namespace may use, or have the operator allow this one",
    ),
    "bad_request": (
        "InvalidSpec",
        "fix the field the reason names (spec.source or spec.version)",
    ),
}
_OTHER = (
    "RegistrationRefused",
    "push the model as a new spec.version (or fix spec.source, or the namespace's tenancy), "
    "or archive the registered one first",
)
REFUSALS = frozenset(reason for reason, _ in (*_CAUSES.values(), _OTHER))


# sign's refusals, by the same code: its Conflicts say which one they are
_SIGN_CAUSES = {
    "content_changed": (
        "ContentChanged",
        "its files were written again with other bytes after that push, so the content it "
        "names is not there to sign: upload the registered content again, or push the new "
        "content as a new spec.version (a registered version is immutable)",
    ),
    "signature_exists": (
        "SignatureExists",
        "another signature (of other content, or by another signer) is where sign writes "
        "its own, and sign never overwrites one: remove it, or sign the model yourself "
        "(modelhooks sign --replace)",
    ),
    "conflict": (
        "VersionConflict",
        "the version is registered with another digest: that push is other content under a "
        "registered version, which is immutable; push it as a new spec.version",
    ),
    "forbidden": _CAUSES["forbidden"],
    "bad_request": (
        "InvalidSource",
        "fix what the reason names (no model files, an OCI manifest without titled layers, "
        "a location sign cannot read as one)",
    ),
}
_SIGN_OTHER = ("SigningRefused", "fix the cause the reason names")
SIGNING_REFUSALS = frozenset(reason for reason, _ in (*_SIGN_CAUSES.values(), _SIGN_OTHER))


def refusal_reason(refused: str, function: str = "register") -> tuple[str, str]:
    """The condition's reason for a refusal of `function` saying `refused`, and what to do
    about it.

    >>> refusal_reason("conflict: version '1' of 'bert' was registered from another source")[0]
    'VersionConflict'
    >>> refusal_reason("anything else")[0]
    'RegistrationRefused'
    >>> refusal_reason("content_changed: the model under s3://b/m/1/ is no longer …", "sign")[0]
    'ContentChanged'
    >>> refusal_reason("anything else", "sign")[0]
    'SigningRefused'
    """
    code = refused.partition(":")[0].strip()
    if function == "sign":
        return _SIGN_CAUSES.get(code, _SIGN_OTHER)
    return _CAUSES.get(code, _OTHER)


def registration_refused(model: dict[str, Any], data: ModelRefused, now: str) -> dict[str, Any]:
    """The status after register refused the Model's version for good: Registered False,
    its reason naming the cause (VersionConflict, SourceForbidden, InvalidSpec, else
    RegistrationRefused: `refusal_reason`), saying why and what to do (a function of the
    report alone: told again, the status is the one stored), and Ready computed from it."""
    status, generation = _owned(model)
    version = model["spec"].get("version", data.version)
    source = f" from {data.uri}" if data.uri else ""
    reason, fix = refusal_reason(data.refused)
    message = (
        f"register refused version {version}{source} for good: {data.refused}. Nothing was "
        f"registered for this Model; {fix}; then touch the Model (kubectl annotate model "
        f"{model['metadata']['name']} modelhooks.dev/retry=$(date +%s) --overwrite)"
    )
    new = Condition("Registered", "False", reason, message[:32768], generation)
    conditions = merge(status["conditions"], [new], now=now)
    status["conditions"] = merge(conditions, [_ready(model, conditions, generation)], now=now)
    return status


def signing_refused(model: dict[str, Any], data: ModelRefused, now: str) -> dict[str, Any]:
    """The status after sign refused a push of the Model's version for good: Signed False,
    its reason naming the cause (ContentChanged, SignatureExists, VersionConflict,
    SourceForbidden, InvalidSource, else SigningRefused), saying why and what to do (a
    function of the report alone), and Ready computed from it (False while
    spec.signing.enabled asks for the signature)."""
    status, generation = _owned(model)
    version = model["spec"].get("version", data.version)
    source = f" of {data.uri}" if data.uri else ""
    reason, fix = refusal_reason(data.refused, "sign")
    message = (
        f"sign refused the push{source} (version {version}) for good: {data.refused}. "
        f"Nothing was signed for it; {fix}; then push the version again (write its ready "
        "marker again, or push its OCI manifest again): sign signs that push"
    )
    new = Condition("Signed", "False", reason, message[:32768], generation)
    conditions = merge(status["conditions"], [new], now=now)
    status["conditions"] = merge(conditions, [_ready(model, conditions, generation)], now=now)
    return status


def cleanup_failed(model: dict[str, Any], data: ArtifactPurged, now: str) -> dict[str, Any]:
    """The status after a purge that left something behind, or was refused for good:
    CleanupFailed True, reason CleanupFailed or CleanupRefused, saying what and what to do.

    The message is a function of the report alone (no time in it): told again, the status
    is the one stored, and its write changes nothing. Each status write comes back as an
    update of the Model being deleted, so cleanup runs again and reports what holds now: a
    late report of an older attempt is replaced by the current one."""
    status, _ = _owned(model)
    status["conditions"] = merge(status["conditions"], [cleanup_report(model, data)], now=now)
    return status


def cleanup_report(model: dict[str, Any], data: ArtifactPurged) -> Condition:
    """CleanupFailed True as the report `data` says it on `model`."""
    generation = int(model["metadata"].get("generation", 1))
    name = model["metadata"]["name"]
    policy = f"deletionPolicy {data.policy}" if data.policy else "the cleanup policy"
    if data.refused:
        reason = "CleanupRefused"
        what = f"cleanup by {policy} of {data.uri or 'spec.source'} was refused for good, and "
        what += f"stopped: {data.refused}"
        causes = "its namespace's tenancy, spec.source, the Secret of spec.source.secretRef or "
        causes += "cleanup's rights to read it, spec.deletionPolicy, the store's permissions"
    else:
        failed = "; ".join(f"{what}: {why}" for what, why in sorted(data.failed.items())[:5])
        more = f" (and {len(data.failed) - 5} more)" if len(data.failed) > 5 else ""
        reason = "CleanupFailed"
        what = f"{policy} could not delete {len(data.failed)} item(s) of {data.uri}: "
        what += failed + more
        causes = "the credentials of spec.source.secretRef, the store's permissions or "
        causes += "retention locks"
    message = (
        f"{what}. The finalizer {FINALIZER} keeps this Model (and what cleanup did not "
        f"delete) until a cleanup succeeds: fix the cause ({causes}), then run cleanup again "
        f"by touching the Model (kubectl annotate model {name} "
        "modelhooks.dev/retry-cleanup=$(date +%s) --overwrite); to keep the artifacts and let "
        "the Model go, set spec.deletionPolicy Retain (a namespace whose tenancy refuses its "
        f"source cannot) or remove the finalizer {FINALIZER} by hand"
    )
    return Condition("CleanupFailed", "True", reason, message[:32768], generation)


def cleaned_up(model: dict[str, Any]) -> dict[str, Any]:
    """The status after a purge that succeeded (its finalizer gone): without CleanupFailed,
    which an earlier attempt, or one racing it, set. A Model that other finalizers keep
    ends as one whose first cleanup succeeded: the same whatever the order of the reports."""
    status, _ = _owned(model)
    status["conditions"] = [c for c in status["conditions"] if c.get("type") != "CleanupFailed"]
    return status


def refreshed(model: dict[str, Any], now: str) -> dict[str, Any]:
    """The status after a change of the Model's spec (spec.signing.enabled, which decides
    Ready, is mutable): Ready computed again from the conditions told so far."""
    status, generation = _owned(model)
    ready = _ready(model, status["conditions"], generation)
    status["conditions"] = merge(status["conditions"], [ready], now=now)
    return status


def ready_stale(model: dict[str, Any]) -> bool:
    """Whether the Ready told is not what the Model's spec and conditions say now (its spec
    changed since): False before anything was registered (nothing to tell yet)."""
    status = model.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    if not any(c.get("type") == "Registered" for c in conditions):
        return False
    told = next((c for c in conditions if c.get("type") == "Ready"), {})
    want = _ready(model, conditions, 0)
    return (told.get("status"), told.get("reason"), told.get("message")) != (
        want.status,
        want.reason,
        want.message,
    )


def rollout_version(model: dict[str, Any]) -> str | None:
    """`<version>@<digest>` of a Model that is Ready, else None: only a Ready version rolls."""
    status = model.get("status") or {}
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    digest, version = status.get("resolvedDigest"), model["spec"].get("version")
    if not ready or ready[0].get("status") != "True" or not digest or not version:
        return None
    return f"{version}@{digest}"


def _owned(model: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """What notify owns of the current status (to apply again), and the generation."""
    current = model.get("status") or {}
    generation = int(model["metadata"].get("generation", 1))
    status: dict[str, Any] = {k: current[k] for k in _FIELDS if k in current}
    status["observedGeneration"] = generation
    status["conditions"] = [c for c in current.get("conditions", []) if c.get("type") in OWNED]
    return status, generation


def _ready(model: dict[str, Any], conditions: list[dict[str, Any]], generation: int) -> Condition:
    by_type = {c["type"]: c for c in conditions}
    signing = bool((model["spec"].get("signing") or {}).get("enabled"))
    registered = by_type.get("Registered", {})
    signed = by_type.get("Signed", {})
    version = model["spec"].get("version", "")
    if registered.get("status") != "True":
        reason = registered.get("reason") if registered else "NotRegistered"
        waiting = registered.get("message") or f"waiting for version {version} to be registered"
        return Condition("Ready", "False", reason or "NotRegistered", waiting, generation)
    if signing and signed.get("status") != "True":
        reason = signed.get("reason") if signed else "NotSigned"
        waiting = signed.get("message") or "waiting for the signature (spec.signing.enabled)"
        return Condition("Ready", "False", reason or "NotSigned", waiting, generation)
    how = "registered and signed" if signing else "registered (signing not requested)"
    return Condition("Ready", "True", "Ready", f"version {version} is {how}", generation)

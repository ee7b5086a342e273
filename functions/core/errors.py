"""One error tree, without transport semantics.

    ModelhooksError
    ├── ConfigError            (start-up) a setting is invalid: the message names it
    ├── Transient              worth retrying: the platform redelivers
    │   ├── Unavailable        a backend did not answer or answered 5xx
    │   │   └── CredentialsRefused  a backend refused our own credentials (the operator's)
    │   └── Throttled          a backend or quota said "slow down"
    └── Permanent              never retried (but dead-lettered)
        ├── BadRequest         malformed input: the reason names the field
        │   └── PartlyBad      some units of a delivery are, the others (its `good`) not
        ├── Unauthenticated    missing or invalid delivery credentials
        ├── Forbidden          a tenant acting outside its allowed buckets/repositories
        ├── NotFound           a thing the request names does not exist
        ├── Conflict           the same identity with different content
        │   ├── ContentChanged the bytes an event names are not in its store any more
        │   └── SignatureExists another signature is where sign would write its own
        ├── PayloadTooLarge    a body over the configured limit
        └── VerificationFailed a signature does not match the model

The root and the errors the event vocabulary raises are defined in
`modelhooks.events.errors` (the bottom layer); this module completes the tree and is what
every other layer imports. The delivery layer (`modelhooks.delivery.statuses`) maps each
error to an HTTP status; adapters wrap library errors at the boundary, so nothing above
them sees an SDK exception.
"""

from __future__ import annotations

from modelhooks.events.errors import (
    BadRequest,
    ConfigError,
    ModelhooksError,
    PartlyBad,
    PayloadTooLarge,
    Permanent,
    Transient,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "NAMESPACE_TERMINATING",
    "BadRequest",
    "ConfigError",
    "Conflict",
    "ContentChanged",
    "CredentialsRefused",
    "Forbidden",
    "ModelhooksError",
    "NotFound",
    "PartlyBad",
    "PayloadTooLarge",
    "Permanent",
    "SignatureExists",
    "Throttled",
    "Transient",
    "Unauthenticated",
    "Unavailable",
    "VerificationFailed",
    "batch_failure",
]


# The `reason` detail of a Forbidden from Kubernetes for a namespace being deleted: it takes
# no new object (NamespaceLifecycle), though its objects are still read, updated and let go.
NAMESPACE_TERMINATING = "NamespaceTerminating"


class Throttled(Transient):
    code = "throttled"


class CredentialsRefused(Unavailable):
    """A backend (store, registry) refused this deployment's own credentials: the operator's
    to fix, not the sender's. 503, so the platform retries and then dead-letters the event
    for a replay once fixed (a 401 would tell the sender its delivery was unauthenticated)."""

    code = "credentials_refused"


def batch_failure(failed: list[ModelhooksError], total: int, where: str) -> Transient:
    """The error for a batch whose `failed` items failed transiently after the rest was
    attempted: Throttled when every one was throttled, else Unavailable."""
    kind = Throttled if all(isinstance(e, Throttled) for e in failed) else Unavailable
    return kind(
        f"{len(failed)} of {total} deletes failed in {where}; the rest was attempted",
        location=where,
        failed=len(failed),
        reason=failed[0].details.get("reason", ""),
    )


class Forbidden(Permanent):
    code = "forbidden"


class NotFound(Permanent):
    code = "not_found"


class Conflict(Permanent):
    code = "conflict"


class ContentChanged(Conflict):
    """The model's files were written again with other bytes after the push that names
    them (its content digest, or a file cut short while it was read): that push's content
    is not there to sign any more (the new content's own push names it)."""

    code = "content_changed"


class SignatureExists(Conflict):
    """Another signature (of other content, or by another signer) is where sign would write
    its own: never overwritten by the function (`modelhooks sign --replace` does)."""

    code = "signature_exists"


class VerificationFailed(Permanent):
    code = "verification_failed"

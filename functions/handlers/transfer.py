"""`transfer`: on `transfer.requested`, copy a model between stores (streaming, resumable),
register it per intent in the configured registry and sign it: `modelhooks transfer` as a
function (modelhooks.adapters.transfer.request says what the event may and may not decide).

Before anything moves: an OCI reference must parse (400), a host the event names (OCI
registry, http(s) source) may not be this machine, a private network or the metadata
service unless `store.allow_local_targets` / `store.allowed_hosts` (403; the connection
checks again what the name resolves to), and both locations must be allowed for the
request's tenant (403 naming the location; a request naming no namespace gets the one that
owns its source), as must the models it names (403 naming the field: another tenant's
artifact, model or model name; a model it creates records its tenant), and an S3 or GCS
destination must not be claimed by another source (409 naming it: the destination's claim,
adapters.transfer.stores). Then the copy (what the destination already has from
the same source revision is kept), the registration (the artifact PENDING while bytes move,
LIVE with the URI and digest after, ABANDONED with the reason on a failure) and the
signature. Another request for the same artifact, or two concurrent deliveries, find the
same model, version, artifact and copy: the reply says `created: false`. A delivery that
took effect before (its answer lost: a crash before the delivery log's record, Pub/Sub's ack
deadline passed during the copy) is answered as the first time from the registry, nothing
copied again (the artifact records the delivery that made it LIVE): its source may be gone.
A request older than one that began on the artifact or made it LIVE is moot (204): copied,
it took the artifact back to an older source's content, by delivery order; running at the
same time as the newer, its copy ending last, it did too (`finish` read nothing again).
Now begin, finish and fail each read the artifact again in their write's transaction
(adapters.transfer.register). A store that does not answer, or the
copy running past `transfer.timeout`, answers 503 (redelivered: it resumes); bad input 4xx.

Reply: `model.registered` with the ids, the destination URI and the content's digest.
"""

from __future__ import annotations

from modelhooks.adapters.transfer.request import Transfers
from modelhooks.core.errors import Forbidden, NotFound
from modelhooks.core.function import Function
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import stamp
from modelhooks.core.stores import Stores
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import CanonicalEvent, ModelRegistered, TransferRequested

__all__ = ["FUNCTION", "tenant"]


def handle(
    event: CanonicalEvent,
    *,
    registry: ModelRegistry,
    stores: Stores,
    tenancy: Tenancy,
    transfers: Transfers,
) -> list[CanonicalEvent]:
    data = event.data
    if not isinstance(data, TransferRequested):
        return []
    for part in (data.source, data.destination):
        if part.type == "oci":  # the OCI client's module only then (cold start)
            from modelhooks.adapters.oci.distribution import parse_uri

            parse_uri(part.location)  # BadRequest naming what is wrong with the reference
        if part.type in ("oci", "uri"):  # a host the event names: not this machine, a
            stores.check_host(part.location)  # private network or the metadata service
    namespace = tenant(data, tenancy)
    model_id = data.model.id or ""
    if data.intent == "create_version" and not model_id:
        found = registry.get_model(data.model.name or "")
        if found is None:
            raise NotFound(
                f"model.name: no registered model {data.model.name!r}", field="model.name"
            )
        model_id = found.id
    # the delivery, named: one that took effect before (its answer lost) is answered so again
    delivery = f"{event.source} {event.id}"
    # an older request, delivered late, is moot; one without a time neither is, nor makes one
    at = stamp(event) if event.time else ""
    # tenancy on: the models it registers into are its tenant's (another's refused, 403)
    owner = namespace if tenancy.rules else None
    done = transfers.run(
        data, registry=registry, model_id=model_id, event=delivery, at=at, owner=owner
    )
    result = done.result
    reply = ModelRegistered(
        model=data.model.name or str(result.get("model_id", "")),
        version=data.version.name or str(result.get("model_version_id", "")),
        uri=str(result["uri"]),
        digest=str(result["digest"]),
        registry=getattr(registry, "name", type(registry).__name__),
        registered_model_id=str(result.get("model_id", "")),
        model_version_id=str(result.get("model_version_id", "")),
        model_artifact_id=str(result.get("model_artifact_id", "")),
        namespace=namespace or "default",
        created=done.created,
    )
    return [event.reply(reply, source="modelhooks/transfer", name="registered")]


def tenant(data: TransferRequested, tenancy: Tenancy) -> str | None:
    """The request's tenant (its namespace, else the one owning its source), allowed both
    locations; Forbidden naming the first it may not act on. No rules: no checks."""
    if not tenancy.rules:
        return data.namespace
    namespace = data.namespace or tenancy.owner(data.source.location)
    for side, part in (("source", data.source), ("destination", data.destination)):
        if namespace is None or not tenancy.allows(namespace, part.location):
            raise Forbidden(
                f"namespace {namespace!r} may not transfer {'from' if side == 'source' else 'to'}"
                f" {part.location}",
                namespace=namespace,
                location=part.location,
                field=side,
            )
    return namespace


FUNCTION = Function(
    name="transfer",
    accepts=frozenset({TransferRequested.TYPE}),
    handle=handle,
    extras=("aws", "gcp", "signing"),  # S3 and GCS ends; model-signing (key or keyless)
)

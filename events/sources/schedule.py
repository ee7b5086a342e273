"""A Knative PingSource's ping → `dev.modelhooks.prune.requested`.

A PingSource sends `dev.knative.sources.ping` on its schedule with the `data` its spec
gives; ours gives the request's payload, `{"uri": "oci://host/repository"}` (optionally
`"namespace"`; the example infra/examples/prune-schedule.yaml). Every ping has an id of its
own, so each scheduled run is one delivery. (Cloud Scheduler needs no translator: it
publishes a canonical CloudEvent through Pub/Sub attributes.)

>>> ev = from_ping(Inbound("cloudevent", "p1", {"uri": "oci://r.example/models/bert"},
...     {"type": "dev.knative.sources.ping", "id": "p1", "source": "/apis/v1/pingsources/x"}))
>>> ev[0].type, ev[0].data.uri
('dev.modelhooks.prune.requested', 'oci://r.example/models/bert')
"""

from __future__ import annotations

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import CanonicalEvent, PruneRequested
from modelhooks.events.sources._common import (
    as_object,
    canonical,
    json_value,
    parse_time,
    payload,
    text,
)
from modelhooks.events.sources._types import PING_TYPE

__all__ = ["PING_TYPE", "from_ping"]


def from_ping(inbound: Inbound) -> list[CanonicalEvent]:
    """A ping carrying a PruneRequested payload → that request."""
    where = "ping"
    attrs = inbound.attributes
    if text(attrs, "type", where) != PING_TYPE:
        raise BadRequest(f"{where}: unknown type {attrs.get('type')!r}", field="type")
    data = as_object(json_value(inbound.data, where), where)
    request = payload(PruneRequested, where, **data)
    return [
        canonical(
            request,
            id=text(attrs, "id", where),
            source=text(attrs, "source", where),
            subject=attrs.get("subject"),
            time=parse_time(attrs.get("time"), where, "time"),
        )
    ]

"""A CloudEvent already in our vocabulary (`dev.modelhooks.*`) → a CanonicalEvent.

Replays, other modelhooks instances and function replies arrive this way. The data is
validated against the payload model of its type; id, source, subject, time and every
extension attribute are kept as they came.

>>> ev = from_canonical_cloudevent(Inbound("cloudevent", "r1", {
...     "uri": "oci://r/m:1", "store": "oci"}, {
...     "specversion": "1.0", "id": "r1", "source": "/replay",
...     "type": "dev.modelhooks.artifact.deleted", "team": "ml"}))
>>> ev[0].id, ev[0].extensions
('r1', {'team': 'ml'})
"""

from __future__ import annotations

import re

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import CanonicalEvent, data_class, parse
from modelhooks.events.sources._common import as_object, json_value, parse_time, text
from modelhooks.events.sources._types import CANONICAL_TYPE_PREFIX as TYPE_PREFIX

__all__ = ["TYPE_PREFIX", "from_canonical_cloudevent"]

# Context attributes with a slot of their own; everything else is an extension.
_CONTEXT = frozenset(
    {"specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time"}
)


def from_canonical_cloudevent(inbound: Inbound) -> list[CanonicalEvent]:
    """One canonical CloudEvent, its data validated by the model of its type."""
    where = "canonical event"
    attrs = inbound.attributes
    event_type = text(attrs, "type", where)
    cls = data_class(event_type)
    if cls is None:
        raise BadRequest(f"{where}: unknown type {event_type!r}", field="type")
    extensions = {k: v for k, v in attrs.items() if k not in _CONTEXT}
    for name in extensions:  # kept, they travel on as ce-* headers: names HTTP can carry
        if not re.fullmatch(r"[a-z0-9]+", name):
            raise BadRequest(
                f"{where}: attribute name {name!r} is not lower-case letters and digits "
                "(CloudEvents 1.0, attribute naming)",
                field=name,
            )
    raw = as_object(json_value(inbound.data, where), where)
    data = parse(cls, dict(raw), f"{where} {event_type}")
    return [
        CanonicalEvent(
            id=text(attrs, "id", where),
            source=text(attrs, "source", where),
            type=event_type,
            data=data,
            subject=attrs.get("subject") or None,
            time=parse_time(attrs.get("time"), where, "time"),
            extensions=extensions,
        )
    ]

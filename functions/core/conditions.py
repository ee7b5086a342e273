"""What notify writes on a `Model`: metav1.Condition entries, events.k8s.io/v1 Events and the
names both are found by. Pure values and rules; the `Cluster` port writes them.

A condition keeps its lastTransitionTime while its status stays the same, so a redelivery
computes exactly the status already stored (and a server-side apply of it changes nothing).

>>> old = [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
...         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]
>>> merge(old, [Condition("Ready", "True", "Ready", "v1 ready", 2)], now="2026-02-02T00:00:00Z")[0][
...     "lastTransitionTime"]
'2026-01-01T00:00:00Z'
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

import msgspec

__all__ = [
    "FIELD_MANAGER",
    "FINALIZER",
    "MODEL_ANNOTATION",
    "REPORTING_CONTROLLER",
    "ROLLOUT_ANNOTATION",
    "Condition",
    "ModelEvent",
    "event_name",
    "merge",
    "model_of_subject",
]

FINALIZER = "modelhooks.dev/cleanup"  # held by Models whose deletionPolicy is not Retain
FIELD_MANAGER = "modelhooks-notify"  # owner of the status fields notify applies
REPORTING_CONTROLLER = "modelhooks.dev/notify"
MODEL_ANNOTATION = "modelhooks.dev/model"  # on a workload: the Model it serves
ROLLOUT_ANNOTATION = "modelhooks.dev/model-version"  # set on it: <version>@<digest>
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"  # a namespace
_DNS_SUBDOMAIN_ = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"  # a Model's name
# a Model's path, of names only (a subject of '..' or '.' steered the requests made for it
# at other paths of the API server: the namespace, the list of Models, discovery)
_SUBJECT = re.compile(
    rf"/apis/modelhooks\.dev/[^/]+/namespaces/({_DNS_LABEL})/models/({_DNS_SUBDOMAIN_})"
)
_DNS_SUBDOMAIN = re.compile(_DNS_SUBDOMAIN_)


# frozen msgspec Structs, not dataclasses: making a Struct class costs ~2 % of a dataclass's
class Condition(msgspec.Struct, frozen=True):
    """One metav1.Condition (lastTransitionTime is decided by `merge`)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str  # CamelCase
    message: str
    observed_generation: int


def merge(
    existing: Iterable[Mapping[str, Any]], new: Iterable[Condition], *, now: str
) -> list[dict[str, Any]]:
    """`existing` conditions with `new` ones set: a condition whose status did not change
    keeps its lastTransitionTime; the others get `now`. Sorted by type."""
    by_type = {str(c.get("type")): dict(c) for c in existing if c.get("type")}
    for c in new:
        old = by_type.get(c.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == c.status else None
        by_type[c.type] = {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message[:32768],
            "observedGeneration": c.observed_generation,
            "lastTransitionTime": since or now,
        }
    return [by_type[t] for t in sorted(by_type)]


class ModelEvent(msgspec.Struct, frozen=True):
    """An events.k8s.io/v1 Event regarding a Model; `name` is deterministic (`event_name`),
    so recording it twice records it once."""

    namespace: str
    name: str
    model: str  # the Model it regards
    uid: str  # the Model's uid ("" when unknown)
    reason: str  # CamelCase, what happened: Registered, Signed, CleanupFailed
    action: str  # what notify did about it: UpdateStatus, RemoveFinalizer, RollOut
    note: str  # for people, at most 1 kB
    time: datetime
    type: Literal["Normal", "Warning"] = "Normal"


def event_name(model: str, source: str, event_id: str, reason: str) -> str:
    """`<model>.<16 hex>` from the CloudEvent's identity (source, id) and the reason: a DNS
    subdomain for any Model name (cut to 200 characters, without the `.` or `-` the cut may
    end on: `a.` + `.` or `a-.` is no name the API server takes)."""
    digest = hashlib.sha256(f"{source}\n{event_id}\n{reason}".encode()).hexdigest()[:16]
    return f"{model[:200].rstrip('.-')}.{digest}"


def model_of_subject(subject: str | None) -> tuple[str, str] | None:
    """(namespace, name) when a CloudEvent's subject is a Model's path, as the ApiServerSource
    and `watch-models` set it (and the functions replying to them keep it)."""
    found = _SUBJECT.fullmatch(subject or "")
    return (found[1], found[2]) if found else None


def is_resource_name(name: str) -> bool:
    """Whether `name` can be a Model's name (a DNS subdomain)."""
    return bool(_DNS_SUBDOMAIN.fullmatch(name))

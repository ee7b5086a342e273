"""One upstream delivery unit, decoded from HTTP but not yet translated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

__all__ = ["Inbound"]


class Inbound(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    """What ingress hands to the translators in `events/sources/`.

    - kind "cloudevent": `attributes` are the CloudEvent's context attributes and
      extensions (strings); `data` its decoded data (JSON value, or bytes if not JSON).
    - kind "pubsub": `attributes` are the Pub/Sub message attributes, `data` the decoded
      message data (JSON value if it parses, else bytes), `id` the messageId.
    - kind "webhook": a native webhook body (S3/MinIO, OCI distribution, …) as JSON;
      `attributes` empty.
    `id` is stable across redeliveries of the same upstream event (used to derive
    canonical ids, so duplicates are recognisable). `time` is the transport's own
    timestamp when it has one (Pub/Sub publishTime, RFC 3339), for payloads that carry none.
    """

    kind: Literal["cloudevent", "pubsub", "webhook"]
    id: str
    data: Any
    attributes: Mapping[str, str] = msgspec.field(default_factory=dict)
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    time: str | None = None

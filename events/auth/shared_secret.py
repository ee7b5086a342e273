"""Authenticators for shared secrets: HMAC signatures, MLflow, bearer tokens, a secret header."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Mapping

from modelhooks.events.auth._base import (
    Clock,
    Principal,
    Secrets,
    Trust,
    _bearer,
    _fresh,
    _keyed,
    _match,
    _required,
    _secret_trust,
)
from modelhooks.events.errors import Unauthenticated


class HmacAuthenticator:
    """``<header>: sha256=<hex HMAC-SHA256(secret, "{ts}.{body}")>`` with ``ts`` within ``window``."""

    def __init__(
        self,
        secrets: Secrets,
        *,
        header: str = "X-Modelhooks-Signature",
        timestamp_header: str = "X-Modelhooks-Timestamp",
        window: float = 300.0,
        clock: Clock = time.time,
    ) -> None:
        self._keyed, self.header, self.timestamp_header = _keyed(secrets), header, timestamp_header
        self.window, self._clock = window, clock

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        signature = _required(headers, self.header).strip()
        ts = _fresh(headers, self.timestamp_header, self._clock(), self.window)
        hexdigest = signature.removeprefix("sha256=").lower()
        if not signature.startswith("sha256=") or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
            raise Unauthenticated(f"{self.header} must be 'sha256=<64 hex digits>'")
        message = ts.encode() + b"." + body
        return _match(self._keyed, message, hexdigest.encode(), "hmac", lambda d: d.hex().encode())

    def trust(self) -> Trust:
        return _secret_trust([s for _, s in self._keyed])


class MlflowAuthenticator:
    """MLflow 3 webhooks: ``X-MLflow-Signature: v1,<base64 HMAC(secret, "{id}.{ts}.{body}")>``."""

    def __init__(self, secrets: Secrets, *, window: float = 300.0, clock: Clock = time.time):
        self._keyed, self.window, self._clock = _keyed(secrets), window, clock

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        signature = _required(headers, "X-MLflow-Signature").strip()
        delivery_id = _required(headers, "X-MLflow-Delivery-Id")
        ts = _fresh(headers, "X-MLflow-Timestamp", self._clock(), self.window)
        if not signature.startswith("v1,"):
            raise Unauthenticated("X-MLflow-Signature must be 'v1,<base64>'")
        message = f"{delivery_id}.{ts}.".encode() + body
        given = signature[3:].encode("ascii", "replace")
        return _match(self._keyed, message, given, "mlflow", base64.b64encode)

    def trust(self) -> Trust:
        return _secret_trust([s for _, s in self._keyed])


class SecretHeaderAuthenticator:
    """A shared secret sent verbatim in ``header`` (Hugging Face: ``X-Webhook-Secret``)."""

    scheme = "header"

    def __init__(self, header: str, secrets: Secrets) -> None:
        # Compare digests so the comparison time does not depend on the secret's length.
        self.header = header
        self._digests = tuple((n, hashlib.sha256(s).digest()) for n, s in _keyed(secrets))

    def trust(self) -> Trust:
        return frozenset(("secret", digest.hex()) for _, digest in self._digests)

    def _value(self, headers: Mapping[str, str]) -> str:
        return _required(headers, self.header)

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        given = hashlib.sha256(self._value(headers).encode("utf-8", "surrogateescape")).digest()
        for name, digest in self._digests:
            if hmac.compare_digest(digest, given):
                return Principal(self.scheme, name)
        raise Unauthenticated(f"{self.header} does not match any configured secret")


class BearerAuthenticator(SecretHeaderAuthenticator):
    """Static ``Authorization: Bearer <token>`` (registry notifications, MinIO webhooks)."""

    scheme = "bearer"

    def __init__(self, tokens: Secrets) -> None:
        super().__init__("Authorization", tokens)

    def _value(self, headers: Mapping[str, str]) -> str:
        return _bearer(headers)


class AllowAll:
    """Accepts every delivery, as subject ``anonymous``. For local development only."""

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        return Principal("none", "anonymous")

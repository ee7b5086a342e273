"""The credentials a registry (or its token realm) gets as `Authorization: Basic …`:
`StaticCredentials(user, password)` as configured, or `AccessTokenCredentials()`: Artifact
Registry's `oauth2accesstoken` user, whose password is an OAuth2 access token of
Application Default Credentials (`google.auth.default`, imported on first use), refreshed
when it has expired. `credentials_for(oci.username, oci.password)` picks one.

>>> credentials_for("oauth2accesstoken", "")  # doctest: +SKIP
<AccessTokenCredentials>
>>> credentials_for("bob", "s3cret").authorization()
'Basic Ym9iOnMzY3JldA=='
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from modelhooks.core.errors import ConfigError, Forbidden, Unavailable
from modelhooks.core.extras import importing

__all__ = [
    "CLOUD_PLATFORM",
    "OAUTH2_ACCESS_TOKEN",
    "AccessTokenCredentials",
    "Credentials",
    "StaticCredentials",
    "credentials_for",
]

OAUTH2_ACCESS_TOKEN = "oauth2accesstoken"  # Artifact Registry's user for an access token
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class Credentials(Protocol):
    """What the registry (or its token realm) gets as `Authorization: Basic …`."""

    @property
    def username(self) -> str: ...

    def authorization(self) -> str:
        """The `Basic …` header value (read when it is sent: it may change)."""
        ...


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


@dataclass(frozen=True)
class StaticCredentials:
    """A user and a password (or a long-lived token), as configured."""

    username: str
    password: str = field(repr=False)

    def authorization(self) -> str:
        return _basic(self.username, self.password)


class AccessTokenCredentials:
    """Artifact Registry's `oauth2accesstoken` user with an OAuth2 access token of
    Application Default Credentials as the password (`google.auth.default`, imported on
    first use), refreshed when it has expired. `credentials` replaces ADC (tests)."""

    username = OAUTH2_ACCESS_TOKEN

    def __init__(self, credentials: Any = None) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()

    def authorization(self) -> str:
        return _basic(self.username, self.access_token())

    def access_token(self) -> str:
        with self._lock:
            if self._credentials is None:
                self._credentials = _default_credentials()
            if not self._credentials.valid:  # no token yet, or expired (with google's margin)
                _refresh(self._credentials)
            return str(self._credentials.token)


def _default_credentials() -> Any:
    origin = f"oci.username={OAUTH2_ACCESS_TOKEN} with an empty oci.password"
    with importing("gcp", origin):
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    try:
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM])
    except DefaultCredentialsError as exc:
        raise ConfigError(f"{origin}: no Application Default Credentials ({exc})") from None
    return credentials


def _refresh(credentials: Any) -> None:
    from google.auth.exceptions import RefreshError, TransportError
    from google.auth.transport.requests import Request

    try:
        credentials.refresh(Request())
    except TransportError as exc:
        raise Unavailable(f"cannot refresh the Google access token: {exc}") from None
    except RefreshError as exc:
        raise Forbidden(f"Google refused to refresh the access token: {exc}") from None


def credentials_for(username: str, password: str) -> Credentials | None:
    """The credentials `oci.username` / `oci.password` (resolved) configure: none without a
    user; the ADC access token for `oauth2accesstoken` without a password."""
    if not username:
        return None
    if username == OAUTH2_ACCESS_TOKEN and not password:
        return AccessTokenCredentials()
    return StaticCredentials(username, password)

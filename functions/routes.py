"""Delivery authentication per route.

`ingress.auth` guards every path; `ingress.route_auth` overrides it for some paths, so one
`modelhooks serve` can take MinIO webhooks with a bearer token on `/minio-events` and
Pub/Sub pushes with OIDC on `/pubsub`:

    /minio-events=bearer:token=env:MINIO_TOKEN;/pubsub=oidc:aud=https://hooks.example.com

Routes are matched by exact path; each spec follows the grammar of `events.auth`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from events.auth import Authenticator, Principal, from_spec
from functions.errors import ConfigError

__all__ = ["RouteAuth"]


@dataclass(frozen=True)
class RouteAuth:
    default: Authenticator
    routes: Mapping[str, Authenticator]

    @classmethod
    def from_settings(cls, default: str, routes: str) -> RouteAuth:
        table: dict[str, Authenticator] = {}
        for part in filter(None, (p.strip() for p in routes.split(";"))):
            path, sep, spec = part.partition("=")
            if not sep or not path.startswith("/") or not spec:
                raise ConfigError(
                    f"MODELHOOKS_INGRESS_ROUTE_AUTH: {path or part!r} is not '/path=spec'"
                )
            table[path.rstrip("/") or "/"] = from_spec(
                spec, origin=f"MODELHOOKS_INGRESS_ROUTE_AUTH ({path})"
            )
        return cls(from_spec(default, origin="MODELHOOKS_INGRESS_AUTH"), table)

    def check(self, path: str, headers: Mapping[str, str], body: bytes) -> Principal:
        """Who sent this delivery; Unauthenticated when nobody we trust did."""
        authenticator = self.routes.get(path.rstrip("/") or "/", self.default)
        return authenticator(headers, body)

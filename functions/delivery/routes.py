"""Delivery authentication per route.

`ingress.auth` guards every path; `ingress.route_auth` overrides it for some paths, so one
`modelhooks serve` can take MinIO webhooks with a bearer token on `/minio-events` and
Pub/Sub pushes with OIDC on `/pubsub`:

    /minio-events=bearer:token=env:MINIO_TOKEN;/pubsub=oidc:aud=https://hooks.example.com

A route covers its path and everything below it (`/pubsub` guards `/pubsub/x`); the
longest route wins. Routes with an open default (`ingress.auth=none`) are refused at
start-up: every path no route names, `/functions/*` included, would stay open. Each spec
follows the grammar of `events.auth`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from modelhooks.core.errors import ConfigError
from modelhooks.events.auth import Authenticator, Principal, from_spec

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
        if table and default.strip() == "none":
            raise ConfigError(
                "MODELHOOKS_INGRESS_ROUTE_AUTH guards some paths while MODELHOOKS_INGRESS_AUTH="
                "none leaves every other path open (/functions/* too): set both"
            )
        return cls(from_spec(default, origin="MODELHOOKS_INGRESS_AUTH"), table)

    def check(self, path: str, headers: Mapping[str, str], body: bytes) -> Principal:
        """Who sent this delivery; Unauthenticated when nobody we trust did."""
        return self.for_path(path)(headers, body)

    def for_path(self, path: str) -> Authenticator:
        """The authenticator of the longest route that is `path` or a parent of it."""
        path = path.rstrip("/") or "/"
        while True:
            if path in self.routes:
                return self.routes[path]
            if path == "/" or "/" not in path:
                return self.default
            path = path.rsplit("/", 1)[0] or "/"

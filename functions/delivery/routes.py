"""Trust per route: who may send on a path (authentication) and what they may send there
(upstream kinds). A credential proves who sent a delivery; the route says what that sender
may send: a MinIO webhook route accepts S3 notifications, not canonical events.

`ingress.auth` guards every path; `ingress.route_auth` overrides it for some paths, so one
`modelhooks serve` can take MinIO webhooks with a bearer token on `/minio-events` and
Pub/Sub pushes with OIDC on `/pubsub`:

    /minio-events=bearer:token=env:MINIO_TOKEN;/pubsub=oidc:aud=https://hooks.example.com,email=push@p.iam.gserviceaccount.com

`ingress.route_kinds` says which upstream kinds (modelhooks.events.sources.KINDS, or `*`)
each path accepts:

    /minio-events=s3;/pubsub=gcs,artifact-registry;/replay=canonical

A path no kind route names accepts everything when it is unauthenticated (there is no
trust to bind: the local default), and every kind but `canonical` when it is authenticated:
canonical `dev.modelhooks.*` events come only through routes configured for them.

`ingress.route_namespaces` binds a path to a tenant: every event that comes through it
belongs to that namespace (an event naming another one is refused, one naming none gets
it), whatever its payload says:

    /team-a=team-a;/team-b=team-b

A route covers its path and everything below it (`/pubsub` guards `/pubsub/x`); the
longest route wins. Auth routes with an open default (`ingress.auth=none`) are refused at
start-up: every path no route names, `/functions/*` included, would stay open. Each spec
follows the grammar of `modelhooks.events.auth`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec

from modelhooks.core.errors import ConfigError, Forbidden
from modelhooks.events.auth import Authenticator, Principal, from_spec, shares, trust_of
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources import KINDS

__all__ = ["RouteAuth", "bind_tenant"]

T = TypeVar("T")
_NATIVE = frozenset(KINDS) - {"canonical"}


class RouteAuth(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    default: Authenticator
    routes: Mapping[str, Authenticator]
    kinds: Mapping[str, frozenset[str]] = msgspec.field(default_factory=dict)
    open_paths: frozenset[str] = frozenset()  # auth routes (and "" for the default) of `none`
    namespaces: Mapping[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def from_settings(
        cls, default: str, routes: str, kinds: str = "", namespaces: str = ""
    ) -> RouteAuth:
        table: dict[str, Authenticator] = {}
        pairs = _pairs(routes, "MODELHOOKS_INGRESS_ROUTE_AUTH", "/path=spec")
        open_paths = {""} if default.strip() == "none" else set()
        for path, spec in pairs:
            table[path] = from_spec(spec, origin=f"MODELHOOKS_INGRESS_ROUTE_AUTH ({path})")
            if spec.strip() == "none":
                open_paths.add(path)
        if table and default.strip() == "none":
            raise ConfigError(
                "MODELHOOKS_INGRESS_ROUTE_AUTH guards some paths while MODELHOOKS_INGRESS_AUTH="
                "none leaves every other path open (/functions/* too): set both"
            )
        kind_table: dict[str, frozenset[str]] = {}
        for path, names in _pairs(kinds, "MODELHOOKS_INGRESS_ROUTE_KINDS", "/path=kind,kind"):
            wanted = {n.strip() for n in names.split(",") if n.strip()}
            unknown = wanted - set(KINDS) - {"*"}
            if unknown:
                raise ConfigError(
                    f"MODELHOOKS_INGRESS_ROUTE_KINDS ({path}): unknown kind(s) "
                    f"{', '.join(sorted(unknown))}; known: {', '.join(KINDS)}, *"
                )
            kind_table[path] = frozenset(KINDS) if "*" in wanted else frozenset(wanted)
        tenants = dict(_pairs(namespaces, "MODELHOOKS_INGRESS_ROUTE_NAMESPACES", "/path=namespace"))
        fallback = from_spec(default, origin="MODELHOOKS_INGRESS_AUTH")
        _own_credentials(tenants, table, fallback, open_paths)
        return cls(fallback, table, kind_table, frozenset(open_paths), tenants)

    def check(self, path: str, headers: Mapping[str, str], body: bytes) -> Principal:
        """Who sent this delivery; Unauthenticated when nobody we trust did."""
        return self.for_path(path)(headers, body)

    def for_path(self, path: str) -> Authenticator:
        """The authenticator of the longest route that is `path` or a parent of it."""
        found = _longest(self.routes, path)
        return self.default if found is None else self.routes[found]

    def kinds_for(self, path: str) -> frozenset[str]:
        """The upstream kinds `path` accepts."""
        found = _longest(self.kinds, path)
        if found is not None:
            return self.kinds[found]
        auth_route = _longest(self.routes, path)
        is_open = (auth_route or "") in self.open_paths
        return frozenset(KINDS) if is_open else _NATIVE

    def admit_kind(self, path: str, kind: str | None) -> None:
        """Forbidden when a delivery of this upstream kind may not come through `path`."""
        if kind is None:
            return  # not a known upstream: translation refuses it with the reason
        allowed = self.kinds_for(path)
        if kind not in allowed:
            raise Forbidden(
                f"{kind} deliveries are not accepted on {path or '/'} "
                f"(this route accepts: {', '.join(sorted(allowed)) or 'nothing'}; "
                "see ingress.route_kinds)",
                kind=kind,
                path=path or "/",
            )


def bind_tenant(routes: RouteAuth, path: str, event: CanonicalEvent) -> CanonicalEvent:
    """The event as the route's tenant sends it: its namespace set, or Forbidden when the
    payload, or the subject (a Model's path: the Model notify acts on), names another one."""
    found = _longest(routes.namespaces, path)
    if found is None:
        return event
    tenant = routes.namespaces[found]
    data = event.data
    named = getattr(data, "namespace", None)
    model = None
    if event.subject:  # the Model notify acts on, wherever data is (a route bound to a tenant)
        from modelhooks.core.conditions import model_of_subject  # notify's: not at start

        model = model_of_subject(event.subject)
    for claimed in (named, model[0] if model else None):
        if claimed is not None and claimed != tenant:
            raise Forbidden(
                f"route {found} belongs to namespace {tenant!r}; the event names {claimed!r}",
                namespace=claimed,
                route_namespace=tenant,
            )
    if hasattr(data, "namespace") and named != tenant:
        return event.replace(data=data.replace(namespace=tenant))
    return event


def _own_credentials(
    tenants: Mapping[str, str],
    routes: Mapping[str, Authenticator],
    default: Authenticator,
    open_paths: set[str],
) -> None:
    """ConfigError when routes bound to different tenants take the same credential: a
    signature (HMAC, a token) covers a delivery's body, not the path it is posted to, so a
    delivery signed for one tenant's route, replayed to another's, was taken as that
    tenant's (and either tenant could send as the other). Compared by what each route's
    authenticator resolved (events.auth.trust_of: a digest of each secret, OIDC's issuer,
    audience and emails), not its spec's text: `env:A` and `env:B` holding one secret are
    one credential. Routes left open (`none`) have no trust to bind; an authenticated one
    needs a credential of its own (`ingress.route_auth`)."""
    bound = []
    for path, namespace in sorted(tenants.items()):
        route = _longest(routes, path)
        if (route or "") not in open_paths:
            bound.append((path, namespace, trust_of(default if route is None else routes[route])))
    for n, (path, namespace, trust) in enumerate(bound):
        paths = {path: namespace} | {
            p: ns for p, ns, t in bound[n + 1 :] if ns != namespace and shares(trust, t)
        }
        if len(paths) > 1:
            named = ", ".join(f"{p} ({ns})" for p, ns in sorted(paths.items()))
            raise ConfigError(
                f"MODELHOOKS_INGRESS_ROUTE_NAMESPACES: routes of different namespaces take the "
                f"same credential ({named}): a delivery signed for one would be taken on the "
                "other; give each its own in MODELHOOKS_INGRESS_ROUTE_AUTH"
            )


def _pairs(spec: str, setting: str, shape: str) -> list[tuple[str, str]]:
    pairs = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        path, sep, value = part.partition("=")
        if not sep or not path.startswith("/") or not value:
            raise ConfigError(f"{setting}: {path or part!r} is not '{shape}'")
        pairs.append((path.rstrip("/") or "/", value))
    return pairs


def _longest(table: Mapping[str, T], path: str) -> str | None:
    """The longest key of `table` that is `path` or a parent of it."""
    path = path.rstrip("/") or "/"
    while True:
        if path in table:
            return path
        if path == "/" or "/" not in path:
            return None
        path = path.rsplit("/", 1)[0] or "/"

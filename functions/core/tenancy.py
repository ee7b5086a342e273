"""Tenancy: a namespace acts only on the buckets and repositories allowed for it.

Rules come from one setting, `namespace=pattern,pattern;namespace=…` (glob patterns over
`gs://bucket`, `s3://bucket`, `oci://host/repository` or a bare bucket/repository name).
An event from an upstream that does not know namespaces (a bucket notification) gets the
namespace that owns its location; an event that names its namespace must stay inside it.

>>> t = Tenancy.parse("team-a=models-a,gs://shared-*")
>>> t.owner("gs://models-a/models/m/1/")
'team-a'
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from urllib.parse import urlsplit

import msgspec

from modelhooks.core.errors import BadRequest, ConfigError, Forbidden
from modelhooks.events.model import CanonicalEvent

__all__ = ["Tenancy"]


class Tenancy(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    rules: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Tenancy:
        rules = []
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            ns, sep, pats = part.partition("=")
            patterns = tuple(_pattern(p.strip()) for p in pats.split(",") if p.strip())
            if not sep or not ns.strip() or not patterns:
                raise ConfigError(
                    f"MODELHOOKS_TENANCY_TENANTS: {part!r} is not 'namespace=pattern,…'"
                )
            rules.append((ns.strip(), patterns))
        return cls(tuple(rules))

    def owner(self, uri: str) -> str | None:
        for ns, _ in self.rules:
            if self.allows(ns, uri):
                return ns
        return None

    def allows(self, namespace: str, uri: str) -> bool:
        location = _location(uri)
        for ns, patterns in self.rules:
            if ns == namespace:
                bare = location.split("://", 1)[-1]
                return any(fnmatchcase(location, p) or fnmatchcase(bare, p) for p in patterns)
        return False

    def admit(self, event: CanonicalEvent) -> CanonicalEvent:
        """The event with its namespace resolved, or Forbidden.

        An event that names no namespace (a bucket or registry notification) gets the one
        that owns its location; one that names a namespace must stay inside it. A Model's
        location is its spec.source.
        """
        uri = _uri_of(event.data) if self.rules else None
        if uri is None:
            return event
        namespace = getattr(event.data, "namespace", None)
        if namespace is None:
            owner = self.owner(uri)
            if owner is None:
                raise Forbidden(
                    f"no namespace may act on {_location(uri)}", location=_location(uri)
                )
            return event.replace(data=event.data.replace(namespace=owner))
        self.require(namespace, uri)
        return event

    def require(self, namespace: str, uri: str) -> None:
        """Forbidden when tenancy is on and `namespace` may not act on the bucket or
        repository `uri` names: the one rule of ingress (`admit`) and admission alike,
        checked before anything there is read."""
        if self.rules and not self.allows(namespace, uri):
            raise Forbidden(
                f"namespace {namespace!r} may not act on {_location(uri)}",
                namespace=namespace,
                location=_location(uri),
            )


def _pattern(pattern: str) -> str:
    """A pattern as `allows` matches it. A gs:// or s3:// location is its bucket, so
    `gs://b/` and `gs://b/*` (the bucket's every object) are `gs://b`: they matched no
    location, refusing every event of the bucket they name. A path below a bucket would
    match nothing either: a ConfigError naming it. An oci:// pattern ending in '/' names
    the repositories below it.

    >>> _pattern("gs://models/"), _pattern("oci://reg:5000/ml/")
    ('gs://models', 'oci://reg:5000/ml/*')
    """
    scheme, sep, rest = pattern.partition("://")
    if sep and scheme.lower() == "oci" and pattern.endswith("/"):
        return f"{pattern}*"  # 'oci://reg/ml/': the repositories under ml/ (it matched none)
    if not sep or scheme.lower() not in ("gs", "s3"):
        return pattern
    bucket, _, path = rest.partition("/")
    if path.strip("/") not in ("", "*", "**"):
        raise ConfigError(
            f"MODELHOOKS_TENANCY_TENANTS: {pattern!r}: a {scheme}:// pattern names buckets "
            f"(tenancy is per bucket), not {path!r} inside one"
        )
    return f"{scheme}://{bucket}"


def _uri_of(data: object) -> str | None:
    """The location an event's functions act on: its `uri`, or a Model's spec.source (a
    Model in one namespace naming another's bucket was registered, its bucket listed, and
    its repository pruned or cleaned up by functions that did not check it themselves).
    None for a refusal (an `artifact.purged` that says `refused`): it acted nowhere, and what
    it tells, the refusal, goes on the Model of its own namespace (a Model naming another
    tenant's bucket is told so, not refused again)."""
    if getattr(data, "refused", ""):
        return None
    uri = getattr(data, "uri", None)
    if isinstance(uri, str):
        return uri
    spec = getattr(data, "spec", None)
    source = spec.get("source") if isinstance(spec, dict) else None
    if not source:
        return None  # no source: nothing located (ApiServerSource mode Reference)
    from modelhooks.core.sources import model_source  # not at start: most events have a uri

    try:
        return model_source(source).uri
    except BadRequest:
        return None  # the function refuses it, naming the field


def _location(uri: str) -> str:
    """`gs://bucket/…` → `gs://bucket`; `oci://host/repo@sha256:…` → `oci://host/repo`."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    if scheme == "oci":
        name = rest.split("@")[0]
        host, _, path = name.partition("/")
        return f"oci://{host}/{path.split(':')[0]}"
    if scheme.lower() in ("gs", "s3"):  # the bucket as the stores read it, or a 400
        from modelhooks.core.stores import split_uri  # not at start: prune's needs none

        scheme, bucket, _ = split_uri(uri)
        return f"{scheme}://{bucket}"
    try:
        parts = urlsplit(uri)
    except ValueError:
        raise BadRequest(f"{uri!r} is not a valid URI", uri=uri) from None
    return f"{parts.scheme}://{parts.netloc}"

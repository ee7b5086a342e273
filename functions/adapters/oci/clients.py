"""`OciClients`: the registry client for each `oci://` reference events name, built by the
composition root with the configured credentials: a `DistributionRegistry` (the OCI
distribution API) for every registry, and for Artifact Registry hosts
(`LOCATION-docker.pkg.dev`) the `ArtifactRegistry` adapter of its own API where the
`OciRegistry` port is enough (retention: history in one listing, untagged manifests,
batched deletes).

>>> client, repo, ref = OciClients().for_uri("oci://127.0.0.1:5000/models/bert:v1")  # doctest: +SKIP
>>> registry, repo, _ = OciClients().registry_for("oci://us-docker.pkg.dev/p/r/bert")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from modelhooks.core.extras import missing

# The clients' modules are imported when an event first names a registry: a function built
# with OciClients (register, sign) whose first event is a bucket's pays nothing for them.
if TYPE_CHECKING:
    import urllib.request

    from modelhooks.adapters.oci.auth import RegistryAuth
    from modelhooks.adapters.oci.credentials import Credentials
    from modelhooks.adapters.oci.distribution import DistributionRegistry
    from modelhooks.core.ports import OciRegistry

__all__ = ["OciClients"]

_log = logging.getLogger("modelhooks.oci")

ARTIFACT_REGISTRY_SUFFIX = "-docker.pkg.dev"


class OciClients:
    """Clients for the registries events name, all with the same credentials (none by
    default; `auth`: (user, password) or `Credentials`, e.g. Artifact Registry's access
    token): plain HTTP for loopback registries, HTTPS otherwise. The clients of one host
    share its tokens. Connections go only to public addresses unless `allow_local`
    (modelhooks.adapters.net). `credential_hosts`: the host patterns (`host[:port]`,
    `*.domain`: `modelhooks.adapters.oci.auth.parse_hosts`) of the registries and token
    realms the credentials go to, the others asked anonymously (None: every one);
    `registry_realms`: a realm gets them when the registry naming it does, whatever its host
    (the credentials are for one registry, which says where its tokens come from)."""

    def __init__(
        self,
        auth: tuple[str, str] | Credentials | None = None,
        *,
        allow_local: bool = True,
        allowed_hosts: frozenset[str] = frozenset(),
        artifact_registry_endpoint: str | None = None,
        artifact_registry_credentials: Any = None,
        credential_hosts: Collection[str] | None = None,
        registry_realms: bool = False,
    ) -> None:
        if isinstance(auth, tuple):  # the credentials' module only with some (cold start)
            from modelhooks.adapters.oci.credentials import StaticCredentials

            auth = StaticCredentials(*auth)
        self.auth, self.credential_hosts = auth, credential_hosts
        self.registry_realms = registry_realms
        self.allow_local, self.allowed_hosts = allow_local, allowed_hosts
        self._opener: urllib.request.OpenerDirector | None = None
        self._hosts: dict[str, RegistryAuth] = {}  # base URL → its auth state (tokens)
        self._lock = threading.Lock()
        # Artifact Registry's API (None: its public endpoint, artifact_registry.ENDPOINT;
        # empty: none, its Docker path like any registry's); credentials:
        # Application Default Credentials unless given (tests: anonymous, to a stand-in)
        self.gar_endpoint = artifact_registry_endpoint
        self.gar_credentials = artifact_registry_credentials

    def with_auth(self, auth: tuple[str, str] | Credentials) -> OciClients:
        """Clients for the same registries, under the same address rules, acting with `auth`
        instead (a Model's own Secret, for cleanup). Artifact Registry hosts go through
        their Docker path then, with `auth` too: never the process's own credentials."""
        return OciClients(
            auth,
            allow_local=self.allow_local,
            allowed_hosts=self.allowed_hosts,
            artifact_registry_endpoint="",
        )

    def for_uri(self, uri: str) -> tuple[DistributionRegistry, str, str]:
        """(client, repository, tag or digest) for an `oci://` URI."""
        from modelhooks.adapters.oci.auth import RegistryAuth
        from modelhooks.adapters.oci.distribution import DistributionRegistry, parse_uri

        host, repo, ref = parse_uri(uri)
        loopback = host.rsplit(":", 1)[0] in ("127.0.0.1", "localhost", "[::1]")
        base = f"{'http' if loopback else 'https'}://{host}"
        with self._lock:
            if self._opener is None:  # built on first use (cold start)
                from modelhooks.adapters.net import guarded_opener

                self._opener = guarded_opener(
                    allow_local=self.allow_local, allowed_hosts=self.allowed_hosts
                )
            auth = self._hosts.get(base)
            if auth is None:
                if len(self._hosts) >= 256:  # hosts come from events: keep the cache bounded
                    del self._hosts[next(iter(self._hosts))]
                auth = self._hosts[base] = RegistryAuth(
                    base,
                    self.auth,
                    self._opener.open,
                    credential_hosts=self.credential_hosts,
                    registry_realms=self.registry_realms,
                )
        return DistributionRegistry(base, auth=auth, opener=self._opener), repo, ref

    def registry_for(self, uri: str) -> tuple[OciRegistry, str, str]:
        """(the `OciRegistry` port, repository, tag or digest) for an `oci://` URI: Artifact
        Registry's API for its hosts (when an endpoint is configured and its client, the gcp
        extra, is installed), the distribution API otherwise."""
        from modelhooks.adapters.oci.distribution import parse_uri

        docker, repo, ref = self.for_uri(uri)
        host = parse_uri(uri)[0]
        if self.gar_endpoint == "" or not host.endswith(ARTIFACT_REGISTRY_SUFFIX):
            return docker, repo, ref
        if missing("gcp"):  # an event named the host: no start-up check could ask for it
            _log.warning(
                "%s: Artifact Registry's API needs the gcp extra (pip install "
                "'modelhooks[gcp]'); using its Docker path",
                host,
            )
            return docker, repo, ref
        from modelhooks.adapters.oci.artifact_registry import ENDPOINT, ArtifactRegistry

        endpoint = self.gar_endpoint or ENDPOINT
        registry = ArtifactRegistry(
            host, docker=docker, endpoint=endpoint, credentials=self.gar_credentials
        )
        return registry, repo, ref

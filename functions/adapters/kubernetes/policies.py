"""VerificationPolicies from the cluster (the PolicySource port): a namespace's own and every
ClusterVerificationPolicy.

Served from memory, kept by a list + watch of both resources in a background thread (as an
informer does): a review costs no apiserver call, and a policy created, changed or deleted
counts as soon as its watch event arrives. Until both are listed, whenever a watch fails,
and when asked `fresh` (admission does before it denies, so a policy created a moment ago
is never missed), policies are listed for the review instead.
Verdicts are cached by the policy's uid + resourceVersion, so a changed policy is a new key.

>>> source = kubernetes_policies("")  # doctest: +SKIP
>>> source.policies("team-a")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from modelhooks.adapters.kubernetes.connection import Connection
from modelhooks.core.errors import ConfigError, Unavailable
from modelhooks.core.logs import log
from modelhooks.core.verification import Policy

__all__ = ["GROUP", "KubernetesPolicies", "NoPolicies", "kubernetes_policies"]

GROUP, VERSION = "modelhooks.dev", "v1alpha1"
VARIABLE = "MODELHOOKS_ADMISSION_KUBECONFIG"
# (group, version) of each resource read as policies; MVO's ModelValidations are honoured
# where MVO's CRD is installed (absent: none, listed again now and then)
RESOURCES = {
    "verificationpolicies": (GROUP, VERSION),
    "clusterverificationpolicies": (GROUP, VERSION),
    "modelvalidations": ("ml.sigstore.dev", "v1alpha1"),
}
PLURALS = tuple(RESOURCES)
_ABSENT_RETRY = 30.0  # seconds before an absent CRD (MVO's) is listed again


class NoPolicies:
    """Outside a cluster: no policy, so every model reference is refused (fail-closed)."""

    def policies(self, namespace: str, *, fresh: bool = False) -> list[Policy]:
        return []


def kubernetes_policies(
    kubeconfig: str = "", *, env: Mapping[str, str] | None = None
) -> KubernetesPolicies | NoPolicies:
    connection = Connection.configured(kubeconfig, variable=VARIABLE, needs="admission", env=env)
    return NoPolicies() if connection is None else KubernetesPolicies(connection=connection)


class KubernetesPolicies:
    def __init__(
        self,
        api_client: Any = None,
        *,
        connection: Connection | None = None,
        timeout: float = 5.0,
        watch: bool = True,
    ) -> None:
        self._connection = connection or Connection(
            api_client, variable=VARIABLE, needs="admission"
        )
        self._timeout = timeout
        self._watch = watch
        self._lock = threading.Lock()
        self._known: dict[str, dict[tuple[str, str], Policy]] = {p: {} for p in PLURALS}
        self._synced: set[str] = set()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    def policies(self, namespace: str, *, fresh: bool = False) -> list[Policy]:
        self._start()
        with self._lock:
            if self._synced == set(PLURALS) and not fresh:
                return self._of(namespace, self._known)
        return self._of(namespace, {p: self._list(p) for p in PLURALS})

    @staticmethod
    def _of(namespace: str, known: Mapping[str, Mapping[tuple[str, str], Policy]]) -> list[Policy]:
        """The namespace's policies, then the cluster-wide ones, in name order."""
        found = []
        for plural in PLURALS:
            for (ns, _), policy in sorted(known[plural].items()):
                if ns in (namespace, "") and (ns == "") == (
                    plural == "clusterverificationpolicies"
                ):
                    found.append(policy)
        return sorted(found, key=lambda p: (p.namespace == "", p.kind, p.name))

    def _list(self, plural: str) -> dict[tuple[str, str], Policy]:
        """One resource listed now (before the watches are synced, while one fails, or
        asked fresh); an absent CRD (MVO not installed) lists nothing."""
        return self._listed(plural)[0]

    def _listed(self, plural: str) -> tuple[dict[tuple[str, str], Policy], str]:
        from kubernetes import client

        custom = client.CustomObjectsApi(self._connection.api_client)
        group, version = RESOURCES[plural]
        try:
            listed = custom.list_cluster_custom_object(
                group, version, plural, _request_timeout=self._timeout
            )
        except client.ApiException as e:
            if e.status == 404 and plural == "modelvalidations":
                return {}, ""
            raise Unavailable(f"listing {plural}: HTTP {e.status} {e.reason}") from None
        except Exception as e:  # urllib3 timeouts, connection refused
            raise Unavailable(f"listing {plural}: {e}") from None
        parse = _model_validation if plural == "modelvalidations" else _policy
        known = {_key(d): p for d in listed.get("items", []) if (p := parse(d))}
        return known, str(listed["metadata"]["resourceVersion"])

    def _start(self) -> None:
        if not self._watch or self._threads:
            return
        with self._lock:
            if self._threads:
                return
            for plural in PLURALS:
                thread = threading.Thread(
                    target=self._follow, args=(plural,), name=f"watch-{plural}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _follow(self, plural: str) -> None:
        """List, then watch from that resourceVersion; on any failure, unsynced (reviews
        list for themselves) until the next list succeeds."""
        from kubernetes import client, watch

        custom = client.CustomObjectsApi(self._connection.api_client)
        group, version = RESOURCES[plural]
        while not self._stopped.is_set():
            try:
                known, resource_version = self._listed(plural)
                with self._lock:
                    self._known[plural] = known
                    self._synced.add(plural)
                if not resource_version:  # an absent CRD: look again later
                    self._stopped.wait(_ABSENT_RETRY)
                    continue
                stream = watch.Watch().stream(
                    custom.list_cluster_custom_object,
                    group,
                    version,
                    plural,
                    resource_version=resource_version,
                    timeout_seconds=300,
                )
                for event in stream:
                    if self._stopped.is_set():
                        return
                    self._apply(plural, event)
            except Exception as e:  # the apiserver went away, 410 Gone, …: list again
                with self._lock:
                    self._synced.discard(plural)
                log(logging.WARNING, "watching verification policies", plural=plural, error=str(e))
                self._stopped.wait(1.0)

    def _apply(self, plural: str, event: Mapping[str, Any]) -> None:
        kind, doc = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise Unavailable(f"watch of {plural}: {doc.get('message', doc)}")
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK
        with self._lock:
            parse = _model_validation if plural == "modelvalidations" else _policy
            if kind == "DELETED":
                self._known[plural].pop(_key(doc), None)
            elif (policy := parse(doc)) is not None:
                self._known[plural][_key(doc)] = policy
            else:
                self._known[plural].pop(_key(doc), None)

    def close(self) -> None:
        self._stopped.set()
        self._connection.close()


def _key(doc: Mapping[str, Any]) -> tuple[str, str]:
    meta = doc.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _model_validation(doc: Mapping[str, Any]) -> Policy | None:
    try:
        return Policy.from_model_validation(doc)
    except (KeyError, TypeError, AttributeError) as e:
        log(logging.WARNING, "ModelValidation skipped", error=str(e))
        return None


def _policy(doc: Mapping[str, Any]) -> Policy | None:
    try:
        return Policy.from_resource(doc)
    except (ConfigError, KeyError, TypeError) as e:  # the CRD refuses these; skipped
        log(logging.WARNING, "verification policy skipped", error=str(e))
        return None

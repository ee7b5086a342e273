"""`KubernetesCluster`: the `Cluster` port on the Kubernetes API (the `kubernetes` client,
imported on first use), through `notify.kubeconfig` or the pod's in-cluster configuration.
Each call is a JSON request through the client's pool and credentials (`kube_client.request`,
not the generated API methods: their CPU was most of notify's).

- status: server-side apply on the status subresource (field manager `modelhooks-notify`,
  forced), with the resourceVersion read as a precondition (409 → Conflict);
- finalizers: a JSON patch whose first operation tests the list read (or, when there is
  none, the resourceVersion), so a concurrent writer's finalizer is never lost: a failed
  test (the API server answers 422 Invalid, without details) reads again and retries;
- Events: events.k8s.io/v1, created under their deterministic name (409 = recorded already;
  none in a namespace being deleted, where the API server creates nothing);
- rollout: merge patches on Deployments (apps/v1) and InferenceServices
  (serving.kserve.io/v1beta1; a cluster without KServe has none).

>>> cluster = kubernetes_cluster("/etc/modelhooks/kubeconfig")  # doctest: +SKIP
>>> cluster.get_model("ml", "bert")["status"]["conditions"]  # doctest: +SKIP
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from modelhooks.adapters.kube_client import path, request
from modelhooks.adapters.kubernetes.connection import Connection
from modelhooks.core.conditions import (
    FIELD_MANAGER,
    MODEL_ANNOTATION,
    REPORTING_CONTROLLER,
    ROLLOUT_ANNOTATION,
    ModelEvent,
)
from modelhooks.core.errors import (
    NAMESPACE_TERMINATING,
    BadRequest,
    Conflict,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unavailable,
)

__all__ = ["VARIABLE", "KubernetesCluster", "kubernetes_cluster"]

VARIABLE = "MODELHOOKS_NOTIFY_KUBECONFIG"
GROUP, VERSION, PLURAL = "modelhooks.dev", "v1alpha1", "models"
KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")
# what a Ready Model rolls out: kind, API, where the annotations of its pods are (a new
# annotation there is a new revision: a Deployment's pod template, an InferenceService's
# predictor), and whether its API may be missing (KServe need not be installed)
_ROLLED = (
    ("Deployment", ("apps", "v1", "deployments"), ("spec", "template", "metadata"), False),
    ("InferenceService", KSERVE, ("spec", "predictor"), True),
)
_APPLY = "application/apply-patch+yaml"
_JSON_PATCH = "application/json-patch+json"
_MERGE = "application/merge-patch+json"
_ATTEMPTS = 5
T = TypeVar("T")


def kubernetes_cluster(
    kubeconfig: str = "", *, env: Mapping[str, str] | None = None
) -> KubernetesCluster | None:
    """The cluster through `kubeconfig`, else the in-cluster configuration; None outside a
    cluster without a kubeconfig (ConfigError at start-up when the file is missing)."""
    connection = Connection.configured(kubeconfig, variable=VARIABLE, needs="notify", env=env)
    return None if connection is None else KubernetesCluster(connection=connection)


class KubernetesCluster:
    """`instance` is the Events' reportingInstance (default: this host's name, the pod's)."""

    def __init__(
        self,
        api_client: Any = None,
        *,
        connection: Connection | None = None,
        timeout: float = 10.0,
        instance: str = "",
    ) -> None:
        self._connection = connection or Connection(api_client, variable=VARIABLE, needs="notify")
        self._timeout = timeout
        self._instance = (instance or socket.gethostname())[:128]

    def _request(
        self,
        what: str,
        method: str,
        url_path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request on the hot path (`kube_client.request`: the client's pool and
        credentials, not its generated methods); errors as `_call` says them."""
        return self._call(
            what,
            lambda: dict(
                request(
                    self._connection.api_client,
                    method,
                    url_path,
                    query=query,
                    body=body,
                    content_type=content_type,
                    timeout=self._timeout,
                )
            ),
        )

    def get_model(
        self, namespace: str, name: str, *, cached: bool = False
    ) -> dict[str, Any] | None:
        """`cached`: from the API server's watch cache (resourceVersion=0: no read of etcd)."""
        try:
            return self._request(
                f"Model {namespace}/{name}",
                "GET",
                _model_path(namespace, name),
                query={"resourceVersion": "0"} if cached else None,
            )
        except NotFound:
            return None

    def list_models(self, namespace: str) -> list[dict[str, Any]]:
        found = self._request(f"Models in {namespace}", "GET", _model_path(namespace))
        return [dict(m) for m in found.get("items", [])]

    def apply_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Model",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
            "status": dict(status),
        }
        return self._request(
            f"status of Model {namespace}/{name}",
            "PATCH",
            _model_path(namespace, f"{name}/status"),
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            body=body,
            content_type=_APPLY,
        )

    def add_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        return self._finalizers(namespace, name, finalizer, add=True)

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        return self._finalizers(namespace, name, finalizer, add=False)

    def _finalizers(self, namespace: str, name: str, finalizer: str, *, add: bool) -> bool:
        what = f"finalizers of Model {namespace}/{name}"
        last = BadRequest(what)
        for _ in range(_ATTEMPTS):
            model = self.get_model(namespace, name)
            if model is None:
                return False
            meta = model["metadata"]
            present = list(meta.get("finalizers") or [])
            if (finalizer in present) == add or (add and meta.get("deletionTimestamp")):
                return False  # there (or gone) already; a deleting object takes none (422)
            if present:  # test the list read, then change it
                ops: list[dict[str, Any]] = [
                    {"op": "test", "path": "/metadata/finalizers", "value": present}
                ]
                if add:
                    ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
                else:  # every time it is there (the API server takes a name twice), last
                    # first so the indexes hold: one left would hold the deletion for ever
                    ops += [
                        {"op": "remove", "path": f"/metadata/finalizers/{i}"}
                        for i in reversed(range(len(present)))
                        if present[i] == finalizer
                    ]
            else:  # no list to test: the object must not have changed at all
                ops = [
                    {
                        "op": "test",
                        "path": "/metadata/resourceVersion",
                        "value": meta["resourceVersion"],
                    },
                    {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
                ]
            try:
                self._request(
                    what, "PATCH", _model_path(namespace, name), body=ops, content_type=_JSON_PATCH
                )
                return True
            except BadRequest as exc:  # 422 Invalid, no details: the test op failed, as
                last = exc  # someone else wrote in between; read again
                continue
            except NotFound:
                return False
        raise Unavailable(f"the {what} kept changing; retry later ({last.message})")

    def record(self, event: ModelEvent) -> bool:
        at = event.time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": event.namespace},
            "eventTime": at,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": event.action,
            "reason": event.reason,
            "note": _note(event.note),
            "type": event.type,
            "regarding": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Model",
                "namespace": event.namespace,
                "name": event.model,
                **({"uid": event.uid} if event.uid else {}),
            },
        }
        # untyped on purpose: the typed EventsV1Api reformats eventTime without the
        # microseconds a MicroTime must have
        try:
            self._request(
                f"Event {event.namespace}/{event.name}",
                "POST",
                path("events.k8s.io", "v1", "events", namespace=event.namespace),
                body=body,
            )
        except Conflict:
            return False  # recorded by an earlier delivery
        except Forbidden as exc:
            if exc.details.get("reason") == NAMESPACE_TERMINATING:
                return False  # nothing can be, and its Models go with it (see api_error)
            raise
        return True

    def roll_out(self, namespace: str, model: str, version: str) -> list[str]:
        changed = []
        for kind, (group, api_version, plural), pods, optional in _ROLLED:
            try:
                found = self._request(
                    f"{kind}s in {namespace}",
                    "GET",
                    path(group, api_version, plural, namespace=namespace),
                )
            except NotFound:
                if not optional:
                    raise
                continue  # its API is not installed
            for obj in found.get("items") or []:
                meta, template = obj.get("metadata") or {}, obj
                for key in pods:
                    template = template.get(key) or {}
                if (meta.get("annotations") or {}).get(MODEL_ANNOTATION) != model:
                    continue
                if (template.get("annotations") or {}).get(ROLLOUT_ANNOTATION) == version:
                    continue
                patch: dict[str, Any] = {"annotations": {ROLLOUT_ANNOTATION: version}}
                for key in reversed(pods):
                    patch = {key: patch}
                self._request(
                    f"{kind} {namespace}/{meta['name']}",
                    "PATCH",
                    path(group, api_version, plural, meta["name"], namespace=namespace),
                    body=patch,
                    content_type=_MERGE,
                )
                changed.append(f"{kind}/{meta['name']}")
        return changed

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except ModelhooksError:
            raise
        except Exception as exc:  # ApiException, urllib3 connection errors, timeouts
            raise api_error(exc, what) from None

    def close(self) -> None:
        self._connection.close()


def _note(text: str) -> str:
    """An Event's note as the API server takes it: at most 1024 bytes of UTF-8 (not
    characters: a note of 1,000 'é' was refused, 422, notify's answer a 400), cut on a
    character."""
    return text.encode()[:1024].decode(errors="ignore")


def _model_path(namespace: str, name: str = "") -> str:
    return path(GROUP, VERSION, PLURAL, name, namespace=namespace)


def api_error(exc: Exception, what: str) -> ModelhooksError:
    """The modelhooks error for a kubernetes ApiException (or connection error) on `what`."""
    status = getattr(exc, "status", None)
    body = str(getattr(exc, "body", "") or "")
    if status == 404:
        return NotFound(f"{what}: not found")
    if status == 403 and NAMESPACE_TERMINATING in body:
        # NamespaceLifecycle: a namespace being deleted takes no new object (an Event), while
        # its Models' finalizers and status are still written: not notify's role
        return Forbidden(
            f"the Kubernetes API refused {what}: its namespace is being deleted",
            reason=NAMESPACE_TERMINATING,
        )
    if status == 403:
        return Forbidden(
            f"notify may not act on {what}: its ServiceAccount modelhooks-notify lacks the "
            "permission (infra/k8s/rbac/notify.yaml; rollouts need the ClusterRole "
            "modelhooks-notify-rollout bound in the namespace)"
        )
    if status == 409:
        return Conflict(f"{what} changed concurrently")
    if status in (400, 422):
        return BadRequest(f"the Kubernetes API refused {what}: {body[:500]}")
    if status == 429:
        return Throttled(f"the Kubernetes API throttled {what}")
    # 401 (a rotated or expired token: the client reloads it), 5xx, connection errors
    return Unavailable(f"the Kubernetes API failed on {what}: {status or exc}")

"""`KubernetesCluster`: the `Cluster` port on the Kubernetes API (the `kubernetes` client,
imported on first use), through `notify.kubeconfig` or the pod's in-cluster configuration.

- status: server-side apply on the status subresource (field manager `modelhooks-notify`,
  forced), with the resourceVersion read as a precondition (409 → Conflict);
- finalizers: a JSON patch whose first operation tests the list read (or, when there is
  none, the resourceVersion), so a concurrent writer's finalizer is never lost: a failed
  test (the API server answers 422 Invalid, without details) reads again and retries;
- Events: events.k8s.io/v1, created under their deterministic name (409 = recorded already);
- rollout: merge patches on Deployments (apps/v1) and InferenceServices
  (serving.kserve.io/v1beta1; a cluster without KServe has none).

>>> cluster = kubernetes_cluster("/etc/modelhooks/kubeconfig")  # doctest: +SKIP
>>> cluster.get_model("ml", "bert")["status"]["conditions"]  # doctest: +SKIP
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from modelhooks.adapters.kubernetes.connection import Connection
from modelhooks.core.conditions import (
    FIELD_MANAGER,
    MODEL_ANNOTATION,
    REPORTING_CONTROLLER,
    ROLLOUT_ANNOTATION,
    ModelEvent,
)
from modelhooks.core.errors import (
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

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._connection.api_client)

    def get_model(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call(
                f"Model {namespace}/{name}",
                lambda: dict(
                    self._custom().get_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self._timeout
                    )
                ),
            )
        except NotFound:
            return None

    def list_models(self, namespace: str) -> list[dict[str, Any]]:
        found = self._call(
            f"Models in {namespace}",
            lambda: self._custom().list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, _request_timeout=self._timeout
            ),
        )
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
        return self._call(
            f"status of Model {namespace}/{name}",
            lambda: dict(
                self._custom().patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    body,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type=_APPLY,
                    _request_timeout=self._timeout,
                )
            ),
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
            if (finalizer in present) == add:
                return False
            if present:  # test the list read, then change it
                ops: list[dict[str, Any]] = [
                    {"op": "test", "path": "/metadata/finalizers", "value": present}
                ]
                if add:
                    ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
                else:
                    index = present.index(finalizer)
                    ops.append({"op": "remove", "path": f"/metadata/finalizers/{index}"})
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
                self._call(
                    what,
                    partial(
                        self._custom().patch_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        namespace,
                        PLURAL,
                        name,
                        ops,
                        _content_type=_JSON_PATCH,
                        _request_timeout=self._timeout,
                    ),
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
            "note": event.note[:1024],
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
            self._call(
                f"Event {event.namespace}/{event.name}",
                lambda: self._custom().create_namespaced_custom_object(
                    "events.k8s.io",
                    "v1",
                    event.namespace,
                    "events",
                    body,
                    _request_timeout=self._timeout,
                ),
            )
        except Conflict:
            return False  # recorded by an earlier delivery
        return True

    def roll_out(self, namespace: str, model: str, version: str) -> list[str]:
        from kubernetes import client

        changed = []
        apps = client.AppsV1Api(self._connection.api_client)
        deployments = self._call(
            f"Deployments in {namespace}",
            lambda: apps.list_namespaced_deployment(namespace, _request_timeout=self._timeout),
        )
        for d in deployments.items:
            template = d.spec.template.metadata
            now = (template.annotations or {}) if template else {}
            if (d.metadata.annotations or {}).get(MODEL_ANNOTATION) != model:
                continue
            if now.get(ROLLOUT_ANNOTATION) == version:
                continue
            patch = {
                "spec": {"template": {"metadata": {"annotations": {ROLLOUT_ANNOTATION: version}}}}
            }
            self._call(
                f"Deployment {namespace}/{d.metadata.name}",
                partial(
                    apps.patch_namespaced_deployment,
                    d.metadata.name,
                    namespace,
                    patch,
                    _content_type=_MERGE,
                    _request_timeout=self._timeout,
                ),
            )
            changed.append(f"Deployment/{d.metadata.name}")
        return changed + self._roll_out_inference_services(namespace, model, version)

    def _roll_out_inference_services(self, namespace: str, model: str, version: str) -> list[str]:
        try:
            found = self._call(
                f"InferenceServices in {namespace}",
                lambda: self._custom().list_namespaced_custom_object(
                    *KSERVE[:2], namespace, KSERVE[2], _request_timeout=self._timeout
                ),
            )
        except NotFound:  # KServe is not installed
            return []
        changed = []
        for isvc in found.get("items", []):
            meta, predictor = isvc.get("metadata", {}), isvc.get("spec", {}).get("predictor", {})
            if (meta.get("annotations") or {}).get(MODEL_ANNOTATION) != model:
                continue
            if (predictor.get("annotations") or {}).get(ROLLOUT_ANNOTATION) == version:
                continue
            # the predictor's annotations go on its pods: a new revision rolls out
            patch = {"spec": {"predictor": {"annotations": {ROLLOUT_ANNOTATION: version}}}}
            self._call(
                f"InferenceService {namespace}/{meta['name']}",
                partial(
                    self._custom().patch_namespaced_custom_object,
                    *KSERVE[:2],
                    namespace,
                    KSERVE[2],
                    meta["name"],
                    patch,
                    _content_type=_MERGE,
                    _request_timeout=self._timeout,
                ),
            )
            changed.append(f"InferenceService/{meta['name']}")
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


def api_error(exc: Exception, what: str) -> ModelhooksError:
    """The modelhooks error for a kubernetes ApiException (or connection error) on `what`."""
    status = getattr(exc, "status", None)
    body = str(getattr(exc, "body", "") or "")
    if status == 404:
        return NotFound(f"{what}: not found")
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

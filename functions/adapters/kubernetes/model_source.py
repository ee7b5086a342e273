"""`modelhooks watch-models`: a local stand-in for Knative's ApiServerSource.

Watches `Model` resources (modelhooks.dev) on a cluster and turns every add, update and
delete into the CloudEvent ApiServerSource sends in Resource mode
(`dev.knative.apiserver.resource.{add,update,delete}`, data = the whole object,
extensions kind/name/namespace), so a laptop or a test walks the same path as the cluster.
Event ids are the object's uid and resourceVersion: a re-list re-sends the same ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from modelhooks.core.logs import log

__all__ = ["GROUP", "PLURAL", "VERSION", "to_cloudevent", "watch_models"]

GROUP, VERSION, PLURAL = "modelhooks.dev", "v1alpha1", "models"
_TYPES = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}


def to_cloudevent(kind: str, obj: dict[str, Any], source: str) -> dict[str, Any] | None:
    """The structured CloudEvent ApiServerSource (Resource mode) sends for one watch event."""
    action = _TYPES.get(kind)
    meta = obj.get("metadata") or {}
    if action is None or not meta.get("name"):
        return None
    ns, name = meta.get("namespace", ""), meta["name"]
    return {
        "specversion": "1.0",
        "id": f"{meta.get('uid', name)}/{meta.get('resourceVersion', '0')}/{action}",
        "source": source,
        "type": f"dev.knative.apiserver.resource.{action}",
        "subject": f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}",
        "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "kind": obj.get("kind", "Model"),
        "name": name,
        "namespace": ns,
        "data": obj,
    }


def watch_models(
    api_client: Any,
    send: Callable[[dict[str, Any]], None],
    *,
    namespace: str | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Send one CloudEvent per Model change until `stop` is set (re-watching on expiry)."""
    stop = stop or threading.Event()
    source = str(api_client.configuration.host)
    since = ""
    while not stop.is_set():
        try:
            for kind, obj, version in _stream(api_client, namespace, since):
                since = version
                if stop.is_set():
                    return
                event = to_cloudevent(kind, obj, source)
                if event is not None:
                    send(event)
        except _Expired:
            log(logging.WARNING, "watch expired; listing Models again")
            since = ""


class _Expired(Exception):
    """The watch's resourceVersion is too old (HTTP 410)."""


def _stream(api_client: Any, namespace: str | None, since: str) -> Iterator[tuple[str, Any, str]]:
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    api = client.CustomObjectsApi(api_client)
    args: dict[str, Any] = {"timeout_seconds": 30, "allow_watch_bookmarks": False}
    if since:
        args["resource_version"] = since
    list_fn, list_args = (
        (api.list_namespaced_custom_object, (GROUP, VERSION, namespace, PLURAL))
        if namespace
        else (api.list_cluster_custom_object, (GROUP, VERSION, PLURAL))
    )
    w = watch.Watch()
    try:
        for item in w.stream(list_fn, *list_args, **args):
            obj = item["object"]
            yield item["type"], obj, obj.get("metadata", {}).get("resourceVersion", since)
    except ApiException as exc:
        if exc.status == 410:
            raise _Expired from None
        raise
    finally:
        w.stop()

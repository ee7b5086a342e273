"""`InMemoryCluster`: the fake of the `Cluster` port. It passes the same contract as
`KubernetesCluster` on the real kube-apiserver (tests/contract/cluster.py): generations,
resourceVersions, the status fields one field manager owns, finalizers holding a deletion,
Events by name, and workloads annotated for rollout.

The methods not in the port (`create`, `delete`, `deploy`, …) are what an admin would do
with kubectl; tests use them to set the scene."""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Mapping
from typing import Any

from modelhooks.core.conditions import MODEL_ANNOTATION, ROLLOUT_ANNOTATION, ModelEvent
from modelhooks.core.errors import Conflict, NotFound

__all__ = ["InMemoryCluster"]


class InMemoryCluster:
    def __init__(self) -> None:
        self.models: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: dict[tuple[str, str], ModelEvent] = {}
        # (namespace, kind, name) → (its annotations, its pods' annotations)
        self.workloads: dict[tuple[str, str, str], tuple[dict[str, str], dict[str, str]]] = {}
        self._owned: dict[tuple[str, str], set[str]] = {}  # status keys / condition types
        self.cache_behind: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._versions = itertools.count(1)

    # --- the admin's side ---------------------------------------------------------------

    def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        model = copy.deepcopy(dict(body))
        meta = model.setdefault("metadata", {})
        key = (namespace, meta["name"])
        if key in self.models:
            raise Conflict(f"Model {namespace}/{meta['name']} exists")
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), generation=1)
        model.setdefault("spec", {}).setdefault("deletionPolicy", "Retain")
        self._store(key, model)
        return copy.deepcopy(model)

    def update_spec(self, namespace: str, name: str, **spec: Any) -> None:
        model = self._get(namespace, name)
        model["spec"].update(spec)
        model["metadata"]["generation"] += 1
        self._store((namespace, name), model)

    def delete(self, namespace: str, name: str) -> None:
        model = self._get(namespace, name)
        if not model["metadata"].get("finalizers"):
            del self.models[(namespace, name)]
            return
        model["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self._store((namespace, name), model)

    def deploy(
        self, namespace: str, name: str, annotations: Mapping[str, str], kind: str = "Deployment"
    ) -> None:
        self.workloads[(namespace, kind, name)] = (dict(annotations), {})

    def pod_annotations(
        self, namespace: str, name: str, kind: str = "Deployment"
    ) -> dict[str, str]:
        return dict(self.workloads[(namespace, kind, name)][1])

    # --- the port -----------------------------------------------------------------------

    def get_model(
        self, namespace: str, name: str, *, cached: bool = False
    ) -> dict[str, Any] | None:
        """`cached`: what `cache_behind` holds for it, if anything (a watch cache that has not
        caught up yet: None for a Model not in it), else the Model as it is."""
        key = (namespace, name)
        found = self.cache_behind.get(key, self.models.get(key)) if cached else self.models.get(key)
        return copy.deepcopy(found) if found else None

    def list_models(self, namespace: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(m) for (ns, _), m in sorted(self.models.items()) if ns == namespace]

    def apply_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> dict[str, Any]:
        model = self._get(namespace, name)
        if model["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"Model {namespace}/{name} changed concurrently")
        key, applied = (namespace, name), copy.deepcopy(dict(status))
        current = dict(model.get("status") or {})
        owned = self._owned.get(key, set())
        keep = {
            c["type"]: c
            for c in current.get("conditions", [])
            if f"condition:{c['type']}" not in owned
        }
        for k in owned:  # what this manager applied before and leaves out now goes
            if not k.startswith("condition:") and k != "conditions":
                current.pop(k, None)
        mine = {c["type"]: c for c in applied.pop("conditions", [])}
        conditions = {**keep, **mine}
        current.update(applied)
        current.pop("conditions", None)
        if conditions:
            current["conditions"] = [conditions[t] for t in sorted(conditions)]
        self._owned[key] = set(applied) | {f"condition:{t}" for t in mine}
        if current != model.get("status"):
            model["status"] = current
            self._store(key, model)
        return copy.deepcopy(self.models[key])

    def add_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        model = self.models.get((namespace, name))
        if model is None or finalizer in model["metadata"].get("finalizers", []):
            return False
        if model["metadata"].get("deletionTimestamp"):
            return False  # as the API server: no new finalizer on an object being deleted
        model["metadata"].setdefault("finalizers", []).append(finalizer)
        self._store((namespace, name), model)
        return True

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        model = self.models.get((namespace, name))
        if model is None or finalizer not in model["metadata"].get("finalizers", []):
            return False
        model["metadata"]["finalizers"] = [
            f for f in model["metadata"]["finalizers"] if f != finalizer
        ]  # every time it is there, as the API server may hold it twice
        if not model["metadata"]["finalizers"]:
            del model["metadata"]["finalizers"]
            if model["metadata"].get("deletionTimestamp"):
                del self.models[(namespace, name)]
                return True
        self._store((namespace, name), model)
        return True

    def record(self, event: ModelEvent) -> bool:
        key = (event.namespace, event.name)
        if key in self.events:
            return False
        self.events[key] = event
        return True

    def roll_out(self, namespace: str, model: str, version: str) -> list[str]:
        changed = []
        for (ns, kind, name), (marks, pods) in sorted(self.workloads.items()):
            if ns != namespace or marks.get(MODEL_ANNOTATION) != model:
                continue
            if pods.get(ROLLOUT_ANNOTATION) != version:
                pods[ROLLOUT_ANNOTATION] = version
                changed.append(f"{kind}/{name}")
        return changed

    # --- helpers ------------------------------------------------------------------------

    def _get(self, namespace: str, name: str) -> dict[str, Any]:
        model = self.models.get((namespace, name))
        if model is None:
            raise NotFound(f"Model {namespace}/{name}: not found")
        return model

    def _store(self, key: tuple[str, str], model: dict[str, Any]) -> None:
        model["metadata"]["resourceVersion"] = str(next(self._versions))
        self.models[key] = model

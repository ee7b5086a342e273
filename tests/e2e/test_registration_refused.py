"""A Model whose version register refuses for good, on a real kube-apiserver: `modelhooks
watch-models --raw` → `modelhooks serve` (Kubernetes registry, tenancy for the namespace) →
register refuses (a source outside the namespace's tenancy; a version registered already
from another source) and answers with a `model.refused` → notify: Registered and Ready False
with a reason naming the cause (SourceForbidden, VersionConflict) saying why, and one Warning Event, however often the Model's
events are delivered again. Before, the refusal was a 4xx, dead-lettered, and the Model said
nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.pods import push_model
from tests.e2e.test_cleanup_refused import Cluster, cluster  # noqa: F401 (a fixture)
from tests.e2e.test_model_chain import registry_namespace  # noqa: F401 (a fixture)
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _conditions(models: Cluster, name: str) -> dict[str, dict[str, Any]]:
    status = (models.get(name) or {}).get("status") or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def _refused(models: Cluster, name: str) -> dict[str, Any] | None:
    registered = _conditions(models, name).get("Registered", {})
    return registered if registered.get("status") == "False" else None


def _touch(models: Cluster, name: str, n: int) -> None:
    models.patch(name, {"metadata": {"annotations": {"modelhooks.dev/retry": str(n)}}})


def test_a_source_outside_the_namespace_is_told_on_the_model(
    cluster: Cluster,  # noqa: F811
    distribution3: OciRegistry,
    tmp_path: Path,
) -> None:
    served, name = cluster.served, f"elsewhere-{uuid.uuid4().hex[:8]}"
    repo = f"cleanup-refused/other-team/{name}"
    digest = push_model(distribution3, repo, name, tmp_path, tag="v1")
    source = {"oci": {"reference": f"{distribution3.host}/{repo}@{digest}"}}
    cluster.create(name, {"source": source, "version": "1"}, [])
    condition = served.wait_for(f"{name} refused", lambda: _refused(cluster, name))
    location = f"oci://{distribution3.host}/{repo}"
    assert (condition["status"], condition["reason"]) == ("False", "SourceForbidden")
    assert f"namespace '{cluster.namespace}' may not act on {location}" in condition["message"]
    assert "kubectl annotate model" in condition["message"]
    ready = _conditions(cluster, name)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "SourceForbidden")
    assert cluster.column(name, "Reason") == "SourceForbidden"  # kubectl get -o wide
    for n in range(2):  # its events again (updates): refused alike, told once
        _touch(cluster, name, n)
    served.wait_for(
        f"{name}'s touches answered",
        lambda: served.log.read_text().count("register refused dev.modelhooks.model.updated") >= 2,
    )
    (warning,) = cluster.warnings(name)
    assert warning.reason == "SourceForbidden" and warning.action == "Register"
    assert _refused(cluster, name) == condition  # nothing rewritten
    cluster.delete(name)
    served.wait_for(f"{name} gone", lambda: cluster.get(name) is None)


def test_a_version_registered_from_another_source_is_told_on_the_model(
    cluster: Cluster,  # noqa: F811
    distribution3: OciRegistry,
    tmp_path: Path,
) -> None:
    """Version 1 registered from one source; the Model deleted and created again with
    version 1 from another: a registered version is immutable (409), said on the new Model,
    whose uid the refusal carries."""
    served, name = cluster.served, f"again-{uuid.uuid4().hex[:8]}"
    sources = []
    for part in ("first", "second"):
        repo = f"cleanup-refused/allowed/{name}-{part}"
        (tmp_path / part).mkdir()
        digest = push_model(distribution3, repo, f"{name}-{part}", tmp_path / part, tag="v1")
        sources.append({"oci": {"reference": f"{distribution3.host}/{repo}@{digest}"}})
    cluster.create(name, {"source": sources[0], "version": "1"}, [])

    def registered() -> dict[str, Any] | None:
        found = _conditions(cluster, name).get("Registered", {})
        return found if found.get("status") == "True" else None

    served.wait_for(f"{name} Registered", registered, timeout=60)
    cluster.delete(name)
    served.wait_for(f"{name} gone", lambda: cluster.get(name) is None)
    cluster.create(name, {"source": sources[1], "version": "1"}, [])
    condition = served.wait_for(f"{name} refused", lambda: _refused(cluster, name))
    assert condition["reason"] == "VersionConflict"
    assert "conflict" in condition["message"] and "version 1" in condition["message"]
    assert sources[1]["oci"]["reference"].split("@")[0] in condition["message"]
    (warning,) = [w for w in cluster.warnings(name) if w.reason == "VersionConflict"]
    model = cluster.get(name)
    assert model is not None and warning.regarding.uid == model["metadata"]["uid"]

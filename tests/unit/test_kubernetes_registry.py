"""registry.backend=kubernetes without a cluster: resource names derived from identities,
settings and wiring, and how the API server's answers become modelhooks errors. The
contract itself runs on the real kube-apiserver (tests/integration/test_kubernetes_registry.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.kubernetes import (
    MODEL_LABEL,
    REGISTRY_LABEL,
    KubernetesModelRegistry,
    StaleWrite,
    object_name,
)
from modelhooks.bootstrap import model_registry
from modelhooks.core.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    NotFound,
    Throttled,
    Transient,
    Unavailable,
)
from modelhooks.core.settings import load_settings

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@given(parts=st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=2))
def test_object_names_are_dns_labels(parts: list[str]) -> None:
    name = object_name(*parts)
    assert DNS_LABEL.match(name), name
    assert name == object_name(*parts)  # deterministic: the natural identity decides it


def test_object_names_keep_identities_apart() -> None:
    names = {
        object_name("Bert"),
        object_name("bert"),
        object_name("team/bert"),
        object_name("team-bert"),
        object_name("m", "1-2"),
        object_name("m-1", "2"),
        object_name("m", "1"),
    }
    assert len(names) == 7
    assert object_name("team/BERT:base").startswith("team-bert-base-")


def test_the_kubernetes_backend_is_configured_by_settings(tmp_path: Path) -> None:
    settings = load_settings(
        env={"MODELHOOKS_REGISTRY_BACKEND": "kubernetes", "MODELHOOKS_REGISTRY_NAMESPACE": "ml"}
    )
    registry = model_registry(settings)  # connects on first use, not here
    assert isinstance(registry, KubernetesModelRegistry)
    assert (registry.name, registry.namespace) == ("kubernetes", "ml")
    assert load_settings(env={}).registry.namespace == "modelhooks"


def test_a_missing_kubeconfig_fails_at_start_naming_the_variable(tmp_path: Path) -> None:
    settings = load_settings(
        env={
            "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
            "MODELHOOKS_REGISTRY_KUBECONFIG": str(tmp_path / "absent"),
        }
    )
    with pytest.raises(ConfigError, match=r"MODELHOOKS_REGISTRY_KUBECONFIG=.*no such file"):
        model_registry(settings)


def test_a_bad_namespace_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="MODELHOOKS_REGISTRY_NAMESPACE"):
        load_settings(env={"MODELHOOKS_REGISTRY_NAMESPACE": "Not_A_Namespace"})


def _answer(status: int, message: str = "m", details: dict[str, str] | None = None) -> object:
    body = {"kind": "Status", "message": message, "details": details or {}}
    return SimpleNamespace(status=status, reason="r", body=json.dumps(body))


@pytest.mark.parametrize(
    ("answer", "error", "says"),
    [
        (_answer(404, details={"name": "x", "kind": "registeredmodels"}), NotFound, "x"),
        (_answer(404, "the server could not find the requested resource"), Unavailable, "crds"),
        (_answer(409, "already exists"), Conflict, "already exists"),
        (_answer(403, "forbidden"), Forbidden, "create and update in the namespaces it writes"),
        (_answer(422, "spec.name is immutable"), BadRequest, "spec.name is immutable"),
        (_answer(429), Throttled, ""),
        (_answer(401), Unavailable, ""),
        (_answer(500), Unavailable, ""),
    ],
)
def test_api_answers_become_modelhooks_errors(
    answer: object, error: type[Exception], says: str
) -> None:
    registry = KubernetesModelRegistry(namespace="ml", api_client=object())
    made = registry._error(answer, "GET registeredmodels/x", "registeredmodels", "team-a")
    assert type(made) is error
    assert says in str(made) and "'team-a'" in str(made)
    across = registry._error(answer, "LIST registeredmodels", "registeredmodels")
    assert "across namespaces" in str(across)


class _Objects:
    """The API as far as a create needs it: an empty cluster that keeps creates."""

    def __init__(self, *items: dict[str, Any]) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.items = list(items)

    def request(self, method: str, url_path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        if method == "GET":
            assert "/namespaces/" not in url_path  # a cluster-wide list
            return {"items": self.items, "metadata": {}}
        assert method == "POST" and body is not None
        namespace = url_path.partition("/namespaces/")[2].partition("/")[0]
        assert body["metadata"]["namespace"] == namespace
        self.created.append((namespace, body))
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}


class _Registry(KubernetesModelRegistry):
    objects = _Objects()

    def _request(
        self, method: str, url_path: str, query: Any, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        return self.objects.request(method, url_path, body)


@pytest.mark.parametrize(
    ("properties", "namespace"),
    [({"namespace": "team-a"}, "team-a"), ({}, "ml"), ({"namespace": "default"}, "ml")],
)
def test_a_model_is_created_in_its_owning_namespace(
    properties: dict[str, str], namespace: str
) -> None:
    registry = _Registry(namespace="ml", api_client=object())
    registry.objects = _Objects()
    model = registry.create_model("team/bert", properties=properties)
    ((where, body),) = registry.objects.created
    assert where == namespace
    assert body["metadata"]["labels"][MODEL_LABEL] == model.id == object_name("team/bert")
    assert body["metadata"]["labels"][REGISTRY_LABEL] == "ml"  # the registry it belongs to


def test_a_stale_write_is_redelivered_not_dead_lettered() -> None:
    assert issubclass(StaleWrite, Transient)


def _holder(namespace: str, created: str) -> dict[str, Any]:
    metadata = {"name": object_name("m"), "namespace": namespace, "resourceVersion": "1"}
    return {"metadata": {**metadata, "creationTimestamp": created}, "spec": {"name": "m"}}


def test_a_name_two_raced_creates_hold_reads_as_the_first_created_everywhere() -> None:
    registry = _Registry(namespace="ml", api_client=object())
    registry.objects = _Objects(
        _holder("team-a", "2026-01-01T00:00:02Z"), _holder("team-b", "2026-01-01T00:00:01Z")
    )
    assert registry._get("registeredmodels", object_name("m"))["metadata"]["namespace"] == "team-b"  # type: ignore[index]
    with pytest.raises(Conflict, match="exists in 'team-b'"):
        registry.create_model("m", properties={"namespace": "team-a"})


def test_serve_says_where_registrations_go(tmp_path: Path) -> None:
    from modelhooks.cli.serve import _status
    from modelhooks.core.settings import load_settings

    env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_REGISTRY_BACKEND": "kubernetes"}
    assert "Kubernetes resources" in _status(load_settings(env=env), None)
    assert "SQLite" in _status(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}), None)

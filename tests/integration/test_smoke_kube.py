"""The kubernetes client against a real kube-apiserver: CRDs, dry-run, TokenRequest, RBAC,
and a validating admission webhook that calls back to a local HTTPS listener."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.servers import Delivery, NotificationSink
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

T = TypeVar("T")
GROUP = "smoke.modelhooks.dev"


def _retry(action: Callable[[], T], timeout: float = 15.0) -> T:
    """Retry while the apiserver's caches catch up (CRD established, RBAC, webhooks)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def api(kube_apiserver: KubeApiServer) -> Iterator[Any]:
    with kube_apiserver.api_client() as client:
        yield client


@pytest.fixture
def namespace(api: Any) -> str:
    from kubernetes import client

    name = f"smoke-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"smoke": name}))
    )
    return name  # namespaces stay Terminating without a controller-manager: leave it


def test_version_and_kubeconfig(kube_apiserver: KubeApiServer, tmp_path: Path) -> None:
    from kubernetes import client, config

    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    configured = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=configured)
    with client.ApiClient(configured) as api:
        version = client.VersionApi(api).get_code()
    assert version.git_version == kube_apiserver.version


def test_crd_and_custom_resource(api: Any, namespace: str) -> None:
    from kubernetes import client

    plural = f"widgets{uuid.uuid4().hex[:6]}"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w1"}}

    def create() -> dict[str, Any]:
        try:
            return dict(
                custom.create_namespaced_custom_object(
                    GROUP, "v1", namespace, plural, {**body, "spec": {"size": 3}}
                )
            )
        except client.ApiException as exc:
            raise AssertionError(f"CRD not served yet: {exc.status}") from exc

    created = _retry(create)
    assert created["metadata"]["uid"]
    fetched = custom.get_namespaced_custom_object(GROUP, "v1", namespace, plural, "w1")
    assert fetched["spec"] == {"size": 3}
    with pytest.raises(client.ApiException) as invalid:  # the schema is enforced
        custom.create_namespaced_custom_object(
            GROUP,
            "v1",
            namespace,
            plural,
            {**body, "metadata": {"name": "w2"}, "spec": {"size": 0}},
        )
    assert invalid.value.status == 422


def test_server_side_dry_run(api: Any, namespace: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry"), data={"k": "v"})
    answered = core.create_namespaced_config_map(namespace, cm, dry_run="All")
    assert answered.metadata.name == "dry"
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_config_map("dry", namespace)
    assert missing.value.status == 404


def test_token_request_and_rbac_denial(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    from kubernetes import client

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="limited"))
    )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[kube_apiserver.url], expiration_seconds=600)
    )
    token = core.create_namespaced_service_account_token("limited", namespace, request)
    assert token.status.token.count(".") == 2  # a JWT
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-configmaps"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "limited-read-configmaps"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-configmaps",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": namespace}],
        },
    )
    with kube_apiserver.api_client(token=token.status.token) as limited_api:
        limited = client.CoreV1Api(limited_api)

        def allowed() -> None:
            try:
                limited.list_namespaced_config_map(namespace)
            except client.ApiException as exc:
                raise AssertionError(f"role binding not effective yet: {exc.status}") from exc

        _retry(allowed)
        with pytest.raises(client.ApiException) as denied:
            limited.list_namespaced_secret(namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:limited" in denied.value.body


def _deny_configmaps(delivery: Delivery) -> tuple[int, dict[str, str], bytes]:
    review = delivery.json()
    response = {
        "uid": review["request"]["uid"],
        "allowed": False,
        "status": {"code": 403, "message": "denied by the smoke webhook"},
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


def test_validating_webhook_calls_local_https_listener(
    kube_apiserver: KubeApiServer, api: Any, namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    context = kube_apiserver.ca.server_context("webhook", tmp_path)
    with NotificationSink(ssl_context=context, responder=_deny_configmaps) as sink:
        name = f"smoke-{namespace}.modelhooks.dev"
        admission.create_validating_webhook_configuration(
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": name,
                        "clientConfig": {
                            "url": f"{sink.url}/validate",
                            "caBundle": base64.b64encode(kube_apiserver.ca.cert_pem).decode(),
                        },
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["configmaps"],
                            }
                        ],
                        "namespaceSelector": {"matchLabels": {"smoke": namespace}},
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }
                ],
            }
        )
        try:

            def denied() -> client.ApiException:
                cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="cm-"))
                try:
                    core.create_namespaced_config_map(namespace, cm)
                except client.ApiException as exc:
                    return exc
                raise AssertionError("webhook not active yet")

            exc = _retry(denied)
            assert exc.status == 403
            assert "denied by the smoke webhook" in exc.body
            review = sink.wait_for(lambda d: d.path.startswith("/validate")).json()
            assert review["kind"] == "AdmissionReview"
            assert review["request"]["kind"]["kind"] == "ConfigMap"
            assert review["request"]["namespace"] == namespace
        finally:
            admission.delete_validating_webhook_configuration(name)

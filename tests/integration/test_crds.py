"""infra/k8s on a REAL kube-apiserver: the CRDs are accepted and Established, the server
enforces their schema and CEL rules (422 with our messages), the status subresource works,
and the RBAC in infra/k8s/rbac gives each identity what it needs and nothing more (403)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

T = TypeVar("T")
K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
GROUP, VERSION, PLURAL = "modelhooks.dev", "v1alpha1", "models"
NAMESPACE = "modelhooks"  # where infra/k8s/rbac puts the functions' ServiceAccounts


def _retry(action: Callable[[], T], timeout: float = 20.0) -> T:
    """Retry while the apiserver's caches catch up (CRD served, RBAC effective)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def api(kube_apiserver: KubeApiServer) -> Iterator[Any]:
    """An admin client on a cluster with infra/k8s/crds and infra/k8s/rbac applied."""
    from kubernetes import client

    with kube_apiserver.api_client() as api:
        kube_apiserver.apply(K8S / "crds")
        extensions = client.ApiextensionsV1Api(api)

        def established(name: str) -> None:
            crd = extensions.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in (crd.status.conditions or [])}
            assert conditions.get("Established") == "True", conditions

        for name in ("models.modelhooks.dev", "verificationpolicies.modelhooks.dev"):
            _retry(lambda name=name: established(name))
        kube_apiserver.apply(K8S / "rbac")
        yield api


@pytest.fixture
def namespace(api: Any) -> str:
    from kubernetes import client

    name = f"crds-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    return name  # namespaces stay Terminating without a controller-manager: leave them


def _model(name: str, **spec: Any) -> dict[str, Any]:
    body = {"source": {"oci": {"reference": "registry.local:5000/models/demo:1"}}, "version": "1"}
    body.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {"name": name},
        "spec": body,
    }


def _create(api: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)

    def create() -> dict[str, Any]:
        try:
            return dict(
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            )
        except client.ApiException as exc:
            if exc.status == 404:  # the CRD is Established but not yet served here
                raise AssertionError("models not served yet") from exc
            raise

    return _retry(create)


def _refused(api: Any, namespace: str, body: dict[str, Any]) -> Any:
    from kubernetes import client

    with pytest.raises(client.ApiException) as refused:
        _create(api, namespace, body)
    return refused.value


def test_a_valid_model_is_stored_with_defaults(api: Any, namespace: str) -> None:
    created = _create(
        api,
        namespace,
        _model(
            "demo",
            source={
                "gcs": {"uri": "gs://models/models/demo/1/"},
                "secretRef": {"name": "gcs-reader"},
            },
            signing={"enabled": True, "method": "keyless"},
            retention={"keepVersions": 3, "protectedTags": ["prod"]},
        ),
    )
    spec = created["spec"]
    assert spec["deletionPolicy"] == "Retain"  # defaulted by the server
    assert spec["signing"]["identityTokenAudience"] == "sigstore"
    assert spec["source"]["secretRef"] == {"name": "gcs-reader"}
    assert created["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(
            {
                "oci": {"reference": "registry.local:5000/models/demo:1"},
                "s3": {"uri": "s3://models/demo/1/"},
            },
            id="two-sources",
        ),
        pytest.param({"secretRef": {"name": "creds"}}, id="no-source"),
        pytest.param(
            {
                "http": {"url": "https://models.example.com/m.tar.gz", "sha256": "a" * 64},
                "gcs": {"uri": "gs://models/demo/1/"},
            },
            id="http-and-gcs",
        ),
    ],
)
def test_source_must_name_exactly_one_store(
    api: Any, namespace: str, source: dict[str, Any]
) -> None:
    exc = _refused(api, namespace, _model("bad-source", source=source))
    assert exc.status == 422
    assert "spec.source must set exactly one of oci, gcs, s3 or http" in exc.body


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ({"gcs": {"uri": "gs://models/models/../../etc/"}}, "must not hold '..' segments"),
        ({"s3": {"uri": "s3://models/models/m/.."}}, "must not hold '..' segments"),
        ({"gcs": {"uri": "gs://models/models/a\u0000b/"}}, "spec.source.gcs.uri"),
        ({"s3": {"uri": "s3://models/models/\n/1/"}}, "spec.source.s3.uri"),
        (
            {"gcs": {"uri": "gs://models/models/m/1/"}, "secretRef": {"name": "../x"}},
            "spec.source.secretRef.name",
        ),
    ],
)
def test_a_source_the_functions_would_refuse_is_refused_at_apply(
    api: Any, namespace: str, source: dict[str, Any], says: str
) -> None:
    """Accepted before, then refused by register and cleanup (400): the Model's deletion
    waited on the cleanup finalizer for ever, its source being immutable."""
    exc = _refused(api, namespace, _model("bad-path", source=source, deletionPolicy="Delete"))
    assert exc.status == 422 and says in exc.body, exc.body


@pytest.mark.parametrize("policy", ["Delete", "Untag"])
@pytest.mark.parametrize(
    "source",
    [
        {"gcs": {"uri": "gs://models//models/m/1/"}},
        {"s3": {"uri": "s3://models//m/1/"}},
        {"gcs": {"uri": "gs://models"}},
        {"s3": {"uri": "s3://models/"}},
    ],
)
def test_a_source_cleanup_would_refuse_is_refused_at_apply(
    api: Any, namespace: str, source: dict[str, Any], policy: str
) -> None:
    """An absolute key ('//' after the bucket) or a whole bucket: cleanup refuses it (400,
    never retried), so such a Model with a policy other than Retain, once deleted, waited
    on the cleanup finalizer for ever."""
    from modelhooks.core.cleanup import check_prefix
    from modelhooks.core.errors import BadRequest
    from modelhooks.core.stores import split_uri

    uri = next(iter(source.values()))["uri"]
    with pytest.raises(BadRequest):  # what cleanup answers for it
        check_prefix(split_uri(uri)[2], uri)
    exc = _refused(api, namespace, _model("bad-prefix", source=source, deletionPolicy=policy))
    assert exc.status == 422 and "spec" in exc.body, exc.body


def test_a_whole_bucket_is_taken_under_retain(api: Any, namespace: str) -> None:
    """Register takes a whole bucket, and a Retain Model gets no cleanup finalizer."""
    source = {"gcs": {"uri": "gs://models/"}}
    created = _create(api, namespace, _model("whole-bucket", source=source))
    assert created["spec"]["source"] == source and created["spec"]["deletionPolicy"] == "Retain"


def test_a_source_with_dots_in_its_names_is_taken(api: Any, namespace: str) -> None:
    source = {"gcs": {"uri": "gs://models/m..v2/1.0/..x/"}, "secretRef": {"name": "a.b-c"}}
    assert _create(api, namespace, _model("dots", source=source))["spec"]["source"] == source


@pytest.mark.parametrize("version", ["1.0 beta", "v1/2", "-1", ".1", "v1:rc", "1\n"])
def test_a_version_no_event_can_carry_is_refused_at_apply(
    api: Any, namespace: str, version: str
) -> None:
    exc = _refused(api, namespace, _model("bad-version", version=version))
    assert exc.status == 422 and "spec.version" in exc.body, exc.body


def test_a_version_with_build_metadata_is_taken(api: Any, namespace: str) -> None:
    created = _create(api, namespace, _model("semver", version="1.0.0-rc.1+b_7"))
    assert created["spec"]["version"] == "1.0.0-rc.1+b_7"


def test_deletion_policy_is_an_enum(api: Any, namespace: str) -> None:
    exc = _refused(api, namespace, _model("bad-policy", deletionPolicy="Destroy"))
    assert exc.status == 422
    causes = json.loads(exc.body)["details"]["causes"]
    assert {
        "reason": "FieldValueNotSupported",
        "field": "spec.deletionPolicy",
        "message": 'Unsupported value: "Destroy": supported values: "Retain", "Delete", "Untag"',
    } in causes


def test_key_signing_needs_its_secret(api: Any, namespace: str) -> None:
    exc = _refused(api, namespace, _model("bad-signing", signing={"enabled": True}))
    assert exc.status == 422
    assert "signing.method key needs signing.keySecretRef" in exc.body


def test_version_and_source_are_immutable(api: Any, namespace: str) -> None:
    from kubernetes import client

    _create(api, namespace, _model("frozen"))
    custom = client.CustomObjectsApi(api)
    for patch, message in (
        ({"spec": {"version": "2"}}, "spec.version is immutable"),
        (
            {"spec": {"source": {"oci": {"reference": "registry.local:5000/other:1"}}}},
            "spec.source is immutable",
        ),
    ):
        with pytest.raises(client.ApiException) as refused:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "frozen", patch
            )
        assert refused.value.status == 422
        assert message in refused.value.body


def test_status_is_written_through_the_subresource(api: Any, namespace: str) -> None:
    from kubernetes import client

    _create(api, namespace, _model("with-status"))
    custom = client.CustomObjectsApi(api)
    condition = {
        "type": "Registered",
        "status": "True",
        "reason": "Registered",
        "message": "model version 1 registered",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    status = {
        "resolvedDigest": "sha256:" + "a" * 64,
        "registeredModelId": "7",
        "modelVersionId": "9",
        "observedGeneration": 1,
        "conditions": [condition],
    }
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "with-status", {"status": status}
    )
    assert patched["status"] == status
    assert patched["metadata"]["generation"] == 1  # status writes do not bump generation
    # the main resource ignores status: a spec write cannot forge it
    custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "with-status",
        {"spec": {"deletionPolicy": "Delete"}, "status": {"registeredModelId": "forged"}},
    )
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "with-status")
    assert stored["status"]["registeredModelId"] == "7"
    assert stored["metadata"]["generation"] == 2
    bad = {**condition, "status": "Maybe"}
    with pytest.raises(client.ApiException) as refused:
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, "with-status", {"status": {"conditions": [bad]}}
        )
    assert refused.value.status == 422


def test_verification_policy_needs_a_trust_root(api: Any, namespace: str) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VerificationPolicy",
        "metadata": {"name": "team"},
        "spec": {
            "identities": [{"issuer": "https://accounts.google.com", "subject": "ci@example.com"}],
        },
    }
    created = _retry(
        lambda: _served(
            lambda: custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "verificationpolicies", body
            )
        )
    )
    assert created["spec"]["failurePolicy"] == "Fail"
    assert created["spec"]["verifyOn"] == "admission"
    empty = {**body, "metadata": {"name": "empty"}, "spec": {"failurePolicy": "Ignore"}}
    with pytest.raises(client.ApiException) as refused:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "verificationpolicies", empty
        )
    assert refused.value.status == 422
    assert "at least one of keys, certificateChains or identities" in refused.value.body


_PEM_KEY = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"keys": [{"name": "k", "pem": _PEM_KEY, "secretRef": {"name": "s"}}]},
            "a key sets exactly one of pem or secretRef",
        ),
        ({"keys": [{"name": "k", "pem": "not a key"}]}, "pem must hold a PEM public key"),
        (
            {
                "identities": [
                    {"issuer": "https://accounts.google.com", "subject": "a", "subjectRegExp": "b"}
                ]
            },
            "an identity sets exactly one of subject or subjectRegExp",
        ),
        (
            {"keys": [{"name": "k", "pem": _PEM_KEY}], "failurePolicy": "Sometimes"},
            "Unsupported value",
        ),
        ({"keys": [{"name": "k", "pem": _PEM_KEY}], "verifyOn": "kubelet"}, "Unsupported value"),
    ],
    ids=["pem-and-secret", "not-pem", "subject-and-regexp", "failure-policy", "verify-on"],
)
def test_verification_policy_trust_roots_are_well_formed(
    api: Any, namespace: str, spec: dict[str, Any], message: str
) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VerificationPolicy",
        "metadata": {"name": "bad"},
        "spec": spec,
    }
    with pytest.raises(client.ApiException) as refused:
        _retry(
            lambda: _served(
                lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, "verificationpolicies", body
                )
            )
        )
    assert refused.value.status == 422
    assert message in refused.value.body


def _served(call: Callable[[], T]) -> T:
    from kubernetes import client

    try:
        return call()
    except client.ApiException as exc:
        if exc.status == 404:
            raise AssertionError("not served yet") from exc
        raise


def test_register_has_no_rights_on_models(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    """Models reach register inside events: its token reads, patches and deletes none."""
    from kubernetes import client

    _create(api, namespace, _model("unreadable"))
    token = kube_apiserver.token_for("modelhooks-register", NAMESPACE)
    with kube_apiserver.api_client(token=token) as limited_api:
        custom = client.CustomObjectsApi(limited_api)
        attempts = {
            "get": lambda: custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "unreadable"
            ),
            "delete": lambda: custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "unreadable"
            ),
            "status": lambda: custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, "unreadable", {"status": {"x": "y"}}
            ),
            "secrets": lambda: client.CoreV1Api(limited_api).list_namespaced_secret(namespace),
        }
        for what, attempt in attempts.items():
            with pytest.raises(client.ApiException) as denied:
                attempt()
            assert denied.value.status == 403, what
            assert "system:serviceaccount:modelhooks:modelhooks-register" in denied.value.body


def test_notify_may_patch_status_and_create_events_only(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    from kubernetes import client

    _create(api, namespace, _model("noted"))
    token = kube_apiserver.token_for("modelhooks-notify", NAMESPACE)
    with kube_apiserver.api_client(token=token) as limited_api:
        custom = client.CustomObjectsApi(limited_api)

        def patch_status() -> dict[str, Any]:
            try:
                return dict(
                    custom.patch_namespaced_custom_object_status(
                        GROUP,
                        VERSION,
                        namespace,
                        PLURAL,
                        "noted",
                        {"status": {"signatureRef": "r"}},
                    )
                )
            except client.ApiException as exc:
                raise AssertionError(f"role binding not effective yet: {exc.status}") from exc

        assert _retry(patch_status)["status"]["signatureRef"] == "r"
        event = {  # events.k8s.io/v1 only (tests/integration/test_notify_cluster.py does more)
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": "noted-"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "modelhooks.dev/notify",
            "reportingInstance": "test",
            "action": "UpdateStatus",
            "reason": "Registered",
            "note": "model version 1 registered",
            "type": "Normal",
            "regarding": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Model",
                "name": "noted",
                "namespace": namespace,
            },
        }
        assert custom.create_namespaced_custom_object(
            "events.k8s.io", "v1", namespace, "events", event
        )
        with pytest.raises(client.ApiException) as denied:  # patch (the finalizer), not delete
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "noted")
        assert denied.value.status == 403


def test_admission_reads_verification_policies_and_not_models(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    from kubernetes import client

    token = kube_apiserver.token_for("modelhooks-admission", NAMESPACE)
    with kube_apiserver.api_client(token=token) as limited_api:
        custom = client.CustomObjectsApi(limited_api)

        def listable() -> None:
            try:
                custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, "verificationpolicies"
                )
            except client.ApiException as exc:
                raise AssertionError(f"role binding not effective yet: {exc.status}") from exc

        _retry(listable)
        with pytest.raises(client.ApiException) as denied:
            custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        assert denied.value.status == 403


def test_apiserversource_identity_watches_models(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    from kubernetes import client

    _create(api, namespace, _model("watched"))
    token = kube_apiserver.token_for("modelhooks-apiserversource", NAMESPACE)
    with kube_apiserver.api_client(token=token) as limited_api:
        custom = client.CustomObjectsApi(limited_api)

        def cluster_list() -> dict[str, Any]:
            try:
                return dict(custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))
            except client.ApiException as exc:
                raise AssertionError(f"role binding not effective yet: {exc.status}") from exc

        names = {m["metadata"]["name"] for m in _retry(cluster_list)["items"]}
        assert "watched" in names
        with pytest.raises(client.ApiException) as denied:
            client.CoreV1Api(limited_api).list_namespaced_pod(namespace)
        assert denied.value.status == 403


def test_printer_columns_show_version_policy_and_conditions(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    _create(api, namespace, _model("printed"))
    request = urllib.request.Request(
        f"{kube_apiserver.url}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        headers={
            "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io",  # what kubectl get asks
            "Authorization": f"Bearer {kube_apiserver.admin_token}",
        },
    )
    context = ssl.create_default_context(cafile=str(kube_apiserver.ca_file))
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        table = json.loads(response.read())
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Version", "Policy", "Registered", "Signed", "Ready", "Age"]
    (row,) = [r for r in table["rows"] if r["cells"][0] == "printed"]
    assert row["cells"][1:3] == ["1", "Retain"]


def test_cleanup_finalizer_holds_deletion_until_notify_removes_it(
    kube_apiserver: KubeApiServer, api: Any, namespace: str
) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    body = _model("held")
    body["metadata"]["finalizers"] = ["modelhooks.dev/cleanup"]
    _create(api, namespace, body)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    held = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    assert held["metadata"]["deletionTimestamp"]  # Terminating: cleanup has not run yet
    token = kube_apiserver.token_for("modelhooks-notify", NAMESPACE)  # notify releases it
    with kube_apiserver.api_client(token=token) as limited_api:
        notify = client.CustomObjectsApi(limited_api)

        def release() -> None:
            try:
                notify.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, "held", {"metadata": {"finalizers": None}}
                )
            except client.ApiException as exc:
                raise AssertionError(f"role binding not effective yet: {exc.status}") from exc

        _retry(release)
    with pytest.raises(client.ApiException) as gone:
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    assert gone.value.status == 404


def test_an_http_source_is_a_url_with_its_sha256(api: Any, namespace: str) -> None:
    url = "https://models.example.com/demo-1.tar.gz"
    source = {"http": {"url": url, "sha256": "a" * 64}}
    created = _create(api, namespace, _model("http-source", source=source))
    assert created["spec"]["source"]["http"]["url"] == url
    bad = {"http": {"url": "http://models.example.com/demo.tgz", "sha256": "a" * 64}}
    assert _refused(api, namespace, _model("plain-http", source=bad)).status == 422
    at = {"http": {"url": "https://models.example.com/v@1/m.tgz", "sha256": "a" * 64}}
    assert _create(api, namespace, _model("at-in-path", source=at))  # an '@' in the path
    for i, creds in enumerate(("ci:pw@", "ci@", "ci:pw@models.example.com:8443?x=", "@")):
        url = f"https://{creds}models.example.com/m.tgz"
        bad = {"http": {"url": url, "sha256": "a" * 64}}
        refused = _refused(api, namespace, _model(f"credentials-{i}", source=bad))
        assert refused.status == 422, url  # credentials go in secretRef, not in the URL

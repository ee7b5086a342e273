"""notify on a REAL kube-apiserver (RBAC on), as its own ServiceAccount with a TokenRequest
token in a kubeconfig (as `notify.kubeconfig` names it), with infra/k8s/crds/model.yaml and
infra/k8s/rbac/notify.yaml applied: `KubernetesCluster` passes the `Cluster` contract; the
bound function takes a Model to Registered/Signed/Ready with Events, a redelivery changes
nothing, a failed purge keeps the finalizer with CleanupFailed and a clean one lets the
Model go; and the identity is denied one step beyond its role."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from modelhooks.adapters.kubernetes.cluster import kubernetes_cluster
from modelhooks.bootstrap import build
from modelhooks.core.conditions import FINALIZER
from modelhooks.core.settings import load_settings
from modelhooks.events.model import (
    ArtifactPurged,
    CanonicalEvent,
    EventData,
    ModelCreated,
    ModelRegistered,
    ModelSigned,
    ModelUpdated,
)
from tests.contract.cluster import ClusterContract, Place, model
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

T = TypeVar("T")
K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
GROUP, VERSION, PLURAL = "modelhooks.dev", "v1alpha1", "models"
ACCOUNT, HOME = "modelhooks-notify", "modelhooks"
ROLLOUT = "modelhooks-notify-rollout"
DIGEST = "sha256:" + "a" * 64


def _until(check: Callable[[], T], timeout: float = 20.0) -> T:
    """Retry while the apiserver's caches catch up (CRD served, RBAC effective)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class Admin:
    api: Any
    kubeconfig: Path  # notify's own: its ServiceAccount's token

    def namespace(self, rollout: bool = True) -> str:
        """A fresh namespace; `rollout`: its owner binds modelhooks-notify-rollout there."""
        from kubernetes import client

        name = f"notify-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(self.api).create_namespace({"metadata": {"name": name}})
        if rollout:
            client.RbacAuthorizationV1Api(self.api).create_namespaced_role_binding(
                name,
                {
                    "metadata": {"name": ROLLOUT},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": ROLLOUT,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": HOME}],
                },
            )
            self.until_allowed(name, "apps", "deployments", "patch")
        return name

    def until_allowed(self, namespace: str, group: str, resource: str, verb: str) -> None:
        from kubernetes import client

        review = {
            "spec": {
                "user": f"system:serviceaccount:{HOME}:{ACCOUNT}",
                "resourceAttributes": {
                    "namespace": namespace,
                    "group": group,
                    "resource": resource,
                    "verb": verb,
                },
            }
        }
        authz = client.AuthorizationV1Api(self.api)

        def allowed() -> None:
            assert authz.create_subject_access_review(review).status.allowed

        _until(allowed)

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        from kubernetes import client

        custom = client.CustomObjectsApi(self.api)
        return _until(
            lambda: dict(
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            )
        )

    def delete(self, namespace: str, name: str) -> None:
        from kubernetes import client

        client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )

    def deploy(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        from kubernetes import client

        labels = {"app": name}
        body = {
            "metadata": {"name": name, "annotations": dict(annotations)},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "serve", "image": "example.com/serve:1"}]},
                },
            },
        }
        client.AppsV1Api(self.api).create_namespaced_deployment(namespace, body)

    def pod_annotations(self, namespace: str, name: str) -> dict[str, str]:
        from kubernetes import client

        found = client.AppsV1Api(self.api).read_namespaced_deployment(name, namespace)
        return dict(found.spec.template.metadata.annotations or {})

    def events(self, namespace: str) -> list[dict[str, Any]]:
        from kubernetes import client

        found = client.EventsV1Api(self.api).list_namespaced_event(namespace)
        return [self.api.sanitize_for_serialization(e) for e in found.items]


@pytest.fixture(scope="module")
def admin(
    kube_apiserver: KubeApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Admin]:
    rbac = K8S / "rbac"
    kube_apiserver.apply(
        K8S / "crds" / "model.yaml", rbac / "00-namespace.yaml", rbac / "notify.yaml"
    )
    token = kube_apiserver.token_for(ACCOUNT, HOME, seconds=3600)
    with kube_apiserver.api_client() as api:
        path = tmp_path_factory.mktemp("notify-kube") / "kubeconfig"
        admin = Admin(api, kube_apiserver.write_kubeconfig(path, token=token, user=ACCOUNT))
        admin.until_allowed("default", GROUP, "models/status", "patch")
        yield admin


class TestKubernetesCluster(ClusterContract):
    @pytest.fixture
    def place(self, admin: Admin) -> Place:
        cluster = kubernetes_cluster(str(admin.kubeconfig), env={})
        assert cluster is not None
        return Place(
            cluster,
            admin.namespace,
            admin.create,
            admin.delete,
            admin.deploy,
            admin.pod_annotations,
            admin.events,
        )


def _event(data: EventData, id_: str) -> CanonicalEvent:
    return CanonicalEvent(
        id=id_, source="it", type=data.TYPE, data=data, time=datetime(2026, 3, 1, tzinfo=UTC)
    )


def test_notify_takes_a_model_to_ready_and_through_its_deletion(
    admin: Admin, tmp_path: Path
) -> None:
    ns = admin.namespace(rollout=False)
    spec: dict[str, Any] = {
        "deletionPolicy": "Delete",
        "signing": {"enabled": True, "method": "keyless"},
    }
    admin.create(ns, model("bert", **spec))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    notify, cluster = app.function("notify"), app.deps.cluster
    assert cluster is not None
    try:
        notify.handle(_event(ModelCreated(name="bert", namespace=ns), "created"))
        registered = ModelRegistered(
            model="bert", version="1", uri="oci://registry.local:5000/models/demo@" + DIGEST,
            digest=DIGEST, registry="kubernetes", registered_model_id="7",
            model_version_id="9", model_artifact_id="11", namespace=ns, created=True,
        )  # fmt: skip
        signed = ModelSigned(
            model="bert", version="1", uri=registered.uri, digest=DIGEST,
            signature_uri="oci://registry.local:5000/models/demo@sha256:" + "b" * 64,
            root_digest="sha256:" + "c" * 64, signer="key:abcd", namespace=ns,
        )  # fmt: skip
        notify.handle(_event(registered, "registered"))
        notify.handle(_event(signed, "signed"))
        stored = cluster.get_model(ns, "bert")
        assert stored is not None
        conditions = {c["type"]: c for c in stored["status"]["conditions"]}
        for kind in ("Registered", "Signed", "Ready"):
            assert conditions[kind]["status"] == "True", conditions[kind]
            assert conditions[kind]["observedGeneration"] == stored["metadata"]["generation"]
        assert stored["status"]["resolvedDigest"] == DIGEST
        assert stored["metadata"]["finalizers"] == [FINALIZER]
        reasons = sorted(e["reason"] for e in admin.events(ns))
        assert reasons == ["FinalizerAdded", "Registered", "Signed"]
        managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
        assert "modelhooks-notify" in managers

        for again in ("registered", "signed"):  # redelivery: nothing changes
            notify.handle(_event(registered if again == "registered" else signed, again))
        after = cluster.get_model(ns, "bert")
        assert (
            after and after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        )
        assert len(admin.events(ns)) == 3

        admin.delete(ns, "bert")  # held by the finalizer until cleanup succeeds
        failed = ArtifactPurged(
            uri="oci://registry.local:5000/models/demo:1", policy="Delete", namespace=ns,
            failed={DIGEST: "403 DENIED: delete not allowed"},
        )  # fmt: skip
        notify.handle(_event(failed, "purged-failed"))
        held = cluster.get_model(ns, "bert")
        assert held and held["metadata"]["finalizers"] == [FINALIZER]
        failure = {c["type"]: c for c in held["status"]["conditions"]}["CleanupFailed"]
        assert failure["status"] == "True" and "403 DENIED" in failure["message"]
        notify.handle(_event(failed.replace(failed={}, deleted=[DIGEST]), "purged"))
        assert cluster.get_model(ns, "bert") is None
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


@pytest.mark.parametrize("cut_on", [".", "-"])
def test_a_model_named_at_the_limit_gets_its_finalizer_and_event(
    admin: Admin, tmp_path: Path, cut_on: str
) -> None:
    """A 253-character Model name whose 200th character is a `.` or `-`: the Event named
    after it is still a name the API server takes (it was a 422, notify's answer a 400)."""
    ns = admin.namespace(rollout=False)
    name = "m" * 199 + cut_on + "n" * 53
    admin.create(ns, model(name, deletionPolicy="Delete"))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    created = ModelCreated(name=name, namespace=ns, spec={"deletionPolicy": "Delete"})
    try:
        for _ in range(2):  # a redelivery records nothing more
            app.function("notify").handle(_event(created, "created"))
        assert app.deps.cluster is not None
        held = app.deps.cluster.get_model(ns, name)
        assert held and held["metadata"]["finalizers"] == [FINALIZER]
        events = admin.events(ns)
        assert [e["reason"] for e in events] == ["FinalizerAdded"]
        assert events[0]["regarding"]["name"] == name
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


def test_a_ready_model_rolls_out_its_inference_services_once(
    admin: Admin, kube_apiserver: KubeApiServer
) -> None:
    """KServe's own InferenceService CRD: the Model's InferenceService gets the version on its
    predictor (a new revision), once; another's and an unannotated one are left alone."""
    from kubernetes import client

    from tests.servers.recipes import RECIPES

    crd = RECIPES["kserve-crds"]
    crd.obtain()
    kserve = crd.binary() / "serving.kserve.io_inferenceservices.yaml"
    kube_apiserver.install_crd(kserve, "inferenceservices", timeout=60)
    ns = admin.namespace()
    admin.until_allowed(ns, "serving.kserve.io", "inferenceservices", "patch")
    custom = client.CustomObjectsApi(admin.api)
    for name, model_name in (("isvc-bert", "bert"), ("isvc-gpt", "gpt"), ("plain", "")):
        annotations = {"modelhooks.dev/model": model_name} if model_name else {}
        body = {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "predictor": {
                    "model": {"modelFormat": {"name": "sklearn"}, "storageUri": "gs://m/1/"}
                }
            },
        }
        create = partial(
            custom.create_namespaced_custom_object,
            "serving.kserve.io",
            "v1beta1",
            ns,
            "inferenceservices",
            body,
        )
        _until(create)  # the CRD served
    cluster = kubernetes_cluster(str(admin.kubeconfig), env={})
    assert cluster is not None
    assert cluster.roll_out(ns, "bert", "1@sha256:aa") == ["InferenceService/isvc-bert"]
    assert cluster.roll_out(ns, "bert", "1@sha256:aa") == []

    def predictor(name: str) -> dict[str, str]:
        found = custom.get_namespaced_custom_object(
            "serving.kserve.io", "v1beta1", ns, "inferenceservices", name
        )
        return dict(found["spec"]["predictor"].get("annotations") or {})

    assert predictor("isvc-bert") == {"modelhooks.dev/model-version": "1@sha256:aa"}
    assert predictor("isvc-gpt") == predictor("plain") == {}


def test_notify_is_denied_one_step_beyond_its_role(admin: Admin) -> None:
    from kubernetes import client, config

    ns = admin.namespace(rollout=False)  # no rollout binding here
    admin.create(ns, model("bert"))
    admin.deploy(ns, "serve", {"modelhooks.dev/model": "bert"})
    api = config.new_client_from_config(config_file=str(admin.kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "bert")
        denied: list[Callable[[], Any]] = [
            lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "bert"),
            lambda: client.CoreV1Api(api).list_namespaced_secret(ns),
            lambda: client.AppsV1Api(api).patch_namespaced_deployment(
                "serve", ns, {"metadata": {"annotations": {"x": "y"}}}
            ),
            lambda: client.EventsV1Api(api).delete_collection_namespaced_event(ns),
        ]
        for step in denied:
            with pytest.raises(client.ApiException) as refused:
                step()
            assert refused.value.status == 403
            assert f"system:serviceaccount:{HOME}:{ACCOUNT}" in refused.value.body
    finally:
        api.close()  # type: ignore[no-untyped-call,unused-ignore]


def test_a_finalizer_write_that_lost_a_race_is_retried_keeping_the_winner(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes import client

    ns = admin.namespace(rollout=False)
    admin.create(ns, model("raced", finalizers=["example.com/first"]))
    cluster = kubernetes_cluster(str(admin.kubeconfig), env={})
    assert cluster is not None
    stale = cluster.get_model(ns, "raced")
    client.CustomObjectsApi(admin.api).patch_namespaced_custom_object(  # the race's winner
        GROUP,
        VERSION,
        ns,
        PLURAL,
        "raced",
        [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/second"}],
        _content_type="application/json-patch+json",
    )
    reads = iter([stale])
    fresh = cluster.get_model
    monkeypatch.setattr(cluster, "get_model", lambda n, m: next(reads, None) or fresh(n, m))
    assert cluster.add_finalizer(ns, "raced", FINALIZER)  # the first try's test op fails
    found = fresh(ns, "raced")
    assert found and found["metadata"]["finalizers"] == [
        "example.com/first",
        "example.com/second",
        FINALIZER,
    ]


def test_a_model_deleted_before_its_status_is_applied_is_skipped_not_a_404(
    admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Model read (the watch cache's, a moment old), then deleted, then its status
    applied: 404 from the API server, which was notify's answer (a 404 Knative redelivers
    until its dead letter); a Model gone is a Skip, as a Conflict's read finding none."""
    from modelhooks.core.function import Skip

    ns = admin.namespace(rollout=False)
    admin.create(ns, model("gone"))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    cluster = app.deps.cluster
    assert cluster is not None
    try:
        stale = cluster.get_model(ns, "gone")
        admin.delete(ns, "gone")
        read = cluster.get_model
        monkeypatch.setattr(
            cluster, "get_model", lambda n, m, cached=False: stale if cached else read(n, m)
        )
        registered = ModelRegistered(
            model="gone", version="1", uri="oci://registry.local:5000/models/demo@" + DIGEST,
            digest=DIGEST, registry="kubernetes", registered_model_id="7",
            model_version_id="9", model_artifact_id="11", namespace=ns, created=True,
        )  # fmt: skip
        with pytest.raises(Skip, match="is gone"):
            app.function("notify").handle(_event(registered, "registered-gone"))
        assert admin.events(ns) == []
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


@pytest.mark.parametrize("note", ["é" * 1000, "模" * 400 + "x", "a" * 2000])
def test_an_event_note_is_cut_to_the_bytes_the_api_server_takes(admin: Admin, note: str) -> None:
    """A CleanupFailed note naming objects with non-ASCII keys: 1,024 characters were up to
    4 KB, refused (422) by the API server's limit of 1,024 bytes."""
    from modelhooks.core.conditions import ModelEvent

    ns = admin.namespace(rollout=False)
    admin.create(ns, model("noted"))
    cluster = kubernetes_cluster(str(admin.kubeconfig), env={})
    assert cluster is not None
    event = ModelEvent(
        namespace=ns, name="noted.1", model="noted", uid="", reason="CleanupFailed",
        action="KeepFinalizer", note=note, time=datetime.now(UTC), type="Warning",
    )  # fmt: skip
    assert cluster.record(event) and not cluster.record(event)  # once
    (recorded,) = admin.events(ns)
    kept = recorded["note"]
    assert note.startswith(kept) and len(kept.encode()) <= 1024 < len(note.encode())
    assert len(kept.encode()) > 1020


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("{ns}", "."), ("{ns}", ".."), ("..", ".."), (".", "bert"), ("{ns}", "bert%2Fstatus")],
)
def test_a_subject_naming_no_model_reaches_no_other_path(
    admin: Admin, tmp_path: Path, namespace: str, name: str
) -> None:
    """A subject's namespace and name are Kubernetes names or no Model's: '.' and '..'
    steered notify's requests at the list of Models, the namespace or discovery (a KeyError,
    500, or a 403 blaming notify's role)."""
    from modelhooks.core.function import Skip

    ns = admin.namespace(rollout=False)
    admin.create(ns, model("bert", deletionPolicy="Delete"))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    subject = f"/apis/modelhooks.dev/v1alpha1/namespaces/{namespace.format(ns=ns)}/models/{name}"
    registered = ModelRegistered(
        model="bert/status", version="1", uri="oci://registry.local:5000/models/demo@" + DIGEST,
        digest=DIGEST, registry="kubernetes", registered_model_id="7",
        model_version_id="9", model_artifact_id="11", namespace=ns, created=True,
    )  # fmt: skip
    created = ModelCreated(name="bert/status", namespace=ns, spec={"deletionPolicy": "Delete"})
    try:
        for data in (registered, created):
            event = CanonicalEvent(
                id=f"odd-{data.TYPE}", source="it", type=data.TYPE, data=data,
                time=datetime(2026, 3, 1, tzinfo=UTC), subject=subject,
            )  # fmt: skip
            with pytest.raises(Skip, match="no Model"):
                app.function("notify").handle(event)
        assert admin.events(ns) == []
        assert app.deps.cluster is not None
        found = app.deps.cluster.get_model(ns, "bert")
        assert found and not found["metadata"].get("finalizers") and not found.get("status")
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


def test_a_model_of_a_namespace_being_deleted_is_let_go(admin: Admin, tmp_path: Path) -> None:
    """A namespace deleted with a Model in it (the namespace controller deletes its Models; it
    stays Terminating until they are gone): the API server refuses every new object in it,
    notify's Events too (403 NamespaceTerminating), and notify recorded the Event before
    removing the finalizer: its answer was a 403 (never redelivered) and the finalizer,
    then the namespace, stayed for ever. A refused cleanup's report still sets its status."""
    from kubernetes import client

    ns = admin.namespace(rollout=False)
    for name in ("bert", "gpt"):
        admin.create(ns, model(name, deletionPolicy="Delete"))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    notify, cluster = app.function("notify"), app.deps.cluster
    assert cluster is not None
    try:
        for name in ("bert", "gpt"):
            created = ModelCreated(name=name, namespace=ns, spec={"deletionPolicy": "Delete"})
            notify.handle(_event(created, f"created-{name}"))
        before = len(admin.events(ns))
        client.CoreV1Api(admin.api).delete_namespace(ns)
        for name in ("bert", "gpt"):  # as the namespace controller does
            admin.delete(ns, name)
        refused = ArtifactPurged(
            uri="oci://registry.local:5000/models/demo:1", policy="Delete", namespace=ns,
            model="gpt", refused="the Secret of spec.source.secretRef is not there",
        )  # fmt: skip
        notify.handle(_event(refused, "purged-refused"))
        held = cluster.get_model(ns, "gpt")
        assert held and held["metadata"]["finalizers"] == [FINALIZER]
        failure = {c["type"]: c for c in held["status"]["conditions"]}["CleanupFailed"]
        assert failure["reason"] == "CleanupRefused"
        for name in ("bert", "gpt"):
            purged = ArtifactPurged(
                uri="oci://registry.local:5000/models/demo:1", policy="Delete", namespace=ns,
                model=name, deleted=[DIGEST],
            )  # fmt: skip
            notify.handle(_event(purged, f"purged-{name}"))
            assert cluster.get_model(ns, name) is None
        assert len(admin.events(ns)) == before  # none could be recorded
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


def test_a_model_crd_without_the_status_subresource_is_said_not_a_model_gone(
    own_kube_apiserver: tuple[KubeApiServer, list[Any]], tmp_path: Path
) -> None:
    """An older Model CRD without `subresources: status` (a cluster not upgraded with the
    functions): the API server answers the status path 404, which notify took for the Model
    deleted meanwhile, a Skip (2xx): no status was ever written, and nothing said why. It
    is a deployment gap: 503 naming it (redelivered, then dead-lettered for a replay once
    the CRD is applied), and a Model deleted meanwhile is still a Skip."""
    import yaml

    from modelhooks.core.errors import Unavailable
    from modelhooks.core.function import Skip

    kube = own_kube_apiserver[0]
    crd = yaml.safe_load((K8S / "crds" / "model.yaml").read_text())
    del crd["spec"]["versions"][0]["subresources"]
    older = tmp_path / "model-older.yaml"
    older.write_text(yaml.safe_dump(crd))
    kube.install_crd(older, PLURAL)
    with kube.api_client() as api:
        from kubernetes import client

        client.CoreV1Api(api).create_namespace({"metadata": {"name": "ml"}})
        created = client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, "ml", PLURAL, model("bert")
        )
    assert "status" not in created
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")  # the admin's: RBAC aside
    env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_NOTIFY_KUBECONFIG": str(kubeconfig)}
    app = build(load_settings(env=env))
    registered = ModelRegistered(
        model="bert", version="1", uri="oci://registry.local:5000/models/demo@" + DIGEST,
        digest=DIGEST, registry="kubernetes", registered_model_id="7",
        model_version_id="9", model_artifact_id="11", namespace="ml", created=True,
    )  # fmt: skip
    try:
        with pytest.raises(Unavailable, match="status subresource"):
            app.function("notify").handle(_event(registered, "registered"))
        assert app.deps.cluster is not None
        app.deps.cluster.get_model("ml", "bert")
        with kube.api_client() as api:
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, "ml", PLURAL, "bert"
            )
        with pytest.raises(Skip, match="no Model"):
            app.function("notify").handle(_event(registered, "registered"))
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


def test_a_registration_of_a_model_deleted_and_created_again_tells_only_its_version(
    admin: Admin, tmp_path: Path
) -> None:
    """Model bert version 1 deleted and created again as version 2 (a new uid, the name
    kept): the first's model.registered and model.signed, delivered late with the subject
    naming bert, told the second it was Registered, Signed and Ready with version 1's digest
    (a rollout of version 2 at version 1's artifact), and its own registration was then a
    DigestMismatch: Ready never True. A subject names the Model; its spec.version says
    whether the news is its own."""
    from modelhooks.core.function import Skip

    ns = admin.namespace(rollout=False)
    admin.create(ns, model("bert", version="2", signing={"enabled": True, "method": "keyless"}))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    subject = f"/apis/modelhooks.dev/v1alpha1/namespaces/{ns}/models/bert"
    old, new = DIGEST, "sha256:" + "d" * 64

    def told(version: str, digest: str) -> list[EventData]:
        registered = ModelRegistered(
            model="bert", version=version, uri="oci://registry.local:5000/models/demo@" + digest,
            digest=digest, registry="kubernetes", registered_model_id="7",
            model_version_id=f"9{version}", model_artifact_id="11", namespace=ns, created=True,
        )  # fmt: skip
        signed = ModelSigned(
            model="bert", version=version, uri=registered.uri, digest=digest,
            signature_uri="oci://registry.local:5000/models/demo@sha256:" + "b" * 64,
            root_digest="sha256:" + "c" * 64, signer="key:abcd", namespace=ns,
        )  # fmt: skip
        return [registered, signed]

    def deliver(data: EventData, id_: str) -> None:
        event = CanonicalEvent(
            id=id_, source="it", type=data.TYPE, data=data,
            time=datetime(2026, 3, 1, tzinfo=UTC), subject=subject,
        )  # fmt: skip
        app.function("notify").handle(event)

    try:
        for i, data in enumerate(told("1", old)):  # the first bert's, late
            with pytest.raises(Skip, match="no Model"):
                deliver(data, f"old-{i}")
        assert app.deps.cluster is not None
        found = app.deps.cluster.get_model(ns, "bert")
        assert found and not found.get("status"), found.get("status")
        assert admin.events(ns) == []
        for i, data in enumerate(told("2", new)):
            deliver(data, f"new-{i}")
        found = app.deps.cluster.get_model(ns, "bert")
        assert found is not None
        conditions = {c["type"]: c for c in found["status"]["conditions"]}
        assert {k: c["status"] for k, c in conditions.items()} == dict.fromkeys(
            ("Registered", "Signed", "Ready"), "True"
        ), conditions
        assert found["status"]["resolvedDigest"] == new
        assert found["status"]["modelVersionId"] == "92"
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


def test_a_change_of_spec_signing_after_registration_sets_ready_again(
    admin: Admin, tmp_path: Path
) -> None:
    """spec.signing.enabled is mutable and decides Ready, but only a registration or a
    signature computed Ready: a Model registered while it asked for a signature no signer
    makes stayed Ready False (NotSigned) for good once its owner set signing.enabled false
    (register skips the update, registered already; notify only looked at its finalizer),
    and one Ready without a signature stayed Ready once its owner asked for one. Its update
    (the Model as watch-models and ApiServerSource send it) sets Ready anew."""
    from kubernetes import client

    ns = admin.namespace(rollout=False)
    admin.create(ns, model("bert", signing={"enabled": True, "method": "keyless"}))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    notify, cluster = app.function("notify"), app.deps.cluster
    assert cluster is not None
    custom = client.CustomObjectsApi(admin.api)

    def ready() -> dict[str, Any]:
        found = cluster.get_model(ns, "bert")
        assert found is not None
        return {c["type"]: c for c in found["status"]["conditions"]}["Ready"]

    def sign(enabled: bool, id_: str) -> None:
        """The owner's change, then its update event as watch-models sends it."""
        patched = custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "bert", {"spec": {"signing": {"enabled": enabled}}}
        )
        data = ModelUpdated(
            name="bert", namespace=ns, version="1", uid=patched["metadata"]["uid"],
            spec=patched["spec"], status=patched.get("status") or {},
        )  # fmt: skip
        notify.handle(_event(data, id_))

    try:
        registered = ModelRegistered(
            model="bert", version="1", uri="oci://registry.local:5000/models/demo@" + DIGEST,
            digest=DIGEST, registry="kubernetes", registered_model_id="7",
            model_version_id="9", model_artifact_id="11", namespace=ns, created=True,
        )  # fmt: skip
        notify.handle(_event(registered, "registered"))
        assert (ready()["status"], ready()["reason"]) == ("False", "NotSigned")
        sign(False, "unsigned")
        assert (ready()["status"], ready()["reason"]) == ("True", "Ready"), ready()
        assert ready()["observedGeneration"] == 2
        sign(True, "signed-again")
        assert (ready()["status"], ready()["reason"]) == ("False", "NotSigned"), ready()
        before = cluster.get_model(ns, "bert")
        assert before is not None
        notify.handle(_event(ModelUpdated(  # its echo, and a redelivery: nothing changes
            name="bert", namespace=ns, version="1", spec=before["spec"], status=before["status"],
        ), "echo"))  # fmt: skip
        after = cluster.get_model(ns, "bert")
        assert (
            after and after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        )
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()


def test_a_registration_of_another_source_under_the_same_version_is_not_told(
    admin: Admin, tmp_path: Path
) -> None:
    """Model bert version 1 of models/demo deleted and created again as version 1 of
    models/other (its source fixed): the first's model.registered, delivered late with the
    subject naming bert, told the second it was Registered and Ready at models/demo's digest
    (a rollout of the other artifact). The news names its source; the Model's is another."""
    from modelhooks.core.function import Skip

    ns = admin.namespace(rollout=False)
    source = {"oci": {"reference": "registry.local:5000/models/other:1"}}
    admin.create(ns, model("bert", source=source))
    settings = load_settings(
        env={
            "MODELHOOKS_HOME": str(tmp_path),
            "MODELHOOKS_NOTIFY_KUBECONFIG": str(admin.kubeconfig),
        }
    )
    app = build(settings)
    subject = f"/apis/modelhooks.dev/v1alpha1/namespaces/{ns}/models/bert"

    def registered(repository: str, digest: str) -> CanonicalEvent:
        data = ModelRegistered(
            model="bert", version="1", uri=f"oci://registry.local:5000/{repository}@{digest}",
            digest=digest, registry="kubernetes", registered_model_id="7",
            model_version_id="9", model_artifact_id="11", namespace=ns, created=True,
        )  # fmt: skip
        return CanonicalEvent(
            id=f"r-{repository}", source="it", type=data.TYPE, data=data,
            time=datetime(2026, 3, 1, tzinfo=UTC), subject=subject,
        )  # fmt: skip

    try:
        with pytest.raises(Skip, match="no Model"):
            app.function("notify").handle(registered("models/demo", DIGEST))
        assert app.deps.cluster is not None
        found = app.deps.cluster.get_model(ns, "bert")
        assert found and not found.get("status"), found.get("status")
        mine = "sha256:" + "e" * 64
        app.function("notify").handle(registered("models/other", mine))
        found = app.deps.cluster.get_model(ns, "bert")
        assert found and found["status"]["resolvedDigest"] == mine
        ready = {c["type"]: c for c in found["status"]["conditions"]}["Ready"]
        assert ready["status"] == "True", ready
    finally:
        for resource in (app.deps.cluster, app.deps.registry):
            getattr(resource, "close", lambda: None)()

"""cleanup's credentials from a Model's own namespace, on the real kube-apiserver (RBAC on)
and MinIO: `KubernetesSecrets` passes the `Secrets` contract as cleanup's ServiceAccount
(a TokenRequest token in a kubeconfig, as `cleanup.kubeconfig` names it), with the
ClusterRole of infra/k8s/rbac/cleanup.yaml bound per namespace; and cleanup deletes on
MinIO with the keys of the Model's Secret while the process's own keys are wrong — a Model
of another namespace naming the same Secret gets its own namespace's, never this one's."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelhooks.adapters.kubernetes.secrets import GRANT, kubernetes_secrets
from modelhooks.bootstrap import build
from modelhooks.core.errors import CredentialsRefused, Forbidden, NotFound
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPurged, CanonicalEvent, ModelDeleted
from tests.contract.secrets import Place, SecretsContract
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

RBAC = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "rbac" / "cleanup.yaml"
ACCOUNT = "modelhooks-cleanup"


@dataclass
class Cluster:
    """The apiserver as its admin sets it up, and cleanup's kubeconfig (its own token)."""

    api: Any
    account_namespace: str
    kubeconfig: Path

    def namespace(self, granted: bool) -> str:
        """A fresh namespace; `granted`: its owner binds GRANT to cleanup's account."""
        from kubernetes import client

        name = f"team-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(self.api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
        if granted:
            client.RbacAuthorizationV1Api(self.api).create_namespaced_role_binding(
                name,
                {
                    "metadata": {"name": GRANT},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": GRANT,
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": ACCOUNT,
                            "namespace": self.account_namespace,
                        }
                    ],
                },
            )
            self._until_allowed(name)
        return name

    def put(self, namespace: str, name: str, data: Mapping[str, bytes]) -> None:
        from kubernetes import client

        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        client.CoreV1Api(self.api).create_namespaced_secret(
            namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=name), data=encoded)
        )

    def _until_allowed(self, namespace: str, timeout: float = 15.0) -> None:
        """Wait until the authorizer has the binding (its informer catches up)."""
        from kubernetes import client

        review = {
            "spec": {
                "user": f"system:serviceaccount:{self.account_namespace}:{ACCOUNT}",
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "get",
                    "resource": "secrets",
                },
            }
        }
        deadline = time.monotonic() + timeout
        authz = client.AuthorizationV1Api(self.api)
        while not authz.create_subject_access_review(review).status.allowed:
            assert time.monotonic() < deadline, f"binding in {namespace} not effective"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(
    kube_apiserver: KubeApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    from kubernetes import client

    with kube_apiserver.api_client() as api:
        roles = [
            d
            for d in yaml.safe_load_all(RBAC.read_text())
            if d["kind"] == "ClusterRole" and d["metadata"]["name"] in (GRANT, ACCOUNT)
        ]
        rbac = client.RbacAuthorizationV1Api(api)
        for role in roles:
            try:
                rbac.create_cluster_role(role)  # the file's roles themselves, as deployed
            except client.ApiException as exc:
                if exc.status != 409:  # another module of the session created it
                    raise
        core = client.CoreV1Api(api)
        home = f"modelhooks-{uuid.uuid4().hex[:8]}"  # where the functions run
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=home)))
        core.create_namespaced_service_account(
            home, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=ACCOUNT))
        )
        rbac.create_cluster_role_binding(  # the file's binding, for this run's ServiceAccount
            {
                "metadata": {"name": home},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": ACCOUNT,
                },
                "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": home}],
            }
        )
        token = kube_apiserver.token_for(ACCOUNT, home, seconds=3600)
        path = tmp_path_factory.mktemp("cleanup-kube") / "kubeconfig"
        kubeconfig = kube_apiserver.write_kubeconfig(path, token=token, user=ACCOUNT)
        yield Cluster(api, home, kubeconfig)


class TestKubernetesSecrets(SecretsContract):
    @pytest.fixture
    def place(self, cluster: Cluster) -> Place:
        secrets = kubernetes_secrets(str(cluster.kubeconfig), env={})
        assert secrets is not None
        return Place(secrets, cluster.namespace, cluster.put)


def test_the_refusal_says_how_a_namespace_grants_it(cluster: Cluster) -> None:
    closed = cluster.namespace(False)
    secrets = kubernetes_secrets(str(cluster.kubeconfig), env={})
    assert secrets is not None
    with pytest.raises(Forbidden, match=f"ClusterRole {GRANT} .* RoleBinding in '{closed}'"):
        secrets.get(closed, "anything")


# --- cleanup on MinIO with the Model's own keys -----------------------------------------


def test_cleanup_deletes_with_the_models_secret_not_the_process_keys(
    cluster: Cluster, minio: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")  # the process's own keys: refused
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-too")
    monkeypatch.setenv("AWS_DEFAULT_REGION", minio.region)
    bucket, prefix = f"secret-{uuid.uuid4().hex[:12]}", "models/bert/1/"
    files = [prefix + f for f in ("weights.bin", "_SUCCESS", "model.sig")]
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        for key in files:
            s3.put_object(Bucket=bucket, Key=key, Body=key.encode())

        def left() -> list[str]:
            listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
            return sorted(o["Key"] for o in listed)

        keys = {
            "AWS_ACCESS_KEY_ID": minio.access_key.encode(),
            "AWS_SECRET_ACCESS_KEY": minio.secret_key.encode(),
        }
        team_a, team_b, closed = (cluster.namespace(g) for g in (True, True, False))
        cluster.put(team_a, "s3-credentials", keys)
        cluster.put(team_b, "s3-credentials", {**keys, "AWS_ACCESS_KEY_ID": b"team-b"})
        cluster.put(closed, "s3-credentials", keys)
        settings = load_settings(
            env={
                "MODELHOOKS_HOME": str(tmp_path),
                "MODELHOOKS_STORE_BACKEND": "cloud",
                "MODELHOOKS_STORE_S3_ENDPOINT_URL": minio.endpoint_url,
                "MODELHOOKS_CLEANUP_KUBECONFIG": str(cluster.kubeconfig),
            }
        )
        cleanup = build(settings, registry=InMemoryModelRegistry()).function("cleanup")

        def delete(namespace: str, secret: str | None) -> list[Any]:
            source: dict[str, Any] = {"s3": {"uri": f"s3://{bucket}/{prefix}"}}
            if secret:
                source["secretRef"] = {"name": secret}
            data = ModelDeleted(
                name="bert",
                namespace=namespace,
                spec={"deletionPolicy": "Delete", "source": source},
            )
            at = datetime.now(UTC) + timedelta(seconds=1)
            event = CanonicalEvent(
                id=f"d-{namespace}", source="t", type=data.TYPE, data=data, time=at
            )
            return [r.data for r in cleanup.handle(event)]

        with pytest.raises(CredentialsRefused):  # the control: the process's keys do not work
            delete(team_a, None)
        with pytest.raises(CredentialsRefused):  # team-b's Model gets team-b's keys, not team-a's
            delete(team_b, "s3-credentials")
        with pytest.raises(Forbidden, match=closed):  # a namespace that did not opt in
            delete(closed, "s3-credentials")
        with pytest.raises(NotFound, match="elsewhere"):
            delete(team_a, "elsewhere")
        assert left() == sorted(files)  # nothing went so far
        (reply,) = delete(team_a, "s3-credentials")
        assert isinstance(reply, ArtifactPurged) and reply.namespace == team_a
        assert sorted(reply.deleted) == sorted(files) and not reply.failed
        assert left() == []

"""infra/k8s/transfer/job.yaml run as a Job on the harness's real node with the image
the image test builds: upstream's async-upload environment (Secrets for S3 and
.dockerconfigjson, the metadata ConfigMap, MODEL_SYNC_* env, the three SIGSTORE_*_URL),
changed only where the test node needs it (hostNetwork, loopback addresses of MinIO,
distribution v3, the Model Registry server and a private Sigstore trusting the node's
apiserver). The Job signs with its own projected token; the model lands on its base image in
the registry, registered LIVE, and verifies with upstream `model_signing verify sigstore`."""

from __future__ import annotations

import functools
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.core.records import ArtifactState
from tests.integration.manifests import Kubectl, documents
from tests.integration.transfer_helpers import pull, upstream_verify
from tests.servers.containers import Podman
from tests.servers.fixtures import _serve
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer
from tests.servers.node import Node
from tests.servers.objectstores import Minio
from tests.servers.registries import OciRegistry
from tests.servers.sigstore import NEEDS as SIGSTORE_NEEDS
from tests.servers.sigstore import Sigstore, start_sigstore

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "infra" / "k8s" / "transfer" / "job.yaml"


@pytest.fixture(scope="module")
def job_sigstore(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, node: Node
) -> Iterator[Sigstore]:
    """A private Sigstore whose OIDC issuer is the node's apiserver (the Job's tokens)."""
    yield from _serve(
        request, tmp_path_factory, SIGSTORE_NEEDS, functools.partial(start_sigstore, kube=node.kube)
    )


def for_the_node(
    docs: list[dict[str, Any]], namespace: str, image: str, values: dict[str, str]
) -> list[dict[str, Any]]:
    """The example as this node runs it: its namespace, our image, hostNetwork (no cluster
    DNS or Services here), the Secrets' and env's values pointing at the loopback servers,
    and Sigstore's bootstrap root from a ConfigMap. Nothing else."""
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "Secret" and "AWS_BUCKET" in doc["stringData"]:
            doc["stringData"].update(
                {
                    k: values[k]
                    for k in (
                        "AWS_ACCESS_KEY_ID",
                        "AWS_SECRET_ACCESS_KEY",
                        "AWS_BUCKET",
                        "AWS_REGION",
                        "AWS_ENDPOINT_URL",
                    )
                }
            )
        elif doc["kind"] == "Secret":
            doc["stringData"][".dockerconfigjson"] = json.dumps(
                {"auths": {values["OCI_HOST"]: {"auth": "", "email": "user@example.com"}}}
            )
        elif doc["kind"] == "ConfigMap":
            doc["data"]["RegisteredModel.name"] = values["MODEL"]
        elif doc["kind"] == "Job":
            pod = doc["spec"]["template"]["spec"]
            pod["hostNetwork"] = True
            pod["volumes"].append({"name": "sigstore-root", "configMap": {"name": "sigstore-root"}})
            (container,) = pod["containers"]
            container["image"] = image
            container["volumeMounts"].append(
                {"name": "sigstore-root", "mountPath": "/etc/sigstore", "readOnly": True}
            )
            env = {e["name"]: e for e in container["env"]}
            for name, value in values.items():
                if name.startswith(("MODEL_SYNC_", "SIGSTORE_")):
                    env[name] = {"name": name, "value": value}
            container["env"] = list(env.values())
    return docs


def test_the_example_job_copies_registers_and_signs_on_the_node(
    node: Node,
    image: str,
    podman: Podman,
    job_sigstore: Sigstore,
    minio: Minio,
    distribution3: OciRegistry,
    model_registry: ModelRegistryServer,
    tmp_path: Path,
) -> None:
    namespace = f"transfer-{secrets.token_hex(3)}"
    model = f"sentiment-{secrets.token_hex(3)}"
    bucket = f"transfer-{secrets.token_hex(5)}"
    files = {"config.json": b'{"layers": 2}', "weights.bin": os.urandom(3 * 1024 * 1024)}
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        for name, data in files.items():
            s3.put_object(Bucket=bucket, Key=f"my-model/{name}", Body=data)

    reference = f"{node.registry.host}/modelhooks:{image.rsplit(':', 1)[1]}"
    podman("push", "--tls-verify=false", image, f"docker://{reference}")
    kubectl = Kubectl(node.kube, tmp_path / "kubectl")
    kubectl("create", "namespace", namespace)
    kubectl("create", "configmap", "sigstore-root", "-n", namespace,
            f"--from-file=root.json={job_sigstore.tuf_root}")  # fmt: skip
    host, port = model_registry.url.removeprefix("http://").rstrip("/").split(":")
    values = {
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_BUCKET": bucket,
        "AWS_REGION": minio.region,
        "AWS_ENDPOINT_URL": minio.endpoint_url,
        "OCI_HOST": distribution3.host,
        "MODEL": model,
        "MODEL_SYNC_DESTINATION_OCI_URI": f"{distribution3.host}/models/{model}:v1",
        "MODEL_SYNC_DESTINATION_OCI_REGISTRY": distribution3.host,
        "MODEL_SYNC_DESTINATION_OCI_BASE_IMAGE": node.probe_image,  # on another registry
        "MODEL_SYNC_REGISTRY_SERVER_ADDRESS": f"http://{host}",
        "MODEL_SYNC_REGISTRY_PORT": port,
        **job_sigstore.env(),
        "SIGSTORE_TUF_ROOT": "/etc/sigstore/root.json",
    }
    docs = for_the_node(documents(EXAMPLE.read_text()), namespace, reference, values)
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    job = next(d["metadata"]["name"] for d in docs if d["kind"] == "Job")
    waited = kubectl("wait", "-n", namespace, f"job/{job}", "--for=condition=complete",
                     "--timeout=170s", check=False)  # fmt: skip
    logs = kubectl("logs", "-n", namespace, f"job/{job}", check=False)
    assert "condition met" in waited, logs
    pod = json.loads(kubectl("get", "pods", "-n", namespace, "-l", f"job-name={job}", "-o", "json"))
    (status,) = pod["items"][0]["status"]["containerStatuses"]
    result = json.loads(status["state"]["terminated"]["message"])  # the termination message
    assert '"progress": "finished"' in logs

    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        (artifact,) = registry.list_artifacts(result["model_version_id"])
        assert (artifact.id, artifact.state, artifact.uri) == (
            result["model_artifact_id"],
            ArtifactState.LIVE,
            result["uri"],
        )
        assert registry.get_model(model) is not None
    finally:
        registry.close()
    identity = Sigstore.identity(namespace, "model-sync")
    assert result["signed_by"].startswith(f"sigstore {identity}")

    client, repo, ref = OciClients().for_uri(result["uri"])
    manifest, _, _ = client.manifest(repo, ref)
    assert len(manifest["layers"]) == len(files) + 1 + _layers(node.probe_image)
    pulled = pull(result["uri"], tmp_path / "pulled")
    assert {p.name: p.read_bytes() for p in pulled.iterdir() if p.name != "model.sig"} == files
    upstream = upstream_verify(pulled, identity, job_sigstore, tmp_path)
    assert upstream.returncode == 0, upstream.stdout + upstream.stderr
    kubectl("delete", "namespace", namespace, "--wait=false")


def _layers(reference: str) -> int:
    client, repo, ref = OciClients().for_uri(f"oci://{reference}")
    return len(client.manifest(repo, ref)[0]["layers"])

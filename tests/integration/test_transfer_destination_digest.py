"""A transfer's OCI destination names the tag it pushes the model under: one naming a
digest (`repo@sha256:…`, `repo:v1@sha256:…`) cannot be pushed (a manifest's digest is
what its bytes hash to, known only once the model is copied), and is refused before
anything is registered or copied, on distribution v3 and Kubeflow's Model Registry."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.oci.distribution import DistributionRegistry
from tests.integration.test_transfer_register import job_env, model, transfer
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer
from tests.servers.registries import OciRegistry

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("shape", ["tag-and-digest", "digest"])
def test_an_oci_destination_naming_a_digest_is_refused_before_anything_moves(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    distribution3: OciRegistry,
    shape: str,
) -> None:
    name = f"pinned-{secrets.token_hex(4)}"
    src = tmp_path / "model"
    model(src)
    digest = "sha256:" + "ab" * 32
    ref = f"models/{name}:v1@{digest}" if shape == "tag-and-digest" else f"models/{name}@{digest}"
    env = job_env(
        tmp_path,
        model_registry,
        source=src,
        MODEL_SYNC_MODEL_UPLOAD_INTENT="create_model",
        MODEL_SYNC_MODEL_NAME=name,
        MODEL_SYNC_MODEL_VERSION_NAME="v1",
        MODEL_SYNC_DESTINATION_TYPE="oci",
        MODEL_SYNC_DESTINATION_OCI_URI=f"{distribution3.host}/{ref}",
        MODEL_SYNC_DESTINATION_OCI_REGISTRY=distribution3.host,
        MODEL_SYNC_DESTINATION_OCI_BASE_IMAGE="scratch",
    )
    done = transfer(env)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "MODEL_SYNC_DESTINATION_OCI_URI" in done.stderr and digest in done.stderr
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        assert registry.get_model(name) is None  # nothing registered
    finally:
        registry.close()
    client = DistributionRegistry(distribution3.url)
    assert client.request("GET", f"/v2/models/{name}/tags/list")[0] == 404  # nothing pushed

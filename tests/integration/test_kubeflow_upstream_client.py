"""Upstream's Python client (`model-registry` on PyPI, pinned in the dev extra) and modelhooks
on the same real server: it reads what register writes (a model by name, a version and its
artifact by the externalIds modelhooks gives them, every field and typed property as its
own types), and modelhooks reads and updates what it writes, keeping its types.

Upstream's own `register_model` looks its version up by name and parent first, which
v0.3.0 on PostgreSQL answers with 500 (SQLSTATE 42P01), so on that server it cannot
register at all; what it writes here goes through the same API calls minus that lookup.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
import warnings
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import requests

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry, external_id
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from modelhooks.handlers.register import register_model
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """The client's async runner: a loop per call (no nest_asyncio patching this process)."""
    return asyncio.run(coro)


@pytest.fixture
def upstream(model_registry: ModelRegistryServer) -> Iterator[Any]:
    with warnings.catch_warnings():  # its own import warns (a shadowed pydantic field)
        warnings.simplefilter("ignore")
        from model_registry import ModelRegistry

    host, port = model_registry.url.rsplit(":", 1)
    yield ModelRegistry(
        host, int(port), author="upstream", is_secure=False, user_token="t", async_runner=_run
    )


@pytest.fixture
def kubeflow(model_registry: ModelRegistryServer) -> Iterator[KubeflowModelRegistry]:
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    yield registry
    registry.close()


def test_upstream_reads_what_register_writes(
    upstream: Any, kubeflow: KubeflowModelRegistry
) -> None:
    name = f"ours-{uuid.uuid4().hex[:8]}"
    pushed = ArtifactPushed(
        model=name,
        version="1",
        uri=f"s3://models/{name}/1/",
        digest="content-sha256:ab",
        store="s3",
    )
    (reply,) = register_model(CanonicalEvent.new(pushed, source="t"), pushed, registry=kubeflow)
    model = kubeflow.get_model(name)
    assert model is not None
    kubeflow.update_model(
        msgspec.structs.replace(
            model,
            description="sentiment",
            custom_properties={**model.custom_properties, "kubeflow.owner": "team-nlp"},
        )
    )
    version = kubeflow.get_version(model.id, "1")
    assert version is not None
    kubeflow.update_version(
        msgspec.structs.replace(
            version, custom_properties={**version.custom_properties, "kubeflow.author": "ci"}
        )
    )
    (artifact,) = kubeflow.list_artifacts(version.id)
    kubeflow.upsert_artifact(
        msgspec.structs.replace(
            artifact,
            custom_properties={
                **artifact.custom_properties,
                "kubeflow.model_format_name": "onnx",
                "kubeflow.model_format_version": "1.17",
            },
        )
    )

    rm = upstream.get_registered_model(name)
    assert (rm.id, rm.owner, rm.description) == (model.id, "team-nlp", "sentiment")
    assert rm.custom_properties["namespace"] == "default"
    api = upstream._api
    mv = _run(api.get_model_version_by_params(external_id=external_id(model.id, "1")))
    assert (mv.id, mv.name, mv.author) == (reply.data.model_version_id, "1", "ci")  # type: ignore[union-attr]
    assert mv.custom_properties["digest"] == "content-sha256:ab"
    ma = _run(api.get_model_artifact_by_params(external_id=external_id(mv.id, "model")))
    assert (ma.id, ma.uri) == (reply.data.model_artifact_id, f"s3://models/{name}/1/")  # type: ignore[union-attr]
    assert (ma.model_format_name, ma.model_format_version) == ("onnx", "1.17")
    assert ma.state.value == "LIVE"


def test_modelhooks_reads_and_updates_what_upstream_writes(
    upstream: Any, kubeflow: KubeflowModelRegistry
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from model_registry.types import ModelArtifact, ModelVersion, RegisteredModel

    api = upstream._api
    name = f"theirs-{uuid.uuid4().hex[:8]}"
    rm = _run(
        api.upsert_registered_model(
            RegisteredModel(
                name=name, owner="alice", description="d", custom_properties={"team": "nlp"}
            )
        )
    )
    mv = _run(
        api.upsert_model_version(
            ModelVersion(
                name="1",
                author="bob",
                custom_properties={"accuracy": 0.95, "epochs": 3, "tuned": True, "stage": "dev"},
            ),
            rm.id,
        )
    )
    _run(
        api.upsert_model_version_artifact(
            ModelArtifact(
                name=name, uri="s3://b/theirs/1", model_format_name="onnx", model_format_version="1"
            ),
            mv.id,
        )
    )

    model = kubeflow.get_model(name)
    assert model is not None
    assert model.custom_properties == {"team": "nlp", "kubeflow.owner": "alice"}
    (version,) = kubeflow.list_versions(model.id)
    assert version.id == mv.id
    assert version.custom_properties == {
        "accuracy": "0.95",
        "epochs": "3",
        "tuned": "true",
        "stage": "dev",
        "kubeflow.author": "bob",
    }
    # sign's write: a property added, an int changed; upstream reads its own types back
    props = {**version.custom_properties, "epochs": "4", "signature.signer": "key abc"}
    kubeflow.update_version(msgspec.structs.replace(version, custom_properties=props))
    again = _run(api.get_model_version_by_id(mv.id))
    assert again.author == "bob"
    assert again.custom_properties == {
        "accuracy": 0.95,
        "epochs": 4,
        "tuned": True,
        "stage": "dev",
        "signature.signer": "key abc",
    }


def test_transfer_metadata_lands_typed_and_registry_show_prints_the_types(
    upstream: Any, model_registry: ModelRegistryServer, tmp_path: Path
) -> None:
    """The drop-in's ConfigMap JSON (`{"accuracy": 0.95, …}`) written as upstream's job
    writes it: a double, an int, a bool, a struct; upstream's client reads them so."""
    name = f"typed-{uuid.uuid4().hex[:8]}"
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"w" * 100)
    meta = tmp_path / "metadata"
    meta.mkdir()
    custom = {"accuracy": 0.95, "epochs": 3, "tuned": True, "layers": {"n": [12]}, "team": "nlp"}
    for key, value in {
        "RegisteredModel.name": name,
        "RegisteredModel.custom_properties": json.dumps({"project": "sentiment"}),
        "ModelVersion.name": "v1",
        "ModelVersion.custom_properties": json.dumps(custom),
        "ModelArtifact.custom_properties": json.dumps({"f1_score": 0.93}),
    }.items():
        (meta / key).write_text(value)
    host, port = model_registry.url.removeprefix("http://").rstrip("/").split(":")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "MODEL_SYNC_SOURCE_TYPE": "local",
        "MODEL_SYNC_SOURCE_PATH": str(tmp_path / "model"),
        "MODEL_SYNC_DESTINATION_TYPE": "local",
        "MODEL_SYNC_DESTINATION_PATH": str(tmp_path / "out"),
        "MODEL_SYNC_MODEL_UPLOAD_INTENT": "create_model",
        "MODEL_SYNC_METADATA_CONFIGMAP_PATH": str(meta),
        "MODEL_SYNC_REGISTRY_SERVER_ADDRESS": host,
        "MODEL_SYNC_REGISTRY_PORT": port,
        "MODEL_SYNC_REGISTRY_IS_SECURE": "false",
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
        "MODEL_SYNC_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
    }
    done = subprocess.run(
        [str(BIN / "modelhooks"), "transfer"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    ids = json.loads(done.stdout)

    mv = _run(upstream._api.get_model_version_by_id(ids["model_version_id"]))
    got = {k: v for k, v in mv.custom_properties.items() if k in custom}
    # upstream's client has no struct type: it reads what v0.3.0 answers, the JSON text
    assert got == {**custom, "layers": '{"n":[12]}'}
    assert [type(got[k]) for k in ("accuracy", "epochs", "tuned")] == [float, int, bool]
    raw = requests.get(
        f"{model_registry.api_url}/model_versions/{ids['model_version_id']}", timeout=10
    ).json()["customProperties"]
    assert raw["layers"]["metadataType"] == "MetadataStructValue"
    ma = _run(upstream._api.get_model_artifact_by_id(ids["model_artifact_id"]))
    assert ma.custom_properties["f1_score"] == 0.93

    shown = subprocess.run(
        [str(BIN / "modelhooks"), "registry", "show", f"{name}/v1"],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "MODELHOOKS_REGISTRY_BACKEND": "kubeflow",
            "MODELHOOKS_REGISTRY_URL": model_registry.url,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["custom_properties"]["project"] == "sentiment"
    (version,) = doc["versions"]
    assert {k: version["custom_properties"][k] for k in custom} == custom  # the struct too
    assert version["artifacts"][0]["custom_properties"]["f1_score"] == 0.93

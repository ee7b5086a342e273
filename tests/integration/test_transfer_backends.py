"""`modelhooks transfer` without MODEL_SYNC_REGISTRY_SERVER_ADDRESS registers in the modelhooks
registry every other command uses (the embedded SQLite default, or `--registry-backend` /
MODELHOOKS_REGISTRY_BACKEND: here the Kubernetes resources on the REAL kube-apiserver),
through the CLI as a user runs it: typed metadata kept as each backend can, and the signer
recorded on the version as `sign` records it, so `registry list` names it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers.kube import KubeApiServer
from tests.unit.signing_material import KeyPair, make_key

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"
CUSTOM = {"accuracy": 0.95, "epochs": 3, "tuned": True, "layers": {"n": [12]}, "team": "nlp"}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"))


def job(tmp_path: Path, name: str, keys: KeyPair, **extra: str) -> dict[str, str]:
    """A create_model transfer of a small local model, signed with a key, and NO
    MODEL_SYNC_REGISTRY_* setting."""
    src, meta = tmp_path / "model", tmp_path / "metadata"
    src.mkdir(exist_ok=True)
    (src / "weights.bin").write_bytes(os.urandom(1000))
    meta.mkdir(exist_ok=True)
    (meta / "RegisteredModel.name").write_text(name)
    (meta / "ModelVersion.name").write_text("v1")
    (meta / "ModelVersion.custom_properties").write_text(json.dumps(CUSTOM))
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "MODEL_SYNC_SOURCE_TYPE": "local",
        "MODEL_SYNC_SOURCE_PATH": str(src),
        "MODEL_SYNC_DESTINATION_TYPE": "local",
        "MODEL_SYNC_DESTINATION_PATH": str(tmp_path / "out"),
        "MODEL_SYNC_MODEL_UPLOAD_INTENT": "create_model",
        "MODEL_SYNC_METADATA_CONFIGMAP_PATH": str(meta),
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
        "MODEL_SYNC_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        "MODEL_SYNC_SIGN": "true",
        "MODEL_SYNC_SIGNING_KEY": str(keys.private),
        **extra,
    }


def modelhooks(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in the test's directory (where a default `.modelhooks` home would go)."""
    return subprocess.run(
        [str(BIN / "modelhooks"), *args],
        env=env,
        cwd=env["HOME"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def listed(env: dict[str, str], name: str, *flags: str) -> dict[str, Any]:
    done = modelhooks(env, "registry", "list", "--json", *flags)
    assert done.returncode == 0, done.stderr
    (row,) = [r for r in json.loads(done.stdout) if r["model"] == name]
    return row  # type: ignore[no-any-return]


def shown(env: dict[str, str], name: str, *flags: str) -> dict[str, Any]:
    done = modelhooks(env, "registry", "show", f"{name}/v1", *flags)
    assert done.returncode == 0, done.stderr
    (version,) = json.loads(done.stdout)["versions"]
    return version  # type: ignore[no-any-return]


def test_the_embedded_sqlite_registry_by_default(tmp_path: Path, keys: KeyPair) -> None:
    name = f"sqlite-{secrets.token_hex(4)}"
    env = job(tmp_path, name, keys, MODELHOOKS_HOME=str(tmp_path / "home"))
    done = modelhooks(env, "transfer")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    db = tmp_path / "home" / "registry.db"
    assert f"registering in the sqlite registry at {db}" in done.stderr
    assert result["registry"] == "sqlite" and result["state"] == "LIVE"

    row = listed(env, name)
    assert (row["version"], row["uri"], row["digest"]) == ("v1", result["uri"], result["digest"])
    assert row["signed_by"] == result["signed_by"] and result["signed_by"].startswith("key ")
    version = shown(env, name)
    assert {k: version["custom_properties"][k] for k in CUSTOM} == CUSTOM  # JSON types kept
    assert version["custom_properties"]["signature.uri"] == f"{result['uri']}/model.sig"
    assert version["custom_properties"]["signature.artifact_digest"] == result["digest"]
    assert version["artifacts"][0]["state"] == "LIVE"

    again = modelhooks(env, "transfer")  # a re-run resumes the same records
    assert again.returncode == 0, again.stderr
    rerun = json.loads(again.stdout)
    assert [rerun[k] for k in ("model_id", "model_version_id", "model_artifact_id")] == [
        result[k] for k in ("model_id", "model_version_id", "model_artifact_id")
    ]


@pytest.fixture(scope="module")
def kube_registry(
    kube_apiserver: KubeApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """A kubeconfig for the apiserver with the registry's CRDs, and a registry namespace."""
    from kubernetes import client

    kube_apiserver.install_crd(CRDS / "registeredmodel.yaml", "registeredmodels")
    kube_apiserver.install_crd(CRDS / "modelversion.yaml", "modelversions")
    namespace = f"transfer-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
    path = tmp_path_factory.mktemp("transfer-kube") / "kubeconfig"
    yield kube_apiserver.write_kubeconfig(path), namespace


def test_the_kubernetes_registry_by_flag_or_environment(
    tmp_path: Path, keys: KeyPair, kube_registry: tuple[Path, str]
) -> None:
    kubeconfig, namespace = kube_registry
    name = f"kube-{secrets.token_hex(4)}"
    env = job(tmp_path, name, keys, MODELHOOKS_REGISTRY_KUBECONFIG=str(kubeconfig))
    flags = ("--registry-backend", "kubernetes", "--registry-namespace", namespace)
    done = modelhooks(env, "transfer", *flags)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["registry"] == "kubernetes"
    assert f"registering in the kubernetes registry (shared namespace {namespace})" in done.stderr
    assert not (tmp_path / ".modelhooks").exists()  # nothing went to the SQLite default

    row = listed(env, name, *flags)
    assert (row["uri"], row["digest"]) == (result["uri"], result["digest"])
    assert row["signed_by"] == result["signed_by"] != ""
    version = shown(env, name, *flags)
    # a map of strings: each value's JSON text, as the metadata wrote it
    assert {k: version["custom_properties"][k] for k in CUSTOM} == {
        k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
        for k, v in CUSTOM.items()
    }

    env |= {"MODELHOOKS_REGISTRY_BACKEND": "kubernetes", "MODELHOOKS_REGISTRY_NAMESPACE": namespace}
    again = modelhooks(env, "transfer")  # the environment's twin: the same records
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["model_version_id"] == result["model_version_id"]

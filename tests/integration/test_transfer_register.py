"""`modelhooks transfer` end to end on the real servers: the Kubeflow Model Registry server
(v0.3.0 + PostgreSQL), MinIO, distribution v3 and the private Sigstore. Each intent
registers what it copied (PENDING → LIVE), a failure leaves the artifact ABANDONED with
its reason, a re-run resumes the same model and version, two concurrent runs create one of
each, and signatures verify with upstream `model_signing verify`."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import model_signing
import pytest

from modelhooks.adapters.model_registry.kubeflow import FAILURE_REASON, KubeflowModelRegistry
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelVersion, RegisteredModel
from tests.integration.transfer_helpers import image_files, pull, upstream_verify
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer
from tests.servers.objectstores import Minio
from tests.servers.registries import OciRegistry
from tests.servers.sigstore import Sigstore
from tests.unit.signing_material import KeyPair, make_key

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
NS, SA = "ml-transfer", "async-upload"


@pytest.fixture
def kubeflow(model_registry: ModelRegistryServer) -> Iterator[KubeflowModelRegistry]:
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    yield registry
    registry.close()


def model(root: Path) -> dict[str, bytes]:
    files = {"config.json": b'{"layers": 2}', "weights.bin": os.urandom(100_000)}
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return files


def metadata(root: Path, name: str, version: str) -> Path:
    meta = root / "metadata"
    meta.mkdir()
    values = {
        "RegisteredModel.name": name,
        "RegisteredModel.owner": "nlp-team",
        "RegisteredModel.custom_properties": '{"project": "sentiment-analysis", "team": "nlp"}',
        "ModelVersion.name": version,
        "ModelVersion.author": "alice",
        "ModelVersion.custom_properties": '{"accuracy": 0.95, "f1_score": 0.93}',
        "ModelArtifact.model_format_name": "onnx",
        "ModelArtifact.model_format_version": "1",
    }
    for key, value in values.items():
        (meta / key).write_text(value)
    return meta


def job_env(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    *,
    source: Path | None = None,
    out: Path | None = None,
    **extra: str,
) -> dict[str, str]:
    """What a Job manifest sets: the registry (plain http here), the termination path; a
    local directory as the source and as the destination (`out`) when given."""
    host, port = model_registry.url.removeprefix("http://").split(":")
    local = {}
    if source is not None:
        local |= {"MODEL_SYNC_SOURCE_TYPE": "local", "MODEL_SYNC_SOURCE_PATH": str(source)}
    if out is not None:
        local |= {"MODEL_SYNC_DESTINATION_TYPE": "local", "MODEL_SYNC_DESTINATION_PATH": str(out)}
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "MODEL_SYNC_REGISTRY_SERVER_ADDRESS": host,
        "MODEL_SYNC_REGISTRY_PORT": port.rstrip("/"),
        "MODEL_SYNC_REGISTRY_IS_SECURE": "false",
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
        "MODEL_SYNC_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        **local,
        **extra,
    }


def transfer(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "modelhooks"), "transfer", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def s3_destination(minio: Minio, bucket: str, key: str) -> dict[str, str]:
    return {
        "MODEL_SYNC_DESTINATION_TYPE": "s3",
        "MODEL_SYNC_DESTINATION_AWS_BUCKET": bucket,
        "MODEL_SYNC_DESTINATION_AWS_KEY": key,
        "MODEL_SYNC_DESTINATION_AWS_REGION": minio.region,
        "MODEL_SYNC_DESTINATION_AWS_ACCESS_KEY_ID": minio.access_key,
        "MODEL_SYNC_DESTINATION_AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "MODEL_SYNC_DESTINATION_AWS_ENDPOINT": minio.endpoint_url,
    }


def new_artifact(
    kubeflow: KubeflowModelRegistry, prefix: str, *artifact: Any
) -> tuple[RegisteredModel, ModelVersion, ModelArtifact]:
    """A new model `prefix-<random>`, its version v1 and an artifact in it: `artifact` the
    ModelArtifact fields after the version id (default: an artifact "model", no URI yet)."""
    registered = kubeflow.create_model(f"{prefix}-{secrets.token_hex(4)}", properties={})
    version = kubeflow.create_version(registered.id, "v1", properties={})
    fields = artifact or ("model", "", "")
    return registered, version, kubeflow.upsert_artifact(ModelArtifact("", version.id, *fields))


@pytest.fixture
def bucket(minio: Minio) -> str:
    name = f"transfer-{secrets.token_hex(5)}"
    with minio.s3_client() as client:
        client.create_bucket(Bucket=name)
    return name


def test_a_refused_copy_ends_its_progress_as_failed_not_finished(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    minio: Minio,
    bucket: str,
) -> None:
    """MinIO refusing the destination's credentials: the Job's JSON progress ends `failed`
    (it said `finished`). The refusal comes from the destination's claim, before anything
    is registered (exit 3, credentials refused: the operator's to fix; a HEAD of the first
    file answered 403, exit 2, with the artifact ABANDONED)."""
    name = f"refused-{secrets.token_hex(4)}"
    model(tmp_path / "model")
    destination = s3_destination(minio, bucket, f"{name}/v1")
    destination["MODEL_SYNC_DESTINATION_AWS_SECRET_ACCESS_KEY"] = "not-the-key"
    env = job_env(
        tmp_path,
        model_registry,
        source=tmp_path / "model",
        MODEL_SYNC_MODEL_UPLOAD_INTENT="create_model",
        MODEL_SYNC_METADATA_CONFIGMAP_PATH=str(metadata(tmp_path, name, "v1")),
        **destination,
    )
    failed = transfer(env)
    assert failed.returncode == 3, failed.stderr
    assert f"S3 refused the credentials for s3://{bucket}/{name}/v1.transfer-claim" in (
        failed.stderr
    )
    progress = [json.loads(line) for line in failed.stderr.splitlines() if line.startswith("{")]
    assert progress[-1]["progress"] == "failed"
    assert all(p["progress"] != "finished" for p in progress)
    assert kubeflow.get_model(name) is None  # refused before anything was registered


def test_create_model_registers_live_and_a_rerun_resumes_the_same_ids(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    minio: Minio,
    bucket: str,
) -> None:
    name = f"sentiment-{secrets.token_hex(4)}"
    src = tmp_path / "model"
    env = job_env(
        tmp_path,
        model_registry,
        MODEL_SYNC_SOURCE_TYPE="pvc",
        MODEL_SYNC_SOURCE_PATH=str(src),
        MODEL_SYNC_MODEL_UPLOAD_INTENT="create_model",
        MODEL_SYNC_METADATA_CONFIGMAP_PATH=str(metadata(tmp_path, name, "v1")),
        **s3_destination(minio, bucket, f"{name}/v1"),
    )
    # the source is not there yet: the copy fails, the artifact is left ABANDONED, not PENDING
    failed = transfer(env)
    assert failed.returncode == 2, failed.stderr
    found = kubeflow.get_model(name)
    assert found is not None
    version = kubeflow.get_version(found.id, "v1")
    assert version is not None
    (artifact,) = kubeflow.list_artifacts(version.id)
    assert artifact.state == ArtifactState.ABANDONED
    assert "no such file or directory" in artifact.custom_properties[FAILURE_REASON]

    files = model(src)
    done = transfer(env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert json.loads((tmp_path / "termination-log").read_text()) == result
    assert (result["model_id"], result["model_version_id"], result["model_artifact_id"]) == (
        found.id,
        version.id,
        artifact.id,
    )  # resumed: the same model, version and artifact, no "already exists"
    assert result["state"] == "LIVE" and result["uri"] == f"s3://{bucket}/{name}/v1"
    live = kubeflow.list_artifacts(version.id)[0]
    assert (live.state, live.uri, live.digest) == (
        ArtifactState.LIVE,
        result["uri"],
        result["digest"],
    )
    assert FAILURE_REASON not in live.custom_properties
    assert live.custom_properties["kubeflow.model_format_name"] == "onnx"
    model_props = kubeflow.get_model(name).custom_properties  # type: ignore[union-attr]
    assert model_props["team"] == "nlp" and model_props["kubeflow.owner"] == "nlp-team"
    assert version.custom_properties["accuracy"] == "0.95"
    assert version.custom_properties["kubeflow.author"] == "alice"
    with minio.s3_client() as client:
        for path, data in files.items():
            got = client.get_object(Bucket=bucket, Key=f"{name}/v1/{path}")["Body"].read()
            assert got == data
    progress = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert progress[-1]["progress"] == "finished" and progress[-1]["bytes"] == sum(
        map(len, files.values())
    )


def test_update_artifact_and_create_version(
    tmp_path: Path, model_registry: ModelRegistryServer, kubeflow: KubeflowModelRegistry
) -> None:
    registered, version, pending = new_artifact(
        kubeflow, "m", "model", "", "", ArtifactState.PENDING, {"keep": "me"}
    )
    src = tmp_path / "model"
    model(src)
    env = job_env(tmp_path, model_registry, source=src, out=tmp_path / "out")
    done = transfer(env, "--model-artifact-id", pending.id)
    assert done.returncode == 0, done.stderr
    (artifact,) = kubeflow.list_artifacts(version.id)
    assert (artifact.id, artifact.state, artifact.uri) == (
        pending.id,
        ArtifactState.LIVE,
        str(tmp_path / "out"),
    )
    assert artifact.custom_properties["keep"] == "me"

    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "ModelVersion.name").write_text("v2")
    args = ["--model-upload-intent", "create_version", "--model-id", registered.id]
    env["MODEL_SYNC_METADATA_CONFIGMAP_PATH"] = str(tmp_path / "metadata")
    env["MODEL_SYNC_DESTINATION_PATH"] = str(tmp_path / "out2")
    created = transfer(env, *args)
    assert created.returncode == 0, created.stderr
    v2 = kubeflow.get_version(registered.id, "v2")
    assert v2 is not None and json.loads(created.stdout)["model_version_id"] == v2.id
    assert kubeflow.list_artifacts(v2.id)[0].state == ArtifactState.LIVE


def test_update_artifact_of_another_version_or_model_is_refused(
    tmp_path: Path, model_registry: ModelRegistryServer, kubeflow: KubeflowModelRegistry
) -> None:
    """update_artifact naming an artifact that is not in the version (or model) it names:
    refused before anything is copied, the artifact untouched (it was copied over and made
    LIVE, the result naming the other version)."""
    _, _, theirs = new_artifact(kubeflow, "theirs", "model", "s3://b/theirs", "sha256:" + "0" * 64)
    mine, my_version, my_artifact = new_artifact(kubeflow, "mine")
    src = tmp_path / "model"
    model(src)
    env = job_env(tmp_path, model_registry, source=src, out=tmp_path / "out")
    for ids in (
        ["--model-version-id", my_version.id],
        ["--model-id", mine.id, "--model-version-id", my_version.id],
        ["--model-id", mine.id],
    ):
        refused = transfer(env, "--model-artifact-id", theirs.id, *ids)
        assert refused.returncode == 2, (ids, refused.stdout, refused.stderr)
        assert f"no ModelArtifact {theirs.id!r} in" in refused.stderr
    assert not (tmp_path / "out").exists()
    after = kubeflow.get_artifact(theirs.id)
    assert after is not None
    assert (after.uri, after.digest, after.state) == (theirs.uri, theirs.digest, theirs.state)
    # named with its own version and model, the artifact is updated
    done = transfer(env, "--model-artifact-id", my_artifact.id, "--model-id", mine.id,
                    "--model-version-id", my_version.id)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "LIVE"


def test_two_concurrent_runs_make_one_version_and_one_copy(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    distribution3: OciRegistry,
) -> None:
    name = f"c-{secrets.token_hex(4)}"
    src = tmp_path / "model"
    files = model(src)
    repo = f"models/{name}"
    env = job_env(
        tmp_path,
        model_registry,
        source=src,
        MODEL_SYNC_DESTINATION_OCI_URI=f"{distribution3.host}/{repo}:v1",
        MODEL_SYNC_DESTINATION_OCI_BASE_IMAGE="scratch",
        MODEL_SYNC_MODEL_UPLOAD_INTENT="create_model",
        MODEL_SYNC_METADATA_CONFIGMAP_PATH=str(metadata(tmp_path, name, "v1")),
    )
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: transfer(env), range(2)))
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    results = [json.loads(r.stdout) for r in runs]
    assert results[0]["model_artifact_id"] == results[1]["model_artifact_id"]
    assert results[0]["uri"] == results[1]["uri"]  # the same manifest: one copy
    found = kubeflow.get_model(name)
    assert found is not None
    assert [v.name for v in kubeflow.list_versions(found.id)] == ["v1"]
    assert image_files(f"oci://{distribution3.host}/{repo}:v1") == files


def test_the_signature_of_a_version_named_by_id_is_recorded_without_a_listing(
    kubeflow: KubeflowModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """update_artifact naming the model and version ids: the version is read by its id (on
    v0.3.0 listing a model's versions is a scan of the whole registry), only when it is of
    the model named."""
    from modelhooks.adapters.transfer.register import Target, record_signature

    registered, version, artifact = new_artifact(kubeflow, "sig")
    sent: list[tuple[str, str]] = []
    send = kubeflow._http.urlopen

    def record(method: str, url: str, **kwargs: Any) -> Any:
        sent.append((method, url.removeprefix(kubeflow.api_url).partition("?")[0]))
        return send(method, url, **kwargs)

    monkeypatch.setattr(kubeflow._http, "urlopen", record)
    target = Target(model_id=registered.id, version_id=version.id, artifact=artifact)
    assert record_signature(kubeflow, target, {"signature.signer": "key abc"})
    assert sent[0] == ("GET", f"/model_versions/{version.id}")
    assert ("GET", "/model_versions") not in sent
    stored = kubeflow.get_version(registered.id, "v1")
    assert stored is not None and stored.custom_properties["signature.signer"] == "key abc"
    other = Target(
        model_id=str(int(registered.id) + 10_000), version_id=version.id, artifact=artifact
    )
    assert not record_signature(kubeflow, other, {"signature.signer": "key def"})


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"))


def test_signed_with_a_key_verifies_with_upstream_model_signing(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    keys: KeyPair,
) -> None:
    src, out = tmp_path / "model", tmp_path / "out"
    model(src)
    _, _, artifact = new_artifact(kubeflow, "k")
    env = job_env(
        tmp_path,
        model_registry,
        source=src,
        out=out,
        MODEL_SYNC_MODEL_ARTIFACT_ID=artifact.id,
        MODEL_SYNC_SIGN="true",
        MODEL_SYNC_SIGNING_KEY=str(keys.private),
    )
    done = transfer(env)
    assert done.returncode == 0, done.stderr
    assert (out / "model.sig").is_file()
    # no version named (update_artifact by the artifact's id): the artifact keeps the signature
    signed = kubeflow.get_artifact(artifact.id)
    assert signed is not None
    assert signed.custom_properties["signature.signer"] == json.loads(done.stdout)["signed_by"]
    assert signed.custom_properties["signature.uri"] == f"{out}/model.sig"
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
        out, out / "model.sig"
    )
    (out / "weights.bin").write_bytes(b"tampered")
    with pytest.raises(ValueError):
        model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
            out, out / "model.sig"
        )


def test_sign_true_without_a_signer_fails_before_copying(
    tmp_path: Path, model_registry: ModelRegistryServer
) -> None:
    src = tmp_path / "model"
    model(src)
    env = job_env(
        tmp_path,
        model_registry,
        source=src,
        out=tmp_path / "out",
        MODEL_SYNC_MODEL_ARTIFACT_ID="1",
        MODEL_SYNC_SIGN="true",
    )
    failed = transfer(env)
    assert failed.returncode == 2 and "SIGSTORE_TUF_URL" in failed.stderr
    assert not (tmp_path / "out").exists()


def test_keyless_with_the_jobs_token_on_the_sigstore_urls_into_an_oci_image(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    sigstore: Sigstore,
    distribution3: OciRegistry,
) -> None:
    src = tmp_path / "model"
    files = model(src)
    token = tmp_path / "token"
    token.write_text(sigstore.token(NS, SA))
    name = f"keyless-{secrets.token_hex(4)}"
    env = job_env(
        tmp_path,
        model_registry,
        **sigstore.env(),  # all three SIGSTORE_*_URL: signing on, no --sign needed
        source=src,
        MODEL_SYNC_DESTINATION_OCI_URI=f"{distribution3.host}/models/{name}:v1",
        MODEL_SYNC_DESTINATION_OCI_BASE_IMAGE="scratch",
        MODEL_SYNC_DESTINATION_OCI_ENABLE_TLS_VERIFY="false",  # as upstream's sample: http here
        MODEL_SYNC_MODEL_UPLOAD_INTENT="create_model",
        MODEL_SYNC_METADATA_CONFIGMAP_PATH=str(metadata(tmp_path, name, "v1")),
        MODEL_SYNC_SIGNING_IDENTITY_TOKEN_PATH=str(token),
    )
    done = transfer(env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["signed_by"].startswith("sigstore " + Sigstore.identity(NS, SA))
    version = kubeflow.get_version(result["model_id"], "v1")  # as `sign` records it
    assert version is not None
    assert version.custom_properties["signature.signer"] == result["signed_by"]
    assert version.custom_properties["signature.uri"] == result["uri"]  # model.sig inside

    pulled = pull(result["uri"], tmp_path / "pulled")  # what a Pod sees under /models
    assert {p.name for p in pulled.iterdir()} == {*files, "model.sig"}
    upstream = upstream_verify(pulled, Sigstore.identity(NS, SA), sigstore, tmp_path)
    assert upstream.returncode == 0, upstream.stdout + upstream.stderr


def test_a_token_registry_through_the_dockerconfigjson_then_on_to_gcs(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    distribution3_token_auth: OciRegistry,
    token_server: Any,
    fake_gcs: Any,
) -> None:
    """The credential files as a Job mounts them: a .dockerconfigjson for a registry that
    wants Bearer tokens (base64 user:password, as `kubectl create secret docker-registry`
    writes it), and from that registry on to GCS, each registered LIVE."""
    src = tmp_path / "model"
    files = model(src)
    host = distribution3_token_auth.host
    secret = tmp_path / "oci-creds"
    secret.mkdir()
    auth = base64.b64encode(f"writer:{token_server.users['writer'][0]}".encode()).decode()
    (secret / ".dockerconfigjson").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    _, version, first = new_artifact(kubeflow, "t")
    repo = f"auth/transfer-{secrets.token_hex(4)}"
    env = job_env(
        tmp_path,
        model_registry,
        source=src,
        MODEL_SYNC_DESTINATION_OCI_URI=f"{host}/{repo}:v1",
        MODEL_SYNC_DESTINATION_OCI_FORMAT="artifact",
        MODEL_SYNC_DESTINATION_OCI_CREDENTIALS_PATH=str(secret / ".dockerconfigjson"),
        MODEL_SYNC_MODEL_ARTIFACT_ID=first.id,
    )
    done = transfer(env)
    assert done.returncode == 0, done.stderr
    assert token_server.seen(repo)  # the registry's tokens were fetched as `writer`
    refused = transfer(
        {**env, "MODEL_SYNC_DESTINATION_OCI_CREDENTIALS_PATH": str(tmp_path / "none")}
    )
    assert refused.returncode == 2 and "none" in refused.stderr

    bucket = f"transfer-{secrets.token_hex(5)}"
    fake_gcs.storage_client().create_bucket(bucket)
    second = kubeflow.upsert_artifact(ModelArtifact("", version.id, "copy", "", ""))
    env = job_env(
        tmp_path,
        model_registry,
        **fake_gcs.env,
        GOOGLE_CLOUD_PROJECT=fake_gcs.project,
        MODEL_SYNC_SOURCE_TYPE="oci",
        MODEL_SYNC_SOURCE_OCI_URI=f"{host}/{repo}:v1",
        MODEL_SYNC_SOURCE_OCI_CREDENTIALS_PATH=str(secret),
        MODEL_SYNC_DESTINATION_TYPE="gcs",
        MODEL_SYNC_DESTINATION_GCS_BUCKET=bucket,
        MODEL_SYNC_DESTINATION_GCS_KEY="m/v1",
        MODEL_SYNC_MODEL_ARTIFACT_ID=second.id,
    )
    done = transfer(env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["uri"] == f"gs://{bucket}/m/v1"
    listed = fake_gcs.storage_client().list_blobs(bucket, prefix="m/v1/")
    blobs = {b.name: b.download_as_bytes() for b in listed}
    assert blobs == {f"m/v1/{name}": data for name, data in files.items()}
    claim = json.loads(fake_gcs.storage_client().bucket(bucket).blob("m/v1.transfer-claim")
                       .download_as_bytes())  # fmt: skip
    assert claim["source"] == f"oci://{host}/{repo}:v1"  # beside the model, not in it


def test_a_terminated_job_leaves_the_artifact_abandoned_saying_so(
    tmp_path: Path, model_registry: ModelRegistryServer, kubeflow: KubeflowModelRegistry
) -> None:
    """SIGTERM (a deleted Job, an evicted Pod) in the middle of a copy: ABANDONED with the
    reason, not PENDING forever."""
    import http.server
    import socketserver
    import threading
    import time

    class Slow(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(10 * 1024 * 1024))
            self.end_headers()
            for _ in range(100):  # a trickle: the transfer is mid-copy for seconds
                try:
                    self.wfile.write(b"x" * 1024)
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.1)

    _, version, artifact = new_artifact(kubeflow, "s")
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Slow) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = job_env(
            tmp_path,
            model_registry,
            MODEL_SYNC_SOURCE_TYPE="uri",
            MODEL_SYNC_SOURCE_URI=f"http://127.0.0.1:{server.server_address[1]}/weights.bin",
            MODEL_SYNC_SOURCE_URI_ALLOW_LOCAL="true",
            out=tmp_path / "out",
            MODEL_SYNC_MODEL_ARTIFACT_ID=artifact.id,
        )
        job = subprocess.Popen(
            [str(BIN / "modelhooks"), "transfer"], env=env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 30
        while kubeflow.list_artifacts(version.id)[0].state != ArtifactState.PENDING:
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.1)
        time.sleep(0.5)
        job.terminate()
        _, err = job.communicate(timeout=30)
        server.shutdown()
    assert job.returncode == 130, err
    (found,) = kubeflow.list_artifacts(version.id)
    assert found.state == ArtifactState.ABANDONED
    assert "terminated (SIGTERM)" in found.custom_properties[FAILURE_REASON]


def test_a_killed_job_s_rerun_finishes_and_another_source_s_job_exits_4(
    tmp_path: Path,
    model_registry: ModelRegistryServer,
    kubeflow: KubeflowModelRegistry,
    minio: Minio,
    bucket: str,
) -> None:
    """A Job SIGKILLed mid-copy into MinIO (OOM, a lost node: nothing recorded, the
    destination's claim left): a Job of another source into that destination exits 4
    naming the claim and how to clear it, nothing of it copied nor its artifact touched;
    the killed Job's retry (the same source) finishes, LIVE. Before: the other source's
    Job copied into the half-written destination and made its artifact LIVE there."""
    import http.server
    import socketserver
    import threading
    import time

    weights = os.urandom(256 * 1024)
    served: list[int] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            served.append(1)
            self.send_response(200)
            self.send_header("Content-Length", str(len(weights)))
            self.end_headers()
            step = 1024 if len(served) == 1 else len(weights)  # the first run trickles
            for start in range(0, len(weights), step):
                try:
                    self.wfile.write(weights[start : start + step])
                    self.wfile.flush()
                except OSError:
                    return
                if len(served) == 1:
                    time.sleep(0.05)

    _, version, artifact = new_artifact(kubeflow, "killed")
    _, other_version, other = new_artifact(kubeflow, "other")
    destination = s3_destination(minio, bucket, "shared/v1")
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Slow) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = job_env(
            tmp_path,
            model_registry,
            MODEL_SYNC_SOURCE_TYPE="uri",
            MODEL_SYNC_SOURCE_URI=f"http://127.0.0.1:{server.server_address[1]}/weights.bin",
            MODEL_SYNC_SOURCE_URI_ALLOW_LOCAL="true",
            MODEL_SYNC_MODEL_ARTIFACT_ID=artifact.id,
            **destination,
        )
        job = subprocess.Popen(
            [str(BIN / "modelhooks"), "transfer"], env=env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 30
        while kubeflow.list_artifacts(version.id)[0].state != ArtifactState.PENDING:
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.1)
        time.sleep(0.3)
        job.kill()
        job.communicate(timeout=30)
        # another source's Job into the same destination
        model(tmp_path / "other")
        other_env = job_env(
            tmp_path,
            model_registry,
            source=tmp_path / "other",
            MODEL_SYNC_MODEL_ARTIFACT_ID=other.id,
            **destination,
        )
        refused = transfer(other_env)
        assert refused.returncode == 4, refused.stderr
        claim = f"s3://{bucket}/shared/v1.transfer-claim"
        assert f"delete {claim} and the objects under s3://{bucket}/shared/v1/" in refused.stderr
        assert "/weights.bin, run " in refused.stderr  # the killed run's source, named
        (untouched,) = kubeflow.list_artifacts(other_version.id)
        assert (untouched.state, untouched.uri) == (other.state, other.uri)
        with minio.s3_client() as client:
            listed = client.list_objects_v2(Bucket=bucket, Prefix="shared/v1/").get("Contents", [])
        assert {o["Key"] for o in listed} <= {"shared/v1/weights.bin"}  # none of the other's
        # the killed Job's retry: the same source, it finishes
        done = transfer(env)
        server.shutdown()
    assert done.returncode == 0, done.stderr
    (found,) = kubeflow.list_artifacts(version.id)
    assert found.state == ArtifactState.LIVE and found.uri == f"s3://{bucket}/shared/v1"
    with minio.s3_client() as client:
        body = client.get_object(Bucket=bucket, Key="shared/v1/weights.bin")["Body"].read()
    assert body == weights

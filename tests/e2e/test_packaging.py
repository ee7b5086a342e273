"""The package as its users install it, in fresh venvs outside the repository:

- the wheel alone, no extras: `modelhooks serve` routes by the Trigger YAML it carries, and
  every command or setting that needs an optional library stops with exit 2 naming the
  extra to install (never a traceback, exit 3, a 500 or a 503);
- the Cloud Run functions source folder of each function (main.py + requirements.txt + the
  wheel), installed as Cloud Run installs it, handles a real-shaped upstream notification of
  each backend it can be configured with, on the real server: an Eventarc GCS finalize on
  fake-gcs-server, a MinIO notification on MinIO, the Kubernetes registry and Models on the
  kube-apiserver."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from modelhooks.bootstrap import extras_of
from modelhooks.events import samples
from modelhooks.handlers import NAMES, load
from tests.e2e.packaging import (
    binary,
    cached_venv,
    folder_key,
    free_port,
    post,
    pushed_event,
    target,
    wheel_digest,
)
from tests.servers.kube import KubeApiServer
from tests.servers.objectstores import FakeGcs, Minio
from tests.tools.cloud_run_sources import ROOT, build_wheel, write_sources

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_the_modelhooks_namespace_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"modelhooks", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert "modelhooks/triggers.yaml" in names
    assert "modelhooks/events/schemas/dev.modelhooks.artifact.pushed.v1.json" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests")]


@pytest.fixture(scope="module")
def bare(wheel: Path) -> Path:
    """The wheel alone in a fresh venv (`pip install modelhooks`, no extras); its bin/."""
    return cached_venv(f"bare-{wheel_digest(wheel)[:24]}", str(wheel))


@pytest.fixture
def served(bare: Path, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """`modelhooks serve` from a fresh venv, run in a directory outside the repository."""
    bin_dir = bare
    port, home = free_port(), tmp_path / "home"
    _local_model(home)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MODELHOOKS_HOME": str(home), "PORT": str(port)}
    log = (tmp_path / "serve.log").open("wb")
    with (
        log,
        subprocess.Popen(
            [str(bin_dir / "modelhooks"), "serve"], cwd=tmp_path, env=env, stderr=log, stdout=log
        ) as proc,
    ):
        try:
            yield f"http://127.0.0.1:{port}/", bin_dir, home
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _local_model(home: Path) -> None:
    """The files of the canonical push's model (gs://models/models/sentiment/1/) in the
    embedded store, which stands for every bucket (no marker: the push is the event)."""
    version = home / "store" / "models" / "models" / "sentiment" / "1"
    version.mkdir(parents=True)
    (version / "weights.bin").write_bytes(b"w" * 64)


def test_installed_serve_registers_an_event_through_its_triggers(
    served: tuple[str, Path, Path], tmp_path: Path
) -> None:
    url, bin_dir, home = served
    headers, body = pushed_event()
    status, _, answer = post(url, headers, body)
    assert status == 200, answer
    outcomes = json.loads(answer)["outcomes"]
    assert {o["function"] for o in outcomes} >= {"register"}, outcomes
    listed = subprocess.run(
        [str(bin_dir / "modelhooks"), "registry", "list", "--json"],
        env={"MODELHOOKS_HOME": str(home)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(listed.stdout)
    data = json.loads(body)
    assert [(r["model"], r["version"]) for r in rows] == [(data["model"], data["version"])]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with an EC key pair (key.pem, key.pub) and a model (model/)."""
    where = tmp_path_factory.mktemp("keys")
    openssl = ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"]
    subprocess.run([*openssl, str(where / "key.pem")], check=True)
    subprocess.run(
        ["openssl", "ec", "-in", "key.pem", "-pubout", "-out", "key.pub"],
        cwd=where,
        check=True,
        capture_output=True,
    )
    (where / "model").mkdir()
    (where / "model" / "weights.bin").write_bytes(b"w" * 64)
    return where


# What a user without the extras runs, and the extra each needs: the command stops with
# exit 2 naming `pip install 'modelhooks[<extra>]'` (was: tracebacks, exit 3, a 500).
WITHOUT_EXTRAS = [
    (["verify", "model", "--public-key", "key.pub"], {}, "signing"),
    (["sign", "model", "--key", "key.pem"], {}, "signing"),
    (["sign", "gs://models/models/demo/1", "--key", "key.pem"], {}, "gcp"),
    (["sign", "s3://models/models/demo/1", "--key", "key.pem"], {}, "aws"),
    (["watch-models"], {}, "k8s"),
    (["registry", "list"], {"MODELHOOKS_REGISTRY_BACKEND": "kubernetes"}, "k8s"),
    (["serve", "--signing-key", "key.pem"], {}, "signing"),  # refuses to start
    (["serve", "--store-backend", "cloud"], {}, "aws,gcp"),
    (["serve"], {"MODELHOOKS_NOTIFY_KUBECONFIG": "key.pub"}, "k8s"),
]


@pytest.mark.parametrize(("argv", "env", "extra"), WITHOUT_EXTRAS, ids=lambda v: str(v))
def test_without_an_extra_a_command_names_it_and_exits_2(
    bare: Path, keys: Path, tmp_path: Path, argv: list[str], env: dict[str, str], extra: str
) -> None:
    environ = {"PATH": f"{bare}:/usr/bin:/bin", "HOME": str(tmp_path), "PORT": str(free_port())}
    environ |= {"MODELHOOKS_HOME": str(tmp_path / "home"), **env}
    done = subprocess.run(
        [str(bare / "modelhooks"), *argv],
        cwd=keys,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert f"pip install 'modelhooks[{extra}]'" in out, out
    assert "Traceback" not in out and "internal error" not in out, out


def test_a_cloud_run_revision_without_an_extra_its_settings_select_does_not_start(
    bare: Path, keys: Path, tmp_path: Path
) -> None:
    """store.backend=cloud for register in a venv without gcp and aws: functions-framework
    stops at start-up naming them (the platform keeps the previous revision), instead of
    answering 503 to every push; notify, which never lists a store, starts."""
    env = {"MODELHOOKS_HOME": str(tmp_path / "home"), "MODELHOOKS_STORE_BACKEND": "cloud"}
    log = tmp_path / "ff.log"
    with pytest.raises(AssertionError, match=r"exited with [1-9]") as stopped:  # noqa: SIM117
        with target(bare, ROOT, "register", env, log):
            pass
    assert "pip install 'modelhooks[aws,gcp]'" in str(stopped.value)
    with target(bare, ROOT, "notify", env, tmp_path / "notify.log") as url:
        headers, body = pushed_event()
        assert post(url, headers, body)[0] < 300


@pytest.fixture(scope="module")
def sources(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`make sources`: one Cloud Run source folder per function."""
    return write_sources(wheel, tmp_path_factory.mktemp("sources"))


def folder_venv(folder: Path) -> Path:
    """The folder installed as Cloud Run installs it (`pip install -r requirements.txt` in a
    fresh venv), kept by what it installs; its bin/ dir."""
    return cached_venv(f"folder-{folder_key(folder)}", "-r", "requirements.txt", cwd=folder)


def test_each_source_folder_carries_the_extras_its_dependencies_can_import(
    sources: dict[str, Path], wheel: Path
) -> None:
    for name, folder in sources.items():
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            ["main.py", "requirements.txt", wheel.name]
        )
        extras = extras_of(load(name))
        assert (folder / "requirements.txt").read_text() == f"./{wheel.name}[{','.join(extras)}]\n"
    assert set(extras_of(load("register"))) >= {"gcp", "aws", "k8s"}  # it lists GCS/S3
    # the root folder (every target, `--source .`) installs every function's extras
    every = {e for name in NAMES for e in extras_of(load(name))}
    lines = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln[:1] != "#"]
    (line,) = lines
    assert line.startswith(".[") and set(line[2:-1].split(",")) == every, line


@pytest.mark.parametrize("name", NAMES)
def test_each_cloud_run_source_serves_its_target_from_a_fresh_venv(
    sources: dict[str, Path], tmp_path: Path, name: str
) -> None:
    folder = sources[name]
    bin_dir = folder_venv(folder)
    env = {"MODELHOOKS_HOME": str(tmp_path / "home")}
    _local_model(tmp_path / "home")
    with target(bin_dir, folder, name, env, tmp_path / "ff.log") as url:
        headers, body = pushed_event()
        status, _, answer = post(url, headers, body)
    assert status in (200, 204), (answer, (tmp_path / "ff.log").read_text()[-3000:])


# Each function that acts on object-store models, with each store backend it can be
# configured with, as Cloud Run runs its folder (store.backend=cloud): a real-shaped upstream
# notification of the real server, answered 2xx, with its effect there.
OBJECT_STORE_FUNCTIONS = ("register", "sign", "prune", "cleanup")


@pytest.mark.integration
@pytest.mark.parametrize("name", OBJECT_STORE_FUNCTIONS)
def test_each_folder_handles_an_eventarc_gcs_finalize_on_fake_gcs(
    sources: dict[str, Path], fake_gcs: FakeGcs, tmp_path: Path, name: str
) -> None:
    bucket, prefix = f"models-{uuid.uuid4().hex[:8]}", "models/sentiment/1/"
    gcs = fake_gcs.storage_client()
    store = gcs.create_bucket(bucket)
    for key in ("weights.bin", "config.json", "_SUCCESS"):
        store.blob(prefix + key).upload_from_string(key.encode())
    marker = store.get_blob(prefix + "_SUCCESS")
    env = {
        **_env(tmp_path, name),
        **fake_gcs.env,
        "GOOGLE_CLOUD_PROJECT": fake_gcs.project,
        "MODELHOOKS_STORE_BACKEND": "cloud",
    }
    if name == "cleanup":
        doc = _model_deleted(f"gs://{bucket}/{prefix}")
    else:
        doc = copy.deepcopy(samples.load("gcs-eventarc-finalized-marker"))
        doc["id"], doc["bucket"] = uuid.uuid4().hex, bucket
        doc["source"] = f"//storage.googleapis.com/projects/_/buckets/{bucket}"
        doc["subject"] = f"objects/{prefix}_SUCCESS"
        doc["time"] = datetime.now(UTC).isoformat()
        data = doc["data"]
        data["bucket"], data["name"] = bucket, prefix + "_SUCCESS"
        data["generation"], data["md5Hash"] = str(marker.generation), marker.md5_hash
        data["id"] = f"{bucket}/{prefix}_SUCCESS/{marker.generation}"
    if name == "sign":  # sign acts on registered versions: register's folder first
        _deliver(sources["register"], "register", env, doc, tmp_path)
    keys = _deliver(sources[name], name, env, doc, tmp_path)
    listed = lambda: sorted(b.name for b in gcs.list_blobs(bucket))  # noqa: E731
    _assert_effect(name, listed(), prefix, keys, tmp_path, f"gs://{bucket}/{prefix}")


@pytest.mark.integration
@pytest.mark.parametrize("name", OBJECT_STORE_FUNCTIONS)
def test_each_folder_handles_a_minio_notification_on_minio(
    sources: dict[str, Path], minio: Minio, tmp_path: Path, name: str
) -> None:
    bucket, prefix = f"models-{uuid.uuid4().hex[:8]}", "models/sentiment/1/"
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        for key in ("weights.bin", "config.json", "_SUCCESS"):
            put = s3.put_object(Bucket=bucket, Key=prefix + key, Body=key.encode())
        env = {
            **_env(tmp_path, name),
            "AWS_ACCESS_KEY_ID": minio.access_key,
            "AWS_SECRET_ACCESS_KEY": minio.secret_key,
            "AWS_DEFAULT_REGION": minio.region,
            "MODELHOOKS_STORE_BACKEND": "cloud",
            "MODELHOOKS_STORE_S3_ENDPOINT_URL": minio.endpoint_url,
        }
        if name == "cleanup":
            doc = _model_deleted(f"s3://{bucket}/{prefix}")
            headers, body = binary(doc)
        else:  # MinIO's webhook body, as MinIO posts it
            doc = copy.deepcopy(samples.load("s3-minio-put-marker"))
            doc["Key"] = f"{bucket}/{prefix}_SUCCESS"
            record = doc["Records"][0]
            record["eventTime"] = datetime.now(UTC).isoformat()
            record["s3"]["bucket"]["name"] = bucket
            record["s3"]["bucket"]["arn"] = f"arn:aws:s3:::{bucket}"
            record["s3"]["object"]["key"] = quote(prefix + "_SUCCESS", safe="")
            record["s3"]["object"]["eTag"] = put["ETag"].strip('"')
            headers, body = {"Content-Type": "application/json"}, json.dumps(doc).encode()
        if name == "sign":  # sign acts on registered versions: register's folder first
            _deliver(sources["register"], "register", env, (headers, body), tmp_path)
        keys = _deliver(sources[name], name, env, (headers, body), tmp_path)
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        objects = sorted(o["Key"] for o in listed)
    _assert_effect(name, objects, prefix, keys, tmp_path, f"s3://{bucket}/{prefix}")


def _env(tmp_path: Path, name: str) -> dict[str, str]:
    env = {"MODELHOOKS_HOME": str(tmp_path / "home")}
    if name == "sign":
        key = tmp_path / "key.pem"
        subprocess.run(
            ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)],
            check=True,
        )
        env["MODELHOOKS_SIGNING_KEY"] = str(key)
    return env


def _model_deleted(uri: str) -> dict[str, Any]:
    """The ApiServerSource's delete of a Model whose source is `uri`, policy Delete."""
    doc = copy.deepcopy(samples.load("k8s-resource-delete"))
    doc["id"], doc["time"] = str(uuid.uuid4()), datetime.now(UTC).isoformat()
    scheme = "gcs" if uri.startswith("gs://") else "s3"
    doc["data"]["spec"]["source"] = {scheme: {"uri": uri}}
    doc["data"]["spec"]["deletionPolicy"] = "Delete"
    doc["data"]["status"].pop("digest", None)
    return doc


def _deliver(
    folder: Path,
    name: str,
    env: dict[str, str],
    event: dict[str, Any] | tuple[dict[str, str], bytes],
    tmp_path: Path,
) -> dict[str, Any]:
    """POST the event to the folder's target run from its own venv; the answer's JSON."""
    bin_dir = folder_venv(folder)
    headers, body = binary(event) if isinstance(event, dict) else event
    log = tmp_path / "ff.log"
    with target(bin_dir, folder, name, env, log) as url:
        status, _, answer = post(url, headers, body)
    assert 200 <= status < 300, (status, answer, log.read_text()[-3000:])
    return {"bin": bin_dir, "answer": answer, "status": status}


def _assert_effect(
    name: str, objects: list[str], prefix: str, got: dict[str, Any], tmp_path: Path, uri: str
) -> None:
    model = [prefix + k for k in ("_SUCCESS", "config.json", "weights.bin")]
    if name == "register":
        listed = subprocess.run(
            [str(got["bin"] / "modelhooks"), "registry", "list", "--json"],
            env={"MODELHOOKS_HOME": str(tmp_path / "home")},
            capture_output=True,
            text=True,
            check=True,
        )
        rows = json.loads(listed.stdout)
        assert [(r["model"], r["version"], r["uri"]) for r in rows] == [("sentiment", "1", uri)]
        assert rows[0]["digest"].startswith("content-sha256:")  # listed in the store
    elif name == "sign":
        # the signature, and the binding of the signed objects admission checks
        assert objects == sorted([*model, prefix + "model.sig", prefix + "model.sig.binding"])
    elif name == "cleanup":
        assert objects == [], objects
    else:  # prune: an object-store push is no tag to prune; the model stays as it is
        assert objects == model, objects


@pytest.mark.integration
def test_register_and_notify_folders_act_on_the_kube_apiserver(
    sources: dict[str, Path], fake_gcs: FakeGcs, kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    """register with registry.backend=kubernetes (a GCS finalize → a ModelVersion resource)
    and notify with notify.kubeconfig (a Model's ApiServerSource add → its finalizer), each
    from its own folder's venv."""
    from kubernetes import client

    crds = ROOT / "infra" / "k8s" / "crds"
    for crd, plural in (
        ("model.yaml", "models"),
        ("registeredmodel.yaml", "registeredmodels"),
        ("modelversion.yaml", "modelversions"),
    ):
        kube_apiserver.install_crd(crds / crd, plural)
    name, namespace = f"pkg-{uuid.uuid4().hex[:8]}", f"registry-{uuid.uuid4().hex[:8]}"
    kubeconfig = str(kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    bucket, prefix = f"models-{uuid.uuid4().hex[:8]}", f"models/{name}/1/"
    store = fake_gcs.storage_client().create_bucket(bucket)
    for key in ("weights.bin", "_SUCCESS"):
        store.blob(prefix + key).upload_from_string(key.encode())
    marker = store.get_blob(prefix + "_SUCCESS")
    finalize = copy.deepcopy(samples.load("gcs-eventarc-finalized-marker"))
    finalize["id"], finalize["bucket"], finalize["subject"] = name, bucket, f"objects/{prefix}"
    finalize["data"] |= {"bucket": bucket, "name": prefix + "_SUCCESS"}
    finalize["data"] |= {"generation": str(marker.generation), "md5Hash": marker.md5_hash}
    model = {
        "apiVersion": "modelhooks.dev/v1alpha1",
        "kind": "Model",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"source": {"gcs": {"uri": f"gs://{bucket}/{prefix}"}}, "version": "1"},
    }
    model["spec"]["deletionPolicy"] = "Delete"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        models = client.CustomObjectsApi(api)
        created = models.create_namespaced_custom_object(
            "modelhooks.dev", "v1alpha1", "default", "models", model
        )
        env = {
            "MODELHOOKS_HOME": str(tmp_path / "home"),
            **fake_gcs.env,
            "GOOGLE_CLOUD_PROJECT": fake_gcs.project,
            "MODELHOOKS_STORE_BACKEND": "cloud",
            "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
            "MODELHOOKS_REGISTRY_KUBECONFIG": kubeconfig,
            "MODELHOOKS_REGISTRY_NAMESPACE": namespace,
        }
        _deliver(sources["register"], "register", env, finalize, tmp_path)
        versions = models.list_namespaced_custom_object(
            "modelhooks.dev", "v1alpha1", namespace, "modelversions"
        )["items"]
        assert [(v["spec"]["modelName"], v["spec"]["name"]) for v in versions] == [(name, "1")]

        added = copy.deepcopy(samples.load("k8s-resource-add"))
        added["id"], added["name"], added["namespace"], added["data"] = (
            name,
            name,
            "default",
            created,
        )
        added["subject"] = f"/apis/modelhooks.dev/v1alpha1/namespaces/default/models/{name}"
        env = {
            "MODELHOOKS_HOME": str(tmp_path / "notify"),
            "MODELHOOKS_NOTIFY_KUBECONFIG": kubeconfig,
        }
        _deliver(sources["notify"], "notify", env, added, tmp_path)
        now = models.get_namespaced_custom_object(
            "modelhooks.dev", "v1alpha1", "default", "models", name
        )
        assert "modelhooks.dev/cleanup" in now["metadata"].get("finalizers", []), now

"""The admission webhooks on the real kube-apiserver: `modelhooks serve` hosting only the
admission function over HTTPS (a harness-CA certificate), registered by clientConfig.url
https://127.0.0.1:PORT with that CA as caBundle; its policies read as the
modelhooks-admission ServiceAccount; models in cue-labs' registry (referrers API), signed
by `sign_oci` as the sign function does. Pods mount them as OCI image volumes."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import OCI_MANIFEST, DistributionRegistry, digest_of
from modelhooks.adapters.signing import CertificateSigner, KeySigner
from modelhooks.adapters.signing.oci import sign_oci
from tests.integration.test_signing_oci import push_model
from tests.servers._proc import free_port
from tests.servers.kube import KubeApiServer
from tests.unit.signing_material import Chain, KeyPair, make_chain, make_key, write_model

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"
MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
GROUP, VERSION = "modelhooks.dev", "v1alpha1"
TIMEOUT = 3  # admission.timeout: under the webhooks' timeoutSeconds (6)


@dataclass(frozen=True)
class Webhook:
    url: str
    label: str  # namespaces labelled admission-e2e=<label> opt in
    log: Path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, KeyPair]:
    d = tmp_path_factory.mktemp("keys")
    return make_key(d, "trusted"), make_key(d, "other")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Chain:
    return make_chain(tmp_path_factory.mktemp("chain"))


@pytest.fixture(scope="module")
def webhook(
    kube_apiserver: KubeApiServer,
    fake_gcs: Any,
    minio: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Webhook]:
    env = {
        "MODELHOOKS_STORE_BACKEND": "cloud",
        "GOOGLE_CLOUD_PROJECT": fake_gcs.project,
        **fake_gcs.env,
        "MODELHOOKS_STORE_S3_ENDPOINT_URL": minio.endpoint_url,
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_DEFAULT_REGION": minio.region,
    }
    with start_webhook(kube_apiserver, tmp_path_factory.mktemp("admission"), env) as started:
        yield started


@contextlib.contextmanager
def start_webhook(
    kube_apiserver: KubeApiServer, work: Path, env: dict[str, str] | None = None
) -> Iterator[Webhook]:
    """`modelhooks serve` hosting admission over HTTPS, registered with the apiserver for
    Pods in namespaces labelled admission-e2e=<its label>; `env`: more of its environment."""
    from kubernetes import client

    kube_apiserver.apply(K8S / "crds", K8S / "rbac")
    with kube_apiserver.api_client() as api:  # served (Established is not enough)
        custom, deadline = client.CustomObjectsApi(api), time.monotonic() + 30
        for plural in ("verificationpolicies", "clusterverificationpolicies"):
            while True:
                try:
                    custom.list_cluster_custom_object(GROUP, VERSION, plural)
                    break
                except client.ApiException:
                    assert time.monotonic() < deadline, plural
                    time.sleep(0.1)
    token = kube_apiserver.token_for("modelhooks-admission", "modelhooks", seconds=3600)
    kubeconfig = kube_apiserver.write_kubeconfig(work / "kubeconfig", token=token, user="admission")
    cert, key = kube_apiserver.ca.issue("admission", work)
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    environ.update(env or {})
    environ.update(
        MODELHOOKS_SERVE_FUNCTIONS="admission",
        MODELHOOKS_SERVE_WATCH_INTERVAL="0",
        MODELHOOKS_ADMISSION_TLS_CERT_FILE=str(cert),
        MODELHOOKS_ADMISSION_TLS_KEY_FILE=str(key),
        MODELHOOKS_ADMISSION_KUBECONFIG=str(kubeconfig),
        MODELHOOKS_ADMISSION_TIMEOUT=str(TIMEOUT),
        MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS="true",
        MODELHOOKS_LOG_LEVEL="DEBUG",
    )
    log = work / "serve.log"
    argv = [MODELHOOKS, "serve", "--port", str(port), "--home", str(work / "home")]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ)
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(kube_apiserver.ca.cert_file))
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2, context=context) as resp:
                assert json.load(resp)["functions"] == ["admission"]
                break
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    label = uuid.uuid4().hex[:10]
    name = f"admission-e2e-{label}.modelhooks.dev"
    common = {
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            },
            {
                "apiGroups": [GROUP],
                "apiVersions": [VERSION],
                "operations": ["CREATE"],
                "resources": ["models"],
            },
            {
                "apiGroups": ["serving.kserve.io"],
                "apiVersions": ["v1beta1"],
                "operations": ["CREATE"],
                "resources": ["inferenceservices"],
            },
            {
                "apiGroups": ["apps"],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["deployments"],
            },
        ],
        "namespaceSelector": {"matchLabels": {"admission-e2e": label}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 6,
    }
    ca_bundle = base64.b64encode(kube_apiserver.ca.cert_pem).decode()
    with kube_apiserver.api_client() as api:
        admission = client.AdmissionregistrationV1Api(api)
        admission.create_mutating_webhook_configuration(
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": f"pin.{name}",
                        "clientConfig": {"url": f"{url}/admission/mutate", "caBundle": ca_bundle},
                        "failurePolicy": "Ignore",
                        "reinvocationPolicy": "IfNeeded",
                        **common,
                    }
                ],
            }
        )
        admission.create_validating_webhook_configuration(
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": f"verify.{name}",
                        "clientConfig": {"url": f"{url}/admission/validate", "caBundle": ca_bundle},
                        "failurePolicy": "Fail",
                        **common,
                    }
                ],
            }
        )
        try:
            yield Webhook(url, label, log)
        finally:
            admission.delete_mutating_webhook_configuration(name)
            admission.delete_validating_webhook_configuration(name)
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def namespace(kube_apiserver: KubeApiServer, webhook: Webhook) -> str:
    from kubernetes import client

    name = f"adm-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            {"metadata": {"name": name, "labels": {"admission-e2e": webhook.label}}}
        )
    return name


@pytest.fixture
def repo() -> str:
    return f"admission-{uuid.uuid4().hex[:8]}/bert"  # never a repository another test uses


def create_policy(kube: KubeApiServer, namespace: str, name: str, spec: dict[str, Any]) -> None:
    from kubernetes import client

    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VerificationPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
    with kube.api_client() as api:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "verificationpolicies", body
        )


def trusting(pair: KeyPair, **spec: Any) -> dict[str, Any]:
    return {"keys": [{"name": "team", "pem": pair.public.read_text()}], **spec}


@dataclass(frozen=True)
class Created:
    status: int
    body: dict[str, Any]
    warnings: list[str]
    seconds: float

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


def create_pod_body(reference: str) -> dict[str, Any]:
    """A Pod mounting `reference` as an OCI image volume."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "model-"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "volumeMounts": [{"name": "model", "mountPath": "/model"}],
                }
            ],
            "volumes": [{"name": "model", "image": {"reference": reference}}],
        },
    }


def create_pod(
    kube: KubeApiServer, namespace: str, reference: str, *, timeout: float = 60
) -> Created:
    """POST a Pod mounting `reference` as an image volume, as kubectl would; the apiserver's
    answer with its Warning headers."""
    return post(kube, f"/api/v1/namespaces/{namespace}/pods", create_pod_body(reference), timeout)


def signed_model(
    registry: Any, repo: str, tmp_path: Path, signer: Any = None
) -> tuple[DistributionRegistry, str, str]:
    """A model pushed as `repo:v1` (and signed when `signer`): (client, reference, digest)."""
    client = DistributionRegistry(registry.url)
    model = write_model(tmp_path / uuid.uuid4().hex)
    (model / "id.txt").write_text(uuid.uuid4().hex)  # a digest of its own (the cache is by digest)
    push_model(client, repo, "v1", model)
    if signer is not None:
        sign_oci(client, repo, "v1", signer)
    _, digest, _ = client.manifest(repo, "v1")
    host = registry.url.removeprefix("http://")
    return client, f"{host}/{repo}:v1", digest


def test_an_unsigned_model_is_denied_saying_what_to_do(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    _, reference, digest = signed_model(ociregistry, repo, tmp_path)
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 403, created.body
    for part in (
        f"/{repo}",
        digest,
        f"VerificationPolicy {namespace}/team",
        "no signature refers",
        "modelhooks sign",
    ):
        assert part in created.message, created.message


def test_a_signed_model_is_admitted_with_its_tag_pinned_to_the_digest(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    _, reference, digest = signed_model(
        ociregistry, repo, tmp_path, KeySigner.from_file(keys[0].private)
    )
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 201, created.body
    pinned = created.body["spec"]["volumes"][0]["image"]["reference"]
    assert pinned == f"{reference.rpartition(':')[0]}@{digest}"  # what was verified is what runs


def test_another_key_is_refused_naming_the_signer(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    _, reference, _ = signed_model(
        ociregistry, repo, tmp_path, KeySigner.from_file(keys[1].private)
    )
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 403
    assert (
        "is by a signer the policy trusts" in created.message and "key sha256:" in created.message
    )


def test_a_signature_for_another_digest_is_refused(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    """A trusted signature of model A attached as a referrer of model B: B is refused."""
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    client, _, _ = signed_model(ociregistry, repo, tmp_path, KeySigner.from_file(keys[0].private))
    _, a_digest, _ = client.manifest(repo, "v1")
    (referrer,) = client.referrers(repo, a_digest)
    signature, _, _ = client.manifest(repo, referrer["digest"])
    other = tmp_path / "b"
    write_model(other)
    (other / "weights" / "model-00002.safetensors").write_bytes(b"tampered")
    push_model(client, repo, "v2", other)
    b_manifest, b_digest, b_size = client.manifest(repo, "v2")
    moved = {
        **signature,
        "subject": {"mediaType": OCI_MANIFEST, "digest": b_digest, "size": b_size},
    }
    data = json.dumps(moved, separators=(",", ":")).encode()
    client.push_manifest(repo, digest_of(data), moved)
    assert b_manifest["layers"]
    host = ociregistry.url.removeprefix("http://")
    created = create_pod(kube_apiserver, namespace, f"{host}/{repo}@{b_digest}")
    assert created.status == 403, created.body
    assert (
        "is for another model" in created.message
        and "weights/model-00002.safetensors" in created.message
    )


def test_warn_mode_admits_with_a_warning(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    create_policy(kube_apiserver, namespace, "audit", trusting(keys[0], mode="warn"))
    _, reference, _ = signed_model(ociregistry, repo, tmp_path)
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 201, created.body
    assert any(
        "VerificationPolicy" in w and "[warn]" in w and "no signature" in w
        for w in created.warnings
    ), created.warnings


def test_certificate_chains_accept_their_signers_and_refuse_others(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    chain: Chain,
    keys: Any,
    tmp_path: Path,
) -> None:
    pem = chain.root.read_text() + chain.intermediates.read_text()
    create_policy(
        kube_apiserver, namespace, "ca", {"certificateChains": [{"name": "corp", "pem": pem}]}
    )
    signer = CertificateSigner.from_files(chain.key, chain.leaf, [chain.intermediates, chain.root])
    _, reference, _ = signed_model(ociregistry, repo, tmp_path, signer)
    assert create_pod(kube_apiserver, namespace, reference).status == 201
    _, unsigned, _ = signed_model(
        ociregistry, repo + "-key", tmp_path, KeySigner.from_file(keys[0].private)
    )
    refused = create_pod(kube_apiserver, namespace, unsigned)
    assert refused.status == 403 and "chain corp" in refused.message


def test_a_hanging_registry_is_refused_by_us_before_the_apiserver_gives_up(
    kube_apiserver: KubeApiServer, webhook: Webhook, namespace: str, keys: Any
) -> None:
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accepts and never answers
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        created = create_pod(kube_apiserver, namespace, f"127.0.0.1:{port}/models/hang:v1")
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
    assert created.status == 403, created.body
    assert "did not complete within admission.timeout" in created.message
    assert "failurePolicy Fail" in created.message and "deadline" not in created.message.replace(
        "admission.timeout", ""
    )
    assert created.seconds < 2 * TIMEOUT + 3  # mutate (not pinned) + validate, each ours


def test_a_model_no_policy_covers_is_denied(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    create_policy(
        kube_apiserver,
        namespace,
        "elsewhere",
        trusting(keys[0], references=["oci://elsewhere.example/*"]),
    )
    _, reference, _ = signed_model(
        ociregistry, repo, tmp_path, KeySigner.from_file(keys[0].private)
    )
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 403 and "no VerificationPolicy" in created.message


def test_an_empty_policy_is_refused_at_creation_for_both_kinds(
    kube_apiserver: KubeApiServer, webhook: Webhook, namespace: str
) -> None:
    from kubernetes import client

    with kube_apiserver.api_client() as api:
        custom = client.CustomObjectsApi(api)
        for plural, kind, create in (
            (
                "verificationpolicies",
                "VerificationPolicy",
                lambda b: custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, "verificationpolicies", b
                ),
            ),
            (
                "clusterverificationpolicies",
                "ClusterVerificationPolicy",
                lambda b: custom.create_cluster_custom_object(
                    GROUP, VERSION, "clusterverificationpolicies", b
                ),
            ),
        ):
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": kind,
                "metadata": {"name": f"empty-{uuid.uuid4().hex[:6]}"},
                "spec": {"mode": "warn", "references": ["*"]},
            }
            with pytest.raises(client.ApiException) as refused:
                create(body)
            assert refused.value.status == 422, plural
            assert (
                "needs at least one of keys, certificateChains or identities" in refused.value.body
            )
            bad = {
                **body,
                "spec": {
                    "identities": [{"issuer": "https://i", "issuerRegExp": "x", "subject": "s"}]
                },
            }
            with pytest.raises(client.ApiException) as both:
                create(bad)
            assert "exactly one of issuer or issuerRegExp" in both.value.body


def create_model(kube: KubeApiServer, namespace: str, source: dict[str, Any]) -> Created:
    """POST a Model (modelhooks.dev) with this source, as kubectl would."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {"generateName": "bert-"},
        "spec": {"version": "1", "source": source},
    }
    return post(kube, f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/models", body)


def create_inference_service(kube: KubeApiServer, namespace: str, storage_uri: str) -> Created:
    """POST a KServe InferenceService serving the model at `storage_uri`."""
    body = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"generateName": "bert-"},
        "spec": {
            "predictor": {
                "model": {"modelFormat": {"name": "huggingface"}, "storageUri": storage_uri}
            }
        },
    }
    path = f"/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/inferenceservices"
    return post(kube, path, body)


def post(kube: KubeApiServer, path: str, body: dict[str, Any], timeout: float = 60) -> Created:
    """POST `body` to the apiserver as the admin: its answer and Warning headers."""
    request = urllib.request.Request(
        f"{kube.url}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {kube.admin_token}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            status, doc, headers = resp.status, json.load(resp), resp.headers
    except urllib.error.HTTPError as e:
        status, doc, headers = e.code, json.loads(e.read() or b"{}"), e.headers
    return Created(status, doc, headers.get_all("Warning") or [], time.monotonic() - started)


def test_a_model_naming_a_missing_artifact_is_refused_and_an_existing_tag_pinned(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    fake_gcs: Any,
    repo: str,
    tmp_path: Path,
) -> None:
    kube_apiserver.install_crd(K8S / "crds" / "model.yaml", "models")
    _, reference, digest = signed_model(ociregistry, repo, tmp_path)
    created = create_model(kube_apiserver, namespace, {"oci": {"reference": reference}})
    assert created.status == 201, created.body
    assert created.body["spec"]["source"]["oci"]["reference"] == (
        f"{reference.rpartition(':')[0]}@{digest}"
    )
    host = ociregistry.url.removeprefix("http://")
    missing = create_model(kube_apiserver, namespace, {"oci": {"reference": f"{host}/{repo}:v9"}})
    assert missing.status == 403 and "no such tag" in missing.message, missing.body

    bucket = f"admission-{uuid.uuid4().hex[:8]}"
    gcs = fake_gcs.storage_client()
    gcs.create_bucket(bucket)
    gcs.bucket(bucket).blob("bert/1/weights.bin").upload_from_string(b"w")
    there = create_model(kube_apiserver, namespace, {"gcs": {"uri": f"gs://{bucket}/bert/1/"}})
    assert there.status == 201, there.body
    empty = create_model(kube_apiserver, namespace, {"gcs": {"uri": f"gs://{bucket}/bert/2/"}})
    assert empty.status == 403 and f"gs://{bucket}/bert/2/ holds no objects" in empty.message


def test_an_inference_service_storage_uri_is_verified_and_pinned(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    """On KServe's own InferenceService CRD (from its Go module, tests/servers/recipes.py)."""
    install_kserve(kube_apiserver)
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    _, signed, digest = signed_model(
        ociregistry, repo, tmp_path, KeySigner.from_file(keys[0].private)
    )
    admitted = create_inference_service(kube_apiserver, namespace, f"oci://{signed}")
    assert admitted.status == 201, admitted.body
    assert admitted.body["spec"]["predictor"]["model"]["storageUri"] == (
        f"oci://{signed.rpartition(':')[0]}@{digest}"
    )
    _, unsigned, _ = signed_model(ociregistry, repo + "-unsigned", tmp_path)
    refused = create_inference_service(kube_apiserver, namespace, f"oci://{unsigned}")
    assert refused.status == 403 and "no signature refers" in refused.message, refused.body


def install_kserve(kube: KubeApiServer) -> None:
    from tests.servers.recipes import RECIPES

    crd = RECIPES["kserve-crds"]
    crd.obtain()
    path = crd.binary() / "serving.kserve.io_inferenceservices.yaml"
    kube.install_crd(path, "inferenceservices", timeout=60)


@pytest.fixture(params=["gcs", "s3"])
def bucket_store(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str, str]]:
    """(ObjectStore, bucket, scheme): a fresh bucket of fake-gcs-server or MinIO."""
    from modelhooks.adapters.object_store.gcs import GcsObjectStore
    from modelhooks.adapters.object_store.s3 import S3ObjectStore

    bucket = f"admission-{uuid.uuid4().hex[:8]}"
    if request.param == "s3":
        minio = request.getfixturevalue("minio")
        with minio.s3_client() as client:
            client.create_bucket(Bucket=bucket)
            yield S3ObjectStore(client), bucket, "s3"
    else:
        gcs = request.getfixturevalue("fake_gcs").storage_client()
        gcs.create_bucket(bucket)
        yield GcsObjectStore(gcs), bucket, "gs"


def test_an_object_store_model_is_decided_by_its_binding_and_one_listing(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    bucket_store: tuple[Any, str, str],
    keys: Any,
    tmp_path: Path,
) -> None:
    """`sign` binds the signed manifest to each object's generation; admission verifies both
    bundles and compares one listing: a model changed since signing is refused naming the
    object. (Upstream `model_signing verify` still accepts the signature with the binding
    next to it: tests/unit/test_signing_keys.py.)"""
    from modelhooks.adapters.signing import sign_model
    from tests.unit.signing_material import upload

    install_kserve(kube_apiserver)
    store, bucket, scheme = bucket_store
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    model = write_model(tmp_path / "bert")
    upload(store, bucket, model, "bert/1")
    upload(store, bucket, model, "bert/2")
    sign_model(store, bucket, "bert/1", KeySigner.from_file(keys[0].private))
    assert store.stat(bucket, "bert/1/model.sig.binding") is not None

    uri = f"{scheme}://{bucket}/bert/1/"
    admitted = create_inference_service(kube_apiserver, namespace, uri)
    assert admitted.status == 201, admitted.body
    unsigned = create_inference_service(kube_apiserver, namespace, f"{scheme}://{bucket}/bert/2/")
    assert unsigned.status == 403 and "no signature (model.sig)" in unsigned.message

    store.put(bucket, "bert/1/config.json", b'{"layers": 3}')  # rewritten after signing
    changed = create_inference_service(kube_apiserver, namespace, uri)
    assert changed.status == 403, changed.body
    assert "changed since it was signed" in changed.message
    assert "config.json was rewritten" in changed.message, changed.message
    store.put(bucket, "bert/1/extra.bin", b"x")
    added = create_inference_service(kube_apiserver, namespace, uri)
    assert "extra.bin was added" in added.message, added.message


def test_a_deployment_template_is_verified_and_pinned(
    kube_apiserver: KubeApiServer,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
) -> None:
    create_policy(
        kube_apiserver,
        namespace,
        "serving",
        trusting(keys[0], workloadSelector={"matchLabels": {"app": "bert"}}),
    )
    _, signed, digest = signed_model(
        ociregistry, repo, tmp_path, KeySigner.from_file(keys[0].private)
    )
    _, unsigned, _ = signed_model(ociregistry, repo + "-unsigned", tmp_path)

    def deployment(reference: str) -> dict[str, Any]:
        spec = create_pod_body(reference)["spec"]
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"generateName": "bert-"},
            "spec": {
                "selector": {"matchLabels": {"app": "bert"}},
                "template": {"metadata": {"labels": {"app": "bert"}}, "spec": spec},
            },
        }

    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    admitted = post(kube_apiserver, path, deployment(signed))
    assert admitted.status == 201, admitted.body
    volume = admitted.body["spec"]["template"]["spec"]["volumes"][0]["image"]["reference"]
    assert volume == f"{signed.rpartition(':')[0]}@{digest}"
    refused = post(kube_apiserver, path, deployment(unsigned))
    assert refused.status == 403 and "VerificationPolicy" in refused.message, refused.body

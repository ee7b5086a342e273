"""The admission webhooks on the real kube-apiserver: `modelhooks serve` hosting only the
admission function over HTTPS (a harness-CA certificate), registered by clientConfig.url
https://127.0.0.1:PORT with that CA as caBundle; its policies read as the
modelhooks-admission ServiceAccount; models in cue-labs' registry (referrers API), signed
by `sign_oci` as the sign function does. Pods mount them as OCI image volumes.
The harness (webhook, policies, models, POSTs) is in admission_helpers.py."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import OCI_MANIFEST, DistributionRegistry, digest_of
from modelhooks.adapters.signing import CertificateSigner, KeySigner
from modelhooks.adapters.signing.oci import sign_oci
from tests.e2e.admission_helpers import (
    GROUP,
    K8S,
    TIMEOUT,
    VERSION,
    Created,
    Webhook,
    create_pod,
    create_pod_body,
    create_policy,
    labelled_namespace,
    post,
    signed_model,
    start_webhook,
    trusting,
)
from tests.integration.test_signing_oci import push_model
from tests.servers.kube import KubeApiServer
from tests.unit.signing_material import Chain, KeyPair, make_chain, make_key, write_model

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

Push = Callable[..., tuple[DistributionRegistry, str, str]]


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


@pytest.fixture
def namespace(kube_apiserver: KubeApiServer, webhook: Webhook) -> str:
    return labelled_namespace(kube_apiserver, webhook)


@pytest.fixture
def repo() -> str:
    return f"admission-{uuid.uuid4().hex[:8]}/bert"  # never a repository another test uses


@pytest.fixture
def push(ociregistry: Any, repo: str, tmp_path: Path) -> Push:
    """`push(signer=None, suffix="")`: a new model as `<repo><suffix>:v1` in cue-labs'
    registry, signed by `signer` when given: (client, reference, digest)."""
    return lambda signer=None, suffix="": signed_model(ociregistry, repo + suffix, tmp_path, signer)


@pytest.fixture
def team(kube_apiserver: KubeApiServer, namespace: str, keys: Any) -> KeySigner:
    """The VerificationPolicy "team" trusting the first key; a signer with that key."""
    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    return KeySigner.from_file(keys[0].private)


@pytest.mark.parametrize(
    ("policy", "signed_by", "says"),
    [
        pytest.param(
            ("team", {}),
            None,
            (
                "/{repo}",
                "{digest}",
                "VerificationPolicy {namespace}/team",
                "no signature refers",
                "modelhooks sign",
            ),
            id="unsigned-saying-what-to-do",
        ),
        pytest.param(
            ("team", {}),
            1,
            ("is by a signer the policy trusts", "key sha256:"),
            id="another-key-naming-the-signer",
        ),
        pytest.param(
            ("elsewhere", {"references": ["oci://elsewhere.example/*"]}),
            0,
            ("no VerificationPolicy",),
            id="no-policy-covers-it",
        ),
    ],
)
def test_a_model_is_denied_saying_why(
    kube_apiserver: KubeApiServer,
    namespace: str,
    push: Push,
    repo: str,
    keys: Any,
    policy: tuple[str, dict[str, Any]],
    signed_by: int | None,
    says: tuple[str, ...],
) -> None:
    """Unsigned, signed by a key the policy does not trust, or covered by no policy (the
    one there names other references): 403, the message saying why."""
    name, spec = policy
    create_policy(kube_apiserver, namespace, name, trusting(keys[0], **spec))
    signer = None if signed_by is None else KeySigner.from_file(keys[signed_by].private)
    _, reference, digest = push(signer)
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 403, created.body
    for part in says:
        assert part.format(repo=repo, digest=digest, namespace=namespace) in created.message, (
            created.message
        )


def test_a_signed_model_is_admitted_with_its_tag_pinned_to_the_digest(
    kube_apiserver: KubeApiServer, namespace: str, team: KeySigner, push: Push
) -> None:
    _, reference, digest = push(team)
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 201, created.body
    pinned = created.body["spec"]["volumes"][0]["image"]["reference"]
    assert pinned == f"{reference.rpartition(':')[0]}@{digest}"  # what was verified is what runs


def test_a_running_pods_finalizer_goes_after_its_policy_trusts_another_key(
    kube_apiserver: KubeApiServer, namespace: str, push: Push, keys: Any
) -> None:
    """Key rotation: the policy trusts a new key; a Pod running a model the old key signed
    is still updated (its image volume cannot change): the Job controller removes its
    finalizer from each of its Pods as they end. A new Pod of that model is refused."""
    from kubernetes import client

    create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
    _, reference, _ = push(KeySigner.from_file(keys[0].private))
    body = create_pod_body(reference)
    body["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    pods = f"/api/v1/namespaces/{namespace}/pods"
    created = post(kube_apiserver, pods, body)
    assert created.status == 201, created.body
    name = created.body["metadata"]["name"]
    with kube_apiserver.api_client() as api:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "verificationpolicies", "team", {"spec": trusting(keys[1])}
        )
    refused = create_pod(kube_apiserver, namespace, reference)
    assert refused.status == 403 and "is by a signer the policy trusts" in refused.message
    time.sleep(1)  # the webhook's watch has the rotated policy (not its cached success)
    assert post(kube_apiserver, f"{pods}/{name}", {}, method="DELETE").status == 200
    released = post(
        kube_apiserver,
        f"{pods}/{name}",
        {"metadata": {"finalizers": None}},
        method="PATCH",
        content_type="application/merge-patch+json",
    )
    assert released.status == 200, released.body
    assert post(kube_apiserver, f"{pods}/{name}", {}, method="GET").status == 404


def test_a_signature_for_another_digest_is_refused(
    kube_apiserver: KubeApiServer,
    namespace: str,
    team: KeySigner,
    push: Push,
    ociregistry: Any,
    repo: str,
    tmp_path: Path,
) -> None:
    """A trusted signature of model A attached as a referrer of model B: B is refused."""
    client, _, _ = push(team)
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
    kube_apiserver: KubeApiServer, namespace: str, push: Push, keys: Any
) -> None:
    create_policy(kube_apiserver, namespace, "audit", trusting(keys[0], mode="warn"))
    _, reference, _ = push()
    created = create_pod(kube_apiserver, namespace, reference)
    assert created.status == 201, created.body
    assert any(
        "VerificationPolicy" in w and "[warn]" in w and "no signature" in w
        for w in created.warnings
    ), created.warnings


def test_every_covering_policy_must_be_satisfied_a_loose_one_beside_a_strict_one_is_not_enough(
    kube_apiserver: KubeApiServer, namespace: str, push: Push, repo: str, keys: Any
) -> None:
    """The workload's author labels it into a loose policy (another key) beside the strict
    one covering every workload: the loose one's key alone admitted it (ANY policy sufficed)."""
    create_policy(kube_apiserver, namespace, "strict", trusting(keys[0]))
    loose = {"workloadSelector": {"matchLabels": {"tier": "loose"}}}
    create_policy(kube_apiserver, namespace, "loose", trusting(keys[1], **loose))
    client, reference, digest = push(KeySigner.from_file(keys[1].private))
    body = create_pod_body(reference)
    body["metadata"]["labels"] = {"tier": "loose"}
    pods = f"/api/v1/namespaces/{namespace}/pods"
    refused = post(kube_apiserver, pods, body)
    assert refused.status == 403, refused.body
    assert f"VerificationPolicy {namespace}/strict [enforce]" in refused.message, refused.message
    assert f"{namespace}/loose" not in refused.message, refused.message
    sign_oci(client, repo, "v1", KeySigner.from_file(keys[0].private))  # the strict key too
    admitted = post(kube_apiserver, pods, body)
    assert admitted.status == 201, admitted.body
    assert admitted.body["spec"]["volumes"][0]["image"]["reference"].endswith(digest)


def test_a_pod_naming_another_tenants_repository_is_refused_before_it_is_read(
    kube_apiserver: KubeApiServer,
    ociregistry: Any,
    repo: str,
    keys: Any,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """tenancy.tenants gives the namespace one repository: a Pod naming another (signed by
    the key its policy trusts) was resolved and verified with the webhook's credentials, and
    admitted pinned to that repository's digest; now refused saying so, nothing read (the
    tag neither pinned nor its digest told)."""
    from kubernetes import client

    host = ociregistry.url.removeprefix("http://")
    namespace = f"adm-{uuid.uuid4().hex[:8]}"
    tenants = {"MODELHOOKS_TENANCY_TENANTS": f"{namespace}=oci://{host}/{repo}-ours"}
    signer = KeySigner.from_file(keys[0].private)
    _, ours, _ = signed_model(ociregistry, f"{repo}-ours", tmp_path, signer)
    _, theirs, digest = signed_model(ociregistry, f"{repo}-theirs", tmp_path, signer)
    with start_webhook(kube_apiserver, tmp_path_factory.mktemp("tenancy"), tenants) as hook:
        with kube_apiserver.api_client() as api:
            client.CoreV1Api(api).create_namespace(
                {"metadata": {"name": namespace, "labels": {"admission-e2e": hook.label}}}
            )
        create_policy(kube_apiserver, namespace, "team", trusting(keys[0]))
        admitted = create_pod(kube_apiserver, namespace, ours)
        assert admitted.status == 201, admitted.body
        refused = create_pod(kube_apiserver, namespace, theirs)
    assert refused.status == 403, refused.body
    said = f"namespace '{namespace}' may not act on oci://{host}/{repo}-theirs (tenancy.tenants)"
    assert said in refused.message, refused.message
    assert digest not in refused.message, refused.message
    assert any("not pinned" in w and said in w for w in refused.warnings), refused.warnings


def test_certificate_chains_accept_their_signers_and_refuse_others(
    kube_apiserver: KubeApiServer, namespace: str, push: Push, chain: Chain, keys: Any
) -> None:
    pem = chain.root.read_text() + chain.intermediates.read_text()
    create_policy(
        kube_apiserver, namespace, "ca", {"certificateChains": [{"name": "corp", "pem": pem}]}
    )
    signer = CertificateSigner.from_files(chain.key, chain.leaf, [chain.intermediates, chain.root])
    _, reference, _ = push(signer)
    assert create_pod(kube_apiserver, namespace, reference).status == 201
    _, unsigned, _ = push(KeySigner.from_file(keys[0].private), "-key")
    refused = create_pod(kube_apiserver, namespace, unsigned)
    assert refused.status == 403 and "chain corp" in refused.message


@pytest.mark.usefixtures("team")
def test_a_hanging_registry_is_refused_by_us_before_the_apiserver_gives_up(
    kube_apiserver: KubeApiServer, namespace: str
) -> None:
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


def test_an_empty_policy_is_refused_at_creation_for_both_kinds(
    kube_apiserver: KubeApiServer, namespace: str
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


def create_inference_service(
    kube: KubeApiServer, namespace: str, storage_uri: str = "", **model: Any
) -> Created:
    """POST a KServe InferenceService serving the model at `storage_uri` (or as `model`
    says: its `storage`)."""
    model = {"storageUri": storage_uri} if storage_uri else model
    body = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"generateName": "bert-"},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"}, **model}}},
    }
    path = f"/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/inferenceservices"
    return post(kube, path, body)


def test_a_model_naming_a_missing_artifact_is_refused_and_an_existing_tag_pinned(
    kube_apiserver: KubeApiServer,
    namespace: str,
    push: Push,
    ociregistry: Any,
    fake_gcs: Any,
    repo: str,
) -> None:
    kube_apiserver.install_crd(K8S / "crds" / "model.yaml", "models")
    _, reference, digest = push()
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
    kube_apiserver: KubeApiServer, namespace: str, team: KeySigner, push: Push
) -> None:
    """On KServe's own InferenceService CRD (from its Go module, tests/servers/recipes.py)."""
    install_kserve(kube_apiserver)
    _, signed, digest = push(team)
    admitted = create_inference_service(kube_apiserver, namespace, f"oci://{signed}")
    assert admitted.status == 201, admitted.body
    assert admitted.body["spec"]["predictor"]["model"]["storageUri"] == (
        f"oci://{signed.rpartition(':')[0]}@{digest}"
    )
    _, unsigned, _ = push(None, "-unsigned")
    refused = create_inference_service(kube_apiserver, namespace, f"oci://{unsigned}")
    assert refused.status == 403 and "no signature refers" in refused.message, refused.body


def install_kserve(kube: KubeApiServer) -> None:
    from tests.servers.recipes import RECIPES

    crd = RECIPES["kserve-crds"]
    crd.obtain()
    path = crd.binary() / "serving.kserve.io_inferenceservices.yaml"
    kube.install_crd(path, "inferenceservices", timeout=60)


def test_a_trained_model_loaded_into_an_inference_service_is_verified(
    kube_apiserver: KubeApiServer, namespace: str, team: KeySigner, push: Push
) -> None:
    """A TrainedModel (KServe's published CRD) names a model KServe's agent loads into a
    running multi-model InferenceService: it was never reviewed, so any model was loaded
    into a server admitted for a verified one."""
    from tests.servers.recipes import RECIPES

    crd = RECIPES["kserve-trainedmodel-crd"]
    crd.obtain()
    kube_apiserver.install_crd(
        crd.binary() / "serving.kserve.io_trainedmodels.yaml", "trainedmodels"
    )
    path = f"/apis/serving.kserve.io/v1alpha1/namespaces/{namespace}/trainedmodels"

    def trained(reference: str) -> Created:
        model = {"framework": "pytorch", "memory": "1Gi", "storageUri": f"oci://{reference}"}
        body = {
            "apiVersion": "serving.kserve.io/v1alpha1",
            "kind": "TrainedModel",
            "metadata": {"generateName": "bert-"},
            "spec": {"inferenceService": "server", "model": model},
        }
        return post(kube_apiserver, path, body)

    _, signed, digest = push(team)
    admitted = trained(signed)
    assert admitted.status == 201, admitted.body
    assert admitted.body["spec"]["model"]["storageUri"] == (
        f"oci://{signed.rpartition(':')[0]}@{digest}"
    )
    _, unsigned, _ = push(None, "-unsigned")
    refused = trained(unsigned)
    assert refused.status == 403 and "no signature refers" in refused.message, refused.body


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
    namespace: str,
    team: KeySigner,
    bucket_store: tuple[Any, str, str],
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
    model = write_model(tmp_path / "bert")
    upload(store, bucket, model, "bert/1")
    upload(store, bucket, model, "bert/2")
    sign_model(store, bucket, "bert/1", team)
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
    kube_apiserver: KubeApiServer, namespace: str, push: Push, keys: Any
) -> None:
    create_policy(
        kube_apiserver,
        namespace,
        "serving",
        trusting(keys[0], workloadSelector={"matchLabels": {"app": "bert"}}),
    )
    _, signed, digest = push(KeySigner.from_file(keys[0].private))
    _, unsigned, _ = push(None, "-unsigned")

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


@pytest.mark.usefixtures("team")
def test_an_inference_service_naming_its_model_by_kserves_storage_spec_is_refused(
    kube_apiserver: KubeApiServer, namespace: str
) -> None:
    """KServe's published CRD keeps `storage: {key, path}` (a path in a store its
    storage-config secret names): such an InferenceService was admitted unverified."""
    storage = {"key": "localMinIO", "path": "models/bert"}
    refused = create_inference_service(kube_apiserver, namespace, storage=storage)
    assert refused.status == 403, refused.body
    assert "kserve-storage:localMinIO/models/bert cannot be verified at admission" in (
        refused.message
    )

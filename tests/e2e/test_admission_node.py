"""Admission on the harness's real node (tests/servers/node.py): the validating and mutating
webhooks registered with the NODE's apiserver, served by `modelhooks serve` admission-only
over HTTPS on loopback (tests/e2e/admission_helpers.py); models pushed to the node's
registry as images an image volume mounts (one tar layer titled `model.tar`, a real config).

Admitted Pods really run: a Pod mounting a signed model BY TAG is pinned to its digest,
admitted, and reads exactly the files of the tar that was signed; an unsigned model is
refused with the reason.

`verifyOn: node` (MVO's approach): the mutating webhook adds an init container running
`modelhooks verify` from our image (the session's `image`, pushed to the node's registry as
admission.verifier_image) on the mounted model, a directory signed with `modelhooks sign DIR`
(model.sig in the tar): the Pod starts when it verifies, and stays in Init with the reason
in its status when a file was changed."""

from __future__ import annotations

import io
import secrets
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.adapters.signing import KeyVerifier
from modelhooks.adapters.signing.oci import verify_oci
from tests.e2e.admission_helpers import (
    MODELHOOKS,
    Webhook,
    create_policy,
    labelled_namespace,
    post,
    start_webhook,
    trusting,
)
from tests.servers.containers import Podman
from tests.servers.node import Node
from tests.unit.signing_material import KeyPair, make_key

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"), "team")


@pytest.fixture(scope="module")
def verifier_image(node: Node) -> str:
    """Where the node pulls `modelhooks verify` from (pushed by the tests that need it)."""
    return f"{node.registry.host}/modelhooks:verifier-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def webhook(
    node: Node, verifier_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    env = {"MODELHOOKS_ADMISSION_VERIFIER_IMAGE": verifier_image}
    with start_webhook(node.kube, tmp_path_factory.mktemp("admission-node"), env) as started:
        yield started


@pytest.fixture
def namespace(node: Node, webhook: Webhook) -> str:
    """A namespace that opts in to the webhook, once its `default` ServiceAccount exists."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name = labelled_namespace(node.kube, webhook)
    with node.kube.api_client() as api:
        core = client.CoreV1Api(api)

        def account() -> bool:
            try:
                return bool(core.read_namespaced_service_account("default", name))
            except ApiException:
                return False

        until(f"ServiceAccount {name}/default", account, 30)
    return name


def until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def pod_body(reference: str, probe: str, **spec: Any) -> dict[str, Any]:
    """A Pod whose container prints every file of `reference` mounted as an image volume."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "model-"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": probe,
                    "args": ["cat", "/model"],
                    "volumeMounts": [{"name": "model", "mountPath": "/model", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "model", "image": {"reference": reference}}],
            **spec,
        },
    }


def sign(model: str, key: KeyPair) -> None:
    """`modelhooks sign` as a user runs it: `oci://…` (the bundle a referrer of the
    manifest) or a directory (model.sig in it)."""
    signed = subprocess.run(
        [MODELHOOKS, "sign", model, "--key", str(key.private), "--quiet"],
        capture_output=True,
        text=True,
    )
    assert signed.returncode == 0, signed.stdout + signed.stderr


def pod_phase(node: Node, namespace: str, name: str, phases: tuple[str, ...]) -> Any:
    from kubernetes import client

    with node.kube.api_client() as api:
        core = client.CoreV1Api(api)

        def reached() -> Any:
            pod = core.read_namespaced_pod(name, namespace)
            return pod if pod.status.phase in phases else None

        return until(f"Pod {namespace}/{name} {'|'.join(phases)}", reached, 90)


def pod_log(node: Node, namespace: str, name: str, container: str = "main") -> str:
    from kubernetes import client

    with node.kube.api_client() as api:
        text: str = client.CoreV1Api(api).read_namespaced_pod_log(
            name, namespace, container=container
        )
        return text


def signed_tar_files(node: Node, repository: str, key: KeyPair) -> dict[str, str]:
    """The files inside the tar layer the signature over `repository:latest` names (its
    signed digest is the blob fetched), as `probe cat` prints them."""
    client = DistributionRegistry(node.registry.url)
    verified = verify_oci(client, repository, "latest", KeyVerifier(key.public))
    (resource,) = verified.manifest.resources
    assert resource.name == "model.tar"
    blob = client.blob_range(repository, f"sha256:{resource.digest}", 0, 1 << 24)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                files[f"/model/{member.name}"] = handle.read().decode().strip()
    return files


def test_an_admitted_pod_mounting_a_signed_model_by_tag_runs_and_reads_the_signed_files(
    node: Node, namespace: str, key: KeyPair
) -> None:
    repository = f"models/{namespace}"
    files = {"config.json": b'{"layers": 2}', "weights/part-0.bin": secrets.token_hex(16).encode()}
    reference = node.push_artifact(repository, files)
    sign(f"oci://{reference}", key)
    host = node.registry.host
    create_policy(node.kube, namespace, "signed", trusting(key, references=[f"oci://{host}/*"]))
    digest = DistributionRegistry(node.registry.url).resolve(repository, "latest")

    started = time.monotonic()
    created = post(
        node.kube, f"/api/v1/namespaces/{namespace}/pods", pod_body(reference, node.probe_image)
    )
    assert created.status == 201, created.body
    (volume,) = [v for v in created.body["spec"]["volumes"] if v["name"] == "model"]
    assert volume["image"]["reference"] == f"{host}/{repository}@{digest}"  # pinned
    name = created.body["metadata"]["name"]
    done = pod_phase(node, namespace, name, ("Succeeded", "Failed"))
    print(f"Pod verified at admission: {time.monotonic() - started:.1f} s to Succeeded")
    printed = pod_log(node, namespace, name)
    assert done.status.phase == "Succeeded", printed

    lines = dict(line.split(": ", 1) for line in printed.splitlines())
    assert lines == signed_tar_files(node, repository, key)
    assert lines == {f"/model/{n}": c.decode() for n, c in files.items()}


def test_a_pod_mounting_an_unsigned_model_is_refused_with_the_reason(
    node: Node, namespace: str, key: KeyPair
) -> None:
    repository = f"models/{namespace}"
    reference = node.push_artifact(repository, {"weights.bin": secrets.token_hex(16).encode()})
    host = node.registry.host
    create_policy(node.kube, namespace, "signed", trusting(key, references=[f"oci://{host}/*"]))

    created = post(
        node.kube, f"/api/v1/namespaces/{namespace}/pods", pod_body(reference, node.probe_image)
    )
    assert created.status == 403, created.body
    assert f"model oci://{host}/{repository}@sha256:" in created.message
    assert "no signature refers to" in created.message
    assert "modelhooks sign" in created.message


@pytest.fixture(scope="module")
def verifier(node: Node, image: str, podman: Podman, verifier_image: str) -> str:
    """Our image where the init containers the webhook adds pull it from."""
    podman("push", "--tls-verify=false", image, f"docker://{verifier_image}")
    return verifier_image


def directory_signed(tmp_path: Path, key: KeyPair, files: dict[str, bytes]) -> dict[str, bytes]:
    """`files` signed as a directory (`modelhooks sign DIR`): they and what sign wrote."""
    model = tmp_path / "model"
    for name, content in files.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(content)
    sign(str(model), key)
    return {
        p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()
    }


def node_policy(node: Node, namespace: str, key: KeyPair, body: dict[str, Any]) -> None:
    """A `verifyOn: node` policy, once the mutating webhook answers with its init container
    (a dry run: the webhook's policies are a watch, a moment behind)."""
    references = [f"oci://{node.registry.host}/*"]
    spec = trusting(key, references=references, verifyOn="node")
    create_policy(node.kube, namespace, "on-node", spec)
    path = f"/api/v1/namespaces/{namespace}/pods?dryRun=All"
    answers: list[Any] = []

    def mutated() -> bool:
        answers.append(post(node.kube, path, body).body)
        return bool(answers[-1].get("spec", {}).get("initContainers"))

    try:
        until("the webhook to add the init container", mutated, 30)
    except AssertionError as e:
        raise AssertionError(f"{e}: {answers[-1]}") from None


def test_verify_on_node_a_directory_signed_model_verifies_in_an_init_container_and_runs(
    node: Node, namespace: str, key: KeyPair, verifier: str, tmp_path: Path
) -> None:
    files = {"config.json": b'{"layers": 2}', "weights.bin": secrets.token_hex(16).encode()}
    signed = directory_signed(tmp_path, key, files)
    assert "model.sig" in signed
    reference = node.push_artifact(f"models/{namespace}", signed)
    body = pod_body(reference, node.probe_image)
    node_policy(node, namespace, key, body)

    started = time.monotonic()
    created = post(node.kube, f"/api/v1/namespaces/{namespace}/pods", body)
    assert created.status == 201, created.body
    (init,) = created.body["spec"]["initContainers"]
    assert (init["name"], init["image"]) == ("modelhooks-verify-model", verifier)
    name = created.body["metadata"]["name"]
    done = pod_phase(node, namespace, name, ("Succeeded", "Failed"))
    ran = done.status.init_container_statuses[0].state.terminated
    print(
        f"Pod with the init container: {time.monotonic() - started:.1f} s to Succeeded (the "
        f"image's first pull included; the init container ran {ran.finished_at - ran.started_at})"
    )
    verified = pod_log(node, namespace, name, init["name"])
    assert done.status.phase == "Succeeded", f"{verified}\n{done.status}"
    assert "verdict: OK (2 resources match)" in verified
    lines = dict(line.split(": ", 1) for line in pod_log(node, namespace, name).splitlines())
    assert {k: v for k, v in lines.items() if k.endswith((".json", ".bin"))} == {
        f"/model/{n}": c.decode() for n, c in files.items()
    }


def test_verify_on_node_a_changed_file_keeps_the_pod_in_init_with_the_reason(
    node: Node, namespace: str, key: KeyPair, verifier: str, tmp_path: Path
) -> None:
    files = {"config.json": b'{"layers": 2}', "weights.bin": secrets.token_hex(16).encode()}
    signed = directory_signed(tmp_path, key, files)
    signed["weights.bin"] = b"tampered"  # the same model.sig
    reference = node.push_artifact(f"models/{namespace}", signed)
    body = pod_body(reference, node.probe_image, restartPolicy="Always")
    node_policy(node, namespace, key, body)

    created = post(node.kube, f"/api/v1/namespaces/{namespace}/pods", body)
    assert created.status == 201, created.body
    pod, terminated = init_failure(node, namespace, created.body["metadata"]["name"])
    assert pod.status.phase == "Pending"  # in Init: the model is never read
    assert (pod.status.container_statuses[0].state.waiting.reason) == "PodInitializing"
    assert terminated.exit_code == 1
    assert "verdict: FAILED" in terminated.message
    assert "the model does not match its signature: weights.bin" in terminated.message


def test_verify_on_node_every_covering_policy_must_accept_the_signature(
    node: Node, namespace: str, key: KeyPair, verifier: str, tmp_path: Path
) -> None:
    """A loose node policy (another key) the Pod's author labels it into beside the strict
    one: the init container refuses the model signed by the loose key alone, naming the
    strict policy (the union of both policies' keys it was given accepted it)."""
    loose_key = make_key(tmp_path, "loose")
    files = {"config.json": b'{"layers": 2}', "weights.bin": secrets.token_hex(16).encode()}
    reference = node.push_artifact(
        f"models/{namespace}", directory_signed(tmp_path, loose_key, files)
    )
    body = pod_body(reference, node.probe_image, restartPolicy="Always")
    body["metadata"]["labels"] = {"tier": "loose"}
    node_policy(node, namespace, key, body)  # the strict one, "on-node"
    loose = {"verifyOn": "node", "workloadSelector": {"matchLabels": {"tier": "loose"}}}
    create_policy(node.kube, namespace, "loose", trusting(loose_key, **loose))
    path = f"/api/v1/namespaces/{namespace}/pods?dryRun=All"

    def both() -> bool:  # the webhook's watch has the loose one too
        (init,) = post(node.kube, path, body).body["spec"]["initContainers"]
        return "loose/team" in init["env"][0]["value"]

    until("the init container to carry both policies", both, 30)
    created = post(node.kube, f"/api/v1/namespaces/{namespace}/pods", body)
    assert created.status == 201, created.body
    pod, terminated = init_failure(node, namespace, created.body["metadata"]["name"])
    assert pod.status.phase == "Pending" and terminated.exit_code == 1
    assert "verdict: FAILED" in terminated.message
    assert f"VerificationPolicy {namespace}/on-node is not satisfied" in terminated.message


def init_failure(node: Node, namespace: str, name: str) -> tuple[Any, Any]:
    """(the Pod, its init container's terminated state) once an init container failed."""
    from kubernetes import client

    with node.kube.api_client() as api:
        core = client.CoreV1Api(api)

        def refused() -> Any:
            pod = core.read_namespaced_pod(name, namespace)
            for status in pod.status.init_container_statuses or ():
                for state in (status.state, status.last_state):
                    if state and state.terminated and state.terminated.exit_code:
                        return pod, state.terminated
            return None

        found: tuple[Any, Any] = until(f"Pod {name}'s init container to fail", refused, 120)
    return found

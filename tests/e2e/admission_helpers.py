"""What the admission e2e tests and the admission benchmark share: `modelhooks serve`
hosting only admission over HTTPS (a certificate of the apiserver's CA), registered with the
real kube-apiserver as mutating and validating webhooks; VerificationPolicies; models pushed
(and signed) in an OCI registry; Pods and other objects POSTed as kubectl would."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.adapters.signing.oci import sign_oci
from tests.integration.test_signing_oci import push_model
from tests.servers._proc import free_port
from tests.servers.kube import KubeApiServer
from tests.unit.signing_material import KeyPair, write_model

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


def apply_crds(kube: KubeApiServer) -> None:
    """Our CRDs and RBAC applied, and the policy kinds served (Established is not enough)."""
    from kubernetes import client

    kube.apply(K8S / "crds", K8S / "rbac")
    with kube.api_client() as api:
        custom, deadline = client.CustomObjectsApi(api), time.monotonic() + 30
        for plural in ("verificationpolicies", "clusterverificationpolicies"):
            while True:
                try:
                    custom.list_cluster_custom_object(GROUP, VERSION, plural)
                    break
                except client.ApiException:
                    assert time.monotonic() < deadline, plural
                    time.sleep(0.1)


@contextlib.contextmanager
def serve_admission(
    kube: KubeApiServer, work: Path, env: Mapping[str, str], name: str = "admission"
) -> Iterator[tuple[str, Path]]:
    """`modelhooks serve` hosting only admission over HTTPS, reading its policies as the
    modelhooks-admission ServiceAccount; `env`: more of its environment; its files under
    `work` named after `name`. (Its URL, its log) once /healthz answers; stopped at exit."""
    token = kube.token_for("modelhooks-admission", "modelhooks", seconds=3600)
    kubeconfig = kube.write_kubeconfig(work / f"{name}.kubeconfig", token=token, user="admission")
    cert, key = kube.ca.issue(name, work)
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    environ.update(env)
    environ.update(
        MODELHOOKS_SERVE_FUNCTIONS="admission",
        MODELHOOKS_SERVE_WATCH_INTERVAL="0",
        MODELHOOKS_ADMISSION_TLS_CERT_FILE=str(cert),
        MODELHOOKS_ADMISSION_TLS_KEY_FILE=str(key),
        MODELHOOKS_ADMISSION_KUBECONFIG=str(kubeconfig),
        MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS="true",
    )
    log = work / f"{name}.log"
    argv = [MODELHOOKS, "serve", "--port", str(port), "--home", str(work / name)]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ)
    url = f"https://127.0.0.1:{port}"
    try:
        context = ssl.create_default_context(cafile=str(kube.ca.cert_file))
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
        yield url, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def start_webhook(
    kube_apiserver: KubeApiServer, work: Path, env: dict[str, str] | None = None
) -> Iterator[Webhook]:
    """`serve_admission` registered with the apiserver for Pods, Models, InferenceServices
    and Deployments in namespaces labelled admission-e2e=<its label>; `env`: more of its
    environment."""
    from kubernetes import client

    apply_crds(kube_apiserver)
    serve_env = {
        **(env or {}),
        "MODELHOOKS_ADMISSION_TIMEOUT": str(TIMEOUT),
        "MODELHOOKS_LOG_LEVEL": "DEBUG",
    }
    with serve_admission(kube_apiserver, work, serve_env) as (url, log):
        label = uuid.uuid4().hex[:10]
        name = f"admission-e2e-{label}.modelhooks.dev"
        rules = [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": ["CREATE", "UPDATE"],  # as infra/k8s/admission/webhooks.yaml
                "resources": [resource],
            }
            for group, version, resource in (
                ("", "v1", "pods"),
                (GROUP, VERSION, "models"),
                ("serving.kserve.io", "v1beta1", "inferenceservices"),
                ("serving.kserve.io", "v1alpha1", "trainedmodels"),
                ("apps", "v1", "deployments"),
            )
        ]
        common = {
            "rules": rules,
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
                            "clientConfig": {
                                "url": f"{url}/admission/mutate",
                                "caBundle": ca_bundle,
                            },
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
                            "clientConfig": {
                                "url": f"{url}/admission/validate",
                                "caBundle": ca_bundle,
                            },
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


def labelled_namespace(kube: KubeApiServer, webhook: Webhook) -> str:
    """A new namespace that opts in to `webhook`: its name."""
    from kubernetes import client

    name = f"adm-{uuid.uuid4().hex[:8]}"
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            {"metadata": {"name": name, "labels": {"admission-e2e": webhook.label}}}
        )
    return name


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


def post(
    kube: KubeApiServer,
    path: str,
    body: dict[str, Any],
    timeout: float = 60,
    *,
    method: str = "POST",
    content_type: str = "application/json",
) -> Created:
    """POST (or `method`) `body` to the apiserver as the admin: its answer and Warning
    headers."""
    request = urllib.request.Request(
        f"{kube.url}{path}",
        data=None if method == "GET" else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {kube.admin_token}", "Content-Type": content_type},
        method=method,
    )
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            status, doc, headers = resp.status, json.load(resp), resp.headers
    except urllib.error.HTTPError as e:
        status, doc, headers = e.code, json.loads(e.read() or b"{}"), e.headers
    return Created(status, doc, headers.get_all("Warning") or [], time.monotonic() - started)

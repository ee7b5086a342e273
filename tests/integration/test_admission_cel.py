"""infra/examples/admission-cel-policies.yaml on the real kube-apiserver: the ValidatingAdmission
Policies as shipped (their bindings renamed and pointed at this test's namespace label, the
allowlist ConfigMap its own), deciding Pods and Deployments without any webhook."""

from __future__ import annotations

import copy
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

FILE = Path(__file__).resolve().parents[2] / "infra" / "examples" / "admission-cel-policies.yaml"
DIGEST = "sha256:" + "a" * 64


def pod(*references: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "m-"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [
                {"name": f"m{i}", "image": {"reference": r}} for i, r in enumerate(references)
            ],
        },
    }


def test_cel_policies_pin_digests_and_allow_only_listed_registries(
    kube_apiserver: KubeApiServer,
) -> None:
    from kubernetes import client, utils

    label = uuid.uuid4().hex[:8]
    namespace = f"cel-{label}"
    docs = [d for d in yaml.safe_load_all(FILE.read_text()) if d]
    with kube_apiserver.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": namespace, "labels": {"cel-test": label}}})
        with_modelhooks = {"metadata": {"name": "modelhooks"}}
        try:
            core.create_namespace(with_modelhooks)
        except client.ApiException as e:
            assert e.status == 409
        for doc in copy.deepcopy(docs):
            doc["metadata"]["name"] += f"-{label}"
            if doc["kind"] == "ValidatingAdmissionPolicyBinding":
                doc["spec"]["policyName"] += f"-{label}"
                doc["spec"]["matchResources"]["namespaceSelector"] = {
                    "matchLabels": {"cel-test": label}
                }
                if "paramRef" in doc["spec"]:
                    doc["spec"]["paramRef"]["name"] += f"-{label}"
            if doc["kind"] == "ConfigMap":
                doc["data"]["registries"] = "r.example.com, 127.0.0.1:5000"
            utils.create_from_dict(api, doc)

        def create(body: dict[str, Any]) -> tuple[int, str]:
            try:
                core.create_namespaced_pod(namespace, body)
                return 201, ""
            except client.ApiException as e:
                return e.status, str(e.body)

        # Each policy takes effect on its own: the allowlist's waits for its ConfigMap too.
        deadline = time.monotonic() + 30
        probes = (
            pod("r.example.com/models/bert:v1"),
            pod(f"evil.example.org/models/bert@{DIGEST}"),
        )
        while any(create(probe)[0] == 201 for probe in probes):  # not every policy active yet
            assert time.monotonic() < deadline, "the policies never took effect"
            time.sleep(0.2)
        status, body = create(pod("r.example.com/models/bert:v1"))
        assert status == 422 or status == 403, body
        assert "must be pinned by digest" in body and "r.example.com/models/bert:v1" in body
        assert create(pod(f"r.example.com/models/bert@{DIGEST}"))[0] == 201
        assert create(pod(f"127.0.0.1:5000/models/bert@{DIGEST}"))[0] == 201
        status, body = create(pod(f"evil.example.org/models/bert@{DIGEST}"))
        assert status in (403, 422) and "must come from" in body and "evil.example.org" in body
        assert create(pod())[0] == 201  # no model: nothing to say

        apps = client.AppsV1Api(api)
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "served"},
            "spec": {
                "selector": {"matchLabels": {"app": "m"}},
                "template": {
                    "metadata": {"labels": {"app": "m"}},
                    "spec": pod("r.example.com/m:v1")["spec"],
                },
            },
        }
        with pytest.raises(client.ApiException) as refused:
            apps.create_namespaced_deployment(namespace, deployment)
        assert "must be pinned by digest" in str(refused.value.body)
        for doc in docs:  # cluster-scoped: remove them, the apiserver is the session's
            name = doc["metadata"]["name"] + f"-{label}"
            admission = client.AdmissionregistrationV1Api(api)
            if doc["kind"] == "ValidatingAdmissionPolicy":
                admission.delete_validating_admission_policy(name)
            elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
                admission.delete_validating_admission_policy_binding(name)

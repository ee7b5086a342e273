"""AdmissionReviews over HTTP: `serve`'s /admission/validate and /admission/mutate, and the
functions-framework target. Whatever arrives, the answer is an AdmissionReview (200), never
a 500; fuzzed with hypothesis over AdmissionReview shapes and Kubernetes' own example."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.core.settings import load_settings
from modelhooks.core.verification import Verdicts
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.test_admission import D1, TAGS, Policies, Verifier, policy

# The AdmissionReview request of Kubernetes' documentation ("Webhook request and response",
# kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/), with a
# Pod that mounts a model as an OCI image volume.
UPSTREAM: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "my-pod",
        "namespace": "my-namespace",
        "operation": "CREATE",
        "userInfo": {
            "username": "admin",
            "uid": "014fbff9a07c",
            "groups": ["system:authenticated", "my-admin-group"],
            "extra": {"some-key": ["some-value1", "some-value2"]},
        },
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "my-pod", "namespace": "my-namespace"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "model", "image": {"reference": "r.io/models/bert:v1"}}],
            },
        },
        "oldObject": None,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        "dryRun": False,
    },
}


@pytest.fixture
def serve(tmp_path: Path) -> FlaskClient:
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    app = build(
        load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}),
        policies=Policies(policy()),
        model_verifier=Verifier(TAGS, {D1: {"p"}}),
        verdicts=Verdicts(),
        registry=InMemoryModelRegistry(),
    )
    return create_app(app.broker()).test_client()


def reviewed(serve: FlaskClient, body: Any, path: str = "/admission/validate") -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = serve.post(path, data=data, content_type="application/json")
    assert resp.status_code == 200, resp.data
    doc = resp.get_json()
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    assert isinstance(doc["response"]["allowed"], bool)
    return dict(doc["response"])


def test_the_upstream_example_is_admitted_and_its_tag_pinned(serve: FlaskClient) -> None:
    mutated = reviewed(serve, UPSTREAM, "/admission/mutate")
    assert mutated["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(mutated["patch"])) == [
        {
            "op": "replace",
            "path": "/spec/volumes/0/image/reference",
            "value": f"r.io/models/bert@{D1}",
        }
    ]
    pinned = json.loads(json.dumps(UPSTREAM))
    pinned["request"]["object"]["spec"]["volumes"][0]["image"]["reference"] = (
        f"r.io/models/bert@{D1}"
    )
    response = reviewed(serve, pinned)
    assert response == {"uid": UPSTREAM["request"]["uid"], "allowed": True}


def test_a_denial_carries_the_reason_and_the_uid(serve: FlaskClient) -> None:
    doc = json.loads(json.dumps(UPSTREAM))
    doc["request"]["object"]["spec"]["volumes"][0]["image"]["reference"] = "r.io/models/gpt:v1"
    response = reviewed(serve, doc)
    assert response["uid"] == UPSTREAM["request"]["uid"] and response["allowed"] is False
    assert response["status"]["code"] == 403 and "modelhooks sign" in response["status"]["message"]


def test_an_update_is_decided_by_the_models_it_adds(serve: FlaskClient) -> None:
    doc = json.loads(json.dumps(UPSTREAM))
    doc["request"]["object"]["spec"]["volumes"][0]["image"]["reference"] = "r.io/models/gpt:v1"
    running = json.loads(json.dumps(doc["request"]["object"]))
    doc["request"]["object"]["metadata"]["labels"] = {"x": "y"}
    doc["request"].update(operation="UPDATE", oldObject=running)
    assert reviewed(serve, doc)["allowed"] is True  # it runs already: a label is no new model
    doc["request"]["oldObject"] = UPSTREAM["request"]["object"]
    assert reviewed(serve, doc)["allowed"] is False
    doc["request"]["oldObject"] = ["not", "an", "object"]
    denied = reviewed(serve, doc)
    assert denied["status"]["message"] == "request.oldObject is not an object"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'"x"',
        b"{}",
        b'{"apiVersion": "v1", "kind": "AdmissionReview"}',
        b"[" * 100_000,  # json's parser recursed past the limit: a 500
        b'{"request": ' * 50_000,
    ],
)
def test_what_is_not_an_admission_review_is_denied_as_one(serve: FlaskClient, body: bytes) -> None:
    response = reviewed(serve, body)
    assert response["allowed"] is False and response["status"]["code"] == 400


def test_an_oversized_review_is_denied_as_one(tmp_path: Path) -> None:
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_ADMISSION_MAX_REVIEW_BYTES": "1000"}
    app = build(load_settings(env=env), policies=Policies(policy()))
    client = create_app(app.broker()).test_client()
    response = reviewed(client, {"pad": "x" * 2000, **UPSTREAM})
    assert response["allowed"] is False and "over the limit" in response["status"]["message"]


def test_the_functions_framework_target_answers_admission_reviews(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions_framework import create_app

    monkeypatch.setenv("MODELHOOKS_HOME", str(tmp_path))
    root = Path(__file__).resolve().parents[2]
    client = create_app(
        target="admission", source=str(root / "functions" / "main.py")
    ).test_client()
    response = reviewed(client, UPSTREAM, "/validate")
    # outside a cluster no policy exists: a model reference is refused (fail-closed)
    assert response["allowed"] is False and "no VerificationPolicy" in response["status"]["message"]
    assert reviewed(
        client,
        {**UPSTREAM, "request": {**UPSTREAM["request"], "kind": {"kind": "Secret"}}},
        "/validate",
    )["allowed"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
_volume = st.fixed_dictionaries(
    {"name": st.text(max_size=5)},
    optional={
        "image": st.fixed_dictionaries(
            {},
            optional={
                "reference": _json
                | st.sampled_from(["r.io/models/bert:v1", "r.io/x@sha256:zz", "::", "a b"])
            },
        )
    },
)
_object = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "annotations": st.dictionaries(
                    st.sampled_from(["modelhooks.dev/model", "x"]),
                    _json | st.text(max_size=12),
                    max_size=2,
                ),
                "labels": _json,
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "volumes": st.lists(_volume, max_size=3) | _json,
                "template": _json,
                "predictor": _json,
                "jobTemplate": _json,
            },
        )
        | _json,
    },
)
_request = st.fixed_dictionaries(
    {},
    optional={
        "uid": st.text(max_size=10) | _json,
        "kind": st.fixed_dictionaries(
            {
                "kind": st.sampled_from(
                    ["Pod", "Deployment", "CronJob", "InferenceService", "ConfigMap"]
                )
                | _json
            }
        )
        | _json,
        "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE"]) | _json,
        "namespace": st.text(max_size=5) | _json,
        "name": st.text(max_size=5) | _json,
        "object": _object | _json,
    },
)
_review = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]) | _json,
        "kind": st.just("AdmissionReview") | _json,
        "request": _request | _json,
    },
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_review, mutate=st.booleans())
def test_fuzzed_reviews_always_get_an_admission_review(
    serve: FlaskClient, body: Any, mutate: bool
) -> None:
    response = reviewed(serve, body, "/admission/mutate" if mutate else "/admission/validate")
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    if isinstance(uid, str):
        assert response["uid"] == uid
    if not response["allowed"]:
        assert response["status"]["message"]

"""A push sign refuses for good, told on its Model on a real kube-apiserver: a version lands
with a stray `model.sig` (not this deployment's signature) → `modelhooks serve` registers it
and sign refuses to overwrite the file (SignatureExists) → a `model.refused` (function sign)
→ notify: Signed and Ready False with that reason, saying why and what to do, one Warning
Event however often the push is delivered again; the stray file removed and the version
pushed again, it is signed and Ready. Before, sign answered 409 (dead-lettered) and the
Model said nothing but NotSigned."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Served
from tests.e2e.test_cleanup_refused import Cluster
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.local_store import lay_model
from tests.servers._proc import free_port
from tests.servers.kube import KubeApiServer
from tests.unit.signing_material import make_key

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

# the Model asks for a signature (its Secret is the deployment's here: serve's --signing-key)
SIGNING = {"enabled": True, "method": "key", "keySecretRef": {"name": "signing-key"}}


def _pushed(namespace: str, name: str, id_: str) -> dict[str, Any]:
    """The version's push, as a bucket notification's ingress would name it."""
    return {
        "specversion": "1.0",
        "id": id_,
        "source": "/e2e",
        "type": "dev.modelhooks.artifact.pushed",
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "data": {
            "model": name,
            "version": "1",
            "uri": f"gs://models/models/{name}/1/",
            "digest": "gcs-generation:1",
            "store": "gcs",
            "namespace": namespace,
        },
    }


def _post(served: Served, event: dict[str, Any]) -> int:
    return _answer(served, event)[0]


def _answer(served: Served, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        served.url + "/",
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status), json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read() or b"{}")


def test_a_push_sign_refuses_is_told_on_the_model_and_a_later_signature_replaces_it(
    kube_apiserver: KubeApiServer,
    models_api: Any,  # noqa: F811
    serve: Callable[..., Served],
    tmp_path: Path,
) -> None:
    from kubernetes import client

    namespace, name = f"signref-{uuid.uuid4().hex[:8]}", f"stray-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
    kubeconfig = str(kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    served = serve(
        free_port(),
        "--notify-kubeconfig", kubeconfig,
        "--signing-key", str(make_key(tmp_path).private),
    )  # fmt: skip
    cluster = Cluster(kube_apiserver, models_api, namespace, served)
    source = {"gcs": {"uri": f"gs://models/models/{name}/1/"}}
    cluster.create(name, {"source": source, "version": "1", "signing": SIGNING}, [])
    where = lay_model(served.home, "models", f"models/{name}/1")
    (where / "model.sig").write_bytes(b"someone else's signature")  # not this signer's

    def conditions() -> dict[str, dict[str, Any]]:
        status = (cluster.get(name) or {}).get("status") or {}
        return {c["type"]: c for c in status.get("conditions", [])}

    def refused() -> dict[str, Any] | None:
        signed = conditions().get("Signed", {})
        return signed if signed.get("status") == "False" else None

    first = _pushed(namespace, name, "push-1")
    assert _post(served, first) == 200  # registered, and the refusal told (no 409)
    signed = served.wait_for(f"{name}'s Signed refused", refused)
    assert signed["reason"] == "SignatureExists"
    assert f"gs://models/models/{name}/1/" in signed["message"]
    assert "another signature already exists" in signed["message"]
    assert "--replace" in signed["message"] and "push the version again" in signed["message"]
    found = conditions()
    assert found["Registered"]["status"] == "True"  # register's condition: its own
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "SignatureExists")
    assert cluster.column(name, "Reason") == "SignatureExists"  # kubectl get -o wide
    assert (where / "model.sig").read_bytes() == b"someone else's signature"  # not overwritten

    assert _post(served, first) == 200  # redelivered: told alike
    (warning,) = cluster.warnings(name)
    assert (warning.reason, warning.action) == ("SignatureExists", "Sign")
    assert refused() == signed  # nothing rewritten

    (where / "model.sig").unlink()  # the cause fixed, the version pushed again
    assert _post(served, _pushed(namespace, name, "push-2")) == 200

    def ready() -> dict[str, Any] | None:
        found = conditions().get("Ready", {})
        return found if found.get("status") == "True" else None

    served.wait_for(f"{name} Ready", ready)
    assert conditions()["Signed"]["reason"] == "Signed"
    assert (where / "model.sig").exists()


def test_a_push_sign_refuses_that_no_model_waits_on_fails_as_before(
    kube_apiserver: KubeApiServer,
    models_api: Any,  # noqa: F811
    serve: Callable[..., Served],
    tmp_path: Path,
) -> None:
    """A push-only version (no Model of its name, version and location in the cluster; here
    one of its name with another version): sign refuses it (SignatureExists) and notify,
    with cluster access, finds no Model to tell. It was answered 200, the refusal in a log
    line only (dead-lettered before sign told its refusals); now notify answers the
    refusal's 409 naming why and carrying it, so the push is answered 409 again."""
    from kubernetes import client

    namespace, name = f"signref-{uuid.uuid4().hex[:8]}", f"alone-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
    kubeconfig = str(kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    served = serve(
        free_port(),
        "--notify-kubeconfig", kubeconfig,
        "--signing-key", str(make_key(tmp_path).private),
    )  # fmt: skip
    cluster = Cluster(kube_apiserver, models_api, namespace, served)
    source = {"gcs": {"uri": f"gs://models/models/{name}/1/"}}
    cluster.create(name, {"source": source, "version": "2", "signing": SIGNING}, [])
    where = lay_model(served.home, "models", f"models/{name}/1")
    (where / "model.sig").write_bytes(b"someone else's signature")  # not this signer's

    status, body = _answer(served, _pushed(namespace, name, "push-1"))
    assert status == 409, body
    told = {o["function"]: o for o in body["outcomes"]}["notify"]
    assert (told["status"], told["error"]["error"]) == (409, "signature_exists"), told
    message = told["error"]["message"]
    assert message.startswith(f"no Model to tell sign's refusal of {namespace}/{name}"), message
    assert "none of that name, version and location" in message, message
    assert "signature_exists: another signature already exists" in message, message
    assert "status" not in (cluster.get(name) or {})  # the other version's Model: untold
    assert (where / "model.sig").read_bytes() == b"someone else's signature"

"""`KubeflowModelRegistry` against the real Kubeflow Model Registry REST server (PostgreSQL):
the same contract as every backend, plus what only this backend can get wrong."""

from __future__ import annotations

import contextlib
import secrets
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import requests

from modelhooks.adapters.model_registry.kubeflow import (
    FAILURE_REASON,
    KubeflowModelRegistry,
    StaleWrite,
    external_id,
)
from modelhooks.core.errors import BadRequest, CredentialsRefused, NotFound, Transient
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelState
from tests.contract.model_registry import ModelRegistryContract, unique
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer
from tests.servers.tls import CertificateAuthority

pytestmark = pytest.mark.integration


@pytest.fixture
def kubeflow(model_registry: ModelRegistryServer) -> Iterator[KubeflowModelRegistry]:
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    yield registry
    registry.close()


class TestKubeflow(ModelRegistryContract):
    @pytest.fixture
    def registry(self, kubeflow: KubeflowModelRegistry) -> KubeflowModelRegistry:
        return kubeflow


def test_properties_are_typed_string_values(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer
) -> None:
    model = kubeflow.create_model(unique("m"), properties={"team": "a"})
    raw = requests.get(f"{model_registry.api_url}/registered_models/{model.id}", timeout=10)
    assert raw.json()["customProperties"]["team"] == {
        "metadataType": "MetadataStringValue",
        "string_value": "a",
    }


def test_artifact_is_a_model_artifact_with_its_digest(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer
) -> None:
    model = kubeflow.create_model(unique("m"), properties={})
    version = kubeflow.create_version(model.id, "1", properties={})
    artifact = kubeflow.upsert_artifact(
        ModelArtifact(
            id="",
            version_id=version.id,
            name="model",
            uri="s3://b/m/1/",
            digest="etag:abc",
            state=ArtifactState.PENDING,
            custom_properties={"source_event": "e1"},
        )
    )
    raw = requests.get(f"{model_registry.api_url}/model_artifacts/{artifact.id}", timeout=10)
    body = raw.json()
    assert body["artifactType"] == "model-artifact"
    assert body["state"] == "PENDING"
    assert body["customProperties"]["digest"]["string_value"] == "etag:abc"
    assert body["externalId"] == external_id(version.id, "model")  # found by it, exactly
    (listed,) = kubeflow.list_artifacts(version.id)
    assert listed == msgspec.structs.replace(artifact, state=ArtifactState.PENDING)
    assert listed.custom_properties == {"source_event": "e1"}


def test_update_replaces_properties_and_description(kubeflow: KubeflowModelRegistry) -> None:
    model = kubeflow.create_model(unique("m"), properties={"a": "1", "b": "2"})
    updated = kubeflow.update_model(
        msgspec.structs.replace(model, description="d", custom_properties={"a": "3"})
    )
    assert updated.custom_properties == {"a": "3"}
    assert kubeflow.get_model(model.name) == updated


def test_missing_parents_are_not_found(kubeflow: KubeflowModelRegistry) -> None:
    model = kubeflow.create_model(unique("m"), properties={})
    with pytest.raises(NotFound):
        kubeflow.create_version(model.id + "0000", "1", properties={})
    with pytest.raises(NotFound):
        kubeflow.upsert_artifact(
            ModelArtifact(id="", version_id="999999", name="model", uri="u", digest="d")
        )
    with pytest.raises(NotFound):
        kubeflow.upsert_artifact(
            ModelArtifact(id="999999", version_id="1", name="model", uri="u", digest="d")
        )


def test_a_property_longer_than_the_database_takes_is_a_bad_request(
    kubeflow: KubeflowModelRegistry,
) -> None:
    """The server's PostgreSQL indexes string properties in a btree (2,704 bytes a row): a
    longer value answered 500 (SQLSTATE 54000), taken for the registry being down and
    redelivered for ever; every redelivery is refused alike, so it is bad input."""
    model = kubeflow.create_model(unique("m"), properties={})
    too_long = secrets.token_hex(1600)  # 3,200 bytes that do not compress
    with pytest.raises(BadRequest, match="longer than the registry's database takes"):
        kubeflow.create_version(model.id, "1", properties={"uri": too_long})
    version = kubeflow.create_version(model.id, "1", properties={"uri": too_long[:2000]})
    assert version.custom_properties["uri"] == too_long[:2000]


def test_versions_and_artifacts_stay_with_their_parent(kubeflow: KubeflowModelRegistry) -> None:
    a = kubeflow.create_model(unique("a"), properties={})
    b = kubeflow.create_model(unique("b"), properties={})
    for model in (a, b):
        for name in ("1", "2"):
            version = kubeflow.create_version(model.id, name, properties={"of": model.name})
            kubeflow.upsert_artifact(
                ModelArtifact(id="", version_id=version.id, name="model", uri=name, digest="d")
            )
    versions = kubeflow.list_versions(a.id)
    assert sorted(v.name for v in versions) == ["1", "2"]
    assert {v.custom_properties["of"] for v in versions} == {a.name}
    for version in versions:
        (artifact,) = kubeflow.list_artifacts(version.id)
        assert artifact.uri == version.name and artifact.version_id == version.id


class _Recorder:
    """The requests a registry sends: (method, path) with the REST base cut off, and the
    statuses they were answered with."""

    def __init__(self, registry: KubeflowModelRegistry) -> None:
        self.calls: list[tuple[str, str]] = []
        self.statuses: list[int] = []
        base = len(registry.api_url)
        send = registry._http.urlopen

        def record(method: str, url: str, **kwargs: Any) -> Any:
            response = send(method, url, **kwargs)
            self.calls.append((method, url[base:].partition("?")[0]))
            self.statuses.append(response.status)
            return response

        registry._http.urlopen = record  # type: ignore[method-assign]

    def listings(self) -> list[tuple[str, str]]:
        """GETs that are neither a lookup by id nor an exact find, and that the server ran
        (not the one probe of a scoped listing v0.3.0 cannot run: 500 at once)."""
        finds = ("/registered_model", "/model_version", "/model_artifact")
        return [
            (m, p)
            for (m, p), status in zip(self.calls, self.statuses, strict=True)
            if m == "GET" and status < 500 and p not in finds and not p.rsplit("/", 1)[-1].isdigit()
        ]


def test_register_and_sign_never_list(kubeflow: KubeflowModelRegistry) -> None:
    """The hot path is exact (by name, externalId or id) whatever the registry holds: a new
    push, its redelivery, a second version and the signature write list nothing, and cost
    the same requests for the third version as for the second."""
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent
    from modelhooks.handlers.register import register_model

    name = unique("flat")
    recorder = _Recorder(kubeflow)
    counts, sent = [], []
    events = {}
    for version in ("1", "2", "3"):
        pushed = ArtifactPushed(
            model=name,
            version=version,
            uri=f"gs://b/{name}/{version}/",
            digest=f"d{version}",
            store="gcs",
        )
        events[version] = (CanonicalEvent.new(pushed, source="test"), pushed)
    for version in ("1", "1", "2", "grown", "3"):  # a push, its redelivery, the next ones
        if version == "grown":  # the registry grows by 40 versions meanwhile
            other = kubeflow.create_model(unique("other"), properties={})
            for n in range(40):
                kubeflow.create_version(other.id, str(n), properties={})
            continue
        before = len(recorder.calls)
        register_model(*events[version], registry=kubeflow)
        counts.append(len(recorder.calls) - before)
        calls = zip(recorder.calls[before:], recorder.statuses[before:], strict=True)
        sent.append([(m, p.strip("/0123456789"), status) for (m, p), status in calls])
    with kubeflow.transaction():  # what sign writes
        model = kubeflow.get_model(name)
        assert model is not None
        version = kubeflow.get_version(model.id, "2")
        assert version is not None
        props = {**version.custom_properties, "signature.signer": "key abc"}
        kubeflow.update_version(msgspec.structs.replace(version, custom_properties=props))
    assert recorder.listings() == []
    # a redelivery finds everything: its one write, creating the version, conflicts
    assert [(m, p, s) for m, p, s in sent[1] if m != "GET"] == [("POST", "model_versions", 409)]
    assert counts[2] == counts[3]  # the same requests at any registry size
    # a new version of a known model is created at once, never looked up first, from the
    # model as last seen, which is read (by id) only as the transaction ends; no model write
    assert [(m, p.split("/")[0], s) for m, p, s in sent[2]] == [
        ("POST", "model_versions", 201),
        ("POST", "model_versions", 201),  # …/{id}/artifacts
        ("GET", "registered_models", 200),
    ]
    (artifact,) = kubeflow.list_artifacts(version.id)
    assert artifact.uri == f"gs://b/{name}/2/" and artifact.state == ArtifactState.LIVE


def _raw(api: str, method: str, path: str, body: dict[str, object] | None = None) -> dict:  # type: ignore[type-arg]
    response = requests.request(method, api + path, json=body, timeout=10)
    assert response.status_code < 400, response.text
    result: dict = response.json()  # type: ignore[type-arg]
    return result


TYPED = {
    "project": {"metadataType": "MetadataStringValue", "string_value": "sentiment"},
    "epochs": {"metadataType": "MetadataIntValue", "int_value": "12"},
    "accuracy": {"metadataType": "MetadataDoubleValue", "double_value": 0.95},
    "tuned": {"metadataType": "MetadataBoolValue", "bool_value": True},
    "config": {"metadataType": "MetadataStructValue", "struct_value": "eyJsciI6IDAuMX0="},
}


def test_typed_properties_and_fields_both_ways(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer
) -> None:
    """What another client writes with types and Kubeflow's own fields reads as text and
    `kubeflow.` properties; a write keeps every type (a changed int stays an int) and the
    fields; what we write with fields reads back as the server's fields."""
    api = model_registry.api_url
    name = unique("typed")
    raw = _raw(
        api,
        "POST",
        "/registered_models",
        {"name": name, "owner": "alice", "description": "d", "customProperties": TYPED},
    )
    model = kubeflow.get_model(name)
    assert model is not None and model.description == "d"
    assert model.custom_properties == {
        "project": "sentiment",
        "epochs": "12",
        "accuracy": "0.95",
        "tuned": "true",
        "config": '{"lr":0.1}',
        "kubeflow.owner": "alice",
    }
    props = {**model.custom_properties, "epochs": "13", "new": "x"}
    kubeflow.update_model(msgspec.structs.replace(model, custom_properties=props))
    after = _raw(api, "GET", f"/registered_models/{raw['id']}")
    assert after["owner"] == "alice"
    held = after["customProperties"]
    assert held["epochs"] == {"metadataType": "MetadataIntValue", "int_value": "13"}
    for key in ("project", "accuracy", "tuned", "config"):
        assert held[key] == TYPED[key] | ({"struct_value": '{"lr":0.1}'} if key == "config" else {})
    assert held["new"] == {"metadataType": "MetadataStringValue", "string_value": "x"}

    version = kubeflow.create_version(
        raw["id"], "1", properties={"kubeflow.author": "bob", "digest": "d1"}
    )
    assert _raw(api, "GET", f"/model_versions/{version.id}")["author"] == "bob"
    fields = {
        "kubeflow.model_format_name": "onnx",
        "kubeflow.model_format_version": "1.17",
        "kubeflow.storage_key": "s3-conn",
        "kubeflow.storage_path": "models/x/1",
        "kubeflow.description": "the weights",
    }
    artifact = kubeflow.upsert_artifact(
        ModelArtifact(
            id="",
            version_id=version.id,
            name="model",
            uri="s3://b/x/1/",
            digest="d1",
            state=ArtifactState.PENDING,
            custom_properties=fields,
        )
    )
    stored = _raw(api, "GET", f"/model_artifacts/{artifact.id}")
    assert (stored["modelFormatName"], stored["modelFormatVersion"]) == ("onnx", "1.17")
    assert (stored["storageKey"], stored["storagePath"]) == ("s3-conn", "models/x/1")
    assert stored["description"] == "the weights" and stored["state"] == "PENDING"
    assert set(stored["customProperties"]) == {"digest"}  # fields are fields, not properties
    failed = kubeflow.upsert_artifact(
        msgspec.structs.replace(
            artifact,
            state=ArtifactState.ABANDONED,
            custom_properties={**fields, FAILURE_REASON: "copy failed: 403 from s3"},
        )
    )
    (listed,) = kubeflow.list_artifacts(version.id)
    assert listed == failed
    assert listed.state == ArtifactState.ABANDONED
    assert listed.custom_properties[FAILURE_REASON] == "copy failed: 403 from s3"
    assert listed.custom_properties["kubeflow.model_format_name"] == "onnx"


def test_a_version_another_client_wrote_is_adopted(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer
) -> None:
    """A version created without our externalId (upstream's client, the UI) is found when
    register meets it: created once by name, then exact."""
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent
    from modelhooks.handlers.register import register_model

    api = model_registry.api_url
    name = unique("foreign")
    model = _raw(api, "POST", "/registered_models", {"name": name})
    digest = {"metadataType": "MetadataStringValue", "string_value": "d1"}
    raw = _raw(
        api,
        "POST",
        "/model_versions",
        {"name": "1", "registeredModelId": model["id"], "customProperties": {"digest": digest}},
    )
    pushed = ArtifactPushed(model=name, version="1", uri="gs://b/f/1/", digest="d1", store="gcs")
    (reply,) = register_model(CanonicalEvent.new(pushed, source="t"), pushed, registry=kubeflow)
    assert reply.data.model_version_id == raw["id"]  # type: ignore[union-attr]
    found = kubeflow.get_version(model["id"], "1")
    assert found is not None and found.id == raw["id"]


def test_transactions_serialize_per_model_only(kubeflow: KubeflowModelRegistry) -> None:
    """A transaction holds its model: another one of the same model waits for it, one of
    another model runs meanwhile (there is no process-wide lock)."""
    a, b = unique("a"), unique("b")
    kubeflow.create_model(a, properties={})
    kubeflow.create_model(b, properties={})
    holding, release = threading.Event(), threading.Event()
    done: list[str] = []

    def hold_a() -> None:
        with kubeflow.transaction():
            kubeflow.get_model(a)
            holding.set()
            release.wait(10)
        done.append("first a")

    def touch(name: str) -> None:
        with kubeflow.transaction():
            kubeflow.get_model(name)
        done.append(name)

    first = threading.Thread(target=hold_a)
    first.start()
    assert holding.wait(10)
    other = threading.Thread(target=touch, args=(b,))
    same = threading.Thread(target=touch, args=(a,))
    other.start()
    same.start()
    other.join(10)
    assert done == [b]  # the other model went through; the same model still waits
    release.set()
    for thread in (first, same):
        thread.join(10)
    assert done == [b, "first a", a]


def test_a_write_over_another_writers_change_is_stale(
    model_registry: ModelRegistryServer,
) -> None:
    """Two registries (two processes): an update based on a read that another writer has
    changed since is refused, and so is a transaction whose write was overwritten before
    it ended; both are transient (the redelivery derives again)."""
    one = KubeflowModelRegistry(model_registry.url, timeout=10)
    two = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        name = unique("stale")
        one.create_model(name, properties={"n": "0"})
        with pytest.raises(StaleWrite) as caught, one.transaction():
            mine = one.get_model(name)
            assert mine is not None
            theirs = two.get_model(name)
            assert theirs is not None
            two.update_model(msgspec.structs.replace(theirs, custom_properties={"n": "2"}))
            one.update_model(msgspec.structs.replace(mine, custom_properties={"n": "1"}))
        assert isinstance(caught.value, Transient)
        got = one.get_model(name)
        assert got is not None and got.custom_properties == {"n": "2"}  # theirs stands

        with pytest.raises(StaleWrite), one.transaction():
            mine = one.get_model(name)
            assert mine is not None
            one.update_model(msgspec.structs.replace(mine, custom_properties={"n": "3"}))
            theirs = two.get_model(name)
            assert theirs is not None
            two.update_model(msgspec.structs.replace(theirs, custom_properties={"n": "4"}))
        with one.transaction():  # the redelivery: reads, writes, nobody interferes
            mine = one.get_model(name)
            assert mine is not None
            one.update_model(msgspec.structs.replace(mine, custom_properties={"n": "5"}))
    finally:
        one.close()
        two.close()


def test_an_update_of_a_listed_version_over_another_writers_change_is_stale(
    model_registry: ModelRegistryServer,
) -> None:
    """What a model's version listing read is what an update of a listed version checks
    (the deletion archives each listed version): another process's write since, such as
    `sign`'s signature, is refused, never overwritten."""
    one = KubeflowModelRegistry(model_registry.url, timeout=10)
    two = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        model = one.create_model(unique("listed"), properties={})
        one.create_version(model.id, "1", properties={"digest": "d1"})
        with pytest.raises(StaleWrite), one.transaction():
            (listed,) = one.list_versions(model.id)
            theirs = two.get_version(model.id, "1")
            assert theirs is not None
            signed = {**theirs.custom_properties, "signature.signer": "key abc"}
            two.update_version(msgspec.structs.replace(theirs, custom_properties=signed))
            one.update_version(msgspec.structs.replace(listed, state=ModelState.ARCHIVED))
        got = one.get_version(model.id, "1")
        assert got is not None and got.custom_properties["signature.signer"] == "key abc"
        assert got.state == ModelState.LIVE
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("push_is_newer", [True, False])
def test_a_push_that_writes_no_model_is_redone_when_a_deletion_changed_it(
    model_registry: ModelRegistryServer, push_is_newer: bool
) -> None:
    """A push of a live model writes no model, yet its decision stands on the model's
    deletion time: a deletion another process writes between the push's read and its end
    (its listing not yet showing the push's version) makes the push stale, and the
    redelivery ends in the time-ordered state."""
    from datetime import UTC, datetime

    import msgspec

    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
    from modelhooks.handlers.register import archive_model, register_model

    name = unique("interleaved")
    times = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (1, 2, 3)]
    push_at, delete_at = (times[2], times[1]) if push_is_newer else (times[1], times[2])

    def push(version: str, at: datetime) -> tuple[CanonicalEvent, ArtifactPushed]:
        data = ArtifactPushed(
            model=name, version=version, uri=f"s3://b/{name}/{version}/", digest=version, store="s3"
        )
        return msgspec.structs.replace(CanonicalEvent.new(data, source="t"), time=at), data

    deletion = ModelDeleted(name=name, namespace="default")
    deleted = msgspec.structs.replace(CanonicalEvent.new(deletion, source="t"), time=delete_at)
    two = KubeflowModelRegistry(model_registry.url, timeout=10)

    class Interleaved(KubeflowModelRegistry):
        def get_model(self, model_name: str) -> Any:
            found = super().get_model(model_name)
            if not done:  # the deletion, in another process, as this push acts
                done.append(True)
                archive_model(deleted, deletion, registry=two)
            return found

    done: list[bool] = []
    one = Interleaved(model_registry.url, timeout=10)
    try:
        register_model(*push("1", times[0]), registry=two)  # a live model
        with pytest.raises(StaleWrite):
            register_model(*push("2", push_at), registry=one)
        register_model(*push("2", push_at), registry=one)  # the redelivery
        model = two.get_model(name)
        assert model is not None
        states = {v.name: v.state for v in two.list_versions(model.id)}
        live = ModelState.LIVE if push_is_newer else ModelState.ARCHIVED
        assert states == {"1": ModelState.ARCHIVED, "2": live}
        assert model.state == live
    finally:
        one.close()
        two.close()


def test_a_model_another_process_changed_since_this_one_saw_it_is_read_anew(
    model_registry: ModelRegistryServer,
) -> None:
    """A transaction starts from its model as this process last saw it; one that another
    process has changed since (here: a deletion newer than the next push) ends that
    transaction in StaleWrite, and the redelivery derives from the model as it is."""
    from datetime import UTC, datetime

    import msgspec

    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
    from modelhooks.handlers.register import archive_model, register_model

    name = unique("cached")

    def at(hour: int, data: Any) -> CanonicalEvent:
        event = CanonicalEvent.new(data, source="t")
        return msgspec.structs.replace(event, time=datetime(2026, 1, 1, hour, tzinfo=UTC))

    def push(version: str, hour: int) -> tuple[CanonicalEvent, ArtifactPushed]:
        data = ArtifactPushed(
            model=name, version=version, uri=f"s3://b/{name}/{version}/", digest=version, store="s3"
        )
        return at(hour, data), data

    one = KubeflowModelRegistry(model_registry.url, timeout=10)
    two = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        register_model(*push("1", 1), registry=one)  # `one` has seen the model, live
        deletion = ModelDeleted(name=name, namespace="default")
        archive_model(at(3, deletion), deletion, registry=two)  # another process, since
        with pytest.raises(StaleWrite):
            register_model(*push("2", 2), registry=one)  # older than the deletion
        register_model(*push("2", 2), registry=one)  # its redelivery
        model = two.get_model(name)
        assert model is not None and model.state == ModelState.ARCHIVED
        states = {v.name: v.state for v in two.list_versions(model.id)}
        assert states == {"1": ModelState.ARCHIVED, "2": ModelState.ARCHIVED}
    finally:
        one.close()
        two.close()


@pytest.fixture
def https_registry(
    model_registry: ModelRegistryServer, tmp_path: Path
) -> Iterator[tuple[str, CertificateAuthority, list[bytes]]]:
    """The real server behind TLS (a byte forwarder with a certificate of a private CA):
    (its https URL, the CA, the first bytes of each request it forwarded)."""
    ca = CertificateAuthority.create(tmp_path / "ca")
    context = ca.server_context("registry", tmp_path / "ca")
    upstream = model_registry.url.removeprefix("http://").split(":")
    heads: list[bytes] = []

    class Forward(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                tls = context.wrap_socket(self.request, server_side=True)
            except (ssl.SSLError, OSError):
                return  # a client that does not trust us hangs up in the handshake
            with tls, socket.create_connection((upstream[0], int(upstream[1]))) as back:
                first = tls.recv(65536)
                heads.append(first)
                back.sendall(first)

                def pump(src: socket.socket, dst: socket.socket) -> None:
                    with contextlib.suppress(OSError):
                        while chunk := src.recv(65536):
                            dst.sendall(chunk)
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)

                up = threading.Thread(target=pump, args=(tls, back), daemon=True)
                up.start()
                pump(back, tls)
                up.join(5)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}", ca, heads
    server.shutdown()
    server.server_close()


def test_custom_ca_and_token_from_env_as_the_async_upload_job_takes_them(
    https_registry: tuple[str, CertificateAuthority, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MODELHOOKS_REGISTRY_CA and _TOKEN as env:NAME (the job's *_ENVVAR settings) or
    literals: the registry's private CA is trusted, the token sent; without the CA the
    failure names the setting."""
    from modelhooks.bootstrap import model_registry
    from modelhooks.core.settings import load_settings

    url, ca, heads = https_registry
    monkeypatch.setenv("REGISTRY_CA_PEM", ca.cert_pem.decode())
    monkeypatch.setenv("REGISTRY_TOKEN", "t0ken-from-env")
    base = {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": url}
    for env in (
        {
            "MODELHOOKS_REGISTRY_CA": "env:REGISTRY_CA_PEM",
            "MODELHOOKS_REGISTRY_TOKEN": "env:REGISTRY_TOKEN",
        },
        {
            "MODELHOOKS_REGISTRY_CA": ca.cert_pem.decode(),
            "MODELHOOKS_REGISTRY_TOKEN": "t0ken-from-env",
        },
    ):
        registry = model_registry(load_settings(env={**base, **env}))
        try:
            name = unique("tls")
            created = registry.create_model(name, properties={})
            assert registry.get_model(name) == created
        finally:
            registry.close()  # type: ignore[attr-defined]
        assert b"Authorization: Bearer t0ken-from-env" in heads[-1]
    untrusted = model_registry(load_settings(env=base))
    try:
        with pytest.raises(CredentialsRefused, match="MODELHOOKS_REGISTRY_CA"):
            untrusted.get_model("any")
    finally:
        untrusted.close()  # type: ignore[attr-defined]


def _cli(*args: str, url: str) -> str:
    import os
    import subprocess
    import sys

    modelhooks = str(Path(sys.executable).with_name("modelhooks"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env |= {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": url}
    done = subprocess.run(
        [modelhooks, "registry", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_list_show_export_import_between_kubeflow_and_sqlite(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer, tmp_path: Path
) -> None:
    """`registry list` streams every row (an artifact of another name too), `show` prints
    Kubeflow's fields, and export/import between Kubeflow and SQLite keeps them and is
    idempotent both ways."""
    import json

    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
    from modelhooks.core.registry_copy import export_registry, import_registry

    name = unique("copy")
    model = kubeflow.create_model(name, properties={"kubeflow.owner": "alice", "team": "nlp"})
    version = kubeflow.create_version(
        model.id, "1", properties={"kubeflow.author": "bob", "digest": "d1"}
    )
    for artifact, fmt in (("model", "onnx"), ("tokenizer", "json")):
        kubeflow.upsert_artifact(
            ModelArtifact(
                id="",
                version_id=version.id,
                name=artifact,
                uri=f"s3://b/{name}/1/{artifact}",
                digest=f"d-{artifact}",
                custom_properties={"kubeflow.model_format_name": fmt},
            )
        )
    kubeflow.create_model(f"{name}-empty", properties={})

    rows = [
        r
        for r in json.loads(_cli("list", "--json", url=model_registry.url))
        if r["model"].startswith(name)
    ]
    assert sorted((r["model"], r["version"], r["uri"]) for r in rows) == [
        (name, "1", f"s3://b/{name}/1/model"),
        (name, "1", f"s3://b/{name}/1/tokenizer"),
        (f"{name}-empty", "", ""),
    ]
    shown = json.loads(_cli("show", name, url=model_registry.url))
    assert shown["custom_properties"]["kubeflow.owner"] == "alice"
    (shown_version,) = shown["versions"]
    assert shown_version["custom_properties"]["kubeflow.author"] == "bob"
    formats = {
        a["name"]: a["custom_properties"]["kubeflow.model_format_name"]
        for a in shown_version["artifacts"]
    }
    assert formats == {"model": "onnx", "tokenizer": "json"}

    doc = export_registry(kubeflow)
    doc["models"] = [m for m in doc["models"] if m["name"].startswith(name)]
    sqlite = SqliteModelRegistry(tmp_path / "registry.db")
    try:
        assert (
            import_registry(sqlite, doc).summary() == "5 created, 0 updated, 0 unchanged, 0 refused"
        )
        assert (
            import_registry(sqlite, doc).summary() == "0 created, 0 updated, 5 unchanged, 0 refused"
        )
        back = export_registry(sqlite)
    finally:
        sqlite.close()
    first = import_registry(kubeflow, back)  # the records exist: they gain their sqlite ids
    assert (first.created, first.refused) == (0, [])
    again = import_registry(kubeflow, back)
    assert (again.created, again.updated, again.refused) == (0, 0, [])
    stored = kubeflow.get_model(name)
    assert stored is not None and stored.custom_properties["kubeflow.owner"] == "alice"
    assert {a.name for a in kubeflow.list_artifacts(version.id)} == {"model", "tokenizer"}

"""On fake-gcs-server: a signed model whose objects are uploaded again with the same bytes
(a retried upload: the same md5, so the same content digest, and new generations) and
pushed again is bound anew, so admission's one-listing check finds nothing rewritten. It
was answered from the registry's record, the binding kept naming the old generations and
admission refused the model for good. Other bytes uploaded before the push is signed
are not signed."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from modelhooks.adapters.signing import HashOptions, KeySigner
from modelhooks.adapters.signing.binding import Binding, changes
from modelhooks.adapters.signing.bundle import unverified_payload
from modelhooks.adapters.signing.streaming import list_model, read_object
from modelhooks.bootstrap import build, reset
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelSigned
from modelhooks.handlers.register import register_model
from modelhooks.handlers.sign import sign_artifact
from tests.contract.register_order import T0
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.servers.objectstores import FakeGcs
from tests.unit.signing_material import make_key, write_model

pytestmark = pytest.mark.integration


def test_the_same_bytes_uploaded_again_and_pushed_again_are_bound_anew(
    fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    bucket = f"rewritten-{uuid.uuid4().hex[:12]}"
    gcs = fake_gcs.storage_client().create_bucket(bucket)
    files = write_model(tmp_path / "bert")

    def upload() -> None:
        for path in sorted(p for p in files.rglob("*") if p.is_file()):
            gcs.blob(f"models/bert/1/{path.relative_to(files)}").upload_from_filename(path)
        gcs.blob("models/bert/1/_SUCCESS").upload_from_string(b"")

    reset()
    env = {"MODELHOOKS_HOME": str(tmp_path / "home"), "MODELHOOKS_STORE_BACKEND": "cloud"}
    deps = build(load_settings(env=env)).deps
    uri = f"gs://{bucket}/models/bert/1/"
    registry, signer = InMemoryModelRegistry(), KeySigner.from_file(make_key(tmp_path).private)

    def push(n: int) -> ModelSigned:
        data = ArtifactPushed(
            model="bert", version="1", uri=uri, digest=deps.content.digest_of(uri), store="gcs"
        )
        event = CanonicalEvent(id=f"p{n}", source="t", type=data.TYPE, data=data, time=T0)
        register_model(event, data, registry=registry)
        (reply,) = sign_artifact(
            event, data, stores=deps.stores, oci=deps.oci, registry=registry, signer=signer,
            options=HashOptions(),
        )  # fmt: skip
        assert isinstance(reply.data, ModelSigned)
        return reply.data

    upload()
    first = push(1)
    upload()  # the same bytes again: new generations
    assert push(2) == first
    store, _, prefix = deps.stores.resolve(uri)
    key = prefix.rstrip("/") + "/model.sig.binding"
    bound = Binding.from_statement(unverified_payload(read_object(store, bucket, key))[1])
    ignored = HashOptions().serialization().ignore_paths
    assert changes(bound, dict(list_model(store, bucket, prefix, ignored)), ignored) == []
    reset()


def test_other_bytes_uploaded_before_the_push_is_signed_are_not_signed(
    fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The push names its content (md5s in one listing); the version uploaded again with
    other bytes before sign hashed it: a Conflict, and no signature next to the new bytes
    (one signed by the sign function vouched for content register refused)."""
    from modelhooks.core.errors import Conflict

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    bucket = f"rewritten-{uuid.uuid4().hex[:12]}"
    gcs = fake_gcs.storage_client().create_bucket(bucket)
    gcs.blob("models/bert/1/w.bin").upload_from_string(b"weights")
    gcs.blob("models/bert/1/_SUCCESS").upload_from_string(b"")
    reset()
    env = {"MODELHOOKS_HOME": str(tmp_path / "home"), "MODELHOOKS_STORE_BACKEND": "cloud"}
    deps = build(load_settings(env=env)).deps
    uri = f"gs://{bucket}/models/bert/1/"
    data = ArtifactPushed(
        model="bert", version="1", uri=uri, digest=deps.content.digest_of(uri), store="gcs"
    )
    event = CanonicalEvent(id="p1", source="t", type=data.TYPE, data=data, time=T0)
    registry = InMemoryModelRegistry()
    register_model(event, data, registry=registry)
    gcs.blob("models/bert/1/w.bin").upload_from_string(b"other weights")
    with pytest.raises(Conflict, match="no longer the content"):
        sign_artifact(
            event, data, stores=deps.stores, oci=deps.oci, registry=registry,
            signer=KeySigner.from_file(make_key(tmp_path).private), options=HashOptions(),
        )  # fmt: skip
    assert sorted(b.name for b in gcs.list_blobs()) == [
        "models/bert/1/_SUCCESS",
        "models/bert/1/w.bin",
    ]
    reset()

"""A version's signature record follows its state, whatever the order of its push, its
signing and its model's deletion: an archived version holds none. Before, a version signed
and then archived kept `signature.*` (its files, the signature among them, deleted by
cleanup: a record naming nothing), while the same events with the deletion first left none;
and a deletion landing while `sign` hashed got the signature written next to files its
cleanup had already listed, and recorded on the archived version."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing import HashOptions, KeySigner
from modelhooks.bootstrap import build
from modelhooks.core.errors import Conflict
from modelhooks.core.function import Skip
from modelhooks.core.records import ModelState
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from modelhooks.handlers.register import archive_model, register_model
from modelhooks.handlers.sign import sign_artifact
from tests.contract.register_order import T0
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.signing_material import make_key, write_model

DATA = ArtifactPushed(model="bert", version="1", uri="", digest="sha256:" + "1" * 64, store="local")
DELETED = ModelDeleted(name="bert", spec={"deletionPolicy": "Delete"})
DELETION = CanonicalEvent(
    id="d", source="t", type=DELETED.TYPE, data=DELETED, time=T0 + timedelta(minutes=5)
)


def push(tmp_path: Path) -> CanonicalEvent:
    data = DATA.replace(uri=f"file://{tmp_path}/store/models/bert/1/")
    return CanonicalEvent(id="p", source="t", type=data.TYPE, data=data, time=T0)


def sign(event: CanonicalEvent, registry: InMemoryModelRegistry, signer: KeySigner) -> list:  # type: ignore[type-arg]
    assert isinstance(event.data, ArtifactPushed)
    stores = build(
        load_settings(env={"MODELHOOKS_HOME": str(event.data.uri[7:]).split("/store/")[0]})
    ).deps.stores
    return sign_artifact(
        event, event.data, stores=stores, oci=OciClients(), registry=registry, signer=signer,
        options=HashOptions(),
    )  # fmt: skip


def signature_props(registry: InMemoryModelRegistry) -> dict[str, str]:
    model = registry.get_model("bert")
    assert model is not None
    version = registry.get_version(model.id, "1")
    assert version is not None and version.state == ModelState.ARCHIVED
    return {k: v for k, v in version.custom_properties.items() if k.startswith("signature.")}


def test_archiving_a_signed_version_drops_its_signature_record(tmp_path: Path) -> None:
    write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry, event = InMemoryModelRegistry(), push(tmp_path)
    register_model(event, event.data, registry=registry)  # type: ignore[arg-type]
    sign(event, registry, KeySigner.from_file(make_key(tmp_path).private))
    archive_model(DELETION, DELETED, registry=registry)
    assert signature_props(registry) == {}


def test_a_version_archived_while_it_is_signed_keeps_no_signature(tmp_path: Path) -> None:
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry, event = InMemoryModelRegistry(), push(tmp_path)
    register_model(event, event.data, registry=registry)  # type: ignore[arg-type]

    class DeletedMeanwhile(KeySigner):
        def sign(self, statement: bytes) -> bytes:  # hashed: the deletion and its cleanup land
            archive_model(DELETION, DELETED, registry=registry)
            return super().sign(statement)

    signer = DeletedMeanwhile.from_file(make_key(tmp_path).private)
    files = sorted(p.name for p in model.iterdir())
    with pytest.raises(Skip, match="archived"):
        sign(event, registry, signer)
    assert sorted(p.name for p in model.iterdir()) == files  # no signature, no binding
    assert signature_props(registry) == {}


def test_what_another_delivery_wrote_is_left_to_it(tmp_path: Path) -> None:
    """A duplicate finding the signature another delivery wrote (and had not recorded yet),
    and the version archived meanwhile, removes nothing: it wrote nothing. (That delivery
    removes what it wrote, or recorded it before the deletion: then the files are as the
    deletion's policy leaves them.)"""
    from modelhooks.adapters.signing import sign_model

    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry, event = InMemoryModelRegistry(), push(tmp_path)
    register_model(event, event.data, registry=registry)  # type: ignore[arg-type]
    key = make_key(tmp_path).private
    assert isinstance(event.data, ArtifactPushed)
    home = event.data.uri[7:].split("/store/")[0]
    stores = build(load_settings(env={"MODELHOOKS_HOME": home})).deps.stores
    store, bucket, prefix = stores.resolve(event.data.uri)
    first = sign_model(store, bucket, prefix, KeySigner.from_file(key))  # the other delivery
    assert first.created and first.bound

    class DeletedMeanwhile(KeySigner):
        def signed(self, bundle: bytes) -> bool:  # hashed: the deletion lands
            archive_model(DELETION, DELETED, registry=registry)
            return super().signed(bundle)

    files = sorted(p.name for p in model.iterdir())
    with pytest.raises(Skip, match="archived"):
        sign(event, registry, DeletedMeanwhile.from_file(key))
    assert sorted(p.name for p in model.iterdir()) == files  # its signature and binding stay
    assert {"model.sig", "model.sig.binding"} <= set(files)
    assert signature_props(registry) == {}


def test_a_push_newer_than_the_deletion_that_archived_its_version_is_signed_once_registered(
    tmp_path: Path,
) -> None:
    """The version archived by a deletion (of an earlier push of the same digest), and a
    push newer than that deletion signed before register records it: a Skip ("stale
    push") left the version, revived by that push's registration, LIVE and unsigned for
    good; now it is Unavailable (redelivered) until register has recorded this push, and
    signed then. A push older than the deletion is still skipped."""
    from modelhooks.core.errors import Unavailable

    write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry, first = InMemoryModelRegistry(), push(tmp_path)
    register_model(first, first.data, registry=registry)  # type: ignore[arg-type]
    archive_model(DELETION, DELETED, registry=registry)
    signer = KeySigner.from_file(make_key(tmp_path).private)
    with pytest.raises(Skip, match="stale push"):  # older than the deletion: moot
        sign(first, registry, signer)
    again = CanonicalEvent(
        id="p2", source="t", type=first.type, data=first.data, time=T0 + timedelta(minutes=9)
    )
    with pytest.raises(Unavailable, match="not registered yet as of this push"):
        sign(again, registry, signer)
    register_model(again, again.data, registry=registry)  # type: ignore[arg-type]
    (reply,) = sign(again, registry, signer)
    model = registry.get_model("bert")
    assert model is not None
    version = registry.get_version(model.id, "1")
    assert version is not None and version.state == ModelState.LIVE
    assert version.custom_properties["signature.uri"] == reply.data.signature_uri


def test_a_signature_a_newer_push_records_before_its_registration_survives_the_deletion(
    tmp_path: Path,
) -> None:
    """A push's version LIVE by an earlier push of the same digest; the newer push signed
    before register recorded it: the signature was recorded on the version, a deletion
    between the two pushes archived it (dropping the record) and the newer push's
    registration revived it LIVE and unsigned for good (the sign delivery was answered).
    Now that sign waits for its own push to be registered."""
    from modelhooks.core.errors import Unavailable

    write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry, first = InMemoryModelRegistry(), push(tmp_path)
    register_model(first, first.data, registry=registry)  # type: ignore[arg-type]
    signer = KeySigner.from_file(make_key(tmp_path).private)
    newer = CanonicalEvent(
        id="p2", source="t", type=first.type, data=first.data, time=T0 + timedelta(minutes=9)
    )
    with pytest.raises(Unavailable, match="as of this push"):
        sign(newer, registry, signer)
    archive_model(DELETION, DELETED, registry=registry)  # between the two pushes
    register_model(newer, newer.data, registry=registry)  # type: ignore[arg-type]
    sign(newer, registry, signer)  # redelivered
    model = registry.get_model("bert")
    assert model is not None
    version = registry.get_version(model.id, "1")
    assert version is not None and version.state == ModelState.LIVE
    assert "signature.uri" in version.custom_properties


def test_a_push_of_another_digest_is_not_waited_for(tmp_path: Path) -> None:
    """register records no push of another digest than its version's (moot when older than
    the model's deletion, else a Conflict): sign answered Unavailable "as of this push" to
    one newer than the version's own, redelivered until dead-lettered, and Conflict (a
    409, dead-lettered) to a moot one. Now: stale (skipped) on an archived version,
    Conflict on a live one, and no wait for either."""
    write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry, first = InMemoryModelRegistry(), push(tmp_path)
    register_model(first, first.data, registry=registry)  # type: ignore[arg-type]
    signer = KeySigner.from_file(make_key(tmp_path).private)
    assert isinstance(first.data, ArtifactPushed)
    other = first.data.replace(digest="sha256:" + "2" * 64)
    newer = CanonicalEvent(
        id="p2", source="t", type=other.TYPE, data=other, time=T0 + timedelta(minutes=1)
    )
    with pytest.raises(Conflict, match="another digest"):
        sign(newer, registry, signer)
    archive_model(DELETION, DELETED, registry=registry)
    for at in (timedelta(minutes=1), timedelta(minutes=9)):  # older, newer than the deletion
        late = CanonicalEvent(id="p3", source="t", type=other.TYPE, data=other, time=T0 + at)
        with pytest.raises(Skip, match="stale push"):
            sign(late, registry, signer)
    assert signature_props(registry) == {}

"""A push names its content (the digest ingress took from one listing); the model's files
rewritten with other bytes before `sign` hashed them (the same version uploaded again, other
content) were signed and recorded on the version as the pushed digest's signature: the
model.sig next to the files then vouched for content register had refused (a Conflict: the
same version with another digest), and admission admitted it. Now what sign hashed must be
the content the push names (the content digest of the listing it hashed between), or it is
a Conflict and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing import HashOptions, KeySigner
from modelhooks.bootstrap import build
from modelhooks.core.errors import Conflict
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from modelhooks.handlers.register import register_model
from modelhooks.handlers.sign import sign_artifact
from tests.contract.register_order import T0
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.signing_material import make_key, write_model


def test_other_bytes_than_the_push_names_are_not_signed(tmp_path: Path) -> None:
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    deps = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})).deps
    uri = f"file://{model}/"
    data = ArtifactPushed(
        model="bert", version="1", uri=uri, digest=deps.content.digest_of(uri), store="local"
    )
    event = CanonicalEvent(id="p1", source="t", type=data.TYPE, data=data, time=T0)
    registry = InMemoryModelRegistry()
    register_model(event, data, registry=registry)
    (model / "config.json").write_bytes(b'{"layers": 3, "tampered": true}')  # other content
    assert deps.content.digest_of(uri) != data.digest
    with pytest.raises(Conflict, match="no longer the content"):
        sign_artifact(
            event, data, stores=deps.stores, oci=OciClients(), registry=registry,
            signer=KeySigner.from_file(make_key(tmp_path).private), options=HashOptions(),
        )  # fmt: skip
    assert not (model / "model.sig").exists() and not (model / "model.sig.binding").exists()
    found = registry.get_model("bert")
    assert found is not None
    version = registry.get_version(found.id, "1")
    assert version is not None
    assert not any(k.startswith("signature.") for k in version.custom_properties)


def test_a_push_named_without_its_slash_is_its_folder_alone(tmp_path: Path) -> None:
    """`…/bert/1` (a push or a Model's source named without the slash) listed `bert/10/…`
    too, and named the files `/config.json`: its content digest was not sign's, which
    lists `bert/1/` (a Conflict, dead-lettered), nor the same once model.sig was written."""
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    write_model(tmp_path / "store" / "models" / "bert" / "10")  # the version beside it
    deps = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})).deps
    uri = f"file://{model}"
    digest = deps.content.digest_of(uri)
    assert digest == deps.content.digest_of(uri + "/")
    data = ArtifactPushed(model="bert", version="1", uri=uri, digest=digest, store="local")
    event = CanonicalEvent(id="p1", source="t", type=data.TYPE, data=data, time=T0)
    registry = InMemoryModelRegistry()
    register_model(event, data, registry=registry)
    [signed] = sign_artifact(
        event, data, stores=deps.stores, oci=OciClients(), registry=registry,
        signer=KeySigner.from_file(make_key(tmp_path).private), options=HashOptions(),
    )  # fmt: skip
    assert signed.data.digest == digest and (model / "model.sig").exists()
    assert deps.content.digest_of(uri) == digest  # the signature is not the model

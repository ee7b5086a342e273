"""The `sign` function: sign once per artifact digest, record it, reply model.signed; and
the signing-enable rule."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing import HashOptions, KeySigner, KeyVerifier, verify_model
from modelhooks.adapters.signing.config import SigningConfig
from modelhooks.bootstrap import build
from modelhooks.core.errors import Unavailable
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelSigned
from modelhooks.handlers.register import register_model
from modelhooks.handlers.sign import sign_artifact
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.signing_material import KeyPair, make_key, write_model


def pushed(tmp_path: Path, digest: str = "sha256:" + "1" * 64) -> CanonicalEvent:
    data = ArtifactPushed(
        model="bert",
        version="1",
        uri=f"file://{tmp_path}/store/models/bert/1/",
        digest=digest,
        store="local",
    )
    return CanonicalEvent(id="e1", source="test", type=data.TYPE, data=data, time=datetime.now(UTC))


@pytest.fixture
def keys(tmp_path: Path) -> KeyPair:
    return make_key(tmp_path)


def run(
    event: CanonicalEvent, registry: InMemoryModelRegistry, keys: KeyPair
) -> list[CanonicalEvent]:
    """Sign with the local store rooted where pushed() put the model ($HOME/store)."""
    assert isinstance(event.data, ArtifactPushed)
    home = event.data.uri.removeprefix("file://").split("/store/")[0]
    stores = build(load_settings(env={"MODELHOOKS_HOME": home})).deps.stores
    signer = KeySigner.from_file(keys.private)
    return sign_artifact(
        event,
        event.data,
        stores=stores,
        oci=OciClients(),
        registry=registry,
        signer=signer,
        options=HashOptions(),
    )


def test_signs_records_and_replies_once(
    tmp_path: Path, keys: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry = InMemoryModelRegistry()
    event = pushed(tmp_path)
    assert isinstance(event.data, ArtifactPushed)
    with pytest.raises(Unavailable, match="not registered yet"):
        run(event, registry, keys)
    register_model(event, event.data, registry=registry)

    (reply,) = run(event, registry, keys)
    assert reply.type == "dev.modelhooks.model.signed" and reply.id == event.derived_id("signed")
    data = reply.data
    assert isinstance(data, ModelSigned)
    assert data.signature_uri == f"file://{tmp_path}/store/models/bert/1/model.sig"
    assert data.root_digest.startswith("sha256:") and data.signer.startswith("key sha256:")
    assert (model / "model.sig").exists()
    model_ = registry.get_model("bert")
    assert model_ is not None
    version = registry.get_version(model_.id, "1")
    assert version is not None
    assert version.custom_properties["signature.root_digest"] == data.root_digest

    # Redelivery: same reply, nothing hashed or signed again (one listing: still bound).
    from modelhooks.adapters.signing import model as signing_model

    def hashed(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("hashed again")

    with monkeypatch.context() as patched:
        patched.setattr(signing_model, "hash_model", hashed)
        (again,) = run(event, registry, keys)
    assert again.data == data
    # A signature gone since (its record naming nothing) is signed again by the next push.
    (model / "model.sig").unlink()
    (again,) = run(event, registry, keys)
    assert again.data == data and (model / "model.sig").exists()


def test_signature_verifies(tmp_path: Path, keys: KeyPair) -> None:
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    registry = InMemoryModelRegistry()
    event = pushed(tmp_path)
    assert isinstance(event.data, ArtifactPushed)
    register_model(event, event.data, registry=registry)
    run(event, registry, keys)
    from modelhooks.adapters.signing import local_model

    store, bucket, prefix = local_model(model)
    verify_model(store, bucket, prefix, KeyVerifier(keys.public))


SIGSTORE = {
    "SIGSTORE_TUF_URL": "https://tuf.example",
    "SIGSTORE_FULCIO_URL": "https://fulcio.example",
    "SIGSTORE_REKOR_URL": "https://rekor.example",
}


@pytest.mark.parametrize(
    ("config", "env", "on"),
    [
        (SigningConfig(), {}, False),
        (SigningConfig(), SIGSTORE, True),
        (SigningConfig(enabled_flag=False), SIGSTORE, False),
        (SigningConfig(enabled_flag=True), {}, True),
        (SigningConfig(key=Path("k.pem")), {}, True),
        (SigningConfig(key=Path("k.pem"), enabled_flag=False), {}, False),
        (SigningConfig(), {"SIGSTORE_TUF_URL": "https://tuf.example"}, False),
    ],
)
def test_enabling_rule(config: SigningConfig, env: dict[str, str], on: bool) -> None:
    assert config.enabled(env)[0] is on


def test_partial_sigstore_setup_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="modelhooks.signing"):
        on, why = SigningConfig().enabled({"SIGSTORE_TUF_URL": "https://tuf.example"})
    assert not on and "SIGSTORE_FULCIO_URL" in why and "SIGSTORE_REKOR_URL" in caplog.text

"""The embedded store never leaves its root and never blocks: symbolic links anywhere on the
way, FIFOs and devices are refused (400), through the `sign` function as through the port;
and `sign` refuses an empty or missing model instead of signing nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing import HashOptions, KeySigner
from modelhooks.bootstrap import build
from modelhooks.core.errors import BadRequest
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from modelhooks.handlers.register import register_model
from modelhooks.handlers.sign import sign_artifact
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.signing_material import make_key, write_model


def sign(home: Path, tmp_path: Path, version: str = "1") -> list[CanonicalEvent]:
    uri = f"gs://models/models/bert/{version}/"  # a bucket notification: the embedded store
    data = ArtifactPushed(model="bert", version=version, uri=uri, digest="d", store="gcs")
    event = CanonicalEvent(id="e", source="t", type=data.TYPE, data=data)
    registry = InMemoryModelRegistry()
    register_model(event, data, registry=registry)
    return sign_artifact(
        event,
        data,
        stores=build(load_settings(env={"MODELHOOKS_HOME": str(home)})).deps.stores,
        oci=OciClients(),
        registry=registry,
        signer=KeySigner.from_file(make_key(tmp_path).private),
        options=HashOptions(),
    )


@pytest.fixture
def version(tmp_path: Path) -> Path:
    return write_model(tmp_path / "home" / "store" / "models" / "models" / "bert" / "1")


@pytest.mark.parametrize("target", ["/etc/passwd", "/etc"])
def test_a_link_inside_a_model_is_refused_and_nothing_outside_is_read(
    tmp_path: Path, version: Path, target: str
) -> None:
    (version / "extra").symlink_to(target)
    with pytest.raises(BadRequest, match="symbolic link"):
        sign(tmp_path / "home", tmp_path)
    assert not (version / "model.sig").exists()


def test_a_linked_version_directory_is_refused_and_nothing_is_written_outside(
    tmp_path: Path,
) -> None:
    outside = write_model(tmp_path / "outside")
    versions = tmp_path / "home" / "store" / "models" / "models" / "bert"
    versions.mkdir(parents=True)
    (versions / "2").symlink_to(outside)
    with pytest.raises(BadRequest, match="symbolic link"):
        sign(tmp_path / "home", tmp_path, version="2")
    assert not (outside / "model.sig").exists()


def test_a_fifo_inside_a_model_is_refused_without_blocking(tmp_path: Path, version: Path) -> None:
    os.mkfifo(version / "pipe")
    with pytest.raises(BadRequest, match="not a regular file"):
        sign(tmp_path / "home", tmp_path)


def test_an_empty_or_missing_model_is_not_signed(tmp_path: Path) -> None:
    empty = tmp_path / "home" / "store" / "models" / "models" / "bert" / "1"
    empty.mkdir(parents=True)
    with pytest.raises(BadRequest, match="nothing to sign"):
        sign(tmp_path / "home", tmp_path)
    with pytest.raises(BadRequest, match="nothing to sign"):
        sign(tmp_path / "home", tmp_path, version="404")
    assert not (empty / "model.sig").exists()


def test_listing_walks_only_the_prefix(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for name in ("a", "b"):
        write_model(tmp_path / "models" / name / "1")
    keys = {o.key for o in store.list("models", "a/1/")}
    assert keys and all(k.startswith("a/1/") for k in keys)
    (tmp_path / "models" / "b" / "1" / "loop").symlink_to(tmp_path / "models" / "b")
    assert {o.key for o in store.list("models", "a/")} == keys  # b's link is never reached


def test_names_that_escape_are_refused(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for bucket, key in [("..", "x"), ("b", "../x"), ("b", "a/\0"), ("a/b", "x")]:
        with pytest.raises(BadRequest):
            store.path(bucket, key)


@pytest.mark.parametrize("if_absent", [True, False])
def test_a_put_in_progress_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, if_absent: bool
) -> None:
    """A concurrent delivery listing the model while a signature is being written sees the
    objects, not the put's temporary file (its content digest would name a file that is
    gone a moment later: the same event's redelivery a 409, or 'changed while hashed')."""
    store = LocalObjectStore(tmp_path)
    store.put("models", "m/1/weights", b"w")
    seen: list[list[str]] = []
    place = os.link if if_absent else os.replace

    def listing_then(*args: object, **kwargs: object) -> None:
        seen.append([info.key for info in store.list("models", "m/1/")])
        place(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link" if if_absent else "replace", listing_then)
    store.put("models", "m/1/model.sig", b"sig", if_absent=if_absent)
    assert seen == [["m/1/weights"]]
    monkeypatch.undo()
    assert [info.key for info in store.list("models", "m/1/")] == ["m/1/model.sig", "m/1/weights"]

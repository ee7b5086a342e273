"""Streamed signing and verification against real MinIO and fake-gcs-server, plus the
ObjectStore contract the signing code relies on (same assertions as the local store)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, cast

import model_signing
import pytest

from modelhooks.adapters.signing import (
    HashOptions,
    KeySigner,
    KeyVerifier,
    sign_model,
    verify_model,
)
from modelhooks.core.errors import Conflict, NotFound, VerificationFailed
from modelhooks.core.ports import ObjectStore
from tests.unit.signing_material import KeyPair, make_key, upload, write_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def store(each_store: tuple[ObjectStore, str]) -> tuple[ObjectStore, str]:
    """(store, bucket): a fresh bucket in each backend."""
    return each_store


def test_contract(store: tuple[ObjectStore, str]) -> None:
    s, bucket = store
    assert s.stat(bucket, "m/absent") is None
    info = s.put(bucket, "m/a", b"0123456789", if_absent=True)
    assert (info.key, info.size) == ("m/a", 10)
    with pytest.raises(Conflict):
        s.put(bucket, "m/a", b"other", if_absent=True)
    s.put(bucket, "m/b/c", b"x")
    assert [i.key for i in s.list(bucket, "m/")] == ["m/a", "m/b/c"]
    assert s.read_range(bucket, "m/a", 2, 3) == b"234"
    assert s.read_range(bucket, "m/a", 8, 100) == b"89"
    with pytest.raises(NotFound):
        s.read_range(bucket, "m/absent", 0, 1)
    # streamed: one request, pieces of at most chunk_size, fewer bytes at the end
    assert [bytes(p) for p in s.read_chunks(bucket, "m/a", 1, 8, 3)] == [b"123", b"456", b"78"]
    assert b"".join(s.read_chunks(bucket, "m/a", 6, 100, 1 << 20)) == b"6789"
    assert list(s.read_chunks(bucket, "m/a", 10, 5, 4)) == []
    with pytest.raises(NotFound):
        list(s.read_chunks(bucket, "m/absent", 0, 1, 1))
    s.delete(bucket, "m/a")
    s.delete(bucket, "m/a")  # deleting what is gone succeeds
    assert s.stat(bucket, "m/a") is None


@pytest.mark.parametrize(
    "options",
    [HashOptions(chunk_size=64 * 1024), HashOptions(method="shards", shard_size=50_000)],
    ids=["files", "shards"],
)
def test_sign_and_verify_streamed(
    store: tuple[ObjectStore, str], tmp_path: Path, keys: KeyPair, options: HashOptions
) -> None:
    s, bucket = store
    model = write_model(tmp_path / "bert")
    upload(s, bucket, model, "bert/1")
    s.put(bucket, "bert/1/_SUCCESS", b"")
    signed = sign_model(s, bucket, "bert/1", KeySigner.from_file(keys.private), options=options)
    assert signed.created and signed.key == "bert/1/model.sig"
    assert not sign_model(
        s, bucket, "bert/1", KeySigner.from_file(keys.private), options=options
    ).created
    verified = verify_model(s, bucket, "bert/1/", KeyVerifier(keys.public), options=options)
    assert verified.root_digest == signed.root_digest

    # The same bundle verifies with model_signing on a local copy of the same files.
    (model / "model.sig").write_bytes(s.read_range(bucket, signed.key, 0, 1 << 20))
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
        model, model / "model.sig"
    )

    s.put(bucket, "bert/1/config.json", b'{"layers": 99}')
    s.delete(bucket, "bert/1/a.txt")
    with pytest.raises(VerificationFailed) as e:
        verify_model(s, bucket, "bert/1", KeyVerifier(keys.public), options=options)
    assert e.value.details["modified"] == ["config.json"]
    assert e.value.details["missing"] == ["a.txt"]


class Watched:
    """`store` itself (every call goes to it), with the calls made to it counted by name."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def test_the_signature_and_its_binding_are_looked_for_in_the_listing(
    store: tuple[ObjectStore, str], tmp_path: Path, keys: KeyPair
) -> None:
    """Whether a signature and its binding are next to the model is read from the listing
    made after hashing: neither is asked for by a request of its own (two round trips of a
    first signature, issue 22), the first time or on a redelivery, which writes nothing."""
    s, bucket = store
    upload(s, bucket, write_model(tmp_path / "gpt"), "gpt/1")
    signer = KeySigner.from_file(keys.private)
    watched = Watched(s)
    first = sign_model(cast(ObjectStore, watched), bucket, "gpt/1", signer)
    binding = s.stat(bucket, "gpt/1/model.sig.binding")
    assert first.created and binding is not None
    assert watched.calls["stat"] == 0 and watched.calls["put"] == 2
    watched.calls.clear()
    again = sign_model(cast(ObjectStore, watched), bucket, "gpt/1", signer)
    assert not again.created and again.root_digest == first.root_digest
    assert watched.calls["stat"] == 0 and watched.calls["put"] == 0
    assert s.stat(bucket, "gpt/1/model.sig.binding") == binding  # not written again
    verify_model(s, bucket, "gpt/1", KeyVerifier(keys.public))

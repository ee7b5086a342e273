"""A signed version whose objects are written again with the same bytes (a pipeline's upload
retried, `gsutil cp -r` run twice: on GCS the same md5, so the same content digest, and new
generations) is pushed again under the same digest: `sign` answered at once from the
registry's record, and the binding next to the signature kept naming the old generations,
so admission, which decides by one listing against the binding, refused the model as
"rewritten" for good. Now a push of a signed digest checks the binding against one listing
(no hashing) and, when it names other objects, signs through again: the signature stands
(the same root digest), the binding is written anew."""

from __future__ import annotations

import os
from pathlib import Path

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing import HashOptions, KeySigner
from modelhooks.adapters.signing.binding import Binding, changes
from modelhooks.adapters.signing.bundle import unverified_payload
from modelhooks.adapters.signing.streaming import list_model
from modelhooks.bootstrap import build
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelSigned
from modelhooks.handlers.register import register_model
from modelhooks.handlers.sign import sign_artifact
from tests.contract.register_order import T0
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.signing_material import make_key, write_model


def test_the_same_bytes_written_again_and_pushed_again_are_bound_anew(tmp_path: Path) -> None:
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    stores = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})).deps.stores
    data = ArtifactPushed(
        model="bert", version="1", uri=f"file://{model}/", digest="md5-of-the-content", store="gcs"
    )
    registry = InMemoryModelRegistry()
    signer = KeySigner.from_file(make_key(tmp_path).private)

    def push(n: int) -> ModelSigned:
        event = CanonicalEvent(id=f"p{n}", source="t", type=data.TYPE, data=data, time=T0)
        register_model(event, data, registry=registry)
        (reply,) = sign_artifact(
            event, data, stores=stores, oci=OciClients(), registry=registry, signer=signer,
            options=HashOptions(),
        )  # fmt: skip
        assert isinstance(reply.data, ModelSigned)
        return reply.data

    first = push(1)
    signature = (model / "model.sig").read_bytes()
    for path in sorted(p for p in model.rglob("*") if p.is_file() and "model.sig" not in p.name):
        data_of = path.read_bytes()
        path.unlink()
        path.write_bytes(data_of)  # the same bytes, a new object (generation)
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    again = push(2)
    assert again == first
    assert (model / "model.sig").read_bytes() == signature  # the signature stands
    store, bucket, prefix = stores.resolve(data.uri)
    bound = Binding.from_statement(
        unverified_payload((model / "model.sig.binding").read_bytes())[1]
    )
    ignored = HashOptions().serialization().ignore_paths
    listing = dict(list_model(store, bucket, prefix, ignored))
    assert changes(bound, listing, ignored) == []

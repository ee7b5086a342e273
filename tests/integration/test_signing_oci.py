"""Models stored as OCI artifacts: signed as referrers on zot and cue-labs' ociregistry
(referrers API) and on
distribution 2.8 and v3 (no referrers API: fallback `sha256-<hex>` tag), verified against
real registries."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import model_signing
import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import (
    OCI_MANIFEST,
    TITLE,
    DistributionRegistry,
)
from modelhooks.adapters.signing import KeySigner, KeyVerifier
from modelhooks.adapters.signing.bundle import MEDIA_TYPE
from modelhooks.adapters.signing.oci import sign_oci, verify_oci
from modelhooks.core.errors import VerificationFailed
from tests.unit.signing_material import KeyPair, make_key, write_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"))


@pytest.fixture(params=["docker_registry", "distribution3", "zot", "ociregistry"])
def registry(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def push_model(client: DistributionRegistry, repo: str, tag: str, model: Path) -> None:
    """ORAS-style: one layer per file, titled with its model-relative path."""
    layers = []
    for path in sorted(p for p in model.rglob("*") if p.is_file()):
        data = path.read_bytes()
        layers.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": client.push_blob(repo, data),
                "size": len(data),
                "annotations": {TITLE: path.relative_to(model).as_posix()},
            }
        )
    config = {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2}
    config["digest"] = client.push_blob(repo, b"{}")
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": "application/vnd.modelhooks.model.v1",
        "config": config,
        "layers": layers,
    }
    client.push_manifest(repo, tag, manifest)


def test_sign_and_verify_as_referrer(registry: Any, tmp_path: Path, keys: KeyPair) -> None:
    client = DistributionRegistry(registry.url)
    model = write_model(tmp_path / "bert")
    push_model(client, "models/bert", "v1", model)
    signer = KeySigner.from_file(keys.private)

    signed = sign_oci(client, "models/bert", "v1", signer)
    assert signed.created
    assert not sign_oci(client, "models/bert", "v1", signer).created  # idempotent
    verified = verify_oci(client, "models/bert", "v1", KeyVerifier(keys.public))
    assert verified.root_digest == signed.root_digest

    # The referrer is where each registry kind keeps it.
    _, digest, _ = client.manifest("models/bert", "v1")
    status, _, _ = client.request("GET", f"/v2/models/bert/referrers/{digest}")
    if registry.kind in ("docker-registry", "distribution3"):  # no referrers API
        assert status == 404
        index, _, _ = client.manifest("models/bert", digest.replace(":", "-"))
        assert [m["artifactType"] for m in index["manifests"]] == [MEDIA_TYPE]
    else:  # the referrers API lists the signature, and no fallback tag was pushed
        assert status == 200
        referrers = client.referrers("models/bert", digest)
        assert [r["artifactType"] for r in referrers] == [MEDIA_TYPE]
        fallback, _, _ = client.request(
            "GET", f"/v2/models/bert/manifests/{digest.replace(':', '-')}"
        )
        assert fallback == 404

    # model_signing accepts the pushed bundle for the same files.
    artifact, _, _ = client.manifest("models/bert", signed.key)
    layer = artifact["layers"][0]
    bundle = client.blob_range("models/bert", layer["digest"], 0, layer["size"])
    (model / "model.sig").write_bytes(bundle)
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
        model, model / "model.sig"
    )
    assert json.loads(bundle)["mediaType"] == MEDIA_TYPE


def test_unsigned_other_and_wrong_key(registry: Any, tmp_path: Path, keys: KeyPair) -> None:
    client = DistributionRegistry(registry.url)
    model = write_model(tmp_path / "bert")
    push_model(client, "models/gpt", "v1", model)
    (model / "a.txt").write_text("changed")
    push_model(client, "models/gpt", "v2", model)
    sign_oci(client, "models/gpt", "v1", KeySigner.from_file(keys.private))

    with pytest.raises(VerificationFailed, match="no trusted signature"):
        verify_oci(client, "models/gpt", "v2", KeyVerifier(keys.public))
    other = make_key(tmp_path, "other")
    with pytest.raises(VerificationFailed) as e:
        verify_oci(client, "models/gpt", "v1", KeyVerifier(other.public))
    assert e.value.details["errors"]


def test_cli_on_oci(registry: Any, tmp_path: Path, keys: KeyPair) -> None:
    from modelhooks.cli import main

    def run(*argv: str | Path) -> int:
        return main([str(a) for a in argv])

    client = DistributionRegistry(registry.url)
    push_model(client, "models/t5", "v1", write_model(tmp_path / "t5"))
    uri = f"oci://{registry.host}/models/t5:v1"
    assert run("sign", uri, "--key", keys.private, "--quiet") == 0
    assert run("verify", uri, "--public-key", keys.public, "--quiet") == 0
    assert run("verify", uri, "--public-key", make_key(tmp_path, "x").public, "--quiet") == 1


def test_sign_function_on_oci(registry: Any, tmp_path: Path, keys: KeyPair) -> None:
    from datetime import UTC, datetime

    from modelhooks.adapters.signing import HashOptions
    from modelhooks.bootstrap import build
    from modelhooks.core.settings import load_settings
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelSigned
    from modelhooks.handlers.register import register_model
    from modelhooks.handlers.sign import sign_artifact
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client = DistributionRegistry(registry.url)
    push_model(client, "models/llama", "v1", write_model(tmp_path / "llama"))
    _, digest, _ = client.manifest("models/llama", "v1")
    data = ArtifactPushed(
        model="llama",
        version="v1",
        uri=f"oci://{registry.host}/models/llama@{digest}",
        digest=digest,
        store="oci",
    )
    event = CanonicalEvent(id="p1", source="t", type=data.TYPE, data=data, time=datetime.now(UTC))
    registry_ = InMemoryModelRegistry()
    register_model(event, data, registry=registry_)
    kw: dict[str, Any] = {
        "stores": build(
            load_settings(env={"MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS": "true"})
        ).deps.stores,
        "oci": OciClients(),
        "registry": registry_,
        "signer": KeySigner.from_file(keys.private),
        "options": HashOptions(),
    }
    (reply,) = sign_artifact(event, data, **kw)
    signed = reply.data
    assert isinstance(signed, ModelSigned)
    assert signed.signature_uri.startswith(f"oci://{registry.host}/models/llama@sha256:")
    assert sign_artifact(event, data, **kw)[0].data == signed
    assert verify_oci(client, "models/llama", digest, KeyVerifier(keys.public)).root_digest == (
        signed.root_digest.removeprefix("sha256:")
    )


def test_a_model_pushed_with_oras_is_signed_as_a_referrer_and_verified(
    ociregistry: Any, tmp_path: Path, keys: KeyPair
) -> None:
    """As users push models: the oras CLI (one titled layer per file)."""
    import subprocess

    from tests.servers.recipes import RECIPES

    model = write_model(tmp_path / "oras-model")
    files = sorted(p.name for p in model.iterdir())
    ref = f"{ociregistry.host}/models/oras:v1"
    pushed = subprocess.run(
        [str(RECIPES["oras"].binary()), "push", "--plain-http", ref, *files],
        cwd=model,
        capture_output=True,
        text=True,
    )
    assert pushed.returncode == 0, pushed.stderr
    client = DistributionRegistry(ociregistry.url)
    signed = sign_oci(client, "models/oras", "v1", KeySigner.from_file(keys.private))
    assert signed.created and sorted(r.path for r in signed.manifest.resources) == files
    verified = verify_oci(client, "models/oras", "v1", KeyVerifier(keys.public))
    assert verified.root_digest == signed.root_digest
    _, digest, _ = client.manifest("models/oras", "v1")
    assert [r["artifactType"] for r in client.referrers("models/oras", digest)] == [MEDIA_TYPE]


def test_a_version_archived_while_it_is_signed_keeps_no_referrer(
    registry: Any, tmp_path: Path, keys: KeyPair
) -> None:
    """The model's deletion lands while sign hashes an OCI model: the referrer this delivery
    pushed is taken back (out of the fallback index first, then its manifest), as the
    signature and binding next to an object-store model are: it stayed, a signature of a
    model whose deletion's cleanup had listed its referrers already. The model, pushed
    again after the deletion, is signed anew and verifies."""
    from datetime import UTC, datetime, timedelta

    from modelhooks.adapters.signing import HashOptions
    from modelhooks.adapters.signing.oci import _bundles
    from modelhooks.bootstrap import build
    from modelhooks.core.function import Skip
    from modelhooks.core.settings import load_settings
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
    from modelhooks.handlers.register import archive_model, register_model
    from modelhooks.handlers.sign import sign_artifact
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client = DistributionRegistry(registry.url)
    push_model(client, "models/gone", "v1", write_model(tmp_path / "gone"))
    _, digest, _ = client.manifest("models/gone", "v1")
    data = ArtifactPushed(
        model="gone",
        version="v1",
        uri=f"oci://{registry.host}/models/gone@{digest}",
        digest=digest,
        store="oci",
    )
    t0 = datetime.now(UTC)
    event = CanonicalEvent(id="p1", source="t", type=data.TYPE, data=data, time=t0)
    registry_ = InMemoryModelRegistry()
    register_model(event, data, registry=registry_)
    gone = ModelDeleted(name="gone", spec={"deletionPolicy": "Retain"})
    deletion = CanonicalEvent(
        id="d", source="t", type=gone.TYPE, data=gone, time=t0 + timedelta(seconds=1)
    )

    class DeletedMeanwhile(KeySigner):
        def sign(self, statement: bytes) -> bytes:  # hashed: the deletion lands
            archive_model(deletion, gone, registry=registry_)
            return super().sign(statement)

    kw: dict[str, Any] = {
        "stores": build(
            load_settings(env={"MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS": "true"})
        ).deps.stores,
        "oci": OciClients(),
        "registry": registry_,
        "options": HashOptions(),
    }
    with pytest.raises(Skip, match="archived"):
        sign_artifact(event, data, signer=DeletedMeanwhile.from_file(keys.private), **kw)
    assert list(_bundles(client, "models/gone", digest)) == []
    for ref in client.referrers("models/gone", digest):  # none naming nothing
        client.manifest("models/gone", ref["digest"])
    with pytest.raises(VerificationFailed, match="no trusted signature"):
        verify_oci(client, "models/gone", digest, KeyVerifier(keys.public))

    again = CanonicalEvent(
        id="p2", source="t", type=data.TYPE, data=data, time=t0 + timedelta(seconds=2)
    )
    register_model(again, data, registry=registry_)
    sign_artifact(again, data, signer=KeySigner.from_file(keys.private), **kw)
    assert verify_oci(client, "models/gone", digest, KeyVerifier(keys.public)).root_digest


def test_two_deliveries_of_one_push_at_once_leave_one_signature(
    registry: Any, tmp_path: Path, keys: KeyPair
) -> None:
    """At-least-once delivery runs one push's sign twice at once: each found no bundle of
    its signer, signed and pushed its own (ECDSA's nonce made each bundle other bytes), so
    the model carried two signatures of one signer over one content, and on a fallback
    index both read it without the other's entry and one entry was lost: that run's
    recorded signature named a referrer no reader lists. A key signs deterministically
    (RFC 6979): both push the same bytes, one referrer, listed, named by both."""
    from modelhooks.adapters.signing.oci import _bundles

    client = DistributionRegistry(registry.url)
    push_model(client, "models/twice", "v1", write_model(tmp_path / "twice"))
    _, digest, _ = client.manifest("models/twice", "v1")
    together = threading.Barrier(2)

    class Together(KeySigner):
        def sign(self, statement: bytes) -> bytes:  # both have looked for a bundle
            together.wait(timeout=60)
            return super().sign(statement)

    signed: list[str] = []

    def deliver() -> None:
        run = sign_oci(
            DistributionRegistry(registry.url),
            "models/twice",
            digest,
            Together.from_file(keys.private),
        )
        signed.append(run.key)

    runs = [threading.Thread(target=deliver) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    listed = [referrer for referrer, _ in _bundles(client, "models/twice", digest)]
    assert len(signed) == 2 and listed == [signed[0]] == [signed[1]], (signed, listed)
    assert verify_oci(client, "models/twice", "v1", KeyVerifier(keys.public))


def test_a_run_stopped_after_its_referrer_was_pushed_is_finished_by_the_next(
    registry: Any, tmp_path: Path, keys: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between pushing the referrer and adding it to the fallback index:
    the redelivery found no bundle listed and pushed another (other bytes), the first left
    a manifest no index names. Now it pushes the same one, and lists it."""
    from modelhooks.adapters.signing.oci import _bundles

    client = DistributionRegistry(registry.url)
    push_model(client, "models/cut", "v1", write_model(tmp_path / "cut"))
    _, digest, _ = client.manifest("models/cut", "v1")
    pushed: list[str] = []
    push = client.push_manifest

    def push_then_die(repo: str, ref: str, manifest: dict[str, Any]) -> str:
        done = push(repo, ref, manifest)
        if manifest.get("subject"):  # the referrer: the process dies right after
            pushed.append(done)
            raise SystemExit("killed")
        return done

    monkeypatch.setattr(client, "push_manifest", push_then_die)
    with pytest.raises(SystemExit):
        sign_oci(client, "models/cut", digest, KeySigner.from_file(keys.private))
    monkeypatch.undo()
    again = sign_oci(
        DistributionRegistry(registry.url), "models/cut", digest, KeySigner.from_file(keys.private)
    )
    listed = [referrer for referrer, _ in _bundles(client, "models/cut", digest)]
    assert listed == [again.key] == pushed, (pushed, again.key, listed)

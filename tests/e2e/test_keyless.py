"""Keyless signing end to end on the harness's private Sigstore (Fulcio with the
kube-apiserver as its issuer, a CT log, Rekor v2, a TSA): `modelhooks sign` with a real
ServiceAccount's token, configured as Kubeflow's async-upload job is (SIGSTORE_* URLs and the
instance's TUF root) or with a trust-config file; verified by `modelhooks verify` and by the
upstream `model_signing verify sigstore`; a wrong identity, a wrong issuer, a tampered file
and an expired token each refused with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.signing import HashOptions, sign_model, verify_model
from modelhooks.adapters.signing.keyless import SigstoreSigner, SigstoreTrust, SigstoreVerifier
from modelhooks.core.errors import Unavailable, VerificationFailed
from modelhooks.core.ports import ObjectStore
from tests.servers.sigstore import Sigstore
from tests.unit.signing_material import upload, write_model

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BIN = Path(sys.executable).parent
NS, SA = "ml-keyless", "trainer"


def modelhooks(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "modelhooks"), *args], capture_output=True, text=True, env=env, timeout=120
    )


def model(tmp_path: Path, name: str = "model") -> Path:
    where = tmp_path / name
    where.mkdir()
    (where / "weights.bin").write_bytes(os.urandom(4096))
    (where / "config.json").write_text('{"layers": 2}')
    return where


def base_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "MODELHOOKS_HOME": str(tmp_path)}


def token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "token"
    path.write_text(token)
    return path


@pytest.mark.parametrize("configured", ["sigstore-urls", "trust-config"])
def test_a_model_signed_keylessly_verifies_with_ours_and_upstream(
    sigstore: Sigstore, tmp_path: Path, configured: str
) -> None:
    where = model(tmp_path)
    token = token_file(tmp_path, sigstore.token(NS, SA))
    if configured == "sigstore-urls":
        env, trust = {**base_env(tmp_path), **sigstore.env()}, []
    else:
        env, trust = base_env(tmp_path), ["--trust-config", str(sigstore.trust_config)]
    signed = modelhooks("sign", str(where), "--identity-token", str(token), *trust, env=env)
    assert signed.returncode == 0, signed.stderr
    assert f"sigstore {Sigstore.identity(NS, SA)} ({sigstore.issuer})" in signed.stdout
    again = modelhooks("sign", str(where), "--identity-token", str(token), *trust, env=env)
    assert again.returncode == 0 and "verdict: already signed" in again.stdout, again.stdout

    identity = ["--identity", Sigstore.identity(NS, SA), "--issuer", sigstore.issuer]
    verified = modelhooks("verify", str(where), *identity, *trust, env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert Sigstore.identity(NS, SA) in verified.stdout

    upstream = subprocess.run(
        [
            str(BIN / "model_signing"), "verify", "sigstore", str(where),
            "--signature", str(where / "model.sig"),
            "--identity", Sigstore.identity(NS, SA),
            "--identity_provider", sigstore.issuer,
            "--trust_config", str(sigstore.trust_config),
            "--ignore-paths", str(where / "model.sig"),
        ],
        capture_output=True, text=True, env=base_env(tmp_path), timeout=120,
    )  # fmt: skip
    assert upstream.returncode == 0, upstream.stdout + upstream.stderr


def test_wrong_identity_wrong_issuer_and_tampering_are_refused_with_the_reason(
    sigstore: Sigstore, tmp_path: Path
) -> None:
    where = model(tmp_path)
    token = token_file(tmp_path, sigstore.token(NS, SA))
    trust = ["--trust-config", str(sigstore.trust_config)]
    env = base_env(tmp_path)
    assert (
        modelhooks("sign", str(where), "--identity-token", str(token), *trust, env=env).returncode
        == 0
    )

    def verify(identity: str, issuer: str) -> subprocess.CompletedProcess[str]:
        return modelhooks(
            "verify", str(where), "--identity", identity, "--issuer", issuer, *trust, env=env
        )

    other = verify(Sigstore.identity(NS, "someone-else"), sigstore.issuer)
    assert other.returncode == 1 and "FAILED" in other.stdout, other.stdout + other.stderr
    foreign = verify(Sigstore.identity(NS, SA), "https://issuer.example.com")
    assert foreign.returncode == 1 and "FAILED" in foreign.stdout, foreign.stdout
    (where / "weights.bin").write_bytes(b"tampered")
    tampered = verify(Sigstore.identity(NS, SA), sigstore.issuer)
    assert tampered.returncode == 1 and "weights.bin" in tampered.stdout, tampered.stdout


def test_an_expired_token_and_a_refused_identity_are_refused_naming_them(
    sigstore: Sigstore, tmp_path: Path
) -> None:
    """The deployment's own credentials refused: 503 for a delivery (retried, then
    dead-lettered), exit 3 here, saying what was wrong; nothing is written."""
    where = model(tmp_path)
    trust = ["--trust-config", str(sigstore.trust_config)]
    env = base_env(tmp_path)
    token = token_file(tmp_path, sigstore.signed_token(NS, SA, expires_in=-60))
    expired = modelhooks("sign", str(where), "--identity-token", str(token), *trust, env=env)
    assert expired.returncode == 3, expired.stdout + expired.stderr
    assert f"identity token {token} expired at" in expired.stderr, expired.stderr

    token.write_text(sigstore.token(NS, SA, audience="not-sigstore"))
    other = modelhooks("sign", str(where), "--identity-token", str(token), *trust, env=env)
    assert other.returncode == 3 and "not 'sigstore'" in other.stderr, other.stderr

    real = sigstore.token(NS, SA)
    token.write_text(real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB"))  # forged
    refused = modelhooks("sign", str(where), "--identity-token", str(token), *trust, env=env)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert f"Fulcio refused the identity {Sigstore.identity(NS, SA)}" in refused.stderr
    assert sigstore.issuer in refused.stderr
    assert not (where / "model.sig").exists()


def test_a_model_in_each_store_signed_keylessly_verifies_and_a_tampered_one_does_not(
    sigstore: Sigstore, each_store: tuple[ObjectStore, str], tmp_path: Path
) -> None:
    """What the `sign` function does on a push: the model streamed from its store, the
    signature written next to it, verified where it lies."""
    s, bucket = each_store
    upload(s, bucket, write_model(tmp_path / "model"), "bert/1")
    trust = SigstoreTrust.from_env(sigstore.env())
    signer = SigstoreSigner(trust, token_file(tmp_path, sigstore.token(NS, SA)))
    signed = sign_model(s, bucket, "bert/1", signer)
    assert (
        signed.created
        and signed.signer == f"sigstore {Sigstore.identity(NS, SA)} ({sigstore.issuer})"
    )
    assert not sign_model(s, bucket, "bert/1", signer).created  # a redelivery: already signed

    verifier = SigstoreVerifier(trust, Sigstore.identity(NS, SA), sigstore.issuer)
    assert verify_model(s, bucket, "bert/1", verifier).root_digest == signed.root_digest
    s.put(bucket, "bert/1/config.json", b'{"layers": 3}')
    with pytest.raises(VerificationFailed, match=r"config\.json"):
        verify_model(s, bucket, "bert/1", verifier)


@pytest.fixture(params=["distribution3", "ociregistry"])
def oci_registry(request: pytest.FixtureRequest) -> Any:
    """distribution v3 (no referrers API: the fallback tag) and cue-labs' registry (referrers)."""
    return request.getfixturevalue(request.param)


def test_a_model_in_an_oci_registry_signed_keylessly_as_a_referrer(
    sigstore: Sigstore, oci_registry: Any, tmp_path: Path
) -> None:
    from modelhooks.adapters.oci.distribution import DistributionRegistry
    from modelhooks.adapters.signing.oci import sign_oci, verify_oci
    from tests.integration.test_signing_oci import push_model

    client = DistributionRegistry(oci_registry.url)
    repo = f"models/keyless-{uuid.uuid4().hex[:8]}"  # the registries are the session's
    push_model(client, repo, "v1", write_model(tmp_path / "bert"))
    trust = SigstoreTrust.from_env(sigstore.env())
    signer = SigstoreSigner(trust, token_file(tmp_path, sigstore.token(NS, SA)))
    signed = sign_oci(client, repo, "v1", signer)
    assert signed.created
    assert signed.signer == f"sigstore {Sigstore.identity(NS, SA)} ({sigstore.issuer})"
    assert not sign_oci(client, repo, "v1", signer).created  # already signed

    verifier = SigstoreVerifier(trust, Sigstore.identity(NS, SA), sigstore.issuer)
    assert verify_oci(client, repo, "v1", verifier).root_digest == signed.root_digest
    other = SigstoreVerifier(trust, Sigstore.identity(NS, "someone-else"), sigstore.issuer)
    with pytest.raises(VerificationFailed) as refused:
        verify_oci(client, repo, "v1", other)
    assert "someone-else" in refused.value.diagnostics(), refused.value.diagnostics()
    # other content under another tag: this signature does not cover it (a tag is not
    # moved here: the session registries notify every push, and a moved tag is a 409 that
    # the registry would redeliver to whichever test listens next)
    changed = write_model(tmp_path / "bert2")
    next(p for p in sorted(changed.rglob("*")) if p.is_file() and p.stat().st_size).write_bytes(
        b"x"
    )
    push_model(client, repo, "v2", changed)
    with pytest.raises(VerificationFailed):
        verify_oci(client, repo, "v2", verifier)


def test_the_sign_function_records_the_identity_and_issuer(
    sigstore: Sigstore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push through the `sign` function as deployed (settings + SIGSTORE_* env): the
    registry's version and the model.signed reply name the certificate's identity and
    issuer, and `modelhooks registry show` shows them."""
    from datetime import UTC, datetime

    from modelhooks.bootstrap import build
    from modelhooks.core.settings import load_settings
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelSigned
    from modelhooks.handlers.register import register_model
    from modelhooks.handlers.sign import sign_artifact

    for name, value in sigstore.env().items():
        monkeypatch.setenv(name, value)
    write_model(tmp_path / "store" / "models" / "bert" / "1")
    token = token_file(tmp_path, sigstore.token(NS, SA))
    settings = load_settings(
        env={"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_SIGNING_IDENTITY_TOKEN": str(token)}
    )
    deps = build(settings).deps
    assert isinstance(deps.signer, SigstoreSigner)  # all three URLs: keyless is on
    data = ArtifactPushed(
        model="bert",
        version="1",
        uri=f"file://{tmp_path}/store/models/bert/1/",
        digest="sha256:" + "1" * 64,
        store="local",
    )
    event = CanonicalEvent(id="e1", source="t", type=data.TYPE, data=data, time=datetime.now(UTC))
    register_model(event, data, registry=deps.registry)
    (reply,) = sign_artifact(
        event, data, stores=deps.stores, oci=deps.oci, registry=deps.registry,
        signer=deps.signer, options=deps.hash_options or HashOptions(),
    )  # fmt: skip
    expected = f"sigstore {Sigstore.identity(NS, SA)} ({sigstore.issuer})"
    assert isinstance(reply.data, ModelSigned) and reply.data.signer == expected
    env = {**base_env(tmp_path), "MODELHOOKS_HOME": str(tmp_path)}
    shown = modelhooks("registry", "show", "bert/1", env=env)
    assert shown.returncode == 0, shown.stderr
    assert expected in json.dumps(json.loads(shown.stdout)), shown.stdout


def test_the_token_is_read_again_for_every_signature(sigstore: Sigstore, tmp_path: Path) -> None:
    """Projected tokens rotate: one signer, its file rewritten between two signatures; a
    certificate is kept while the token is the same (one Fulcio round trip, not one per
    signature)."""
    token = token_file(tmp_path, sigstore.token(NS, SA))
    signer = SigstoreSigner(SigstoreTrust(trust_config=sigstore.trust_config), token)
    store = LocalObjectStore(tmp_path)
    for name in ("a", "b", "c"):
        write_model(tmp_path / "models" / name)
    first = sign_model(store, "models", "a", signer)
    again = sign_model(store, "models", "b", signer)  # the same token: the same certificate
    token.write_text(sigstore.token(NS, "rotated"))
    second = sign_model(store, "models", "c", signer)
    assert Sigstore.identity(NS, SA) in first.signer and again.created
    assert Sigstore.identity(NS, "rotated") in second.signer

    def certificate(name: str) -> str:
        bundle = json.loads((tmp_path / "models" / name / "model.sig").read_text())
        return str(bundle["verificationMaterial"]["certificate"]["rawBytes"])

    assert certificate("a") == certificate("b") != certificate("c")


@pytest.mark.parametrize("piece", ["rekor", "tsa"])
def test_a_log_or_timestamp_authority_that_does_not_answer_is_transient_naming_it(
    sigstore: Sigstore, tmp_path: Path, piece: str
) -> None:
    """503 for a delivery (redelivered), naming the service; nothing is written."""
    from modelhooks.delivery.statuses import status_of

    closed = "http://127.0.0.1:9"  # the discard port: nothing listens
    if piece == "rekor":
        trust, named = SigstoreTrust(trust_config=sigstore.trust_config, rekor_url=closed), "Rekor"
    else:
        trust = SigstoreTrust(trust_config=sigstore.trust_config, tsa_url=closed)
        named = "timestamp authority"
    where = write_model(tmp_path / "models" / "m")
    signer = SigstoreSigner(trust, token_file(tmp_path, sigstore.token(NS, SA)))
    with pytest.raises(Unavailable) as failed:
        sign_model(LocalObjectStore(tmp_path), "models", "m", signer)
    message = failed.value.diagnostics()
    assert named in message and closed in message, message
    assert status_of(failed.value) == 503
    assert not (where / "model.sig").exists()


def test_the_init_containers_verify_needs_only_the_trust_the_webhook_passes(
    sigstore: Sigstore, tmp_path: Path
) -> None:
    """`verifyOn: node` with a keyless identity on a private Sigstore: the init container
    runs `modelhooks verify` with MODELHOOKS_VERIFY_TRUST alone (no SIGSTORE_*, no trust
    config, no network to the instance), which carries the admission function's trusted
    root as the mutating webhook writes it."""
    from modelhooks.core.node_verification import TRUST_ENV, trust
    from modelhooks.core.verification import Policy

    where = model(tmp_path)
    token = token_file(tmp_path, sigstore.token(NS, SA))
    signing = {**base_env(tmp_path), **sigstore.env()}
    signed = modelhooks("sign", str(where), "--identity-token", str(token), env=signing)
    assert signed.returncode == 0, signed.stderr

    def policy(subject: str) -> Policy:
        spec = {"verifyOn": "node", "identities": [{"issuer": sigstore.issuer, "subject": subject}]}
        return Policy.from_resource({"metadata": {"name": "p"}, "spec": spec})

    root = SigstoreTrust.from_env(sigstore.env()).root_json  # the webhook's, as bootstrap has it
    ours, theirs = policy(Sigstore.identity(NS, SA)), policy(Sigstore.identity(NS, "other"))
    assert "trustedRoot" not in trust([ours])  # the public-good instance: nothing to pass
    node = {**base_env(tmp_path), TRUST_ENV: json.dumps(trust([ours], root))}
    verified = modelhooks("verify", str(where), "--quiet", env=node)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "verdict: OK" in verified.stdout
    refused = modelhooks("verify", str(where), "--quiet", env={**node, TRUST_ENV: json.dumps(
        trust([theirs], root))})  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert Sigstore.identity(NS, SA) in refused.stdout
    (where / "config.json").write_text("{}")
    tampered = modelhooks("verify", str(where), "--quiet", env=node)
    assert tampered.returncode == 1 and "config.json" in tampered.stdout, tampered.stdout

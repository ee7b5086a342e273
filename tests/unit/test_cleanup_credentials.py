"""cleanup with a Model's own credentials (`spec.source.secretRef`): the Secret's keys become
the store's or registry's credentials (each backend; bad contents are a 400 naming the keys
expected), the Secret is read in the Model's namespace and no other, and what cannot be read
stops the deletion before anything goes. The `Secrets` contract runs here on the fake and in
tests/integration/test_cleanup_secrets.py on the real kube-apiserver."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.credentials_from_secret import (
    clients_for,
    gcs_credentials,
    oci_auth,
    s3_keys,
)
from modelhooks.adapters.kubernetes.secrets import KubernetesSecrets, kubernetes_secrets
from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.credentials import StaticCredentials
from modelhooks.bootstrap import build
from modelhooks.core.errors import BadRequest, ConfigError, Forbidden, NotFound, Unavailable
from modelhooks.core.function import Function
from modelhooks.core.ports import Secrets
from modelhooks.core.settings import load_settings
from modelhooks.core.stores import Stores
from modelhooks.delivery.statuses import status_of
from modelhooks.events.model import CanonicalEvent, ModelDeleted
from tests.contract.secrets import Place, SecretsContract
from tests.fakes.memory_secrets import InMemorySecrets
from tests.unit.test_cleanup import FILES, T0, World

WHERE = "Secret 'creds' in namespace 'ml'"


# --- the Secrets port: the fake passes the contract -----------------------------------


class TestInMemorySecrets(SecretsContract):
    @pytest.fixture
    def place(self) -> Place:
        fake = InMemorySecrets(granted=())
        assert fake.granted is not None

        def namespace(granted: bool) -> str:
            name = f"ns-{uuid.uuid4().hex[:8]}"
            if granted:
                fake.granted.add(name)  # type: ignore[union-attr]
            return name

        def put(ns: str, name: str, data: Mapping[str, bytes]) -> None:
            fake.secrets[(ns, name)] = dict(data)

        return Place(fake, namespace, put)


def test_the_fake_and_the_adapter_are_the_port() -> None:
    assert isinstance(InMemorySecrets(), Secrets)
    assert isinstance(KubernetesSecrets(), Secrets)


def test_no_cluster_no_secrets_and_a_missing_kubeconfig_stops_start_up(tmp_path: Path) -> None:
    assert kubernetes_secrets("", env={}) is None
    assert isinstance(kubernetes_secrets("", env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}), Secrets)
    with pytest.raises(ConfigError, match=r"MODELHOOKS_CLEANUP_KUBECONFIG=.*no such file"):
        kubernetes_secrets(str(tmp_path / "missing"), env={})


# --- S3 ---------------------------------------------------------------------------------


def test_s3_keys_with_and_without_a_session_token() -> None:
    secret = {"AWS_ACCESS_KEY_ID": b"AKIA1\n", "AWS_SECRET_ACCESS_KEY": b"s3cret"}
    assert s3_keys(secret, WHERE) == ("AKIA1", "s3cret", None)
    assert s3_keys({**secret, "AWS_SESSION_TOKEN": b"tok"}, WHERE)[2] == "tok"


@pytest.mark.parametrize(
    "secret",
    [{}, {"AWS_ACCESS_KEY_ID": b"a"}, {"accessKey": b"a", "secretKey": b"b"}],
)
def test_s3_secret_without_the_keys_names_them(secret: dict[str, bytes]) -> None:
    with pytest.raises(BadRequest) as refused:
        s3_keys(secret, WHERE)
    message = refused.value.message
    assert WHERE in message and "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in message
    assert status_of(refused.value) == 400


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("AWS_ACCESS_KEY_ID", b"AK\nSECRETVALUE", "holds a control character"),
        ("AWS_ACCESS_KEY_ID", b"AK\x00SECRETVALUE", "holds a control character"),
        ("AWS_SECRET_ACCESS_KEY", b"SECRETVALUE\x00", "holds a control character"),
        ("AWS_SESSION_TOKEN", b"SECRET\rVALUE", "holds a control character"),
        ("AWS_ACCESS_KEY_ID", b"", "is empty"),
        ("AWS_SECRET_ACCESS_KEY", b"\n", "is empty"),
        ("AWS_ACCESS_KEY_ID", b"SECRETVALUE" * 50_000, "is longer than 128 characters"),
    ],
)
def test_s3_keys_no_service_could_take_are_refused_naming_the_key_not_the_value(
    key: str, value: bytes, why: str
) -> None:
    """On MinIO these failed every request as if S3 were down (503, retried for ever)."""
    secret = {"AWS_ACCESS_KEY_ID": b"AKIA1", "AWS_SECRET_ACCESS_KEY": b"s3cret", key: value}
    with pytest.raises(BadRequest) as refused:
        s3_keys(secret, WHERE)
    assert refused.value.message == f"{WHERE}: {key} {why}: not an S3 credential"
    assert status_of(refused.value) == 400
    assert "SECRETVALUE" not in repr(refused.value.as_json())


def test_an_s3_store_acts_with_the_secrets_keys_and_keeps_its_endpoint(tmp_path: Path) -> None:
    base = S3ObjectStore(endpoint_url="http://127.0.0.1:9", region="eu-west-1")
    stores = _stores(tmp_path, s3=base)
    secret = {"AWS_ACCESS_KEY_ID": b"AKIA1", "AWS_SECRET_ACCESS_KEY": b"s3cret"}
    made, _ = clients_for(secret, "s3://b/m/1/", stores=stores, oci=OciClients(), where=WHERE)
    store = made.for_scheme("s3")
    assert isinstance(store, S3ObjectStore) and store is not base
    credentials = store.client._request_signer._credentials
    assert (credentials.access_key, credentials.secret_key) == ("AKIA1", "s3cret")
    assert store.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert store.client.meta.region_name == "eu-west-1"
    assert stores.for_scheme("s3") is base  # the process's own stores are untouched
    assert made.for_scheme("file") is stores.for_scheme("file")


# --- GCS --------------------------------------------------------------------------------


def _service_account_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "team-a",
            "private_key_id": "k1",
            "private_key": pem,
            "client_email": "cleanup@team-a.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": "https://oauth2.googleapis.com/token",
        }
    ).encode()


def test_a_gcs_store_acts_as_the_secrets_service_account(tmp_path: Path) -> None:
    base = GcsObjectStore(workers=3)
    stores = _stores(tmp_path, gs=base)
    secret = {"key.json": _service_account_key()}
    made, _ = clients_for(secret, "gs://b/m/1/", stores=stores, oci=OciClients(), where=WHERE)
    store = made.for_scheme("gs")
    assert isinstance(store, GcsObjectStore) and store is not base
    assert store._credentials.service_account_email == "cleanup@team-a.iam.gserviceaccount.com"
    assert store._project == "team-a" and store._workers == 3


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ({"credentials.json": b"{}"}, "expected key.json"),
        ({"key.json": b"not json"}, "key.json is not JSON"),
        ({"key.json": b'{"type": "authorized_user"}'}, "not a service-account key"),
        ({"key.json": b'{"type": "service_account"}'}, "not a usable service-account key"),
    ],
)
def test_a_bad_gcs_secret_is_refused_naming_key_json(
    secret: dict[str, bytes], message: str
) -> None:
    with pytest.raises(BadRequest, match=message) as refused:
        gcs_credentials(secret, WHERE)
    assert WHERE in refused.value.message


@pytest.mark.parametrize("key", [{"x": "SECRETVALUE"}, ["SECRETVALUE"]])
def test_a_gcs_private_key_that_is_no_text_is_refused_without_showing_it(key: Any) -> None:
    """google-auth's error showed it: "{'x': 'SECRETVALUE'} could not be converted to bytes"."""
    info = json.loads(_service_account_key())
    secret = {"key.json": json.dumps({**info, "private_key": key}).encode()}
    with pytest.raises(BadRequest) as refused:
        gcs_credentials(secret, WHERE)
    assert refused.value.message == f"{WHERE}: key.json's private_key is not a PEM text"
    assert "SECRETVALUE" not in repr(refused.value.as_json())


# --- OCI --------------------------------------------------------------------------------


def _dockerconfig(auths: dict[str, Any]) -> dict[str, bytes]:
    return {".dockerconfigjson": json.dumps({"auths": auths}).encode()}


@pytest.mark.parametrize(
    ("secret", "host"),
    [
        ({"username": b"bot", "password": b"pw\n"}, "r.example"),
        (_dockerconfig({"r.example:5000": {"username": "bot", "password": "pw"}}), "r.example:5000"),
        (_dockerconfig({"https://r.example/v1/": {"auth": base64.b64encode(b"bot:pw").decode()}}), "r.example"),
        (_dockerconfig({"https://index.docker.io/v1/": {"username": "bot", "password": "pw"}}), "registry-1.docker.io"),
        (_dockerconfig({"other.example": {"username": "x", "password": "y"}, "R.example": {"username": "bot", "password": "pw"}}), "r.example"),
    ],
)  # fmt: skip
def test_oci_auth_from_username_password_or_a_docker_config(
    secret: dict[str, bytes], host: str
) -> None:
    assert oci_auth(secret, host, WHERE) == ("bot", "pw")


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ({"token": b"x"}, "expected username and password, or .dockerconfigjson"),
        ({"username": b"bot"}, "expected username and password"),
        (_dockerconfig({"other.example": {"username": "x", "password": "y"}}), "auths entry for r.example"),
        ({".dockerconfigjson": b"[]"}, "no `auths` object"),
        (_dockerconfig({"r.example": {"email": "x"}}), "needs username and password, or auth"),
        (_dockerconfig({"r.example": {"auth": "%%%"}}), "needs username and password, or auth"),
        # a token alone (no user:): it was taken for the user name, and a refusal showed it
        (_dockerconfig({"r.example": {"auth": base64.b64encode(b"SECRETVALUE").decode()}}), "needs username and password, or auth"),
    ],
)  # fmt: skip
def test_a_bad_oci_secret_is_refused_naming_the_keys(
    secret: dict[str, bytes], message: str
) -> None:
    with pytest.raises(BadRequest, match=message) as refused:
        oci_auth(secret, "r.example", WHERE)
    assert WHERE in refused.value.message
    assert "SECRETVALUE" not in repr(refused.value.as_json())


def test_oci_clients_act_with_the_secret_never_the_process_credentials(tmp_path: Path) -> None:
    base = OciClients(("process", "secret"), allow_local=False, allowed_hosts=frozenset({"x"}))
    secret = {"username": b"bot", "password": b"pw"}
    uri = "oci://europe-docker.pkg.dev/p/r/bert:v1"
    stores = _stores(tmp_path)
    made_stores, made = clients_for(secret, uri, stores=stores, oci=base, where=WHERE)
    assert made_stores is stores
    assert made.auth == StaticCredentials("bot", "pw")
    assert (made.allow_local, made.allowed_hosts) == (False, frozenset({"x"}))
    registry, _, _ = made.registry_for(uri)  # Artifact Registry: its Docker path, the Secret's
    assert type(registry).__name__ == "DistributionRegistry"
    assert base.auth == StaticCredentials("process", "secret")


def test_the_local_store_takes_no_credentials(tmp_path: Path) -> None:
    stores = _stores(tmp_path)  # store.backend=local: gs:// and s3:// are directories too
    made, _ = clients_for({}, "s3://b/m/1/", stores=stores, oci=OciClients(), where=WHERE)
    assert made is stores


def _stores(tmp_path: Path, **cloud: Any) -> Stores:
    local = LocalObjectStore(tmp_path / "store")
    factories = {"file": lambda: local, "gs": lambda: local, "s3": lambda: local}
    factories |= {scheme: (lambda s=store: s) for scheme, store in cloud.items()}
    return Stores(factories, local_root=tmp_path / "store")


# --- the handler ------------------------------------------------------------------------


def _secret_world(tmp_path: Path, secrets: Any) -> World:
    return World(tmp_path, secrets=secrets)


def _delete(cleanup: Function, namespace: str = "ml", **source: Any) -> list[Any]:
    """A Delete of the Model `bert` in `namespace` with this spec.source."""
    spec = {"deletionPolicy": "Delete", "source": source}
    data = ModelDeleted(name="bert", namespace=namespace, spec=spec)
    event = CanonicalEvent(
        id=f"d-{namespace}", source="t", type=data.TYPE, data=data, time=T0 + timedelta(days=1)
    )
    return [r.data for r in cleanup.handle(event)]


def test_the_secret_is_read_in_the_models_namespace_only(tmp_path: Path) -> None:
    secrets = InMemorySecrets({("ml", "creds"): {}, ("other", "creds"): {}})
    world = _secret_world(tmp_path, secrets)
    uri = world.version("bert", "1", "bert/1")
    # a namespace in the reference is not the Model's: only the name is taken from the spec
    ref = {"name": "creds", "namespace": "other"}
    (reply,) = _delete(world.cleanup, s3={"uri": uri}, secretRef=ref)
    assert (
        reply.policy == "Delete"
        and secrets.reads == [("ml", "creds")]
        and world.left("bert/1") == []
    )


@pytest.mark.parametrize(
    ("secrets", "error", "status"),
    [
        (InMemorySecrets(), NotFound, 404),
        (InMemorySecrets({("ml", "creds"): {}}, granted=()), Forbidden, 403),
        (None, Unavailable, 503),
    ],
)
def test_a_secret_that_cannot_be_read_stops_the_deletion_naming_it(
    tmp_path: Path, secrets: Any, error: type[Exception], status: int
) -> None:
    world = _secret_world(tmp_path, secrets)
    uri = world.version("bert", "1", "bert/1")
    with pytest.raises(error, match="creds") as refused:
        _delete(world.cleanup, s3={"uri": uri}, secretRef={"name": "creds"})
    assert status_of(refused.value) == status  # type: ignore[arg-type]
    if secrets is None:
        assert "MODELHOOKS_CLEANUP_KUBECONFIG" in str(refused.value)
    assert world.left("bert/1") == sorted(FILES)


def test_retain_reads_no_secret(tmp_path: Path) -> None:
    secrets = InMemorySecrets()
    world = _secret_world(tmp_path, secrets)
    uri = world.version("bert", "1", "bert/1")
    (reply,) = world.delete(
        "bert", deletionPolicy="Retain", source={"s3": {"uri": uri}, "secretRef": {"name": "creds"}}
    )
    assert reply.deleted == [] and secrets.reads == []


@pytest.mark.parametrize("ref", [{"name": "../x"}, {"name": ""}, {}, "creds", {"name": 3}])
def test_a_malformed_secret_ref_is_refused(tmp_path: Path, ref: Any) -> None:
    secrets = InMemorySecrets()
    world = _secret_world(tmp_path, secrets)
    uri = world.version("bert", "1", "bert/1")
    with pytest.raises(BadRequest, match=r"spec\.source\.secretRef\.name"):
        _delete(world.cleanup, s3={"uri": uri}, secretRef=ref)
    assert secrets.reads == [] and world.left("bert/1") == sorted(FILES)


def test_a_secret_without_the_sources_keys_is_a_400_before_anything_goes(
    tmp_path: Path,
) -> None:
    secrets = InMemorySecrets({("ml", "creds"): {"password": b"x"}})
    env = {
        "MODELHOOKS_HOME": str(tmp_path),
        "MODELHOOKS_STORE_BACKEND": "cloud",
        "MODELHOOKS_STORE_S3_ENDPOINT_URL": "http://127.0.0.1:9",  # never reached
    }
    cleanup = build(load_settings(env=env), secrets=secrets).function("cleanup")
    with pytest.raises(BadRequest, match="expected AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        _delete(cleanup, s3={"uri": "s3://models/bert/1/"}, secretRef={"name": "creds"})

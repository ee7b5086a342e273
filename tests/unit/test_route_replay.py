"""A signature (HMAC, a bearer token, a Pub/Sub push's OIDC token) covers a delivery's
body, never the path it is posted to: trust bound to a route holds only when each route
bound to a tenant has a credential of its own. A delivery signed for team-a's route,
replayed (within the signature's window) to team-b's, was taken as team-b's."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.core.errors import ConfigError
from modelhooks.delivery.http import create_app
from modelhooks.events import samples

pytestmark = pytest.mark.usefixtures("sample_models")


def signed(secret: str, body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {
        "X-Modelhooks-Signature": f"sha256={mac}",
        "X-Modelhooks-Timestamp": ts,
        "Content-Type": "application/cloudevents+json",
    }


def event() -> bytes:
    doc = samples.load("canonical-artifact-pushed")
    assert isinstance(doc, dict)
    data = {k: v for k, v in doc["data"].items() if k != "namespace"}
    return json.dumps({**doc, "data": data}).encode()


TENANTS = {
    "MODELHOOKS_INGRESS_ROUTE_KINDS": "/team-a=canonical;/team-b=canonical",
    "MODELHOOKS_INGRESS_ROUTE_NAMESPACES": "/team-a=team-a;/team-b=team-b",
}


@pytest.mark.parametrize(
    "auth",
    [
        {"MODELHOOKS_INGRESS_AUTH": "hmac:secret=s3cret"},  # both routes fall to the default
        {  # each its own route, the same credential
            "MODELHOOKS_INGRESS_AUTH": "hmac:secret=other",
            "MODELHOOKS_INGRESS_ROUTE_AUTH": "/team-a=hmac:secret=s3cret;/team-b=hmac:secret=s3cret",
        },
    ],
)
def test_tenant_routes_sharing_a_credential_are_refused_at_start(
    home: Path, monkeypatch: pytest.MonkeyPatch, auth: dict[str, str]
) -> None:
    """team-a's signed delivery replayed to /team-b was registered as team-b's (200) on the
    old code; a configuration where that can happen now stops start-up, naming the routes."""
    for name, value in {**TENANTS, **auth}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="MODELHOOKS_INGRESS_ROUTE_NAMESPACES") as raised:
        build().broker()
    assert "/team-a (team-a)" in str(raised.value) and "/team-b (team-b)" in str(raised.value)


@pytest.mark.parametrize(
    "routes",
    [
        "/team-a=hmac:secret=env:SECRET_A;/team-b=hmac:secret=env:SECRET_B",
        "/team-a=hmac:secret=env:SECRET_A;/team-b=hmac:secret=env:OLD,secret=env:SECRET_B",
        "/team-a=bearer:token=env:SECRET_A;/team-b=bearer:token=file:{file}",
        "/team-a=hmac:secret=env:SECRET_A;/team-b=bearer:token=s3cret-shared",
        "/team-a=oidc:aud=https://h.example,email=*;"
        "/team-b=oidc:aud=https://h.example,email=push@p.iam.gserviceaccount.com",
    ],
)
def test_routes_whose_references_resolve_to_one_secret_are_refused_without_showing_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, routes: str, tmp_path: Path
) -> None:
    """Compared as resolved, not as spec text: env:SECRET_A and env:SECRET_B (or a file)
    holding the same secret are one credential, as are an OIDC route taking any email and
    one taking a single email for the same audience. The refusal names the routes, never
    the secret."""
    (tmp_path / "token").write_text("s3cret-shared\n")
    env = {**TENANTS, "SECRET_A": "s3cret-shared", "SECRET_B": "s3cret-shared", "OLD": "old",
           "MODELHOOKS_INGRESS_AUTH": "hmac:secret=ops",
           "MODELHOOKS_INGRESS_ROUTE_AUTH": routes.format(file=tmp_path / "token")}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="MODELHOOKS_INGRESS_ROUTE_NAMESPACES") as raised:
        build().broker()
    assert "/team-a (team-a)" in str(raised.value) and "/team-b (team-b)" in str(raised.value)
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    "routes",
    [
        "/team-a=hmac:secret=env:SECRET_A;/team-b=hmac:secret=env:SECRET_B",
        "/team-a=oidc:aud=https://h.example/a,email=*;/team-b=oidc:aud=https://h.example/b,email=*",
        "/team-a=oidc:aud=https://h.example,email=a@p.iam.gserviceaccount.com;"
        "/team-b=oidc:aud=https://h.example,email=b@p.iam.gserviceaccount.com",
    ],
)
def test_routes_with_credentials_of_their_own_start(
    home: Path, monkeypatch: pytest.MonkeyPatch, routes: str
) -> None:
    env = {**TENANTS, "SECRET_A": "a-secret", "SECRET_B": "b-secret",
           "MODELHOOKS_INGRESS_AUTH": "hmac:secret=ops", "MODELHOOKS_INGRESS_ROUTE_AUTH": routes}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    build().broker()


def test_a_delivery_signed_for_one_tenants_route_is_not_taken_on_anothers(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each tenant's route its own secret: the replay is 401, nothing registered; its own
    route takes it as team-a's."""
    for name, value in {
        **TENANTS,
        "MODELHOOKS_INGRESS_AUTH": "hmac:secret=ops",
        "MODELHOOKS_INGRESS_ROUTE_AUTH": "/team-a=hmac:secret=a;/team-b=hmac:secret=b",
    }.items():
        monkeypatch.setenv(name, value)
    client = create_app(build().broker()).test_client()
    body = event()
    assert client.post("/team-b", data=body, headers=signed("a", body)).status_code == 401
    registry = SqliteModelRegistry(home / "registry.db")
    assert registry.get_model("sentiment") is None
    answer = client.post("/team-a", data=body, headers=signed("a", body))
    assert answer.status_code == 200, answer.get_json()
    model = registry.get_model("sentiment")
    assert model is not None and model.custom_properties["namespace"] == "team-a"

from __future__ import annotations

import pytest

from modelhooks.core.errors import ConfigError, Unauthenticated
from modelhooks.delivery.routes import RouteAuth

AUTH = {"Authorization": "Bearer minio-token"}


def test_a_route_overrides_the_default() -> None:
    auth = RouteAuth.from_settings(
        "bearer:token=default-token", "/minio-events=bearer:token=minio-token"
    )
    assert auth.check("/minio-events", AUTH, b"").scheme == "bearer"
    assert auth.check("/minio-events/", AUTH, b"").scheme == "bearer"
    with pytest.raises(Unauthenticated):
        auth.check("/", AUTH, b"")  # the default wants the other token
    assert auth.check("/", {"Authorization": "Bearer default-token"}, b"").scheme == "bearer"


def test_a_route_guards_the_paths_below_it() -> None:
    auth = RouteAuth.from_settings(
        "bearer:token=d", "/hooks=bearer:token=t;/hooks/mlflow=bearer:token=m"
    )
    bearer = lambda token: {"Authorization": f"Bearer {token}"}  # noqa: E731
    assert auth.check("/hooks/x/y", bearer("t"), b"").scheme == "bearer"
    assert auth.check("/hooks/mlflow/run", bearer("m"), b"").scheme == "bearer"  # longest wins
    with pytest.raises(Unauthenticated):
        auth.check("/hooks/x", bearer("d"), b"")
    with pytest.raises(Unauthenticated):
        auth.check("/hooksx", bearer("t"), b"")  # a sibling, not a child
    assert auth.check("/functions/register", bearer("d"), b"").scheme == "bearer"


def test_routes_with_an_open_default_are_refused() -> None:
    with pytest.raises(ConfigError, match="leaves every other path open"):
        RouteAuth.from_settings("none", "/hooks=bearer:token=t")


@pytest.mark.parametrize("bad", ["minio=bearer:token=x", "/x=", "/x"])
def test_bad_route_specs_name_the_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match="MODELHOOKS_INGRESS_ROUTE_AUTH"):
        RouteAuth.from_settings("none", bad)


def test_an_oidc_route_without_email_is_refused_naming_it() -> None:
    """README's `/pubsub=oidc:aud=…` accepted a token any Google account mints for that
    audience: refused at start-up now, naming the route; email=* says "any" on purpose."""
    with pytest.raises(ConfigError) as caught:
        RouteAuth.from_settings("bearer:token=d", "/pubsub=oidc:aud=https://hooks.example.com")
    assert caught.value.message.startswith("MODELHOOKS_INGRESS_ROUTE_AUTH (/pubsub): ")
    assert "needs email=" in caught.value.message
    with pytest.raises(ConfigError, match=r"^MODELHOOKS_INGRESS_AUTH: .*needs email="):
        RouteAuth.from_settings("oidc:aud=https://hooks.example.com", "")
    named = "/pubsub=oidc:aud=https://h.example,email=push@p.iam.gserviceaccount.com"
    assert RouteAuth.from_settings("bearer:token=d", named).routes
    assert RouteAuth.from_settings("bearer:token=d", "/pubsub=oidc:aud=https://h,email=*").routes
